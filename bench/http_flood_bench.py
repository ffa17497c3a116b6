#!/usr/bin/python3
"""http_flood_bench: how `strata all`'s HTTP port holds a connection flood, in figures.

Starts `strata all` on a temporary FILESYSTEM bucket (or uses --address, an HTTP host:port already
running), pushes lib/pprof/testdata/go_cpu.pb.gz with `strata push`, then opens --connections
connections from many loopback addresses (127.0.1.x, --per-address each, under the server's cap
per address), half idle and half trickling header bytes (--trickle-fraction), and while they are
held measures /ready and a merge query (/api/v1/query) from a fresh connection each time. Prints
latency percentiles, how many flood connections the server still holds, and the server's threads
and resident memory before and after (from /proc, when it started the server). Nothing is
asserted; tests/integration/test_floods.py asserts (100 ms at 10,000 connections).

    bench/http_flood_bench.py [--binary build/cmd/strata/strata] [--connections 10000]
        [--per-address 200] [--trickle-fraction 0.5] [--probes 50] [--address host:port]

Both ends of every connection need a file descriptor: this script raises its soft RLIMIT_NOFILE to
the hard one and scales the flood down (saying so) when that is too low.
"""
import argparse
import os
import resource
import select
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=10):
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            status, body = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read()
    except OSError as e:
        status, body = 0, str(e).encode()
    return time.monotonic() - t0, status, body


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    sys.exit(f"timed out waiting for {what}")


def proc_status(pid):
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("Threads", "VmRSS"):
                    out[key] = value.strip()
    except OSError:
        pass
    return out


def percentiles(xs):
    xs = sorted(xs)
    pick = lambda q: xs[min(len(xs) - 1, int(q * len(xs)))]  # noqa: E731
    return (f"p50 {pick(0.5) * 1000:.1f} ms, p99 {pick(0.99) * 1000:.1f} ms, "
            f"max {xs[-1] * 1000:.1f} ms, mean {statistics.mean(xs) * 1000:.1f} ms")


def start_server(args, work):
    grpc_port, http_port = free_port(), free_port()
    config = os.path.join(work, "strata.yaml")
    with open(config, "w") as f:
        f.write(f"""server:
  grpc_listen_address: 127.0.0.1:{grpc_port}
  http_listen_address: 127.0.0.1:{http_port}
  http_header_timeout: 10m
bucket:
  type: FILESYSTEM
  config:
    directory: {os.path.join(work, "data")}
ingester:
  flush_interval: 100ms
querier:
  sync_interval: 200ms
""")
    log = open(os.path.join(work, "strata.log"), "w")
    proc = subprocess.Popen([args.binary, "all", "-config", config], stdout=log,
                            stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{http_port}"
    wait_for(lambda: get(base + "/ready")[1] == 200, 60, "strata to be ready")
    subprocess.run([args.binary, "push", os.path.join(SOURCE_DIR, "lib/pprof/testdata/go_cpu.pb.gz"),
                    "--name", "process_cpu", "--label", "job=bench", "--address",
                    f"127.0.0.1:{grpc_port}"], check=True, stdout=subprocess.DEVNULL)
    return proc, log, base, http_port


def query_url(base):
    """A merge over the pushed profile, of the first profile type the server knows."""
    def types():
        _, status, body = get(base + "/api/v1/profile_types")
        return status == 200 and b'"id"' in body and body
    wait_for(types, 30, "the pushed profile to be queryable")
    import json
    ptype = json.loads(types())["types"][0]["id"]
    q = urllib.parse.urlencode({"query": ptype, "start": "now-1y", "end": "now", "report": "top"})
    return f"{base}/api/v1/query?{q}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.path.join(SOURCE_DIR, "build/cmd/strata/strata"))
    ap.add_argument("--connections", type=int, default=10_000)
    ap.add_argument("--per-address", type=int, default=200)
    ap.add_argument("--trickle-fraction", type=float, default=0.5)
    ap.add_argument("--probes", type=int, default=50)
    ap.add_argument("--address", help="HTTP host:port of a running server (no push, no /proc)")
    args = ap.parse_args()

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    n = args.connections
    if n > hard - 300:
        n = hard - 300
        print(f"RLIMIT_NOFILE hard limit {hard}: flood scaled down to {n} connections")

    work = tempfile.mkdtemp(prefix="strata-flood-bench-")
    proc = log = None
    try:
        if args.address:
            base, port = f"http://{args.address}", int(args.address.rsplit(":", 1)[1])
            url = None
        else:
            proc, log, base, port = start_server(args, work)
            url = query_url(base)
        before = proc_status(proc.pid) if proc else {}

        socks = []
        t0 = time.monotonic()
        for i in range(n):
            s = socket.socket()
            s.bind((f"127.0.1.{1 + i // args.per_address}", 0))
            s.connect((base.split("//")[1].rsplit(":", 1)[0], port))
            socks.append(s)
        trickling = socks[int(n * (1 - args.trickle_fraction)):]
        for s in trickling:
            s.sendall(b"GET /ready HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        opened = time.monotonic() - t0
        stop = threading.Event()

        def trickle():
            while not stop.is_set():
                for s in trickling:
                    try:
                        s.send(b"a", socket.MSG_DONTWAIT)
                    except OSError:
                        pass
                stop.wait(1.0)

        t = threading.Thread(target=trickle, daemon=True)
        t.start()
        time.sleep(2)  # let every connection be accepted and a few trickle rounds go by
        during = proc_status(proc.pid) if proc else {}
        ready, query, failures = [], [], 0
        for _ in range(args.probes):
            took, status, _ = get(base + "/ready")
            ready.append(took)
            failures += status != 200
            if url:
                took, status, _ = get(url)
                query.append(took)
                failures += status != 200
        stop.set()
        t.join()
        poller = select.poll()
        for s in socks:
            poller.register(s, select.POLLIN)
        lost = len(poller.poll(0))
        for s in socks:
            s.close()

        print(f"flood: {n} connections ({len(trickling)} trickling a header byte per second) from "
              f"{(n + args.per_address - 1) // args.per_address} addresses, opened in "
              f"{opened:.2f} s; {n - lost} still held after the probes")
        print(f"/ready ({len(ready)} probes): {percentiles(ready)}")
        if query:
            print(f"merge query ({len(query)} probes): {percentiles(query)}")
        print(f"failed probes: {failures}")
        if proc:
            print(f"server before the flood: {before}; during: {during}")
    finally:
        if proc:
            proc.terminate()
            proc.wait(timeout=60)
            log.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
