#!/usr/bin/env bash
# azurite.sh - Azurite (Azure Blob Storage emulator, from npm) on 127.0.0.1, for AZURE tests.
#
#   tests/servers/azurite.sh start        start (or reuse) Azurite; prints its environment
#   tests/servers/azurite.sh env          prints the environment of the running server
#   tests/servers/azurite.sh exec CMD...  runs CMD with that environment (STRATA_AZURE_*)
#   tests/servers/azurite.sh stop         stops it and removes the state directory
#
# Azurite keeps blobs in memory (--inMemoryPersistence), verifies SharedKey signatures with the
# well-known development account, and sends no telemetry. It is installed on first use with
# `npm ci` into tests/servers/node_modules (git-ignored) from package.json / package-lock.json.
# Printed variables:
#   STRATA_AZURE_ENDPOINT=http://127.0.0.1:PORT STRATA_AZURE_ACCOUNT STRATA_AZURE_KEY
#   STRATA_AZURE_CONTAINER
# State lives in $STRATA_SERVERS_DIR/azurite (default /tmp/strata-servers-$UID/azurite).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
STATE="${STRATA_SERVERS_DIR:-/tmp/strata-servers-$(id -u)}/azurite"
ACCOUNT=devstoreaccount1
# Azurite's published development key (not a secret).
KEY='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='
CONTAINER=strata-test

log() { echo "azurite.sh: $*" >&2; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

healthy() {
  [ -f "$STATE/env" ] && [ -f "$STATE/azurite.pid" ] || return 1
  kill -0 "$(cat "$STATE/azurite.pid")" 2>/dev/null || return 1
  # shellcheck disable=SC1091
  . "$STATE/env"
  curl -sS -o /dev/null --max-time 3 "$STRATA_AZURE_ENDPOINT/" 2>/dev/null
}

stop_server() {
  local pidfile="$STATE/azurite.pid"
  [ -f "$pidfile" ] || return 0
  local pid
  pid=$(cat "$pidfile")
  kill -TERM -- "-$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$pid" 2>/dev/null || true
  rm -f "$pidfile"
}

install_azurite() {
  [ -x "$HERE/node_modules/.bin/azurite-blob" ] && return 0
  command -v npm > /dev/null || { log "npm is missing (apt-get install npm)"; exit 1; }
  log "installing Azurite with npm"
  (cd "$HERE" && npm ci --no-audit --no-fund --loglevel=error > /dev/null)
}

cmd_start() {
  mkdir -p "$(dirname "$STATE")"
  exec 9> "$(dirname "$STATE")/azurite.lock"
  flock 9
  if healthy; then
    cat "$STATE/env"
    return 0
  fi
  stop_server
  install_azurite
  rm -rf "$STATE"
  mkdir -p "$STATE"
  local port
  port=$(free_port)
  setsid "$HERE/node_modules/.bin/azurite-blob" --blobHost 127.0.0.1 --blobPort "$port" \
    --inMemoryPersistence --disableTelemetry --skipApiVersionCheck \
    > "$STATE/azurite.out" 2>&1 < /dev/null 9>&- &
  echo $! > "$STATE/azurite.pid"
  for _ in $(seq 1 60); do
    if curl -sS -o /dev/null --max-time 1 "http://127.0.0.1:$port/" 2>/dev/null; then
      cat > "$STATE/env" <<EOT
STRATA_AZURE_ENDPOINT=http://127.0.0.1:$port
STRATA_AZURE_ACCOUNT=$ACCOUNT
STRATA_AZURE_KEY=$KEY
STRATA_AZURE_CONTAINER=$CONTAINER
EOT
      cat "$STATE/env"
      return 0
    fi
    sleep 0.25
  done
  log "Azurite did not start; output:"
  tail -n 20 "$STATE/azurite.out" >&2 || true
  stop_server
  exit 1
}

cmd_stop() {
  [ -d "$STATE" ] || return 0
  stop_server
  rm -rf "$STATE"
}

cmd_exec() {
  [ -f "$STATE/env" ] || { log "not running (start it first)"; exit 1; }
  set -a
  # shellcheck disable=SC1091
  . "$STATE/env"
  set +a
  exec "$@"
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  env) cat "$STATE/env" ;;
  exec) shift; [ "${1:-}" = "--" ] && shift; cmd_exec "$@" ;;
  *) echo "usage: $0 start|stop|env|exec CMD..." >&2; exit 2 ;;
esac
