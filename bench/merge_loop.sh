#!/bin/bash
# merge_loop.sh - repeated merges over a kept bucket, for A/B runs of two builds of strata.
#
#   bench/merge_loop.sh STRATA_BINARY WORK_DIR QUERY START END RUNS
#
# WORK_DIR is one that `bench/fresh_query.py --fresh-only --keep` printed (it holds
# strata-all.yaml and the bucket). A `strata all` is started on it alone (fresh ports, so no
# ingester dictionary in its RSS), then QUERY is merged RUNS times through the gRPC client
# (`strata query merge --top 1`), 3 s apart (the query pool trims the allocator after 2 s idle).
# Per run: the server's CPU for the merge (utime + stime from /proc/PID/stat, 10 ms ticks), its RSS
# before and its peak RSS growth during the merge (VmHWM reset through /proc/PID/clear_refs).
# The first run opens the readers (a cold query); the later ones find them cached.
#
#   bench/merge_loop.sh build-perf/cmd/strata/strata /tmp/strata-fresh-query-XXXX \
#       'parca_agent:samples:count:cpu:nanoseconds:delta{}' 2026-01-01T00:00:00Z \
#       2026-01-01T00:07:00Z 4
set -euo pipefail
if [ $# -ne 6 ]; then
    sed -n '3,4p' "$0" >&2
    exit 2
fi
binary=$(realpath "$1")
work=$2
query=$3
start=$4
end=$5
runs=$6
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
grpc_port=$(free_port)
http_port=$(free_port)
config=$work/strata-merge-loop.yaml
sed "s/grpc_listen_address: .*/grpc_listen_address: 127.0.0.1:$grpc_port/; s/http_listen_address: .*/http_listen_address: 127.0.0.1:$http_port/" \
    "$work/strata-all.yaml" > "$config"
"$binary" all -config "$config" > "$work/strata-merge-loop.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 300); do
    curl -sf "http://127.0.0.1:$http_port/ready" > /dev/null && break
    sleep 0.2
done
for run in $(seq "$runs"); do
    sleep 3
    echo 5 > "/proc/$server/clear_refs"
    rss0=$(awk '/VmRSS/ {print $2}' "/proc/$server/status")
    cpu0=$(awk '{print $14 + $15}' "/proc/$server/stat")
    "$binary" query merge "$query" --start "$start" --end "$end" --address "127.0.0.1:$grpc_port" \
        --top 1 > /dev/null
    cpu1=$(awk '{print $14 + $15}' "/proc/$server/stat")
    hwm=$(awk '/VmHWM/ {print $2}' "/proc/$server/status")
    echo "run $run: server CPU $(((cpu1 - cpu0) * 10)) ms, RSS before $((rss0 / 1024)) MiB, peak growth $(((hwm - rss0) / 1024)) MiB"
done
