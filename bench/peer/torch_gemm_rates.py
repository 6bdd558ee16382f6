#!/usr/bin/python3
"""The matrix products of one training step, alone, in the PyTorch that the peer benchmark runs:
GFLOP/s per product shape in float32 and bfloat16, so that a ratio in bench/peer's table can be
traced to the GEMM library the wheel brings on this CPU (its bundled MKL / oneDNN pick their
kernels by CPU vendor and family) rather than to the model code.

Dev-time only. Run it with the interpreter of bench/peer/setup_torch2.sh:

    ~/.cache/nanochat-peer/torch-2.9.1/bin/python bench/peer/torch_gemm_rates.py \
        --depth 8 --vocab 8192 --threads 1

Shapes (B*T = N rows; C = n_embd as torch_step.py computes it; V = vocab), forward only, one
product each, as nanochat's GPT issues them with F.linear (x @ W^T, W stored (out, in)):
  qkv       (N, C) x (C, C), three of them per layer (c_q, c_k, c_v)
  attn proj (N, C) x (C, C)
  mlp fc    (N, C) x (C, 4C)
  mlp proj  (N, 4C) x (4C, C)
  lm_head   (N, C) x (C, V)
FLOPs = 2 * N * in * out per product. bfloat16 runs both operands in bf16 (as under autocast).
The figure is the median of --reps timed calls after --warmup untimed ones; compare it with
`build/bench/bench_train_step --config <name> --threads <n>`'s peak and its "the same GEMM calls
alone" column.
"""

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F


def shapes(depth, aspect, head_dim, vocab):
    C = -(-depth * aspect // head_dim) * head_dim
    return C, [("qkv", C, C), ("attn proj", C, C), ("mlp fc", C, 4 * C), ("mlp proj", 4 * C, C),
               ("lm_head", C, vocab)]


def rate(n, k, m, dtype, reps, warmup):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, k, generator=g).to(dtype)
    w = torch.randn(m, k, generator=g).to(dtype)
    for _ in range(warmup):
        F.linear(x, w)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        F.linear(x, w)
        times.append(time.perf_counter() - t0)
    s = statistics.median(times)
    return 2.0 * n * k * m / s / 1e9, s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--aspect-ratio", type=int, default=64)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--seq", type=int, default=512, help="T")
    ap.add_argument("--batch", type=int, default=8, help="B")
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    n = a.batch * a.seq
    C, prods = shapes(a.depth, a.aspect_ratio, a.head_dim, a.vocab)
    dtypes = [d.strip() for d in a.dtypes.split(",") if d.strip()]
    for d in dtypes:
        if d not in ("float32", "bfloat16"):
            raise SystemExit(f"torch_gemm_rates: --dtypes takes float32 and/or bfloat16, not '{d}'")
    rows = []
    for name, k, m in prods:
        for d in dtypes:
            gf, s = rate(n, k, m, getattr(torch, d), a.reps, a.warmup)
            rows.append({"product": name, "n": n, "k": k, "m": m, "dtype": d, "gflops": gf,
                         "seconds": s})
    if a.json:
        print(json.dumps({"torch": torch.__version__, "threads": a.threads, "n_embd": C,
                          "capability": torch.backends.cpu.get_cpu_capability(), "rows": rows}))
        return
    print(f"torch {torch.__version__}, {a.threads} thread(s), ATen capability "
          f"{torch.backends.cpu.get_cpu_capability()}, N = {n}, C = {C}, V = {a.vocab}")
    print(f"{'product':10s} {'(N, K) x (K, M)':>22s} " + " ".join(f"{d + ' GFLOP/s':>17s}" for d in dtypes))
    for name, k, m in prods:
        cells = [r for r in rows if r["product"] == name]
        print(f"{name:10s} {f'({n}, {k}) x ({k}, {m})':>22s} " +
              " ".join(f"{r['gflops']:17.1f}" for r in cells))


if __name__ == "__main__":
    main()
