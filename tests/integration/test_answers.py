#!/usr/bin/python3
"""Answers users can trust (issue 14), end to end with real Go programs.

tests/goversions/app is built twice, against dep-v1 (dep.Addition wastes its time in dep.Fib) and
dep-v2 (it does not); `strata all` scrapes both (labels version=v1 and version=v2) and:

- a diff of v1 against v2 compares function by function (Parca's default group_by function_name):
  runtime.main, main.main, main.work and dep.Addition appear once although each binary has its own
  copy, dep.Fib shrank to nothing (its A value is v1's merged value, its B value 0), over gRPC
  (FLAMEGRAPH_TABLE and TOP) and JSON (`/api/v1/diff?report=both`, rows with `flat_base` and
  `cumulative_base`); `group_by=function_name,mapping_file` splits them per binary again;
- QueryRange with only query, start, end and limit (Grafana's Parca data source sends no step)
  answers, with at most `limit` points per series (test_query_range_limit_caps_points is marked
  an expected failure: the server can answer limit + 1 points, see the comment there);
- a real Go CPU profile pushed through WriteRaw comes back from a single-profile PPROF export with
  the same samples on the same stacks of (address, mapping, function, file, line), inlined frames
  included, as `go tool pprof -raw` reads both;
- a profile pushed twice (a client retrying after a lost acknowledgement) counts once in merges,
  diffs and ranges, the answers say so (JSON `warnings`, gRPC trailer `strata-warnings`), and the
  answers are the same after a restart and after the compactor merged the two copies.
"""
import gzip
import json
import os
import re
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_testlib as lib  # noqa: E402
import test_query_common as qc  # noqa: E402

import grpc  # noqa: E402
from google.protobuf import timestamp_pb2  # noqa: E402
from parca.profilestore.v1alpha1 import profilestore_pb2_grpc as ps_grpc  # noqa: E402
from parca.query.v1alpha1 import query_pb2 as qpb  # noqa: E402
from parca.query.v1alpha1 import query_pb2_grpc as q_grpc  # noqa: E402
from parca.scrape.v1alpha1 import scrape_pb2 as spb  # noqa: E402
from parca.scrape.v1alpha1 import scrape_pb2_grpc as s_grpc  # noqa: E402

NS = 10**9
CPU = "process_cpu:samples:count:cpu:nanoseconds:delta"
CPU_NS = "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta"
DEP = "strata.dev/goversions/dep."
FIB = DEP + "Fib"
ADDITION = DEP + "Addition"
FIB_OF_20 = DEP + "fibOf20"   # v1 only, inlined into dep.Addition
# Functions on the hot path of both builds (each binary has its own copy of them).
COMMON = ("runtime.main", "main.main", "main.work", ADDITION)
DUPLICATES_WARNING = "identical profile(s) stored more than once counted once"
PROFILES_PER_VERSION = 6   # scraped CPU profiles of each version before the programs stop

MODULE = {}


def ts(ns):
    t = timestamp_pb2.Timestamp()
    t.seconds, t.nanos = divmod(ns, NS)
    return t


def go_env(work):
    return dict(os.environ, HOME=work, GOFLAGS="", GOPROXY="off", GOTOOLCHAIN="local",
                PPROF_TMPDIR=work, GOCACHE=os.path.join(work, "gocache"))


def start_program(version, name):
    """Starts one build (net/http/pprof on a free port) with its own directory for the port file."""
    d = os.path.join(MODULE["work"], name)
    os.makedirs(d)
    t = lib.GoTarget(d)
    t.binary = MODULE["binaries"][version]
    MODULE["targets"].append(t)
    return t.start()


def stop_programs():
    for t in MODULE["targets"]:
        t.stop()


def setUpModule():  # noqa: N802 - unittest's name
    work = lib.make_workdir("answers")
    MODULE.update(work=work, targets=[])
    try:
        v1, v2 = os.path.join(work, "bin", "app-v1"), os.path.join(work, "bin", "app-v2")
        subprocess.run([os.path.join(lib.SOURCE_DIR, "tests", "goversions", "build.sh"), v1, v2],
                       check=True, timeout=300)
        MODULE["binaries"] = {"v1": v1, "v2": v2}
        # One real CPU profile of v1 (a second of it), which the PPROF export test and the
        # duplicates test push themselves.
        probe = start_program("v1", "probe")
        MODULE["v1_profile"] = probe.fetch("/debug/pprof/profile?seconds=1")
        probe.stop()
    except BaseException:
        tearDownModule()
        raise


def tearDownModule():  # noqa: N802
    stop_programs()
    lib.remove_workdir(MODULE["work"])


def pprof_raw(data, work, name):
    """`go tool pprof -raw` of pprof bytes, without symbolization (what the file says)."""
    path = os.path.join(work, name)
    with open(path, "wb") as f:
        f.write(data)
    out = subprocess.run(["go", "tool", "pprof", "-raw", "-symbolize=none", path],
                         env=go_env(work), capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise AssertionError(f"go tool pprof -raw {name} failed: {out.stderr}")
    return out.stdout


LOC = re.compile(r"^\s*(\d+): (0x[0-9a-f]+) (?:M=(\d+) )?(?:\[F\] )?(.*)$")
LINE = re.compile(r"^(.*) (\S*):(\d+) s=(\d+)(?:\((.*)\))?$")
MAPPING = re.compile(r"^(\d+): (0x[0-9a-f]+)/(0x[0-9a-f]+)/(0x[0-9a-f]+) ?(.*?)\s*(\[.*\])?$")
SAMPLE = re.compile(r"^\s*((?:-?\d+\s+)+-?\d+|-?\d+):\s*((?:\d+\s*)*)$")


def parse_raw(text):
    """Parses `go tool pprof -raw`: {"types": [(type, unit)], "period_type", "period", "time",
    "duration", "stacks": {stack: [values]}} where a stack is a tuple, leaf first, of locations
    (address, mapping (start, limit, offset, file), ((function, file, line) per line, innermost
    first)) - location and mapping ids resolved away."""
    section = None
    out = {"types": None, "stacks": {}}
    samples = []
    locations = {}
    mappings = {}
    last_loc = None
    for line in text.splitlines():
        if line.startswith("PeriodType: "):
            out["period_type"] = line.split(": ", 1)[1].strip()
        elif line.startswith("Period: "):
            out["period"] = int(line.split(": ", 1)[1])
        elif line.startswith("Time: "):
            out["time"] = line.split(": ", 1)[1].strip()
        elif line.startswith("Duration: "):
            out["duration"] = line.split(": ", 1)[1].strip()
        elif line.strip() in ("Samples:", "Locations", "Mappings"):
            section = line.strip()
        elif section == "Samples:":
            if out["types"] is None:
                out["types"] = [tuple(t.split("/", 1)) for t in line.split()]
                continue
            m = SAMPLE.match(line)
            if m is None:
                if line.strip():
                    raise AssertionError(f"unexpected sample line {line!r}")
                continue
            values = [int(v) for v in m.group(1).split()]
            samples.append((values, [int(x) for x in m.group(2).split()]))
        elif section == "Locations":
            m = LOC.match(line)
            if m is not None:
                last_loc = int(m.group(1))
                locations[last_loc] = {"address": int(m.group(2), 16),
                                       "mapping": int(m.group(3)) if m.group(3) else 0,
                                       "lines": []}
                rest = m.group(4)
            else:
                rest = line.strip()
            if rest:
                lm = LINE.match(rest)
                if lm is None:
                    raise AssertionError(f"unexpected location line {line!r}")
                locations[last_loc]["lines"].append((lm.group(1), lm.group(2), int(lm.group(3))))
        elif section == "Mappings":
            m = MAPPING.match(line.strip())
            if m is not None:
                mappings[int(m.group(1))] = (int(m.group(2), 16), int(m.group(3), 16),
                                             int(m.group(4), 16), m.group(5) or "")
    for values, ids in samples:
        stack = tuple((locations[i]["address"], mappings.get(locations[i]["mapping"]),
                       tuple(locations[i]["lines"])) for i in ids)
        acc = out["stacks"].setdefault(stack, [0] * len(values))
        for k, v in enumerate(values):
            acc[k] += v
    return out


def metric(base, name):
    _, body = lib.http_get(base + "/metrics")
    for line in body.decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def start_strata(work, config, base):
    """strata all; its log on stderr when it does not get ready."""
    s = lib.Strata(work, "all", config)
    try:
        return s.start(ready_url=base + "/ready")
    except BaseException:
        if s.proc is not None:
            s.stop()
        print(f"--- strata all did not get ready ---\n{s.logs()[-5000:]}", file=sys.stderr)
        raise


def strata_config(work, grpc_port, http_port, extra=""):
    return f"""
server:
  grpc_listen_address: 127.0.0.1:{grpc_port}
  http_listen_address: 127.0.0.1:{http_port}
bucket:
  type: FILESYSTEM
  config:
    directory: {os.path.join(work, "data")}
ingester:
  flush_interval: 100ms
querier:
  sync_interval: 100ms
{extra}"""


def top_by_name(top):
    out = {}
    for n in top.list:
        out.setdefault(n.meta.function.name, []).append(n)
    return out


def flamegraph_nodes(fg):
    """Yields (path of names from the root, node) for every node."""
    def walk(node, path):
        yield path, node
        for c in node.children:
            yield from walk(c, path + (c.meta.function.name,))
    yield from walk(fg.root, ())


class VersionsTest(unittest.TestCase):
    """Two builds of one program, scraped, compared, ranged and exported."""

    @classmethod
    def setUpClass(cls):
        cls.work = os.path.join(MODULE["work"], "versions")
        os.makedirs(cls.work)
        cls.grpc_port, cls.http_port = lib.free_port(), lib.free_port()
        cls.base = f"http://127.0.0.1:{cls.http_port}"
        t = {v: start_program(v, v) for v in ("v1", "v2")}
        jobs = f"""scrape_configs:
  - job_name: goversions
    scrape_interval: 2s
    static_configs:
      - targets: ['{t["v1"].address}']
        labels: {{version: v1}}
      - targets: ['{t["v2"].address}']
        labels: {{version: v2}}
    profiling_config:
      pprof_config:
        memory: {{enabled: false}}
        block: {{enabled: false}}
        goroutine: {{enabled: false}}
        mutex: {{enabled: false}}
"""
        cls.window_start = time.time_ns() - 60 * NS
        cls.strata = start_strata(cls.work, strata_config(cls.work, cls.grpc_port, cls.http_port,
                                                          jobs), cls.base)
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{cls.grpc_port}")
        cls.q = q_grpc.QueryServiceStub(cls.channel)
        try:
            cls.collect()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def collect(cls):
        def profiles(version):
            j = qc.http_json(cls.base, "/api/v1/query",
                             {"query": f'{CPU}{{version="{version}"}}', "start": qc.ms(cls.window_start),
                              "end": "now", "report": "top", "max_nodes": "1"})
            return j["profiles"]

        lib.wait_for(lambda: min(profiles("v1"), profiles("v2")) >= PROFILES_PER_VERSION,
                     timeout=120, interval=0.5,
                     what=f"{PROFILES_PER_VERSION} CPU profiles of each version")
        # Stop the programs so that the data stops changing: every target's next scrape fails,
        # and every profile scraped before is acknowledged (durable and visible to the querier).
        killed = time.time_ns()
        stop_programs()

        def targets_down():
            with grpc.insecure_channel(f"127.0.0.1:{cls.grpc_port}") as ch:
                r = s_grpc.ScrapeServiceStub(ch).Targets(spb.TargetsRequest(), timeout=10)
            ts_ = r.targets["goversions"].targets
            return len(ts_) == 2 and all(x.health == spb.Target.HEALTH_BAD and
                                         x.last_scrape.ToNanoseconds() > killed for x in ts_)
        lib.wait_for(targets_down, timeout=30, what="both targets to fail a scrape after the stop")
        lib.wait_for(lambda: metric(cls.base, "strata_scraper_push_enqueued_series_total") ==
                     metric(cls.base, "strata_scraper_push_acknowledged_series_total"),
                     timeout=30, what="every scraped profile acknowledged")
        cls.window_end = time.time_ns() + NS
        cls.profiles = {v: profiles(v) for v in ("v1", "v2")}

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        rc = cls.strata.stop()
        if rc != 0:
            print(cls.strata.logs()[-5000:], file=sys.stderr)
        assert rc == 0, f"strata all exited with {rc}"

    # ---- helpers ----

    def side(self, version, query=CPU):
        return qpb.ProfileDiffSelection(
            mode=qpb.ProfileDiffSelection.MODE_MERGE,
            merge=qpb.MergeProfile(query=f'{query}{{version="{version}"}}',
                                   start=ts(self.window_start), end=ts(self.window_end)))

    def merge(self, query, report, group_by=None):
        req = qpb.QueryRequest(mode=qpb.QueryRequest.MODE_MERGE,
                               merge=qpb.MergeProfile(query=query, start=ts(self.window_start),
                                                      end=ts(self.window_end)),
                               report_type=report)
        if group_by is not None:
            req.group_by.fields.extend(group_by)
        return self.q.Query(req, timeout=60)

    def diff(self, report, absolute=None, group_by=None):
        d = qpb.DiffProfile(a=self.side("v1"), b=self.side("v2"))
        if absolute is not None:
            d.absolute = absolute
        req = qpb.QueryRequest(mode=qpb.QueryRequest.MODE_DIFF, diff=d, report_type=report)
        if group_by is not None:
            req.group_by.fields.extend(group_by)
        return self.q.Query(req, timeout=60)

    def version_top(self, version):
        r = self.merge(f'{CPU}{{version="{version}"}}', qpb.QueryRequest.REPORT_TYPE_TOP)
        by = top_by_name(r.top)
        for name, rows in by.items():
            self.assertEqual(len(rows), 1, f"{name} twice in one version's TOP")
        return r.total, {n: rows[0] for n, rows in by.items()}

    def json_diff(self, **extra):
        params = {"query_a": f'{CPU}{{version="v1"}}', "start_a": qc.ms(self.window_start),
                  "end_a": qc.ms(self.window_end),
                  "query_b": f'{CPU}{{version="v2"}}', "start_b": qc.ms(self.window_start),
                  "end_b": qc.ms(self.window_end), "report": "both"}
        params.update(extra)
        return qc.http_json(self.base, "/api/v1/diff", params)

    # ---- the tests ----

    def test_versions_profiles_are_what_the_builds_do(self):
        total1, v1 = self.version_top("v1")
        total2, v2 = self.version_top("v2")
        for name in COMMON:
            self.assertIn(name, v1)
            self.assertIn(name, v2)
        # v1 spends most of its CPU in dep.Fib; v2 never calls it.
        self.assertGreater(v1[FIB].cumulative, total1 // 2, (v1[FIB].cumulative, total1))
        self.assertNotIn(FIB, v2)
        self.assertGreater(v2[ADDITION].flat, 0)

    def test_grpc_diff_compares_function_by_function(self):
        total1, v1 = self.version_top("v1")
        total2, v2 = self.version_top("v2")
        r = self.diff(qpb.QueryRequest.REPORT_TYPE_TOP, absolute=True)
        by = top_by_name(r.top)
        for name, rows in by.items():
            self.assertEqual(len(rows), 1, f"{name} appears {len(rows)} times in the diff TOP")
        self.assertEqual(set(by), set(v1) | set(v2))
        fib = by[FIB][0]
        # Only in A: B's value 0, the diff minus A's value, A's value is v1's merged value.
        self.assertEqual((fib.cumulative, fib.flat), (0, 0))
        self.assertLess(fib.diff, 0)
        self.assertEqual(fib.cumulative - fib.diff, v1[FIB].cumulative)
        self.assertGreater(fib.cumulative - fib.diff, 0)
        for name in COMMON:
            row = by[name][0]
            self.assertEqual(row.cumulative, v2[name].cumulative, name)
            self.assertEqual(row.diff, v2[name].cumulative - v1[name].cumulative, name)

        r = self.diff(qpb.QueryRequest.REPORT_TYPE_FLAMEGRAPH_TABLE, absolute=True)
        fg = r.flamegraph
        self.assertEqual((fg.root.cumulative, fg.root.diff), (total2, total2 - total1))
        paths = {}
        for path, node in flamegraph_nodes(fg):
            names = [c.meta.function.name for c in node.children]
            self.assertEqual(len(names), len(set(names)), f"a frame twice under {path}: {names}")
            paths[path] = node
        hot = ("runtime.main", "main.main", "main.work", ADDITION)
        self.assertIn(hot, paths, sorted(paths)[:20])
        main_nodes = [p for p in paths if p and p[-1] == "main.main"]
        self.assertEqual(main_nodes, [("runtime.main", "main.main")])
        # v1's fibOf20 is inlined into Addition: a frame of its own between Addition and Fib.
        fib_node = paths[hot + (FIB_OF_20, FIB)]
        self.assertEqual(fib_node.cumulative, 0)
        self.assertLess(fib_node.diff, 0)
        self.assertEqual(-fib_node.diff, v1[FIB].cumulative)
        # Relative (the default): v1 and v2 are scaled to one total; dep.Fib still only shrinks.
        r = self.diff(qpb.QueryRequest.REPORT_TYPE_TOP)
        fib = top_by_name(r.top)[FIB]
        self.assertEqual(len(fib), 1)
        self.assertEqual(fib[0].cumulative, 0)
        self.assertLess(fib[0].diff, 0)

    def test_json_diff_rows_carry_both_sides(self):
        _, v1 = self.version_top("v1")
        _, v2 = self.version_top("v2")
        for absolute in ("true", None):
            j = self.json_diff(**({"absolute": absolute} if absolute else {}))
            self.assertTrue(j["diff"])
            rows = j["table"]["rows"]
            names = [x["name"] for x in rows]
            dup = sorted({n for n in names if names.count(n) > 1})
            self.assertEqual(dup, [], f"function names twice in the diff table (absolute={absolute})")
            by = {x["name"]: x for x in rows}
            fib = by[FIB]
            self.assertLess(fib["cumulative_diff"], 0)
            self.assertGreater(fib["cumulative_base"], 0)
            self.assertEqual(fib["cumulative"], 0)
            self.assertEqual(fib["cumulative_diff"], fib["cumulative"] - fib["cumulative_base"])
            self.assertEqual(fib["flat_diff"], fib["flat"] - fib["flat_base"])
            for name in COMMON:
                self.assertGreater(by[name]["cumulative_base"], 0, name)
                self.assertGreater(by[name]["cumulative"], 0, name)
            if absolute:
                self.assertEqual(j["total"], sum(x.flat for x in v2.values()))
                self.assertEqual(j["total_base"], sum(x.flat for x in v1.values()))
                self.assertEqual(fib["cumulative_base"], v1[FIB].cumulative)
                self.assertEqual(fib["flat_base"], v1[FIB].flat)
                for name in COMMON:
                    self.assertEqual((by[name]["cumulative"], by[name]["cumulative_base"]),
                                     (v2[name].cumulative, v1[name].cumulative), name)

    def test_group_by_mapping_file_keeps_binaries_apart(self):
        bins = MODULE["binaries"]
        j = self.json_diff(absolute="true", group_by="function_name,mapping_file")
        rows = {}
        for x in j["table"]["rows"]:
            rows.setdefault(x["name"], []).append(x)
        for name in COMMON:
            got = sorted((x["mapping_file"], x["cumulative_base"] > 0, x["cumulative"] > 0)
                         for x in rows[name])
            # v1's copy only in A, v2's only in B.
            self.assertEqual(got, sorted([(bins["v1"], True, False), (bins["v2"], False, True)]),
                             name)
        self.assertEqual([x["mapping_file"] for x in rows[FIB]], [bins["v1"]])
        # The default merges them again; so does an explicit function_name.
        for group_by in (None, "function_name"):
            extra = {"absolute": "true"}
            if group_by:
                extra["group_by"] = group_by
            j = self.json_diff(**extra)
            rows = [x for x in j["table"]["rows"] if x["name"] in COMMON]
            self.assertEqual(sorted(x["name"] for x in rows), sorted(COMMON))
        # A merge of both versions over gRPC, TOP: one row per function by default, one per binary
        # with mapping_file.
        query = f'{CPU}{{job="goversions"}}'
        by = top_by_name(self.merge(query, qpb.QueryRequest.REPORT_TYPE_TOP).top)
        for name in COMMON:
            self.assertEqual(len(by[name]), 1, name)
        by = top_by_name(self.merge(query, qpb.QueryRequest.REPORT_TYPE_TOP,
                                    ["function_name", "mapping_file"]).top)
        for name in COMMON:
            self.assertEqual(sorted(n.meta.mapping.file for n in by[name]),
                             sorted(bins.values()), name)
        self.assertEqual([n.meta.mapping.file for n in by[FIB]], [bins["v1"]])

    def test_query_range_without_step(self):
        for version in ("v1", "v2"):
            query = f'{CPU}{{version="{version}"}}'
            n = self.profiles[version]
            total = self.merge(query, qpb.QueryRequest.REPORT_TYPE_TOP).total
            # Only query, start and end: step = range/300 = 1 s here (at least 1 s); scrapes are
            # 2 s apart, so every profile is a point of its own.
            r = self.q.QueryRange(qpb.QueryRangeRequest(query=query, start=ts(self.window_start),
                                                        end=ts(self.window_end)), timeout=30)
            self.assertEqual(len(r.series), 1)
            pts = r.series[0].samples
            self.assertEqual((len(pts), {p.count for p in pts}), (n, {1}))
            self.assertEqual(sum(p.value for p in pts), total)
            # limit=5 over the whole window: at most 5 points, every profile still counted once.
            r = self.q.QueryRange(qpb.QueryRangeRequest(query=query, start=ts(self.window_start),
                                                        end=ts(self.window_end), limit=5),
                                  timeout=30)
            pts = r.series[0].samples
            self.assertLessEqual(len(pts), 5)
            self.assertGreaterEqual(len(pts), 1)
            self.assertEqual(sum(p.count for p in pts), n)
            self.assertEqual(sum(p.value for p in pts), total)
        # A long window (a day), limit 5, a series per version: no series over 5 points.
        day = 24 * 3600 * NS
        r = self.q.QueryRange(qpb.QueryRangeRequest(query=CPU + '{job="goversions"}',
                                                    start=ts(self.window_end - day),
                                                    end=ts(self.window_end), limit=5,
                                                    sum_by=["version"]), timeout=30)
        self.assertEqual(len(r.series), 2)
        for s in r.series:
            version = {x.name: x.value for x in s.labelset.labels}["version"]
            self.assertLessEqual(len(s.samples), 5)
            self.assertEqual(sum(p.count for p in s.samples), self.profiles[version])
        # The same over JSON, limit 5 and no step, split by version.
        j = qc.http_json(self.base, "/api/v1/query_range",
                         {"query": CPU + '{job="goversions"}', "start": qc.ms(self.window_end - day),
                          "end": qc.ms(self.window_end), "limit": "5", "sum_by": ["version"]})
        self.assertEqual(len(j["series"]), 2)
        for s in j["series"]:
            self.assertLessEqual(len(s["samples"]), 5)
            self.assertEqual(sum(p["count"] for p in s["samples"]),
                             self.profiles[s["labels"]["version"]])

    # Points are epoch-aligned buckets floor(time / step) * step: a window not aligned to the step
    # must still give at most `limit` of them (found by this test; fixed in querier_range_step).
    def test_query_range_limit_caps_points(self):
        # Deterministic: six profiles 2 s apart from 1700000003 s; window [that, +11 s].
        t = 1_700_000_003
        raws = [qc.cpu_pprof(t - qc.T0_S + 2 * k, {qc.A: 1}) for k in range(6)]
        ps_grpc.ProfileStoreServiceStub(self.channel).WriteRaw(
            qc.write_request([({"__name__": "process_cpu", "job": "limit"}, raws)]), timeout=30)
        for limit in (1, 2, 3, 5):
            j = qc.http_json(self.base, "/api/v1/query_range",
                             {"query": CPU + '{job="limit"}', "start": str(t * 1000),
                              "end": str((t + 11) * 1000), "limit": str(limit)})
            counts = [p["count"] for p in j["series"][0]["samples"]]
            self.assertLessEqual(len(counts), limit, (limit, counts))
            self.assertEqual(sum(counts), 6)
        # The Go programs' profiles, over just the seconds that hold them, and over the window.
        for version in ("v1", "v2"):
            query = f'{CPU}{{version="{version}"}}'
            n = self.profiles[version]
            total = self.merge(query, qpb.QueryRequest.REPORT_TYPE_TOP).total
            r = self.q.QueryRange(qpb.QueryRangeRequest(query=query, start=ts(self.window_start),
                                                        end=ts(self.window_end)), timeout=30)
            first = r.series[0].samples[0].timestamp.ToNanoseconds()
            last = r.series[0].samples[-1].timestamp.ToNanoseconds() + NS
            for start, end, limit in ((first, last, 1), (first, last, 2), (first, last, 3),
                                      (first, last, 5), (self.window_start, self.window_end, 1)):
                r = self.q.QueryRange(qpb.QueryRangeRequest(query=query, start=ts(start),
                                                            end=ts(end), limit=limit), timeout=30)
                got = r.series[0].samples
                self.assertLessEqual(len(got), limit, (limit, [p.count for p in got]))
                self.assertEqual((sum(p.count for p in got), sum(p.value for p in got)), (n, total),
                                 limit)

    def test_pprof_export_is_faithful(self):
        raw = MODULE["v1_profile"]
        parsed = lib.decode_pprof(raw)
        store = ps_grpc.ProfileStoreServiceStub(self.channel)
        store.WriteRaw(qc.write_request([({"__name__": "process_cpu", "job": "export"}, [raw])]),
                       timeout=30)
        original = parse_raw(pprof_raw(raw, self.work, "original.pb.gz"))
        self.assertEqual(original["types"], [("samples", "count"), ("cpu", "nanoseconds")])
        self.assertGreater(sum(v[0] for v in original["stacks"].values()), 5,
                           "the v1 program burnt too little CPU to test")
        for query, column in ((CPU, 0), (CPU_NS, 1)):
            r = self.q.Query(qpb.QueryRequest(
                mode=qpb.QueryRequest.MODE_SINGLE_UNSPECIFIED,
                single=qpb.SingleProfile(query=query + '{job="export"}', time=ts(parsed.time_nanos)),
                report_type=qpb.QueryRequest.REPORT_TYPE_PPROF), timeout=60)
            exported = parse_raw(pprof_raw(r.pprof, self.work, f"export-{column}.pb.gz"))
            self.assertEqual(len(exported["types"]), 1, exported["types"])
            (etype, eunit), = exported["types"]
            # Strata may express samples:count as its value times the period (nanoseconds).
            if (etype, eunit) == original["types"][column]:
                scale = 1
            else:
                self.assertEqual((column, eunit), (0, "nanoseconds"), exported["types"])
                scale = parsed.period
            want = {s: v[column] * scale for s, v in original["stacks"].items() if v[column]}
            got = {s: v[0] for s, v in exported["stacks"].items() if v[0]}
            self.assertEqual(set(got), set(want), "stacks differ (missing, extra)")
            self.assertEqual(got, want)
            self.assertEqual((exported["period_type"], exported["period"]),
                             (original["period_type"], original["period"]))
            self.assertEqual((exported["time"], exported["duration"]),
                             (original["time"], original["duration"]))
            # Inlined frames survive: dep.fibOf20 inlined into dep.Addition is one location with
            # two lines, in both (the comparison above includes the lines).
            inlined = {tuple(fn for fn, _, _ in loc[2]) for s in got for loc in s if len(loc[2]) > 1}
            self.assertIn((FIB_OF_20, ADDITION), inlined)


class DuplicatesTest(unittest.TestCase):
    """One real profile pushed twice (a retried WriteRaw) counts once, before and after a restart
    and after compaction."""

    @classmethod
    def setUpClass(cls):
        cls.work = os.path.join(MODULE["work"], "duplicates")
        os.makedirs(cls.work)
        cls.grpc_port, cls.http_port, cls.c_port = lib.free_port(), lib.free_port(), lib.free_port()
        cls.base = f"http://127.0.0.1:{cls.http_port}"
        cls.config = strata_config(cls.work, cls.grpc_port, cls.http_port,
                                   "compactor:\n  enabled: false\n")
        # The v1 profile moved to a window of 5 minutes that closed long ago (3 h back, in a 2 h
        # window that closed too), so the compactor merges it at once.
        p = lib.decode_pprof(MODULE["v1_profile"])
        now = time.time_ns()
        cls.t = (now - 3 * 3600 * NS) // (7200 * NS) * (7200 * NS) + 617 * NS + 123_456_789
        p.time_nanos = cls.t
        cls.raw = gzip.compress(p.SerializeToString())
        st = p.string_table
        idx = [(st[x.type], st[x.unit]) for x in p.sample_type].index(("samples", "count"))
        cls.one_copy = sum(s.value[idx] for s in p.sample) * p.period
        cls.strata = None
        cls.compactor = None
        cls.channel = None
        cls.start_strata()

    @classmethod
    def start_strata(cls):
        cls.strata = start_strata(cls.work, cls.config, cls.base)
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{cls.grpc_port}")
        cls.q = q_grpc.QueryServiceStub(cls.channel)

    @classmethod
    def stop_strata(cls):
        cls.channel.close()
        rc = cls.strata.stop()
        if rc != 0:
            print(cls.strata.logs()[-5000:], file=sys.stderr)
        cls.strata = None
        return rc

    @classmethod
    def tearDownClass(cls):
        if cls.compactor is not None and cls.compactor.proc is not None:
            cls.compactor.stop()
        if cls.strata is not None:
            assert cls.stop_strata() == 0

    def answers(self):
        """Merge, diff (against the same profile stored once) and range, gRPC and JSON; returns
        (values, warnings seen per answer)."""
        lo, hi = self.t - 60 * NS, self.t + 60 * NS
        warnings = {}
        out = {}
        merge = qpb.QueryRequest(mode=qpb.QueryRequest.MODE_MERGE,
                                 merge=qpb.MergeProfile(query=CPU + '{job="dup"}', start=ts(lo),
                                                        end=ts(hi)),
                                 report_type=qpb.QueryRequest.REPORT_TYPE_TOP)
        r, call = self.q.Query.with_call(merge, timeout=30)
        out["grpc merge"] = (r.total, sorted((n.meta.function.name, n.flat, n.cumulative)
                                             for n in r.top.list))
        warnings["grpc merge"] = dict(call.trailing_metadata() or ()).get("strata-warnings", "")

        def side(job):
            return qpb.ProfileDiffSelection(
                mode=qpb.ProfileDiffSelection.MODE_MERGE,
                merge=qpb.MergeProfile(query=f'{CPU}{{job="{job}"}}', start=ts(lo), end=ts(hi)))
        diff = qpb.QueryRequest(mode=qpb.QueryRequest.MODE_DIFF,
                                diff=qpb.DiffProfile(a=side("dup"), b=side("once"), absolute=True),
                                report_type=qpb.QueryRequest.REPORT_TYPE_FLAMEGRAPH_TABLE)
        r, call = self.q.Query.with_call(diff, timeout=30)
        out["grpc diff"] = (r.total, r.flamegraph.root.cumulative, r.flamegraph.root.diff,
                            sorted((p, n.diff) for p, n in flamegraph_nodes(r.flamegraph) if n.diff))
        warnings["grpc diff"] = dict(call.trailing_metadata() or ()).get("strata-warnings", "")

        r, call = self.q.QueryRange.with_call(
            qpb.QueryRangeRequest(query=CPU + '{job="dup"}', start=ts(lo), end=ts(hi)),
            timeout=30)
        out["grpc range"] = [[(p.timestamp.ToNanoseconds(), p.value, p.count, p.duration)
                              for p in s.samples] for s in r.series]
        warnings["grpc range"] = dict(call.trailing_metadata() or ()).get("strata-warnings", "")

        j = qc.http_json(self.base, "/api/v1/query", {"query": CPU + '{job="dup"}', "start": qc.ms(lo),
                                                      "end": qc.ms(hi), "report": "table"})
        out["json merge"] = (j["total"], j["profiles"],
                             sorted((x["name"], x["flat"], x["cumulative"]) for x in j["table"]["rows"]))
        warnings["json merge"] = "; ".join(j.get("warnings", []))
        j = qc.http_json(self.base, "/api/v1/diff",
                         {"query_a": CPU + '{job="dup"}', "start_a": qc.ms(lo), "end_a": qc.ms(hi),
                          "query_b": CPU + '{job="once"}', "start_b": qc.ms(lo), "end_b": qc.ms(hi),
                          "absolute": "true", "report": "table"})
        out["json diff"] = (j["total"], j["total_base"],
                            sorted((x["name"], x["cumulative_diff"]) for x in j["table"]["rows"]
                                   if x["cumulative_diff"] or x["flat_diff"]))
        warnings["json diff"] = "; ".join(j.get("warnings", []))
        j = qc.http_json(self.base, "/api/v1/query_range",
                         {"query": CPU + '{job="dup"}', "start": qc.ms(lo), "end": qc.ms(hi)})
        out["json range"] = [[(p["timestamp"], p["value"], p["count"]) for p in s["samples"]]
                             for s in j["series"]]
        warnings["json range"] = "; ".join(j.get("warnings", []))
        return out, warnings

    def check_values(self, out):
        c = self.one_copy
        self.assertEqual(out["grpc merge"][0], c)
        self.assertEqual(out["json merge"][:2], (c, 1))
        # Diff against the same profile stored once (another series): nothing differs.
        self.assertEqual(out["grpc diff"], (c, c, 0, []))
        self.assertEqual(out["json diff"], (c, c, []))
        # No step, no limit: step = 2 min / 300, raised to 1 s; one point, one profile.
        bucket = self.t // NS * NS
        self.assertEqual(out["grpc range"], [[(bucket, c, 1, out["grpc range"][0][0][3])]])
        self.assertEqual(out["json range"], [[(bucket // 1_000_000, c, 1)]])

    def test_twice_pushed_profile_counts_once(self):
        store = ps_grpc.ProfileStoreServiceStub(self.channel)
        # Two WriteRaw calls with the same bytes (a retry: two blocks), and the same profile once
        # in another series to diff against.
        for _ in range(2):
            store.WriteRaw(qc.write_request([({"__name__": "process_cpu", "job": "dup"}, [self.raw])]),
                           timeout=30)
        store.WriteRaw(qc.write_request([({"__name__": "process_cpu", "job": "once"}, [self.raw])]),
                       timeout=30)
        self.assertGreater(self.one_copy, 0)
        before, warnings = self.answers()
        self.check_values(before)
        self.assertEqual(before["grpc range"][0][0][3], lib.decode_pprof(self.raw).duration_nanos)
        for what, text in warnings.items():
            self.assertIn("1 " + DUPLICATES_WARNING, text, what)

        # Restarted: the same answers (the two copies are still two blocks).
        self.assertEqual(self.stop_strata(), 0)
        self.start_strata()
        after, warnings = self.answers()
        self.assertEqual(after, before)
        for what, text in warnings.items():
            self.assertIn("1 " + DUPLICATES_WARNING, text, what)

        # Compacted: the compactor keeps one copy; the answers stay the same.
        data = os.path.join(self.work, "data", "anonymous")
        levels_before = self.block_levels(data)
        self.assertEqual(sorted(levels_before.values()), [1, 1, 1], levels_before)
        self.compactor = lib.Strata(self.work, "compactor", f"""
server:
  http_listen_address: 127.0.0.1:{self.c_port}
bucket:
  type: FILESYSTEM
  config:
    directory: {os.path.join(self.work, "data")}
querier:
  sync_interval: 100ms
compactor:
  compaction_interval: 200ms
  consistency_delay: 1m
  delete_delay: 2s
""").start(ready_url=f"http://127.0.0.1:{self.c_port}/ready")

        def compacted():
            levels = self.block_levels(data)
            return len(levels) == 1 and min(levels.values()) >= 2 and not (set(levels) & set(levels_before))
        lib.wait_for(compacted, timeout=120, what="the three blocks merged into one")
        self.assertEqual(self.compactor.stop(), 0)
        # The answers are the same from the three blocks and from the merged one; the querier
        # has switched once its answers no longer fold copies (it syncs every second).
        def from_compacted():
            _, now = self.answers()
            return all(DUPLICATES_WARNING not in text for text in now.values())
        lib.wait_for(from_compacted, timeout=30,
                     what="the querier to answer from the compacted block")
        after, warnings = self.answers()
        self.assertEqual(after, before)
        # One copy left: nothing folded any more.
        for what, text in warnings.items():
            self.assertNotIn(DUPLICATES_WARNING, text, what)

    @staticmethod
    def block_levels(data):
        """{ulid: compaction level} of the committed blocks not marked for deletion."""
        out = {}
        if not os.path.isdir(data):
            return out
        for name in os.listdir(data):
            d = os.path.join(data, name)
            if not os.path.isdir(d):
                continue
            files = os.listdir(d)
            if "meta.json" not in files or "deletion-mark.json" in files:
                continue
            with open(os.path.join(d, "meta.json")) as f:
                out[name] = json.load(f)["compaction"]["level"]
        return out


if __name__ == "__main__":
    unittest.main(verbosity=2)
