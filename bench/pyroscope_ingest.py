#!/usr/bin/python3
"""Pyroscope's POST /ingest against Parca's WriteRaw on the user's path: what the translation
costs per profile.

`strata all` (compactor off, FILESYSTEM bucket) receives the same real Go CPU profiles
(bench/testdata: the Go compiler building five packages, 150-1,100 stacks each) three ways, from
--clients concurrent clients, --requests each:
  - WriteRaw over gRPC (grpcio), one profile per request;
  - POST /ingest with the gzipped pprof as the body (how @pyroscope/nodejs sends);
  - POST /ingest with the same profile as a multipart form with sample_type_config (pyroscope-go);
  - POST /ingest with collapsed stacks (folded, pyroscope-rs), the same stacks as text.
Every call waits for its acknowledgement (the block holding it durable), so throughput includes
the flush interval's batching. Printed per way: profiles per second, the server's CPU per profile
(utime + stime of all threads, /proc/PID/stat) and client wall p50 / p99.

  /usr/bin/python3 bench/pyroscope_ingest.py [--build build-perf] [--clients 16] [--requests 40]
"""
import argparse
import concurrent.futures
import gzip
import os
import shutil
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
from cluster_bench import ROOT, cpu_seconds  # noqa: E402
from fresh_query import GO_FILES, Server  # noqa: E402
from range_grpc import percentile  # noqa: E402
import strata_testlib  # noqa: E402

strata_testlib.load_stubs()
import grpc  # noqa: E402
from parca.profilestore.v1alpha1 import profilestore_pb2 as ps  # noqa: E402
from perftools.profiles import profile_pb2  # noqa: E402

START = 1767225600
BOUNDARY = "strata-bench-boundary"


def folded(raw_gz):
    """The profile's CPU nanoseconds as collapsed stacks, in samples at 100 Hz."""
    p = profile_pb2.Profile()
    p.ParseFromString(gzip.decompress(raw_gz))
    names = {f.id: p.string_table[f.name] for f in p.function}
    locs = {loc.id: [names[line.function_id] for line in reversed(loc.line)]
            for loc in p.location}
    lines = {}
    for s in p.sample:
        frames = [n for lid in reversed(s.location_id) for n in locs[lid]]
        key = ";".join(frames)
        lines[key] = lines.get(key, 0) + max(1, s.value[-1] // 10_000_000)
    return "".join(f"{k} {v}\n" for k, v in lines.items()).encode()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build-perf")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=40)
    args = ap.parse_args()
    binary = os.path.join(ROOT, args.build, "cmd", "strata", "strata")
    profiles = [open(os.path.join(ROOT, "bench", "testdata", f), "rb").read() for f in GO_FILES]
    texts = [folded(p) for p in profiles]
    work = tempfile.mkdtemp(prefix="strata-pyroscope-ingest-")
    srv = None
    try:
        srv = Server(binary, work, "all", "compactor:\n  enabled: false\n")
        channel = grpc.insecure_channel(srv.grpc)
        write_raw = channel.unary_unary("/parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw",
                                        request_serializer=None, response_deserializer=None)

        def grpc_call(client, i):
            req = ps.WriteRawRequest()
            s = req.series.add()
            for k, v in (("__name__", "process_cpu"), ("service_name", f"grpc-{client}")):
                s.labels.labels.add(name=k, value=v)
            s.samples.add(raw_profile=profiles[i % len(profiles)])
            write_raw(req.SerializeToString(), timeout=120)

        def http_call(client, i, shape):
            t = START + i * 10
            q = {"name": f"{shape}-{client}.cpu", "from": t, "until": t + 10, "sampleRate": 100}
            raw = profiles[i % len(profiles)]
            if shape == "raw":
                q["format"] = "pprof"
                body, ctype = raw, "application/octet-stream"
            elif shape == "multipart":
                body = (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"profile\"; "
                        f"filename=\"profile.pprof\"\r\n\r\n").encode() + raw + (
                    f"\r\n--{BOUNDARY}\r\nContent-Disposition: form-data; "
                    f"name=\"sample_type_config\"\r\n\r\n"
                    '{"cpu":{"units":"samples","sampled":true}}'
                    f"\r\n--{BOUNDARY}--\r\n").encode()
                ctype = f"multipart/form-data; boundary={BOUNDARY}"
            else:
                q["format"] = "folded"
                body, ctype = texts[i % len(texts)], "text/plain"
            req = urllib.request.Request(srv.http + "/ingest?" + urllib.parse.urlencode(q),
                                         data=body, headers={"Content-Type": ctype})
            with urllib.request.urlopen(req, timeout=120) as r:
                r.read()

        ways = [("WriteRaw (gRPC)", grpc_call),
                ("/ingest raw pprof", lambda c, i: http_call(c, i, "raw")),
                ("/ingest multipart", lambda c, i: http_call(c, i, "multipart")),
                ("/ingest folded", lambda c, i: http_call(c, i, "folded"))]
        print(f"{len(profiles)} Go CPU profiles ({sum(map(len, profiles)) / len(profiles) / 1e3:.0f}"
              f" KB gzipped on average), {args.clients} clients x {args.requests} requests each",
              flush=True)
        for name, fn in ways:
            walls = []

            def client(c):
                for i in range(args.requests):
                    t0 = time.monotonic()
                    fn(c, i)
                    walls.append((time.monotonic() - t0) * 1000)

            cpu0 = cpu_seconds(srv.proc.pid)
            t0 = time.monotonic()
            with concurrent.futures.ThreadPoolExecutor(args.clients) as pool:
                list(pool.map(client, range(args.clients)))
            elapsed = time.monotonic() - t0
            n = args.clients * args.requests
            cpu = (cpu_seconds(srv.proc.pid) - cpu0) * 1000 / n
            walls.sort()
            print(f"{name:18s}: {n / elapsed:7.1f} profiles/s, server CPU {cpu:6.2f} ms per "
                  f"profile, wall p50 {percentile(walls, 50):6.1f} ms p99 "
                  f"{percentile(walls, 99):6.1f} ms", flush=True)
        channel.close()
    finally:
        if srv is not None:
            srv.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
