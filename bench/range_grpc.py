#!/usr/bin/python3
"""Range queries through gRPC: a day of 100 series, every sum_by, latency as a client sees it.

  1. The data: bench/query_bench's "range-day" tenant (a day of 100 agent-like series, one profile
     every 10 s per series, 864,000 profiles, in 24 hourly blocks written straight into the
     bucket: a shortcut for the data, which a range query reads only the profiles table of). It is
     made with query_bench (--hours 1 --processes 100) unless --dir already holds it.
  2. The path: `strata all` (compactor off) on that FILESYSTEM bucket; QueryRange over gRPC from
     Python grpcio (an independent client, as Grafana's Parca data source and the UI's backend
     are), the whole day, step 60 s, with sum_by pid (100 series out), node (10), none (1) and
     pid+node; one warm-up query each (it opens the readers), then --runs timed ones.
  3. Printed per sum_by: series and points returned, the profiles they count (checked: 864,000),
     client wall time p50 / p90 / p99 / max (which includes grpcio decoding the answer: 144,000
     points for sum_by pid, 4.9 MB), the same --runs again with the answer taken as bytes (the
     wire and the server as a client sees them, without Python's protobuf decoding, which a Go
     or browser client does far faster), the server's CPU per query (utime + stime of all its
     threads from /proc/PID/stat over both sets of runs, divided by them), and the querier's own
     duration of each query from its /metrics histogram (strata_querier_query_duration_seconds:
     the mean and the share within 50 ms).

  /usr/bin/python3 bench/range_grpc.py [--build build-perf] [--dir DIR] [--runs 100]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
from cluster_bench import ROOT, cpu_seconds, free_port  # noqa: E402
import strata_testlib  # noqa: E402

strata_testlib.load_stubs()
import grpc  # noqa: E402
from google.protobuf import duration_pb2, timestamp_pb2  # noqa: E402
from parca.query.v1alpha1 import query_pb2 as qpb  # noqa: E402
from parca.query.v1alpha1 import query_pb2_grpc as q_grpc  # noqa: E402

TENANT = [("x-scope-orgid", "range-day")]
QUERY = "parca_agent:samples:count:cpu:nanoseconds:delta{}"
T0 = 1699999200  # query_bench's T0_NS
SERIES, PROFILES = 100, 864000


def ensure_data(build, d):
    if os.path.exists(os.path.join(d, "range-day.done")):
        return
    qb = os.path.join(ROOT, build, "bench", "query_bench")
    print(f"generating the range data with {qb} (once) ...", flush=True)
    subprocess.run([qb, "--hours", "1", "--processes", "100", "--pprof-minutes", "0",
                    "--merge-runs", "1", "--range-runs", "1", "--dir", d, "--keep"],
                   check=True, stdout=subprocess.DEVNULL, cwd=ROOT)


def start_server(build, d, work):
    grpc_addr, http_port = f"127.0.0.1:{free_port()}", free_port()
    cfg = os.path.join(work, "strata.yaml")
    with open(cfg, "w") as f:
        f.write(f"""server:
  http_listen_address: 127.0.0.1:{http_port}
  grpc_listen_address: {grpc_addr}
  log_level: warn
bucket:
  type: FILESYSTEM
  config:
    directory: {d}/bucket
compactor:
  enabled: false
""")
    log = open(os.path.join(work, "strata.log"), "w")
    proc = subprocess.Popen([os.path.join(ROOT, build, "cmd", "strata", "strata"), "all",
                             "-config", cfg], stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit(f"strata all exited; see {work}/strata.log")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/ready", timeout=1) as r:
                if r.status == 200:
                    return proc, grpc_addr, f"http://127.0.0.1:{http_port}"
        except OSError:
            time.sleep(0.1)
    proc.terminate()
    raise SystemExit("strata all did not become ready")


def server_durations(http):
    """The querier's own query_range durations so far: (count, sum in s, {le: count})."""
    with urllib.request.urlopen(f"{http}/metrics", timeout=10) as r:
        text = r.read().decode()
    count, total, buckets = 0, 0.0, {}
    for line in text.splitlines():
        if 'operation="query_range"' not in line or line.startswith("#"):
            continue
        name, value = line.rsplit(" ", 1)
        if name.startswith("strata_querier_query_duration_seconds_count"):
            count = int(float(value))
        elif name.startswith("strata_querier_query_duration_seconds_sum"):
            total = float(value)
        elif name.startswith("strata_querier_query_duration_seconds_bucket"):
            buckets[name.split('le="')[1].split('"')[0]] = int(float(value))
    return count, total, buckets


def percentile(sorted_values, p):
    i = min(len(sorted_values) - 1, max(0, round(p / 100 * len(sorted_values) + 0.5) - 1))
    return sorted_values[i]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build-perf")
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "strata-query-bench"))
    ap.add_argument("--runs", type=int, default=100)
    args = ap.parse_args()
    ensure_data(args.build, args.dir)
    work = tempfile.mkdtemp(prefix="strata-range-grpc-")
    proc, addr, http = start_server(args.build, args.dir, work)
    try:
        channel = grpc.insecure_channel(addr, options=[("grpc.max_receive_message_length",
                                                       64 << 20)])
        stub = q_grpc.QueryServiceStub(channel)
        # The same method with the answer left as bytes: the wire as a client sees it, without
        # Python's protobuf decoding (Grafana's data source decodes in Go, the UI in a browser).
        raw = channel.unary_unary("/parca.query.v1alpha1.QueryService/QueryRange",
                                  request_serializer=qpb.QueryRangeRequest.SerializeToString,
                                  response_deserializer=None)
        start = timestamp_pb2.Timestamp(seconds=T0)
        end = timestamp_pb2.Timestamp(seconds=T0 + 24 * 3600 - 1)
        step = duration_pb2.Duration(seconds=60)
        for sum_by in (["pid"], ["node"], [], ["pid", "node"]):
            req = qpb.QueryRangeRequest(query=QUERY, start=start, end=end, step=step,
                                        sum_by=sum_by)
            r = stub.QueryRange(req, metadata=TENANT, timeout=60)  # warm-up
            counted = sum(s.count for series in r.series for s in series.samples)
            points = sum(len(series.samples) for series in r.series)
            if counted != PROFILES:
                raise SystemExit(f"sum_by {sum_by}: {counted} profiles counted, want {PROFILES}")
            walls, wire = [], []
            before = server_durations(http)
            cpu0 = cpu_seconds(proc.pid)
            for _ in range(args.runs):
                t0 = time.monotonic()
                stub.QueryRange(req, metadata=TENANT, timeout=60)
                walls.append((time.monotonic() - t0) * 1000)
            for _ in range(args.runs):
                t0 = time.monotonic()
                answer = raw(req, metadata=TENANT, timeout=60)
                wire.append((time.monotonic() - t0) * 1000)
            cpu = (cpu_seconds(proc.pid) - cpu0) * 1000 / (2 * args.runs)
            after = server_durations(http)
            n = after[0] - before[0]
            mean = (after[1] - before[1]) * 1000 / max(n, 1)
            within = (after[2].get("0.05", 0) - before[2].get("0.05", 0)) * 100 / max(n, 1)
            walls.sort()
            wire.sort()
            print(f"sum_by {','.join(sum_by) or '(none)':9s} {len(r.series):3d} series, "
                  f"{points:6d} points, {counted} profiles; {args.runs} runs: wall p50 "
                  f"{percentile(walls, 50):5.1f} ms, p90 {percentile(walls, 90):5.1f}, p99 "
                  f"{percentile(walls, 99):5.1f}, max {walls[-1]:5.1f}; undecoded "
                  f"({len(answer)} bytes): p50 {percentile(wire, 50):5.1f} ms, p99 "
                  f"{percentile(wire, 99):5.1f}, max {wire[-1]:5.1f}; server: CPU "
                  f"{cpu:5.1f} ms per query, duration mean {mean:5.1f} ms, {within:5.1f}% "
                  f"within 50 ms", flush=True)
        channel.close()
    finally:
        proc.terminate()
        proc.wait(timeout=60)


if __name__ == "__main__":
    main()
