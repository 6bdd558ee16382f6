#!/usr/bin/env bash
# CORE offline: puts the handmade bundle of the tests (tests/fixtures/core_eval/eval_bundle, in
# nanochat's eval bundle format: core.yaml, eval_meta_data.csv, eval_data/*.jsonl; multiple-choice,
# schema and language-modeling tasks about animals, capitals, pronouns, sentences and counting)
# into $NANOCHAT_BASE_DIR/eval_bundle, so that `base-eval --eval core` and base-train's
# --core-metric-every run without a network. Its scores are not nanochat's CORE (that needs
# `nanochat data download --eval-bundle`); they exercise the same code on small tasks.
# Left out: greedy_lm, a test task whose empty delimiter only fits the tests' tokenizer.
# Usage: bash scripts/core_fixture_bundle.sh [--force]   (--force replaces an existing bundle)
set -euo pipefail
cd "$(dirname "$0")/.."
force=0
case "${1:-}" in
  "") ;;
  --force) force=1 ;;
  -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "core_fixture_bundle.sh: unknown argument '$1' (--force)" >&2; exit 2 ;;
esac
: "${NANOCHAT_BASE_DIR:=$HOME/.cache/nanochat}"
src=tests/fixtures/core_eval/eval_bundle
dest="$NANOCHAT_BASE_DIR/eval_bundle"
[ -f "$src/core.yaml" ] || { echo "core_fixture_bundle.sh: $src is missing (run it from a checkout of the repo)" >&2; exit 1; }
if [ -e "$dest" ] && [ "$force" -ne 1 ]; then
  echo "core_fixture_bundle.sh: $dest already exists (nanochat's real bundle?); pass --force to replace it" >&2
  exit 1
fi
mkdir -p "$NANOCHAT_BASE_DIR"
rm -rf "$dest.tmp.$$"
cp -r "$src" "$dest.tmp.$$"
# core.yaml without the greedy_lm task (the last one)
sed -i '/^- label: greedy_lm/,$d' "$dest.tmp.$$/core.yaml"
rm -f "$dest.tmp.$$/eval_data/lm/greedy.jsonl"
rm -rf "$dest"
mv "$dest.tmp.$$" "$dest"
echo "Wrote the fixture CORE bundle ($(grep -c '^- label:' "$dest/core.yaml") tasks) to $dest"
echo "Next: build/nanochat base-eval --eval core (its CORE metric is the fixture tasks', not nanochat's)"
