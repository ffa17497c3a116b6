#!/usr/bin/python3
"""Merge queries on the user's path, over fresh and over compacted blocks, beside go tool pprof.

The data goes in as users send it and the queries come out as users ask them:

  1. `strata all` (its compactor off) on a FILESYSTEM bucket takes --minutes of agent-like CPU
     profiles of --processes processes (bench/agentgen: 2,000 stacks per 10 s profile over
     ~20,000 functions, stacks 10-60 deep) through WriteRaw over gRPC (build/bench/push_load
     --once: each profile exactly once, in time order, --per-request processes per call, as
     agents batch them, at --windows-per-second 10 s windows per second: 1 is ten times real
     time, 0.1 real time); push_load also writes every profile as a gzipped pprof file for the
     peer. Every call is acknowledged only once its level-1 block is durable, so what is queried
     is the fresh blocks the ingester wrote (one per flush: the pace sets how many).
     With --go the profiles are real ones instead: the Go compiler's CPU profiles in
     bench/testdata (five packages compiled, 150-1,100 stacks each), --processes targets
     (job="go-fleet", instance="target-N", profile type process_cpu) each taking the files in
     turn, window by window, re-stamped (push_load --pprof ... --once); one process is then an
     {instance=...} selector.
  2. fresh: `strata query merge` (the gRPC QueryService client) of the whole window, all
     processes, --runs times; then of one process (a {pod=...} selector) over the window. For
     each query: the server's CPU (utime + stime of all its threads, /proc/PID/stat) spent on
     it, its wall time as the client sees it, and the server's peak RSS during it (VmHWM after
     resetting it through /proc/PID/clear_refs) with its growth over the RSS before the query
     (in the fresh runs the process also holds the ingester's symbol dictionary).
  3. compacted: `strata compactor` merges the same blocks (default block ranges, no delays)
     until one block is left; `strata all` starts again on the bucket and the same queries run.
  4. peer: `go tool pprof -proto FILES... > merged.pb` over the same pprof files (CPU and peak
     RSS from wait4's rusage of the go command, which includes the pprof tool it runs).

The totals of every merge are read through the HTTP API (not timed) and must agree between
fresh and compacted. Figures are pprof samples (one stack with its value, DESIGN.md's unit) per
server CPU-second.

  bench/fresh_query.py [--build build-perf] [--minutes 6] [--processes 100] [--runs 3]
                       [--per-request 10] [--threads 4] [--windows-per-second 1]
                       [--no-peer] [--fresh-only] [--keep] [--go]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_bench import ROOT, cpu_seconds, free_port  # noqa: E402
from fleet_bench import status_kib  # noqa: E402

TYPE = "parca_agent:samples:count:cpu:nanoseconds:delta"
ONE = "pod"  # the label that names one process
GO_FILES = ["go_compiler_cpu.pb.gz", "go_compiler_cpu_encoding_json.pb.gz",
            "go_compiler_cpu_go_types.pb.gz", "go_compiler_cpu_crypto_tls.pb.gz",
            "go_compiler_cpu_text_template.pb.gz"]
START_UNIX = 1767225600  # 2026-01-01T00:00:00Z: window w of the data is at START + 10 w s
START = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(START_UNIX))


def reset_peak_rss(pid):
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


class Server:
    def __init__(self, binary, work, service, extra=""):
        self.grpc = f"127.0.0.1:{free_port()}"
        http_port = free_port()
        self.http = f"http://127.0.0.1:{http_port}"
        cfg = os.path.join(work, f"strata-{service}.yaml")
        with open(cfg, "w") as f:
            f.write(f"""server:
  http_listen_address: 127.0.0.1:{http_port}
  grpc_listen_address: {self.grpc}
  log_level: warn
bucket:
  type: FILESYSTEM
  config:
    directory: {work}/bucket
""" + extra)
        self.log = open(os.path.join(work, f"strata-{service}.log"), "a")
        self.proc = subprocess.Popen([binary, service, "-config", cfg], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        for _ in range(600):
            if self.proc.poll() is not None:
                raise SystemExit(f"strata {service} exited; see {work}/strata-{service}.log")
            try:
                with urllib.request.urlopen(self.http + "/ready", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise SystemExit(f"strata {service} did not become ready")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=60)
        self.log.close()


def http_merge(srv, selector, end):
    """(profiles, total) of a merge through the JSON API."""
    q = urllib.parse.urlencode({"query": TYPE + selector, "start": START, "end": end,
                                "report": "top", "max_nodes": 1})
    with urllib.request.urlopen(f"{srv.http}/api/v1/query?{q}", timeout=600) as r:
        body = json.load(r)
    return int(body.get("profiles", 0)), int(body.get("total", 0))


def wait_profiles(srv, end, want):
    deadline = time.time() + 300
    got = (0, 0)
    while time.time() < deadline:
        got = http_merge(srv, "{}", end)
        if got[0] >= want:
            return got
        time.sleep(0.5)
    raise SystemExit(f"only {got[0]} of {want} profiles became queryable")


def timed_query(binary, srv, selector, end):
    """Server CPU seconds, client wall seconds, server peak RSS (MiB) and its growth over the RSS
    before, of one gRPC merge."""
    reset_peak_rss(srv.proc.pid)
    rss0 = status_kib(srv.proc.pid, "VmRSS") / 1024
    cpu0 = cpu_seconds(srv.proc.pid)
    t0 = time.monotonic()
    subprocess.run([binary, "query", "merge", TYPE + selector, "--start", START, "--end", end,
                    "--address", srv.grpc, "--top", "1"], check=True, capture_output=True)
    wall = time.monotonic() - t0
    cpu = cpu_seconds(srv.proc.pid) - cpu0
    hwm = status_kib(srv.proc.pid, "VmHWM") / 1024
    return cpu, wall, hwm, hwm - rss0


def measure(binary, srv, end, runs, pod, samples, one_samples):
    rows = []
    for i in range(runs):
        rows.append(("all processes", i + 1, timed_query(binary, srv, "{}", end), samples))
    for i in range(runs):
        rows.append(("one process", i + 1, timed_query(binary, srv, '{%s="%s"}' % (ONE, pod), end),
                     one_samples))
    return rows


def blocks(work):
    """(unmarked blocks, their compaction levels) in the bucket."""
    root = os.path.join(work, "bucket", "anonymous")
    out = []
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        d = os.path.join(root, name)
        meta = os.path.join(d, "meta.json")
        if not os.path.exists(meta) or os.path.exists(os.path.join(d, "deletion-mark.json")):
            continue
        with open(meta) as f:
            out.append(json.load(f).get("compaction", {}).get("level", 1))
    return out


def compact(binary, work):
    c = Server(binary, work, "compactor", """compactor:
  compaction_interval: 1s
  consistency_delay: 0s
  delete_delay: 0s
""")
    try:
        deadline = time.time() + 1800
        while time.time() < deadline:
            left = blocks(work)
            if len(left) == 1:
                return left
            time.sleep(1)
        raise SystemExit(f"compaction did not finish: {len(blocks(work))} blocks left")
    finally:
        c.stop()


def run_pprof(files, out_path, cwd):
    """(CPU s, wall s, peak RSS MiB) of `go tool pprof -proto FILES... > out_path`."""
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(["go", "tool", "pprof", "-proto"] + files, stdout=out,
                                stderr=subprocess.DEVNULL, cwd=cwd)
        t0 = time.monotonic()
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.monotonic() - t0
    if status != 0:
        raise SystemExit("go tool pprof failed")
    return ru.ru_utime + ru.ru_stime, wall, ru.ru_maxrss / 1024


def peer(pprof_dir, work):
    """go tool pprof -proto over every file; past what one command line holds, in batches of
    2,000 merged first, then the batches merged (the CPU and wall of all the steps summed, the
    peak RSS the largest)."""
    files = sorted(os.path.join(pprof_dir, f) for f in os.listdir(pprof_dir))
    batch = 2000
    if len(files) <= batch:
        return run_pprof(files, os.path.join(work, "merged.pb"), work)
    cpu = wall = rss = 0.0
    parts = []
    for i in range(0, len(files), batch):
        parts.append(os.path.join(work, f"merged-{i // batch}.pb"))
        c, w, r = run_pprof(files[i:i + batch], parts[-1], work)
        cpu, wall, rss = cpu + c, wall + w, max(rss, r)
    c, w, r = run_pprof(parts, os.path.join(work, "merged.pb"), work)
    return cpu + c, wall + w, max(rss, r)


def first_pod(srv, end):
    q = urllib.parse.urlencode({"match": TYPE + "{}", "start": START, "end": end})
    with urllib.request.urlopen(f"{srv.http}/api/v1/labels/{ONE}/values?{q}", timeout=60) as r:
        return json.load(r)["label_values"][0]


def print_rows(kind, rows, blocks_n):
    for what, run, (cpu, wall, rss, growth), samples in rows:
        rate = samples / cpu / 1e6 if cpu > 0 else float("inf")
        print(f"{kind:10s} {blocks_n:4d} blocks  {what:14s} run {run}: server CPU {cpu:6.2f} s, "
              f"wall {wall:6.2f} s, {rate:6.2f} M samples/CPU-s, peak RSS {rss:6.0f} MiB "
              f"(+{growth:.0f})", flush=True)
    # /proc counts CPU in 10 ms ticks: for short queries the mean over the runs after the first
    # (which opens the readers) is the figure to read.
    for what in sorted({r[0] for r in rows}):
        later = [r for r in rows if r[0] == what and r[1] > 1]
        if len(later) < 2:
            continue
        cpu = sum(r[2][0] for r in later) / len(later)
        wall = sum(r[2][1] for r in later) / len(later)
        rate = later[0][3] / cpu / 1e6 if cpu > 0 else float("inf")
        print(f"{kind:10s} {blocks_n:4d} blocks  {what:14s} mean of runs 2-{len(later) + 1}: "
              f"server CPU {cpu:6.3f} s, wall {wall:6.3f} s, {rate:6.2f} M samples/CPU-s",
              flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build-perf")
    ap.add_argument("--minutes", type=int, default=6)
    ap.add_argument("--processes", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--per-request", type=int, default=10)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--windows-per-second", type=float, default=1.0)
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--fresh-only", action="store_true",
                    help="stop after the fresh queries (with --keep: a bucket of fresh blocks to "
                         "profile queries on)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--go", action="store_true",
                    help="real Go CPU profiles (bench/testdata) instead of agent-like ones")
    args = ap.parse_args()
    global TYPE, ONE
    source = []
    if args.go:
        TYPE = "process_cpu:samples:count:cpu:nanoseconds:delta"
        ONE = "instance"
        for f in GO_FILES:
            source += ["--pprof", os.path.join(ROOT, "bench", "testdata", f) + ":process_cpu"]
        source += ["--targets", str(args.processes)]
    binary = os.path.join(ROOT, args.build, "cmd", "strata", "strata")
    load = os.path.join(ROOT, args.build, "bench", "push_load")
    work = tempfile.mkdtemp(prefix="strata-fresh-query-")
    pprof_dir = os.path.join(work, "pprof")
    os.makedirs(pprof_dir)
    windows = args.minutes * 6
    end = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(START_UNIX + windows * 10 + 60))
    no_compactor = "compactor:\n  enabled: false\n"
    srv = None
    try:
        srv = Server(binary, work, "all", no_compactor)
        out = subprocess.run([load, "--address", srv.grpc, "--once", "--windows", str(windows),
                              "--processes", str(args.processes)] + source + ["--per-request",
                              str(args.per_request), "--threads", str(args.threads),
                              "--start-unix", str(START_UNIX), "--dump-dir", pprof_dir,
                              "--windows-per-second", str(args.windows_per_second)],
                             check=True, capture_output=True,
                             text=True, cwd=ROOT).stdout
        r = dict(kv.split("=") for kv in out.split())
        if int(r["errors"]) != 0:
            raise SystemExit(f"push_load: {r['errors']} calls failed")
        samples = int(r["samples"])
        want = windows * args.processes
        print(f"pushed {want} profiles, {samples / 1e6:.2f} M pprof samples in "
              f"{float(r['seconds']):.1f} s", flush=True)
        fresh_total = wait_profiles(srv, end, want)
        pod = first_pod(srv, end)
        one_samples = samples // args.processes  # about: every process has the same shape
        n_fresh = len(blocks(work))
        fresh = measure(binary, srv, end, args.runs, pod, samples, one_samples)
        print_rows("fresh", fresh, n_fresh)
        srv.stop()
        srv = None
        if args.fresh_only:
            return
        levels = compact(binary, work)
        srv = Server(binary, work, "all", no_compactor)
        compacted_total = wait_profiles(srv, end, want)
        if compacted_total != fresh_total:
            raise SystemExit(f"totals differ: fresh {fresh_total}, compacted {compacted_total}")
        comp = measure(binary, srv, end, args.runs, pod, samples, one_samples)
        print_rows("compacted", comp, len(levels))
        print(f"totals agree: {fresh_total[0]} profiles, total value {fresh_total[1]}")
        srv.stop()
        srv = None
        if not args.no_peer:
            cpu, wall, rss = peer(pprof_dir, work)
            print(f"{'go tool pprof -proto':26s} {want} files: CPU {cpu:6.2f} s, wall {wall:6.2f} s, "
                  f"{samples / cpu / 1e6:6.3f} M samples/CPU-s, peak RSS {rss:7.0f} MiB", flush=True)
    finally:
        if srv is not None:
            srv.stop()
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
