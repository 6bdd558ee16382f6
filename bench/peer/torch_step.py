#!/usr/bin/python3
"""PyTorch peer of bench_train_step: times nanochat training steps (forward + backward +
optimizer) of tools/reference/nanochat_ref.py on random tokens, in float32.

Dev-time only (Debian's python3-torch 1.13 at /usr/bin/python3). Normally started by
bench/peer/run_peer.py once per (config, threads, variant), with the variant's environment
(allocator, BLAS library and kernels, thread settings) already set; this script only reports
what it finds loaded. Prints one JSON object on stdout (or a readable line without --json).

    /usr/bin/python3 bench/peer/torch_step.py --depth 4 --head-dim 128 --seq 512 --batch 8 \
        --window SSSL --threads 1 --steps 3 --json

Model: nanochat_ref.forward (nanochat's GPT, docs/nanochat.md 1: rotary, QK-norm, relu^2 MLP,
value embeddings, smear, backout, softcap 15, sliding windows; attention as an explicit masked
softmax because torch 1.13 has no flash/SDPA with windows). Weights: nanochat_ref.init_params.
Optimizer (--optim): 'muon' (default) = nanochat_ref.MuonAdamW, nanochat's MuonAdamW math
(docs/nanochat.md 2) written with plain torch ops; 'adamw' = torch.optim.AdamW over all parameters
(lr 1e-3, betas (0.8, 0.95)), the stand-in the perf-baseline study used.
Gradients are reset with set_to_none (nanochat calls model.zero_grad(set_to_none=True)).
"""

import argparse
import ctypes
import json
import math
import os
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "reference"))

import torch  # noqa: E402

import nanochat_ref as ref  # noqa: E402


def loaded_libraries():
    """Paths of the shared objects mapped into this process."""
    libs = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and ".so" in parts[-1] and parts[-1] not in libs:
                libs.append(parts[-1])
    return libs


def blas_info(libs):
    """Which BLAS torch runs on: library path, and OpenBLAS's core name / build config."""
    info = {"blas_lib": None, "openblas_core": None, "openblas_config": None}
    for lib in libs:
        base = os.path.basename(lib)
        if base.startswith("libopenblas") or base.startswith("libblas") or "mkl" in base:
            info["blas_lib"] = os.path.realpath(lib)
            if "openblas" in base:
                break
    if info["blas_lib"] and "openblas" in info["blas_lib"]:
        try:
            so = ctypes.CDLL(info["blas_lib"])
            so.openblas_get_corename.restype = ctypes.c_char_p
            so.openblas_get_config.restype = ctypes.c_char_p
            info["openblas_core"] = so.openblas_get_corename().decode()
            info["openblas_config"] = so.openblas_get_config().decode()
            so.openblas_get_num_threads.restype = ctypes.c_int
            info["openblas_threads"] = so.openblas_get_num_threads()
            so.openblas_get_parallel.restype = ctypes.c_int
            info["openblas_parallel"] = {0: "sequential", 1: "pthread", 2: "openmp"}.get(
                so.openblas_get_parallel(), "?")
        except (OSError, AttributeError) as e:  # not OpenBLAS after all
            info["openblas_error"] = str(e)
    return info


def allocator(libs):
    for lib in libs:
        base = os.path.basename(lib)
        if "jemalloc" in base or "tcmalloc" in base or "mimalloc" in base:
            return base
    return "glibc malloc"


def cpu_capability():
    """ATen's vectorised-kernel level (honours ATEN_CPU_CAPABILITY)."""
    for line in torch.__config__.show().splitlines():
        if "CPU capability usage" in line:
            return line.split(":", 1)[1].strip()
    return "?"


def flops_per_token(cfg):
    """nanochat estimate_flops (docs/nanochat.md 1.9): 6 * matmul params + 12 * H * D * min(window, T) per
    layer; matmul params = every 2D weight except the embedding tables (wte, value_embeds)."""
    n = 0
    for name, shape in ref.param_shapes(cfg):
        if len(shape) == 2 and name != "transformer.wte.weight" and not name.startswith("value_embeds."):
            n += shape[0] * shape[1]
    attn = sum(12 * cfg.n_head * cfg.head_dim * min(w, cfg.sequence_len) for w in ref.window_sizes(cfg))
    return 6 * n + attn


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--aspect-ratio", type=int, default=64)
    ap.add_argument("--seq", type=int, default=512, help="T (sequence length)")
    ap.add_argument("--batch", type=int, default=8, help="B (rows per step)")
    ap.add_argument("--window", default="SSSL")
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3, help="timed steps (median reported)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps first (page faults)")
    ap.add_argument("--optim", choices=["muon", "adamw"], default="muon")
    ap.add_argument("--config-name", default="", help="label copied into the output")
    ap.add_argument("--variant", default="", help="label copied into the output")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    C = -(-a.depth * a.aspect_ratio // a.head_dim) * a.head_dim
    H = C // a.head_dim
    cfg = ref.GPTConfig(sequence_len=a.seq, vocab_size=a.vocab, n_layer=a.depth, n_head=H,
                        n_kv_head=H, n_embd=C, window_pattern=a.window)
    P = ref.init_params(cfg, seed=0)
    for p in P.values():
        p.requires_grad_(True)
    if a.optim == "muon":
        opt = ref.MuonAdamW(P, model_dim=C, weight_decay=0.2)
    else:
        opt = torch.optim.AdamW(list(P.values()), lr=1e-3, betas=(0.8, 0.95))
    g = torch.Generator().manual_seed(7)
    idx = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g)
    tgt = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g)

    def faults():
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return ru.ru_minflt + ru.ru_majflt

    def step():
        f0 = faults()
        c0 = time.process_time()
        t0 = time.perf_counter()
        for p in P.values():
            p.grad = None
        loss = ref.forward(P, cfg, idx, tgt)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        if a.optim == "muon":
            opt.step({n: p.grad for n, p in P.items()}, 1.0, 0.95, 0.1)
        else:
            opt.step()
        t3 = time.perf_counter()
        lv = loss.item()
        return lv, t1 - t0, t2 - t1, t3 - t2, t3 - t0, time.process_time() - c0, faults() - f0

    warm, rows = [], []
    # one progress line per step on stderr: a driver that times the run out still sees how far
    # it got (same format as bench_train_step --json)
    for i in range(a.warmup):
        warm.append(step()[4])
        print(f"warmup {i + 1}/{a.warmup}: {warm[-1]:.3f} s", file=sys.stderr, flush=True)
    for i in range(a.steps):
        rows.append(step())
        print(f"step {i + 1}/{a.steps}: {rows[-1][4]:.3f} s", file=sys.stderr, flush=True)

    def med(v):
        v = sorted(v)
        return v[len(v) // 2]

    step_s = med([r[4] for r in rows])
    fpt = flops_per_token(cfg)
    tok_s = a.batch * a.seq / step_s
    libs = loaded_libraries()
    out = dict(side="torch", config=a.config_name, variant=a.variant, depth=a.depth,
               head_dim=a.head_dim, n_embd=C, T=a.seq, B=a.batch, window=a.window, vocab=a.vocab,
               threads=a.threads, torch_threads=torch.get_num_threads(), steps=a.steps,
               warmup=a.warmup, optim=a.optim,
               num_params=sum(p.numel() for p in P.values()), flops_per_token=fpt,
               step_s=step_s, fwd_s=med([r[1] for r in rows]), bwd_s=med([r[2] for r in rows]),
               opt_s=med([r[3] for r in rows]), step_cpu_s=med([r[5] for r in rows]),
               page_faults_per_step=med([r[6] for r in rows]),
               tok_s=tok_s, gflops=tok_s * fpt / 1e9,
               loss=rows[-1][0], step_times=[r[4] for r in rows], warmup_times=warm,
               peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
               torch_version=torch.__version__, cpu_capability=cpu_capability(),
               allocator=allocator(libs), parallel_backend="OpenMP" if "OpenMP" in
               torch.__config__.parallel_info() else "?")
    out.update(blas_info(libs))
    out["env"] = {k: os.environ.get(k) for k in (
        "OPENBLAS_CORETYPE", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
        "ATEN_CPU_CAPABILITY", "LD_PRELOAD", "LD_LIBRARY_PATH", "MALLOC_CONF")}
    if a.json:
        print(json.dumps(out), flush=True)
    else:
        print(f"torch {a.config_name or 'd%d' % a.depth} thr {a.threads}: {tok_s:.0f} tok/s, step "
              f"{step_s:.3f} s (fwd {out['fwd_s']:.3f} bwd {out['bwd_s']:.3f} opt "
              f"{out['opt_s']:.3f}), {out['gflops']:.1f} GFLOP/s, peak RSS "
              f"{out['peak_rss_bytes'] / 1e9:.2f} GB, BLAS {out['blas_lib']} "
              f"({out['openblas_core']}), {out['allocator']}, capability {out['cpu_capability']}")
    if not all(math.isfinite(r[0]) for r in rows):
        print("torch_step: non-finite loss", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
