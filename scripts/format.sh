#!/usr/bin/env bash
# Formats the C++ sources with the repository's .clang-format (Debian 12's clang-format 14).
# usage: scripts/format.sh [--check]   (--check: change nothing, list the files that differ, exit 1 if any)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "clang-format not found (apt-get install clang-format)" >&2; exit 2; }
mapfile -t files < <(git ls-files 'src/*.h' 'src/*.cpp' 'tests/*.h' 'tests/*.cpp' 'bench/*.h' 'bench/*.cpp' 'fuzz/*.cpp' | grep -v '^tests/fixtures/')
if [ "${1:-}" = "--check" ]; then
  bad=0
  for f in "${files[@]}"; do
    clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || { echo "not formatted: $f"; bad=1; }
  done
  exit $bad
fi
clang-format -i "${files[@]}"
