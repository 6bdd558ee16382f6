#!/usr/bin/env bash
# Builds nanochat.cpp. usage: scripts/build.sh [release|asan|avx2 [targets..]]  (default release)
#   release -> build/        (binary build/nanochat, -O3 -march=native)
#   asan    -> build-asan/   (AddressSanitizer + UndefinedBehaviorSanitizer, -O1 -g1: line tables,
#                             so a report names file and line; the tests' own files at -O0)
#   avx2    -> build-avx2/   (-O3 -march=x86-64-v3, oneDNN capped at AVX2: what an AVX2 + FMA
#                             machine without AVX-512 runs; CMake NANOCHAT_ISA=avx2); every
#                             target, or only the targets named after it
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:-release}"
jobs="$(nproc)"
case "$kind" in
  release) cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
           cmake --build build -j"$jobs" ;;
  asan)    cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DNANOCHAT_SANITIZE=ON \
               -DNANOCHAT_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS="-O1" -DCMAKE_CXX_FLAGS_DEBUG="-g1" >/dev/null
           cmake --build build-asan -j"$jobs" ;;
  avx2)    cmake -S . -B build-avx2 -DCMAKE_BUILD_TYPE=Release -DNANOCHAT_ISA=avx2 >/dev/null
           shift
           cmake --build build-avx2 -j"$jobs" ${1:+--target "$@"} ;;
  *) echo "usage: $0 [release|asan|avx2 [targets..]]" >&2; exit 2 ;;
esac
