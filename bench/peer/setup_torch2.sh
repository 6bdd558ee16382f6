#!/bin/sh
# Makes the torch 2.x environment of the peer benchmark's torch2-eager / torch2-compile variants:
# a virtual environment OUTSIDE the repository with PyTorch from PyPI (dev/bench time only; the
# product never needs Python). Default: torch 2.9.1 (the version nanochat pins) in
# ~/.cache/nanochat-peer/torch-2.9.1, which run_peer.sh finds by itself.
#   bench/peer/setup_torch2.sh                 # PyPI's wheel (pulls CUDA libraries: ~7 GB on disk)
#   TORCH_VERSION=2.9.1 VENV=/opt/peer-torch2 bench/peer/setup_torch2.sh
#   TORCH_INDEX_URL=<PyTorch's CPU-only wheel index> bench/peer/setup_torch2.sh   # ~1 GB, where reachable
# Needs python3-venv; torch.compile on CPU also needs a C++ compiler (g++) and Python's headers
# (python3-dev): apt-get install python3-venv python3-dev g++. The variants also use
# libjemalloc2 (--torch2-malloc jemalloc, the default).
set -eu
TORCH_VERSION=${TORCH_VERSION:-2.9.1}
VENV=${VENV:-$HOME/.cache/nanochat-peer/torch-$TORCH_VERSION}
for pkg in python3-venv python3-dev g++ libjemalloc2; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
    echo "setup_torch2: $pkg is not installed (apt-get install $pkg)" >&2
done
if [ -e /usr/lib/x86_64-linux-gnu/libtorch_cpu.so ]; then
  echo "setup_torch2: /usr/lib/x86_64-linux-gnu/libtorch_cpu.so (Debian's libtorch-dev, torch 1.13) shadows" \
       "the wheel's when torch.compile links its kernels, which then run scalar: apt-get remove" \
       "libtorch-dev (python3-torch stays) before torch2-compile runs" >&2
fi
/usr/bin/python3 -m venv "$VENV"
if [ -n "${TORCH_INDEX_URL:-}" ]; then
  "$VENV/bin/pip" install --index-url "$TORCH_INDEX_URL" "torch==$TORCH_VERSION"
else
  "$VENV/bin/pip" install "torch==$TORCH_VERSION"
fi
"$VENV/bin/pip" install numpy   # tools/reference/nanochat_ref.py imports it
"$VENV/bin/python" -c "import torch; print('setup_torch2: torch', torch.__version__, 'in $VENV')"
if [ "$VENV" != "$HOME/.cache/nanochat-peer/torch-2.9.1" ]; then
  echo "setup_torch2: pass --torch2-python $VENV/bin/python to run_peer.sh (or set NANOCHAT_PEER_TORCH2_PYTHON)"
fi
