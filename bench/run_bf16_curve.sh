#!/usr/bin/env bash
# bfloat16 training curve (a benchmark, not a test): does `--dtype bfloat16` train like float32
# over a real run? Three `nanochat base-train` runs on the demo corpus with the same data order:
#   fp32        --dtype float32,  --seed S
#   fp32 seed   --dtype float32,  --seed S+1   (another initialisation: the run-to-run noise)
#   bf16        --dtype bfloat16, --seed S
# and prints, from each run's metrics.jsonl, the smoothed training loss (the log's EMA) at a few
# steps, the validation bpb of every evaluation, and over the last third of the steps the mean
# |bf16 - fp32| of the smoothed loss against the mean |fp32 seed S+1 - fp32|: bf16 is "within the
# run-to-run noise" when the first is not larger; and whether bf16's last validation bpb lies
# between the two fp32 runs'. Also tok/s of each run (median step) and their ratio. The tests hold a 60-step curve of a tiny model to the same rule (tests/optim/bf16_curve_test.cpp);
# this is the full-size check.
#
# usage: bench/run_bf16_curve.sh [--steps N] [--depth D] [--batch TOKENS] [--seq T] [--seed S]
#                                [--dir DIR] [--bin PATH]
#   --steps N       optimizer steps per run (default 300)
#   --depth D       model depth (default 4)
#   --batch TOKENS  total batch per step (default 4096)
#   --seq T         sequence length (default 256; the device batch is TOKENS / T rows, at most 16)
#   --seed S        initialisation seed of the fp32 and bf16 runs (default 42)
#   --dir DIR       NANOCHAT_BASE_DIR with the corpus and tokenizer (default
#                   /tmp/nanochat-bf16-curve; on the first run the demo corpus and a vocab-8192
#                   tokenizer are made there, ~1-2 minutes)
#   --bin PATH      the nanochat binary (default build/nanochat)
# Needs a CPU with native bf16 (AVX512_BF16 or AMX): elsewhere base-train refuses --dtype
# bfloat16 and this script stops with its message. Run it on an otherwise idle machine for the
# tok/s figures (the curves do not depend on the load).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
me=run_bf16_curve.sh
steps=300 depth=4 batch=4096 seq=256 seed=42
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
    --dir) dir="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[ "$steps" -ge 6 ] || die "--steps must be >= 6"
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
run fp32 float32 "$seed"
run fp32-seed float32 $((seed + 1))
run bf16 bfloat16 "$seed"

python3 - "$dir/base_checkpoints" "$steps" "$seed" <<'EOF'
import json, sys
root, steps, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def load(name):
    train, val = {}, {}
    for line in open(f"{root}/bf16curve-{name}/metrics.jsonl"):
        d = json.loads(line)
        if "smooth_loss" in d:
            train[d["step"]] = d
        if "val_bpb" in d:
            val[d["step"]] = d["val_bpb"]
    return train, val
runs = {n: load(n) for n in ("fp32", "fp32-seed", "bf16")}
def med(v):
    v = sorted(v)
    return v[len(v) // 2]
print()
print(f"{'run':<28}" + "".join(f"{'step ' + str(s):>12}" for s in (0, steps // 3, 2 * steps // 3, steps - 1))
      + f"  {'val bpb':>24}{'tok/s':>9}")
label = {"fp32": f"float32, seed {seed}", "fp32-seed": f"float32, seed {seed + 1}",
         "bf16": f"bfloat16, seed {seed}"}
tok = {}
for n, (train, val) in runs.items():
    tok[n] = med([d["tok_per_sec"] for s, d in train.items() if s >= 2])
    cells = "".join(f"{train[s]['smooth_loss']:>12.4f}" for s in (0, steps // 3, 2 * steps // 3, steps - 1))
    vb = " / ".join(f"{val[s]:.4f}" for s in sorted(val))
    print(f"{label[n]:<28}{cells}  {vb:>24}{tok[n]:>9}")
last = [s for s in range(steps) if s >= steps - steps // 3]
def gap(a, b):
    return sum(abs(runs[a][0][s]["smooth_loss"] - runs[b][0][s]["smooth_loss"]) for s in last) / len(last)
g, noise = gap("bf16", "fp32"), gap("fp32-seed", "fp32")
worst = max(abs(runs["bf16"][0][s]["loss"] - runs["fp32"][0][s]["loss"]) / runs["fp32"][0][s]["loss"]
            for s in range(steps))
print()
print(f"smoothed training loss over steps {last[0]}..{last[-1]}: mean |bf16 - fp32| {g:.4f}, "
      f"mean |fp32 seed {seed + 1} - fp32 seed {seed}| {noise:.4f} (the run-to-run noise)")
print(f"worst single step |bf16 - fp32| / fp32: {100 * worst:.2f}%")
print("training loss: bf16 is " + ("within" if g <= noise else "OUTSIDE") + " the run-to-run noise of float32")
last_val = {n: runs[n][1][max(runs[n][1])] for n in runs if runs[n][1]}
if len(last_val) == 3:
    lo, hi = sorted((last_val["fp32"], last_val["fp32-seed"]))
    x = last_val["bf16"]
    where = ("between them" if lo <= x <= hi else
             f"{min(abs(x - lo), abs(x - hi)):.4f} outside them (their gap: {hi - lo:.4f})")
    print(f"final val bpb: bf16 {x:.4f}; fp32 seeds {last_val['fp32']:.4f} / {last_val['fp32-seed']:.4f}: {where}")
print(f"tok/s bf16 / fp32: {tok['bf16'] / tok['fp32']:.2f}x (meaningful on an otherwise idle machine only)")
EOF
