#!/bin/sh
# Peer benchmark: our training step vs the PyTorch reference on identical configs and threads.
#   bench/peer/run_peer.sh --quick          # d4, 1 thread, 3 steps (a few minutes)
#   bench/peer/run_peer.sh                  # d4, d6, d6b32, d12 at 1 and 2 threads (long)
#   bench/peer/run_peer.sh --help           # all flags
# Needs build/bench/bench_train_step (or --build / --build-dir / --ours-bin) and Debian's
# python3-torch; for the tuned variant libjemalloc2 and libopenblas0-openmp; for the torch 2.x
# variants (torch2-eager, torch2-compile) the venv of setup_torch2.sh. See README.md here.
exec /usr/bin/python3 "$(dirname "$0")/run_peer.py" "$@"
