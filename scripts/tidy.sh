#!/usr/bin/env bash
# Runs clang-tidy with the committed .clang-tidy over Strata's own sources (lib/, services/,
# agent/, cmd/; tests, fuzzers and benchmarks are left out) using a build directory's
# compile_commands.json. Any finding fails (WarningsAsErrors in .clang-tidy).
#
#   scripts/tidy.sh BUILD_DIR     (configured with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: scripts/tidy.sh BUILD_DIR}
jobs=$(nproc 2>/dev/null || echo 2)
if [ ! -f "$build/compile_commands.json" ]; then
  echo "tidy: $build/compile_commands.json missing (configure with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)"
  exit 1
fi
# Strata's own translation units: not *_test.c, *_fuzz.c, test servers or test data.
files='^'"$root"'/(lib|services|agent|cmd)/.*(?<!_test)(?<!_fuzz)(?<!_testserver)(?<!_testdata)\.c$'
log=$(mktemp)
status=0
run-clang-tidy -p "$build" -j "$jobs" -quiet "$files" > "$log" 2>&1 || status=$?
# run-clang-tidy prints every file's command line; show only the findings.
findings=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E ': (warning|error): ' | sort -u || true)
if [ -n "$findings" ] || [ "$status" -ne 0 ]; then
  echo "$findings"
  [ -n "$findings" ] || tail -n 40 "$log"
  echo "tidy: $(printf '%s\n' "$findings" | grep -c . || true) findings (exit $status)"
  rm -f "$log"
  exit 1
fi
count=$(grep -c '^clang-tidy' "$log" || true)
rm -f "$log"
echo "tidy: clean ($count files)"
