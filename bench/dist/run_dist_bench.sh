#!/usr/bin/env bash
# Data-parallel benchmark (a benchmark, not a test): real `nanochat base-train` runs of the d4
# model (head-dim 128, T 512, B 8, window SSSL, vocab 32768) on the demo corpus, compared in one
# invocation:
#   1. one rank x 1 thread                       (the baseline)
#   2. two ranks x 1 thread on this host         (`nanochat run --nproc-per-node 2`; goal >= 1.9x)
#   3. two "hosts" x 1 rank x 1 thread over a 1 Gbit/s link: two network namespaces joined by a
#      veth pair with a tbf rate limit, one `nanochat run --nnodes 2` per namespace; printed with
#      the share of the step spent waiting on communication (goal <= 10%).
# Each run prints nanochat's log lines; this script takes the median tok/s and comm-wait share
# over the steps after the first two (warm-up) and prints a table with the ratios.
#
# usage: bench/dist/run_dist_bench.sh [--steps N] [--repeat R] [--batch TOKENS]
#            [--link-batch TOKENS,...] [--rate 1gbit] [--no-netns] [--dir DIR] [--bin PATH]
#   --steps N        optimizer steps per run (default 8; the first 2 are not counted)
#   --repeat R       runs 1 and 2 alternate R times (default 2); medians over all their steps
#                    (on a shared VM single runs vary by +-10%)
#   --batch T        total batch (tokens per step) of runs 1 and 2 (default 8192 = 2 micro-batches)
#   --link-batch L   total batch(es) of run 3, comma-separated (default 32768,65536)
#   --rate R         tc tbf rate of the link (default 1gbit)
#   --no-netns       skip run 3 (it needs root, iproute2 and tc)
#   --dir DIR        NANOCHAT_BASE_DIR for the corpus, tokenizer and checkpoints
#                    (default /tmp/nanochat-dist-bench; the corpus and the vocab-32768 tokenizer
#                    are made there on the first run, ~1-2 minutes)
#   --bin PATH       the nanochat binary (default build/nanochat)
# Run it on an otherwise idle machine: other processes on the same cores change every figure.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
steps=8
repeat=2
batch=8192
link_batches=32768,65536
rate=1gbit
netns=1
dir=/tmp/nanochat-dist-bench
bin="$repo/build/nanochat"
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --link-batch) link_batches="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    --no-netns) netns=0; shift ;;
    --dir) dir="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "run_dist_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [ "$steps" -lt 3 ]; then echo "run_dist_bench.sh: --steps must be >= 3" >&2; exit 2; fi
[ -x "$bin" ] || { echo "run_dist_bench.sh: no binary at $bin; build it first (bash scripts/build.sh)" >&2; exit 1; }
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
export NANOCHAT_BASE_DIR="$dir"
mkdir -p "$dir"
logs="$dir/logs"
mkdir -p "$logs"

# Corpus and a vocab-32768 tokenizer (the benchmark's model has nanochat's vocabulary size).
if [ ! -f "$dir/base_data_climbmix/DEMO_CORPUS" ]; then
  echo "== building the demo corpus in $dir (once)"
  NANOCHAT_BIN="$bin" bash "$repo/scripts/demo_corpus.sh" > "$logs/corpus.log" 2>&1 ||
    { tail -20 "$logs/corpus.log"; exit 1; }
fi
if [ ! -f "$dir/tokenizer/tokenizer.json" ] || ! grep -q '"vocab_size": *32768' "$dir/tokenizer/tokenizer.json" 2>/dev/null; then
  echo "== training the vocab-32768 tokenizer (once)"
  "$bin" tok-train --vocab-size 32768 > "$logs/tok.log" 2>&1 || { tail -20 "$logs/tok.log"; exit 1; }
fi

train_flags() {  # $1 = total batch, $2 = tag
  echo "base-train --depth 4 --head-dim 128 --max-seq-len 512 --window-pattern SSSL --device-batch-size 8" \
       "--total-batch-size $1 --num-iterations $steps --warmup-steps 0 --eval-every -1 --sample-every -1" \
       "--core-metric-every -1 --model-tag $2"
}

# Median of the numbers on stdin.
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# "tok_s comm_pct" medians from a base-train log, steps >= 2.
summarize() {
  local log="$1"
  local tps comm
  tps=$(grep -E '(^|\] )step [0-9]+/' "$log" | awk -F'step ' '{split($2,a,"/"); if (a[1]+0 >= 2) print}' |
        sed -E 's/.*tok\/sec: ([0-9,]+).*/\1/' | tr -d , | median)
  comm=$(grep -E '(^|\] )step [0-9]+/' "$log" | awk -F'step ' '{split($2,a,"/"); if (a[1]+0 >= 2) print}' |
         { grep -o 'comm wait: [0-9.]*' || true; } | awk '{print $3}' | median)
  [ "$comm" = nan ] && comm=-
  echo "$tps $comm"
}

results=()
record() { results+=("$1|$2|$3|$4"); }  # label | batch | tok/s | comm%

rm -f "$logs"/w1.*.log "$logs"/w2.*.log
for rep in $(seq 1 "$repeat"); do
  echo "== 1 rank x 1 thread, total batch $batch (run $rep of $repeat)"
  "$bin" $(train_flags "$batch" bench1) --threads 1 > "$logs/w1.$rep.log" 2>&1 || { tail -20 "$logs/w1.$rep.log"; exit 1; }
  echo "== 2 ranks x 1 thread on this host, total batch $batch (run $rep of $repeat)"
  "$bin" run --nproc-per-node 2 --threads-per-rank 1 --master-port 29561 $(train_flags "$batch" bench2) \
    > "$logs/w2.$rep.log" 2>&1 || { tail -20 "$logs/w2.$rep.log"; exit 1; }
done
cat "$logs"/w1.*.log > "$logs/w1.log"
cat "$logs"/w2.*.log > "$logs/w2.log"
read -r t1 c1 < <(summarize "$logs/w1.log")
record "1 rank x 1 thread" "$batch" "$t1" "-"
read -r t2 c2 < <(summarize "$logs/w2.log")
record "2 ranks x 1 thread, one host" "$batch" "$t2" "$c2"

if [ "$netns" = 1 ]; then
  ip=/usr/sbin/ip
  id="ncb$$"
  ns_a="${id}a" ns_b="${id}b"
  cleanup() { "$ip" netns del "$ns_a" 2>/dev/null || true; "$ip" netns del "$ns_b" 2>/dev/null || true; }
  trap cleanup EXIT
  if "$ip" netns add "$ns_a" 2>/dev/null && "$ip" netns add "$ns_b"; then
    "$ip" link add "${id}x" type veth peer name "${id}y"
    "$ip" link set "${id}x" netns "$ns_a"
    "$ip" link set "${id}y" netns "$ns_b"
    "$ip" -n "$ns_a" addr add 10.79.0.1/24 dev "${id}x"
    "$ip" -n "$ns_b" addr add 10.79.0.2/24 dev "${id}y"
    for ns in "$ns_a" "$ns_b"; do "$ip" -n "$ns" link set lo up; done
    "$ip" -n "$ns_a" link set "${id}x" up
    "$ip" -n "$ns_b" link set "${id}y" up
    "$ip" netns exec "$ns_a" tc qdisc add dev "${id}x" root tbf rate "$rate" burst 256kb latency 50ms
    "$ip" netns exec "$ns_b" tc qdisc add dev "${id}y" root tbf rate "$rate" burst 256kb latency 50ms
    IFS=, read -ra lbs <<< "$link_batches"
    for lb in "${lbs[@]}"; do
      echo "== 2 hosts (namespaces, $rate link) x 1 rank x 1 thread, total batch $lb"
      node() {  # $1 = node rank
        NANOCHAT_JOB_TOKEN=bench "$ip" netns exec "$([ "$1" = 0 ] && echo "$ns_a" || echo "$ns_b")" \
          "$bin" run --nnodes 2 --node-rank "$1" --nproc-per-node 1 --threads-per-rank 1 \
          --master-addr 10.79.0.1 --master-port 29562 $(train_flags "$lb" "benchl$lb")
      }
      node 0 > "$logs/link$lb.n0.log" 2>&1 & p0=$!
      node 1 > "$logs/link$lb.n1.log" 2>&1 & p1=$!
      ok=1
      wait "$p0" || ok=0
      wait "$p1" || ok=0
      if [ "$ok" != 1 ]; then tail -20 "$logs/link$lb.n0.log" "$logs/link$lb.n1.log"; exit 1; fi
      read -r tl cl < <(summarize "$logs/link$lb.n0.log")
      record "2 hosts x 1 rank, $rate link" "$lb" "$tl" "$cl"
    done
  else
    echo "(skipping the two-namespace run: 'ip netns add' failed; it needs root and iproute2)"
  fi
fi

echo
echo "d4 (head-dim 128, T 512, B 8, vocab 32768), medians over steps 2..$((steps - 1)) (runs 1-2: of $repeat runs each); logs in $logs"
printf '%-34s %12s %10s %9s %14s\n' "run" "total batch" "tok/s" "vs 1x1" "comm wait"
for r in "${results[@]}"; do
  IFS='|' read -r label b t c <<< "$r"
  ratio=$(awk -v t="$t" -v base="$t1" 'BEGIN {printf "%.2fx", t / base}')
  printf '%-34s %12s %10s %9s %13s%s\n' "$label" "$b" "$t" "$ratio" "$c" "$([ "$c" = "-" ] && echo "" || echo "%")"
done
