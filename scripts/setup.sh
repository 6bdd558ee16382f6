#!/usr/bin/env bash
# One command for a fresh machine: install packages, build Release into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh release
echo "[setup] built build/nanochat"
