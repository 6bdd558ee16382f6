#!/usr/bin/env bash
# The chat stages offline, on the quickstart's model: conversations made here from Debian's word
# list (spelling and letter counting with the calculator, arithmetic, identity), chat-eval of the
# base model, chat-sft, chat-eval of the result, one answer. Prints the accuracies before and after.
# Usage: bash scripts/chat_demo.sh [--tag demo] [--steps 150] [--problems 100]
# --steps N: chat-sft trains N steps (its --num-iterations N+1: nanochat counts the batch fetched
# one ahead, so --num-iterations N trains N-1 steps); the script checks that it did.
# Needs build/nanochat, the tokenizer and base_checkpoints/<tag> under $NANOCHAT_BASE_DIR (the
# quickstart makes them), and /usr/share/dict/words (wamerican, installed by scripts/deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
tag=demo; steps=150; problems=100
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) tag="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --problems) problems="$2"; shift 2 ;;
    *) echo "chat_demo.sh: unknown argument '$1' (--tag, --steps, --problems)" >&2; exit 2 ;;
  esac
done
case "$steps" in '' | *[!0-9]* | 0*) echo "chat_demo.sh: --steps wants a whole number above 0, got '$steps'" >&2; exit 2 ;; esac
: "${NANOCHAT_BASE_DIR:=$HOME/.cache/nanochat}"
export NANOCHAT_BASE_DIR
nc=build/nanochat
[ -x "$nc" ] || { echo "chat_demo.sh: $nc is missing: run bash scripts/setup.sh first" >&2; exit 1; }
work="$NANOCHAT_BASE_DIR/chat_demo"
mkdir -p "$work"
files=()
for t in SpellingBee Arithmetic Identity; do
  "$nc" data task-jsonl "$t" -o "$work/$t.jsonl"
  files+=("$work/$t.jsonl")
done
tasks='SpellingBee|Arithmetic'
echo "== chat-eval of the base model ($tag)"
"$nc" chat-eval -i base -g "$tag" -a "$tasks" -x "$problems" | tee "$work/before.txt"
echo "== chat-sft: $steps steps"
touch "$work/sft_started"
"$nc" chat-sft --model-tag "$tag" --train-jsonl "$(IFS=,; echo "${files[*]}")" --eval-every -1 \
  --chatcore-every -1 --num-iterations "$((steps + 1))"
# chat-sft's last checkpoint carries its count of steps done (written by this run, not an earlier one)
last="$NANOCHAT_BASE_DIR/chatsft_checkpoints/$tag/model_$(printf %06d "$steps").safetensors"
[ "$last" -nt "$work/sft_started" ] || { echo "chat_demo.sh: chat-sft did not train $steps steps (this run wrote no $last: did its one epoch of conversations end first?)" >&2; exit 1; }
echo "== chat-eval of the chat model"
"$nc" chat-eval -i sft -g "$tag" -a "$tasks" -x "$problems" | tee "$work/after.txt"
echo "== before -> after"
paste <(grep ' accuracy: ' "$work/before.txt") <(grep ' accuracy: ' "$work/after.txt" | sed 's/.*accuracy: //')
"$nc" chat -i sft -g "$tag" -p "Spell the word 'house'."
