#!/usr/bin/env bash
# The training-step benchmark in the native build (build/, AVX-512 where the machine has it) and
# in the AVX2 build (build-avx2/, CMake NANOCHAT_ISA=avx2: what an AVX2 + FMA machine without
# AVX-512 runs), one after the other, each against the FMA peak of its own ISA; prints tok/s and
# MFU side by side and the time per op family of each.
# usage: bench/run_isa_compare.sh [--build] [--config d4] [--threads 1] [--steps 3] [--warmup 1]
#   --build: build bench_train_step in both build folders first (scripts/build.sh configures them)
set -euo pipefail
cd "$(dirname "$0")/.."
config=d4 threads=1 steps=3 warmup=1 build=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=1 ;;
    --config) config="$2"; shift ;;
    --threads) threads="$2"; shift ;;
    --steps) steps="$2"; shift ;;
    --warmup) warmup="$2"; shift ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
if [ "$build" = 1 ]; then
  [ -f build/CMakeCache.txt ] || cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build -j"$(nproc)" --target bench_train_step
  bash scripts/build.sh avx2 bench_train_step
fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for dir in build build-avx2; do
  bin="$dir/bench/bench_train_step"
  [ -x "$bin" ] || { echo "$bin not found: run with --build (or scripts/build.sh release / avx2)" >&2; exit 1; }
  echo "== $bin --config $config --threads $threads --steps $steps --warmup $warmup" >&2
  "$bin" --config "$config" --threads "$threads" --steps "$steps" --warmup "$warmup" --json >"$out/$dir.json"
done
python3 - "$out/build.json" "$out/build-avx2.json" <<'EOF'
import json, sys
rows = []
for path, name in zip(sys.argv[1:], ["native", "avx2"]):
    for line in open(path):
        r = json.loads(line)
        if r.get("side") == "ours":
            rows.append((name, r))
print("| build | config | threads | FMA peak GFLOP/s (ISA) | oneDNN ISA | step s | tok/s | MFU |")
print("|---|---|---:|---:|---|---:|---:|---:|")
for name, r in rows:
    print(f"| {name} | {r['config']} | {r['threads']} | {r['peak_gflops']:.1f} ({r['peak_isa']}) | {r['gemm_isa']} "
          f"| {r['step_s']:.3f} | {r['tok_s']:,.0f} | {100 * r['mfu']:.1f}% |")
fams = sorted({k for _, r in rows for k in r["profile_s"]}, key=lambda k: -rows[0][1]["profile_s"].get(k, 0))
print()
print("| op family | " + " | ".join(f"{n} s/step (share)" for n, _ in rows) + " |")
print("|---|" + "---:|" * len(rows))
for k in fams:
    cells = []
    for _, r in rows:
        s = r["profile_s"].get(k, 0)
        cells.append(f"{s:.3f} ({100 * s / r['step_s']:.0f}%)")
    if any(r["profile_s"].get(k, 0) > 0.0005 for _, r in rows):
        print(f"| {k} | " + " | ".join(cells) + " |")
EOF
