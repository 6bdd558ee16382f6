#!/usr/bin/env bash
# nanochat.cpp quickstart on a fresh Debian 12 / Ubuntu machine, in one command:
#   1. install the Debian packages the build needs (apt-get; sudo if not root)
#   2. build Release into build/ (binary build/nanochat)
#   3. build the demo corpus from Debian text packages into $NANOCHAT_BASE_DIR/base_data_climbmix
#   4. train the BPE tokenizer on it
#   5. train a small GPT (depth 4) for a few minutes, printing loss, val bpb and samples
#   6. sample from the trained checkpoint
# Everything lands in $NANOCHAT_BASE_DIR (default ~/.cache/nanochat). Steps 3-4 are skipped when
# their output already exists. Knobs (environment): NANOCHAT_DEMO_STEPS (default 120),
# NANOCHAT_DEMO_VOCAB (default 8192), NANOCHAT_DEMO_DEPTH (default 4).
set -euo pipefail
case "${1:-}" in
  -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "setup.sh: takes no arguments (got '$1'); its knobs are environment variables: bash scripts/setup.sh --help" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
export NANOCHAT_BASE_DIR="${NANOCHAT_BASE_DIR:-$HOME/.cache/nanochat}"
steps="${NANOCHAT_DEMO_STEPS:-120}"
vocab="${NANOCHAT_DEMO_VOCAB:-8192}"
depth="${NANOCHAT_DEMO_DEPTH:-4}"

echo "== [1/6] packages"
bash scripts/deps.sh
echo "== [2/6] build (the nanochat binary only; scripts/test.sh builds the tests)"
t0=$(date +%s)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target nanochat
echo "build took $(( $(date +%s) - t0 )) s"
echo "== [3/6] demo corpus"
bash scripts/demo_corpus.sh --bin build/nanochat
echo "== [4/6] tokenizer"
if [ -f "$NANOCHAT_BASE_DIR/tokenizer/tokenizer.json" ]; then
  echo "tokenizer already in $NANOCHAT_BASE_DIR/tokenizer (delete it to retrain)"
else
  build/nanochat tok-train --vocab-size "$vocab"
fi
echo "== [5/6] base-train (depth $depth, $steps steps)"
start=$(date +%s)
build/nanochat base-train --depth "$depth" --max-seq-len 512 --window-pattern L \
  --device-batch-size 8 --total-batch-size 4096 --num-iterations "$steps" --warmup-steps 10 \
  --eval-every 40 --eval-tokens 65536 --sample-every "$steps" --save-every 40 \
  --core-metric-every -1 --model-tag demo
echo "base-train took $(( $(date +%s) - start )) s"
echo "== [6/6] sample"
build/nanochat sample -g demo -n 24 -t 0.8 -p "The meaning of the word" -p "Elizabeth said that"
echo
echo "Done. Checkpoints, metrics.jsonl and report.svg are in $NANOCHAT_BASE_DIR/base_checkpoints/demo/"
echo "Chat with it in a browser: NANOCHAT_BASE_DIR=$NANOCHAT_BASE_DIR build/nanochat chat-web -i base -g demo (then open http://127.0.0.1:8000/)"
