#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages nanochat.cpp needs to build, run and test.
# Product: oneDNN (GEMM), Gloo (collectives), zstd/snappy/zlib (parquet), PCRE2 (tokenizer regex),
# nlohmann-json, CLI11, libcurl (data download), cpp-httplib (chat-web's HTTP server);
# wamerican (/usr/share/dict/words: the word list the offline SpellingBee task is made from);
# ocl-icd-opencl-dev because the oneDNN CMake config looks for OpenCL even in its CPU build.
# Tests/benchmarks: GoogleTest, Google Benchmark, iproute2 (network-namespace tests), chromium (the
# chat page's browser test). Needs root (or sudo).
set -euo pipefail
PKGS=(build-essential cmake pkg-config git ca-certificates python3
      libdnnl-dev ocl-icd-opencl-dev libgloo-dev libzstd-dev libsnappy-dev zlib1g-dev libpcre2-dev
      nlohmann-json3-dev libcli11-dev libcurl4-openssl-dev libcpp-httplib-dev
      libgtest-dev libgmock-dev libbenchmark-dev iproute2 chromium wamerican)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "[deps] installing: ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "[deps] all ${#PKGS[@]} packages present"
fi
