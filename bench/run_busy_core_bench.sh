#!/usr/bin/env bash
# Busy-core benchmark (a benchmark, not a test): how `nanochat base-train` copes when another
# process keeps one core busy. Real d4 runs (T 256, B 4) on the demo corpus, in one invocation:
#   1. default threads (every core), nothing else running          ("quiet")
#   2. default threads, with a busy loop pinned to the last CPU    ("one core busy")
#   3. --threads 1 pinned to the first CPU, with the same busy loop (the best fixed setting then)
#   4. --threads <every CPU>, with the same busy loop: the fixed team that the default started
#      from before the thread tuner (core/thread_tuner.h) could drop the busy core's thread
# and the ratios 2 / 3 (goal >= 0.9) and 4 / 3. The four runs alternate --repeat times; each
# figure is the median tok/s over the steps after the first two (warm-up) of all its runs, and
# next to it the fastest of those steps (the least disturbed one on a loaded machine).
# The busy loop is `taskset -c <last CPU> sh -c 'while :; do :; done'`, stopped after each run.
# Environment variables reach every run, so e.g. `GOMP_SPINCOUNT=300000 bench/run_busy_core_bench.sh`
# measures OpenMP's own default wait policy instead of nanochat's.
#
# usage: bench/run_busy_core_bench.sh [--steps N] [--repeat R] [--depth D] [--dir DIR] [--bin PATH]
#   --steps N    optimizer steps per run (default 8; the first 2 are not counted)
#   --repeat R   how many times the four runs alternate (default 3)
#   --depth D    model depth (default 4)
#   --dir DIR    NANOCHAT_BASE_DIR with the corpus and tokenizer (default /tmp/nanochat-busy-bench;
#                on the first run the demo corpus and a vocab-32768 tokenizer are made there,
#                ~1-2 minutes; an existing tokenizer of any vocabulary size is used as it is)
#   --bin PATH   the nanochat binary (default build/nanochat)
# Run it on an otherwise idle machine with at least 2 CPUs: other processes change every figure.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
steps=8
repeat=3
depth=4
dir=/tmp/nanochat-busy-bench
bin="$repo/build/nanochat"
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --depth) depth="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "run_busy_core_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [ "$steps" -lt 3 ]; then echo "run_busy_core_bench.sh: --steps must be >= 3" >&2; exit 2; fi
[ -x "$bin" ] || { echo "run_busy_core_bench.sh: no binary at $bin; build it first (bash scripts/build.sh)" >&2; exit 1; }
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
# The CPUs this script may use: the first is left free, the last gets the busy loop.
cpus=$(taskset -cp $$ | sed 's/.*: //' | tr ',' '\n' |
       awk -F- '{ if (NF == 2) for (i = $1; i <= $2; ++i) print i; else print $1 }')
free_cpu=$(echo "$cpus" | head -1)
n_cpus=$(echo "$cpus" | wc -l)
busy_cpu=$(echo "$cpus" | tail -1)
if [ "$free_cpu" = "$busy_cpu" ]; then echo "run_busy_core_bench.sh: needs at least 2 CPUs (this process may use only CPU $free_cpu)" >&2; exit 1; fi
export NANOCHAT_BASE_DIR="$dir"
logs="$dir/logs"
mkdir -p "$logs"

if [ ! -f "$dir/base_data_climbmix/DEMO_CORPUS" ]; then
  echo "== building the demo corpus in $dir (once)"
  NANOCHAT_BIN="$bin" bash "$repo/scripts/demo_corpus.sh" > "$logs/corpus.log" 2>&1 ||
    { tail -20 "$logs/corpus.log"; exit 1; }
fi
if [ ! -f "$dir/tokenizer/tokenizer.json" ]; then
  echo "== training the vocab-32768 tokenizer (once)"
  "$bin" tok-train --vocab-size 32768 > "$logs/tok.log" 2>&1 || { tail -20 "$logs/tok.log"; exit 1; }
fi
vocab=$(grep -o '"vocab_size": *[0-9]*' "$dir/tokenizer/tokenizer.json" | grep -o '[0-9]*$' || echo "?")

flags="base-train --depth $depth --max-seq-len 256 --device-batch-size 4 --total-batch-size 1024
       --num-iterations $steps --warmup-steps 0 --eval-every -1 --sample-every -1 --core-metric-every -1
       --model-tag busybench"

hog=""
stop_hog() { if [ -n "$hog" ]; then kill "$hog" 2>/dev/null || true; wait "$hog" 2>/dev/null || true; hog=""; fi; }
trap stop_hog EXIT
start_hog() { taskset -c "$busy_cpu" sh -c 'while :; do :; done' & hog=$!; sleep 0.5; }

# Median of the numbers on stdin.
# The fastest step: other processes only slow steps down, so on a loaded machine it is the least
# disturbed figure (printed next to the median).
best() { sort -g | tail -1; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
# tok/s of the steps >= 2 of the logs given.
step_tps() {
  cat "$@" | grep -E '(^|\] )step [0-9]+/' | awk -F'step ' '{split($2,a,"/"); if (a[1]+0 >= 2) print}' |
    sed -E 's/.*tok\/sec: ([0-9,]+).*/\1/' | tr -d ,
}
load() { cut -d' ' -f1 /proc/loadavg; }

rm -f "$logs"/quiet.*.log "$logs"/busy.*.log "$logs"/one.*.log "$logs"/fixed.*.log
loads=()
for rep in $(seq 1 "$repeat"); do
  loads+=("$(load)")
  echo "== default threads, quiet (run $rep of $repeat; load average $(load))"
  "$bin" $flags > "$logs/quiet.$rep.log" 2>&1 || { tail -20 "$logs/quiet.$rep.log"; exit 1; }
  echo "== default threads, CPU $busy_cpu busy (run $rep of $repeat)"
  start_hog
  "$bin" $flags > "$logs/busy.$rep.log" 2>&1 || { tail -20 "$logs/busy.$rep.log"; exit 1; }
  echo "== --threads 1 on CPU $free_cpu, CPU $busy_cpu busy (run $rep of $repeat)"
  taskset -c "$free_cpu" "$bin" $flags --threads 1 > "$logs/one.$rep.log" 2>&1 ||
    { tail -20 "$logs/one.$rep.log"; exit 1; }
  echo "== --threads $n_cpus (fixed), CPU $busy_cpu busy (run $rep of $repeat)"
  "$bin" $flags --threads "$n_cpus" > "$logs/fixed.$rep.log" 2>&1 || { tail -20 "$logs/fixed.$rep.log"; exit 1; }
  grep -h '^Threads: [0-9]* ->' "$logs/busy.$rep.log" | sed 's/^/   default run: /' || true
  stop_hog
done

echo
echo "d$depth (T 256, B 4, vocab $vocab), median tok/s over steps 2..$((steps - 1)) of $repeat runs each; logs in $logs"
grep -m1 -h 'wait policy' "$logs/quiet.1.log" || true
echo "load average before each repeat (1 min; the busy loop and the runs themselves count): ${loads[*]}"
row() { printf '%-44s %10s %10s\n' "$1" "$(step_tps "$logs"/$2.*.log | median)" "$(step_tps "$logs"/$2.*.log | best)"; }
ratio() { awk -v a="$(step_tps "$logs"/$2.*.log | $4)" -v b="$(step_tps "$logs"/$3.*.log | $4)" 'BEGIN {printf "%.2fx", a / b}'; }
printf '%-44s %10s %10s\n' "run" "tok/s" "best step"
row "default threads, quiet" quiet
row "default threads, one core busy" busy
row "--threads 1 on the free core, one core busy" one
row "--threads $n_cpus (fixed), one core busy" fixed
printf '%-44s %10s %10s\n' "ratio default / --threads 1, one core busy" "$(ratio x busy one median)" "$(ratio x busy one best)"
printf '%-44s %10s %10s\n' "ratio --threads $n_cpus / --threads 1, busy" "$(ratio x fixed one median)" "$(ratio x fixed one best)"
echo "host: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $n_cpus CPUs"
for kind in quiet busy one fixed; do
  printf '%s per run (median of its steps):' "$kind"
  for f in "$logs/$kind".*.log; do printf ' %s' "$(step_tps "$f" | median)"; done
  echo
done
