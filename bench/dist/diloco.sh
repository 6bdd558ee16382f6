#!/usr/bin/env bash
# Slow links (a benchmark, not a test): `base-train --sync zero2` against `--sync diloco` on two
# nodes in two network namespaces joined by a veth pair shaped by tc netem (rate and delay on both
# ends: RTT = 2 x delay). Each node is one process with one thread pinned to its own core; node 1
# may be slowed to 1/--ratio of a core by a CPU quota (cgroup v1 cpu.cfs_quota_us or v2 cpu.max).
# For every link rate it prints, per run, the job's tok/s over the steps after --skip (all the
# job's tokens over the sum of rank 0's step times, outer exchanges included), that as a fraction
# of the sum of the two nodes' speeds alone (each node training by itself, same flags: "of sum"
# one after the other, as on two machines; "of both" both at once, each with the other's load on
# this host's shared cache and memory bus, the most a pair on one host can reach), and the
# final val bpb with its difference from the synchronous run's (the same tokens: same steps and
# total batch). The synchronous run's bpb does not depend on the link: it is run in full once,
# over the namespaces' link unshaped (its line "none"); on each rate only --sync-steps steps of it
# are timed.
#
# usage: sudo bench/dist/diloco.sh [--bin PATH] [--dir DIR] [--depth 4] [--seq-len 256] [--device-batch 4]
#            [--batch TOKENS] [--steps N] [--sync-steps N] [--skip K] [--rates "1gbit 20mbit"]
#            [--rtt-ms 40] [--every "10 50"] [--dtypes "float32 int8"] [--outer "0.7 0.9"] [--ratio 1]
#            [--overlap "0 2"] [--shaper auto|tbf] [--known "SUM BOTH BPB"] [--alone-steps 6]
#   --dir DIR     NANOCHAT_BASE_DIR with the demo corpus and a tokenizer (default ~/.cache/nanochat,
#                 the quickstart's); node 1 gets an empty folder of its own
#   --outer "LR MU"  the outer learning rate and momentum (default the DiLoCo paper's 0.7 0.9)
#   --overlap     --outer-overlap values to run: steps the nodes train on while the exchange travels
#                 (default 0: they wait for it at each boundary)
#   --shaper tbf  shape the rate only, in the kernel (tc tbf, no added delay): where netem is missing
#                 and the delay line's CPU would compete with the nodes (default auto: netem, else
#                 the delay line)
#   --known "SUM BOTH BPB"  reuse an earlier invocation's figures with the same model and batch
#                 flags (its "sum", "both alone at once" sum and zero2 val bpb): skips the nodes'
#                 runs alone and the synchronous run in full (--sync-steps 0 skips the shaped one);
#                 the fractions are then against figures of another moment: read the end's line.
#                 --known BPB gives the synchronous val bpb only (from a run with the same flags,
#                 e.g. on loopback: the link does not change it); the nodes alone are measured
#   --alone-steps N  timed steps of each node's runs alone (after --skip; default 6)
# At the end both nodes run alone again (at once, then one after the other): the host's speed may
# have moved during the invocation; the lines say by how much, and the last run's fractions
# against the means of the figures before and after it.
# Needs: root, ip and tc (iproute2), taskset, and tc netem or /dev/net/tun (then the user-space
# bench/dist/delay_line.cpp shapes the link: `cmake --build build --target delay_line`); a cgroup cpu controller (v1 or v2) for --ratio > 1. Quiet host.
set -euo pipefail
PATH="$PATH:/usr/sbin:/sbin"
repo="$(cd "$(dirname "$0")/../.." && pwd)"
me=diloco.sh
bin="$repo/build/nanochat" dir="${NANOCHAT_BASE_DIR:-$HOME/.cache/nanochat}"
depth=4 seq_len=256 dev_batch=4 batch=8192 steps=60 sync_steps=6 skip=2
rates="1gbit 100mbit 20mbit" rtt_ms=40 every="10 50" dtypes="float32 bfloat16 int8" outer="0.7 0.9" ratio=1 overlap=0 shaper=auto known="" alone_steps=6
die() { echo "$me: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || die "$1 needs a value"
  case "$1" in
    --bin) bin="$2" ;; --dir) dir="$2" ;; --depth) depth="$2" ;; --seq-len) seq_len="$2" ;;
    --device-batch) dev_batch="$2" ;; --batch) batch="$2" ;; --steps) steps="$2" ;; --sync-steps) sync_steps="$2" ;;
    --skip) skip="$2" ;; --rates) rates="$2" ;; --rtt-ms) rtt_ms="$2" ;; --every) every="$2" ;;
    --dtypes) dtypes="$2" ;; --outer) outer="$2" ;; --ratio) ratio="$2" ;; --overlap) overlap="$2" ;; --shaper) shaper="$2" ;;
    --known) known="$2" ;; --alone-steps) alone_steps="$2" ;;
    *) die "unknown argument '$1' (see the usage at the top of $0)" ;;
  esac
  shift 2
done
[ "$(id -u)" = 0 ] || die "needs root (network namespaces, tc, cgroup)"
[ "$shaper" = auto ] || [ "$shaper" = tbf ] || die "--shaper must be auto or tbf (got '$shaper')"
case "$(wc -w <<< "$known")" in 0 | 1 | 3) ;; *) die "--known needs SUM BOTH BPB or BPB alone (got '$known')" ;; esac
[ -x "$bin" ] || die "no nanochat binary at $bin (bash scripts/build.sh, or --bin)"
[ -f "$dir/tokenizer/tokenizer.json" ] || die "no tokenizer in $dir: run the quickstart (bash scripts/setup.sh) or pass --dir"
read -r outer_lr outer_mu <<< "$outer"
logs=$(mktemp -d /tmp/nanochat-diloco-XXXXXX)
n1_dir="$logs/node1-empty"
mkdir -p "$n1_dir"
id="ncd$$" ns0="" ns1="" cg="" sum_given=""
cleanup() {
  [ -n "${line_pid:-}" ] && kill "$line_pid" 2> /dev/null || true
  for ns in "$ns0" "$ns1"; do
    [ -n "$ns" ] || continue
    for p in $(ip netns pids "$ns" 2> /dev/null); do kill -KILL "$p" 2> /dev/null || true; done
    ip netns del "$ns" 2> /dev/null || true
  done
  if [ -n "$cg" ]; then
    for p in $(cat "$cg/cgroup.procs" 2> /dev/null); do kill -KILL "$p" 2> /dev/null || true; done
    sleep 0.5
    rmdir "$cg" 2> /dev/null || true
  fi
}
trap cleanup EXIT
ip netns add "${id}a" && ns0="${id}a"
ip netns add "${id}b" && ns1="${id}b"
ip link add "${id}x" type veth peer name "${id}y"
ip link set "${id}x" netns "$ns0" && ip link set "${id}y" netns "$ns1"
ip -n "$ns0" addr add 10.82.0.1/24 dev "${id}x" && ip -n "$ns1" addr add 10.82.0.2/24 dev "${id}y"
for ns in "$ns0" "$ns1"; do ip -n "$ns" link set lo up; done
ip -n "$ns0" link set "${id}x" up && ip -n "$ns1" link set "${id}y" up
# The shaped link: tc netem on the veth pair where the kernel has it (rate and half the RTT each
# way), else bench/dist/delay_line.cpp (build/bench/delay_line), a user-space link over a TUN pair
# (10.83.0.x) with the same rate and delay. master_addr follows.
master_addr=10.82.0.1 line_pid=""
has_netem=0
ip netns exec "$ns0" tc qdisc add dev lo root netem delay 1ms 2> /dev/null && has_netem=1 &&
  ip netns exec "$ns0" tc qdisc del dev lo root
shape() {  # $1 = rate ("none": the veth as it is)
  local half bits
  half=$(awk -v r="$rtt_ms" 'BEGIN { printf "%g", r / 2 }')
  [ -n "$line_pid" ] && { kill "$line_pid" 2> /dev/null || true; wait "$line_pid" 2> /dev/null || true; line_pid=""; }
  master_addr=10.82.0.1
  [ "$1" = none ] && return 0
  if [ "$shaper" = tbf ]; then
    ip netns exec "$ns0" tc qdisc replace dev "${id}x" root tbf rate "$1" burst 64kb latency 400ms
    ip netns exec "$ns1" tc qdisc replace dev "${id}y" root tbf rate "$1" burst 64kb latency 400ms
    echo "   link: tc tbf, $1, no added delay (the veth's own round trip)"
    return 0
  fi
  if [ "$has_netem" = 1 ]; then
    ip netns exec "$ns0" tc qdisc replace dev "${id}x" root netem rate "$1" delay "${half}ms" limit 100000
    ip netns exec "$ns1" tc qdisc replace dev "${id}y" root netem rate "$1" delay "${half}ms" limit 100000
    echo "   link: tc netem, $1, RTT $rtt_ms ms"
    return 0
  fi
  bits=$(awk -v r="$1" 'BEGIN { n = r + 0; u = tolower(substr(r, length(n "") + 1));
    m = u ~ /^g/ ? 1e9 : u ~ /^m/ ? 1e6 : u ~ /^k/ ? 1e3 : 1; printf "%g", n * m }')
  local line_bin
  line_bin="$(dirname "$bin")/bench/delay_line"
  [ -x "$line_bin" ] || die "no tc netem in this kernel and no delay line at $line_bin: cmake --build $(dirname "$bin") --target delay_line (or --shaper tbf)"
  # 9,000-byte packets: the line then costs the host's cores about what the kernel's own path with
  # a NIC's offloads would (delay_line.cpp's header); at 1,500 bytes three times as much.
  "$line_bin" "$ns0" "$ns1" --rate "$bits" --delay-ms "$half" --tag "${id}t" --mtu 9000 \
    > "$logs/line-$1.log" 2>&1 &
  line_pid=$!
  for _ in $(seq 50); do grep -q "link up" "$logs/line-$1.log" && break; sleep 0.1; done
  grep -q "link up" "$logs/line-$1.log" || die "the delay line did not come up ($logs/line-$1.log)"
  master_addr=10.83.0.1
  echo "   link: no tc netem in this kernel; user-space delay line ($line_bin), $1, RTT $rtt_ms ms"
}
slow=()
if [ "$ratio" != 1 ]; then
  quota=$(awk -v r="$ratio" 'BEGIN { printf "%d", 10000 / r }')
  if [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then  # cgroup v1's cpu hierarchy
    cg=/sys/fs/cgroup/cpu/nanochat-diloco-$$
    mkdir "$cg" || die "cannot create the cgroup $cg"
    echo 10000 > "$cg/cpu.cfs_period_us" && echo "$quota" > "$cg/cpu.cfs_quota_us" || die "cannot set $cg's quota"
  else  # cgroup v2
    root=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)
    [ -n "$root" ] && grep -qw cpu "$root/cgroup.controllers" || die "no cgroup cpu controller (v1 or v2) for --ratio"
    grep -qw cpu "$root/cgroup.subtree_control" || echo +cpu > "$root/cgroup.subtree_control" ||
      die "cannot enable the cpu controller (echo +cpu > $root/cgroup.subtree_control)"
    cg=$root/nanochat-diloco-$$
    mkdir "$cg" || die "cannot create the cgroup $cg"
    echo "$quota 10000" > "$cg/cpu.max" || die "cannot set $cg/cpu.max"
  fi
  slow=(bash -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' in_cgroup "$cg")
fi
train() {  # $1 = tag, $2 = steps, then extra flags; evaluates at the start and the end (eval=N)
  local tag="$1" n="$2"
  shift 2
  echo base-train --depth "$depth" --max-seq-len "$seq_len" --device-batch-size "$dev_batch" \
    --total-batch-size "$batch" --num-iterations "$n" --eval-every "${eval:-$n}" --eval-tokens 262144 --sample-every -1 \
    --core-metric-every -1 --threads 1 --model-tag "$tag" "$@"
}
# all the job's tokens over rank 0's step seconds, steps >= skip (metrics.jsonl of node 0)
rate_of() {
  python3 - "$dir/base_checkpoints/$1/metrics.jsonl" "$skip" "$batch" << 'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
dts = [r["dt_ms"] for r in recs if "dt_ms" in r and r["step"] >= int(sys.argv[2])]
print(f"{int(sys.argv[3]) * len(dts) / (sum(dts) / 1e3):.0f}")
EOF
}
frac() { awk -v a="$1" -v s="$2" 'BEGIN { printf "%.2f", a / s }'; }
bpb_of() { grep -a "Validation bpb" "$1" | tail -1 | sed -E 's/.*bpb: ([0-9.]+).*/\1/'; }
alone() {  # $1 = tag, $2 = core, then the wrapper: tok/s of one node by itself (no evaluation)
  local tag="$1" core="$2"
  shift 2
  rm -rf "$dir/base_checkpoints/$tag"
  "$@" taskset -c "$core" "$bin" $(eval=-1 train "$tag" "$((skip + alone_steps))") > "$logs/$tag.log" 2>&1 || die "$tag failed ($logs/$tag.log)"
  rate_of "$tag"
}
# Both nodes training by themselves at the same time (no link between them): each one's speed
# with the other's load on the host beside it, as in the pair. On one host the two cores share
# the cache and the memory bus, so this sum is the most a pair on this host can reach; on two
# machines the one-after-the-other sum is.
alone_together() {
  local r1
  alone dl-both1 1 "${slow[@]}" > "$logs/both1.rate" &
  r1=$!
  alone dl-both0 0
  wait "$r1" || die "dl-both1 failed ($logs/dl-both1.log)"
  cat "$logs/both1.rate"
}
pair() {  # $1 = tag, $2 = steps, then extra flags; leaves node 0's log in $logs/$1.log
  local tag="$1" n="$2" port=$((29700 + RANDOM % 200))
  shift 2
  rm -rf "$dir/base_checkpoints/$tag" "$n1_dir/base_checkpoints/$tag"
  local cmd=(run --nnodes 2 --master-addr "$master_addr" --master-port "$port" --threads-per-rank 1)
  NANOCHAT_BASE_DIR="$n1_dir" "${slow[@]}" ip netns exec "$ns1" taskset -c 1 "$bin" "${cmd[@]}" --node-rank 1 \
    $(train "$tag" "$n" "$@") > "$logs/$tag.node1.log" 2>&1 &
  local p1=$!
  NANOCHAT_BASE_DIR="$dir" ip netns exec "$ns0" taskset -c 0 "$bin" "${cmd[@]}" --node-rank 0 \
    $(train "$tag" "$n" "$@") > "$logs/$tag.log" 2>&1 || { tail -5 "$logs/$tag.log"; die "$tag failed"; }
  wait "$p1" || die "$tag: node 1 failed ($logs/$tag.node1.log)"
}
export NANOCHAT_BASE_DIR="$dir"
rtt_line="RTT ${rtt_ms} ms"
[ "$shaper" = tbf ] && rtt_line="no added delay (tbf)"
echo "== d$depth, T $seq_len, B $dev_batch, total batch $batch, $steps steps; $rtt_line; node 1 at 1/$ratio of a core"
echo "   $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load $(cut -d' ' -f1-3 /proc/loadavg)"
header() { printf "%-9s %-22s %9s %9s %9s %9s %8s\n" link run tok/s "of sum" "of both" "val bpb" "vs sync"; }
if [ "$(wc -w <<< "$known")" = 3 ]; then
  read -r sum both ref_bpb <<< "$known"
  sum_given=1
  echo "   (given) sum of the nodes alone $sum tok/s, both at once $both; the synchronous run's val bpb $ref_bpb"
  header
else
  a0=$(alone dl-alone0 0)
  a1=$(alone dl-alone1 1 "${slow[@]}")
  sum=$((a0 + a1))
  echo "   node 0 alone $a0 tok/s, node 1 alone $a1 tok/s, sum $sum (one after the other)"
  read -r b0 b1 <<< "$(alone_together | tr '\n' ' ')"
  both=$((b0 + b1))
  echo "   both alone at once: node 0 $b0 tok/s, node 1 $b1 tok/s, sum $both (\"of both\" below)"
  if [ -n "$known" ]; then
    ref_bpb=$known
    echo "   (given) the synchronous run's val bpb $ref_bpb"
    header
  else
    pair dl-sync "$steps"
    ref_bpb=$(bpb_of "$logs/dl-sync.log")
    t=$(rate_of dl-sync)
    header
    printf "%-9s %-22s %9s %9.2f %9.2f %9s %8s\n" none zero2 "$t" "$(frac "$t" "$sum")" "$(frac "$t" "$both")" "$ref_bpb" ""
  fi
fi
for r in $rates; do
  shape "$r"
  if [ "$sync_steps" -gt 0 ]; then
    pair dl-sync "$sync_steps"
    t=$(rate_of dl-sync)
    printf "%-9s %-22s %9s %9.2f %9.2f %9s %8s\n" "$r" "zero2 ($sync_steps steps)" "$t" "$(frac "$t" "$sum")" "$(frac "$t" "$both")" "" ""
  fi
  for h in $every; do
    for d in $dtypes; do
      for o in $overlap; do
        tag=dl-h$h-$d-$o label="diloco H=$h $d"
        [ "$o" = 0 ] || label="$label K=$o"
        pair "$tag" "$steps" --sync diloco --sync-every "$h" --sync-dtype "$d" --outer-lr "$outer_lr" \
          --outer-momentum "$outer_mu" --outer-overlap "$o"
        t=$(rate_of "$tag")
        b=$(bpb_of "$logs/$tag.log")
        printf "%-9s %-22s %9s %9.2f %9.2f %9s %+7.2f%%\n" "$r" "$label" "$t" \
          "$(frac "$t" "$sum")" "$(frac "$t" "$both")" "$b" "$(awk -v a="$b" -v s="$ref_bpb" 'BEGIN { print 100 * (a / s - 1) }')"
      done
    done
  done
done
# The host's speed drifts (a VM's neighbours): the nodes alone again at the end, beside the start,
# and the last run's fraction against the mean of the two (the run sat between them).
read -r e0 e1 <<< "$(alone_together | tr '\n' ' ')"
end=$((e0 + e1))
echo "   at the end, both alone at once: node 0 $e0 tok/s, node 1 $e1 tok/s, sum $end" \
  "($(awk -v a="$end" -v s="$both" 'BEGIN { printf "%+.1f", 100 * (a / s - 1) }')% from the $([ -n "$sum_given" ] && echo given || echo "start's") $both;" \
  "a run's fraction against it: its tok/s / $end)"
if [ -z "$sum_given" ] && [ -n "${t:-}" ]; then
  f0=$(alone dl-alone0 0)
  f1=$(alone dl-alone1 1 "${slow[@]}")
  fsum=$((f0 + f1))
  echo "   at the end, one after the other: node 0 $f0 tok/s, node 1 $f1 tok/s, sum $fsum" \
    "($(awk -v a="$fsum" -v s="$sum" 'BEGIN { printf "%+.1f", 100 * (a / s - 1) }')% from the start's $sum)"
  echo "   the last run ($t tok/s) against the means of start and end: of sum" \
    "$(awk -v t="$t" -v a="$sum" -v b="$fsum" 'BEGIN { printf "%.3f", 2 * t / (a + b) }'), of both" \
    "$(awk -v t="$t" -v a="$both" -v b="$end" 'BEGIN { printf "%.3f", 2 * t / (a + b) }')"
fi
echo "logs: $logs"
