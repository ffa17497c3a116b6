#!/usr/bin/env bash
# Installs what the tests need, builds Strata twice (release and ASan+UBSan), runs every test in
# both, then runs each libFuzzer target briefly. This is what CI runs (.ci/run).
#
#   scripts/test.sh              everything
#   STRATA_SKIP_ASAN=1 ...       skip the sanitizer build (faster local runs)
#   STRATA_SKIP_TSAN=1 ...       skip the ThreadSanitizer pass over the unit tests
#   STRATA_SKIP_VALGRIND=1 ...   skip valgrind over the unit tests
#   STRATA_SKIP_FUZZ=1 ...       skip the fuzzers
#   STRATA_SKIP_COVERAGE=1 ...   skip the coverage build and its floor
#   STRATA_FUZZ_SECONDS=N        seconds per fuzz target (default 20)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs=$(nproc 2>/dev/null || echo 2)

echo "== install dependencies"
scripts/install-deps.sh --test

echo "== format (clang-format, .clang-format)"
.ci/format-check.sh

echo "== web UI (npm ci, build)"
(cd ui && npm ci --no-audit --no-fund && npm run build)
echo "== client libraries for the client tests (npm ci in tests/clients)"
(cd tests/clients && npm ci --no-audit --no-fund)

echo "== release build"
cmake -S . -B build-ci -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null
cmake --build build-ci -j "$jobs"
echo "== clang-tidy (.clang-tidy, Strata's own sources)"
scripts/tidy.sh build-ci
# The benchmarks' build (-O3): its inlining finds warnings (-Werror) that -O2 does not.
echo "== Release build (-O3, no tests)"
cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DSTRATA_BUILD_TESTS=OFF >/dev/null
cmake --build build-release -j "$jobs"
echo "== tests (release build)"
(cd build-ci && ctest --output-on-failure -j "$jobs")

if [ -z "${STRATA_SKIP_VALGRIND:-}" ]; then
  echo "== valgrind (every C unit test of the release build)"
  scripts/valgrind-unit.py build-ci -j "$jobs"
fi

# The sanitizer pass runs every test but the browser tests (JavaScript), the agent's eBPF
# end-to-end tests (test_agent's sampling-rate assertions and test_agent_compaction's aligned
# compaction windows do not hold at ASan's slowdown; the agent's unit tests still run), and the storage tests against radosgw and Azurite, which the release pass runs
# (a second throwaway Ceph cluster per run only adds start-up flakiness; bucket_remote_test, the
# S3/Azure code's server-less unit test, still runs here).
if [ -z "${STRATA_SKIP_ASAN:-}" ]; then
  echo "== sanitizer build (ASan + UBSan)"
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSTRATA_SANITIZE=ON >/dev/null
  cmake --build build-asan -j "$jobs"
  echo "== tests (sanitizer build)"
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
     LSAN_OPTIONS=suppressions="$root/scripts/lsan.supp" \
     UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j "$jobs" -LE "ui|storage" -E "^(test_agent|test_agent_compaction)$")
fi

# ThreadSanitizer over the unit tests (the threaded ones: rpc, http, push, the ingester's batcher,
# the query pool, the engine's workers, the scraper, the compactor). Libraries not built with TSan
# are suppressed (scripts/tsan.supp); Strata's hand-offs through them are annotated
# (lib/common/tsan.h). The agent is left out of this build (its BPF needs no second compile).
if [ -z "${STRATA_SKIP_TSAN:-}" ]; then
  echo "== ThreadSanitizer build"
  cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATA_TSAN=ON -DSTRATA_AGENT=OFF \
        >/dev/null
  cmake --build build-tsan -j "$jobs"
  echo "== unit tests (ThreadSanitizer)"
  (cd build-tsan && TSAN_OPTIONS="halt_on_error=1 suppressions=$root/scripts/tsan.supp" \
     ctest --output-on-failure -j "$jobs" -L unit)
fi

# Line coverage per module from the unit tests (a gcov build at -O0); a module under the floor
# fails the run. The integration tests run the same code through processes and are not counted.
if [ -z "${STRATA_SKIP_COVERAGE:-}" ]; then
  echo "== coverage (gcov build, unit tests, line coverage per module)"
  cmake -S . -B build-cov -DCMAKE_BUILD_TYPE=Debug -DSTRATA_COVERAGE=ON >/dev/null
  cmake --build build-cov -j "$jobs"
  find build-cov -name '*.gcda' -delete
  (cd build-cov && ctest --output-on-failure -j "$jobs" -L unit)
  scripts/coverage.py build-cov --floor 55
fi

if [ -z "${STRATA_SKIP_FUZZ:-}" ]; then
  echo "== fuzzers"
  cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
        -DSTRATA_FUZZ=ON -DSTRATA_BUILD_TESTS=OFF >/dev/null
  cmake --build build-fuzz -j "$jobs"
  seconds=${STRATA_FUZZ_SECONDS:-20}
  found=0
  while read -r target corpus; do
    [ -n "$target" ] || continue
    work=$(mktemp -d)
    if [ -d "$corpus" ]; then cp -r "$corpus"/. "$work"/; fi
    echo "-- $(basename "$target") for ${seconds}s"
    log="$work.log"
    if ! "$target" -max_total_time="$seconds" -rss_limit_mb=2048 "$work" > "$log" 2>&1; then
      tail -n 60 "$log"
      echo "fuzz: $(basename "$target") failed"
      exit 1
    fi
    tail -n 1 "$log"
    rm -f "$log"
    rm -rf "$work"
    found=$((found + 1))
  done < build-fuzz/fuzzers.txt
  echo "fuzz: $found targets ran clean"
fi
echo "== all tests passed"
