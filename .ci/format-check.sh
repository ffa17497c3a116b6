#!/usr/bin/env bash
# Lists C files that differ from the committed .clang-format style (exit 1 if any).
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
for f in $(git ls-files '*.c' '*.h'); do
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "not formatted: $f"
    bad=1
  fi
done
exit $bad
