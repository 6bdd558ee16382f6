#!/bin/sh
# Generation speed: our engine (bench_serve --engine-only) vs nanochat's Engine.generate on the
# same exported checkpoint, interleaved round by round (see README.md here).
#   NANOCHAT_BASE_DIR=... bench/peer/run_serve_peer.sh              # -g demo, 5 rounds, greedy, 1 thread
#   NANOCHAT_BASE_DIR=... bench/peer/run_serve_peer.sh -g d8 --rounds 3 --max-tokens 48
#   bench/peer/run_serve_peer.sh --help                             # all flags
# Needs build/nanochat and build/bench/bench_serve, and a Python with torch, tiktoken and filelock:
# $NANOCHAT_PEER_PYTHON, else /work/venv/bin/python, else setup_torch2.sh's venv (add tiktoken and
# filelock to it: "$VENV/bin/pip" install tiktoken filelock).
here=$(dirname "$0")
py=${NANOCHAT_PEER_PYTHON:-}
if [ -z "$py" ]; then
  for c in /work/venv/bin/python "$HOME/.cache/nanochat-peer/torch-2.9.1/bin/python"; do
    if [ -x "$c" ] && "$c" -c "import torch, tiktoken, filelock" 2>/dev/null; then py=$c; break; fi
  done
fi
if [ -z "$py" ]; then
  echo "run_serve_peer: no Python with torch, tiktoken and filelock; set NANOCHAT_PEER_PYTHON" >&2
  exit 2
fi
exec "$py" "$here/run_serve_peer.py" "$@"
