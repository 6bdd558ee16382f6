#!/usr/bin/env bash
# Builds nanochat.cpp's demo pretraining corpus (~31 M characters of real English text) from free
# Debian packages, on a fresh Debian/Ubuntu machine, without root:
#   apt-get download + dpkg-deb -x  ->  scripts/corpus/extract.py (python3 stdlib)  ->  JSONL
#   ->  nanochat data pack  ->  shard_00000.parquet ... (last = validation) in the data directory
#   ($NANOCHAT_DATA_DIR, else $NANOCHAT_BASE_DIR/base_data_climbmix, else
#   ~/.cache/nanochat/base_data_climbmix), plus ATTRIBUTION and LICENSES/ (the packages' copyright
#   files). Idempotent: a finished corpus (marker file DEMO_CORPUS) is left alone; downloads,
#   extracted trees and JSONL are cached under $NANOCHAT_BASE_DIR/demo_corpus.
#
# usage: scripts/demo_corpus.sh [--out DIR] [--trees DIR] [--bin PATH] [--force] [--val-docs N]
#   --out DIR    data directory to fill (default as above)
#   --trees DIR  offline: use already extracted package trees DIR/<package>/... (no apt-get)
#   --bin PATH   the nanochat binary (default: build/nanochat next to this script, or $NANOCHAT_BIN)
#   --force      rebuild even if the marker says the corpus is complete
#   --val-docs N documents in the validation shard (default 1024)
# Needs: bash, python3, apt-get + dpkg-deb (unless --trees), an 'apt-get update'd package list.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
base="${NANOCHAT_BASE_DIR:-$HOME/.cache/nanochat}"
out="${NANOCHAT_DATA_DIR:-$base/base_data_climbmix}"
bin="${NANOCHAT_BIN:-$repo/build/nanochat}"
trees=""
force=0
val_docs=1024
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --trees) trees="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --force) force=1; shift ;;
    --val-docs) val_docs="$2"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "demo_corpus.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

# source  package             --max-chars (evenly spaced subset; empty = all)  licence
SOURCES=(
  "austen  r-cran-janeaustenr  -        public domain (novels of Jane Austen; R package: MIT)"
  "web     sword-text-web      -        public domain (World English Bible)"
  "pydoc   python3.11-doc      -        PSF-2.0 (Python Software Foundation License)"
  "gcide   dict-gcide          9000000  GPL-2+ (GNU Collaborative International Dictionary of English)"
  "wordnet wordnet-base        4000000  WordNet 3.0 license (BSD-like, Princeton University)"
)
MARKER="$out/DEMO_CORPUS"
VERSION="demo-corpus v1"

shopt -s nullglob
existing=("$out"/*.parquet)
if [ -f "$MARKER" ] && [ "$(head -1 "$MARKER")" = "$VERSION" ] && [ ${#existing[@]} -ge 2 ] && [ $force -eq 0 ]; then
  echo "demo corpus already built in $out (${#existing[@]} shards); --force rebuilds it"
  exit 0
fi
if [ ${#existing[@]} -gt 0 ] && [ ! -f "$MARKER" ]; then
  echo "demo_corpus.sh: $out already holds ${#existing[@]} .parquet files that are not the demo corpus;" \
       "set NANOCHAT_DATA_DIR (or --out) to another directory, or remove them" >&2
  exit 1
fi
if [ ! -x "$bin" ]; then
  echo "demo_corpus.sh: nanochat binary not found at $bin; build it first (scripts/build.sh) or pass --bin" >&2
  exit 1
fi
command -v python3 >/dev/null || { echo "demo_corpus.sh: python3 is required (apt-get install python3)" >&2; exit 1; }

t0=$(date +%s)
work="$base/demo_corpus"
mkdir -p "$work/debs" "$work/trees" "$work/jsonl"

tree_of() {  # tree_of PACKAGE -> prints the extracted tree (downloads and unpacks it when needed)
  local pkg="$1"
  if [ -n "$trees" ]; then
    [ -d "$trees/$pkg" ] || { echo "demo_corpus.sh: --trees $trees has no $pkg/" >&2; return 1; }
    echo "$trees/$pkg"; return 0
  fi
  if [ ! -f "$work/trees/$pkg/.unpacked" ]; then
    local debs=("$work/debs/${pkg}"_*.deb)
    if [ ${#debs[@]} -eq 0 ]; then
      if ! (cd "$work/debs" && apt-get download -q "$pkg" 2> >(grep -v -i "unsandboxed" >&2) >/dev/null); then
        if ! getent hosts deb.debian.org >/dev/null 2>&1; then
          echo "demo_corpus.sh: 'apt-get download $pkg' failed: this machine has no network (deb.debian.org does not resolve); make the corpus where there is (NANOCHAT_BASE_DIR=DIR bash scripts/demo_corpus.sh) and copy DIR/base_data_climbmix into this base folder" >&2
        else
          echo "demo_corpus.sh: 'apt-get download $pkg' failed; run 'sudo apt-get update' (the package list may be empty) and retry" >&2
        fi
        return 1
      fi
      debs=("$work/debs/${pkg}"_*.deb)
    fi
    rm -rf "$work/trees/$pkg"
    dpkg-deb -x "${debs[0]}" "$work/trees/$pkg"
    touch "$work/trees/$pkg/.unpacked"
  fi
  echo "$work/trees/$pkg"
}

# 1. packages (sequential: apt-get serialises on its lock anyway)
declare -A TREE
for line in "${SOURCES[@]}"; do
  read -r src pkg _ <<<"$line"
  TREE[$src]="$(tree_of "$pkg")"
done

# 2. text extraction (in parallel; each writes its JSONL atomically)
pids=()
for line in "${SOURCES[@]}"; do
  read -r src pkg maxc _ <<<"$line"
  args=("$src" "${TREE[$src]}" "$work/jsonl/$src.jsonl")
  [ "$maxc" != "-" ] && args+=(--max-chars "$maxc")
  if [ -n "$trees" ] || [ ! -s "$work/jsonl/$src.jsonl" ]; then
    python3 "$here/corpus/extract.py" "${args[@]}" & pids+=($!)
  fi
done
for p in "${pids[@]}"; do wait "$p"; done

# 3. shards: ~4 M characters per train shard, row groups of 128 documents (so up to 8 ranks each
#    get row groups of every shard), 1,024 validation documents (8 row groups).
mkdir -p "$out"
jsonl=()
for line in "${SOURCES[@]}"; do read -r src _ <<<"$line"; jsonl+=("$work/jsonl/$src.jsonl"); done
"$bin" data pack "${jsonl[@]}" --out "$out" --shard-chars 4000000 --row-group-size 128 --val-docs "$val_docs" --seed 42 --force -q

# 4. attribution
mkdir -p "$out/LICENSES"
{
  echo "nanochat.cpp demo corpus, built by scripts/demo_corpus.sh on $(date -u +%Y-%m-%d)."
  echo "Text extracted from these Debian packages (package, version: licence of the text):"
  for line in "${SOURCES[@]}"; do
    read -r src pkg maxc lic <<<"$line"
    ver="unknown (offline trees)"
    debs=("$work/debs/${pkg}"_*.deb)
    [ -z "$trees" ] && [ ${#debs[@]} -gt 0 ] && ver="$(dpkg-deb -f "${debs[0]}" Version)"
    sub=""; [ "$maxc" != "-" ] && sub=" [evenly spaced subset, ~$maxc characters]"
    echo "  $pkg $ver: $lic$sub"
    c="$(ls "${TREE[$src]}"/usr/share/doc/*/copyright 2>/dev/null | head -1 || true)"
    [ -n "$c" ] && cp "$c" "$out/LICENSES/$pkg.copyright"
  done
  echo "The packages' copyright files are in LICENSES/. GPL and other licences require keeping this"
  echo "attribution with copies of the text."
} > "$out/ATTRIBUTION"
echo "$VERSION" > "$MARKER"
echo "$(date -u +%FT%TZ) $(ls "$out"/*.parquet | wc -l) shards" >> "$MARKER"
echo "demo corpus ready in $out ($(( $(date +%s) - t0 )) s)"
