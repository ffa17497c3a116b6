#!/usr/bin/python3
"""Ingest cost as the whole process sees it: pprof samples per CPU-second of a running
`strata all` (or `strata ingester`), fed through WriteRaw over gRPC.

For each dataset it starts a fresh server on a FILESYSTEM bucket (default config but ports and
paths: flush_interval 1s, the compactor on), runs build/bench/push_load against it for --seconds
with --threads closed-loop pushers (each call waits for its acknowledgement, i.e. for the block
holding it to be durable), and reads the server's CPU time (utime + stime of all its threads) and
peak RSS (VmHWM) from /proc. Every figure is the server process's, not a stage's:

  * agent:  agent-like CPU profiles (bench/agentgen: 2,000 stacks per 10 s profile over ~20,000
            functions, stacks 10-60 deep, mean ~28), 10 processes per request as one node's agent
            sends them;
  * go:     real Go profiles (bench/testdata: the Go compiler's CPU profile, 1,086 stacks, and its
            heap profile, 549 stacks, 4 sample types), 40 series per request as the scraper
            batches a fleet's scrapes;
  * go-small: the tiny Go CPU and heap profiles of lib/pprof/testdata (3 and 12 stacks), 500
            series per request: what per-profile overhead costs.

Prints pprof samples (DESIGN.md's unit: one stack with its values) and profiles per server
CPU-second, the acknowledged rate, and the server's peak RSS. The load generator's own CPU is
not counted (its requests are built before the clock starts).

  bench/ingest_cost.py [--build build-perf] [--seconds 90] [--threads 8] [--mode all|ingester]
                       [--only agent|go|go-small]
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
from cluster_bench import ROOT, cpu_seconds, free_port  # noqa: E402

DATASETS = {
    "agent": [],
    "go": ["--pprof", "bench/testdata/go_compiler_cpu.pb.gz:process_cpu",
           "--pprof", "bench/testdata/go_compiler_heap.pb.gz:memory",
           "--targets", "200", "--series", "40", "--windows", "20"],
    "go-small": ["--pprof", "lib/pprof/testdata/go_cpu.pb.gz:process_cpu",
                 "--pprof", "lib/pprof/testdata/go_heap.pb.gz:memory",
                 "--targets", "1000", "--series", "500", "--windows", "20"],
}


def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def metric(http, name):
    """Sum of a metric's samples on the server's /metrics (0 when absent)."""
    with urllib.request.urlopen(http + "/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith(name) and line[len(name)] in " {")


def start_server(binary, mode, work):
    grpc_port, http_port = free_port(), free_port()
    cfg = os.path.join(work, "strata.yaml")
    with open(cfg, "w") as f:
        f.write(f"""server:
  http_listen_address: 127.0.0.1:{http_port}
  grpc_listen_address: 127.0.0.1:{grpc_port}
  log_level: warn
bucket:
  type: FILESYSTEM
  config:
    directory: {work}/bucket
""")
    log = open(os.path.join(work, "strata.log"), "w")
    proc = subprocess.Popen([binary, mode, "-config", cfg], stdout=log, stderr=subprocess.STDOUT)
    http = f"http://127.0.0.1:{http_port}"
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit(f"strata {mode} exited; see {work}/strata.log")
        try:
            with urllib.request.urlopen(http + "/ready", timeout=1) as r:
                if r.status == 200:
                    return proc, f"127.0.0.1:{grpc_port}", http
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"strata {mode} did not become ready; see {work}/strata.log")


def run(args, name):
    work = tempfile.mkdtemp(prefix="strata-ingest-cost-")
    binary = os.path.join(ROOT, args.build, "cmd", "strata", "strata")
    load = os.path.join(ROOT, args.build, "bench", "push_load")
    proc, addr, http = start_server(binary, args.mode, work)
    try:
        cmd = [load, "--address", addr, "--seconds", str(args.seconds),
               "--threads", str(args.threads)] + DATASETS[name]
        # push_load builds its requests before its clock starts; the server idles meanwhile
        # (flush ticks, the compactor's sync), which is counted: it is the process's cost.
        cpu0 = cpu_seconds(proc.pid)
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout
        cpu = cpu_seconds(proc.pid) - cpu0
        rss = peak_rss_mib(proc.pid)
        resets = metric(http, "strata_ingester_symbol_resets_total")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)
    r = dict(kv.split("=") for kv in out.split())
    samples, profiles, wall = int(r["samples"]), int(r["profiles"]), float(r["seconds"])
    print(f"{name:9s} strata {args.mode}: {samples / cpu / 1e6:5.2f} M pprof samples per CPU-s, "
          f"{profiles / cpu:8.0f} profiles per CPU-s | acknowledged {samples / wall / 1e6:5.2f} M "
          f"samples/s, {profiles / wall:6.0f} profiles/s | server CPU {cpu:5.1f} s over "
          f"{wall:4.1f} s, peak RSS {rss:6.0f} MiB | dictionary resets {resets:.0f} | "
          f"errors {r['errors']}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build-perf")
    ap.add_argument("--seconds", type=float, default=90)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--mode", choices=["all", "ingester"], default="all")
    ap.add_argument("--only", choices=sorted(DATASETS))
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} CPUs; load generator on the same machine")
    for name in DATASETS:
        if args.only is None or args.only == name:
            run(args, name)


if __name__ == "__main__":
    main()
