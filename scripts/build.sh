#!/usr/bin/env bash
# Builds nanochat.cpp. usage: scripts/build.sh [release|asan]  (default release)
#   release -> build/        (binary build/nanochat, -O3 -march=native)
#   asan    -> build-asan/   (AddressSanitizer + UndefinedBehaviorSanitizer, -O1 -g)
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:-release}"
jobs="$(nproc)"
case "$kind" in
  release) cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
           cmake --build build -j"$jobs" ;;
  asan)    cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DNANOCHAT_SANITIZE=ON \
               -DNANOCHAT_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS="-O1 -g" >/dev/null
           cmake --build build-asan -j"$jobs" ;;
  *) echo "usage: $0 [release|asan]" >&2; exit 2 ;;
esac
