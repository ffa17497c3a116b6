#!/usr/bin/env bash
# Installs what Strata needs, builds it, and starts every service in one process with a filesystem
# bucket under ./data (config: examples/strata-local.yaml). It also builds and starts a demo Go
# program (tests/gotarget, net/http/pprof on 127.0.0.1:6060) and keeps it busy by calling its
# CPU-hungry /burn endpoint every second, and the config scrapes it: its profiles appear in the UI
# within a minute. Ctrl-C stops everything.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/install-deps.sh
(cd ui && npm ci --no-audit --no-fund && npm run build)
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATA_BUILD_TESTS=OFF >/dev/null
cmake --build build -j "$(nproc 2>/dev/null || echo 2)" --target strata
mkdir -p data build/demo
[ -x build/demo/gotarget ] || tests/gotarget/build.sh "$root/build/demo/gotarget"

demo_pids=()
cleanup() { for pid in "${demo_pids[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT
build/demo/gotarget -listen 127.0.0.1:6060 -burn=false 2>build/demo/gotarget.log &
demo_pids+=($!)
(while sleep 1; do curl -fsS -o /dev/null http://127.0.0.1:6060/burn || true; done) &
demo_pids+=($!)

echo "Strata: UI and JSON API on http://localhost:7070, Parca-compatible gRPC on localhost:7071"
echo "Demo: a Go program on 127.0.0.1:6060 scraped as job \"demo\" (see http://localhost:7070 targets)"
build/cmd/strata/strata all -config examples/strata-local.yaml
