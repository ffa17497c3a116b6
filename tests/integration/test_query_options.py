#!/usr/bin/python3
"""Parca's query options beyond the merge (issue 19 item 3): stack and frame filters (criteria
and the deprecated forms), invert_call_stack and sandwich_by_function, over gRPC on `strata all`,
checked on TOP reports (flat and cumulative per function) and QueryResponse.total / filtered;
the CALLGRAPH and PROFILE_METADATA reports (issue 19 item 2); and the flame chart (FLAMECHART,
and FLAMEGRAPH_ARROW with group_by timestamp), decoded with npm's apache-arrow.

Data: main;app.handle;app.parse x7 and main;app.handle;app.encode x5 (cpu, one process). For the
chart, tenant "chart": 10 s profiles at t (main;work x5, main;idle x1), t + 10 s (main;work x3) and
t + 30 s (main;work x2), so main runs on through the first two and starts again after a gap.
"""
import os
import sys
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_testlib as lib  # noqa: E402
import test_query_common as qc  # noqa: E402

import grpc  # noqa: E402
from google.protobuf import timestamp_pb2  # noqa: E402
from parca.profilestore.v1alpha1 import profilestore_pb2_grpc as ps_grpc  # noqa: E402
from parca.query.v1alpha1 import query_pb2 as qpb  # noqa: E402
from parca.query.v1alpha1 import query_pb2_grpc as q_grpc  # noqa: E402

TENANT = [("x-scope-orgid", "options")]
CHART = [("x-scope-orgid", "chart")]
P = qc.PERIOD


def ts(ns):
    t = timestamp_pb2.Timestamp()
    t.seconds, t.nanos = divmod(ns, 10**9)
    return t


def criteria(**conds):
    c = qpb.FilterCriteria()
    for field, (op, value) in conds.items():
        getattr(c, field).CopyFrom(qpb.StringCondition(**{op: value}))
    return c


class QueryOptionsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.local = lib.LocalStrata("query-options")
        cls.http, cls.channel = cls.local.http, cls.local.channel
        cls.query = q_grpc.QueryServiceStub(cls.channel)
        cls.t_ns = 1767225600 * 10**9
        b = qc.PprofBuilder([("samples", "count"), ("cpu", "nanoseconds")], ("cpu", "nanoseconds"),
                            P, cls.t_ns, qc.DURATION)
        b.sample(qc.A, [7, 7 * P])
        b.sample(qc.B, [5, 5 * P])
        ps_grpc.ProfileStoreServiceStub(cls.channel).WriteRaw(
            qc.write_request([({"__name__": "process_cpu", "job": "o"}, [b.bytes()])]),
            metadata=TENANT, timeout=30)
        for dt, stacks in ((0, {("main", "work"): 5, ("main", "idle"): 1}),
                           (10, {("main", "work"): 3}), (30, {("main", "work"): 2})):
            b = qc.PprofBuilder([("samples", "count"), ("cpu", "nanoseconds")],
                                ("cpu", "nanoseconds"), P, cls.t_ns + dt * 10**9, qc.DURATION)
            for stack, n in stacks.items():
                b.sample(stack, [n, n * P])
            ps_grpc.ProfileStoreServiceStub(cls.channel).WriteRaw(
                qc.write_request([({"__name__": "process_cpu", "job": "c"}, [b.bytes()])]),
                metadata=CHART, timeout=30)

    @classmethod
    def tearDownClass(cls):
        cls.local.close()

    def merge(self, report, **options):
        return self.query.Query(qpb.QueryRequest(
            mode=qpb.QueryRequest.MODE_MERGE, report_type=report,
            merge=qpb.MergeProfile(query=qc.CPU_SAMPLES + "{}", start=ts(self.t_ns - 10**9),
                                   end=ts(self.t_ns + 10**9)), **options),
            metadata=TENANT, timeout=60)

    def chart(self, report, group_by=None):
        r = self.query.Query(qpb.QueryRequest(
            mode=qpb.QueryRequest.MODE_MERGE, report_type=report,
            group_by=qpb.GroupBy(fields=group_by) if group_by is not None else None,
            merge=qpb.MergeProfile(query=qc.CPU_SAMPLES + "{}", start=ts(self.t_ns - 10**9),
                                   end=ts(self.t_ns + 40 * 10**9))),
            metadata=CHART, timeout=60)
        return r, lib.arrow_rows([r.flamegraph_arrow.record])[0]

    def test_flamechart(self):
        t = self.t_ns
        want = [("", 0, 0, 11, [1, 4]), ("main", t, 0, 9, [2, 3]), ("idle", t, 0, 1, []),
                ("work", t, 1, 8, []), ("main", t + 30 * 10**9, 9, 2, [5]),
                ("work", t + 30 * 10**9, 9, 2, [])]
        for report, group_by in ((qpb.QueryRequest.REPORT_TYPE_FLAMECHART, None),
                                 (qpb.QueryRequest.REPORT_TYPE_FLAMECHART, ["function_name"]),
                                 (qpb.QueryRequest.REPORT_TYPE_FLAMEGRAPH_ARROW, ["timestamp"])):
            r, arrow = self.chart(report, group_by)
            rows = [(row["function_name"], int(row["timestamp"]),
                     int(row["value_offset"]) // P, int(row["cumulative"]) // P,
                     list(row["children"])) for row in arrow["rows"]]
            self.assertEqual(rows, want, (report, group_by))
            self.assertEqual(r.total, 11 * P)
            self.assertEqual(r.flamegraph_arrow.height, 2)
            self.assertEqual([int(row["depth"]) for row in arrow["rows"]], [0, 1, 2, 2, 1, 2])
        # Trimming drops the chart's small rows (idle: 1 of main's 9 is under 20 %).
        r = self.query.Query(qpb.QueryRequest(
            mode=qpb.QueryRequest.MODE_MERGE, report_type=qpb.QueryRequest.REPORT_TYPE_FLAMECHART,
            node_trim_threshold=20.0,
            merge=qpb.MergeProfile(query=qc.CPU_SAMPLES + "{}", start=ts(self.t_ns - 10**9),
                                   end=ts(self.t_ns + 40 * 10**9))), metadata=CHART, timeout=60)
        names = [row["function_name"] for row in lib.arrow_rows([r.flamegraph_arrow.record])[0]["rows"]]
        self.assertEqual(names, ["", "main", "work"])  # main after the gap is 2 of 11: trimmed
        self.assertEqual(r.flamegraph_arrow.trimmed, 3 * P)
        # Without timestamp the Arrow flame graph merges over time as before.
        _, arrow = self.chart(qpb.QueryRequest.REPORT_TYPE_FLAMEGRAPH_ARROW)
        rows = [(row["function_name"], int(row["timestamp"]), int(row["cumulative"]) // P)
                for row in arrow["rows"]]
        self.assertEqual(rows, [("", 0, 11), ("main", 0, 11), ("idle", 0, 1), ("work", 0, 10)])
        # Reports that are not laid out in time ignore the field (as Parca's do).
        top = self.query.Query(qpb.QueryRequest(
            mode=qpb.QueryRequest.MODE_MERGE, report_type=qpb.QueryRequest.REPORT_TYPE_TOP,
            group_by=qpb.GroupBy(fields=["timestamp"]),
            merge=qpb.MergeProfile(query=qc.CPU_SAMPLES + "{}", start=ts(self.t_ns - 10**9),
                                   end=ts(self.t_ns + 40 * 10**9))), metadata=CHART, timeout=60)
        self.assertEqual({n.meta.function.name: n.flat // P for n in top.top.list},
                         {"work": 10, "idle": 1, "main": 0})

    def test_share_profile(self):
        """ShareProfile keeps the query's pprof and links to it on the HTTP port (Parca would hand
        it to pprof.me): the link serves what REPORT_TYPE_PPROF answers, to its tenant only."""
        req = qpb.QueryRequest(
            mode=qpb.QueryRequest.MODE_MERGE, report_type=qpb.QueryRequest.REPORT_TYPE_FLAMEGRAPH_TABLE,
            merge=qpb.MergeProfile(query=qc.CPU_SAMPLES + "{}", start=ts(self.t_ns - 10**9),
                                   end=ts(self.t_ns + 10**9)))
        r = self.query.ShareProfile(qpb.ShareProfileRequest(query_request=req,
                                                            description="slow parse"),
                                    metadata=TENANT, timeout=60)
        prefix = self.http + "/api/v1/shared/"
        self.assertTrue(r.link.startswith(prefix), r.link)
        self.assertRegex(r.link[len(prefix):], r"^[0-9a-f]{32}$")
        get = urllib.request.Request(r.link, headers={"X-Scope-OrgID": "options"})
        with urllib.request.urlopen(get, timeout=30) as answer:
            self.assertEqual(answer.headers["Content-Type"], "application/octet-stream")
            shared = answer.read()
        req.report_type = qpb.QueryRequest.REPORT_TYPE_PPROF
        direct = self.query.Query(req, metadata=TENANT, timeout=60).pprof
        got, want = lib.decode_pprof(shared), lib.decode_pprof(direct)
        self.assertEqual(lib.pprof_expectations(got), lib.pprof_expectations(want))
        (kind, totals), = lib.pprof_expectations(got).items()
        self.assertEqual(totals["total"], 12 * P, kind)
        self.assertEqual(totals["functions"], {"main", "app.handle", "app.parse", "app.encode"})
        for headers, code in (({"X-Scope-OrgID": "someone-else"}, 404), ({}, 404)):
            with self.assertRaises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(urllib.request.Request(r.link, headers=headers), timeout=30)
            self.assertEqual(e.exception.code, code)
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(prefix + "not-an-id", timeout=30)
        self.assertEqual(e.exception.code, 400)
        with self.assertRaises(grpc.RpcError) as e:
            self.query.ShareProfile(qpb.ShareProfileRequest(), metadata=TENANT, timeout=60)
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)

    def test_callgraph(self):
        r = self.merge(qpb.QueryRequest.REPORT_TYPE_CALLGRAPH)
        cg = r.callgraph
        names = {n.id: n.meta.function.name for n in cg.nodes}
        nodes = {n.meta.function.name: (n.flat // P, n.cumulative // P) for n in cg.nodes}
        self.assertEqual(nodes, {"app.parse": (7, 7), "app.encode": (5, 5), "main": (0, 12),
                                 "app.handle": (0, 12)})
        edges = {(names[e.source], names[e.target]): e.cumulative // P for e in cg.edges}
        self.assertEqual(edges, {("main", "app.handle"): 12, ("app.handle", "app.parse"): 7,
                                 ("app.handle", "app.encode"): 5})
        self.assertEqual(cg.cumulative // P, 12)

    def test_profile_metadata(self):
        r = self.merge(qpb.QueryRequest.REPORT_TYPE_PROFILE_METADATA)
        self.assertIn("job", list(r.profile_metadata.labels))
        self.assertEqual(list(r.profile_metadata.mapping_files), ["/usr/bin/app"])

    def top(self, **options):
        """({function: (flat, cumulative)}, total, filtered) of a merge with options."""
        r = self.query.Query(qpb.QueryRequest(
            mode=qpb.QueryRequest.MODE_MERGE, report_type=qpb.QueryRequest.REPORT_TYPE_TOP,
            merge=qpb.MergeProfile(query=qc.CPU_SAMPLES + "{}", start=ts(self.t_ns - 10**9),
                                   end=ts(self.t_ns + 10**9)), **options),
            metadata=TENANT, timeout=60)
        rows = {n.meta.function.name: (n.flat // P, n.cumulative // P) for n in r.top.list}
        return rows, r.total // P, r.filtered // P

    def test_plain(self):
        rows, total, filtered = self.top()
        self.assertEqual(rows, {"app.parse": (7, 7), "app.encode": (5, 5), "main": (0, 12),
                                "app.handle": (0, 12)})
        self.assertEqual((total, filtered), (12, 0))

    def test_invert_call_stack(self):
        rows, total, _ = self.top(invert_call_stack=True)
        self.assertEqual(rows["main"], (12, 12))  # every stack now ends in main
        self.assertEqual(rows["app.parse"], (0, 7))
        self.assertEqual(total, 12)

    def test_stack_filters(self):
        keep_parse = qpb.Filter(stack_filter=qpb.StackFilter(
            criteria=criteria(function_name=("contains", "PARSE"))))
        rows, total, filtered = self.top(filter=[keep_parse])
        self.assertEqual(set(rows), {"main", "app.handle", "app.parse"})
        self.assertEqual((total, filtered), (7, 5))
        hide_encode = qpb.Filter(stack_filter=qpb.StackFilter(
            criteria=criteria(function_name=("not_contains", "encode"))))
        self.assertEqual(self.top(filter=[hide_encode])[1:], (7, 5))
        legacy = qpb.Filter(stack_filter=qpb.StackFilter(
            function_name_stack_filter=qpb.FunctionNameStackFilter(function_to_filter="encode",
                                                                   exclude=True)))
        self.assertEqual(self.top(filter=[legacy])[1:], (7, 5))
        none = qpb.Filter(stack_filter=qpb.StackFilter(
            criteria=criteria(function_name=("equal", "nothing.here"))))
        self.assertEqual(self.top(filter=[none]), ({}, 0, 12))

    def test_frame_filter(self):
        hide_handle = qpb.Filter(frame_filter=qpb.FrameFilter(
            criteria=criteria(function_name=("not_equal", "app.handle"))))
        rows, total, filtered = self.top(filter=[hide_handle])
        self.assertNotIn("app.handle", rows)
        self.assertEqual(rows["main"], (0, 12))
        self.assertEqual((total, filtered), (12, 0))

    def test_sandwich(self):
        rows, total, filtered = self.top(sandwich_by_function="app.handle")
        self.assertEqual(rows, {"app.handle": (0, 12), "app.parse": (7, 7),
                                "app.encode": (5, 5)})  # callees: main is cut away
        rows, _, _ = self.top(sandwich_by_function="app.handle", invert_call_stack=True)
        self.assertEqual(rows, {"app.handle": (0, 12), "main": (12, 12)})  # callers
        rows, total, filtered = self.top(sandwich_by_function="app.parse")
        self.assertEqual((total, filtered), (7, 5))


if __name__ == "__main__":
    unittest.main()
