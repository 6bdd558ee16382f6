#!/usr/bin/env bash
# Checks that README's two commands work on a genuinely fresh Debian 12: makes a minimal bookworm
# root with debootstrap (--variant=minbase), clones this checkout's committed HEAD into it, and in a
# chroot runs
#   1. the quickstart  (NANOCHAT_DEMO_STEPS=5 bash scripts/setup.sh)
#   2. the test command (bash scripts/test.sh)
# as root with a login-like environment (HOME=/root, nothing inherited from this shell but proxy
# variables). The chroot's root is a mount point (the root bind-mounted onto itself) with proc, sys,
# dev, dev/pts, dev/shm and a tmpfs /run, so `ip netns` works and the network-namespace tests run.
# apt inside the root uses this machine's configured Debian mirror (/etc/apt/sources.list and
# sources.list.d) and its apt Acquire settings (proxy, validity checks) from /etc/apt/apt.conf.d.
# Prints what failed and each phase's duration, unmounts everything on any exit, exits non-zero on
# any failure (3 when debootstrap could not make the root), and ends with the test command's
# summary line "N passed, N failed" (or "0 passed, 1 failed" when it never ran).
#
# usage: sudo scripts/fresh_machine_check.sh [--dir DIR] [--keep] [--steps N] [--no-cache]
#   --dir DIR   where roots and the debootstrap cache live (default $NANOCHAT_FRESH_DIR, else
#               /var/tmp/nanochat-fresh); each run makes a new root DIR/root-<time>
#   --keep      keep the root afterwards (default: delete it; $NANOCHAT_FRESH_KEEP=1 too)
#   --steps N   NANOCHAT_DEMO_STEPS for the quickstart (default 5)
#   --no-cache  ignore (and rewrite) the cached debootstrap tarball DIR/bookworm-minbase.tgz
# Needs: root, git, network access to the mirror (installs debootstrap when missing). Takes over an hour on 2 cores.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
dir="${NANOCHAT_FRESH_DIR:-/var/tmp/nanochat-fresh}"
keep="${NANOCHAT_FRESH_KEEP:-0}"
steps=5
use_cache=1
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    --steps) steps="$2"; shift 2 ;;
    --no-cache) use_cache=0; shift ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "fresh_machine_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

die() { echo "fresh_machine_check.sh: $*" >&2; echo "0 passed, 1 failed"; exit 1; }
[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap, mount, chroot); run it with sudo"
if ! command -v debootstrap >/dev/null; then  # the check's own tool, installed like deps.sh does
  echo "[fresh] installing debootstrap"
  apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    debootstrap >/dev/null || die "could not install debootstrap (apt-get install debootstrap)"
fi
command -v git >/dev/null || die "git not found"

# --- the machine's Debian mirror (first bookworm source that is not -security/-updates) ---------
sources_uris() {  # prints "URI SUITE" for every active Debian source on this machine
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    sed -E -n 's/^[[:space:]]*deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+)[[:space:]]+([^[:space:]]+).*/\2 \3/p' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk '
         function flush(){ if (t ~ /(^| )deb( |$)/ && en != "no") for (i=1;i<=nu;i++) for (j=1;j<=ns;j++) print u[i], s[j];
                           t=""; en=""; nu=0; ns=0 }
         /^[[:space:]]*$/ { flush(); next }
         /^[[:space:]]*#/ { next }
         tolower($1)=="types:" { t=""; for (i=2;i<=NF;i++) t=t" "$i; t=t" " }
         tolower($1)=="enabled:" { en=tolower($2) }
         tolower($1)=="uris:" { for (i=2;i<=NF;i++) u[++nu]=$i }
         tolower($1)=="suites:" { for (i=2;i<=NF;i++) s[++ns]=$i }
         END { flush() }' "$f"
  done
}
mirror="$(sources_uris | awk '$2=="bookworm"{print $1; exit}')"
security="$(sources_uris | awk '$2=="bookworm-security"{print $1; exit}')"
[ -n "$mirror" ] || { mirror="http://deb.debian.org/debian"; echo "[fresh] no bookworm source configured here; using $mirror"; }
[ -n "$security" ] || security="http://security.debian.org/debian-security"
# apt's proxy setting, for debootstrap (wget) and for programs inside the root
if [ -z "${http_proxy:-}" ]; then
  p="$(apt-config dump 2>/dev/null | sed -n -E 's/^Acquire::http::Proxy "([^"]+)";/\1/Ip' | head -1)"
  [ -n "$p" ] && [ "$p" != "DIRECT" ] && export http_proxy="$p"
fi
if [ -z "${https_proxy:-}" ]; then
  p="$(apt-config dump 2>/dev/null | sed -n -E 's/^Acquire::https::Proxy "([^"]+)";/\1/Ip' | head -1)"
  [ -n "$p" ] && [ "$p" != "DIRECT" ] && export https_proxy="$p"
fi

# --- bookkeeping ----------------------------------------------------------------------------------
failed=()
phases=()
phase_start=0
phase_cpu=0
cpu_secs=0
cpu_now() {  # sets cpu_secs: CPU seconds (user + system) of all finished children, from `times`
  times >"$logdir/.times"  # in this shell: a subshell's `times` would not count our children
  cpu_secs="$(tail -1 "$logdir/.times" | awk '{ s = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); s += a[1] * 60 + a[2] } printf "%d", s }')"
}
phase_begin() { phase_start=$EPOCHSECONDS; cpu_now; phase_cpu=$cpu_secs; echo; echo "[fresh] ==== $1 ($(date -u +%T) UTC)"; }
phase_end() {  # phase_end NAME RC
  cpu_now
  local d=$((EPOCHSECONDS - phase_start)) c=$((cpu_secs - phase_cpu))
  phases+=("$(printf '%-34s %5d s  (CPU %5d s)  %s' "$1" "$d" "$c" "$([ "$2" -eq 0 ] && echo ok || echo "FAILED (exit $2)")")")
  [ "$2" -eq 0 ] || failed+=("$1 (exit $2)")
}
mkdir -p "$dir" || die "cannot create $dir"
dir="$(cd "$dir" && pwd)"
root="$dir/root-$(date -u +%Y%m%dT%H%M%S)-$$"
logdir="$dir/logs-$(basename "$root")"
mkdir -p "$logdir"
mounted=()

root_mounts() { awk -v r="$root" '$2==r || index($2, r"/")==1 {print $2}' /proc/self/mounts; }
cleanup() {
  local rc=$? m p pids
  trap - EXIT INT TERM
  # Processes still running in the root (an interrupted build or test), by their root directory.
  for sig in TERM KILL; do
    pids=()
    for p in /proc/[0-9]*; do [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && pids+=("${p#/proc/}"); done
    ((${#pids[@]})) || break
    echo "[fresh] stopping ${#pids[@]} process(es) left in the root (SIG$sig)"
    kill -s "$sig" "${pids[@]}" 2>/dev/null
    sleep 3
  done
  # Everything mounted at or under the root, deepest first (test leftovers such as netns included).
  for m in $(root_mounts | sort -r); do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
  if [ -n "$(root_mounts)" ]; then
    echo "[fresh] WARNING: still mounted under $root, not deleting it:"; root_mounts
  elif [ "$keep" = 1 ]; then
    echo "[fresh] root kept in $root (chroot $root bash; mount proc/sys/dev/run first)"
  elif [ -d "$root" ]; then
    rm -rf --one-file-system "$root"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'echo "[fresh] interrupted"; exit 130' INT TERM

report() {  # report SUMMARY [CODE]: prints the phase table, what failed, and the summary line; exits
  local summary="$1" code="${2:-}"
  echo
  echo "[fresh] phases (root $root, mirror $mirror, logs in $logdir):"
  local p; for p in "${phases[@]}"; do echo "  $p"; done
  if ((${#failed[@]})); then
    echo "[fresh] FAILED: ${failed[*]}"
  else
    echo "[fresh] all phases passed"
  fi
  echo "$summary"
  [ -z "$code" ] || exit "$code"
  ((${#failed[@]} == 0))
  exit $?
}

# --- 1. the root ----------------------------------------------------------------------------------
tarball="$dir/bookworm-minbase.tgz"
phase_begin "debootstrap (bookworm minbase)"
rc=0
if [ "$use_cache" = 0 ] || [ ! -s "$tarball" ]; then
  echo "[fresh] downloading the base system from $mirror into $tarball"
  tmp="$dir/make-tarball.$$"; rm -rf "$tmp"
  debootstrap --variant=minbase --make-tarball="$tarball.part" bookworm "$tmp" "$mirror" \
    >"$logdir/debootstrap-download.log" 2>&1 && mv "$tarball.part" "$tarball" || rc=$?
  rm -rf --one-file-system "$tmp"
fi
if [ $rc -eq 0 ]; then
  debootstrap --variant=minbase --unpack-tarball="$tarball" bookworm "$root" "$mirror" \
    >"$logdir/debootstrap.log" 2>&1 || rc=$?
fi
[ $rc -eq 0 ] || tail -20 "$logdir"/debootstrap*.log
phase_end "debootstrap (bookworm minbase)" $rc
[ $rc -eq 0 ] || report "0 passed, 1 failed" 3  # 3: no root to check in (mirror unreachable?)

# What a Debian installer leaves that debootstrap does not: apt sources for the mirror (+ updates
# and security), resolver config, /etc/hosts. Plus this machine's apt Acquire settings (proxy).
cat >"$root/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security bookworm-security main
EOF
for f in /etc/apt/apt.conf /etc/apt/apt.conf.d/*; do
  [ -f "$f" ] && grep -qi '^[^/#]*Acquire' "$f" && cp "$f" "$root/etc/apt/apt.conf.d/$(basename "$f")"
done
cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
[ -s "$root/etc/hosts" ] || printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"

# --- 2. the clone ---------------------------------------------------------------------------------
phase_begin "clone (committed HEAD)"
head="$(git -C "$repo" rev-parse HEAD)"
[ -z "$(git -C "$repo" status --porcelain --untracked-files=no)" ] ||
  echo "[fresh] note: $repo has uncommitted changes; they are NOT in the check (it clones HEAD $head)"
rc=0
git clone -q --no-checkout "$repo" "$root/root/nanochat.cpp" >"$logdir/clone.log" 2>&1 &&
  git -C "$root/root/nanochat.cpp" checkout -q --detach "$head" >>"$logdir/clone.log" 2>&1 || rc=$?
[ $rc -eq 0 ] || cat "$logdir/clone.log"
echo "[fresh] cloned $(git -C "$repo" log -1 --format='%h %s' "$head")"
phase_end "clone (committed HEAD)" $rc
[ $rc -eq 0 ] || report "0 passed, 1 failed"

# --- 3. mounts ------------------------------------------------------------------------------------
mnt() { mount "$@" || die "mount $* failed"; }
mnt --bind "$root" "$root"
mount --make-private "$root" 2>/dev/null || true
mnt -t proc proc "$root/proc"
mnt -t sysfs sysfs "$root/sys"
mnt --bind /dev "$root/dev"
mnt --bind /dev/pts "$root/dev/pts"
mnt -t tmpfs -o mode=1777 shm "$root/dev/shm"
mnt -t tmpfs -o mode=0755 run "$root/run"
mkdir -p "$root/run/lock"

in_root() {  # in_root LOG COMMAND: runs COMMAND with bash -c in the root, output to terminal + LOG
  local envv=(HOME=/root USER=root LOGNAME=root SHELL=/bin/bash TERM=dumb
              PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
  local v; for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
    [ -n "${!v:-}" ] && envv+=("$v=${!v}")
  done
  # Notes when each of the script's own steps ("== ..." / "=== ctest ...") begins, in LOG.marks.
  # In the background + wait, so that a SIGTERM to this script runs its trap at once.
  (
    chroot "$root" /usr/bin/env -i "${envv[@]}" /bin/bash -c "cd /root/nanochat.cpp && $2" 2>&1 | tee "$1" |
      while IFS= read -r l; do
        printf '%s\n' "$l"
        case "$l" in "== "*|"=== ctest"*) echo "$EPOCHSECONDS $l" >>"$1.marks" ;; esac
      done
    exit "${PIPESTATUS[0]}"
  ) &
  wait $!
}
steps_of() {  # steps_of LOG LABEL: adds "LABEL: <step> N s" rows for the steps noted in LOG.marks
  [ -f "$1.marks" ] || return 0
  local t name prev_t="" prev_name=""
  while read -r t name; do
    [ -n "$prev_t" ] && phases+=("$(printf '  %-32s %5d s' "${2}: ${prev_name:0:24}" $((t - prev_t)))")
    prev_t="$t"; prev_name="$name"
  done <"$1.marks"
  [ -n "$prev_t" ] && phases+=("$(printf '  %-32s %5d s' "${2}: ${prev_name:0:24}" $((EPOCHSECONDS - prev_t)))")
}

# --- 4. README's quickstart -----------------------------------------------------------------------
phase_begin "quickstart (setup.sh, $steps steps)"
rc=0
in_root "$logdir/setup.log" "NANOCHAT_DEMO_STEPS=$steps bash scripts/setup.sh" || rc=$?
phase_end "quickstart (setup.sh, $steps steps)" $rc
steps_of "$logdir/setup.log" setup

# --- 5. README's test command ---------------------------------------------------------------------
phase_begin "tests (test.sh)"
rc=0
in_root "$logdir/test.log" "bash scripts/test.sh" || rc=$?
phase_end "tests (test.sh)" $rc
steps_of "$logdir/test.log" test.sh
summary="$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$logdir/test.log" | tail -1)"
[ -n "$summary" ] || { summary="0 passed, 1 failed"; failed+=("test.sh printed no summary line"); }
skipped="$(grep -cE '^\[  SKIPPED \]|\*\*\*Skipped' "$logdir/test.log")"
[ "$skipped" -eq 0 ] || { echo "[fresh] skipped tests in the root:"; grep -E '\*\*\*Skipped|SKIPPED \] [A-Za-z]' "$logdir/test.log" | sort -u | head -20; }
grep -E '^\s+[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess aborted|Exception)\)' "$logdir/test.log" |
  sed 's/^/[fresh] failed test: /'
report "$summary"
