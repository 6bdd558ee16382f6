#!/usr/bin/env bash
# Unequal ranks (a benchmark, not a test): data-parallel `nanochat base-train` with one fast and
# one slow rank. The slow rank gets a share of one core through a CPU quota of the cgroup cpu
# controller (quota = period / ratio); each process has 1 thread and, with 2 or more cores, the
# fast and the slow rank are pinned to different cores (taskset). For each speed ratio it measures
#   fast alone    the fast rank training by itself (one process, the whole batch)
#   slow alone    the slow rank by itself, under its quota
#   pair even     both ranks as a 2-node job, each step's micro-batches split equally
#                 (`base-train --balance even`)
#   pair speed    the same with the micro-batches split in proportion to each rank's speed
#                 (`--balance speed`)
# on two topologies:
#   host          two `nanochat run` nodes on this host over loopback (--allow-loopback-master)
#   netns         two network namespaces joined by a veth pair limited to 1 Gbit/s (tc tbf)
# and prints a table of the median tok/s over the steps after the first --skip ones, with
# pair / (fast alone + slow alone) (1.00 = the pair adds up its ranks' speeds) and
# pair / fast alone (above 1 = adding the slow machine helps).
# Config: d4, T 256, B 4, total batch 32,768 tokens (32 micro-batches a step), 12 steps;
# evaluation, sampling and CORE off (base-train still saves the last step; it is deleted).
#
# `--motivating` instead runs the case this is about: d8, T 512, the two namespaces over 1 Gbit/s,
# the second node at a third of the first's speed; it prints the pair (even and speed) against
# the first node alone.
#
# `--data-wait` instead measures the data feed: the d4 pair over the two namespaces (1 Gbit/s),
# both nodes at full speed, once with node 0 serving the data to a node 1 whose base folder is
# empty (the default) and once with every node reading its own copy (`--local-data`); it prints
# tok/s and each rank's median seconds per step spent getting its rows (metrics.jsonl
# rank_data_ms), in ms and as a share of the step.
#
# usage: bench/dist/unequal.sh [--bin PATH] [--dir DIR] [--ratios 1,2,4] [--topology host|netns|both]
#            [--steps N] [--skip K] [--batch TOKENS] [--rate 1gbit] [--port P] [--motivating | --data-wait]
#   --bin PATH       the nanochat binary (default build/nanochat); this script builds nothing
#   --dir DIR        NANOCHAT_BASE_DIR for corpus, tokenizer, checkpoints and logs (default
#                    /tmp/nanochat-unequal-bench; a demo corpus and a vocab-8192 tokenizer are
#                    made there like the quickstart does when missing, a few minutes once)
#   --ratios LIST    fast:slow speed ratios, comma-separated (default 1,2,4; decimals allowed)
#   --topology T     host, netns or both (default both)
#   --steps N        optimizer steps per run (default 12)
#   --skip K         first steps left out of the median (default 2)
#   --batch TOKENS   total batch per step (default 32768; a multiple of B x T)
#   --rate R         tc rate of the namespaces' link (default 1gbit)
#   --port P         first master port (default 29571; each pair run uses the next one)
#   --motivating     run the d8 case described above instead of the table
#   --data-wait      measure the data feed's wait per step (above) instead of the table
# Environment: BALANCE_FLAGS=0 runs the pairs without `--balance` (for builds without the flag:
# both pair columns then use the build's own split). UNEQUAL_RUN_TIMEOUT: seconds before one run
# is stopped (default 3600).
# Needs: root, a cgroup cpu controller (v2, or v1's cpu.cfs_quota_us), taskset; for netns and
# --motivating also ip and tc. Run it on an otherwise idle machine.
set -euo pipefail
PATH="$PATH:/usr/sbin:/sbin"
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
me="unequal.sh"

# ---------------------------------------------------------------- options
bin="$repo/build/nanochat"
dir=/tmp/nanochat-unequal-bench
ratios=1,2,4
topology=both
steps=12
skip=2
batch=32768
rate=1gbit
port=29571
motivating=0
data_wait=0
balance_flags="${BALANCE_FLAGS:-1}"
run_timeout="${UNEQUAL_RUN_TIMEOUT:-3600}"
cg_period_us=10000  # CFS period of the slow rank's quota: short, so it is slowed evenly, not in bursts

die() { echo "$me: $*" >&2; exit 1; }

parse_args() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --motivating|--data-wait|-h|--help) ;;
      *) [ $# -ge 2 ] || die "$1 needs a value (see --help)" ;;
    esac
    case "$1" in
      --bin) bin="$2"; shift 2 ;;
      --dir) dir="$2"; shift 2 ;;
      --ratios) ratios="$2"; shift 2 ;;
      --topology) topology="$2"; shift 2 ;;
      --steps) steps="$2"; shift 2 ;;
      --skip) skip="$2"; shift 2 ;;
      --batch) batch="$2"; shift 2 ;;
      --rate) rate="$2"; shift 2 ;;
      --port) port="$2"; shift 2 ;;
      --motivating) motivating=1; shift ;;
      --data-wait) data_wait=1; shift ;;
      -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
      *) echo "$me: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
  done
  case "$topology" in host|netns|both) ;; *) die "--topology must be host, netns or both, not '$topology'" ;; esac
  local n
  for n in steps:"$steps" skip:"$skip" batch:"$batch" port:"$port"; do
    [[ "${n#*:}" =~ ^[0-9]+$ ]] || die "--${n%%:*} must be a whole number, not '${n#*:}'"
  done
  [ "$steps" -gt "$skip" ] || die "--steps ($steps) must be larger than --skip ($skip)"
  local r
  IFS=, read -ra ratio_list <<< "$ratios"
  for r in "${ratio_list[@]}"; do
    awk -v r="$r" 'BEGIN { exit !(r + 0 >= 1 && r + 0 <= 10) }' || die "--ratios: '$r' is not a number in [1, 10]"
  done
  if [ "$motivating" = 1 ]; then topology=netns; ratio_list=(3); fi
  if [ "$data_wait" = 1 ]; then topology=netns; ratio_list=(1); fi
}

# ---------------------------------------------------------------- preconditions
# Each missing piece is named with what to do about it.
check_requirements() {
  [ "$(id -u)" = 0 ] || die "needs root: it sets the slow rank's CPU quota in a cgroup under /sys/fs/cgroup" \
    "and makes network namespaces (run it with sudo)"
  [ -x "$bin" ] || die "no nanochat binary at $bin; build it first (bash scripts/build.sh) or pass --bin"
  bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
  command -v taskset > /dev/null || die "taskset not found (Debian package util-linux)"
  if [ "$topology" != host ]; then
    ip -V > /dev/null 2>&1 || die "ip not found or not runnable (Debian package iproute2); needed for the" \
      "network namespaces (or use --topology host)"
    tc -V > /dev/null 2>&1 || die "tc not found or not runnable (Debian package iproute2); needed to limit" \
      "the namespaces' link to $rate (or use --topology host)"
  fi
  local help
  help=$("$bin" base-train --help 2>&1 || true)
  if [ "$balance_flags" = 1 ] && ! grep -q -- '--balance' <<< "$help"; then
    die "$bin has no 'base-train --balance' flag; build a newer nanochat, or set BALANCE_FLAGS=0 to run" \
      "the pairs without it (both pair columns then use the build's own split)"
  fi
}

# ---------------------------------------------------------------- cgroup (the slow rank's CPU quota)
cg_dir=""      # the cgroup made for the slow rank
cg_root=""     # the mount point of the cpu controller
cg_version=""  # 2 or 1
# The prefix that runs a command inside that cgroup: a shell moves itself there, then execs the
# command, so it and everything it starts (launcher, rank) are in the cgroup from the start.
cg_wrap=()

# Finds a cgroup cpu controller: a cgroup2 mount listing "cpu" in cgroup.controllers, else a
# cgroup v1 hierarchy with the cpu controller. Sets cg_root and cg_version; fails if none.
find_cpu_cgroup() {
  local m
  for m in $(awk '$3 == "cgroup2" { print $2 }' /proc/mounts); do
    if grep -qw cpu "$m/cgroup.controllers" 2> /dev/null; then cg_root=$m cg_version=2; return 0; fi
  done
  for m in $(awk '$3 == "cgroup" && $4 ~ /(^|,)cpu(,|$)/ { print $2 }' /proc/mounts); do
    if [ -f "$m/cpu.cfs_quota_us" ]; then cg_root=$m cg_version=1; return 0; fi
  done
  return 1
}

# Makes the slow rank's cgroup (its quota is set per ratio by set_cpu_ratio).
make_cgroup() {
  find_cpu_cgroup || die "no cgroup cpu controller: no cgroup2 mount lists 'cpu' in cgroup.controllers" \
    "and no cgroup v1 'cpu' hierarchy with cpu.cfs_quota_us is mounted (see /proc/mounts; on cgroup v2 the" \
    "cpu controller must not be bound to a v1 hierarchy, and the kernel needs CONFIG_CFS_BANDWIDTH)"
  if [ "$cg_version" = 2 ] && ! grep -qw cpu "$cg_root/cgroup.subtree_control"; then
    # left enabled afterwards: other cgroups may rely on it by then
    echo +cpu > "$cg_root/cgroup.subtree_control" 2> /dev/null ||
      die "cannot enable the cpu controller for child cgroups ('echo +cpu > $cg_root/cgroup.subtree_control'" \
        "failed; in a container the cgroup root may hold processes, which forbids it)"
  fi
  cg_dir="$cg_root/nanochat-unequal-$$"
  mkdir "$cg_dir" || die "cannot create the cgroup $cg_dir"
  cg_wrap=(bash -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' in_cgroup "$cg_dir")
  echo "cgroup v$cg_version: the slow rank runs in $cg_dir"
}

# Gives the cgroup 1/ratio of one core: quota = period / ratio.
set_cpu_ratio() {  # $1 = ratio
  local quota
  quota=$(awk -v p="$cg_period_us" -v r="$1" 'BEGIN { printf "%d", p / r }')
  [ "$quota" -ge 1000 ] || die "ratio $1 gives a CPU quota of $quota us, under the kernel's minimum of 1000 us"
  if [ "$cg_version" = 2 ]; then
    echo "$quota $cg_period_us" > "$cg_dir/cpu.max"
  else
    echo "$cg_period_us" > "$cg_dir/cpu.cfs_period_us"
    echo "$quota" > "$cg_dir/cpu.cfs_quota_us"
  fi
}

# ---------------------------------------------------------------- cores
fast_cpu="" slow_cpu=""

# Fast rank on the first allowed core, slow rank on the second (none with a single core).
pick_cores() {
  local list cpus=() part a b
  list=$(awk '/^Cpus_allowed_list/ { print $2 }' /proc/self/status)
  IFS=, read -ra parts <<< "$list"
  for part in "${parts[@]}"; do
    a=${part%-*} b=${part#*-}
    for ((c = a; c <= b; c++)); do cpus+=("$c"); done
  done
  if [ "${#cpus[@]}" -ge 2 ]; then
    fast_cpu=${cpus[0]} slow_cpu=${cpus[1]}
    echo "fast rank on core $fast_cpu, slow rank on core $slow_cpu"
  else
    echo "one core only: the ranks are not pinned and share it (the figures then mean little)"
  fi
}

# ---------------------------------------------------------------- network namespaces
ns_a="" ns_b=""
addr_a=10.81.0.1 addr_b=10.81.0.2

# Two namespaces joined by a veth pair whose both ends are limited to $rate.
make_netns() {
  local id="ncu$$"
  ip netns add "${id}a" || die "'ip netns add ${id}a' failed (root and iproute2 are needed)"
  ns_a="${id}a"
  ip netns add "${id}b" || die "'ip netns add ${id}b' failed"
  ns_b="${id}b"
  ip link add "${id}x" type veth peer name "${id}y" || die "cannot create the veth pair ${id}x/${id}y"
  ip link set "${id}x" netns "$ns_a"
  ip link set "${id}y" netns "$ns_b"
  ip -n "$ns_a" addr add "$addr_a/24" dev "${id}x"
  ip -n "$ns_b" addr add "$addr_b/24" dev "${id}y"
  ip -n "$ns_a" link set lo up
  ip -n "$ns_b" link set lo up
  ip -n "$ns_a" link set "${id}x" up
  ip -n "$ns_b" link set "${id}y" up
  ip netns exec "$ns_a" tc qdisc add dev "${id}x" root tbf rate "$rate" burst 256kb latency 50ms ||
    die "'tc qdisc add ... tbf rate $rate' failed in namespace $ns_a (kernel module sch_tbf?)"
  ip netns exec "$ns_b" tc qdisc add dev "${id}y" root tbf rate "$rate" burst 256kb latency 50ms ||
    die "'tc qdisc add ... tbf rate $rate' failed in namespace $ns_b"
  echo "namespaces $ns_a ($addr_a) and $ns_b ($addr_b), link limited to $rate"
}

# ---------------------------------------------------------------- clean-up
pids=()  # background runs started by this script

# Stops the runs still going (on an error or Ctrl-C), then removes the namespaces and the cgroup.
cleanup() {
  local p ns
  for p in "${pids[@]}"; do kill -TERM "$p" 2> /dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2> /dev/null || true; done
  for ns in "$ns_a" "$ns_b"; do
    [ -n "$ns" ] || continue
    for p in $(ip netns pids "$ns" 2> /dev/null); do kill -KILL "$p" 2> /dev/null || true; done
    ip netns del "$ns" 2> /dev/null || true
  done
  if [ -n "$cg_dir" ] && [ -d "$cg_dir" ]; then
    # a cgroup can be removed once empty; its processes are ours (runs being stopped)
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      rmdir "$cg_dir" 2> /dev/null && break
      for p in $(cat "$cg_dir/cgroup.procs" 2> /dev/null); do kill -KILL "$p" 2> /dev/null || true; done
      sleep 0.5
    done
    [ -d "$cg_dir" ] && echo "$me: could not remove the cgroup $cg_dir" >&2
  fi
  return 0
}

# ---------------------------------------------------------------- corpus and tokenizer
# The quickstart's preparation (scripts/setup.sh steps 3-4), skipped when already there.
prepare_data() {
  export NANOCHAT_BASE_DIR="$dir"
  if [ ! -f "$dir/base_data_climbmix/DEMO_CORPUS" ]; then
    echo "== building the demo corpus in $dir (once, a few minutes)"
    bash "$repo/scripts/demo_corpus.sh" --bin "$bin" > "$logs/corpus.log" 2>&1 ||
      { tail -20 "$logs/corpus.log"; die "building the demo corpus failed (log: $logs/corpus.log)"; }
  fi
  if [ ! -f "$dir/tokenizer/tokenizer.json" ]; then
    echo "== training the vocab-8192 tokenizer (once)"
    "$bin" tok-train --vocab-size 8192 > "$logs/tok.log" 2>&1 ||
      { tail -20 "$logs/tok.log"; die "training the tokenizer failed (log: $logs/tok.log)"; }
  fi
}


# ---------------------------------------------------------------- runs
depth=4 seq_len=256 dev_batch=4  # --motivating: d8, T 512
logs=""
tps=""         # tok/s of the last run
waits=""       # the data wait per step of the last pair run (data_wait)
n1_dir=""      # node 1's NANOCHAT_BASE_DIR in pair runs (default: the same folder as node 0)
pair_flags=()  # extra base-train flags of pair runs

# The base-train command line of a run (model tag = the run's label).
train_cmd() {  # $1 = label
  train=(base-train --depth "$depth" --max-seq-len "$seq_len" --device-batch-size "$dev_batch"
         --total-batch-size "$batch" --num-iterations "$steps" --warmup-steps 0 --threads 1
         --eval-every -1 --sample-every -1 --core-metric-every -1 --model-tag "$1")
}

# Median of the numbers on stdin.
median() { sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) printf "%.0f\n", a[(NR + 1) / 2]; else printf "%.0f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

# Median tok/s of a base-train log over the steps >= $skip. Its step lines read
# "step 00003/00012 (25.00%) | loss: ... | tok/sec: 1,234 | ..." (src/nanochat/train/report.cpp).
tok_per_sec() {  # $1 = log
  grep -E '(^|\] )step [0-9]+/[0-9]+ ' "$1" |
    sed -E 's/.*step ([0-9]+)\/[0-9]+ .*tok\/sec: ([0-9,]+).*/\1 \2/' | tr -d , |
    awk -v k="$skip" '$1 + 0 >= k { print $2 }' | median
}

# The prefix of every process: a deadline, then the core pinning.
prefix() {  # $1 = core ("" = none)
  pre=(timeout -k 10 "$run_timeout")
  if [ -n "$1" ]; then pre+=(taskset -c "$1"); fi
}

# One process by itself (the slow one under its quota); sets tps.
run_alone() {  # $1 = label, $2 = fast|slow
  local label="$1" log="$logs/$1.log" wrap=()
  echo "== $label"
  train_cmd "$label"
  if [ "$2" = fast ]; then prefix "$fast_cpu"; else prefix "$slow_cpu"; wrap=("${cg_wrap[@]}"); fi
  # in the background, so that a signal to this script stops it at once (see cleanup)
  "${wrap[@]}" "${pre[@]}" "$bin" "${train[@]}" > "$log" 2>&1 &
  pids=("$!")
  if ! wait "${pids[0]}"; then
    pids=()
    tail -20 "$log" >&2
    die "run '$label' failed (log: $log)"
  fi
  pids=()
  rm -rf "$dir/base_checkpoints/$label"
  tps=$(tok_per_sec "$log")
  echo "   $tps tok/s"
}

# A 2-node job, node 0 (rank 0) fast and node 1 slow, on loopback or in the two namespaces;
# sets tps to rank 0's figure (the job's tokens per second).
run_pair() {  # $1 = label, $2 = host|netns, $3 = even|speed
  local label="$1" topo="$2" mode="$3" master=127.0.0.1 extra=(--allow-loopback-master) ns0=() ns1=() p0 p1 ok=1
  if [ "$topo" = netns ]; then
    master=$addr_a extra=() ns0=(ip netns exec "$ns_a") ns1=(ip netns exec "$ns_b")
  fi
  port=$((port + 1))
  train_cmd "$label"
  [ "$balance_flags" = 1 ] && train+=(--balance "$mode")
  train+=("${pair_flags[@]}")
  local launch=("$bin" run --nnodes 2 --nproc-per-node 1 --threads-per-rank 1 --master-addr "$master"
                --master-port "$port" "${extra[@]}")
  echo "== $label"
  export NANOCHAT_JOB_TOKEN="unequal-$$"
  prefix "$fast_cpu"
  "${ns0[@]}" "${pre[@]}" "${launch[@]}" --node-rank 0 "${train[@]}" > "$logs/$label.n0.log" 2>&1 &
  p0=$!
  prefix "$slow_cpu"
  NANOCHAT_BASE_DIR="$n1_dir" "${cg_wrap[@]}" "${ns1[@]}" "${pre[@]}" "${launch[@]}" --node-rank 1 "${train[@]}" \
    > "$logs/$label.n1.log" 2>&1 &
  p1=$!
  pids=("$p0" "$p1")
  wait "$p0" || ok=0
  wait "$p1" || ok=0
  pids=()
  if [ "$ok" != 1 ]; then
    tail -20 "$logs/$label.n0.log" "$logs/$label.n1.log" >&2
    die "pair run '$label' failed (logs: $logs/$label.n0.log, $logs/$label.n1.log)"
  fi
  waits=$(data_wait "$dir/base_checkpoints/$label/metrics.jsonl")
  rm -rf "$dir/base_checkpoints/$label"
  tps=$(tok_per_sec "$logs/$label.n0.log")
  echo "   $tps tok/s"
}

# Each rank's median data wait per step over the steps >= $skip, from metrics.jsonl, whose step
# records hold "dt_ms" and "rank_data_ms": [rank 0, rank 1] (src/nanochat/train/train_loop.cpp):
# prints "rank 0 X ms (Y%), rank 1 ...".
data_wait() {  # $1 = metrics.jsonl
  local r ms pct out=""
  for r in 0 1; do
    local col
    col=$(awk -v k="$skip" -v r="$r" '
      function field(line, key,   i, v) { i = index(line, key); v = substr(line, i + length(key)); sub(/[],}].*/, "", v); return v }
      /"rank_data_ms"/ {
        s = substr($0, index($0, "\"rank_data_ms\":[") + 16); s = substr(s, 1, index(s, "]") - 1); split(s, a, ",")
        if (field($0, "\"step\":") + 0 >= k) printf "%.3f %.4f\n", a[r + 1], 100 * a[r + 1] / field($0, "\"dt_ms\":")
      }' "$1")
    ms=$(echo "$col" | awk '{ print $1 }' | median_f)
    pct=$(echo "$col" | awk '{ print $2 }' | median_f)
    out+="${out:+, }rank $r $ms ms ($pct%)"
  done
  echo "$out"
}

# Median of the numbers on stdin, with decimals.
median_f() { sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) printf "%.2f\n", a[(NR + 1) / 2]; else printf "%.2f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

# ---------------------------------------------------------------- report
rows=()  # "topology|ratio|fast|slow|even|speed"

ratio_of() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }

table_line() { printf '%-6s %7s %10s %10s %10s %10s %11s %11s %10s %10s\n' "$@"; }

# One table per topology. "f/s seen" is fast alone / slow alone: the ratio the quota gave (on a
# busy machine other processes slow both ranks and it falls short of the quota's).
print_table() {
  local note="" topo t r f s e p sum
  [ "$balance_flags" = 1 ] || note=" (BALANCE_FLAGS=0: no --balance passed, both pair columns use the build's split)"
  echo
  echo "d$depth, T $seq_len, B $dev_batch, total batch $batch, 1 thread per process; median tok/s over steps" \
       "$skip..$((steps - 1)); logs in $logs$note"
  for topo in host netns; do
    [ "$topology" = both ] || [ "$topology" = "$topo" ] || continue
    echo
    if [ "$topo" = host ]; then echo "one host (two nodes over loopback)"; else echo "two namespaces, $rate link"; fi
    table_line ratio "f/s seen" "fast alone" "slow alone" "pair even" "pair speed" "even/(f+s)" "speed/(f+s)" \
      "even/fast" "speed/fast"
    for row in "${rows[@]}"; do
      IFS='|' read -r t r f s e p <<< "$row"
      [ "$t" = "$topo" ] || continue
      sum=$(awk -v f="$f" -v s="$s" 'BEGIN { print f + s }')
      table_line "$r:1" "$(ratio_of "$f" "$s")" "$f" "$s" "$e" "$p" "$(ratio_of "$e" "$sum")" \
        "$(ratio_of "$p" "$sum")" "$(ratio_of "$e" "$f")" "$(ratio_of "$p" "$f")"
    done
  done
}

# Says so when other processes are running: they take CPU time from both ranks.
warn_if_busy() {
  local load cores
  load=$(cut -d' ' -f1 /proc/loadavg)
  cores=$(nproc)
  if awk -v l="$load" -v c="$cores" 'BEGIN { exit !(l > 0.5) }'; then
    echo "warning: load average $load on $cores cores before starting: other processes will slow both ranks," \
         "the slow rank's quota may not bind, and the figures will vary"
  fi
}

# ---------------------------------------------------------------- main
# The table: fast alone once; per ratio, slow alone and the two pairs on each topology.
run_table() {
  local r topo fast slow even
  run_alone fast-alone fast
  fast=$tps
  for r in "${ratio_list[@]}"; do
    set_cpu_ratio "$r"
    run_alone "slow-alone-r$r" slow
    slow=$tps
    for topo in host netns; do
      [ "$topology" = both ] || [ "$topology" = "$topo" ] || continue
      run_pair "$topo-r$r-even" "$topo" even
      even=$tps
      run_pair "$topo-r$r-speed" "$topo" speed
      rows+=("$topo|$r|$fast|$slow|$even|$tps")
    done
  done
  print_table
}

# --motivating: d8, T 512, two namespaces, the second node at a third of the first's speed.
run_motivating() {
  local first even
  depth=8 seq_len=512
  set_cpu_ratio 3
  run_alone d8-first-alone fast
  first=$tps
  run_pair d8-pair-even netns even
  even=$tps
  run_pair d8-pair-speed netns speed
  echo
  echo "d8, T 512, B $dev_batch, total batch $batch, two namespaces over $rate, node 1 at 1/3 of node 0's CPU;" \
       "median tok/s over steps $skip..$((steps - 1)); logs in $logs"
  [ "$balance_flags" = 1 ] || echo "(BALANCE_FLAGS=0: no --balance passed, both pair rows use the build's split)"
  printf '%-26s %10s %9s\n' run tok/s "vs node 0"
  printf '%-26s %10s %9s\n' "node 0 alone" "$first" 1.00
  printf '%-26s %10s %9s\n' "pair, --balance even" "$even" "$(ratio_of "$even" "$first")"
  printf '%-26s %10s %9s\n' "pair, --balance speed" "$tps" "$(ratio_of "$tps" "$first")"
}

# --data-wait: the d4 pair over the namespaces at full speed, served (node 1's folder empty) and
# with --local-data.
run_data_wait() {
  local empty served served_waits
  cg_wrap=()
  empty=$(mktemp -d /tmp/nanochat-empty-node1.XXXXXX)
  n1_dir=$empty
  run_pair dw-served netns speed
  served=$tps served_waits=$waits
  [ -z "$(ls -A "$empty" | grep -v fma_peak.json)" ] || echo "$me: note: node 1 wrote into its empty folder $empty"
  rm -rf "$empty"
  n1_dir=$dir pair_flags=(--local-data)
  run_pair dw-local netns speed
  echo
  echo "d$depth, T $seq_len, B $dev_batch, total batch $batch, two namespaces over $rate, both nodes at full speed;" \
       "median over steps $skip..$((steps - 1)); logs in $logs"
  printf '%-44s %8s   %s\n' run tok/s "data wait per step (median)"
  printf '%-44s %8s   %s\n' "node 0 serves the data (node 1's folder empty)" "$served" "$served_waits"
  printf '%-44s %8s   %s\n' "every node reads its own copy (--local-data)" "$tps" "$waits"
}

main() {
  parse_args "$@"
  check_requirements
  logs="$dir/logs"
  mkdir -p "$logs"
  exec 9> "$dir/.lock"
  flock -n 9 || die "another unequal.sh is running with --dir $dir (it would share the cores and the data)"
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  warn_if_busy
  make_cgroup
  pick_cores
  [ "$topology" = host ] || make_netns
  prepare_data
  n1_dir=$dir
  if [ "$motivating" = 1 ]; then
    run_motivating
  elif [ "$data_wait" = 1 ]; then
    run_data_wait
  else
    run_table
  fi
}

# one line: bash has read the exit before main runs, so editing this file during a run is harmless
main "$@"; exit
