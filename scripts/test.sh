#!/usr/bin/env bash
# The test command (README): installs packages, builds the Release and the ASan/UBSan builds,
# runs the whole suite in each, then the kernels, model, optim and train suites in an AVX2 build
# (what a machine without AVX-512 runs), and ends with one summary line "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
echo "== packages"
bash scripts/deps.sh || exit 1
echo "== build (release)"
bash scripts/build.sh release || exit 1
echo "== build (asan+ubsan)"
bash scripts/build.sh asan || exit 1
echo "== build (avx2: x86-64-v3, no AVX-512)"
bash scripts/build.sh avx2 nanochat test_kernels test_model test_optim test_train || exit 1
total_pass=0; total_fail=0; rc=0
run_suite() {  # run_suite DIR LABEL [ctest args...]
  local dir="$1" label="$2"; shift 2
  local log; log="$(mktemp)"
  echo "=== ctest ($label) ==="
  (cd "$dir" && ctest --output-on-failure -j2 --timeout 600 "$@") 2>&1 | tee "$log"
  local line; line="$(grep -E 'tests passed, [0-9]+ tests failed out of' "$log" | tail -1)"
  if [ -z "$line" ]; then echo "ctest ($label) printed no summary"; rc=1; return; fi
  local failed total
  failed="$(sed -E 's/.* ([0-9]+) tests failed out of ([0-9]+).*/\1/' <<<"$line")"
  total="$(sed -E 's/.* ([0-9]+) tests failed out of ([0-9]+).*/\2/' <<<"$line")"
  total_pass=$((total_pass + total - failed)); total_fail=$((total_fail + failed))
  [ "$failed" -eq 0 ] || rc=1
  rm -f "$log"
}
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
run_suite build release
# The sanitizer pass runs every suite too, the end-to-end trainer ones included (the CLI under
# ASan/UBSan; they take ~20 s there).
run_suite build-asan asan+ubsan
# The AVX2 build: our kernels' AVX2 paths and oneDNN's AVX2 kernels (isa_avx2_no_avx512 checks
# that nothing else runs) against the same fixtures and finite differences.
run_suite build-avx2 avx2 -L '^(kernels|model|optim|plan|train)$'
echo "${total_pass} passed, ${total_fail} failed"
exit $rc
