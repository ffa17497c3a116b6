#!/usr/bin/python3
"""The seed's journey stays fresh (issue 16 item 5): with the default config, a new scrape is
visible in the UI's graph within 2 scrape intervals, for 2 and for 200 targets.

`strata all` runs with the defaults except what a test must set (ports, a temporary FILESYSTEM
bucket, one scrape job listing the targets): scrape_interval (10s), the 5 default Go profiles,
flush_interval, sync_interval and the compactor stay as shipped. The targets are real Go programs
(tests/gotarget), one process per target: a Go program serves one CPU profile at a time, and the
scraper asks every target for a 10 s CPU profile back to back. The 200 run with -burn=false
-burn-slice 10ms -burn-period 5s -work-interval 2s and GOMAXPROCS=1 (about 0.5% of a core each
while scraped: 200 of them fit a 2-core machine beside strata) and serve non-empty profiles of
every type. A CPU profile can still come out empty (the kernel samples a thread only at a tick
that finds it running); each target logs what every CPU profile it served held (-profile-log),
so a scrape that got an empty one, which has no point on the graph (zero samples are dropped, as
in Parca), is known and counted rather than guessed, and every other CPU point must hold exactly
the samples its target served.

What is measured is what the UI's metrics graph shows: it polls GET /api/v1/query_range (ui/src/
app.js, api.queryRange) with step 1s (the UI's step for a range of a few minutes), every ~250 ms, for
  - 2 targets: every profile type of each target, one query per (target, type), as the graph
    does with an instance matcher;
  - 200 targets: one query per profile type over the whole job (200 series each), and per-target
    queries (process_cpu and memory) for a sample of 20 targets.
Every point records when its poll first returned it; its lag is that time minus its timestamp
(the profile's own time: a CPU profile's is the start of its 10 s window; a delta series' point
is at its 1 s bucket, up to 1 s earlier, so lags are overestimated, never under). The scrapes
themselves come from the scraper's /api/v1/targets (each target's lastScrape, polled every 2 s;
one scrape lasts 10 s for the CPU profile and stays visible there until the next). After a
warm-up of one interval, every scrape started in the next 3 intervals, of every watched series,
must have its point on the graph within 2 scrape intervals of its timestamp; every target's every
profile type (11 series per target) must hold a point for every one of its scrapes in the window;
the scraper's /metrics must show no failed scrape, no push error and no push dropped.
"""
import calendar
import concurrent.futures
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_testlib as lib  # noqa: E402

INTERVAL = 10.0  # scrape_configs' default scrape_interval (services/scraper/scrape_config.c)
BOUND = 2 * INTERVAL  # a scrape must be on the graph this long after its timestamp
WINDOW = 3 * INTERVAL  # scrapes started in this window, after one interval of warm-up, count
POLL = 0.25  # the graph's poll period
TARGETS_POLL = 2.0  # /api/v1/targets' poll period (each lastScrape stays ~10 s)
JOB = "fleet"
# Mostly idle Go programs: 10 ms of CPU every 5 s on one thread, allocations and mutex contention
# every 2 s; about 0.5% of a core each while scraped.
FLEET_ARGS = ["-burn=false", "-burn-slice", "10ms", "-burn-period", "5s", "-work-interval", "2s"]
CPU_PERIOD_NS = 10_000_000  # Go's CPU profiles sample at 100 Hz

# One series (sample type) per profile name, graphed as the UI does.
GRAPH = {
    "process_cpu": "process_cpu:samples:count:cpu:nanoseconds:delta",
    "memory": "memory:alloc_space:bytes:space:bytes",
    "goroutine": "goroutine:goroutine:count:goroutine:count",
    "block": "block:contentions:count:contentions:count",
    "mutex": "mutex:contentions:count:contentions:count",
}
# Every series a Go target's 5 default profiles make (Parca's names).
ALL_TYPES = [
    "memory:alloc_objects:count:space:bytes",
    "memory:alloc_space:bytes:space:bytes",
    "memory:inuse_objects:count:space:bytes",
    "memory:inuse_space:bytes:space:bytes",
    "block:contentions:count:contentions:count",
    "block:delay:nanoseconds:contentions:count",
    "mutex:contentions:count:contentions:count",
    "mutex:delay:nanoseconds:contentions:count",
    "goroutine:goroutine:count:goroutine:count",
    "process_cpu:samples:count:cpu:nanoseconds:delta",
    "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta",
]
PROFILES = sorted(GRAPH)


def percentile(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def parse_rfc3339_ns(text):
    """'2026-12-03T11:09:26.123456789Z' -> Unix nanoseconds (the Targets JSON's lastScrape)."""
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z", text)
    assert m, text
    seconds = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))
    return seconds * 10**9 + int((m.group(2) or "0").ljust(9, "0"))


class Http:
    """Keep-alive HTTP/1.1 GETs to strata's HTTP port, one connection per thread."""

    def __init__(self, port):
        self.port = port
        self.local = threading.local()
        self.conns = []

    def get(self, path, params=None, timeout=30):
        if params:
            path += "?" + urllib.parse.urlencode(params, doseq=True)
        for attempt in (0, 1):
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = self.local.conn = http.client.HTTPConnection("127.0.0.1", self.port,
                                                                    timeout=timeout)
                self.conns.append(conn)
            try:
                conn.request("GET", path, headers={"Accept": "application/json"})
                resp = conn.getresponse()
                body = resp.read()
                return resp.status, body
            except (http.client.HTTPException, OSError):
                conn.close()
                self.local.conn = None
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")

    def close(self):
        for c in self.conns:
            c.close()

    def json(self, path, params=None):
        status, body = self.get(path, params)
        if status != 200:
            raise AssertionError(f"{path} {params}: HTTP {status}: {body[:300]!r}")
        return json.loads(body)


def metric_values(text, name):
    """{label text: value} of every sample of one metric in Prometheus text."""
    out = {}
    for line in text.splitlines():
        m = re.fullmatch(re.escape(name) + r"(\{[^}]*\})? (\S+)", line)
        if m:
            out[m.group(1) or ""] = float(m.group(2))
    return out


class Fleet:
    """N tests/gotarget processes, one per target, started in parallel; Popen handles kept."""

    def __init__(self, binary, workdir, n, args):
        self.binary, self.workdir, self.n, self.args = binary, workdir, n, args
        self.procs = []
        self.addresses = []

    def start(self):
        files = [os.path.join(self.workdir, f"target{i}.addr") for i in range(self.n)]
        self.cpu_logs = [os.path.join(self.workdir, f"target{i}.cpu") for i in range(self.n)]
        for f, cpu_log in zip(files, self.cpu_logs):
            self.procs.append(subprocess.Popen(
                [self.binary, "-listen", "127.0.0.1:0", "-port-file", f, "-profile-log", cpu_log]
                + self.args,
                env=dict(os.environ, GOMAXPROCS="1"),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

        def all_listening():
            dead = [p.args for p in self.procs if p.poll() is not None]
            assert not dead, f"targets exited: {dead[:3]}"
            return all(os.path.exists(f) for f in files)
        lib.wait_for(all_listening, timeout=60, interval=0.05, what=f"{self.n} Go targets to listen")
        for f in files:
            with open(f) as fh:
                self.addresses.append(fh.read().strip())

        def answers(address):
            deadline = time.monotonic() + 30
            while True:
                try:
                    status, body = lib.http_get(f"http://{address}/debug/pprof/", timeout=5)
                    if status == 200 and b"allocs" in body:
                        return
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                time.sleep(0.05)
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            list(pool.map(answers, self.addresses))
        return self

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []

    def served_cpu_profiles(self):
        """{address: {profile time ns: samples}}: every CPU profile each target served (its
        -profile-log), so that a scrape that got an empty one is known."""
        out = {}
        for address, path in zip(self.addresses, self.cpu_logs):
            out[address] = {}
            if os.path.exists(path):
                with open(path) as f:
                    for line in f:
                        t, n = line.split()
                        out[address][int(t)] = int(n)
        return out

    def cpu_seconds(self):
        """CPU time the fleet has used."""
        return sum(cpu_seconds(p.pid) for p in self.procs)


def cpu_seconds(pid):
    """CPU time (utime + stime) a live process has used, from /proc; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def config(work, grpc_port, http_port, addresses):
    targets = ", ".join(f"'{a}'" for a in addresses)
    return f"""
server:
  grpc_listen_address: 127.0.0.1:{grpc_port}
  http_listen_address: 127.0.0.1:{http_port}
bucket:
  type: FILESYSTEM
  config:
    directory: {os.path.join(work, "data")}
scrape_configs:
  - job_name: {JOB}
    static_configs:
      - targets: [{targets}]
"""


class FreshnessRun:
    """One strata all scraping a fleet; polls the graph and the targets; checks and reports."""

    def __init__(self, case, http, fleet, watches, t_ready):
        self.case, self.http, self.fleet, self.watches = case, http, fleet, watches
        self.t_ready = t_ready
        self.window = (t_ready + INTERVAL, t_ready + INTERVAL + WINDOW)
        self.first_seen = {}  # (watch name, instance, timestamp ms) -> wall time first returned
        self.scrapes = {}  # (instance, profile name) -> set of scrape start times (ns)
        self.bad = []  # targets seen unhealthy: (instance, profile, last error)
        self.poll_times = []  # seconds each round of graph queries took
        self.push_lag = []  # strata_scraper_push_lag_seconds, sampled with the targets
        self.cpu_served = {}  # (instance, CPU scrape ns) -> samples in the profile served
        self.unlogged = []  # CPU scrapes of the window without a profile in the target's log

    def query_range(self, query, start, end, sum_by=()):
        """The graph's query; no series (404 NOT_FOUND: nothing matches yet) is an empty graph.
        A delta type's series are summed by sum_by (the UI's "sum by"; none: one line)."""
        params = {"query": query, "start": str(int(start * 1000)), "end": str(int(end * 1000)),
                  "step": "1s", "sum_by": list(sum_by)}
        status, body = self.http.get("/api/v1/query_range", params)
        if status == 404 and json.loads(body).get("code") == "NOT_FOUND":
            return {"series": []}
        if status != 200:
            raise AssertionError(f"query_range {params}: HTTP {status}: {body[:300]!r}")
        return json.loads(body)

    def poll_graph(self, pool):
        now = time.time()
        start = now - BOUND - WINDOW - 2 * INTERVAL

        def one(watch):
            name, query, instance = watch
            # One target: the UI's default (no sum by); the job: "sum by instance".
            doc = self.query_range(query, start, now, () if instance else ("instance",))
            return name, instance, doc, time.time()
        for name, watched, doc, arrived in pool.map(one, self.watches):
            series = doc.get("series", [])
            assert not watched or len(series) <= 1, (name, len(series))
            for s in series:
                instance = watched or s["labels"]["instance"]
                for p in s["samples"]:
                    self.first_seen.setdefault((name, instance, p["timestamp"]), arrived)
        self.poll_times.append(time.time() - now)

    def poll_targets(self):
        doc = self.http.json("/api/v1/targets", {"state": "active"})
        for t in doc["targets"][JOB]["targets"]:
            labels = {l["name"]: l["value"] for l in t["labels"]["labels"]}
            key = (labels["instance"], labels["__name__"])
            if t["health"] == "HEALTH_BAD":
                self.bad.append(key + (t["lastError"],))
            if "lastScrape" in t and t["health"] == "HEALTH_GOOD":
                self.scrapes.setdefault(key, set()).add(parse_rfc3339_ns(t["lastScrape"]))
        status, body = self.http.get("/metrics")
        lag = metric_values(body.decode(), "strata_scraper_push_lag_seconds")
        if lag:
            self.push_lag.append(lag[""])

    def run(self):
        """Polls until every scrape of the window has had its 2 intervals (plus a second)."""
        end = self.window[1] + BOUND + 1.0
        next_targets = 0.0
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            while time.time() < end:
                tick = time.monotonic()
                self.poll_graph(pool)
                if time.monotonic() >= next_targets:
                    self.poll_targets()
                    next_targets = time.monotonic() + TARGETS_POLL
                left = POLL - (time.monotonic() - tick)
                if left > 0:
                    threading.Event().wait(left)  # the poll period, not a wait for a condition
        self.poll_targets()

    def in_window(self, ns):
        return self.window[0] * 1e9 <= ns <= self.window[1] * 1e9

    @staticmethod
    def match(points, scrape_ns):
        """The point of a scrape started at scrape_ns: its timestamp (the profile's time, or the
        1 s bucket of a delta series) is within [-1 s, +5 s] of it; scrapes are 10 s apart."""
        lo, hi = scrape_ns // 10**6 - 1000, scrape_ns // 10**6 + 5000
        return [ts for ts in points if lo <= ts <= hi]

    def resolve_cpu(self, served):
        """Pairs each CPU scrape of the window with the profile its target served."""
        for (instance, profile), scrapes in self.scrapes.items():
            if profile != "process_cpu":
                continue
            for scrape_ns in scrapes:
                if not self.in_window(scrape_ns):
                    continue
                # The profile starts when the target handles the request, before the next one.
                got = [n for t, n in served.get(instance, {}).items()
                       if scrape_ns - 10**9 <= t <= scrape_ns + 9 * 10**9]
                if len(got) == 1:
                    self.cpu_served[(instance, scrape_ns)] = got[0]
                else:
                    self.unlogged.append((instance, scrape_ns / 1e9 - self.window[0], got))

    def expected(self, instance, profile):
        """Scrapes started in the window whose point must be on the graph: all but CPU profiles
        the target served empty (no samples, no point: Parca drops them too)."""
        return sorted(s for s in self.scrapes.get((instance, profile), ())
                      if self.in_window(s) and (profile != "process_cpu"
                                                or self.cpu_served.get((instance, s), 1) > 0))

    def empty_cpu_scrapes(self):
        return sum(n == 0 for n in self.cpu_served.values())

    def lags(self, watch_name, profile, instances):
        """[(instance, scrape ns, lag s or None)] for every scrape in the window of the watched
        series; None: never on the graph."""
        points = {}
        for (name, instance, ts), seen in self.first_seen.items():
            if name == watch_name:
                points.setdefault(instance, {})[ts] = seen
        out = []
        for instance in instances:
            mine = points.get(instance, {})
            for scrape_ns in self.expected(instance, profile):
                found = self.match(mine, scrape_ns)
                out.append((instance, scrape_ns,
                            min(mine[ts] - ts / 1000 for ts in found) if found else None))
        return out


class ScrapeFreshnessTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = lib.make_workdir("scrape-fresh")
        cls.binary = os.path.join(cls.work, "gotarget")
        subprocess.run([os.path.join(lib.SOURCE_DIR, "tests", "gotarget", "build.sh"), cls.binary],
                       check=True)
        cls.report = []

    @classmethod
    def tearDownClass(cls):
        lib.remove_workdir(cls.work)
        for line in cls.report:
            print(line)

    def run_case(self, n, args, per_target, sample, aggregate):
        """Starts n targets and strata all; returns after every check of the case."""
        case = f"{n} targets"
        work = os.path.join(self.work, f"case{n}")
        os.makedirs(work)
        t0 = time.monotonic()
        fleet = Fleet(self.binary, work, n, args)
        strata = h = None
        try:
            fleet.start()
            started = time.monotonic() - t0
            grpc_port, http_port = lib.free_port(), lib.free_port()
            strata = lib.Strata(work, "all", config(work, grpc_port, http_port, fleet.addresses))
            strata.start(ready_url=f"http://127.0.0.1:{http_port}/ready")
            t_ready = time.time()
            cpu0, wall0 = fleet.cpu_seconds(), time.monotonic()
            strata_cpu0, own_cpu0 = cpu_seconds(strata.proc.pid), time.process_time()
            h = Http(http_port)

            watched = fleet.addresses[::max(1, n // sample)][:sample]
            watches = []
            for a in watched:
                for profile in per_target:
                    watches.append((f"{profile}@{a}",
                                    GRAPH[profile] + f'{{job="{JOB}",instance="{a}"}}', a))
            for profile in aggregate:
                watches.append((f"{profile}@all", GRAPH[profile] + f'{{job="{JOB}"}}', None))
            run = FreshnessRun(case, h, fleet, watches, t_ready)
            run.run()
            run.resolve_cpu(fleet.served_cpu_profiles())
            wall = time.monotonic() - wall0
            fleet_cores = (fleet.cpu_seconds() - cpu0) / wall
            strata_cores = (cpu_seconds(strata.proc.pid) - strata_cpu0) / wall
            own_cores = (time.process_time() - own_cpu0) / wall

            # Every check collects its problems, so that a failure still prints the figures.
            problems = []

            def check(ok, message):
                if not ok:
                    problems.append(message)

            # The scraper asked for 10 s CPU profiles: the default interval is what ran.
            doc = h.json("/api/v1/targets", {"state": "active"})
            urls = [t["url"] for t in doc["targets"][JOB]["targets"]]
            check(len(urls) == 5 * n, f"{len(urls)} targets, want {5 * n}")
            cpu_urls = sum(u.endswith(f"/debug/pprof/profile?seconds={int(INTERVAL)}") for u in urls)
            check(cpu_urls == n, f"{cpu_urls} CPU targets with seconds={int(INTERVAL)}, want {n}")
            check(run.bad == [], f"unhealthy targets: {run.bad[:5]}")
            check(run.unlogged == [], f"CPU scrapes without exactly one profile in their target's "
                  f"log (instance, time from the window's start, samples): {run.unlogged[:5]}")

            # Every watched series: every scrape of the window on the graph within 2 intervals.
            lags, per_type = [], {}
            for profile in per_target:
                for a in watched:
                    for inst, scrape_ns, lag in run.lags(f"{profile}@{a}", profile, [a]):
                        per_type.setdefault(f"{profile} (instance)", []).append(
                            (inst, scrape_ns, lag))
            for profile in aggregate:
                for inst, scrape_ns, lag in run.lags(f"{profile}@all", profile, fleet.addresses):
                    per_type.setdefault(f"{profile} (job)", []).append((inst, scrape_ns, lag))
            for kind, values in per_type.items():
                missing = [(i, (s / 1e9 - run.window[0])) for i, s, v in values if v is None]
                late = [(i, s / 1e9 - run.window[0], v) for i, s, v in values
                        if v is not None and v > BOUND]
                check(not missing, f"{kind}: {len(missing)} of {len(values)} scrapes never on "
                      f"the graph (instance, scrape time from the window's start): {missing[:5]}")
                check(not late, f"{kind}: {len(late)} of {len(values)} scrapes on the graph "
                      f"later than {BOUND:.0f}s (instance, scrape time, lag): {late[:5]}")
                lags.extend(v for _, _, v in values if v is not None)

            # Every target's every profile type (11 series each): a point for each scrape of the
            # window, read once more over the whole window.
            counts = {}
            for typ in ALL_TYPES:
                profile = typ.split(":", 1)[0]
                doc = run.query_range(typ + f'{{job="{JOB}"}}', run.window[0] - 2,
                                      run.window[1] + 10, ("instance",))
                series = {s["labels"]["instance"]: {p["timestamp"]: p["value"] for p in s["samples"]}
                          for s in doc["series"]}
                check(sorted(series) == sorted(fleet.addresses),
                      f"{typ}: {len(series)} series, want one per target ({n})")
                expected = matched = 0
                for a in fleet.addresses:
                    points = series.get(a, {})
                    for scrape_ns in run.expected(a, profile):
                        expected += 1
                        found = run.match(points, scrape_ns)
                        matched += len(found) == 1
                        near = {ts / 1000 - run.window[0]: v for ts, v in points.items()
                                if abs(ts - scrape_ns / 1e6) < 25000}
                        check(len(found) == 1, f"{typ} {a}: scrape at "
                              f"{scrape_ns / 1e9 - run.window[0]:.3f}s from the window's start "
                              f"has {len(found)} points; points nearby (time: value): {near}")
                        # The CPU graph's value is exactly what the target served.
                        if typ == GRAPH["process_cpu"] and len(found) == 1 and \
                                (a, scrape_ns) in run.cpu_served:
                            want = run.cpu_served[(a, scrape_ns)] * CPU_PERIOD_NS
                            check(points[found[0]] == want, f"{typ} {a}: scrape at "
                                  f"{scrape_ns / 1e9 - run.window[0]:.3f}s: value "
                                  f"{points[found[0]]}, the target served {want}")
                counts[typ] = (len(series), expected, matched)
                if typ == GRAPH["process_cpu"]:  # values are samples x the 10 ms period
                    values = [v / 1e7 for pts in series.values() for v in pts.values()]
                    cpu_samples = (min(values), statistics.median(values)) if values else (0, 0)
                # Every target scraped about once per interval in the window: at least 3 less one
                # at an edge (a CPU scrape lasts the whole interval, so its rounds drift by a few
                # ms each; a late scrape crosses the window's start).
                few = [a for a in fleet.addresses
                       if sum(map(run.in_window, run.scrapes.get((a, profile), ()))) < WINDOW / INTERVAL - 1]
                check(not few, f"{typ}: {len(few)} targets with fewer than "
                      f"{WINDOW / INTERVAL - 1:.0f} scrapes in the window: {few[:5]}")

            # The scraper's own account: nothing failed, nothing dropped, no push error.
            _, body = h.get("/metrics")
            text = body.decode()
            scrapes = metric_values(text, "strata_scraper_scrapes_total")[f'{{job="{JOB}"}}']
            failed = metric_values(text, "strata_scraper_scrape_failures_total")[f'{{job="{JOB}"}}']
            dropped = metric_values(text, "strata_scraper_push_dropped_requests_total")
            errors = metric_values(text, "strata_scraper_push_errors_total")[""]
            enqueued = metric_values(text, "strata_scraper_push_enqueued_series_total")[""]
            acked = metric_values(text, "strata_scraper_push_acknowledged_series_total")[""]
            check(failed == 0, f"{failed:.0f} failed scrapes")
            check(sum(dropped.values()) == 0, f"push drops: {dropped}")
            check(errors == 0, f"{errors:.0f} push errors")
            # Every target scraped every interval since the start (CPU scrapes: one per 10 s).
            elapsed = time.time() - t_ready
            check(scrapes >= 5 * n * (int(elapsed / INTERVAL) - 1),
                  f"{scrapes:.0f} scrapes in {elapsed:.0f}s")
            check(0 < acked <= enqueued, f"{acked:.0f} series acknowledged of {enqueued:.0f}")

            lag_line = (f"lag p50 {percentile(lags, 50):.2f}s p99 {percentile(lags, 99):.2f}s "
                        f"max {max(lags):.2f}s over {len(lags)} scrapes") if lags else "no lags"
            report = [f"[{case}] {lag_line} (bound {BOUND:.0f}s); targets up in {started:.1f}s, "
                      f"cores used: fleet {fleet_cores:.2f}, strata {strata_cores:.2f}, this test "
                      f"{own_cores:.2f}; graph poll p50 "
                      f"{statistics.median(run.poll_times) * 1000:.0f} ms max "
                      f"{max(run.poll_times) * 1000:.0f} ms ({len(watches)} queries a round); "
                      f"scrapes {scrapes:.0f}, failed {failed:.0f}, push errors {errors:.0f}, "
                      f"dropped {sum(dropped.values()):.0f}, series acked {acked:.0f} of "
                      f"{enqueued:.0f} enqueued, push lag max "
                      f"{max(run.push_lag) if run.push_lag else 0:.2f}s"]
            for kind, values in sorted(per_type.items()):
                seen = [v for _, _, v in values if v is not None]
                if seen:
                    report.append(f"[{case}]   {kind:24} p50 {percentile(seen, 50):6.2f}s "
                                  f"p99 {percentile(seen, 99):6.2f}s max {max(seen):6.2f}s "
                                  f"({len(seen)} of {len(values)} scrapes)")
            for typ, (ns, expected, matched) in counts.items():
                report.append(f"[{case}]   {typ:50} {ns} series, {matched}/{expected} scrapes "
                              f"in the window on the graph")
            report.append(f"[{case}]   CPU profiles' samples: min {cpu_samples[0]:.0f}, "
                          f"median {cpu_samples[1]:.0f}; {run.empty_cpu_scrapes()} of "
                          f"{len(run.cpu_served)} CPU scrapes in the window got an empty profile "
                          f"(no point expected)")
            for line in report:
                print(line, flush=True)
            self.report.extend(report)
            if problems:
                self.fail(f"[{case}] {len(problems)} problems:\n" + "\n".join(problems[:40]))
        finally:
            if h is not None:
                h.close()
            rc = strata.stop() if strata is not None and strata.proc is not None else 0
            fleet.stop()
            if strata is not None and rc != 0:
                print(strata.logs()[-3000:])
        self.assertEqual(rc, 0, "strata all exited uncleanly")

    def test_1_two_targets(self):
        # Each target's 5 profile types, one graph query per (target, type).
        self.run_case(2, ["-burn=false", "-burn-slice", "10ms"], per_target=PROFILES, sample=2,
                      aggregate=[])

    def test_2_two_hundred_targets(self):
        # All 200 through one query per type, and a sample of 20 targets one by one.
        self.run_case(200, FLEET_ARGS, per_target=["process_cpu", "memory"], sample=20,
                      aggregate=PROFILES)


if __name__ == "__main__":
    unittest.main(verbosity=2)
