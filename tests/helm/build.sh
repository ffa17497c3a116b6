#!/usr/bin/env bash
# Builds the test chart renderer offline: build.sh OUTPUT_BINARY
# GOPATH mode against Debian's Go packages (/usr/share/gocode: golang-github-masterminds-sprig-dev,
# golang-gopkg-yaml.v2-dev, golang-gopkg-yaml.v3-dev), no module download.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build.sh OUTPUT_BINARY}
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/gopath/src/strata"
cp -r "$here/render" "$work/gopath/src/strata/render"
cd "$work/gopath/src/strata/render"
HOME="$work" GOCACHE="${GOCACHE:-$work/cache}" GOPATH="$work/gopath:/usr/share/gocode" GO111MODULE=off \
  GOPROXY=off GOTOOLCHAIN=local GOFLAGS= go build -o "$out" .
