#!/usr/bin/python3
"""Fan-out: the wall time of one long merge with 1, 2 and 3 queriers on one S3 bucket.

The data goes in as users send it: `strata all` (compactor off) on an S3 bucket (Ceph radosgw,
tests/servers/radosgw.sh) takes --minutes of agent-like CPU profiles of --processes processes
(bench/agentgen through build/bench/push_load, WriteRaw over gRPC), acknowledged once their
level-1 blocks are durable. Then, for N = 1, 2, 3: N fresh `strata querier` processes start on
the bucket, each with `peers` naming all N gRPC ports (fanout_min_rows 0), and one of them is
asked, through `strata query merge` (the gRPC QueryService client), for the merge of every
process over the whole window: first cold (no reader open, every page fetched from radosgw),
then --runs times warm. Per query: the client's wall time and the CPU all N queriers spent
(utime + stime from /proc/PID/stat); for the cold merge also the GETs (whole and ranged) the
queriers sent to the bucket. The queriers stop before the next N starts, so `--queriers 1,1
--querier-config 'disk_cache_directory: DIR'` measures a restarted querier on its disk cache.

On this machine (2 cores) the N queriers share the same two cores, and one querier alone already
merges on both: what fan-out can cut here is the time a querier waits on the bucket (cold). With
--one-core each querier is pinned to one core with parallelism 1, standing for N machines of one
core: 2 queriers then have twice the CPU of one (a third shares a core). docs/deploy.md has the
model for N machines.

With --go the profiles are real ones: the Go compiler's CPU profiles in bench/testdata, --processes
targets each taking the files in turn (fewer distinct stacks: partial trees much smaller than the
rows behind them, as for most services).

  bench/fanout_bench.py [--build build-perf] [--minutes 3] [--processes 50] [--runs 3] [--go]
                        [--prefix P] [--queriers 1,2,3] [--one-core] [--pace W]
                        [--querier-config 'KEY: VALUE' ...]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_bench import ROOT, cpu_seconds, free_port  # noqa: E402

TYPE = "parca_agent:samples:count:cpu:nanoseconds:delta"
GO_TYPE = "process_cpu:samples:count:cpu:nanoseconds:delta"
GO_FILES = ["go_compiler_cpu.pb.gz", "go_compiler_cpu_encoding_json.pb.gz",
            "go_compiler_cpu_go_types.pb.gz", "go_compiler_cpu_crypto_tls.pb.gz",
            "go_compiler_cpu_text_template.pb.gz"]
START_UNIX = 1767225600
TYPE_QUERIED = TYPE


def radosgw_env():
    """The running radosgw's STRATA_S3_* variables, starting it when none runs (stop it with
    tests/servers/radosgw.sh stop)."""
    script = os.path.join(ROOT, "tests", "servers", "radosgw.sh")
    r = subprocess.run([script, "env"], capture_output=True, text=True)
    out = r.stdout if r.returncode == 0 and "STRATA_S3_ENDPOINT" in r.stdout else subprocess.run(
        [script, "start"], check=True, capture_output=True, text=True).stdout
    env = {}
    for line in out.splitlines():
        line = line.replace("export ", "")
        if "=" in line:
            k, v = line.split("=", 1)
            env[k.strip()] = v.strip().strip("'\"")
    return env


def bucket_yaml(env, prefix):
    return f"""bucket:
  type: S3
  prefix: {prefix}
  config:
    bucket: {env["STRATA_S3_BUCKET"]}
    endpoint: {env["STRATA_S3_ENDPOINT"]}
    insecure: true
    access_key: {env["STRATA_S3_ACCESS_KEY"]}
    secret_key: {env["STRATA_S3_SECRET_KEY"]}
"""


class Server:
    def __init__(self, binary, work, name, mode, bucket, extra="", grpc_port=None, cpu=None):
        self.grpc = f"127.0.0.1:{grpc_port or free_port()}"
        self.http = f"http://127.0.0.1:{free_port()}"
        cfg = os.path.join(work, f"{name}.yaml")
        with open(cfg, "w") as f:
            f.write(f"""server:
  http_listen_address: {self.http[len("http://"):]}
  grpc_listen_address: {self.grpc}
  log_level: warn
{bucket}{extra}""")
        self.log = open(os.path.join(work, f"{name}.log"), "a")
        pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
        self.proc = subprocess.Popen(pin + [binary, mode, "-config", cfg], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        for _ in range(600):
            if self.proc.poll() is not None:
                raise SystemExit(f"strata {mode} exited; see {work}/{name}.log")
            try:
                with urllib.request.urlopen(self.http + "/ready", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise SystemExit(f"strata {mode} did not become ready")

    def metric(self, name, labels=""):
        """The sum of a metric's samples whose labels contain `labels`."""
        total = 0.0
        with urllib.request.urlopen(self.http + "/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if (line.startswith(name + " ") or line.startswith(name + "{")) and labels in line:
                    total += float(line.rsplit(" ", 1)[1])
        return total

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=60)
        self.log.close()


def bucket_server_pids():
    """The processes serving the bucket (radosgw and its Ceph daemons), for their CPU."""
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/comm") as f:
                    if f.read().strip() in ("radosgw", "ceph-osd", "ceph-mon"):
                        pids.append(int(d))
            except OSError:
                pass
    return pids


def bucket_cpu(pids):
    total = 0.0
    for pid in pids:
        try:
            total += cpu_seconds(pid)
        except OSError:
            pass
    return total


def timed_merge(binary, servers, target, end):
    """Wall time, the queriers' CPU and the bucket server's CPU of one merge, and its answer."""
    gw = bucket_server_pids()
    cpu0 = sum(cpu_seconds(s.proc.pid) for s in servers)
    gw0 = bucket_cpu(gw)
    t0 = time.monotonic()
    out = subprocess.run([binary, "query", "merge", TYPE_QUERIED, "--start",
                          time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(START_UNIX - 60)),
                          "--end", end, "--address", target.grpc, "--top", "5"],
                         check=True, capture_output=True, text=True).stdout
    wall = time.monotonic() - t0
    cpu = sum(cpu_seconds(s.proc.pid) for s in servers) - cpu0
    return wall, cpu, out, bucket_cpu(gw) - gw0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build-perf")
    ap.add_argument("--minutes", type=int, default=3)
    ap.add_argument("--processes", type=int, default=50)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--prefix", help="query the data an earlier run left under this bucket prefix "
                    "(its output names it) instead of pushing new data")
    ap.add_argument("--queriers", default="1,2,3")
    ap.add_argument("--querier-config", action="append", default=[], metavar="'KEY: VALUE'",
                    help="a line added to every querier's `querier:` section (repeatable)")
    ap.add_argument("--pace", type=float, default=1,
                    help="10 s windows pushed per second (the ingester cuts a block per flush)")
    ap.add_argument("--one-core", action="store_true",
                    help="each querier pinned to one core (taskset, querier i on core i mod CPUs) "
                    "with parallelism 1: N queriers of one core each, as N one-core machines")
    ap.add_argument("--filesystem", metavar="DIR",
                    help="a FILESYSTEM bucket in DIR instead of radosgw (the queriers share the "
                    "directory; no bucket server competes for this machine's cores)")
    ap.add_argument("--go", action="store_true",
                    help="real Go CPU profiles (bench/testdata, re-stamped per target) instead of "
                    "agent-like ones")
    args = ap.parse_args()
    global TYPE_QUERIED
    if args.go:
        TYPE_QUERIED = GO_TYPE
    binary = os.path.join(ROOT, args.build, "cmd", "strata", "strata")
    load = os.path.join(ROOT, args.build, "bench", "push_load")
    prefix = args.prefix or f"fanout-bench-{os.getpid()}"
    if args.filesystem:
        bucket = f"""bucket:
  type: FILESYSTEM
  prefix: {prefix}
  config:
    directory: {os.path.abspath(args.filesystem)}
"""
    else:
        bucket = bucket_yaml(radosgw_env(), prefix)
    work = tempfile.mkdtemp(prefix="strata-fanout-bench-")
    windows = args.minutes * 6
    end = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(START_UNIX + windows * 10 + 60))
    source = []
    if args.go:
        for f in GO_FILES:
            source += ["--pprof", os.path.join(ROOT, "bench", "testdata", f) + ":process_cpu"]
        source += ["--targets", str(args.processes)]
    if not args.prefix:
        push(binary, load, work, bucket, windows, args.processes, prefix, source, args.pace)
    print(f"{'queriers':>8} {'blocks':>6} {'cold wall s':>11} {'cold CPU s':>10} {'bucket CPU':>11} "
          f"{'cold GETs':>9} "
          f"{'warm wall s (median)':>20} {'warm CPU s':>10} {'shares ok/failed':>16}")
    reference = None
    for n in (int(x) for x in args.queriers.split(",")):
        reference = run_queriers(binary, work, bucket, n, end, args.runs, reference,
                                 args.one_core, args.querier_config)


def push(binary, load, work, bucket, windows, processes, prefix, source, pace):
    writer = Server(binary, work, "writer", "all", bucket, "compactor:\n  enabled: false\n")
    try:
        out = subprocess.run([load, "--address", writer.grpc, "--once", "--windows", str(windows),
                              "--processes", str(processes), "--per-request", "10",
                              "--threads", "4", "--start-unix", str(START_UNIX),
                              "--windows-per-second", str(pace)] + source,
                             check=True, capture_output=True, text=True, cwd=ROOT).stdout
        r = dict(kv.split("=") for kv in out.split())
        if int(r["errors"]) != 0:
            raise SystemExit(f"push_load: {r['errors']} calls failed")
        print(f"pushed {windows * processes} profiles, {int(r['samples']) / 1e6:.2f} M pprof "
              f"samples under bucket prefix {prefix}", flush=True)
    finally:
        writer.stop()


def run_queriers(binary, work, bucket, n, end, runs, reference, one_core, querier_config):
    ports = [free_port() for _ in range(n)]
    peers = "".join(f"\n    - 127.0.0.1:{p}" for p in ports) if n > 1 else " []"
    extra = f"""querier:
  peers:{peers}
  peer_refresh_interval: 500ms
  fanout_min_rows: 0
"""
    if one_core:
        extra += "  parallelism: 1\n"
    for line in querier_config:
        extra += f"  {line}\n"
    cpus = os.cpu_count() or 1
    servers = [Server(binary, work, f"querier{n}-{i}", "querier", bucket, extra, ports[i],
                      i % cpus if one_core else None)
               for i in range(n)]
    try:
        for s in servers:
            while s.metric("strata_querier_peers") < n - 1:
                time.sleep(0.2)
        # every querier has learnt every block (its first listing and meta.json reads are over),
        # so the cold merge measures the merge, not a peer still syncing
        blocks = 0
        for _ in range(600):
            seen = [int(s.metric("strata_querier_blocks")) for s in servers]
            if seen[0] > 0 and len(set(seen)) == 1 and seen[0] == blocks:
                break
            blocks = seen[0]
            time.sleep(0.5)
        gets0 = sum(s.metric("strata_bucket_operations_total", 'operation="get') for s in servers)
        cold_wall, cold_cpu, answer, cold_gw = timed_merge(binary, servers, servers[0], end)
        cold_gets = sum(s.metric("strata_bucket_operations_total", 'operation="get')
                        for s in servers) - gets0
        if reference is None:
            reference = answer
        elif answer != reference:
            raise SystemExit(f"{n} queriers answered differently:\n{answer}\n{reference}")
        warm = sorted(timed_merge(binary, servers, servers[0], end)[:2] for _ in range(runs))
        ok = sum(s.metric("strata_querier_fanout_shares_total", 'result="ok"') for s in servers)
        failed = sum(s.metric("strata_querier_fanout_shares_total", 'result="failed"')
                     for s in servers)
        print(f"{n:>8} {blocks:>6} {cold_wall:>11.2f} {cold_cpu:>10.2f} {cold_gw:>11.2f} "
              f"{int(cold_gets):>9} "
              f"{warm[len(warm) // 2][0]:>20.2f} {warm[len(warm) // 2][1]:>10.2f} "
              f"{f'{int(ok)}/{int(failed)}':>16}", flush=True)
    finally:
        for s in servers:
            s.stop()
    return reference


if __name__ == "__main__":
    main()
