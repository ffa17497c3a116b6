#!/usr/bin/python3
"""Ingest throughput with one and with two `strata ingester` processes, and bucket requests per
1,000 profiles.

For each ingester count it starts that many `strata ingester` processes on one bucket (a
FILESYSTEM directory, or S3 when STRATA_S3_* are set as tests/servers/radosgw.sh sets them), runs
build/bench/push_load against all of them for --seconds, and reports:
  * acknowledged pprof samples (stacks: DESIGN.md's unit; each is stored once per sample type)
    per second (wall) and per ingester CPU-second (utime+stime of the
    ingester processes from /proc, so "per core" whatever the thread count);
  * bucket requests per 1,000 profiles, from the ingesters' strata_bucket_operations_total.
Every figure comes from real processes talking gRPC; nothing is simulated.

  bench/cluster_bench.py [--build build-rel] [--seconds 20] [--threads 4] [--processes 10]
"""
import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bucket_ops(http):
    with urllib.request.urlopen(http + "/metrics", timeout=10) as r:
        text = r.read().decode()
    ops = {}
    for m in re.finditer(r'^strata_bucket_operations_total\{operation="(\w+)"\} (\d+)', text, re.M):
        ops[m.group(1)] = int(m.group(2))
    return ops


def bucket_yaml(work):
    if os.environ.get("STRATA_S3_ENDPOINT"):
        return f"""
  type: S3
  prefix: bench-{os.getpid()}-{int(time.time())}
  config:
    bucket: {os.environ["STRATA_S3_BUCKET"]}
    endpoint: {os.environ["STRATA_S3_ENDPOINT"]}
    insecure: true
    access_key: {os.environ["STRATA_S3_ACCESS_KEY"]}
    secret_key: {os.environ["STRATA_S3_SECRET_KEY"]}
"""
    return f"""
  type: FILESYSTEM
  config:
    directory: {work}/bucket
"""


def start_ingester(binary, work, name, bucket):
    grpc_port, http_port = free_port(), free_port()
    cfg = os.path.join(work, f"{name}.yaml")
    with open(cfg, "w") as f:
        f.write(f"""server:
  http_listen_address: 127.0.0.1:{http_port}
  grpc_listen_address: 127.0.0.1:{grpc_port}
  log_level: warn
bucket:{bucket}
ingester:
  flush_interval: 1s
""")
    log = open(os.path.join(work, f"{name}.log"), "w")
    proc = subprocess.Popen([binary, "ingester", "-config", cfg], stdout=log, stderr=subprocess.STDOUT)
    http = f"http://127.0.0.1:{http_port}"
    for _ in range(300):
        try:
            with urllib.request.urlopen(http + "/ready", timeout=1) as r:
                if r.status == 200:
                    return proc, f"127.0.0.1:{grpc_port}", http
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{name} did not become ready; see {work}/{name}.log")


def run(args, n_ingesters):
    work = tempfile.mkdtemp(prefix="strata-cluster-bench-")
    binary = os.path.join(ROOT, args.build, "cmd", "strata", "strata")
    load = os.path.join(ROOT, args.build, "bench", "push_load")
    bucket = bucket_yaml(work)
    nodes = [start_ingester(binary, work, f"ingester{i}", bucket) for i in range(n_ingesters)]
    try:
        cpu0 = sum(cpu_seconds(p.pid) for p, _, _ in nodes)
        ops0 = [bucket_ops(h) for _, _, h in nodes]
        cmd = [load, "--seconds", str(args.seconds), "--threads", str(args.threads * n_ingesters),
               "--processes", str(args.processes)]
        for _, addr, _ in nodes:
            cmd += ["--address", addr]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        cpu = sum(cpu_seconds(p.pid) for p, _, _ in nodes) - cpu0
        ops = {}
        for before, (_, _, h) in zip(ops0, nodes):
            for k, v in bucket_ops(h).items():
                ops[k] = ops.get(k, 0) + v - before.get(k, 0)
    finally:
        for p, _, _ in nodes:
            p.terminate()
            p.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)
    r = dict(kv.split("=") for kv in out.split())
    samples, profiles, wall = int(r["samples"]), int(r["profiles"]), float(r["seconds"])
    total_ops = sum(ops.values())
    print(f"{n_ingesters} ingester(s): {samples / wall / 1e6:6.2f} M samples/s wall, "
          f"{samples / cpu / 1e6:5.2f} M samples/s per ingester core (ingester cpu {cpu:.1f}s "
          f"over {wall:.1f}s), {profiles / wall:7.0f} profiles/s, errors {r['errors']}, "
          f"bucket requests per 1,000 profiles: {1000 * total_ops / max(profiles, 1):.1f} "
          f"({', '.join(f'{k} {v}' for k, v in sorted(ops.items()) if v)})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build-rel")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--threads", type=int, default=4, help="load threads per ingester")
    ap.add_argument("--processes", type=int, default=10, help="processes per request (one node)")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} CPUs; load generator on the same machine")
    for n in (1, 2):
        run(args, n)


if __name__ == "__main__":
    sys.exit(main())
