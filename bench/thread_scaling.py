#!/usr/bin/python3
"""Thread scaling of the training step: bench_train_step at 1, 2, 4, 8, 16 threads (those the
machine has), tok/s, speedup and parallel efficiency per thread count, and per op family
(core/profile.h) how much of the lost time each family is, naming the one that stops scaling.
With --peer, nanochat's own step (bench/peer/torch_step.py, torch 2.x `torch.compile`, through
bench/peer/run_peer.py) runs at the same thread counts in the same invocation, and the table
gains its tok/s, its efficiency and our ratio against it.

    bench/thread_scaling.py --configs d8 --threads 1,2,4,8,16 --steps 3
    bench/thread_scaling.py --build-dir build-avx2 --configs d4,d8 --peer

Parallel efficiency at n threads = tok/s(n) / (n * tok/s(1)). A family's lost time at n threads
is its seconds per step minus its 1-thread seconds divided by n; the family with the most lost
time is the one that stops scaling. Each (config, threads) runs in its own process; --rounds R
repeats the sweep R times in alternating order and keeps each point's median. Prints figures
and asserts nothing (bench/README.md: every figure names its CPU, ISA and host load).
Dev-time only, Python standard library; the peer needs the venv of bench/peer/setup_torch2.sh.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench", "peer"))
from run_peer import cpu_model  # noqa: E402


def load_average():
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def run_ours(binary, config, threads, steps, warmup, timeout):
    """One bench_train_step process; returns its JSON row (side 'ours')."""
    cmd = [binary, "--json", "--threads", str(threads), "--config", config, "--steps", str(steps),
           "--warmup", str(warmup)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"thread_scaling: {' '.join(cmd)} failed (exit {p.returncode}): {p.stderr.strip()[-500:]}")
    for line in p.stdout.splitlines():
        if line.startswith("{") and '"side":"ours"' in line:
            return json.loads(line)
    sys.exit(f"thread_scaling: {' '.join(cmd)} printed no result row")


def run_peer(binary, configs, threads, steps, timeout, rounds):
    """nanochat's compiled step at each (config, threads): {(config, threads): [tok/s, ...]}."""
    out = tempfile.mkdtemp(prefix="thread_scaling_peer_")
    cmd = [sys.executable, os.path.join(ROOT, "bench", "peer", "run_peer.py"), "--no-ours",
           "--variants", "torch2-compile", "--configs", ",".join(configs),
           "--threads", ",".join(str(t) for t in threads), "--steps", str(steps),
           "--rounds", str(rounds), "--ours-bin", binary, "--timeout", str(timeout), "--out", out]
    print(f"peer: {' '.join(cmd)}", flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        print(f"thread_scaling: the peer run failed (exit {p.returncode}); its last lines:\n"
              f"{p.stdout.strip()[-800:]}\n{p.stderr.strip()[-800:]}", file=sys.stderr)
    rates = {}
    raw = os.path.join(out, "raw.jsonl")
    if not os.path.exists(raw):
        return rates, None
    isa = None
    with open(raw) as f:
        for line in f:
            d = json.loads(line)
            if d.get("side") != "torch" or d.get("status") != "ok" or not d.get("res"):
                continue
            res = d["res"]
            rates.setdefault((d["config"], d["threads"]), []).append(res["tok_s"])
            isa = res.get("inductor_vec_isa") or isa
    return rates, isa


def family_table(rows_by_threads):
    """Lines naming, per family, seconds per step at 1 and n threads, speedup and lost time."""
    t1 = rows_by_threads[min(rows_by_threads)]
    lines = []
    for n in sorted(rows_by_threads):
        if n == 1:
            continue
        prof = rows_by_threads[n]["profile_s"]
        lost = {k: prof[k] - t1["profile_s"][k] / n for k in prof if t1["profile_s"].get(k, 0) > 0}
        total_lost = sum(v for v in lost.values() if v > 0)
        worst = max(lost, key=lost.get) if lost else "-"
        lines.append(f"  {n} threads: time lost to imperfect scaling {total_lost:.3f} s per step; "
                     f"the most in '{worst}' ({lost.get(worst, 0):.3f} s)")
        for k in sorted(lost, key=lost.get, reverse=True):
            s1, sn = t1["profile_s"][k], prof[k]
            if s1 < 1e-4:
                continue
            eff = s1 / (n * sn) if sn > 0 else float("nan")
            share = lost[k] / total_lost if total_lost > 0 else 0
            lines.append(f"    {k:<16} {s1 * 1e3:9.1f} ms -> {sn * 1e3:8.1f} ms  speedup {s1 / sn:5.2f}x  "
                         f"efficiency {100 * eff:5.1f}%  share of the lost time {100 * share:5.1f}%")
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default="d8", help="bench_train_step configs (default: %(default)s)")
    ap.add_argument("--threads", default="1,2,4,8,16",
                    help="thread counts; those above the CPUs this process may use are skipped "
                         "(default: %(default)s)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--bin", default=None, help="bench_train_step (overrides --build-dir)")
    ap.add_argument("--peer", action="store_true", help="nanochat's compiled step at the same thread counts")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    a = ap.parse_args(argv)
    binary = a.bin or os.path.join(a.build_dir, "bench", "bench_train_step")
    if not os.access(binary, os.X_OK):
        sys.exit(f"thread_scaling: {binary} not found: build it (cmake --build BUILD --target bench_train_step)")
    cpus = len(os.sched_getaffinity(0))
    wanted = [int(t) for t in a.threads.split(",") if t]
    threads = sorted({t for t in wanted if t <= cpus} | {1})
    skipped = [t for t in wanted if t > cpus]
    configs = [c for c in a.configs.split(",") if c]
    print(f"host: {cpu_model()}, {cpus} CPUs for this process; load average {load_average():.2f} at start")
    if skipped:
        print(f"skipped thread counts above {cpus} CPUs: {','.join(map(str, skipped))}")
    rows = {}
    for r in range(a.rounds):
        order = threads if r % 2 == 0 else list(reversed(threads))
        for c in configs:
            for n in order:
                row = run_ours(binary, c, n, a.steps, a.warmup, a.timeout)
                rows.setdefault((c, n), []).append(row)
                print(f"  round {r + 1} {c} {n} threads: {row['tok_s']:.0f} tok/s, MFU {100 * row['mfu']:.1f}% "
                      f"(peak {row['peak_gflops']:.1f} GFLOP/s {row['peak_isa']}, oneDNN {row['gemm_isa']})",
                      flush=True)
    peer, peer_isa = ({}, None)
    if a.peer:
        peer, peer_isa = run_peer(binary, configs, threads, a.steps, a.timeout, a.rounds)
    print(f"load average {load_average():.2f} at the end")
    for c in configs:
        med = {}
        for n in threads:
            rs = sorted(rows[(c, n)], key=lambda d: d["tok_s"])
            med[n] = rs[len(rs) // 2]
        base = med[1]["tok_s"]
        print(f"\n{c} (T {med[1]['T']}, B {med[1]['B']}, vocab {med[1]['vocab']}, window {med[1]['window']}; "
              f"ISA {med[1]['peak_isa']}, oneDNN {med[1]['gemm_isa']})")
        hdr = "| threads | tok/s | speedup | efficiency | MFU |"
        if a.peer:
            hdr += f" nanochat compiled tok/s ({peer_isa or 'ISA not reported'}) | its efficiency | ours / nanochat |"
        print(hdr)
        print("|" + "---|" * (hdr.count("|") - 1))
        pbase = statistics.median(peer[(c, 1)]) if (c, 1) in peer else None
        for n in threads:
            tps = med[n]["tok_s"]
            line = (f"| {n} | {tps:,.0f} | {tps / base:.2f}x | {100 * tps / (n * base):.1f}% | "
                    f"{100 * med[n]['mfu']:.1f}% |")
            if a.peer:
                if (c, n) in peer and pbase:
                    pt = statistics.median(peer[(c, n)])
                    line += f" {pt:,.0f} | {100 * pt / (n * pbase):.1f}% | {tps / pt:.2f}x |"
                else:
                    line += " (no result) | | |"
            print(line)
        for line in family_table(med):
            print(line)


if __name__ == "__main__":
    main()
