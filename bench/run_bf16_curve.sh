#!/usr/bin/env bash
# bfloat16 training curve (a benchmark, not a test): does `--dtype bfloat16` train like float32
# over a real run? `nanochat base-train` runs on the demo corpus, all with the same data order:
#   fp32-s<S>, fp32-s<S+1>, ...   --dtype float32 with --fp32-seeds N initialisation seeds (the
#                                 run-to-run noise: how far fp32 runs land from each other)
#   bf16-s<S>                     --dtype bfloat16 with seed S
# and prints, from each run's metrics.jsonl, the smoothed training loss (the log's EMA) at a few
# steps and the validation bpb of every evaluation; then, over the last third of the steps, the
# mean |a - b| of the smoothed loss for every pair of fp32 runs (the noise) and for bf16 against
# each fp32 run. bf16 is "within the run-to-run noise" when its gap to the fp32 run of its own seed
# is at most the largest fp32 pair's, and its last validation bpb lies within the fp32 runs'. Also
# tok/s of each run (median step) and bf16 / fp32. The tests hold a 60-step curve of a tiny model
# to a like rule (tests/optim/bf16_curve_test.cpp); this is the full-size check. One pair of fp32
# seeds underestimates the noise (bench/README.md): the default is three.
#
# usage: bench/run_bf16_curve.sh [--steps N] [--depth D] [--batch TOKENS] [--seq T] [--seed S]
#                                [--fp32-seeds N] [--dir DIR] [--bin PATH] [--report-only]
#   --steps N        optimizer steps per run (default 300)
#   --depth D        model depth (default 4)
#   --batch TOKENS   total batch per step (default 4096)
#   --seq T          sequence length (default 256; the device batch is TOKENS / T rows, at most 16)
#   --seed S         first seed (default 42)
#   --fp32-seeds N   fp32 runs, seeds S .. S+N-1 (default 3, at least 2)
#   --dir DIR        NANOCHAT_BASE_DIR with the corpus and tokenizer (default
#                    /tmp/nanochat-bf16-curve; on the first run the demo corpus and a vocab-8192
#                    tokenizer are made there, ~1-2 minutes)
#   --bin PATH       the nanochat binary (default build/nanochat)
#   --report-only    train nothing: print the comparison of the runs already in DIR
# About 5.5 min per run at the defaults on a 2-core VM. Needs a CPU with native bf16 (AVX512_BF16
# or AMX): elsewhere base-train refuses --dtype bfloat16 and this script stops with its message.
# Run it on an otherwise idle machine for the tok/s figures (the curves do not depend on the load).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
me=run_bf16_curve.sh
steps=300 depth=4 batch=4096 seq=256 seed=42 nseeds=3 report_only=0
dir=/tmp/nanochat-bf16-curve
bin="$repo/build/nanochat"
die() { echo "$me: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --depth) depth="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --seq) seq="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --fp32-seeds) nseeds="$2"; shift 2 ;;
    --report-only) report_only=1; shift ;;
    --dir) dir="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[ "$steps" -ge 6 ] || die "--steps must be >= 6"
[ "$nseeds" -ge 2 ] || die "--fp32-seeds must be >= 2 (the noise is the distance between fp32 runs)"
[ $((batch % seq)) -eq 0 ] || die "--batch ($batch) must be a multiple of --seq ($seq)"
rows=$((batch / seq))
device_batch=$rows
while [ "$device_batch" -gt 16 ]; do device_batch=$((device_batch / 2)); done
[ $((rows % device_batch)) -eq 0 ] || die "--batch / --seq = $rows rows: pick a power of two times 16 or fewer"
[ -x "$bin" ] || die "no binary at $bin; build it first (bash scripts/build.sh)"
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
export NANOCHAT_BASE_DIR="$dir"
logs="$dir/logs"
mkdir -p "$logs"

if [ ! -f "$dir/base_data_climbmix/DEMO_CORPUS" ]; then
  echo "== building the demo corpus in $dir (once)"
  NANOCHAT_BIN="$bin" bash "$repo/scripts/demo_corpus.sh" > "$logs/corpus.log" 2>&1 ||
    { tail -20 "$logs/corpus.log"; exit 1; }
fi
if [ ! -f "$dir/tokenizer/tokenizer.json" ]; then
  echo "== training the vocab-8192 tokenizer (once)"
  "$bin" tok-train --vocab-size 8192 > "$logs/tok.log" 2>&1 || { tail -20 "$logs/tok.log"; exit 1; }
fi

eval_every=$((steps / 3))
run() {  # name dtype seed
  local name=$1 dtype=$2 s=$3
  echo "== $name: --dtype $dtype --seed $s ($steps steps; load average $(cut -d' ' -f1 /proc/loadavg))"
  rm -rf "$dir/base_checkpoints/bf16curve-$name"
  if ! "$bin" base-train --depth "$depth" --max-seq-len "$seq" --device-batch-size "$device_batch" \
      --total-batch-size "$batch" --num-iterations "$steps" --eval-every "$eval_every" \
      --eval-tokens $((batch * 8)) --sample-every -1 --core-metric-every -1 --save-every -1 \
      --dtype "$dtype" --seed "$s" --model-tag "bf16curve-$name" > "$logs/$name.log" 2>&1; then
    grep -m1 -i "error\|refused\|bfloat16" "$logs/$name.log" >&2 || tail -5 "$logs/$name.log" >&2
    die "the $name run failed (log: $logs/$name.log)"
  fi
}
if [ "$report_only" = 0 ]; then
  for ((k = 0; k < nseeds; ++k)); do run "fp32-s$((seed + k))" float32 $((seed + k)); done
  run "bf16-s$seed" bfloat16 "$seed"
fi

python3 - "$dir/base_checkpoints" "$steps" "$seed" "$nseeds" <<'EOF'
import itertools, json, os, sys
root, steps, seed, nseeds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
fp32 = [f"fp32-s{seed + k}" for k in range(nseeds)]
bf16 = f"bf16-s{seed}"
def load(name):
    path = f"{root}/bf16curve-{name}/metrics.jsonl"
    if not os.path.exists(path):
        sys.exit(f"run_bf16_curve.sh: {path} is missing: run the script without --report-only (same flags)")
    train, val = {}, {}
    for line in open(path):
        d = json.loads(line)
        if "smooth_loss" in d:
            train[d["step"]] = d
        if "val_bpb" in d:
            val[d["step"]] = d["val_bpb"]
    return train, val
runs = {n: load(n) for n in fp32 + [bf16]}
def med(v):
    v = sorted(v)
    return v[len(v) // 2]
marks = (0, steps // 3, 2 * steps // 3, steps - 1)
print()
print(f"{'run':<16}" + "".join(f"{'step ' + str(s):>12}" for s in marks) + f"  {'val bpb':>34}{'tok/s':>9}")
tok = {}
for n, (train, val) in runs.items():
    tok[n] = med([d["tok_per_sec"] for s, d in train.items() if s >= 2])
    cells = "".join(f"{train[s]['smooth_loss']:>12.4f}" for s in marks)
    vb = " / ".join(f"{val[s]:.4f}" for s in sorted(val))
    print(f"{n:<16}{cells}  {vb:>34}{tok[n]:>9}")
last = [s for s in range(steps) if s >= steps - steps // 3]
def gap(a, b):
    return sum(abs(runs[a][0][s]["smooth_loss"] - runs[b][0][s]["smooth_loss"]) for s in last) / len(last)
print()
print(f"mean |a - b| of the smoothed training loss over steps {last[0]}..{last[-1]}:")
pairs = {(a, b): gap(a, b) for a, b in itertools.combinations(fp32, 2)}
for (a, b), g in pairs.items():
    print(f"  {a} vs {b}: {g:.4f}")
for a in fp32:
    print(f"  {bf16} vs {a}: {gap(bf16, a):.4f}")
noise = max(pairs.values())
own = gap(bf16, fp32[0])
worst = max(abs(runs[bf16][0][s]["loss"] - runs[fp32[0]][0][s]["loss"]) / runs[fp32[0]][0][s]["loss"]
            for s in range(steps))
print(f"worst single step |bf16 - fp32| / fp32 (seed {seed}): {100 * worst:.2f}%")
print(f"training loss: bf16 vs fp32 of its seed {own:.4f}, largest fp32 pair {noise:.4f}: "
      + ("within" if own <= noise else "OUTSIDE") + " the run-to-run noise")
final = {n: runs[n][1][max(runs[n][1])] for n in runs}
lo, hi = min(final[n] for n in fp32), max(final[n] for n in fp32)
x = final[bf16]
where = "within" if lo <= x <= hi else f"OUTSIDE (by {min(abs(x - lo), abs(x - hi)):.4f})"
print(f"final val bpb: bf16 {x:.4f}, fp32 runs {lo:.4f}..{hi:.4f}: {where} their range")
print(f"tok/s bf16 / fp32 (seed {seed}): {tok[bf16] / tok[fp32[0]]:.2f}x (meaningful on an otherwise idle machine only)")
EOF
