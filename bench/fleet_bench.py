#!/usr/bin/python3
"""Fleet benchmark (issue 16 item 3): the write path measured through a real running Strata, from
a scrape or a push to the moment a query shows the profile.

Scenarios (each on a fresh Strata and a fresh FILESYSTEM bucket in a temp dir):
  scrape   N scrape targets (--targets, 1,000) x Parca's 5 default Go profiles every 10 s, served
           by build/bench/fleet_targets (one lib/http server, each target its own loopback
           address 127.0.X.Y, real Go pprof from lib/pprof/testdata, time_nanos = serve time) and
           scraped by Strata's scraper through its scrape_configs.
  agents   N simulated agents (--agents, 500), each its own series (node="agent-<i>"), pushing a
           WriteRaw of bench/agentgen's agent-like CPU profile (2,000 stacks, 10-60 frames) every
           10 s, spread evenly over the 10 s (build/bench/fleet_agents, time_nanos = push time),
           each call's acknowledgement latency recorded.
  ackload  WriteRaw acknowledgement latency at 1, 10 and 100 concurrent closed-loop pushers
           (fleet_agents --mode closed, one agent profile per call), a short phase each.

Modes: `all` runs `strata all` (every service, compactor included, one process); `split` runs
`strata ingester`, `strata querier`, `strata compactor` and `strata scraper` (scrape scenario
only) as separate processes on one bucket. Configs are the defaults except listen addresses, the bucket directory,
the scrape job and, in split mode, the scraper's ingester_addresses.

Measured, over a window of --seconds after --warmup:
  * lag, scrape or push to visible in a query: a prober thread polls the querier's HTTP API
    (/api/v1/query_range, step 1 s, over the last --probe-window seconds) for a sample of ~20
    series every 250 ms and notes when each profile timestamp first appears; lag = the wall time
    of the answer that first showed it minus the profile's time (the time the fleet served it or
    the agent pushed it, from the load generators' logs). Delta types come back in 1 s buckets,
    so their points are matched to the logged profile of that series in that second. p50, p99 and
    max over profiles scraped or pushed in the window, and p99 per minute of the window; a profile
    not seen by the end of --grace after the window counts as an infinite lag.
  * acknowledgement latency of each agent's WriteRaw (agents), and of closed-loop pushers
    (ackload): p50 / p99 / max.
  * drops and errors from /metrics (scraper drops, scrape failures and push errors; ingester
    rejections, upload and flush failures) and from the agents (failed calls, late pushes).
  * CPU (utime + stime from /proc/PID/stat, as cores used over the window) and peak RSS (VmHWM)
    of each Strata process, and separately of the load generator and of this script (the
    prober).
  * bytes per sample of the level-1 blocks written during the window (data object sizes from
    each meta.json's strata.files over its stats.numSamples: stored samples, one per sample type).

  bench/fleet_bench.py --build build-rel [--scenario scrape|agents|ackload|all] [--mode all|split]
                       [--seconds 600] [--targets 1000] [--agents 500]

Every process it starts is a Popen child; only those are stopped (SIGTERM, then SIGKILL after
60 s). The temp dirs are removed at the end unless --keep.
"""
import argparse
import http.client
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_bench import ROOT, cpu_seconds, free_port  # noqa: E402

AGENT_TYPE = "parca_agent:samples:count:cpu:nanoseconds:delta"
CPU_TYPE = "process_cpu:samples:count:cpu:nanoseconds:delta"


# ---- processes --------------------------------------------------------------------------------

def status_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


class Proc:
    """A child process this script started: the only kind it ever stops."""

    def __init__(self, name, argv, log_path, stdout=None):
        self.name = name
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.popen = subprocess.Popen(argv, stdout=stdout if stdout is not None else self.log,
                                      stderr=self.log, text=True)
        self.cpu_marks = {}
        self.hwm_kib = 0

    @property
    def pid(self):
        return self.popen.pid

    def alive(self):
        return self.popen.poll() is None

    def mark(self, key):
        """Notes CPU seconds and peak RSS now (while the process lives)."""
        if self.alive():
            try:
                self.cpu_marks[key] = cpu_seconds(self.pid)
                self.hwm_kib = max(self.hwm_kib, status_kib(self.pid, "VmHWM"))
            except OSError:
                pass

    def cores(self, a, b, wall):
        if a not in self.cpu_marks or b not in self.cpu_marks or wall <= 0:
            return float("nan")
        return (self.cpu_marks[b] - self.cpu_marks[a]) / wall

    def stop(self, timeout=60):
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self.log.close()
        return self.popen.returncode


def http_get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read()


def wait_ready(proc, http, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not proc.alive():
            raise SystemExit(f"{proc.name} exited with {proc.popen.returncode}; see {proc.log_path}")
        try:
            if http_get(http + "/ready", timeout=2)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{proc.name} not ready after {timeout} s; see {proc.log_path}")


def metrics(http):
    """Prometheus text as {name: summed value} (labels summed away)."""
    _, body = http_get(http + "/metrics", timeout=30)
    out = {}
    for line in body.decode().splitlines():
        if not line or line[0] == "#":
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)", line)
        if m:
            try:
                out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
            except ValueError:
                pass
    return out


# ---- Strata -----------------------------------------------------------------------------------

def scrape_yaml(targets, port):
    addrs = ", ".join(f"'127.0.{1 + i // 250}.{1 + i % 250}:{port}'" for i in range(targets))
    return f"""scrape_configs:
  - job_name: fleet
    scrape_interval: 10s
    static_configs:
      - targets: [{addrs}]
"""


class Cluster:
    """`strata all`, or `strata ingester` + `strata querier` (+ `strata scraper`), on one bucket."""

    def __init__(self, args, work, mode, scrape=None, querier=True):
        self.binary = os.path.join(args.build_dir, "cmd", "strata", "strata")
        self.work = work
        self.bucket_dir = os.path.join(work, "bucket")
        self.procs = []  # (Proc, http URL, roles)
        bucket = f"""bucket:
  type: FILESYSTEM
  config:
    directory: {self.bucket_dir}
"""
        try:
            if mode == "all":
                p, h, g = self._start("all", bucket + (scrape or ""), ("ingester", "querier",
                                                                        "scraper", "compactor"))
                self.write_address, self.query_http = g, h
                self.ingester_http = self.scraper_http = h
            else:
                ingester_extra = querier_extra = ""
                if getattr(args, "announce", False):
                    # the ingester announces each committed block; the querier sees it at once
                    # instead of at its next listing
                    url = f"tcp://127.0.0.1:{free_port()}"
                    ingester_extra = f"ingester:\n  announce_listen_address: {url}\n"
                    querier_extra = f"querier:\n  announce_addresses: ['{url}']\n"
                p, h, g = self._start("ingester", bucket + ingester_extra, ("ingester",))
                self.write_address, self.ingester_http = g, h
                self.query_http = self.scraper_http = None
                if querier:
                    _, self.query_http, _ = self._start("querier", bucket + querier_extra,
                                                        ("querier",))
                    # a split deployment runs a compactor too: without one, level-1 blocks pile
                    # up and every listing and query grows with them
                    self._start("compactor", bucket, ("compactor",))
                if scrape:
                    # The scraper section (if any) leads the scrape text; add the ingester to it.
                    section = f"scraper:\n  ingester_addresses: ['{g}']\n"
                    if scrape.startswith("scraper:\n"):
                        scrape = section + scrape[len("scraper:\n"):]
                    else:
                        scrape = section + scrape
                    _, self.scraper_http, _ = self._start("scraper", bucket + scrape, ("scraper",))
        except BaseException:
            self.stop()
            raise

    def _start(self, service, body, roles):
        http_port, grpc_port = free_port(), free_port()
        cfg = os.path.join(self.work, f"strata-{service}.yaml")
        with open(cfg, "w") as f:
            f.write(f"""server:
  http_listen_address: 127.0.0.1:{http_port}
  grpc_listen_address: 127.0.0.1:{grpc_port}
""" + body)
        proc = Proc(f"strata {service}", [self.binary, service, "-config", cfg],
                    os.path.join(self.work, f"strata-{service}.log"))
        http = f"http://127.0.0.1:{http_port}"
        self.procs.append((proc, http, roles))
        wait_ready(proc, http)
        return proc, http, f"127.0.0.1:{grpc_port}"

    def mark(self, key):
        for p, _, _ in self.procs:
            p.mark(key)

    def check_alive(self):
        for p, _, _ in self.procs:
            if not p.alive():
                raise SystemExit(f"{p.name} died (exit {p.popen.returncode}); see {p.log_path}")

    def stop(self):
        for p, _, _ in reversed(self.procs):
            p.stop()


# ---- the prober -------------------------------------------------------------------------------

class Prober(threading.Thread):
    """Polls query_range for a few series; records when each (series, timestamp) first shows."""

    def __init__(self, http, queries, window_s, interval_s=0.25):
        super().__init__(daemon=True)
        u = urllib.parse.urlparse(http)
        self.host, self.port = u.hostname, u.port
        self.queries = queries  # [(kind, selector, sum_by label or None, key label)]
        self.window_s = window_s
        self.interval_s = interval_s
        self.seen = {}  # (kind, key value, ts_ms) -> wall time first seen
        self.latencies = []
        self.errors = 0
        self.last_error = ""
        self.polls = 0
        self.stopping = threading.Event()

    def _get(self, conn, path):
        conn.request("GET", path)
        r = conn.getresponse()
        body = r.read()
        return r.status, body

    def run(self):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        while not self.stopping.is_set():
            t_poll = time.time()
            for kind, selector, sum_by, key_label in self.queries:
                now_ms = int(time.time() * 1000)
                params = [("query", selector), ("start", str(now_ms - int(self.window_s * 1000))),
                          ("end", str(now_ms + 2000)), ("step", "1s")]
                if sum_by:
                    params.append(("sum_by", sum_by))
                path = "/api/v1/query_range?" + urllib.parse.urlencode(params)
                t0 = time.time()
                try:
                    status, body = self._get(conn, path)
                except (OSError, http.client.HTTPException) as e:
                    self.errors += 1
                    self.last_error = str(e)
                    conn.close()
                    conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
                    continue
                t1 = time.time()
                self.latencies.append(t1 - t0)
                if status == 404:
                    continue  # nothing matching yet
                if status != 200:
                    self.errors += 1
                    self.last_error = f"HTTP {status}: {body[:200]!r}"
                    continue
                for s in json.loads(body).get("series", []):
                    key = s.get("labels", {}).get(key_label)
                    for pt in s.get("samples", []):
                        k = (kind, key, int(pt["timestamp"]))
                        if k not in self.seen:
                            self.seen[k] = t1
            self.polls += 1
            left = self.interval_s - (time.time() - t_poll)
            if left > 0:
                self.stopping.wait(left)
        conn.close()

    def stop(self):
        self.stopping.set()
        self.join(timeout=60)


def regex_of(values):
    return "|".join(values)


# ---- statistics -------------------------------------------------------------------------------

def pct(values, q):
    """Nearest-rank percentile; inf counts (unseen profiles)."""
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, max(0, math.ceil(q * len(v)) - 1))]


def fmt_s(x):
    if x != x:
        return "-"
    if x == float("inf"):
        return "inf"
    return f"{x:.2f}"


def lag_table(events, seen, t_start, t_end, delta_kinds, by_kind=None):
    """events: [(kind, key, time_ns)] of the sampled series. Returns (lags, per_minute, unseen);
    by_kind, a dict, gets each kind's lags."""
    lags, per_minute, unseen = [], {}, 0
    for kind, key, time_ns in events:
        t = time_ns / 1e9
        if t < t_start or t > t_end:
            continue
        ts_ms = (time_ns // 10**9) * 1000 if kind in delta_kinds else time_ns // 10**6
        first = seen.get((kind, key, ts_ms))
        lag = first - t if first is not None else float("inf")
        if first is None:
            unseen += 1
        lags.append(lag)
        if by_kind is not None:
            by_kind.setdefault(kind, []).append(lag)
        last_minute = max(0, math.ceil((t_end - t_start) / 60 - 0.01) - 1)
        per_minute.setdefault(min(int((t - t_start) // 60), last_minute), []).append(lag)
    return lags, per_minute, unseen


def level1_bytes(bucket_dir, t_start_ms, t_end_ms):
    """Level-1 blocks whose time range lies in the window: count, data bytes, stored samples."""
    blocks = data = samples = 0
    levels = {}
    for root, _, files in os.walk(bucket_dir):
        if "meta.json" not in files:
            continue
        try:
            with open(os.path.join(root, "meta.json")) as f:
                meta = json.load(f)
        except (OSError, ValueError):
            continue
        level = meta.get("compaction", {}).get("level", 0)
        size = sum(x.get("size_bytes", 0) for x in meta.get("strata", {}).get("files", []))
        n = meta.get("stats", {}).get("numSamples", 0)
        lv = levels.setdefault(level, [0, 0, 0])
        lv[0] += 1
        lv[1] += size
        lv[2] += n
        if level == 1 and meta.get("minTime", 0) >= t_start_ms and meta.get("maxTime", 0) <= t_end_ms:
            blocks += 1
            data += size
            samples += n
    return blocks, data, samples, levels


# ---- one run ----------------------------------------------------------------------------------

def report_processes(cluster, loadgen, prober_cpu, wall, key_a, key_b):
    rows = []
    for p, _, roles in cluster.procs:
        rows.append((p.name, p.cores(key_a, key_b, wall), p.hwm_kib / 1024))
    if loadgen is not None:
        rows.append((f"load: {loadgen.name}", loadgen.cores(key_a, key_b, wall),
                     loadgen.hwm_kib / 1024))
    rows.append(("load: prober (this script)", prober_cpu / wall if wall > 0 else float("nan"),
                 status_kib(os.getpid(), "VmHWM") / 1024))
    print("  process                          CPU (cores)   peak RSS (MiB)")
    for name, cores, mib in rows:
        print(f"  {name:32s} {cores:10.3f}   {mib:10.1f}")
    return rows


def self_cpu():
    t = os.times()
    return t.user + t.system


def print_lags(title, lags, per_minute, unseen, result, by_kind=None):
    print(f"  {title}: {len(lags)} profiles of the sampled series, {unseen} never seen; "
          f"lag p50 {fmt_s(pct(lags, 0.5))} s, p99 {fmt_s(pct(lags, 0.99))} s, "
          f"max {fmt_s(max(lags) if lags else float('nan'))} s")
    if by_kind and len(by_kind) > 1:
        print("  by profile: " + "; ".join(
            f"{k} p50 {fmt_s(pct(v, 0.5))} p99 {fmt_s(pct(v, 0.99))} max {fmt_s(max(v))}"
            for k, v in sorted(by_kind.items())))
    line = ", ".join(f"min {m + 1}: {fmt_s(pct(v, 0.99))}" for m, v in sorted(per_minute.items()))
    print(f"  lag p99 per minute of the window (s): {line}")
    result.update(lag_n=len(lags), lag_unseen=unseen, lag_p50=pct(lags, 0.5),
                  lag_p99=pct(lags, 0.99), lag_max=max(lags) if lags else float("nan"),
                  lag_p99_per_minute={m + 1: pct(v, 0.99) for m, v in sorted(per_minute.items())})


def ingester_summary(http0, http1, result):
    """Flush figures between two /metrics snapshots of the ingester."""
    d = {k: http1.get(k, 0) - http0.get(k, 0) for k in http1}
    flushes = d.get("strata_ingester_flushes_total", 0)
    flush_s = d.get("strata_ingester_flush_duration_seconds_total", 0)
    cut_s = d.get("strata_ingester_cut_duration_seconds_total", 0)
    mean_flush = flush_s / flushes if flushes else float("nan")
    result.update(flushes=flushes, mean_flush_s=mean_flush,
                  mean_cut_s=cut_s / flushes if flushes else float("nan"),
                  ingested_samples=d.get("strata_ingester_samples_total", 0))
    print(f"  ingester: {flushes:.0f} flushes, mean flush (cut, encode, upload) "
          f"{mean_flush * 1000:.0f} ms (cut {result['mean_cut_s'] * 1000:.0f} ms), "
          f"{d.get('strata_ingester_samples_total', 0) / max(1, flushes):.0f} stored samples per "
          f"flush")
    return mean_flush


def errors_summary(cluster, result):
    ing = metrics(cluster.ingester_http)
    errs = {
        "ingester_rejected_requests": ing.get("strata_ingester_rejected_requests_total", 0),
        "ingester_limited_requests": ing.get("strata_ingester_limited_requests_total", 0),
        "ingester_upload_failures": ing.get("strata_ingester_upload_failures_total", 0),
        "ingester_flush_failures": ing.get("strata_ingester_flush_failures_total", 0),
    }
    if cluster.scraper_http is not None:
        sc = metrics(cluster.scraper_http)
        errs.update({
            "scraper_push_dropped_requests": sc.get("strata_scraper_push_dropped_requests_total", 0),
            "scraper_scrape_failures": sc.get("strata_scraper_scrape_failures_total", 0),
            "scraper_push_errors": sc.get("strata_scraper_push_errors_total", 0),
        })
    result["errors"] = errs
    print("  drops and errors (whole run): " + ", ".join(f"{k} {v:.0f}" for k, v in errs.items()))
    return ing


def bytes_summary(cluster, t_start, t_end, result, pprof_factor=None):
    blocks, data, samples, levels = level1_bytes(cluster.bucket_dir, int(t_start * 1000),
                                                 int(t_end * 1000))
    bps = data / samples if samples else float("nan")
    result.update(l1_blocks=blocks, l1_bytes=data, l1_samples=samples, l1_bytes_per_sample=bps)
    extra = ""
    if pprof_factor:
        extra = f", {bps * pprof_factor:.1f} per pprof sample ({pprof_factor} sample types)"
    print(f"  level-1 blocks in the window: {blocks}, {data / 1e6:.1f} MB of data objects, "
          f"{samples} stored samples: {bps:.2f} bytes per stored sample{extra}")
    print("  all blocks by level (count, bytes, samples): " + ", ".join(
        f"L{k}: {v[0]}, {v[1] / 1e6:.1f} MB, {v[2]}" for k, v in sorted(levels.items())))


def run_scrape(args, mode, work):
    result = {"scenario": "scrape", "mode": mode, "targets": args.targets}
    fleet_log = os.path.join(work, "fleet.log")
    fleet = Proc("fleet_targets", [os.path.join(args.build_dir, "bench", "fleet_targets"),
                                   "--source-dir", ROOT, "--log", fleet_log],
                 os.path.join(work, "fleet_targets.err"), stdout=subprocess.PIPE)
    cluster = None
    prober = None
    try:
        line = fleet.popen.stdout.readline()
        m = re.match(r"port=(\d+)", line or "")
        if not m:
            raise SystemExit(f"fleet_targets did not start; see {fleet.log_path}")
        port = int(m.group(1))
        scrape = scrape_yaml(args.targets, port)
        if args.scraper_max_in_flight:
            scrape = f"scraper:\n  max_in_flight: {args.scraper_max_in_flight}\n" + scrape
        cluster = Cluster(args, work, mode, scrape=scrape)
        t_ready = time.time()
        # The goroutine profile type (what Go's heap profile becomes under that name).
        types = []
        while time.time() < t_ready + 60:
            cluster.check_alive()
            try:
                _, body = http_get(cluster.query_http + "/api/v1/profile_types?start=now-5m")
                types = json.loads(body).get("types", [])
            except OSError:
                pass
            if any(t["name"] == "goroutine" for t in types) and any(
                    t["id"] == CPU_TYPE for t in types):
                break
            time.sleep(1)
        gor = [t for t in types if t["name"] == "goroutine"]
        if not gor:
            raise SystemExit("no goroutine profile became queryable within 60 s")
        gor_type, gor_delta = gor[0]["id"], gor[0]["delta"]
        n = min(args.probe_targets, args.targets)
        sample = [f"127.0.{1 + i // 250}.{1 + i % 250}:{port}"
                  for i in (k * args.targets // n for k in range(n))]
        sel = "{instance=~\"" + regex_of(sample) + "\"}"
        queries = [("process_cpu", CPU_TYPE + sel, "instance", "instance"),
                   ("goroutine", gor_type + sel, "instance" if gor_delta else None, "instance")]
        delta_kinds = {"process_cpu"} | ({"goroutine"} if gor_delta else set())
        prober = Prober(cluster.query_http, queries, args.probe_window)
        prober.start()
        mif = args.scraper_max_in_flight or "default"
        print(f"scrape/{mode}: {args.targets} targets x 5 profiles every 10 s (scraper "
              f"max_in_flight {mif}); probing "
              f"{len(sample)} targets x {{process_cpu, {gor_type}}}; warm-up {args.warmup:.0f} s, "
              f"window {args.seconds:.0f} s", flush=True)
        sleep_checked(cluster, [fleet], t_ready + args.warmup - time.time())
        m0 = {"scraper": metrics(cluster.scraper_http)}
        ing0 = metrics(cluster.ingester_http)
        cluster.mark("a")
        fleet.mark("a")
        cpu0 = self_cpu()
        t_start = time.time()
        lag_max_gauge = sample_until(cluster, [fleet], t_start, args.seconds, cluster.scraper_http)
        t_end = time.time()
        cluster.mark("b")
        fleet.mark("b")
        cpu1 = self_cpu()
        ing1 = metrics(cluster.ingester_http)
        sc1 = metrics(cluster.scraper_http)
        sleep_checked(cluster, [fleet], args.grace)
        prober.stop()
        errors_summary(cluster, result)
        fleet.stop()
        out = fleet.popen.stdout.read()
        result["fleet"] = out.strip()
        events = []
        wanted = set(sample)
        kinds = {"/debug/pprof/profile": "process_cpu", "/debug/pprof/goroutine": "goroutine"}
        with open(fleet_log) as f:
            for line in f:
                host, path, t = line.split()
                if host in wanted and path in kinds:
                    events.append((kinds[path], host, int(t)))
        wall = t_end - t_start
        d = {k: sc1.get(k, 0) - m0["scraper"].get(k, 0) for k in sc1}
        scrapes = d.get("strata_scraper_scrapes_total", 0)
        acked = d.get("strata_scraper_push_acknowledged_series_total", 0)
        result.update(scrapes_in_window=scrapes, acked_in_window=acked,
                      push_lag_gauge_max=lag_max_gauge)
        print(f"  window {wall:.1f} s: {scrapes:.0f} scrapes ({scrapes / wall:.1f}/s), "
              f"{acked:.0f} profiles acknowledged ({acked / wall:.1f}/s) in "
              f"{d.get('strata_scraper_push_batches_total', 0) / wall:.1f} WriteRaw/s; scraper "
              f"push lag gauge max {lag_max_gauge:.2f} s")
        by_kind = {}
        lags, per_minute, unseen = lag_table(events, prober.seen, t_start, t_end, delta_kinds,
                                             by_kind)
        print_lags("scrape -> visible in query", lags, per_minute, unseen, result, by_kind)
        print(f"  prober: {prober.polls} polls, query latency p50 "
              f"{pct(prober.latencies, 0.5) * 1000:.0f} ms p99 "
              f"{pct(prober.latencies, 0.99) * 1000:.0f} ms, errors {prober.errors} "
              f"{prober.last_error}")
        mean_flush = ingester_summary(ing0, ing1, result)
        target_line(result, mean_flush, mode)
        result["processes"] = report_processes(cluster, fleet, cpu1 - cpu0, wall, "a", "b")
        bytes_summary(cluster, t_start, t_end, result)
    finally:
        if prober is not None and prober.is_alive():
            prober.stop()
        if cluster is not None:
            cluster.stop()
        fleet.stop()
    return result


def run_agents(args, mode, work):
    result = {"scenario": "agents", "mode": mode, "agents": args.agents}
    log = os.path.join(work, "agents.log")
    cluster = Cluster(args, work, mode)
    gen = None
    prober = None
    try:
        push_seconds = args.warmup + args.seconds + 1
        gen = Proc("fleet_agents", [os.path.join(args.build_dir, "bench", "fleet_agents"),
                                    "--address", cluster.write_address, "--mode", "paced",
                                    "--agents", str(args.agents), "--windows", str(args.windows),
                                    "--seconds", str(push_seconds), "--log", log],
                   os.path.join(work, "fleet_agents.err"), stdout=subprocess.PIPE)
        line = gen.popen.stdout.readline()
        if not line.startswith("ready"):
            raise SystemExit(f"fleet_agents did not start; see {gen.log_path}")
        t_ready = time.time()
        print(f"agents/{mode}: {args.agents} agents, one agent-like CPU profile each every 10 s "
              f"({line.strip()}); warm-up {args.warmup:.0f} s, window {args.seconds:.0f} s",
              flush=True)
        n = min(args.probe_agents, args.agents)
        sample = [f"agent-{k * args.agents // n}" for k in range(n)]
        queries = [("agent", AGENT_TYPE + "{node=~\"" + regex_of(sample) + "\"}", "node", "node")]
        prober = Prober(cluster.query_http, queries, args.probe_window)
        prober.start()
        sleep_checked(cluster, [gen], t_ready + args.warmup - time.time())
        ing0 = metrics(cluster.ingester_http)
        cluster.mark("a")
        gen.mark("a")
        cpu0 = self_cpu()
        t_start = time.time()
        sample_until(cluster, [gen], t_start, args.seconds, None)
        t_end = time.time()
        cluster.mark("b")
        gen.mark("b")
        cpu1 = self_cpu()
        ing1 = metrics(cluster.ingester_http)
        sleep_checked(cluster, [], args.grace)
        prober.stop()
        errors_summary(cluster, result)
        rc = gen.popen.wait(timeout=120)
        summary = gen.popen.stdout.read().strip()
        result["generator"] = summary
        if rc != 0:
            print(f"  fleet_agents exited with {rc}; see {gen.log_path}")
        events, acks, failed = [], [], 0
        wanted = set(sample)
        with open(log) as f:
            for line in f:
                agent, t, lat, code = line.split()
                t, lat, code = int(t), int(lat), int(code)
                if t_start <= t / 1e9 <= t_end:
                    if code != 0:
                        failed += 1
                    else:
                        acks.append(lat / 1e9)
                node = f"agent-{agent}"
                if node in wanted and code == 0:
                    events.append(("agent", node, t))
        wall = t_end - t_start
        late = int(re.search(r"late=(\d+)", summary).group(1)) if "late=" in summary else -1
        result.update(pushes=len(acks) + failed, push_errors=failed, late=late,
                      ack_p50=pct(acks, 0.5), ack_p99=pct(acks, 0.99),
                      ack_max=max(acks) if acks else float("nan"))
        print(f"  window {wall:.1f} s: {len(acks) + failed} pushes ({(len(acks) + failed) / wall:.1f}"
              f"/s), {failed} failed, {late} late (whole run); ack latency p50 "
              f"{fmt_s(result['ack_p50'])} s, p99 {fmt_s(result['ack_p99'])} s, max "
              f"{fmt_s(result['ack_max'])} s")
        lags, per_minute, unseen = lag_table(events, prober.seen, t_start, t_end, {"agent"})
        print_lags("push -> visible in query", lags, per_minute, unseen, result)
        print(f"  prober: {prober.polls} polls, query latency p50 "
              f"{pct(prober.latencies, 0.5) * 1000:.0f} ms p99 "
              f"{pct(prober.latencies, 0.99) * 1000:.0f} ms, errors {prober.errors} "
              f"{prober.last_error}")
        mean_flush = ingester_summary(ing0, ing1, result)
        target_line(result, mean_flush, mode)
        result["processes"] = report_processes(cluster, gen, cpu1 - cpu0, wall, "a", "b")
        bytes_summary(cluster, t_start, t_end, result, pprof_factor=2)
    finally:
        if prober is not None and prober.is_alive():
            prober.stop()
        if gen is not None:
            gen.stop()
        cluster.stop()
    return result


def run_ackload(args, mode, work):
    result = {"scenario": "ackload", "mode": mode, "phases": []}
    cluster = Cluster(args, work, mode, querier=False)
    try:
        print(f"ackload/{mode}: closed-loop WriteRaw pushers, one agent-like profile (2,000 stacks) "
              f"per call, {args.ack_seconds:.0f} s per phase", flush=True)
        print("  pushers   calls/s   pprof samples/s   ack p50 (s)   ack p99 (s)   max (s)   errors"
              "   strata CPU (cores)")
        for c in args.concurrency:
            gen = Proc(f"fleet_agents closed {c}",
                       [os.path.join(args.build_dir, "bench", "fleet_agents"),
                        "--address", cluster.write_address, "--mode", "closed",
                        "--agents", str(max(c, args.ack_agents)), "--windows", "2",
                        "--concurrency", str(c), "--seconds", str(args.ack_seconds)],
                       os.path.join(work, f"ackload-{c}.err"), stdout=subprocess.PIPE)
            try:
                line = gen.popen.stdout.readline()
                if not line.startswith("ready"):
                    raise SystemExit(f"fleet_agents did not start; see {gen.log_path}")
                cluster.mark(f"a{c}")
                t0 = time.time()
                rc = gen.popen.wait(timeout=args.ack_seconds + 180)
                t1 = time.time()
                cluster.mark(f"b{c}")
                summary = gen.popen.stdout.read().strip()
            finally:
                gen.stop()
            if rc != 0:
                raise SystemExit(f"fleet_agents exited with {rc}; see {gen.log_path}")
            r = dict(kv.split("=", 1) for kv in summary.split())
            secs = float(r["seconds"])
            cores = sum(p.cores(f"a{c}", f"b{c}", t1 - t0) for p, _, _ in cluster.procs)
            phase = dict(pushers=c, calls_per_s=int(r["pushes"]) / secs,
                         samples_per_s=int(r["pprof_samples"]) / secs,
                         ack_p50=float(r["ack_p50_ms"]) / 1000, ack_p99=float(r["ack_p99_ms"]) / 1000,
                         ack_max=float(r["ack_max_ms"]) / 1000, errors=int(r["errors"]),
                         strata_cores=cores)
            result["phases"].append(phase)
            print(f"  {c:7d}   {phase['calls_per_s']:7.1f}   {phase['samples_per_s']:15.0f}   "
                  f"{phase['ack_p50']:11.3f}   {phase['ack_p99']:11.3f}   {phase['ack_max']:7.3f}   "
                  f"{phase['errors']:6d}   {cores:8.2f}", flush=True)
        for p, _, _ in cluster.procs:
            p.mark("end")
        print("  peak RSS: " + ", ".join(f"{p.name} {p.hwm_kib / 1024:.0f} MiB"
                                          for p, _, _ in cluster.procs))
        errors_summary(cluster, result)
    finally:
        cluster.stop()
    return result


def target_line(result, mean_flush, mode):
    flush_interval = 1.0
    target = 2 * flush_interval + mean_flush
    result["target_s"] = target
    ok = result.get("lag_p99", float("inf")) <= target
    extra = (" (split mode adds up to querier.sync_interval, 1 s, for the querier's listing)"
             if mode == "split" else "")
    print(f"  target: lag p99 <= 2 x flush_interval + upload = {target:.2f} s{extra}: "
          f"{'met' if ok else 'NOT met'} (p99 {fmt_s(result.get('lag_p99', float('nan')))} s)")


def sleep_checked(cluster, others, seconds):
    end = time.time() + max(0.0, seconds)
    while time.time() < end:
        cluster.check_alive()
        for o in others:
            if o.popen.poll() is not None and o.popen.returncode not in (0, None):
                raise SystemExit(f"{o.name} died (exit {o.popen.returncode}); see {o.log_path}")
        time.sleep(min(1.0, max(0.0, end - time.time())))


def sample_until(cluster, others, t_start, seconds, scraper_http):
    """Waits out the window, printing a line a minute; returns the scraper's push lag gauge max."""
    lag_max = 0.0
    next_print = t_start + 60
    while time.time() < t_start + seconds:
        sleep_checked(cluster, others, min(5.0, t_start + seconds - time.time()))
        if scraper_http is not None:
            try:
                lag_max = max(lag_max, metrics(scraper_http).get("strata_scraper_push_lag_seconds", 0))
            except OSError:
                pass
        cluster.mark("peak")
        for o in others:
            o.mark("peak")
        if time.time() >= next_print:
            print(f"  ... {time.time() - t_start:.0f} s of {seconds:.0f}", flush=True)
            next_print += 60
    return lag_max


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", choices=["scrape", "agents", "ackload", "all"], default="all")
    ap.add_argument("--mode", choices=["all", "split"], default="all")
    ap.add_argument("--announce", action="store_true",
                    help="split mode: the querier follows the ingester's block announcements "
                         "(ingester.announce_listen_address, querier.announce_addresses)")
    ap.add_argument("--seconds", type=float, default=600, help="measured window per scenario")
    ap.add_argument("--warmup", type=float, default=25)
    ap.add_argument("--grace", type=float, default=20,
                    help="probing after the window, for profiles scraped or pushed at its end")
    ap.add_argument("--targets", type=int, default=1000)
    ap.add_argument("--agents", type=int, default=500)
    ap.add_argument("--windows", type=int, default=2, help="distinct profiles per agent, cycled")
    ap.add_argument("--probe-targets", type=int, default=10,
                    help="targets probed (x2 profile types: ~20 series)")
    ap.add_argument("--probe-agents", type=int, default=20)
    ap.add_argument("--probe-window", type=float, default=60)
    ap.add_argument("--ack-seconds", type=float, default=30)
    ap.add_argument("--ack-agents", type=int, default=100)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 10, 100])
    ap.add_argument("--scraper-max-in-flight", type=int, default=0,
                    help="scraper.max_in_flight (default: not set, the config default, 16)")
    ap.add_argument("--build", default="build-rel")
    ap.add_argument("--json", help="write the results as JSON to this file")
    ap.add_argument("--keep", action="store_true", help="keep the temp dirs (printed)")
    args = ap.parse_args()
    if args.targets < 1 or args.targets > 250 * 250:
        ap.error("--targets must be 1..62500")
    args.build_dir = os.path.join(ROOT, args.build)
    for exe in ("cmd/strata/strata", "bench/fleet_targets", "bench/fleet_agents"):
        if not os.access(os.path.join(args.build_dir, exe), os.X_OK):
            ap.error(f"{args.build}/{exe} is missing: build the project and bench/ there")
    scenarios = ["scrape", "agents", "ackload"] if args.scenario == "all" else [args.scenario]
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    print(f"fleet_bench {time.strftime('%Y-%m-%d %H:%M')}: {os.cpu_count()} CPUs, load average "
          f"{' '.join(load)}, mode {args.mode}, build {args.build}; load generators on the same "
          f"machine", flush=True)
    results = []
    for sc in scenarios:
        work = tempfile.mkdtemp(prefix=f"strata-fleet-{sc}-")
        try:
            fn = {"scrape": run_scrape, "agents": run_agents, "ackload": run_ackload}[sc]
            results.append(fn(args, args.mode, work))
        finally:
            if args.keep:
                print(f"  kept {work}")
            else:
                shutil.rmtree(work, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)


if __name__ == "__main__":
    sys.exit(main())
