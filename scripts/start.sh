#!/usr/bin/env bash
# Installs what Strata needs, builds it, and starts every service in one process with a filesystem
# bucket under ./data (config: examples/strata-local.yaml). Ctrl-C stops it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/install-deps.sh
(cd ui && npm ci --no-audit --no-fund && npm run build)
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATA_BUILD_TESTS=OFF >/dev/null
cmake --build build -j "$(nproc 2>/dev/null || echo 2)" --target strata
mkdir -p data
echo "Strata: UI and JSON API on http://localhost:7070, Parca-compatible gRPC on localhost:7071"
exec build/cmd/strata/strata all -config examples/strata-local.yaml
