#!/usr/bin/env bash
# Elastic jobs (a benchmark, not a test): two nodes in two network namespaces joined by a veth
# pair limited to 1 Gbit/s (tc tbf), node 0 with the data, node 1 with an empty base folder.
#
# Part 1, a node's loss: for each fault (kill: SIGKILL to every process of node 1; freeze: SIGSTOP
# to them, a laptop asleep; cut: node 1's end of the link taken down) an elastic job
# (`--nnodes 1:2`) trains until W steps are logged, the fault is applied, and the script prints
#   seconds     from the fault to node 0's next completed step (heartbeat detection included:
#               --heartbeat-timeout, default 10 s here as in a real job)
#   regroup     the job's own recovery_s (metrics.jsonl): from the loss found to training again
#   tok/s       the median over the steps before (two nodes) and after (node 0 alone)
# Part 2, the cost of node 0's copy of the job's state (`--copy-state-every K`): a fixed two-node
# job with K = 0 (no copy), 1 and 10; the median step time (dt) and the wall seconds from one step
# line to the next (the copy is made between steps) over the steps after --skip, and the cost of
# the wall time against K = 0.
#
# usage: bench/dist/elastic.sh [--bin PATH] [--dir DIR] [--depth D] [--batch TOKENS] [--seq T]
#            [--device-batch B] [--steps N] [--skip K] [--faults kill,freeze,cut] [--copies 1,10]
#            [--rate 1gbit] [--heartbeat S] [--port P] [--part 1|2|both]
#   --dir DIR   a base folder with a tokenizer and shards (default $NANOCHAT_BASE_DIR, else
#               ~/.cache/nanochat: the quickstart's)
#   defaults: d4, T 256, B 4, total batch 16,384, 30 steps (part 2: 12), skip 2, faults
#   kill,freeze,cut, copies 1,10, rate 1gbit, heartbeat 10 s, port 29591
# KEEP_LOGS=1 keeps the nodes' logs (the folder is printed at the end).
# Needs root, ip and tc. Run it on an otherwise idle machine; each node gets one thread per rank
# on a machine with fewer than 4 cores, else half of them.
set -euo pipefail
PATH="$PATH:/usr/sbin:/sbin"
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
me="elastic.sh"
die() { echo "$me: $*" >&2; exit 1; }

bin="$repo/build/nanochat"
dir="${NANOCHAT_BASE_DIR:-$HOME/.cache/nanochat}"
depth=4 batch=16384 seq=256 dbs=4 steps=30 steps2=12 skip=2 faults=kill,freeze,cut copies=1,10
rate=1gbit heartbeat=10 port=29591 part=both warm=8
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin="$2" ;; --dir) dir="$2" ;; --depth) depth="$2" ;; --batch) batch="$2" ;; --seq) seq="$2" ;;
    --device-batch) dbs="$2" ;; --steps) steps="$2"; steps2="$2" ;; --skip) skip="$2" ;; --faults) faults="$2" ;;
    --copies) copies="$2" ;; --rate) rate="$2" ;; --heartbeat) heartbeat="$2" ;; --port) port="$2" ;;
    --part) part="$2" ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
  shift 2
done
[ -x "$bin" ] || die "no binary at $bin (build it first: bash scripts/build.sh)"
[ -d "$dir/tokenizer" ] || die "$dir has no tokenizer: give --dir the quickstart's base folder"
[ "$(id -u)" = 0 ] || die "needs root (network namespaces)"
command -v ip >/dev/null && command -v tc >/dev/null || die "needs ip and tc (iproute2)"
cores=$(nproc); threads=$(( cores >= 4 ? cores / 2 : 1 ))

A=ncelA$$ B=ncelB$$ VA=ncelx$$ VB=ncely$$ ADDR=10.82.0.1
work=$(mktemp -d /tmp/nanochat-elastic-bench.XXXXXX)
cleanup() {
  for ns in $A $B; do
    pids=$(ip netns pids $ns 2>/dev/null || true)
    [ -n "$pids" ] && { kill -CONT $pids 2>/dev/null; kill -KILL $pids 2>/dev/null; } || true
    ip netns del $ns 2>/dev/null || true
  done
  if [ "${KEEP_LOGS:-0}" = 1 ]; then echo "logs kept in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
make_link() {
  ip netns add $A && ip netns add $B
  ip link add $VA type veth peer name $VB
  ip link set $VA netns $A && ip link set $VB netns $B
  ip -n $A addr add $ADDR/24 dev $VA && ip -n $B addr add 10.82.0.2/24 dev $VB
  ip -n $A link set $VA up && ip -n $B link set $VB up && ip -n $A link set lo up && ip -n $B link set lo up
  ip netns exec $A tc qdisc add dev $VA root tbf rate $rate burst 256kb latency 50ms
  ip netns exec $B tc qdisc add dev $VB root tbf rate $rate burst 256kb latency 50ms
}
make_link

train_flags() {  # $1 steps, $2 tag
  echo "base-train --depth $depth --max-seq-len $seq --device-batch-size $dbs --total-batch-size $batch \
--num-iterations $1 --warmup-steps 1 --eval-every -1 --sample-every -1 --core-metric-every -1 --save-every -1 \
--model-tag $2"
}
# node K of a job: $1 node, $2 nnodes, $3 port, $4 log, then the training flags
start_node() {
  local k=$1 nn=$2 p=$3 log=$4; shift 4
  local ns=$A base="$dir"
  if [ "$k" = 1 ]; then ns=$B; base="$work/node1"; mkdir -p "$base"; fi
  # every line stamped with the wall clock (the time between steps includes node 0's copy, which
  # the step's own dt does not)
  NANOCHAT_BASE_DIR="$base" ip netns exec $ns "$bin" run --nnodes $nn --node-rank $k --master-addr $ADDR \
    --master-port $p --threads-per-rank $threads --heartbeat-timeout $heartbeat "$@" 2>&1 |
    while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done > "$log" &
}
# seconds per step from the stamps of the step lines after the first --skip ones
wall_per_step() {
  grep '] step ' "$1" | tail -n +$((skip + 1)) | awk 'NR==1{a=$1} {b=$1; n=NR} END {if (n<2) print "nan"; else printf "%.3f", (b-a)/(n-1)}'
}
steps_logged() { grep -c '] step ' "$1" 2>/dev/null || true; }
# median of tok/sec (or dt in ms with "dt") over the step lines of stdin
median_of() {
  local what=$1
  if [ "$what" = dt ]; then sed -n 's/.*| dt: \([0-9.]*\)ms.*/\1/p'; else sed -n 's/.*| tok\/sec: \([0-9,]*\) .*/\1/p' | tr -d ,; fi |
    sort -g | awk '{v[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'
}
now() { date +%s.%N; }

part1() {
  printf '\nA node lost: d%s, T %s, total batch %s, %s, heartbeat %s s, %s threads per rank\n' \
    "$depth" "$seq" "$batch" "$rate" "$heartbeat" "$threads"
  printf '%-7s %10s %10s %14s %14s\n' fault seconds regroup "tok/s before" "tok/s after"
  local p=$port
  for f in ${faults//,/ }; do
    p=$((p + 1))
    local l0="$work/$f.0.log" l1="$work/$f.1.log" tag="elastic-bench-$f"
    rm -rf "$dir/base_checkpoints/$tag"
    start_node 0 1:2 $p "$l0" $(train_flags "$steps" "$tag")
    start_node 1 1:2 $p "$l1" $(train_flags "$steps" "$tag")
    local t0; t0=$(now)
    while [ "$(steps_logged "$l0")" -lt $warm ]; do
      sleep 0.2
      awk -v a="$t0" -v b="$(now)" 'BEGIN{exit !(b-a>1800)}' && die "no $warm steps in 30 min ($l0)"
    done
    local before; before=$(grep '] step ' "$l0" | tail -n +$((skip + 1)) | median_of tok)
    local n_before; n_before=$(steps_logged "$l0")
    local tf; tf=$(now)
    case $f in
      kill) kill -KILL $(ip netns pids $B) ;;
      freeze) kill -STOP $(ip netns pids $B) ;;
      cut) ip -n $B link set $VB down ;;
      *) die "unknown fault $f (kill, freeze or cut)" ;;
    esac
    local ts=""
    while :; do
      if grep -q 'left the job in step' "$l0" && [ -n "$(sed -n '/left the job in step/,$p' "$l0" | grep '] step ' | head -1)" ]; then
        ts=$(now); break
      fi
      awk -v a="$tf" -v b="$(now)" 'BEGIN{exit !(b-a>600)}' && { echo "$f: node 0 did not go on in 600 s ($l0)"; break; }
      sleep 0.02
    done
    wait "$(jobs -p | head -1)" 2>/dev/null || true
    pids=$(ip netns pids $B 2>/dev/null || true); [ -n "$pids" ] && { kill -CONT $pids; kill -KILL $pids; } 2>/dev/null || true
    wait 2>/dev/null || true
    [ "$f" = cut ] && ip -n $B link set $VB up
    local after; after=$(sed -n '/left the job in step/,$p' "$l0" | grep '] step ' | tail -n +2 | median_of tok)
    local regroup; regroup=$(grep -o '"recovery_s":[0-9.e-]*' "$dir/base_checkpoints/$tag/metrics.jsonl" | head -1 | cut -d: -f2)
    local secs=nan; [ -n "$ts" ] && secs=$(awk -v a="$tf" -v b="$ts" 'BEGIN{printf "%.1f", b-a}')
    printf '%-7s %10s %10.2f %14s %14s\n' "$f" "$secs" "${regroup:-nan}" "$before" "$after"
    rm -rf "$dir/base_checkpoints/$tag"
  done
}

part2() {
  printf '\nNode 0 copy of the job state every K steps: d%s, T %s, total batch %s, %s, fixed 2-node job\n' \
    "$depth" "$seq" "$batch" "$rate"
  printf '%-6s %14s %16s %10s\n' K "median dt ms" "wall s per step" cost
  local p=$((port + 10)) base=""
  for k in 0 ${copies//,/ }; do
    p=$((p + 1))
    local l0="$work/copy$k.0.log" tag="elastic-bench-copy$k"
    rm -rf "$dir/base_checkpoints/$tag"
    local extra=""; [ "$k" != 0 ] && extra="--copy-state-every $k"
    start_node 0 2 $p "$l0" $(train_flags "$steps2" "$tag") $extra
    start_node 1 2 $p "$work/copy$k.1.log" $(train_flags "$steps2" "$tag") $extra
    wait
    local dt; dt=$(grep '] step ' "$l0" | tail -n +$((skip + 1)) | median_of dt)
    local w; w=$(wall_per_step "$l0")
    [ -z "$base" ] && base=$w
    printf '%-6s %14s %16s %9s%%\n' "$k" "$dt" "$w" "$(awk -v a="$w" -v b="$base" 'BEGIN{printf "%.1f", (a/b-1)*100}')"
    rm -rf "$dir/base_checkpoints/$tag"
  done
}

echo "$("$bin" --version) on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $cores cores"
case $part in
  1) part1 ;; 2) part2 ;; both) part1; part2 ;; *) die "--part 1, 2 or both" ;;
esac
