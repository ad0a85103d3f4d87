#!/usr/bin/env bash
# Formats every tracked C++ file with the committed .clang-format (clang-format 14, Debian 12).
#   scripts/format.sh           rewrite the files in place
#   scripts/format.sh --check   change nothing; list the files that differ and exit 1 if any
# include/ratelimit/lua/*.hpp are generated from lua/ (cmake/embed_lua.cmake) and checked
# against a regeneration by a test, so they keep the generator's layout.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v clang-format >/dev/null || { echo "format.sh: needs clang-format" >&2; exit 1; }
mapfile -t files < <(git ls-files '*.hpp' '*.cpp' | grep -v '^include/ratelimit/lua/')
if [[ "${1:-}" == "--check" ]]; then
  bad=0
  for f in "${files[@]}"; do
    if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then
      echo "not formatted: $f (run scripts/format.sh)"
      bad=1
    fi
  done
  exit "$bad"
fi
clang-format -i "${files[@]}"
