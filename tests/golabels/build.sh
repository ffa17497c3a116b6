#!/usr/bin/env bash
# Builds the pprof-labels Go program offline with Debian's golang-go: build.sh OUTPUT_BINARY
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build.sh OUTPUT_BINARY}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$here"
HOME="$work" GOCACHE="$work/cache" GOPATH="$work/gopath" GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local \
  go build -o "$out" .
