#!/usr/bin/python3
"""PyTorch peer of bench_train_step: times nanochat training steps (forward + backward +
optimizer) of tools/reference/nanochat_ref.py on random tokens, in float32 (--dtype bfloat16:
under torch.autocast as nanochat runs on a GPU).

Dev-time only: Debian's python3-torch 1.13 at /usr/bin/python3, or torch 2.x from PyPI in the
venv of bench/peer/setup_torch2.sh (--attention sdpa, --compile). Normally started by
bench/peer/run_peer.py once per (config, threads, variant), with the variant's environment
(allocator, BLAS library and kernels, thread settings) already set; this script only reports
what it finds loaded. Prints one JSON object on stdout (or a readable line without --json).

    /usr/bin/python3 bench/peer/torch_step.py --depth 4 --head-dim 128 --seq 512 --batch 8 \
        --window SSSL --threads 1 --steps 3 --json

Model: nanochat_ref.forward (nanochat's GPT, docs/nanochat.md 1: rotary, QK-norm, relu^2 MLP,
value embeddings, smear, backout, softcap 15, sliding windows; attention as an explicit masked
softmax on torch 1.13, which has no SDPA with windows; F.scaled_dot_product_attention on torch
>= 2.5, as nanochat runs on CPU). Weights: nanochat_ref.init_params.
Optimizer (--optim): 'muon' (default) = nanochat_ref.MuonAdamW, nanochat's MuonAdamW math
(docs/nanochat.md 2) written with plain torch ops; 'adamw' = torch.optim.AdamW over all parameters
(lr 1e-3, betas (0.8, 0.95)), the stand-in the perf-baseline study used.
Gradients are reset with set_to_none (nanochat calls model.zero_grad(set_to_none=True)).
"""

import argparse
import contextlib
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


def inductor_vec_isa():
    """The vector ISA torch.compile's CPU code generator found usable, or None where it has none
    (torch < 2.x). 'INVALID_VEC_ISA' means its generated kernels are scalar: its check compiles and
    loads a small test library, which fails where another torch's libtorch_cpu.so shadows the
    wheel's (bench/peer/README.md, Caveats)."""
    try:
        from torch._inductor import cpu_vec_isa
    except ImportError:
        return None
    return str(cpu_vec_isa.pick_vec_isa()) or "INVALID_VEC_ISA"


def flops_per_token(cfg):
    """nanochat estimate_flops (docs/nanochat.md 1.9): 6 * matmul params + 12 * H * D * min(window, T) per
    layer; matmul params = every 2D weight except the embedding tables (wte, value_embeds)."""
    n = 0
    for name, shape in ref.param_shapes(cfg):
        if len(shape) == 2 and name != "transformer.wte.weight" and not name.startswith("value_embeds."):
            n += shape[0] * shape[1]
    attn = sum(12 * cfg.n_head * cfg.head_dim * min(w, cfg.sequence_len) for w in ref.window_sizes(cfg))
    return 6 * n + attn


def torch_at_least(major, minor):
    v = [int(x) for x in torch.__version__.split("+")[0].split(".")[:2]]
    return v >= [major, minor]


def attention_core(name):
    """The attention kernel: 'masked' (explicit masked softmax, any torch) or 'sdpa'
    (F.scaled_dot_product_attention, nanochat's CPU path; torch >= 2.5); 'auto' picks sdpa where
    it exists."""
    if name == "auto":
        name = "sdpa" if torch_at_least(2, 5) else "masked"
    if name == "sdpa" and not torch_at_least(2, 5):
        sys.exit(f"torch_step: --attention sdpa needs torch >= 2.5 (this is {torch.__version__})")
    return name, ref.attention_sdpa if name == "sdpa" else ref.attention_masked


def compiled_optimizer(opt):
    """Swaps opt's update kernels for torch.compile'd versions of the same functions, as nanochat
    compiles its fused AdamW/Muon steps. The AdamW scalars go in as 0-D tensors (the bias
    corrections change every step; as Python floats each step would recompile)."""
    adamw_c = torch.compile(ref.adamw_update, dynamic=False)
    muon_c = torch.compile(ref.muon_update, dynamic=False)

    def t(x):
        return torch.tensor(x, dtype=torch.float32)

    def adamw(p, grad, m, v, lr, wd, b1, b2, bc1, bc2, eps):
        adamw_c(p, grad, m, v, t(lr), t(wd), t(b1), t(b2), t(bc1), t(bc2), t(eps))

    opt.adamw_update = adamw
    opt.muon_update = muon_c
    return opt


def vm_hwm_bytes():
    """Peak RSS of this process (VmHWM) since start or since the last reset_hwm()."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def reset_hwm():
    """Resets VmHWM to the current RSS (Linux >= 4.0); False where not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def check(a):
    """Compares this peer's forward (attention kernel, compiled or not) and its gradients and
    3 optimizer steps against nanochat_ref's eager masked-softmax model and eager MuonAdamW, in
    float32 on a small config (d4-like: n_embd 256, 2 heads x 128, T 256 with window SSSL so the
    short window cuts). Prints the largest relative differences; returns 0 if all are within
    float32 noise."""
    cfg = ref.GPTConfig(sequence_len=256, vocab_size=4096, n_layer=4, n_head=2, n_kv_head=2,
                        n_embd=256, window_pattern="SSSL")
    name, core = attention_core(a.attention)
    g = torch.Generator().manual_seed(3)
    idx = torch.randint(0, cfg.vocab_size, (2, cfg.sequence_len), generator=g)
    tgt = torch.randint(0, cfg.vocab_size, (2, cfg.sequence_len), generator=g)

    def run(peer):
        P = ref.init_params(cfg, seed=1)
        for p in P.values():
            p.requires_grad_(True)
        opt = ref.MuonAdamW(P, model_dim=cfg.n_embd, weight_decay=0.2)
        fwd = ref.forward
        if peer:
            if a.compile:
                fwd = torch.compile(ref.forward, dynamic=False)
                compiled_optimizer(opt)
        kw = dict(core=core) if peer else {}
        logits = fwd(P, cfg, idx, **kw).detach().clone()
        losses, grads = [], None
        for _ in range(3):
            for p in P.values():
                p.grad = None
            loss = fwd(P, cfg, idx, tgt, **kw)
            loss.backward()
            if grads is None:
                grads = {n: p.grad.clone() for n, p in P.items()}
            losses.append(loss.item())
            opt.step({n: p.grad for n, p in P.items()}, 1.0, 0.95, 0.1)
        return logits, losses, grads, {n: p.detach().clone() for n, p in P.items()}

    want, got = run(False), run(True)

    def rel(x, y):
        return ((x - y).abs().max() / y.abs().max().clamp_min(1e-30)).item()

    d_logits = rel(got[0], want[0])
    d_loss = max(abs(x - y) / abs(y) for x, y in zip(got[1], want[1]))
    d_grad = max(rel(got[2][n], want[2][n]) for n in want[2])
    # after 3 steps a few elements sit on a discontinuity that float32 noise flips (Muon's
    # cautious weight-decay mask g*p >= 0, the sign of a tiny first AdamW gradient; see
    # tools/reference/README.md "ambiguous"): count elements off by more than 1e-4 of the
    # tensor's largest value instead of taking the maximum
    off = sum(int(((got[3][n] - want[3][n]).abs() > 1e-4 * want[3][n].abs().max()).sum())
              for n in want[3])
    total = sum(t.numel() for t in want[3].values())
    d_param = off / total
    ok = d_logits < 1e-4 and d_loss < 1e-4 and d_grad < 1e-3 and d_param < 1e-3
    print(f"torch {torch.__version__}, attention {name}, compile {a.compile}: max rel diff vs "
          f"eager masked reference: logits {d_logits:.2e}, loss (3 steps) {d_loss:.2e}, "
          f"grads {d_grad:.2e}; params after 3 MuonAdamW steps: {off} of {total} elements "
          f"off by > 1e-4 of their tensor's max ({100 * d_param:.3f}%) -> "
          f"{'OK' if ok else 'MISMATCH'}")
    return 0 if ok else 1


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
    ap.add_argument("--attention", choices=["auto", "masked", "sdpa"], default="auto",
                    help="attention kernel: auto = sdpa on torch >= 2.5 (nanochat's CPU path), "
                         "else masked")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the forward (loss included) and the optimizer kernels "
                         "(torch 2.x; needs a C++ compiler and Python headers)")
    ap.add_argument("--check", action="store_true",
                    help="no benchmark: compare this peer (attention, --compile) against the eager "
                         "reference on a small config and exit 0 if it matches")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                    help="bfloat16: the forward and loss under torch.autocast('cpu', "
                         "dtype=torch.bfloat16) and Muon's Polar Express in bf16, as nanochat's "
                         "base_train runs them on a GPU (fp32 parameters and optimizer state)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    if a.compile and not hasattr(torch, "compile"):
        sys.exit(f"torch_step: --compile needs torch 2.x (this is {torch.__version__})")
    if a.check:
        return check(a)
    attn_name, core = attention_core(a.attention)
    C = -(-a.depth * a.aspect_ratio // a.head_dim) * a.head_dim
    H = C // a.head_dim
    cfg = ref.GPTConfig(sequence_len=a.seq, vocab_size=a.vocab, n_layer=a.depth, n_head=H,
                        n_kv_head=H, n_embd=C, window_pattern=a.window)
    P = ref.init_params(cfg, seed=0)
    for p in P.values():
        p.requires_grad_(True)
    fwd = ref.forward
    if a.optim == "muon":
        opt = ref.MuonAdamW(P, model_dim=C, weight_decay=0.2)
        if a.dtype == "bfloat16":
            opt.compute_dtype = torch.bfloat16  # Polar Express in bf16, as nanochat on a GPU
        if a.compile:
            compiled_optimizer(opt)
    else:
        opt = torch.optim.AdamW(list(P.values()), lr=1e-3, betas=(0.8, 0.95))
    if a.compile:
        # nanochat: model = torch.compile(model, dynamic=False); the loss is part of its forward
        fwd = torch.compile(ref.forward, dynamic=False)
    def autocast():
        if a.dtype == "bfloat16":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

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
        with autocast():
            loss = fwd(P, cfg, idx, tgt, core=core)
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
    warm_hwm = vm_hwm_bytes()  # warm-up included (compilation, first touch)
    hwm_reset = reset_hwm()  # from here VmHWM is the timed steps' peak
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
               warmup=a.warmup, optim=a.optim, dtype=a.dtype,
               num_params=sum(p.numel() for p in P.values()), flops_per_token=fpt,
               step_s=step_s, fwd_s=med([r[1] for r in rows]), bwd_s=med([r[2] for r in rows]),
               opt_s=med([r[3] for r in rows]), step_cpu_s=med([r[5] for r in rows]),
               page_faults_per_step=med([r[6] for r in rows]),
               tok_s=tok_s, gflops=tok_s * fpt / 1e9,
               loss=rows[-1][0], step_times=[r[4] for r in rows], warmup_times=warm,
               peak_rss_bytes=max(warm_hwm, vm_hwm_bytes()),
               step_peak_rss_bytes=vm_hwm_bytes() if hwm_reset else None,
               attention=attn_name, compiled=a.compile,
               inductor_vec_isa=inductor_vec_isa() if a.compile else None,
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
