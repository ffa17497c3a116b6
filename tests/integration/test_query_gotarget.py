#!/usr/bin/python3
"""The querier on real Go profiles: a real CPU profile of tests/gotarget pushed through WriteRaw
into `strata all`, merged back through gRPC and the JSON API, and the PPROF report opened by
`go tool pprof -top` (Debian's golang-go), whose totals and per-function flat values must agree
with the merged totals, with Strata's TOP report, and with Python's own parse of the pushed profile.
"""
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

CPU = "process_cpu:samples:count:cpu:nanoseconds:delta"
CPU_NS = "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta"
ROW = re.compile(r"^\s*(\d+)(?:ns)?\s+[\d.]+%\s+[\d.]+%\s+(\d+)(?:ns)?\s+[\d.]+%\s+(.+?)\s*$")
TOTAL = re.compile(r"Showing nodes accounting for (\d+)(?:ns)?, [\d.]+% of (\d+)(?:ns)? total")


def ts(ns):
    t = timestamp_pb2.Timestamp()
    t.seconds, t.nanos = divmod(ns, 10**9)
    return t


def go_pprof_top(path, workdir):
    """Runs go tool pprof -top in nanoseconds; returns (total, [(name, flat, cum)] in its order)."""
    env = dict(os.environ, HOME=workdir, GOFLAGS="", GOPROXY="off", PPROF_TMPDIR=workdir,
               GOCACHE=os.path.join(workdir, "gocache"))
    out = subprocess.run(["go", "tool", "pprof", "-top", "-nodecount=100000", "-nodefraction=0",
                          "-edgefraction=0", "-unit=ns", path],
                         env=env, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise AssertionError(f"go tool pprof failed: {out.stderr}")
    total = None
    rows = []
    for line in out.stdout.splitlines():
        m = TOTAL.search(line)
        if m:
            total = int(m.group(2))
            continue
        m = ROW.match(line)
        if m:
            rows.append((m.group(3), int(m.group(1)), int(m.group(2))))
    if total is None:
        raise AssertionError(f"no total in go tool pprof output:\n{out.stdout}")
    return total, rows


class GoProfileQueryTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = lib.make_workdir("query-go")
        cls.target = lib.GoTarget(cls.work).start()
        time.sleep(0.3)
        cls.raw = cls.target.fetch("/debug/pprof/profile?seconds=2")
        cls.target.stop()
        cls.grpc_port = lib.free_port()
        cls.http_port = lib.free_port()
        cls.base = f"http://127.0.0.1:{cls.http_port}"
        config = f"""
server:
  grpc_listen_address: 127.0.0.1:{cls.grpc_port}
  http_listen_address: 127.0.0.1:{cls.http_port}
bucket:
  type: FILESYSTEM
  config:
    directory: {os.path.join(cls.work, "data")}
ingester:
  flush_interval: 100ms
"""
        cls.strata = lib.Strata(cls.work, "all", config).start(ready_url=cls.base + "/ready")
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{cls.grpc_port}")
        cls.q = q_grpc.QueryServiceStub(cls.channel)
        store = ps_grpc.ProfileStoreServiceStub(cls.channel)
        store.WriteRaw(qc.write_request([({"__name__": "process_cpu", "job": "gotarget"}, [cls.raw])]),
                       timeout=30)
        cls.parsed = lib.decode_pprof(cls.raw)
        cls.start = cls.parsed.time_nanos - 10**9
        cls.end = cls.parsed.time_nanos + 10**9

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        rc = cls.strata.stop()
        if rc != 0:
            print(cls.strata.logs())
        lib.remove_workdir(cls.work)

    def merge(self, query, report):
        return self.q.Query(qpb.QueryRequest(
            mode=qpb.QueryRequest.MODE_MERGE,
            merge=qpb.MergeProfile(query=query, start=ts(self.start), end=ts(self.end)),
            report_type=report), timeout=30)

    def raw_totals(self):
        p = self.parsed
        st = p.string_table
        idx = {(st[t.type], st[t.unit]): i for i, t in enumerate(p.sample_type)}
        samples = sum(s.value[idx[("samples", "count")]] for s in p.sample)
        nanos = sum(s.value[idx[("cpu", "nanoseconds")]] for s in p.sample)
        return samples, nanos, p.period

    def test_merged_totals_match_the_pushed_profile(self):
        samples, nanos, period = self.raw_totals()
        self.assertEqual(period, 10_000_000)
        self.assertGreater(samples, 20, "the Go target burnt too little CPU to test")
        r = self.merge(CPU + '{job="gotarget"}', qpb.QueryRequest.REPORT_TYPE_FLAMEGRAPH_TABLE)
        self.assertEqual(r.total, samples * period)
        self.assertEqual(r.flamegraph.root.cumulative, samples * period)
        r = self.merge(CPU_NS, qpb.QueryRequest.REPORT_TYPE_FLAMEGRAPH_TABLE)
        self.assertEqual(r.total, nanos)

    def test_go_tool_pprof_agrees(self):
        samples, _, period = self.raw_totals()
        r = self.merge(CPU + '{job="gotarget"}', qpb.QueryRequest.REPORT_TYPE_PPROF)
        path = os.path.join(self.work, "grpc.pb.gz")
        with open(path, "wb") as f:
            f.write(r.pprof)
        total, rows = go_pprof_top(path, self.work)
        self.assertEqual(total, samples * period)
        # The hottest of the program's own functions (on a loaded machine the runtime's
        # asyncPreempt can out-sample it, in the pushed profile as much as in Strata's).
        self.assertEqual([n for n, _, _ in rows if n.startswith("main.")][0], "main.fibonacciStep", rows[:5])
        top = self.merge(CPU + '{job="gotarget"}', qpb.QueryRequest.REPORT_TYPE_TOP).top.list
        self.assertEqual([n.meta.function.name for n in top if n.meta.function.name.startswith("main.")][0],
                         "main.fibonacciStep")
        if len(rows) < 2 or rows[0][1] != rows[1][1]:
            self.assertEqual(top[0].meta.function.name, rows[0][0])
        # Every function's flat and cumulative as pprof computes them from Strata's pprof.
        strata_flat = {}
        strata_cum = {}
        for n in top:
            strata_flat[n.meta.function.name] = strata_flat.get(n.meta.function.name, 0) + n.flat
            strata_cum[n.meta.function.name] = n.cumulative
        # The export is faithful, inlined frames included: pprof marks a function's inlined
        # occurrences "(inline)" apart from its others; Strata's TOP counts the function once.
        pprof_flat = {}
        seen = {}
        for name, flat, _ in rows:
            base = name.removesuffix(" (inline)")
            seen[base] = seen.get(base, 0) + 1
            if flat:
                pprof_flat[base] = pprof_flat.get(base, 0) + flat
        self.assertEqual(pprof_flat, {k: v for k, v in strata_flat.items() if v})
        for name, _, cum in rows:
            if seen[name.removesuffix(" (inline)")] == 1:
                self.assertEqual(cum, strata_cum[name.removesuffix(" (inline)")], name)
        # The pushed profile itself, through go tool pprof: same flat per function.
        raw_path = os.path.join(self.work, "raw.pb.gz")
        with open(raw_path, "wb") as f:
            f.write(self.raw)
        raw_total, raw_rows = go_pprof_top(raw_path, self.work)
        self.assertEqual(raw_total, total)
        # go tool pprof marks frames inlined into their caller "(inline)"; Strata's reports are
        # function-level (one location per function), so compare names without the marker.
        raw_flat = {}
        for n, f, _ in raw_rows:
            if f:
                key = n[:-len(" (inline)")] if n.endswith(" (inline)") else n
                raw_flat[key] = raw_flat.get(key, 0) + f
        self.assertEqual(raw_flat, pprof_flat)
        # The JSON API download is the same profile.
        status, _, body = qc.http(self.base, "/api/v1/query",
                                  {"query": CPU + '{job="gotarget"}', "start": qc.ms(self.start),
                                   "end": qc.ms(self.end), "report": "pprof"})
        self.assertEqual(status, 200)
        path = os.path.join(self.work, "http.pb.gz")
        with open(path, "wb") as f:
            f.write(body)
        self.assertEqual(go_pprof_top(path, self.work), (total, rows))

    def test_json_top_order(self):
        j = qc.http_json(self.base, "/api/v1/query", {"query": CPU, "start": qc.ms(self.start),
                                                      "end": qc.ms(self.end), "report": "top"})
        rows = j["table"]["rows"]
        self.assertEqual([r["name"] for r in rows if r["name"].startswith("main.")][0], "main.fibonacciStep")
        flats = [r["flat"] for r in rows]
        self.assertEqual(flats, sorted(flats, reverse=True))
        samples, _, period = self.raw_totals()
        self.assertEqual(sum(flats), samples * period)
        self.assertEqual(j["total"], samples * period)
        names = [r["name"] for r in rows]
        for fn in ("main.fibonacci", "main.cpuHotLoop"):
            self.assertIn(fn, names)
        cum = {r["name"]: r["cumulative"] for r in rows}
        self.assertGreaterEqual(cum["main.cpuHotLoop"], cum["main.fibonacci"])
        self.assertGreaterEqual(cum["main.fibonacci"], cum["main.fibonacciStep"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
