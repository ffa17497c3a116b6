#!/usr/bin/env bash
# radosgw.sh - a throwaway single-node Ceph cluster with radosgw on 127.0.0.1, for S3 tests.
#
#   tests/servers/radosgw.sh start        start (or reuse) the cluster; prints its environment
#   tests/servers/radosgw.sh env          prints the environment of the running cluster
#   tests/servers/radosgw.sh exec CMD...  runs CMD with that environment (STRATA_S3_*)
#   tests/servers/radosgw.sh stop         stops every daemon and removes the state directory
#
# One monitor, one OSD on memstore (data lives in memory; nothing touches disks), no manager, no
# cephx (auth none), messenger v1 only, radosgw's beast frontend on a free loopback port. radosgw
# verifies SigV4 signatures, so a wrong secret fails like on AWS. The S3 user and bucket are
# created at start. Printed variables:
#   STRATA_S3_ENDPOINT=127.0.0.1:PORT STRATA_S3_BUCKET STRATA_S3_ACCESS_KEY STRATA_S3_SECRET_KEY
# State lives in $STRATA_SERVERS_DIR/radosgw (default /tmp/strata-servers-$UID/radosgw). Starting
# twice reuses a healthy cluster; a broken one is torn down and rebuilt. Needs the Debian packages
# ceph-mon ceph-osd ceph-common radosgw (scripts/install-deps.sh --test installs them).
set -euo pipefail

STATE="${STRATA_SERVERS_DIR:-/tmp/strata-servers-$(id -u)}/radosgw"
ACCESS_KEY=strata-test-access
SECRET_KEY=strata-test-secret-0123456789abcdefghij
BUCKET=strata-test

log() { echo "radosgw.sh: $*" >&2; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

print_env() {
  cat "$STATE/env"
}

healthy() {
  [ -f "$STATE/env" ] || return 1
  # shellcheck disable=SC1091
  . "$STATE/env"
  curl -fsS -o /dev/null --max-time 3 "http://$STRATA_S3_ENDPOINT/" 2>/dev/null
}

stop_daemons() {
  for name in radosgw osd mon; do
    local pidfile="$STATE/$name.pid"
    [ -f "$pidfile" ] || continue
    local pid
    pid=$(cat "$pidfile")
    # Each daemon runs in its own session (setsid); end that process group only.
    kill -TERM -- "-$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    rm -f "$pidfile"
  done
}

write_conf() {
  local mon_port=$1 rgw_port=$2 fsid=$3
  cat > "$STATE/ceph.conf" <<EOF
[global]
fsid = $fsid
mon host = v1:127.0.0.1:$mon_port
mon initial members = a
auth cluster required = none
auth service required = none
auth client required = none
auth allow insecure global id reclaim = true
ms bind msgr2 = false
osd objectstore = memstore
memstore device bytes = 4294967296
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd crush chooseleaf type = 0
mon max pg per osd = 1000
mon allow pool delete = true
mon warn on pool no redundancy = false
run dir = $STATE/run
log file = $STATE/log/\$name.log
admin socket = $STATE/run/\$name.asok
keyring = $STATE/keyring
osd data = $STATE/osd/\$cluster-\$id
mon data = $STATE/mon/\$cluster-\$id
rgw frontends = beast endpoint=127.0.0.1:$rgw_port tcp_nodelay=1
rgw dns name = 127.0.0.1
rgw enable usage log = false
rgw thread pool size = 64
EOF
}

# Runs a daemon in the foreground of its own session, recording the session leader's pid. The
# daemon does not inherit the start lock (fd 9): holding it, it would make every later `start`
# wait for it forever.
spawn() {
  local name=$1; shift
  setsid "$@" -f -c "$STATE/ceph.conf" > "$STATE/log/$name.out" 2>&1 < /dev/null 9>&- &
  echo $! > "$STATE/$name.pid"
}

ceph_cmd() {
  timeout 30 ceph -c "$STATE/ceph.conf" "$@"
}

wait_for() {
  local what=$1 tries=$2; shift 2
  for _ in $(seq 1 "$tries"); do
    if "$@" > /dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  log "timed out waiting for $what (logs in $STATE/log)"
  return 1
}

osd_up() {
  ceph_cmd osd stat | grep -q "1 up"
}

create_bucket() {
  local endpoint=$1
  curl -fsS -o /dev/null --max-time 10 -X PUT \
    --aws-sigv4 "aws:amz:us-east-1:s3" --user "$ACCESS_KEY:$SECRET_KEY" \
    -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" \
    "http://$endpoint/$BUCKET"
}

# Every step checks its status: this runs under `if`, where bash ignores errexit.
start_cluster() {
  rm -rf "$STATE"
  mkdir -p "$STATE/run" "$STATE/log" "$STATE/mon/ceph-a" "$STATE/osd/ceph-0"
  local mon_port rgw_port fsid
  mon_port=$(free_port)
  rgw_port=$(free_port)
  fsid=$(cat /proc/sys/kernel/random/uuid)
  write_conf "$mon_port" "$rgw_port" "$fsid"
  ceph-authtool --create-keyring "$STATE/keyring" --gen-key -n mon. --cap mon 'allow *' > /dev/null || return 1
  monmaptool --create --addv a "[v1:127.0.0.1:$mon_port]" --fsid "$fsid" "$STATE/monmap" > /dev/null || return 1
  ceph-mon -c "$STATE/ceph.conf" --mkfs -i a --monmap "$STATE/monmap" --keyring "$STATE/keyring" || return 1
  spawn mon ceph-mon -i a || return 1
  wait_for "the monitor" 60 ceph_cmd mon stat || return 1
  local uuid
  uuid=$(cat /proc/sys/kernel/random/uuid)
  ceph_cmd osd new "$uuid" > /dev/null || return 1
  ceph-osd -c "$STATE/ceph.conf" -i 0 --mkfs --osd-uuid "$uuid" > "$STATE/log/osd-mkfs.out" 2>&1 || return 1
  spawn osd ceph-osd -i 0 || return 1
  wait_for "the OSD" 240 osd_up || return 1
  # A fresh OSD has a crush weight of about 0, so no placement group would map to it.
  ceph_cmd osd crush reweight osd.0 1.0 > /dev/null || return 1
  spawn radosgw radosgw -n client.rgw || return 1
  wait_for "radosgw" 120 curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:$rgw_port/" || return 1
  timeout 60 radosgw-admin -c "$STATE/ceph.conf" user create --uid=strata --display-name=strata \
    --access-key="$ACCESS_KEY" --secret-key="$SECRET_KEY" > /dev/null || return 1
  wait_for "bucket creation" 20 create_bucket "127.0.0.1:$rgw_port" || return 1
  cat > "$STATE/env" <<EOF
STRATA_S3_ENDPOINT=127.0.0.1:$rgw_port
STRATA_S3_BUCKET=$BUCKET
STRATA_S3_ACCESS_KEY=$ACCESS_KEY
STRATA_S3_SECRET_KEY=$SECRET_KEY
EOF
}

cmd_start() {
  for tool in ceph-mon ceph-osd ceph radosgw radosgw-admin monmaptool ceph-authtool curl; do
    command -v "$tool" > /dev/null || { log "$tool is missing (run scripts/install-deps.sh --test)"; exit 1; }
  done
  mkdir -p "$(dirname "$STATE")"
  exec 9> "$(dirname "$STATE")/radosgw.lock"
  flock 9
  if healthy; then
    print_env
    return 0
  fi
  stop_daemons
  local started
  started=$(date +%s)
  # A loaded machine occasionally leaves the fresh OSD down; a second, clean attempt has always
  # come up, so try twice before giving up.
  local attempt
  for attempt in 1 2; do
    if start_cluster; then
      break
    fi
    log "start attempt $attempt failed; last log lines:"
    tail -n 5 "$STATE"/log/*.out "$STATE"/log/*.log >&2 2>/dev/null || true
    stop_daemons
    if [ "$attempt" = 2 ]; then
      exit 1
    fi
  done
  log "ready in $(( $(date +%s) - started ))s"
  print_env
}

cmd_stop() {
  [ -d "$STATE" ] || return 0
  stop_daemons
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
  env) print_env ;;
  exec) shift; [ "${1:-}" = "--" ] && shift; cmd_exec "$@" ;;
  *) echo "usage: $0 start|stop|env|exec CMD..." >&2; exit 2 ;;
esac
