#!/usr/bin/python3
"""Query reports through gRPC on the user's path: what each report type costs beside the merge.

  1. `strata all` (compactor off) on a FILESYSTEM bucket takes --minutes of agent-like CPU
     profiles of --processes processes (bench/agentgen through build/bench/push_load --once:
     2,000 stacks per 10 s profile over ~20,000 functions, stacks 10-60 deep) through WriteRaw,
     every call acknowledged once its block is durable.
  2. For each report type Parca's clients ask (FLAMEGRAPH_TABLE, FLAMEGRAPH_ARROW, TABLE_ARROW,
     TOP, CALLGRAPH, PPROF, FLAMECHART) a MERGE of one process over the whole window through
     Python grpcio with the answer left as bytes (the wire and the server as a Go or browser
     client sees them), after one warm-up: client wall time p50 / p99 over --runs, the server's
     CPU per query (utime + stime of all its threads, /proc/PID/stat), and the answer's size.
     The same with node_trim_threshold 1 % (Parca's UI trims sub-pixel nodes) for the flame
     graphs. The merge itself is the same in every row; the differences are the reports'.
  3. The same merge through Grafana Pyroscope's query API as Grafana's data source asks it
     (Connect, binary codec, on the HTTP port): SelectMergeStacktraces with max_nodes 16384 (the
     data source's default) and SelectMergeProfile.

  /usr/bin/python3 bench/report_grpc.py [--build build-perf] [--minutes 2] [--processes 20]
                                        [--runs 20]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
from cluster_bench import ROOT, cpu_seconds  # noqa: E402
from fresh_query import START_UNIX, TYPE, Server, first_pod, wait_profiles  # noqa: E402
from range_grpc import percentile  # noqa: E402
import strata_testlib  # noqa: E402

strata_testlib.load_stubs()
import grpc  # noqa: E402
from google.protobuf import timestamp_pb2  # noqa: E402
from parca.query.v1alpha1 import query_pb2 as qpb  # noqa: E402
from querier.v1 import querier_pb2 as pq  # noqa: E402

REPORTS = ["FLAMEGRAPH_TABLE", "FLAMEGRAPH_ARROW", "TABLE_ARROW", "TOP", "CALLGRAPH", "PPROF",
           "FLAMECHART"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build-perf")
    ap.add_argument("--minutes", type=int, default=2)
    ap.add_argument("--processes", type=int, default=20)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    binary = os.path.join(ROOT, args.build, "cmd", "strata", "strata")
    load = os.path.join(ROOT, args.build, "bench", "push_load")
    work = tempfile.mkdtemp(prefix="strata-report-grpc-")
    windows = args.minutes * 6
    end_s = START_UNIX + windows * 10 + 60
    end = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(end_s))
    srv = None
    try:
        srv = Server(binary, work, "all", "compactor:\n  enabled: false\n")
        out = subprocess.run([load, "--address", srv.grpc, "--once", "--windows", str(windows),
                              "--processes", str(args.processes), "--per-request", "10",
                              "--start-unix", str(START_UNIX), "--windows-per-second", "2"],
                             check=True, capture_output=True, text=True, cwd=ROOT).stdout
        r = dict(kv.split("=") for kv in out.split())
        if int(r["errors"]) != 0:
            raise SystemExit(f"push_load: {r['errors']} calls failed")
        wait_profiles(srv, end, windows * args.processes)
        pod = first_pod(srv, end)
        print(f"pushed {windows * args.processes} profiles ({int(r['samples']) / 1e6:.2f} M "
              f"pprof samples); merging {{pod=\"{pod}\"}} over {args.minutes} min, "
              f"{args.runs} runs each", flush=True)
        channel = grpc.insecure_channel(srv.grpc, options=[("grpc.max_receive_message_length",
                                                           256 << 20)])
        raw = channel.unary_unary("/parca.query.v1alpha1.QueryService/Query",
                                  request_serializer=qpb.QueryRequest.SerializeToString,
                                  response_deserializer=None)
        merge = qpb.MergeProfile(query=TYPE + f'{{pod="{pod}"}}',
                                 start=timestamp_pb2.Timestamp(seconds=START_UNIX),
                                 end=timestamp_pb2.Timestamp(seconds=end_s))
        md = [("x-scope-orgid", "anonymous")]
        for trim in (0.0, 1.0):
            for name in REPORTS:
                if trim and name not in ("FLAMEGRAPH_TABLE", "FLAMEGRAPH_ARROW", "FLAMECHART"):
                    continue
                req = qpb.QueryRequest(mode=qpb.QueryRequest.MODE_MERGE, merge=merge,
                                       report_type=qpb.QueryRequest.ReportType.Value(
                                           "REPORT_TYPE_" + name),
                                       node_trim_threshold=trim)
                answer = raw(req, metadata=md, timeout=600)  # warm-up
                walls = []
                cpu0 = cpu_seconds(srv.proc.pid)
                for _ in range(args.runs):
                    t0 = time.monotonic()
                    answer = raw(req, metadata=md, timeout=600)
                    walls.append((time.monotonic() - t0) * 1000)
                cpu = (cpu_seconds(srv.proc.pid) - cpu0) * 1000 / args.runs
                walls.sort()
                print(f"{name:16s} trim {trim:3.1f}%: wall p50 {percentile(walls, 50):7.1f} ms, "
                      f"p99 {percentile(walls, 99):7.1f} ms; server CPU {cpu:7.1f} ms per query; "
                      f"answer {len(answer) / 1e6:7.2f} MB", flush=True)
        channel.close()
        pyroscope_rows(srv, pod, end_s, args.runs)
    finally:
        if srv is not None:
            srv.stop()
        shutil.rmtree(work, ignore_errors=True)


def pyroscope_rows(srv, pod, end_s, runs):
    """Step 3: the merge through querier.v1.QuerierService over Connect."""
    type_id = ":".join(TYPE.split(":")[:5])
    calls = [
        ("SelectMergeStacktraces", pq.SelectMergeStacktracesRequest(
            profile_typeID=type_id, label_selector=f'{{pod="{pod}"}}', start=START_UNIX * 1000,
            end=end_s * 1000, max_nodes=16384)),
        ("SelectMergeProfile", pq.SelectMergeProfileRequest(
            profile_typeID=type_id, label_selector=f'{{pod="{pod}"}}', start=START_UNIX * 1000,
            end=end_s * 1000)),
    ]
    for name, msg in calls:
        body = msg.SerializeToString()

        def call():
            req = urllib.request.Request(
                f"{srv.http}/querier.v1.QuerierService/{name}", data=body,
                headers={"Content-Type": "application/proto", "X-Scope-OrgID": "anonymous"})
            with urllib.request.urlopen(req, timeout=600) as r:
                return r.read()

        answer = call()  # warm-up
        walls = []
        cpu0 = cpu_seconds(srv.proc.pid)
        for _ in range(runs):
            t0 = time.monotonic()
            answer = call()
            walls.append((time.monotonic() - t0) * 1000)
        cpu = (cpu_seconds(srv.proc.pid) - cpu0) * 1000 / runs
        walls.sort()
        print(f"pyroscope {name:22s}: wall p50 {percentile(walls, 50):7.1f} ms, "
              f"p99 {percentile(walls, 99):7.1f} ms; server CPU {cpu:7.1f} ms per query; "
              f"answer {len(answer) / 1e6:7.2f} MB", flush=True)


if __name__ == "__main__":
    main()
