#!/usr/bin/env bash
# Builds tests/goversions/app twice, offline with Debian's golang-go: against dep-v1 into OUT_V1 and
# against dep-v2 into OUT_V2. Each build uses its own copy of app/go.mod (-modfile) whose replace
# directive points at that version of the dependency; the sources are otherwise the same.
# usage: build.sh OUT_V1 OUT_V2
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out_v1=${1:?usage: build.sh OUT_V1 OUT_V2}
out_v2=${2:?usage: build.sh OUT_V1 OUT_V2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export HOME="$work" GOCACHE="$work/cache" GOPATH="$work/gopath" GOFLAGS=-mod=mod GOPROXY=off \
  GOTOOLCHAIN=local
cd "$here/app"
for v in v1 v2; do
  cp go.mod "$work/go.$v.mod"
  go mod edit -replace="strata.dev/goversions/dep=$here/dep-$v" "$work/go.$v.mod"
  if [ "$v" = v1 ]; then out=$out_v1; else out=$out_v2; fi
  go build -modfile="$work/go.$v.mod" -o "$out" .
done
