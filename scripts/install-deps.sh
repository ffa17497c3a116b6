#!/usr/bin/env bash
# Installs every Debian package Strata needs to build, run and test. Idempotent: packages already
# present are skipped by apt, and apt-get update runs only when something is missing.
#
#   scripts/install-deps.sh            build + run dependencies
#   scripts/install-deps.sh --test     also what the test suite needs (Go target, Python grpcio, ...)
set -euo pipefail

BUILD_PACKAGES=(
  build-essential cmake pkg-config git ca-certificates
  libgrpc-dev libprotobuf-c-dev protobuf-c-compiler protobuf-compiler libprotobuf-dev
  protobuf-compiler-grpc
  libmicrohttpd-dev libgnutls28-dev libcurl4-openssl-dev libssl-dev libnng-dev libzstd-dev libyaml-dev zlib1g-dev
  libdeflate-dev libre2-dev  # RE2: label matchers and relabel regexes as Prometheus has them
  libelf-dev libdw-dev libbpf-dev bpftool clang llvm
  libiberty-dev  # the agent's C++ and Rust demangler (c++filt's)
  nodejs
  golang-go curl  # the demo Go program scripts/start.sh builds, starts and keeps busy
)
TEST_PACKAGES=(
  libcmocka-dev valgrind libclang-rt-14-dev
  golang-go golang-github-google-pprof-dev
  python3 python3-grpcio python3-grpc-tools python3-protobuf python3-yaml
  curl procps iproute2 clang-format clang-tidy binutils util-linux
  openssl  # certificates for tests (the scraper's TLS test, tests/kubernetes/make_certs.sh)
  # the agent's DWARF unwinding test (AgentDwarfUnwindTest): a Rust program, perf as reference
  rustc linux-perf
  # Helm chart test (tests/helm): a renderer on text/template + sprig, and yamllint
  golang-github-masterminds-sprig-dev golang-gopkg-yaml.v2-dev golang-gopkg-yaml.v3-dev yamllint
  chromium
  # storage tests: a throwaway Ceph cluster with radosgw (S3) and Azurite from npm (AZURE)
  ceph-mon ceph-osd ceph-common radosgw  # Azurite comes from npm, which ships with nodejs here
)

want=("${BUILD_PACKAGES[@]}")
if [ "${1:-}" = "--test" ]; then want+=("${TEST_PACKAGES[@]}"); fi

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#want[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
