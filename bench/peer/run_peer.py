#!/usr/bin/python3
"""Peer benchmark: our training step (bench_train_step) against the PyTorch reference model
(torch_step.py) on identical configs and thread counts, in one invocation; prints a markdown
comparison table to stdout and writes it (plus the raw JSON lines and per-run logs) to a results
folder. Started by bench/peer/run_peer.sh; see bench/peer/README.md.

Every measurement is its own process: one per (config, threads) for ours, one per (config,
threads, variant) for PyTorch, so the peak RSS (wait4's ru_maxrss) is that run's alone. Each
process is watched: killed when its RSS passes --mem-limit-gb or the machine's MemAvailable falls
below --min-avail-gb (row reads "OOM (> X GB)"), or when it runs past --timeout (row reads
"timeout"; the steps finished by then are still reported). Only the Python standard library.
"""

import argparse
import datetime
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
JEMALLOC_CONF = "dirty_decay_ms:-1,muzzy_decay_ms:-1,retain:true"
OPENBLAS_OPENMP_DIR = "/usr/lib/x86_64-linux-gnu/openblas-openmp"
# variables a variant may set; removed from the inherited environment first so that a preset
# value (e.g. OPENBLAS_CORETYPE on some machines) never leaks into a run
TUNING_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "OPENBLAS_VERBOSE", "OMP_NUM_THREADS",
               "MKL_NUM_THREADS", "GOTO_NUM_THREADS", "ATEN_CPU_CAPABILITY", "LD_PRELOAD",
               "LD_LIBRARY_PATH", "MALLOC_CONF", "OMP_PROC_BIND", "OMP_PLACES", "GOMP_SPINCOUNT",
               "OMP_WAIT_POLICY", "KMP_AFFINITY", "BLIS_ARCH_TYPE")
VARIANTS = ("installed", "jemalloc", "tuned", "torch2-eager", "torch2-compile")
TORCH2_VARIANTS = ("torch2-eager", "torch2-compile")
# a row's config name is the bench config's plus this (d4, d4-bf16)
DTYPE_SUFFIX = {"float32": "", "bfloat16": "-bf16"}


def base_config(name):
    """(bench_train_step's config name, dtype) of a row's config name."""
    for dtype, suffix in DTYPE_SUFFIX.items():
        if suffix and name.endswith(suffix):
            return name[: -len(suffix)], dtype
    return name, "float32"


def dtype_configs(configs, names):
    """configs (bench_train_step --list-configs, by name) extended by the rows' names: a
    <config>-bf16 row is its config with dtype bfloat16."""
    out = {}
    for name in names:
        base, dtype = base_config(name)
        out[name] = dict(configs[base], config=name, dtype=dtype)
    return out
# the torch 2.x virtual environment made by bench/peer/setup_torch2.sh (outside the repository)
TORCH2_PYTHON = os.environ.get("NANOCHAT_PEER_TORCH2_PYTHON") or os.path.join(
    os.path.expanduser("~"), ".cache", "nanochat-peer", "torch-2.9.1", "bin", "python")
PAGE = os.sysconf("SC_PAGE_SIZE")
HZ = os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------------------------------------
# machine state

def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def cpu_has(flag):
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return flag in line.split()
    except OSError:
        pass
    return False


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def busy_seconds():
    """Busy CPU seconds of the whole machine so far (/proc/stat, all but idle and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    total = sum(v[:8])  # user nice system idle iowait irq softirq steal (guest is in user)
    return (total - v[3] - v[4]) / HZ


def mem_available_gb():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024 / 1e9
    return float("inf")


def wait_quiet(max_wait, threshold=0.1, window=2.0):
    """Waits (up to max_wait s) for a window in which other processes use < threshold cores.
    Returns (waited seconds, cores used in the last window)."""
    t0 = time.monotonic()
    while True:
        b0 = busy_seconds()
        time.sleep(window)
        used = (busy_seconds() - b0) / window
        if used < threshold or time.monotonic() - t0 >= max_wait:
            return time.monotonic() - t0, used


def rss_bytes(pid):
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def git_rev():
    try:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return rev + (" (+ uncommitted changes)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "?"


# ------------------------------------------------------------------------------------------------
# one watched process

def run_watched(cmd, env, log_base, timeout, mem_limit_gb, min_avail_gb):
    """Runs cmd in its own process group with stdout/stderr to log_base.{out,err}; polls RSS.
    Returns dict(status='ok'|'oom'|'lowmem'|'timeout'|'failed', rc, wall, cpu, maxrss, other,
    load1, stdout, stderr, note)."""
    load1 = loadavg()[0]
    busy0 = busy_seconds()
    t0 = time.monotonic()
    with open(log_base + ".out", "w") as fo, open(log_base + ".err", "w") as fe:
        fe.write("$ " + " ".join(cmd) + "\n")
        fe.flush()
        p = subprocess.Popen(cmd, env=env, stdout=fo, stderr=fe, cwd=ROOT, start_new_session=True)
        status, note, seen_rss = None, "", 0
        while True:
            pid, wstatus, ru = os.wait4(p.pid, os.WNOHANG)
            if pid == p.pid:
                break
            seen_rss = max(seen_rss, rss_bytes(p.pid))
            if status is None:
                if seen_rss > mem_limit_gb * 1e9:
                    status, note = "oom", f"killed at RSS {seen_rss / 1e9:.1f} GB > {mem_limit_gb:g} GB"
                elif mem_available_gb() < min_avail_gb:
                    status, note = "lowmem", (f"killed: MemAvailable < {min_avail_gb:g} GB at RSS "
                                              f"{seen_rss / 1e9:.1f} GB")
                elif time.monotonic() - t0 > timeout:
                    status, note = "timeout", f"> {timeout:g} s"
                if status is not None:
                    try:
                        os.killpg(p.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            time.sleep(0.2)
    wall = time.monotonic() - t0
    cpu = ru.ru_utime + ru.ru_stime
    other = max(0.0, (busy_seconds() - busy0 - cpu) / wall) if wall > 0 else 0.0
    rc = os.waitstatus_to_exitcode(wstatus)
    with open(log_base + ".out") as f:
        out = f.read()
    with open(log_base + ".err") as f:
        err = f.read()
    if status is None:
        status = "ok" if rc == 0 else "failed"
        if rc != 0:
            note = f"exit {rc}: " + (err.strip().splitlines() or [""])[-1][:200]
    return dict(status=status, rc=rc, wall=wall, cpu=cpu, maxrss=max(ru.ru_maxrss * 1024, seen_rss),
                other=other, load1=load1, stdout=out, stderr=err, note=note)


def last_json(text):
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                pass
    return None


def partial_steps(stderr):
    """Step times already printed ('step i/n: t s') by a run that was stopped."""
    return [float(m.group(1)) for m in re.finditer(r"^step \d+/\d+: ([0-9.]+) s$", stderr, re.M)]


# ------------------------------------------------------------------------------------------------
# environments

def base_env():
    env = {k: v for k, v in os.environ.items() if k not in TUNING_VARS}
    return env


def thread_env(env, n):
    env["OMP_NUM_THREADS"] = str(n)
    env["OPENBLAS_NUM_THREADS"] = str(n)
    env["MKL_NUM_THREADS"] = str(n)
    return env


def variant_env(variant, n, args):
    """Environment of a PyTorch variant at n threads, and a list of what was set and why."""
    env = thread_env(base_env(), n)
    notes = []
    if variant in ("jemalloc", "tuned") or (variant in TORCH2_VARIANTS and args.torch2_malloc == "jemalloc"):
        if os.path.exists(args.jemalloc):
            env["LD_PRELOAD"] = args.jemalloc
            env["MALLOC_CONF"] = JEMALLOC_CONF
        else:
            notes.append(f"jemalloc MISSING ({args.jemalloc}; apt-get install libjemalloc2)")
    if variant == "tuned":
        if args.coretype:
            env["OPENBLAS_CORETYPE"] = args.coretype
        env["ATEN_CPU_CAPABILITY"] = args.aten_capability or (
            "avx512" if cpu_has("avx512f") else "avx2" if cpu_has("avx2") else "default")
        if n > 1 and args.omp_blas:
            if os.path.isdir(OPENBLAS_OPENMP_DIR):
                env["LD_LIBRARY_PATH"] = OPENBLAS_OPENMP_DIR
            else:
                notes.append("OpenMP OpenBLAS MISSING (apt-get install libopenblas0-openmp); "
                             "pthread OpenBLAS used")
    return env, notes


# ------------------------------------------------------------------------------------------------

def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="run_peer.sh",
        description="Our training step vs the PyTorch reference (nanochat_ref.py) on identical "
                    "configs and thread counts.")
    ap.add_argument("--quick", action="store_true",
                    help="d4 only, 1 thread, 3 timed steps (a smoke run of a few minutes)")
    ap.add_argument("--configs", default="d4,d6,d6b32,d12",
                    help="comma list of bench_train_step configs (default: %(default)s)")
    ap.add_argument("--threads", default="1,2", help="comma list (default: %(default)s)")
    ap.add_argument("--dtypes", default="float32",
                    help="comma list of float32, bfloat16 (default: %(default)s). bfloat16: ours "
                         "--dtype bfloat16 (bf16 matrix products, fp32 master weights), PyTorch "
                         "under torch.autocast('cpu', dtype=torch.bfloat16) as nanochat's base_train "
                         "on a GPU; rows are named <config>-bf16 and their MFU is against the bf16 "
                         "peak that our run measures")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per run (median reported)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps first (page faults, JIT)")
    ap.add_argument("--variants", default=None,
                    help=f"PyTorch variants, comma list of {', '.join(VARIANTS)}, or 'none' "
                         "(default: installed,tuned, plus torch2-eager,torch2-compile when the "
                         "torch 2.x interpreter exists)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the sequence ours, variant 1, variant 2, ... this many times per "
                         "(config, threads), interleaved; the summary gives the mean of the rounds")
    ap.add_argument("--no-ours", action="store_true", help="skip our side (PyTorch rows only)")
    ap.add_argument("--torch-optim", choices=["muon", "adamw"], default="muon",
                    help="PyTorch optimizer: nanochat_ref's MuonAdamW (default) or torch AdamW")
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"),
                    help="CMake build dir holding bench/bench_train_step (default: build/)")
    ap.add_argument("--ours-bin", default=None, help="path of bench_train_step (overrides --build-dir)")
    ap.add_argument("--build", action="store_true",
                    help="cmake --build BUILD_DIR --target bench_train_step first")
    ap.add_argument("--python", default="/usr/bin/python3", help="interpreter with torch 1.13")
    ap.add_argument("--torch2-python", default=TORCH2_PYTHON,
                    help="interpreter with torch 2.x for the torch2-* variants, made by "
                         "bench/peer/setup_torch2.sh (default: $NANOCHAT_PEER_TORCH2_PYTHON or "
                         "%(default)s)")
    ap.add_argument("--torch2-malloc", choices=["jemalloc", "glibc"], default="jemalloc",
                    help="allocator of the torch2-* variants (default: %(default)s, as tuned)")
    ap.add_argument("--compile-warmup", type=int, default=2,
                    help="untimed steps of torch2-compile at least (the first one compiles; "
                         "default: %(default)s)")
    ap.add_argument("--mem-limit-gb", type=float, default=16.0,
                    help="kill a run whose RSS passes this many GB (1e9 bytes; default: %(default)s)")
    ap.add_argument("--min-avail-gb", type=float, default=1.0,
                    help="kill a run when the machine's MemAvailable drops below this many GB "
                         "(default: %(default)s)")
    ap.add_argument("--timeout", type=float, default=1800.0,
                    help="seconds per run before it is killed (default: %(default)s)")
    ap.add_argument("--quiet-wait", type=float, default=0.0,
                    help="before each run wait up to this many seconds for other processes to "
                         "use < 0.1 cores (default 0: don't wait)")
    ap.add_argument("--peak-gflops", default=None,
                    help="use these FMA peaks instead of measuring, e.g. '1:217,2:435'")
    ap.add_argument("--coretype", default=None,
                    help="OPENBLAS_CORETYPE of the tuned variant ('' = auto-detect; default: "
                         "SkylakeX on a CPU with AVX-512F, where OpenBLAS 0.3.21 may detect Zen 4 "
                         "as Haswell; else auto-detect, since SkylakeX kernels die with SIGILL "
                         "without AVX-512)")
    ap.add_argument("--aten-capability", default=None,
                    help="ATEN_CPU_CAPABILITY of the tuned variant (default: avx512 if the CPU "
                         "has AVX-512F, else avx2)")
    ap.add_argument("--no-omp-blas", dest="omp_blas", action="store_false",
                    help="tuned variant keeps the pthread OpenBLAS at >1 thread")
    ap.add_argument("--jemalloc", default=JEMALLOC, help="path of libjemalloc.so.2")
    ap.add_argument("--render", default=None, metavar="RAW_JSONL",
                    help="run nothing: print the tables of an earlier (or stopped) invocation "
                         "from its raw.jsonl")
    ap.add_argument("--out", default=None,
                    help="results folder (default: bench/peer/results/<date-time>)")
    a = ap.parse_args(argv)
    if a.coretype is None:
        a.coretype = "SkylakeX" if cpu_has("avx512f") else ""
    if a.quick:
        a.configs, a.threads, a.steps = "d4", "1", 3
    a.config_list = [c for c in a.configs.split(",") if c]
    a.thread_list = [int(t) for t in a.threads.split(",") if t]
    have_torch2 = os.access(a.torch2_python, os.X_OK)
    if a.variants is None:
        a.variants = "installed,tuned" + (",torch2-eager,torch2-compile" if have_torch2 else "")
        if not have_torch2:
            print(f"run_peer: no torch 2.x at {a.torch2_python}: torch2-eager/torch2-compile "
                  "left out (bench/peer/setup_torch2.sh installs it)", file=sys.stderr)
    a.variant_list = [] if a.variants == "none" else [v for v in a.variants.split(",") if v]
    a.dtype_list = [d for d in a.dtypes.split(",") if d]
    for d in a.dtype_list:
        if d not in DTYPE_SUFFIX:
            ap.error(f"unknown dtype '{d}' (known: {', '.join(DTYPE_SUFFIX)})")
    for v in a.variant_list:
        if v not in VARIANTS:
            ap.error(f"unknown variant '{v}' (known: {', '.join(VARIANTS)}, none)")
        if v in TORCH2_VARIANTS and not have_torch2:
            ap.error(f"variant {v} needs torch 2.x at {a.torch2_python} (not found): run "
                     "bench/peer/setup_torch2.sh, or pass --torch2-python")
    if a.steps < 1 or a.warmup < 0 or a.rounds < 1 or not a.thread_list or not a.config_list:
        ap.error("need --steps >= 1, --warmup >= 0, --rounds >= 1, at least one config and one "
                 "thread count")
    if "torch2-compile" in a.variant_list:
        warn_scalar_inductor(a.torch2_python)
    return a


def warn_scalar_inductor(python):
    """torch.compile's CPU code generator checks the vector ISA by building and loading a small
    library linked with -ltorch_cpu, and searches the interpreter's system library folder first:
    a libtorch_cpu.so there (Debian's libtorch-dev, torch 1.13, which the tuned variant's
    python3-torch pulls in) lacks the symbols torch 2.x needs, the check fails and every compiled
    kernel is scalar. Says so before the runs, with the remedy."""
    code = "from torch._inductor import cpu_vec_isa; print(cpu_vec_isa.pick_vec_isa() or 'INVALID_VEC_ISA')"
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300)
        isa = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "?"
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"run_peer: could not ask {python} for Inductor's vector ISA ({e})", file=sys.stderr)
        return
    if isa not in ("INVALID_VEC_ISA", "?"):
        print(f"run_peer: torch.compile generates {isa} kernels", file=sys.stderr)
        return
    shadow = [d for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib")
              if os.path.exists(os.path.join(d, "libtorch_cpu.so"))]
    cause = (f" {', '.join(shadow)} holds a libtorch_cpu.so (Debian's libtorch-dev) that shadows the "
             "wheel's when Inductor links its kernels: `apt-get remove libtorch-dev` (python3-torch "
             "stays), then `rm -rf /tmp/torchinductor_$USER` (its cached check)") if shadow else ""
    print(f"run_peer: WARNING: torch.compile found no vector ISA (Inductor: {isa}): its kernels "
          f"will be scalar and the torch2-compile rows no fair peer.{cause}", file=sys.stderr)


def fmt_rate(r):
    return "-" if r is None else f"{r:,.0f}"


def fmt_gb(b):
    return "-" if not b else f"{b / 1e9:.2f}"


def rss_cell(row):
    """Peak RSS in GB; '>X' for a run killed for memory, 'X+' for one stopped otherwise."""
    if row is None or not row["maxrss"]:
        return "-"
    if row["status"] == "ok":
        return fmt_gb(row["maxrss"])
    if row["status"] in ("oom", "lowmem"):
        return f">{row['maxrss'] / 1e9:.1f}"
    return f"{row['maxrss'] / 1e9:.2f}+"


def fmt_ratio(a, b):
    return "-" if not a or not b else f"{a / b:.2f}x"


def main(argv):
    a = parse_args(argv)
    if a.render:
        return render_raw(a)
    ours_bin = a.ours_bin or os.path.join(a.build_dir, "bench", "bench_train_step")
    if a.build:
        subprocess.run(["cmake", "--build", a.build_dir, "-j2", "--target", "bench_train_step"],
                       check=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir = a.out or os.path.join(HERE, "results", stamp)
    os.makedirs(os.path.join(out_dir, "logs"), exist_ok=True)
    raw_path = os.path.join(out_dir, "raw.jsonl")
    md_path = os.path.join(out_dir, "peer.md")
    raw = open(raw_path, "w")

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    def record(obj):
        raw.write(json.dumps(obj) + "\n")
        raw.flush()

    # config table: the single source is bench_train_step --list-configs --json
    if not os.access(ours_bin, os.X_OK):
        sys.exit(f"run_peer: {ours_bin} not found; build it: cmake -S . -B build -DCMAKE_BUILD_TYPE="
                 "Release && cmake --build build -j2 --target bench_train_step (or pass --build / "
                 "--ours-bin)")
    lc = subprocess.run([ours_bin, "--list-configs", "--json", "--config", ",".join(a.config_list)],
                        capture_output=True, text=True)
    if lc.returncode != 0:
        sys.exit(f"run_peer: {ours_bin} --list-configs --json failed ({lc.stderr.strip()}); an "
                 "older build? rebuild bench_train_step (--build)")
    configs = {c["config"]: c for c in (json.loads(l) for l in lc.stdout.splitlines() if l.strip())}
    a.config_list = [c + DTYPE_SUFFIX[d] for d in a.dtype_list for c in a.config_list]
    configs = dtype_configs(configs, a.config_list)

    # FMA peak per (thread count, dtype): measured once up front (1 s), raised by any higher figure a run
    # of ours measures later (load only ever lowers it); or given by --peak-gflops
    peaks, peak_fixed, peak_isa = {}, False, "?"
    if a.peak_gflops:
        peak_fixed = True
        for item in a.peak_gflops.split(","):
            t, g = item.split(":")
            peaks[(int(t), "float32")] = float(g)
    else:
        pk = subprocess.run([ours_bin, "--peak-only", "--json", "--peak-seconds", "1",
                             "--threads", ",".join(map(str, a.thread_list))],
                            capture_output=True, text=True, env=base_env())
        for line in pk.stdout.splitlines():
            d = json.loads(line)
            peaks[(d["threads"], "float32")] = d["peak_gflops"]
            peak_isa = d["peak_isa"]
            record(d)

    start = dict(time=datetime.datetime.now().isoformat(timespec="seconds"), load=loadavg())
    record(dict(meta="start", **start))
    rows = []  # one per run
    for n in a.thread_list:
        for cname in a.config_list:
            c = configs[cname]
            dtype = c["dtype"]
            sides = ([] if a.no_ours else [("ours", None)]) + [("torch", v) for v in a.variant_list]
            for rnd, (side, variant) in ((r, sv) for r in range(a.rounds) for sv in sides):
                label = "ours" if side == "ours" else f"torch {variant}"
                tag = f"{cname}_t{n}_{'ours' if side == 'ours' else variant}_r{rnd + 1}"
                notes = []
                if side == "ours":
                    env = thread_env(base_env(), n)
                    cmd = [ours_bin, "--json", "--config", base_config(cname)[0], "--threads", str(n),
                           "--steps", str(a.steps), "--warmup", str(a.warmup), "--dtype", dtype]
                else:
                    env, notes = variant_env(variant, n, a)
                    warmup = max(a.warmup, a.compile_warmup) if variant == "torch2-compile" else a.warmup
                    python = a.torch2_python if variant in TORCH2_VARIANTS else a.python
                    cmd = [python, os.path.join(HERE, "torch_step.py"), "--json",
                           "--depth", str(c["depth"]), "--head-dim", str(c["head_dim"]),
                           "--seq", str(c["T"]), "--batch", str(c["B"]), "--window", c["window"],
                           "--vocab", str(c["vocab"]), "--threads", str(n), "--steps", str(a.steps),
                           "--warmup", str(warmup), "--optim", a.torch_optim,
                           "--config-name", cname, "--variant", variant, "--dtype", dtype]
                    if variant == "torch2-compile":
                        cmd.append("--compile")
                if a.quiet_wait > 0:
                    waited, used = wait_quiet(a.quiet_wait)
                    if used >= 0.1:
                        log(f"    (not quiet after {waited:.0f} s: other processes use {used:.2f} "
                            "cores; running anyway)")
                log(f"[{datetime.datetime.now():%H:%M:%S}] {cname} threads {n} {label} "
                    f"(round {rnd + 1}/{a.rounds}) "
                    f"(load {loadavg()[0]:.1f}) ...")
                r = run_watched(cmd, env, os.path.join(out_dir, "logs", tag), a.timeout,
                                a.mem_limit_gb, a.min_avail_gb)
                res = last_json(r["stdout"]) if r["status"] == "ok" else None
                row = dict(config=cname, threads=n, side=side, variant=variant, label=label, round=rnd + 1,
                           status=r["status"], note=r["note"], wall=r["wall"], cpu=r["cpu"],
                           maxrss=r["maxrss"], other=r["other"], load1=r["load1"], notes=notes,
                           tok_s=None, tok_s_cpu=None, res=res, env={k: env.get(k) for k in TUNING_VARS if k in env})
                if res:
                    row["tok_s"] = res["tok_s"]
                    # torch_step resets its VmHWM after the warm-up (to report the timed steps'
                    # own peak too), so wait4's ru_maxrss may miss the warm-up: take its figure
                    row["maxrss"] = max(row["maxrss"], res.get("peak_rss_bytes") or 0)
                    if res.get("step_cpu_s"):
                        row["tok_s_cpu"] = c["B"] * c["T"] * n / res["step_cpu_s"]
                    if side == "ours" and not (peak_fixed and dtype == "float32"):
                        peaks[(n, dtype)] = max(peaks.get((n, dtype), 0.0), res["peak_gflops"])
                        if dtype == "float32":
                            peak_isa = res["peak_isa"]
                elif r["status"] == "ok":
                    row["status"], row["note"] = "failed", "no JSON result on stdout"
                else:
                    done = partial_steps(r["stderr"])
                    if done:  # a stopped run: report the steps it finished
                        done.sort()
                        row["tok_s"] = c["B"] * c["T"] / done[len(done) // 2]
                        row["note"] += f"; {len(done)} of {a.steps} timed steps done"
                rows.append(row)
                record({k: v for k, v in row.items()})
                log(f"    -> {r['status']} {fmt_rate(row['tok_s'])} tok/s, wall {r['wall']:.0f} s, "
                    f"peak RSS {fmt_gb(r['maxrss'])} GB, other load {r['other']:.2f} cores "
                    f"{row['note']}")
    end = dict(time=datetime.datetime.now().isoformat(timespec="seconds"), load=loadavg())
    record(dict(meta="end", **end))
    raw.close()

    md = render(a, configs, rows, peaks, peak_isa, peak_fixed, start, end, ours_bin)
    with open(md_path, "w") as f:
        f.write(md)
    print(md)
    log(f"results: {md_path} (raw: {raw_path}, logs: {os.path.join(out_dir, 'logs')})")
    bad = [r for r in rows if r["side"] == "ours" and r["status"] != "ok"]
    return 1 if bad else 0


def capability_cell(res):
    """ATen's CPU capability, and for a compiled run the vector ISA Inductor generates code for."""
    cell = res.get("cpu_capability", "?")
    isa = res.get("inductor_vec_isa")
    if isa:
        cell += f"; Inductor {isa}" + (" (scalar kernels)" if isa == "INVALID_VEC_ISA" else "")
    return cell


def render_raw(a):
    """--render: the tables of the runs in a raw.jsonl (configs, threads, variants and rounds as
    found there; a stopped invocation gives the rows it finished)."""
    peaks, peak_isa, rows = {}, "?", []
    start = end = None
    with open(a.render) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    for d in recs:
        if d.get("meta") == "start":
            start = d
        elif d.get("meta") == "end":
            end = d
        elif d.get("side") in ("ours", "torch"):
            rows.append(d)
            if d["side"] == "ours" and d.get("res"):
                key = (d["threads"], d["res"].get("dtype", "float32"))
                peaks[key] = max(peaks.get(key, 0.0), d["res"]["peak_gflops"])
                if key[1] == "float32":
                    peak_isa = d["res"]["peak_isa"]
        elif "peak_gflops" in d:
            key = (d["threads"], "float32")
            peaks[key] = max(peaks.get(key, 0.0), d["peak_gflops"])
            peak_isa = d.get("peak_isa", peak_isa)
    if not rows:
        sys.exit(f"run_peer: no runs in {a.render}")
    mtime = datetime.datetime.fromtimestamp(os.path.getmtime(a.render)).isoformat(timespec="seconds")
    nan = [float("nan")] * 3
    start = start or dict(time=f"? (file written {mtime})", load=nan)
    end = end or dict(time=mtime, load=nan)
    uniq = lambda xs: list(dict.fromkeys(xs))  # noqa: E731
    a.config_list = uniq(r["config"] for r in rows)
    a.thread_list = uniq(r["threads"] for r in rows)
    a.variant_list = uniq(r["variant"] for r in rows if r["side"] == "torch")
    a.rounds = max(r.get("round", 1) for r in rows)
    for r in rows:
        r.setdefault("round", 1)
    ours_bin = a.ours_bin or os.path.join(a.build_dir, "bench", "bench_train_step")
    bases = uniq(base_config(c)[0] for c in a.config_list)
    lc = subprocess.run([ours_bin, "--list-configs", "--json", "--config", ",".join(bases)],
                        capture_output=True, text=True)
    if lc.returncode != 0:
        sys.exit(f"run_peer: {ours_bin} --list-configs failed: {lc.stderr.strip()}")
    configs = {c["config"]: c for c in (json.loads(l) for l in lc.stdout.splitlines() if l.strip())}
    configs = dtype_configs(configs, a.config_list)
    print(render(a, configs, rows, peaks, peak_isa, False, start, end, ours_bin))
    return 0


def cell(row, a):
    """tok/s cell text: the number, or why there is none."""
    if row is None:
        return "-"
    if row["status"] == "ok":
        rounds = row.get("rounds_tok_s") or []
        if len(rounds) > 1:  # a merged row: the mean, then each round
            return fmt_rate(row["tok_s"]) + " (" + ", ".join(fmt_rate(x) for x in rounds) + ")"
        return fmt_rate(row["tok_s"])
    if row["status"] in ("oom", "lowmem"):
        lim = (f"> {a.mem_limit_gb:g} GB" if row["status"] == "oom"
               else f"machine < {a.min_avail_gb:g} GB free")
        return f"OOM ({lim})"
    if row["status"] == "timeout":
        part = f", {fmt_rate(row['tok_s'])} partial" if row["tok_s"] else ""
        return f"timeout (> {a.timeout:g} s{part})"
    return "failed"


def merge_rounds(rows):
    """One row per (config, threads, side, variant) from its rounds: the mean tok/s of the rounds
    that finished ('rounds_tok_s' lists each), the highest peak RSS and other load; a round that
    failed leaves the others standing, and all failing gives the first failure."""
    groups = {}
    for r in rows:
        groups.setdefault((r["config"], r["threads"], r["side"], r["variant"]), []).append(r)
    out = {}
    for key, rs in groups.items():
        ok = [r for r in rs if r["status"] == "ok"]
        if not ok:
            out[key] = dict(rs[0], rounds_tok_s=[])
            continue
        m = dict(ok[0])
        m["tok_s"] = sum(r["tok_s"] for r in ok) / len(ok)
        cpu = [r["tok_s_cpu"] for r in ok if r["tok_s_cpu"]]
        m["tok_s_cpu"] = sum(cpu) / len(cpu) if len(cpu) == len(ok) else None
        m["maxrss"] = max(r["maxrss"] for r in ok)
        m["other"] = max(r["other"] for r in rs)
        m["rounds_tok_s"] = [r["tok_s"] for r in rs]
        out[key] = m
    return out


def render(a, configs, rows, peaks, peak_isa, peak_fixed, start, end, ours_bin):
    L = []
    L.append(f"# Peer benchmark: nanochat.cpp vs PyTorch reference ({start['time']})")
    L.append("")
    L.append(f"- machine: {cpu_model()}, {os.cpu_count()} CPUs, {platform.release()}; load average "
             f"at start {start['load'][0]:.2f} / {start['load'][1]:.2f} / {start['load'][2]:.2f}, "
             f"at end {end['load'][0]:.2f} / {end['load'][1]:.2f} / {end['load'][2]:.2f} "
             "(1/5/15 min)")
    built = datetime.datetime.fromtimestamp(os.path.getmtime(ours_bin)).isoformat(timespec="seconds")
    L.append(f"- ours: `{os.path.relpath(ours_bin, ROOT)}` (built {built}; source tree at git "
             f"{git_rev()}); forward+backward+MuonAdamW step")
    opt = ("nanochat_ref.MuonAdamW (nanochat's Muon+AdamW math)" if a.torch_optim == "muon"
           else "torch.optim.AdamW over all parameters (lr 1e-3, betas (0.8, 0.95))")
    L.append(f"- PyTorch: tools/reference/nanochat_ref.py forward + autograd backward + {opt}; "
             "fp32, random tokens, grads reset with set_to_none; torch 1.13 (installed, jemalloc, "
             "tuned): masked-softmax attention; torch 2.x (torch2-*): F.scaled_dot_product_attention "
             "as nanochat on CPU, torch2-compile = torch.compile(dynamic=False) of the forward+loss "
             f"and of the optimizer kernels ({max(a.warmup, a.compile_warmup)} untimed steps: the "
             "first compiles)")
    order = "ours, " + ", ".join(a.variant_list)
    if a.rounds > 1:
        L.append(f"- rounds: {a.rounds} (per config and thread count the runs go {order} and again; "
                 "tok/s = mean of the rounds, each round in parentheses)")
    else:
        L.append(f"- rounds: 1 (per config and thread count the runs go {order})")
    L.append(f"- steps: {a.warmup} warm-up + {a.steps} timed per run, median step reported; "
             "one process per run (peak RSS = that run's ru_maxrss)")
    src = "given (--peak-gflops)" if peak_fixed else (
        f"measured {peak_isa} FMA loop, highest of the runs (load only lowers it)")
    L.append("- MFU = tok/s x FLOPs/token (nanochat estimate_flops) / FMA peak; peak GFLOP/s: "
             + ", ".join(f"{t} thr {g:.1f}" for (t, d), g in sorted(peaks.items()) if d == "float32")
             + f" ({src})")
    bf16 = sorted((t, g) for (t, d), g in peaks.items() if d == "bfloat16")
    if bf16:
        L.append("- bfloat16 rows (`<config>-bf16`): ours `--dtype bfloat16` (bf16 operands, fp32 "
                 "accumulation, Muon's Polar Express in bf16, fp32 weights and optimizer state), "
                 "PyTorch under "
                 "`torch.autocast('cpu', dtype=torch.bfloat16)` with Muon's Polar Express in bf16 "
                 "(as nanochat on a GPU); MFU against the bf16 dot-product "
                 "peak our run measures: " + ", ".join(f"{t} thr {g:.1f}" for t, g in bf16))
    L.append(f"- guards: run killed at RSS > {a.mem_limit_gb:g} GB or MemAvailable < "
             f"{a.min_avail_gb:g} GB (OOM), or after {a.timeout:g} s (timeout); GB = 1e9 bytes")
    L.append("")

    by = merge_rounds(rows)
    # --- summary
    L.append("## Summary (tok/s; ratio > 1 = ours faster)")
    L.append("")
    hdr = ["config", "thr", "ours tok/s", "ours MFU"]
    for v in a.variant_list:
        hdr += [f"torch {v} tok/s", f"ours / {v}"]
    hdr += ["RSS GB ours"] + [f"RSS GB {v}" for v in a.variant_list]
    hdr += [f"RSS ours / {v}" for v in a.variant_list] + ["other load (cores)"]
    L.append("| " + " | ".join(hdr) + " |")
    L.append("|" + "|".join(["---"] + ["---:"] * (len(hdr) - 1)) + "|")
    for n in a.thread_list:
        for cname in a.config_list:
            ours = by.get((cname, n, "ours", None))
            fpt = configs[cname]["flops_per_token"]
            ours_ok = ours and ours["status"] == "ok"
            peak = peaks.get((n, configs[cname]["dtype"]))
            mfu = f"{100 * ours['tok_s'] * fpt / 1e9 / peak:.1f}%" if ours_ok and peak else "-"
            cells = [cname, str(n), cell(ours, a), mfu]
            loads = [ours["other"] if ours else None]
            for v in a.variant_list:
                t = by.get((cname, n, "torch", v))
                t_ok = t and t["status"] == "ok"
                ratio = fmt_ratio(ours["tok_s"] if ours_ok else None, t["tok_s"] if t_ok else None)
                if ratio != "-" and ours["tok_s_cpu"] and t["tok_s_cpu"]:
                    ratio += f" (cpu {fmt_ratio(ours['tok_s_cpu'], t['tok_s_cpu'])})"
                cells += [cell(t, a), ratio]
                loads.append(t["other"] if t else None)
            cells.append(rss_cell(ours))
            for v in a.variant_list:
                cells.append(rss_cell(by.get((cname, n, "torch", v))))
            for v in a.variant_list:
                t = by.get((cname, n, "torch", v))
                cells.append(fmt_ratio(ours["maxrss"] if ours_ok else None,
                                       t["maxrss"] if t and t["status"] == "ok" else None))
            cells.append(" / ".join("-" if x is None else f"{x:.2f}" for x in loads))
            L.append("| " + " | ".join(cells) + " |")
    L.append("")
    L.append("\"other load\" = CPU time of all other processes on the machine during each run "
             "(ours / " + " / ".join(a.variant_list) + "), from /proc/stat; above ~0.1 the "
             "numbers are disturbed. \"(cpu r)\" = the same ratio from CPU-time throughput "
             "(B*T*threads / process CPU seconds per step): less sensitive to other load, but it "
             "counts OpenMP spin-waiting as work and still includes cache/bandwidth contention.")
    L.append("")

    # --- detail
    L.append("## Detail")
    L.append("")
    L.append("| config | thr | run | tok/s | tok/s (CPU-time) | step s | fwd+bwd s | opt s | "
             "warm-up s | GFLOP/s | MFU | peak RSS GB | page faults / step | cpu/wall | load1 | other load | "
             "notes |")
    L.append("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        c = configs[r["config"]]
        res = r["res"] or {}
        ok = r["status"] == "ok"
        fb = res.get("fwdbwd_s", (res.get("fwd_s", 0) + res.get("bwd_s", 0)) if res else None)
        g = r["tok_s"] * c["flops_per_token"] / 1e9 if ok else None
        notes = list(r["notes"])
        if r["note"]:
            notes.append(r["note"])
        if ok and abs(res.get("flops_per_token", c["flops_per_token"]) - c["flops_per_token"]) > 1:
            notes.append(f"FLOPs/token differs: {res.get('flops_per_token')}")
        L.append("| " + " | ".join([
            r["config"], str(r["threads"]),
            r["label"] + (f" r{r['round']}" if a.rounds > 1 else ""), cell(r, a),
            fmt_rate(r["tok_s_cpu"]) if ok else "-", f"{res['step_s']:.3f}" if ok else "-", f"{fb:.3f}" if ok and fb else "-",
            f"{res['opt_s']:.3f}" if ok else "-",
            ", ".join(f"{w:.1f}" for w in res.get("warmup_times", [])) if ok else "-",
            f"{g:.1f}" if g else "-",
            f"{100 * g / peaks[(r['threads'], c['dtype'])]:.1f}%"
            if g and peaks.get((r["threads"], c["dtype"])) else "-",
            rss_cell(r),
            f"{res['page_faults_per_step']:.0f}" if ok and "page_faults_per_step" in res else "-",
            f"{r['cpu'] / r['wall']:.2f}" if r["wall"] else "-", f"{r['load1']:.1f}",
            f"{r['other']:.2f}", "; ".join(notes)]) + " |")
    L.append("")

    # --- our profile per op family (bench_train_step's core/profile.h scopes)
    prof_rows = [r for r in rows if r["side"] == "ours" and r["status"] == "ok" and r["res"]
                 and r["res"].get("profile_s")]
    if prof_rows:
        fams = list(prof_rows[0]["res"]["profile_s"].keys())
        L.append("## Our step per op family (share of the mean timed step)")
        L.append("")
        L.append("| config | thr | " + " | ".join(fams) + " |")
        L.append("|---|---:|" + "---:|" * len(fams))
        for r in prof_rows:
            res = r["res"]
            times = res.get("step_times") or [res["step_s"]]
            mean = sum(times) / len(times)
            L.append("| " + " | ".join([r["config"], str(r["threads"])] + [
                f"{100 * res['profile_s'].get(f, 0.0) / mean:.1f}%" for f in fams]) + " |")
        L.append("")

    # --- PyTorch environment per variant, as found inside the process
    if a.variant_list:
        L.append("## PyTorch variants (settings as set by the driver and as found in the process)")
        L.append("")
        L.append("| variant | thr | torch | attention | BLAS library | OpenBLAS core | BLAS threading | "
                 "allocator | ATen CPU capability | environment set |")
        L.append("|---|---:|---|---|---|---|---|---|---|---|")
        seen = set()
        for r in rows:
            if r["side"] != "torch" or (r["variant"], r["threads"]) in seen:
                continue
            res = r["res"]
            if not res:
                continue
            seen.add((r["variant"], r["threads"]))
            envs = ", ".join(f"{k}={v}" for k, v in sorted(r["env"].items()))
            core = res.get("openblas_core") or "?"
            if not r["env"].get("OPENBLAS_CORETYPE"):
                core += " (auto-detected; OPENBLAS_CORETYPE unset)"
            L.append("| " + " | ".join([
                r["variant"], str(r["threads"]), res.get("torch_version", "?"),
                res.get("attention", "masked") + (" (compiled)" if res.get("compiled") else ""),
                f"`{res.get('blas_lib')}`", core,
                f"{res.get('openblas_parallel', '?')}, {res.get('openblas_threads', '?')} thr",
                res.get("allocator", "?"), capability_cell(res), envs]) + " |")
        if any(r["side"] == "torch" and r["res"] and r["res"].get("inductor_vec_isa") == "INVALID_VEC_ISA"
               for r in rows):
            L.append("")
            L.append("**torch.compile found no vector ISA on this host** (Inductor: INVALID_VEC_ISA): "
                     "its generated kernels are scalar, so the compiled rows are no fair peer here; "
                     "compare with torch2-eager (bench/peer/README.md, Caveats)")
        first = next((r["res"] for r in rows if r["side"] == "torch" and r["res"]), None)
        if first:
            L.append("")
            L.append(f"torch.get_num_threads() = thread count; optimizer: {first['optim']}; torch 2.x "
                     "from PyPI computes its GEMMs with its bundled MKL/oneDNN (BLAS library: none "
                     "mapped)")
        L.append("")
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
