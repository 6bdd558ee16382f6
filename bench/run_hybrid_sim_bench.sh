#!/usr/bin/env bash
# Simulated hybrid CPU benchmark (a benchmark, not a test): `nanochat run`'s default placement on a
# CPU with fast and slow cores (one rank per core type, launch/placement.h) against all cores in
# one rank. This machine's allowed CPUs are split in two: the first half plays the performance
# cores, the second half the efficiency cores, which a cgroup CPU quota slows to --slow of a core
# each. A fake sysfs tree (NANOCHAT_SYSFS_ROOT, a test/diagnostic variable) tells nanochat which
# CPUs are which. Real d4 runs (T 256, B 4, total batch --batch, default 2048) on the demo corpus,
# in one invocation:
#   1. "one rank": `nanochat base-train ... --threads <CPUs>`, one process with a fixed thread per
#      CPU, each bound to its CPU (OMP_PROC_BIND=close, OMP_PLACES=threads) so that the slow CPUs'
#      threads are slow (fixed: the thread tuner would drop them, core/thread_tuner.h)
#   2. "default":  `nanochat run`, one rank per core type pinned to its cores (the default there)
#   3. "fast alone": one rank on the fast CPUs only (--threads = their count)
# and prints tok/s, the ratios 2 / 1 and 2 / 3, and 2 / the ideal sum (fast alone x (1 + slow x slow CPUs /
# fast CPUs)). The runs alternate --repeat times; each figure is the median tok/s over the steps
# from --skip on (the row balancer needs a few steps to find the split) of all its runs.
# Throttling: every thread of the runs whose CPU affinity lies within the slow CPUs is moved into
# a cgroup whose quota is --slow x (slow CPUs) of a core (period 10 ms), checked every 0.2 s.
#
# usage: sudo bench/run_hybrid_sim_bench.sh [--steps N] [--skip S] [--repeat R] [--slow F]
#                                           [--depth D] [--batch N] [--dir DIR] [--bin PATH] [--port P]
#   --steps N    optimizer steps per run (default 10)
#   --skip S     first steps not counted (default 4)
#   --repeat R   how many times the three runs alternate (default 1)
#   --slow F     speed of a slow core as a fraction of a fast one (default 0.33)
#   --depth D    model depth (default 4)
#   --batch N    total batch in tokens per step, a multiple of 1024 (default 2048: 8 rows, the
#                coarsest split; a larger step spends a smaller share in the gradient exchange)
#   --dir DIR    NANOCHAT_BASE_DIR with the corpus and tokenizer (default /tmp/nanochat-busy-bench,
#                shared with run_busy_core_bench.sh; made on the first run, ~1-2 minutes)
#   --bin PATH   the nanochat binary (default build/nanochat)
#   --port P     the job's master port (default 29517)
# Needs: root, at least 2 CPUs, a cgroup cpu controller (v2 with threaded cgroups, or v1's
# cpu.cfs_quota_us). Other processes on the machine change every figure: say what ran next to it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
me=run_hybrid_sim_bench.sh
steps=10 skip=4 repeat=1 slow=0.33 depth=4 port=29517 batch=2048
dir=/tmp/nanochat-busy-bench
bin="$repo/build/nanochat"
die() { echo "$me: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --skip) skip="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --slow) slow="$2"; shift 2 ;;
    --depth) depth="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[ "$steps" -gt "$skip" ] || die "--steps must be larger than --skip"
[[ "$batch" =~ ^[0-9]+$ ]] && [ "$batch" -ge 1024 ] && [ $((batch % 1024)) -eq 0 ] ||
  die "--batch must be a multiple of 1024 tokens (B 4 x T 256), got $batch"
awk -v s="$slow" 'BEGIN { exit !(s > 0 && s <= 1) }' || die "--slow must be in (0, 1], got $slow"
[ "$(id -u)" = 0 ] || die "needs root: it sets the slow cores' CPU quota in a cgroup under /sys/fs/cgroup"
[ -x "$bin" ] || die "no binary at $bin; build it first (bash scripts/build.sh)"
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"

# ---------------------------------------------------------------- CPUs
expand() { tr ',' '\n' <<< "$1" | awk -F- '{ if (NF == 2) for (i = $1; i <= $2; ++i) print i; else if ($1 != "") print $1 }'; }
join() { paste -sd, -; }
mapfile -t cpus < <(expand "$(taskset -cp $$ | sed 's/.*: //')")
n=${#cpus[@]}
[ "$n" -ge 2 ] || die "needs at least 2 CPUs (this process may use only CPU ${cpus[*]})"
n_fast=$(( (n + 1) / 2 ))
fast_list=$(printf '%s\n' "${cpus[@]:0:n_fast}" | join)
slow_list=$(printf '%s\n' "${cpus[@]:n_fast}" | join)
n_slow=$(( n - n_fast ))
declare -A is_slow=()
for c in "${cpus[@]:n_fast}"; do is_slow[$c]=1; done

# ---------------------------------------------------------------- cgroups
cg_root="" cg_version="" cg_base="" cg_home="" cg_slow=""
for m in $(awk '$3 == "cgroup2" { print $2 }' /proc/mounts); do
  if grep -qw cpu "$m/cgroup.controllers" 2> /dev/null; then cg_root=$m cg_version=2; break; fi
done
if [ -z "$cg_root" ]; then
  for m in $(awk '$3 == "cgroup" && $4 ~ /(^|,)cpu(,|$)/ { print $2 }' /proc/mounts); do
    if [ -f "$m/cpu.cfs_quota_us" ]; then cg_root=$m cg_version=1; break; fi
  done
fi
[ -n "$cg_root" ] || die "no cgroup cpu controller (cgroup2 with 'cpu' in cgroup.controllers, or v1 cpu.cfs_quota_us)"
period=10000
quota=$(awk -v p="$period" -v s="$slow" -v k="$n_slow" 'BEGIN { printf "%d", p * s * k }')
[ "$quota" -ge 1000 ] || die "--slow $slow gives a quota of $quota us per $period us, under the kernel's 1000 us"
cg_base="$cg_root/nanochat-hybrid-sim-$$"
if [ "$cg_version" = 2 ]; then
  # A threaded subtree: the runs start in its root, their slow threads move to the threaded child.
  grep -qw cpu "$cg_root/cgroup.subtree_control" || echo +cpu > "$cg_root/cgroup.subtree_control" ||
    die "cannot enable the cpu controller in $cg_root/cgroup.subtree_control"
  mkdir "$cg_base" "$cg_base/slow"
  echo threaded > "$cg_base/slow/cgroup.type"
  echo +cpu > "$cg_base/cgroup.subtree_control"
  echo "$quota $period" > "$cg_base/slow/cpu.max"
  cg_home="$cg_base" threads_file=cgroup.threads
else
  mkdir -p "$cg_base/home" "$cg_base/slow"
  echo "$period" > "$cg_base/slow/cpu.cfs_period_us"
  echo "$quota" > "$cg_base/slow/cpu.cfs_quota_us"
  cg_home="$cg_base/home" threads_file=tasks
fi
cg_slow="$cg_base/slow"

# Moves every thread of the runs whose affinity lies within the slow CPUs into the slow cgroup.
move_slow_threads() {
  local tid aff c ok
  for tid in $(cat "$cg_home/$threads_file" 2> /dev/null); do
    aff=$(awk '/^Cpus_allowed_list/ { print $2 }' "/proc/$tid/status" 2> /dev/null) || continue
    [ -n "$aff" ] || continue
    ok=1
    for c in $(expand "$aff"); do [ -n "${is_slow[$c]:-}" ] || { ok=0; break; }; done
    [ "$ok" = 1 ] && echo "$tid" > "$cg_slow/$threads_file" 2> /dev/null && echo "$tid" >> "$moved" || true
  done
}
mover=""
cleanup() {
  [ -n "$mover" ] && { kill "$mover" 2> /dev/null || true; wait "$mover" 2> /dev/null || true; }
  for d in "$cg_slow" "$cg_home" "$cg_base"; do
    [ -d "$d" ] && [ "$d" != "$cg_root" ] && { rmdir "$d" 2> /dev/null || echo "$me: could not remove $d" >&2; }
  done
  rm -rf "$fake"
}
fake=$(mktemp -d /tmp/nanochat-fake-sysfs.XXXXXX)
moved="$fake/moved"  # the threads the mover slowed during the current run
: > "$moved"
trap cleanup EXIT
mkdir -p "$fake/devices/cpu_core" "$fake/devices/cpu_atom"
echo "$fast_list" > "$fake/devices/cpu_core/cpus"
echo "$slow_list" > "$fake/devices/cpu_atom/cpus"
( while :; do move_slow_threads; sleep 0.2; done ) &
mover=$!

# ---------------------------------------------------------------- corpus and tokenizer
export NANOCHAT_BASE_DIR="$dir"
logs="$dir/logs-hybrid"
mkdir -p "$logs"
if [ ! -f "$dir/base_data_climbmix/DEMO_CORPUS" ]; then
  echo "== building the demo corpus in $dir (once)"
  NANOCHAT_BIN="$bin" bash "$repo/scripts/demo_corpus.sh" > "$logs/corpus.log" 2>&1 || { tail -20 "$logs/corpus.log"; exit 1; }
fi
if [ ! -f "$dir/tokenizer/tokenizer.json" ]; then
  echo "== training the vocab-32768 tokenizer (once)"
  "$bin" tok-train --vocab-size 32768 > "$logs/tok.log" 2>&1 || { tail -20 "$logs/tok.log"; exit 1; }
fi
vocab=$(grep -o '"vocab_size": *[0-9]*' "$dir/tokenizer/tokenizer.json" | grep -o '[0-9]*$' || echo "?")

train="base-train --depth $depth --max-seq-len 256 --device-batch-size 4 --total-batch-size $batch
       --num-iterations $steps --warmup-steps 0 --eval-every -1 --sample-every -1 --core-metric-every -1
       --model-tag hybridsim"
# How many threads of the last run were slowed (a check that the throttle reached them).
slowed() { echo "   $(sort -u "$moved" | wc -l) thread(s) slowed"; : > "$moved"; }
# Runs a command inside the home cgroup (so the mover sees its threads) with the fake sysfs tree.
in_home() { bash -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' in_home "$cg_home" \
              env NANOCHAT_SYSFS_ROOT="$fake" "$@"; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
step_tps() {
  cat "$@" | grep -E '(^|\] )step [0-9]+/' | awk -F'step ' -v s="$skip" '{split($2,a,"/"); if (a[1]+0 >= s) print}' |
    sed -E 's/.*tok\/sec: ([0-9,]+).*/\1/' | tr -d ,
}
load() { cut -d' ' -f1 /proc/loadavg; }

echo "fast CPUs $fast_list, slow CPUs $slow_list at $slow of a core (cgroup v$cg_version $cg_slow: $quota us per $period us)"
rm -f "$logs"/one.*.log "$logs"/default.*.log "$logs"/fast.*.log
loads=()
for rep in $(seq 1 "$repeat"); do
  loads+=("$(load)")
  echo "== one rank on every CPU, threads bound to CPUs (run $rep of $repeat; load average $(load))"
  # base-train itself, not under `nanochat run`: OpenMP binds a process's first thread to the
  # first place when it loads, so a launcher (or nanochat's re-execution for its wait policy,
  # skipped when OMP_WAIT_POLICY is set) would hand the rank CPU 0 alone.
  in_home env OMP_PROC_BIND=close OMP_PLACES=threads OMP_WAIT_POLICY=passive \
    "$bin" $train --threads "$n" > "$logs/one.$rep.log" 2>&1 || { tail -20 "$logs/one.$rep.log"; exit 1; }
  slowed
  echo "== default placement: one rank per core type (run $rep of $repeat)"
  in_home env -u OMP_NUM_THREADS "$bin" run --master-port "$port" $train > "$logs/default.$rep.log" 2>&1 ||
    { tail -20 "$logs/default.$rep.log"; exit 1; }
  slowed
  echo "== one rank on the fast CPUs alone (run $rep of $repeat)"
  in_home taskset -c "$fast_list" "$bin" run --hybrid off --master-port "$port" $train --threads "$n_fast" \
    > "$logs/fast.$rep.log" 2>&1 || { tail -20 "$logs/fast.$rep.log"; exit 1; }
  slowed
done

o=$(step_tps "$logs"/one.*.log | median)
d=$(step_tps "$logs"/default.*.log | median)
f=$(step_tps "$logs"/fast.*.log | median)
echo
echo "d$depth (T 256, B 4, total batch $batch, vocab $vocab), median tok/s over steps $skip..$((steps - 1)) of $repeat run(s) each; logs in $logs"
grep -m1 -h 'placement:' "$logs/default.1.log" | sed 's/^.*cores:/cores:/' || true
echo "host: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $n CPUs; load average before each repeat (1 min): ${loads[*]}"
printf '%-52s %10s\n' "run" "tok/s"
printf '%-52s %10s\n' "one rank, a thread per CPU bound to it" "$o"
printf '%-52s %10s\n' "default: one rank per core type" "$d"
printf '%-52s %10s\n' "fast CPUs alone" "$f"
printf '%-52s %10s\n' "ratio default / one rank" "$(awk -v a="$d" -v b="$o" 'BEGIN {printf "%.2fx", a / b}')"
printf '%-52s %10s\n' "ratio default / fast CPUs alone" "$(awk -v a="$d" -v b="$f" 'BEGIN {printf "%.2fx", a / b}')"
printf '%-52s %10s\n' "default / ideal sum (fast alone x (1 + $slow x $n_slow/$n_fast))" \
  "$(awk -v a="$d" -v f="$f" -v s="$slow" -v ns="$n_slow" -v nf="$n_fast" 'BEGIN {printf "%.2f", a / (f * (1 + s * ns / nf))}')"
for kind in one default fast; do
  printf '%s per run (median of its steps):' "$kind"
  for fl in "$logs/$kind".*.log; do printf ' %s' "$(step_tps "$fl" | median)"; done
  echo
done
