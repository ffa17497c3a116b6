#!/usr/bin/python3
"""End-to-end querier test on a synthetic dataset with known answers (test_query_common.py):
`strata all` with a filesystem bucket, the dataset pushed through Parca's WriteRaw by Python grpcio
under tenant team-a, then every QueryService operation asked through grpcio and the same questions
through the JSON API, compared exactly with an independent model of Parca's semantics.
"""
import gzip
import json
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_testlib as lib  # noqa: E402
import test_query_common as qc  # noqa: E402
from test_query_common import (A, B, C, D, M1, M2, NS, R, S1, S2, S3, T, T0, W,  # noqa: E402,F401
                               CPU_NANOS, CPU_SAMPLES, MEM_OBJECTS, MEM_SPACE, PERIOD)

import grpc  # noqa: E402
from google.protobuf import duration_pb2, timestamp_pb2  # noqa: E402
from parca.profilestore.v1alpha1 import profilestore_pb2_grpc as ps_grpc  # noqa: E402
from parca.query.v1alpha1 import query_pb2 as qpb  # noqa: E402
from parca.query.v1alpha1 import query_pb2_grpc as q_grpc  # noqa: E402

TENANT = [("x-scope-orgid", "team-a")]
END = T0 + 200 * NS  # after every profile of the dataset


def ts(ns):
    t = timestamp_pb2.Timestamp()
    t.seconds, t.nanos = divmod(ns, NS)
    return t


def dur(ns):
    d = duration_pb2.Duration()
    d.seconds, d.nanos = divmod(ns, NS)
    return d


def merge_req(query, start, end, report=qpb.QueryRequest.REPORT_TYPE_FLAMEGRAPH_TABLE, trim=None):
    r = qpb.QueryRequest(mode=qpb.QueryRequest.MODE_MERGE,
                         merge=qpb.MergeProfile(query=query, start=ts(start), end=ts(end)),
                         report_type=report)
    if trim is not None:
        r.node_trim_threshold = trim
    return r


def single_req(query, time_ns, report=qpb.QueryRequest.REPORT_TYPE_FLAMEGRAPH_TABLE):
    return qpb.QueryRequest(mode=qpb.QueryRequest.MODE_SINGLE_UNSPECIFIED,
                            single=qpb.SingleProfile(query=query, time=ts(time_ns)),
                            report_type=report)


def diff_side(query, start=None, end=None, time=None):
    if time is not None:
        return qpb.ProfileDiffSelection(mode=qpb.ProfileDiffSelection.MODE_SINGLE_UNSPECIFIED,
                                        single=qpb.SingleProfile(query=query, time=ts(time)))
    return qpb.ProfileDiffSelection(mode=qpb.ProfileDiffSelection.MODE_MERGE,
                                    merge=qpb.MergeProfile(query=query, start=ts(start), end=ts(end)))


def diff_req(a, b, absolute=None, report=qpb.QueryRequest.REPORT_TYPE_FLAMEGRAPH_TABLE):
    d = qpb.DiffProfile(a=a, b=b)
    if absolute is not None:
        d.absolute = absolute
    return qpb.QueryRequest(mode=qpb.QueryRequest.MODE_DIFF, diff=d, report_type=report)


def flamegraph_shape(fg):
    """(name, cumulative, diff, children) from a Flamegraph message, names read through the
    string table, the function table and the locations table (all three must agree)."""
    st = fg.string_table

    def name_of(node):
        f = node.meta.function
        by_index = st[f.name_string_index]
        loc = fg.locations[node.meta.location_index - 1]
        by_table = st[fg.function[loc.lines[0].function_index - 1].name_string_index]
        assert f.name == by_index == by_table, (f.name, by_index, by_table)
        return f.name

    def walk(node, name):
        return (name, node.cumulative, node.diff, [walk(c, name_of(c)) for c in node.children])

    return walk(fg.root, "total")


def pprof_stacks(data):
    """{stack root first: value} of a pprof, parsed by Python protobuf."""
    p = lib.decode_pprof(data)
    s = p.string_table
    fn = {f.id: s[f.name] for f in p.function}
    loc = {l.id: l for l in p.location}
    out = {}
    for smp in p.sample:
        names = []
        for lid in smp.location_id:
            for line in loc[lid].line:
                names.append(fn[line.function_id])
        key = tuple(reversed(names))
        out[key] = out.get(key, 0) + smp.value[0]
    return p, out


def levels_abs(levels, names, width):
    """Flamebearer levels to absolute (x, total, self, name) per level (width ints per node, the
    side starting at offset 0 for single, 0 or 3 for double)."""
    out = []
    for lv in levels:
        row = []
        end = 0
        for i in range(0, len(lv), width):
            x = end + lv[i]
            row.append((x, lv[i + 1], lv[i + 2], names[lv[i + width - 1]]))
            end = x + lv[i + 1]
        out.append(row)
    return out


class QueryApiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = lib.make_workdir("query-api")
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
querier:
  sync_interval: 200ms
"""
        cls.strata = lib.Strata(cls.work, "all", config).start(ready_url=cls.base + "/ready")
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{cls.grpc_port}")
        cls.store = ps_grpc.ProfileStoreServiceStub(cls.channel)
        cls.q = q_grpc.QueryServiceStub(cls.channel)
        for req in qc.dataset_requests():
            cls.store.WriteRaw(req, metadata=TENANT, timeout=30)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        rc = cls.strata.stop()
        if rc != 0:
            print(cls.strata.logs())
        lib.remove_workdir(cls.work)

    # ---- helpers ----

    def query(self, req, tenant=TENANT):
        return self.q.Query(req, metadata=tenant, timeout=30)

    def assert_code(self, fn, code, needle=None):
        with self.assertRaises(grpc.RpcError) as ctx:
            fn()
        self.assertEqual(ctx.exception.code(), code, ctx.exception.details())
        if needle is not None:
            self.assertIn(needle, ctx.exception.details())
        return ctx.exception.details()

    def range(self, query, start, end, step, sum_by=(), tenant=TENANT):
        r = self.q.QueryRange(qpb.QueryRangeRequest(query=query, start=ts(start), end=ts(end),
                                                    step=dur(step), sum_by=list(sum_by)),
                              metadata=tenant, timeout=30)
        out = {}
        for s in r.series:
            key = tuple(sorted((l.name, l.value) for l in s.labelset.labels))
            self.assertNotIn(key, out)
            out[key] = s
        return out

    # ---- metadata ----

    def test_profile_types(self):
        r = self.q.ProfileTypes(qpb.ProfileTypesRequest(), metadata=TENANT, timeout=10)
        got = [f"{t.name}:{t.sample_type}:{t.sample_unit}:{t.period_type}:{t.period_unit}"
               + (":delta" if t.delta else "") for t in r.types]
        self.assertEqual(sorted(got), qc.ALL_TYPES)
        cpu = [t for t in r.types if t.name == "process_cpu" and t.sample_type == "samples"][0]
        self.assertEqual((cpu.sample_unit, cpu.period_type, cpu.period_unit, cpu.delta),
                         ("count", "cpu", "nanoseconds", True))
        mem = [t for t in r.types if t.name == "memory" and t.sample_type == "inuse_space"][0]
        self.assertFalse(mem.delta)
        # Only the memory profile at T0+90s lies in [T0+85s, T0+95s].
        r = self.q.ProfileTypes(qpb.ProfileTypesRequest(start=ts(T0 + 85 * NS), end=ts(T0 + 95 * NS)),
                                metadata=TENANT, timeout=10)
        self.assertEqual(sorted(t.sample_type for t in r.types), ["inuse_objects", "inuse_space"])
        # JSON
        j = qc.http_json(self.base, "/api/v1/profile_types", tenant="team-a")
        self.assertEqual(sorted(t["id"] for t in j["types"]), qc.ALL_TYPES)
        j = qc.http_json(self.base, "/api/v1/profile_types",
                         {"start": qc.ms(T0 + 85 * NS), "end": qc.ms(T0 + 95 * NS)}, tenant="team-a")
        self.assertEqual(sorted(t["id"] for t in j["types"]), [MEM_OBJECTS, MEM_SPACE])

    def test_labels_and_values(self):
        def labels(match=(), ptype=None, start=None, end=None):
            r = qpb.LabelsRequest(match=list(match))
            if ptype:
                r.profile_type = ptype
            if start is not None:
                r.start.CopyFrom(ts(start))
                r.end.CopyFrom(ts(end))
            return list(self.q.Labels(r, metadata=TENANT, timeout=10).label_names)

        def values(name, match=(), ptype=None, start=None, end=None):
            r = qpb.ValuesRequest(label_name=name, match=list(match))
            if ptype:
                r.profile_type = ptype
            if start is not None:
                r.start.CopyFrom(ts(start))
                r.end.CopyFrom(ts(end))
            return list(self.q.Values(r, metadata=TENANT, timeout=10).label_values)

        self.assertEqual(labels(), ["instance", "job", "pod", "queue"])
        self.assertEqual(labels(['{job="api"}']), ["instance", "job", "pod"])
        self.assertEqual(labels([CPU_SAMPLES + '{job="worker"}']), ["instance", "job", "pod", "queue"])
        self.assertEqual(labels(ptype=MEM_SPACE), ["instance", "job", "pod"])
        self.assertEqual(labels(ptype=CPU_NANOS), ["instance", "job", "pod", "queue"])
        self.assertEqual(labels(start=T0 + 125 * NS, end=T0 + 135 * NS), ["instance", "job", "pod", "queue"])
        self.assertEqual(values("pod"), ["api-1", "api-2", "worker-1"])
        self.assertEqual(values("pod", ['{job="api"}']), ["api-1", "api-2"])
        self.assertEqual(values("pod", ['{pod=~"api-.*", instance!="10.0.0.1:8080"}']), ["api-2"])
        self.assertEqual(values("pod", ['{queue!=""}']), ["worker-1"])
        self.assertEqual(values("job", ptype=MEM_OBJECTS), ["api"])
        self.assertEqual(values("queue"), ["jobs"])
        self.assertEqual(values("nosuchlabel"), [])
        self.assertEqual(values("pod", start=T0 + 85 * NS, end=T0 + 95 * NS), ["api-2"])
        self.assertEqual(values("pod", start=T0 + 125 * NS, end=T0 + 135 * NS), ["worker-1"])
        self.assert_code(lambda: values("pod", ['{job=}']), grpc.StatusCode.INVALID_ARGUMENT)
        self.assert_code(lambda: values("bad-name"), grpc.StatusCode.INVALID_ARGUMENT, "bad-name")
        self.assert_code(lambda: labels(ptype="memory:inuse_space"), grpc.StatusCode.INVALID_ARGUMENT)
        # JSON
        b, t = self.base, "team-a"
        self.assertEqual(qc.http_json(b, "/api/v1/labels", tenant=t)["label_names"],
                         ["instance", "job", "pod", "queue"])
        self.assertEqual(qc.http_json(b, "/api/v1/labels", {"match": '{job="api"}'}, tenant=t)["label_names"],
                         ["instance", "job", "pod"])
        self.assertEqual(qc.http_json(b, "/api/v1/labels", {"profile_type": MEM_SPACE}, tenant=t)["label_names"],
                         ["instance", "job", "pod"])
        self.assertEqual(qc.http_json(b, "/api/v1/labels/pod/values", tenant=t)["label_values"],
                         ["api-1", "api-2", "worker-1"])
        self.assertEqual(qc.http_json(b, "/api/v1/labels/pod/values",
                                      {"match": '{job="api"}', "profile_type": CPU_SAMPLES},
                                      tenant=t)["label_values"], ["api-1", "api-2"])
        self.assertEqual(qc.http_json(b, "/api/v1/labels/pod/values",
                                      {"start": qc.ms(T0 + 85 * NS), "end": qc.ms(T0 + 95 * NS)},
                                      tenant=t)["label_values"], ["api-2"])
        status, _, body = qc.http(b, "/api/v1/labels/pod/values", {"match": "{job=}"}, tenant=t,
                                  accept="application/json")
        self.assertEqual(status, 400, body)

    # ---- QueryRange ----

    def check_delta_range(self, query_type, query, pred, step, sum_by, per_sample):
        got = self.range(query, T0, END, step, sum_by)
        want = qc.range_delta(query_type, pred, T0, END, step, sum_by)
        self.assertEqual(sorted(got), sorted(want))
        for key, points in want.items():
            s = got[key]
            self.assertEqual((s.sample_type.type, s.sample_type.unit), ("cpu", "nanoseconds"))
            self.assertEqual((s.period_type.type, s.period_type.unit), ("cpu", "nanoseconds"))
            actual = [(p.timestamp.seconds * NS + p.timestamp.nanos, p.value, p.duration, p.count)
                      for p in s.samples]
            self.assertEqual(actual, points, f"{query} sum_by={sum_by} series {key}")
            for p, (_, value, duration, _) in zip(s.samples, points):
                self.assertAlmostEqual(p.value_per_second, value / duration, places=12)
        return got

    def test_query_range_delta(self):
        step = 60 * NS
        # No sum_by: one unlabelled series; hand-computed values (samples x 10 ms period).
        got = self.check_delta_range(CPU_SAMPLES, CPU_SAMPLES, lambda l: True, step, (), PERIOD)
        pts = [(p.timestamp.seconds, p.value, p.duration, p.count, round(p.value_per_second, 9))
               for p in got[()].samples]
        self.assertEqual(pts, [
            (qc.T0_S, 1_070_000_000, 60 * NS, 6, round(1.07 / 60, 9)),  # 107 samples, 4 timestamps
            (qc.T0_S + 60, 100_000_000, 10 * NS, 1, 0.01),              # one profile: its duration
            (qc.T0_S + 120, 350_000_000, 10 * NS, 1, 0.035),
        ])
        # sum_by one label, and two; selectors.
        got = self.check_delta_range(CPU_SAMPLES, CPU_SAMPLES, lambda l: True, step, ("pod",), PERIOD)
        self.assertEqual([p.value for p in got[(("pod", "api-2"),)].samples], [110_000_000])
        self.assertEqual([p.duration for p in got[(("pod", "api-2"),)].samples], [60 * NS])
        self.check_delta_range(CPU_SAMPLES, CPU_SAMPLES, lambda l: True, step, ("job", "pod"), PERIOD)
        got = self.check_delta_range(CPU_SAMPLES, CPU_SAMPLES + '{job="api"}', lambda l: l["job"] == "api",
                                     step, ("job",), PERIOD)
        self.assertEqual([p.value for p in got[(("job", "api"),)].samples], [570_000_000, 100_000_000])
        self.check_delta_range(CPU_SAMPLES, CPU_SAMPLES + '{pod=~"api-.*",pod!="api-1"}',
                               lambda l: l["pod"] == "api-2", step, ("instance",), PERIOD)
        # The cpu:nanoseconds type is summed as is (no period factor).
        got = self.check_delta_range(CPU_NANOS, CPU_NANOS, lambda l: True, step, (), 1)
        self.assertEqual(got[()].samples[0].value, 107 * qc.CPU_NS_PER_SAMPLE)
        # 10 s steps: S1 and S2 both at T0 share one timestamp, so duration is the profiles' 10 s.
        got = self.check_delta_range(CPU_SAMPLES, CPU_SAMPLES, lambda l: True, 10 * NS, (), PERIOD)
        first = got[()].samples[0]
        self.assertEqual((first.value, first.duration, first.count), (180_000_000, 10 * NS, 2))
        self.assertAlmostEqual(first.value_per_second, 0.018)
        # A window that starts inside the data.
        got = self.range(CPU_SAMPLES, T0 + 60 * NS, END, step, ())
        self.assertEqual([(p.timestamp.seconds, p.value) for p in got[()].samples],
                         [(qc.T0_S + 60, 100_000_000), (qc.T0_S + 120, 350_000_000)])

    def test_query_range_nondelta(self):
        step = 60 * NS
        for sum_by in ((), ("job",)):  # sum_by is ignored for non-delta types
            got = self.range(MEM_SPACE, T0, END, step, sum_by)
            want = qc.range_nondelta(MEM_SPACE, lambda l: True, T0, END, step)
            self.assertEqual(sorted(got), sorted(want))
            for key, points in want.items():
                s = got[key]
                self.assertEqual([(p.timestamp.seconds * NS + p.timestamp.nanos, p.value) for p in s.samples],
                                 points)
                for p in s.samples:
                    self.assertEqual(p.value_per_second, float(p.value))
                    self.assertEqual(p.duration, 0)
                self.assertEqual((s.sample_type.type, s.sample_type.unit), ("inuse_space", "bytes"))
            # Hand-computed: api-1 keeps T0+5s (not T0+35s) in the first minute.
            s1 = got[tuple(sorted(S1.items()))]
            self.assertEqual([(p.timestamp.seconds, p.value) for p in s1.samples],
                             [(qc.T0_S + 5, 5096), (qc.T0_S + 65, 6048)])
        got = self.range(MEM_OBJECTS + '{pod="api-2"}', T0, END, step)
        self.assertEqual([(p.timestamp.seconds, p.value) for p in got[tuple(sorted(S2.items()))].samples],
                         [(qc.T0_S + 25, 10), (qc.T0_S + 90, 5)])

    def test_query_range_json(self):
        params = {"query": CPU_SAMPLES, "start": qc.ms(T0), "end": qc.ms(END), "step": "60s",
                  "sum_by": ["pod"]}
        j = qc.http_json(self.base, "/api/v1/query_range", params, tenant="team-a")
        want = qc.range_delta(CPU_SAMPLES, lambda l: True, T0, END, 60 * NS, ("pod",))
        got = {tuple(sorted(s["labels"].items())): s for s in j["series"]}
        self.assertEqual(sorted(got), sorted(want))
        for key, points in want.items():
            s = got[key]
            self.assertEqual(s["sample_type"], {"type": "cpu", "unit": "nanoseconds"})
            self.assertEqual([(p["timestamp"] * 1_000_000, p["value"], p["duration"], p["count"])
                              for p in s["samples"]], points)
            for p in s["samples"]:
                self.assertAlmostEqual(p["value_per_second"], p["value"] / p["duration"], places=12)
        # RFC 3339 times and a plain-seconds step give the same answer.
        params.update(start="2023-11-14T22:20:00Z", end="2023-11-14T22:23:20Z", step="60")
        self.assertEqual(qc.http_json(self.base, "/api/v1/query_range", params, tenant="team-a"), j)
        j = qc.http_json(self.base, "/api/v1/query_range",
                         {"query": MEM_SPACE, "start": qc.ms(T0), "end": qc.ms(END), "step": "1m"},
                         tenant="team-a")
        got = {s["labels"]["pod"]: [(p["timestamp"], p["value"]) for p in s["samples"]] for s in j["series"]}
        self.assertEqual(got, {"api-1": [((T0 + 5 * NS) // 10**6, 5096), ((T0 + 65 * NS) // 10**6, 6048)],
                               "api-2": [((T0 + 25 * NS) // 10**6, 10000), ((T0 + 90 * NS) // 10**6, 10240)]})

    # Parca's QueryRange answers NotFound when nothing matches; so do both front ends.
    def test_query_range_empty_is_not_found(self):
        status, _, _ = qc.http(self.base, "/api/v1/query_range", {"query": CPU_SAMPLES + '{job="nope"}',
                                                                  "start": qc.ms(T0), "end": qc.ms(END)},
                               tenant="team-a")
        self.assertEqual(status, 404)
        self.assert_code(lambda: self.range(CPU_SAMPLES + '{job="nope"}', T0, END, 60 * NS),
                         grpc.StatusCode.NOT_FOUND)

    # ---- merge ----

    def test_merge_flamegraph(self):
        r = self.query(merge_req(CPU_SAMPLES, T0, END))
        stacks = qc.merge_stacks(qc.select(CPU_SAMPLES))
        want, trimmed = qc.tree_shape(qc.build_tree(stacks))
        self.assertEqual(flamegraph_shape(r.flamegraph), want)
        self.assertEqual(trimmed, 0)
        # Hand-computed: 152 samples x 10 ms.
        self.assertEqual(r.total, 1_520_000_000)
        self.assertEqual(r.flamegraph.root.cumulative, 1_520_000_000)
        main = r.flamegraph.root.children[0]
        self.assertEqual([(c.meta.function.name, c.cumulative) for c in main.children],
                         [("app.encode", 140_000_000), ("app.handle", 520_000_000),
                          ("app.tiny", 10_000_000), ("worker.run", 850_000_000)])
        self.assertEqual(r.flamegraph.unit, "nanoseconds")
        self.assertEqual(r.flamegraph.height, 4)
        self.assertEqual(r.flamegraph.trimmed, 0)
        self.assertEqual(r.filtered, 0)
        # The cpu:nanoseconds type of the same profiles.
        r = self.query(merge_req(CPU_NANOS + '{job="api"}', T0, END))
        self.assertEqual(r.total, (35 + 14 + 3 + 14 + 1) * qc.CPU_NS_PER_SAMPLE)
        want, _ = qc.tree_shape(qc.build_tree(qc.merge_stacks(qc.select(CPU_NANOS, lambda l: l["job"] == "api"))))
        self.assertEqual(flamegraph_shape(r.flamegraph), want)
        # Merge bounds are inclusive: [T0+10s, T0+20s] holds S1@10, S3@10, S1@20.
        r = self.query(merge_req(CPU_SAMPLES, T0 + 10 * NS, T0 + 20 * NS))
        self.assertEqual(r.total, (24 + 50 + 7) * PERIOD)
        # Non-delta merge sums every profile in the range.
        r = self.query(merge_req(MEM_SPACE + '{pod="api-1"}', T0, END))
        self.assertEqual(r.total, 5096 + 6144 + 6048)
        self.assertEqual(r.flamegraph.unit, "bytes")

    def test_reader_cache_metrics(self):
        """After a merge the querier's /metrics shows what its cached block readers hold, and the
        evictions by bound (none here: the defaults hold this dataset's few blocks)."""
        self.query(merge_req(CPU_SAMPLES, T0, END))
        status, _, body = qc.http(self.base, "/metrics")
        self.assertEqual(status, 200)
        text = body.decode()

        def value(series):
            m = re.search(rf"^{re.escape(series)} (\S+)$", text, re.M)
            self.assertIsNotNone(m, f"{series} missing from /metrics")
            return float(m.group(1))
        self.assertGreater(value("strata_querier_open_blocks"), 0)
        self.assertGreater(value("strata_querier_open_block_bytes"), 0)
        self.assertEqual(value('strata_querier_block_reader_evictions_total{reason="count"}'), 0)
        self.assertEqual(value('strata_querier_block_reader_evictions_total{reason="bytes"}'), 0)
        self.assertEqual(value("strata_querier_block_page_cache_sheds_total"), 0)

    def test_merge_trimming(self):
        # 1 %: children of main with cumulative <= 1.52 samples go (app.tiny); 10 %: <= 15.2 samples
        # go (app.tiny and the 14-sample app.encode subtree); app.handle's children stay.
        for trim, dropped in ((1.0, 10_000_000), (10.0, 150_000_000), (0.0, 0)):
            r = self.query(merge_req(CPU_SAMPLES, T0, END, trim=trim))
            want, trimmed = qc.tree_shape(qc.build_tree(qc.merge_stacks(qc.select(CPU_SAMPLES))), trim)
            self.assertEqual(trimmed, dropped)
            self.assertEqual(flamegraph_shape(r.flamegraph), want, f"trim {trim}")
            self.assertEqual(r.flamegraph.trimmed, dropped, f"trim {trim}")
            self.assertEqual(r.flamegraph.root.cumulative, 1_520_000_000)
        j = qc.http_json(self.base, "/api/v1/query",
                         {"query": CPU_SAMPLES, "start": qc.ms(T0), "end": qc.ms(END),
                          "node_trim_threshold": "10"}, tenant="team-a")
        self.assertEqual(j["flamegraph"]["trimmed"], 150_000_000)
        names = j["flamegraph"]["flamebearer"]["names"]
        self.assertNotIn("app.tiny", names)
        self.assertNotIn("libc.memcpy", names)

    def test_merge_top(self):
        r = self.query(merge_req(CPU_SAMPLES, T0, END, report=qpb.QueryRequest.REPORT_TYPE_TOP))
        got = [(n.meta.function.name, n.flat, n.cumulative, n.diff) for n in r.top.list]
        want = qc.top_rows(qc.merge_stacks(qc.select(CPU_SAMPLES)))
        self.assertEqual(got, want)
        # Hand-computed order; worker.run counts once per stack despite the recursion.
        self.assertEqual([(n, f // PERIOD, c // PERIOD) for n, f, c, _ in got], [
            ("worker.step", 80, 80), ("app.parse", 35, 35), ("app.encode", 14, 28),
            ("libc.memcpy", 14, 14), ("worker.run", 5, 85), ("app.handle", 3, 52),
            ("app.tiny", 1, 1), ("main", 0, 152)])
        self.assertEqual(r.top.reported, len(want))
        self.assertEqual(r.top.unit, "nanoseconds")
        self.assertEqual(r.total, 1_520_000_000)
        # JSON top and table give the same rows.
        for report in ("top", "table"):
            j = qc.http_json(self.base, "/api/v1/query", {"query": CPU_SAMPLES, "start": qc.ms(T0),
                                                          "end": qc.ms(END), "report": report},
                             tenant="team-a")
            self.assertEqual([(x["name"], x["flat"], x["cumulative"], 0) for x in j["table"]["rows"]], want)
            self.assertEqual(j["table"]["total"], 1_520_000_000)
            self.assertEqual(j["total"], 1_520_000_000)
            self.assertEqual(j["unit"], "nanoseconds")

    def test_merge_pprof(self):
        r = self.query(merge_req(CPU_SAMPLES, T0, END, report=qpb.QueryRequest.REPORT_TYPE_PPROF))
        self.assertEqual(r.pprof[:2], b"\x1f\x8b")
        p, stacks = pprof_stacks(r.pprof)
        self.assertEqual(stacks, qc.merge_stacks(qc.select(CPU_SAMPLES)))
        st = p.string_table
        self.assertEqual([(st[t.type], st[t.unit]) for t in p.sample_type], [("cpu", "nanoseconds")])
        self.assertEqual((st[p.period_type.type], st[p.period_type.unit]), ("cpu", "nanoseconds"))
        self.assertEqual(p.period, PERIOD)
        self.assertEqual(p.time_nanos, T0)
        self.assertEqual(p.duration_nanos, 8 * qc.DURATION)  # 8 profiles of 10 s
        # JSON download: the same profile bytes.
        status, ctype, body = qc.http(self.base, "/api/v1/query",
                                      {"query": CPU_SAMPLES, "start": qc.ms(T0), "end": qc.ms(END),
                                       "report": "pprof"}, tenant="team-a")
        self.assertEqual(status, 200)
        self.assertEqual(pprof_stacks(body)[1], stacks)
        # Non-delta: bytes summed per stack.
        r = self.query(merge_req(MEM_SPACE, T0, END, report=qpb.QueryRequest.REPORT_TYPE_PPROF))
        p, stacks = pprof_stacks(r.pprof)
        self.assertEqual(stacks, {M1: 4096 + 6144 + 2048 + 10240, M2: 1000 + 4000 + 10000})
        self.assertEqual([(p.string_table[t.type], p.string_table[t.unit]) for t in p.sample_type],
                         [("inuse_space", "bytes")])

    def test_merge_json_flamegraph(self):
        j = qc.http_json(self.base, "/api/v1/query",
                         {"query": CPU_SAMPLES + '{job="api"}', "start": qc.ms(T0), "end": qc.ms(END),
                          "report": "flamegraph"}, tenant="team-a")
        tree = qc.build_tree(qc.merge_stacks(qc.select(CPU_SAMPLES, lambda l: l["job"] == "api")))
        fb = j["flamegraph"]
        self.assertEqual(fb["metadata"]["format"], "single")
        self.assertEqual(fb["metadata"]["units"], "nanoseconds")
        self.assertEqual(fb["flamebearer"]["names"][0], "total")
        self.assertEqual(fb["flamebearer"]["numTicks"], 670_000_000)
        self.assertEqual(fb["flamebearer"]["maxSelf"], 350_000_000)
        self.assertEqual(levels_abs(fb["flamebearer"]["levels"], fb["flamebearer"]["names"], 4),
                         qc.flamebearer_levels(tree))
        self.assertEqual((j["total"], j["profiles"], j["diff"]), (670_000_000, 6, False))

    # ---- single ----

    def test_single(self):
        r = self.query(single_req(CPU_SAMPLES + '{pod="api-1"}', T0 + 10 * NS))
        self.assertEqual(r.total, 24 * PERIOD)
        want, _ = qc.tree_shape(qc.build_tree({k: v * PERIOD for k, v in {A: 20, C: 3, T: 1}.items()}))
        self.assertEqual(flamegraph_shape(r.flamegraph), want)
        # Every series at that exact timestamp: api-1 and worker-1.
        r = self.query(single_req(CPU_SAMPLES, T0 + 10 * NS, qpb.QueryRequest.REPORT_TYPE_TOP))
        self.assertEqual(r.total, (24 + 50) * PERIOD)
        self.assertEqual(r.top.list[0].meta.function.name, "worker.step")
        # Millisecond precision: 0.4 ms later is the same millisecond, 1 ms later is not.
        r = self.query(single_req(CPU_SAMPLES + '{pod="api-1"}', T0 + 10 * NS + 400_000))
        self.assertEqual(r.total, 24 * PERIOD)
        self.assert_code(lambda: self.query(single_req(CPU_SAMPLES + '{pod="api-1"}', T0 + 10 * NS + 1_000_000)),
                         grpc.StatusCode.NOT_FOUND)
        # JSON
        j = qc.http_json(self.base, "/api/v1/query",
                         {"query": MEM_SPACE, "mode": "single", "time": qc.ms(T0 + 65 * NS), "report": "top"},
                         tenant="team-a")
        self.assertEqual(j["total"], 6048)
        self.assertEqual([(x["name"], x["flat"]) for x in j["table"]["rows"]][:2],
                         [("app.cache", 4000), ("bytes.makeSlice", 2048)])

    # ---- diff ----

    def diff_expectation(self, absolute):
        a = qc.merge_stacks(qc.select(CPU_SAMPLES, lambda l: l["pod"] == "api-1", T0, T0 + 59 * NS))
        b = qc.merge_stacks(qc.select(CPU_SAMPLES, lambda l: l["pod"] == "api-2"))
        return qc.diff_stacks(a, b, absolute)

    def diff_request(self, absolute=None, report=qpb.QueryRequest.REPORT_TYPE_FLAMEGRAPH_TABLE):
        return diff_req(diff_side(CPU_SAMPLES + '{pod="api-1"}', T0, T0 + 59 * NS),
                        diff_side(CPU_SAMPLES + '{pod="api-2"}', T0, END), absolute, report)

    def test_diff_relative(self):
        a, b = self.diff_expectation(False)
        # A = 46 samples, B = 11: B (smaller) is scaled by 46/11.
        self.assertEqual(sum(a.values()), 460_000_000)
        self.assertEqual(b, {A: 41_818_182, B: 83_636_364, D: 334_545_455})
        for absolute in (None, False):
            r = self.query(self.diff_request(absolute))
            want, _ = qc.tree_shape(qc.build_tree(b, a), diff=True)
            self.assertEqual(flamegraph_shape(r.flamegraph), want)
        fg = r.flamegraph
        self.assertEqual((fg.root.cumulative, fg.root.diff), (460_000_001, 1))
        main = fg.root.children[0]
        got = {c.meta.function.name: (c.cumulative, c.diff) for c in main.children}
        self.assertEqual(got, {"app.encode": (334_545_455, 334_545_455),      # new in B: grew
                               "app.handle": (125_454_546, -324_545_454),     # shrank
                               "app.tiny": (0, -10_000_000)})                 # only in A
        r = self.query(self.diff_request(None, qpb.QueryRequest.REPORT_TYPE_TOP))
        got = [(n.meta.function.name, n.flat, n.cumulative, n.diff) for n in r.top.list]
        self.assertEqual(got, qc.top_rows(b, a))
        r = self.query(self.diff_request(None, qpb.QueryRequest.REPORT_TYPE_PPROF))
        self.assertEqual(pprof_stacks(r.pprof)[1], b)

    def test_diff_absolute(self):
        a, b = self.diff_expectation(True)
        r = self.query(self.diff_request(True))
        want, _ = qc.tree_shape(qc.build_tree(b, a), diff=True)
        self.assertEqual(flamegraph_shape(r.flamegraph), want)
        self.assertEqual((r.flamegraph.root.cumulative, r.flamegraph.root.diff), (110_000_000, -350_000_000))
        parse = r.flamegraph.root.children[0].children[1].children[1]
        self.assertEqual((parse.meta.function.name, parse.cumulative, parse.diff),
                         ("app.parse", 10_000_000, -290_000_000))

    def test_diff_single_sides(self):
        # Diff of two single profiles of the same series: S1@0 (A10 B5) vs S1@10 (A20 C3 T1).
        r = self.query(diff_req(diff_side(CPU_SAMPLES + '{pod="api-1"}', time=T0),
                                diff_side(CPU_SAMPLES + '{pod="api-1"}', time=T0 + 10 * NS), True,
                                qpb.QueryRequest.REPORT_TYPE_TOP))
        got = {n.meta.function.name: (n.flat, n.cumulative, n.diff) for n in r.top.list}
        self.assertEqual(got["app.parse"], (20 * PERIOD, 20 * PERIOD, 10 * PERIOD))
        self.assertEqual(got["app.encode"], (0, 0, -5 * PERIOD))
        self.assertEqual(got["app.tiny"], (PERIOD, PERIOD, PERIOD))

    def test_diff_json(self):
        a, b = self.diff_expectation(False)
        params = {"query_a": CPU_SAMPLES + '{pod="api-1"}', "start_a": qc.ms(T0), "end_a": qc.ms(T0 + 59 * NS),
                  "query_b": CPU_SAMPLES + '{pod="api-2"}', "start_b": qc.ms(T0), "end_b": qc.ms(END),
                  "report": "both"}
        j = qc.http_json(self.base, "/api/v1/diff", params, tenant="team-a")
        self.assertTrue(j["diff"])
        self.assertEqual((j["total"], j["total_base"]), (460_000_001, 460_000_000))
        fb = j["flamegraph"]
        self.assertEqual(fb["metadata"]["format"], "double")
        self.assertEqual((fb["leftTicks"], fb["rightTicks"]), (460_000_000, 460_000_001))
        tree = qc.build_tree(b, a)
        names = fb["flamebearer"]["names"]
        levels = fb["flamebearer"]["levels"]
        left = [[(x, t, s, n) for (x, t, s, n) in row] for row in levels_abs(
            [[v for i in range(0, len(lv), 7) for v in lv[i:i + 3] + lv[i + 6:i + 7]] for lv in levels], names, 4)]
        right = levels_abs([[v for i in range(0, len(lv), 7) for v in lv[i + 3:i + 7]] for lv in levels], names, 4)
        # Each side's positions as in its own tree (nodes present on one side only have total 0).
        self.assertEqual([[e for e in row if e[1] or e[2]] for row in left],
                         [[e for e in row if e[1] or e[2]] for row in qc.flamebearer_levels(tree, "a")])
        self.assertEqual([[e for e in row if e[1] or e[2]] for row in right],
                         [[e for e in row if e[1] or e[2]] for row in qc.flamebearer_levels(tree, "b")])
        rows = {x["name"]: x for x in j["table"]["rows"]}
        self.assertEqual((rows["app.encode"]["cumulative"], rows["app.encode"]["cumulative_diff"]),
                         (83_636_364 + 334_545_455, 83_636_364 + 334_545_455 - 120_000_000))
        self.assertEqual(rows["app.tiny"]["cumulative_diff"], -10_000_000)
        self.assertLess(rows["app.parse"]["flat_diff"], 0)
        # Absolute.
        params["absolute"] = "true"
        j = qc.http_json(self.base, "/api/v1/diff", params, tenant="team-a")
        self.assertEqual((j["total"], j["total_base"]), (110_000_000, 460_000_000))
        self.assertEqual(j["flamegraph"]["rightTicks"], 110_000_000)

    # ---- errors and tenancy ----

    def test_not_found(self):
        for req in (merge_req(CPU_SAMPLES + '{job="nope"}', T0, END),
                    merge_req(CPU_SAMPLES, T0 + 1000 * NS, T0 + 2000 * NS),
                    merge_req("goroutine:goroutine:count:goroutine:count", T0, END),
                    single_req(CPU_SAMPLES, T0 + 5 * NS)):
            self.assert_code(lambda: self.query(req), grpc.StatusCode.NOT_FOUND)
        status, _, body = qc.http(self.base, "/api/v1/query", {"query": CPU_SAMPLES + '{job="nope"}',
                                                               "start": qc.ms(T0), "end": qc.ms(END)},
                                  tenant="team-a", accept="application/json")
        self.assertEqual(status, 404, body)
        self.assertIn("no profiles", json.loads(body)["message"])

    def test_invalid_arguments(self):
        IA = grpc.StatusCode.INVALID_ARGUMENT
        cases = [
            (merge_req(CPU_SAMPLES + '{job=}', T0, END), "invalid query"),
            (merge_req(CPU_SAMPLES + '{job="api"', T0, END), "invalid query"),
            (merge_req('{job="api"}', T0, END), "profile type"),
            (merge_req("a:b:c", T0, END), "invalid query"),
            (merge_req(CPU_SAMPLES, END, T0), "before"),
            (qpb.QueryRequest(mode=qpb.QueryRequest.MODE_MERGE), "merge"),
            (diff_req(diff_side(CPU_SAMPLES + '{job=~"("}', T0, END), diff_side(CPU_SAMPLES, T0, END)), "invalid regular expression"),
        ]
        for req, needle in cases:
            self.assert_code(lambda: self.query(req), IA, needle)
        for trim in (-1.0, float("nan")):
            self.assert_code(lambda: self.query(merge_req(CPU_SAMPLES, T0, END, trim=trim)), IA,
                             "node_trim_threshold")
        self.assert_code(lambda: self.query(merge_req(CPU_SAMPLES, T0, END,
                                                      report=qpb.QueryRequest.REPORT_TYPE_SOURCE)),
                         IA, "source_reference")
        self.assert_code(lambda: self.range(CPU_SAMPLES, END, T0, 60 * NS), IA, "before")
        self.assert_code(lambda: self.range(CPU_SAMPLES + "{", T0, END, 60 * NS), IA, "invalid query")
        self.assert_code(lambda: self.range('{job="api"}', T0, END, 60 * NS), IA, "profile type")
        self.assert_code(lambda: self.q.QueryRange(qpb.QueryRangeRequest(query=CPU_SAMPLES), metadata=TENANT,
                                                   timeout=10), IA, "required")
        # JSON: 400 with a readable message.
        bad = [
            ("/api/v1/query", {"query": CPU_SAMPLES + '{job=}', "start": qc.ms(T0), "end": qc.ms(END)}, "invalid query"),
            ("/api/v1/query", {"query": CPU_SAMPLES, "start": "yesterday", "end": qc.ms(END)}, "start"),
            ("/api/v1/query", {"query": CPU_SAMPLES, "start": qc.ms(END), "end": qc.ms(T0)}, "before"),
            ("/api/v1/query", {"query": CPU_SAMPLES, "report": "svg"}, "report"),
            ("/api/v1/query", {"start": qc.ms(T0)}, "query is required"),
            ("/api/v1/query", {"query": CPU_SAMPLES, "mode": "single"}, "time is required"),
            ("/api/v1/query_range", {"query": CPU_SAMPLES, "start": qc.ms(T0), "end": qc.ms(END), "step": "fast"}, "step"),
            ("/api/v1/query_range", {"query": "{", "start": qc.ms(T0), "end": qc.ms(END)}, "invalid query"),
            ("/api/v1/diff", {"query_b": CPU_SAMPLES}, "query_a is required"),
            ("/api/v1/labels", {"start": "yesterday"}, "start"),
            ("/api/v1/labels/bad-name/values", {}, "is not a valid label name"),
            ("/api/v1/query_range", {"query": CPU_SAMPLES, "start": qc.ms(END), "end": qc.ms(T0)}, "end not before start"),
            ("/api/v1/query", {"query": CPU_SAMPLES, "start": qc.ms(T0), "end": qc.ms(END),
                               "node_trim_threshold": "-1"}, "node_trim_threshold"),
        ]
        for path, params, needle in bad:
            status, ctype, body = qc.http(self.base, path, params, tenant="team-a", accept="application/json")
            self.assertEqual(status, 400, (path, params, body))
            self.assertIn("application/json", ctype)
            self.assertIn(needle, json.loads(body)["message"], (path, params))

    # Errors are JSON {"code", "message"} whatever the client accepts (curl sends Accept: */*).
    def test_json_error_shape_as_documented(self):
        status, ctype, body = qc.http(self.base, "/api/v1/query", {"query": "{", "start": qc.ms(T0)},
                                      tenant="team-a")
        self.assertEqual(status, 400)
        err = json.loads(body)
        self.assertIn("invalid query", err["message"])
        self.assertEqual(err["code"], "INVALID_ARGUMENT")

    def test_tenancy(self):
        for tenant in ([("x-scope-orgid", "team-b")], ()):
            r = self.q.ProfileTypes(qpb.ProfileTypesRequest(), metadata=tenant, timeout=10)
            self.assertEqual(list(r.types), [])
            r = self.q.Labels(qpb.LabelsRequest(), metadata=tenant, timeout=10)
            self.assertEqual(list(r.label_names), [])
            r = self.q.Values(qpb.ValuesRequest(label_name="pod"), metadata=tenant, timeout=10)
            self.assertEqual(list(r.label_values), [])
            self.assert_code(lambda: self.query(merge_req(CPU_SAMPLES, T0, END), tenant),
                             grpc.StatusCode.NOT_FOUND)
        for tenant in ("team-b", None):
            j = qc.http_json(self.base, "/api/v1/profile_types", tenant=tenant)
            self.assertEqual(j["types"], [])
            status, _, _ = qc.http(self.base, "/api/v1/query", {"query": CPU_SAMPLES, "start": qc.ms(T0),
                                                                "end": qc.ms(END)}, tenant=tenant)
            self.assertEqual(status, 404)
        # team-a still sees its data through both front ends.
        self.assertEqual(self.query(merge_req(CPU_SAMPLES, T0, END)).total, 1_520_000_000)
        j = qc.http_json(self.base, "/api/v1/query", {"query": CPU_SAMPLES, "start": qc.ms(T0),
                                                      "end": qc.ms(END), "report": "top"}, tenant="team-a")
        self.assertEqual(j["total"], 1_520_000_000)


if __name__ == "__main__":
    unittest.main(verbosity=2)
