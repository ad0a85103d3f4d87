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
  # Fifty files per clang-format, one per core at a time: a process per file took a minute.
  # Each file that differs is reported as "FILE:LINE:COL: error: code should be clang-formatted".
  rc=0
  out=$(printf '%s\0' "${files[@]}" |
    xargs -0 -n 50 -P "$(nproc)" clang-format --dry-run -Werror 2>&1 >/dev/null) || rc=$?
  mapfile -t bad < <(sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' \
    <<<"$out" | sort -u)
  for f in "${bad[@]}"; do echo "not formatted: $f (run scripts/format.sh)"; done
  # Failed for another reason (a file it could not read, a bad .clang-format): say what.
  [[ $rc -ne 0 && ${#bad[@]} -eq 0 ]] && printf '%s\n' "$out" >&2
  exit "$rc"
fi
clang-format -i "${files[@]}"
