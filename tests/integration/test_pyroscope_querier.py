#!/usr/bin/python3
"""Grafana Pyroscope's query API, querier.v1.QuerierService, on `strata all` over Connect (issue 20
item 3), as Grafana's Pyroscope data source calls it: every method is asked about the shared query
dataset (test_query_common) and answers what the same data gives through Parca's QueryService
(grpcio) and the independent Python model: profile types, label names and values (with
__profile_type__ matchers), label sets, flame graph levels decoded back into stacks, pprof, series
per group_by, diff ticks, profile stats; the JSON codec; refusals with Connect error codes.
"""
import json
import os
import sys
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_testlib as lib  # noqa: E402
import test_query_common as qc  # noqa: E402

from google.protobuf import duration_pb2, timestamp_pb2  # noqa: E402
from parca.profilestore.v1alpha1 import profilestore_pb2_grpc as ps_grpc  # noqa: E402
from parca.query.v1alpha1 import query_pb2 as qpb  # noqa: E402
from parca.query.v1alpha1 import query_pb2_grpc as q_grpc  # noqa: E402
from perftools.profiles import profile_pb2  # noqa: E402
from querier.v1 import querier_pb2 as pq  # noqa: E402

TENANT = "grafana"
MD = [("x-scope-orgid", TENANT)]
MS = 1000
START_MS = qc.T0_S * MS - 60 * MS
END_MS = qc.T0_S * MS + 600 * MS


def five(type_text):
    return ":".join(type_text.split(":")[:5])


CPU_ID = five(qc.CPU_NANOS)
SAMPLES_ID = five(qc.CPU_SAMPLES)
SPACE_ID = five(qc.MEM_SPACE)


def ts(s):
    t = timestamp_pb2.Timestamp()
    t.seconds = s
    return t


def flamegraph_stacks(fg):
    """{root-first names: self} from Pyroscope's levels ([x offset, total, self, name] per node,
    x relative to the end of the previous node of the level); checks that every node lies inside a
    node of the level above and that totals add up."""
    levels = []
    for level in fg.levels:
        v = list(level.values)
        nodes, end = [], 0
        for i in range(0, len(v), 4):
            x = end + v[i]
            nodes.append({"x": x, "total": v[i + 1], "self": v[i + 2], "name": fg.names[v[i + 3]]})
            end = x + v[i + 1]
        levels.append(nodes)
    assert levels[0][0]["name"] == "total" and levels[0][0]["total"] == fg.total
    levels[0][0]["path"] = ()
    out = {}
    for d in range(1, len(levels)):
        for n in levels[d]:
            parents = [p for p in levels[d - 1]
                       if p["x"] <= n["x"] and n["x"] + n["total"] <= p["x"] + p["total"]]
            assert len(parents) == 1, (d, n)
            n["path"] = parents[0]["path"] + (n["name"],)
            if n["self"]:
                out[n["path"]] = out.get(n["path"], 0) + n["self"]
    return out


class PyroscopeQuerierTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.local = lib.LocalStrata("pyroscope-querier")
        store = ps_grpc.ProfileStoreServiceStub(cls.local.channel)
        for req in qc.dataset_requests():
            store.WriteRaw(req, metadata=MD, timeout=60)
        cls.parca = q_grpc.QueryServiceStub(cls.local.channel)

    @classmethod
    def tearDownClass(cls):
        cls.local.close()

    def call(self, method, request, response_type, tenant=TENANT):
        """A Connect unary call with the binary codec, as Grafana's data source makes it."""
        req = urllib.request.Request(
            self.local.http + "/querier.v1.QuerierService/" + method,
            data=request.SerializeToString(),
            headers={"Content-Type": "application/proto", "X-Scope-OrgID": tenant})
        with urllib.request.urlopen(req, timeout=60) as r:
            self.assertEqual(r.headers["Content-Type"], "application/proto")
            out = response_type()
            out.ParseFromString(r.read())
            return out

    def call_json(self, method, body):
        req = urllib.request.Request(
            self.local.http + "/querier.v1.QuerierService/" + method,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "X-Scope-OrgID": TENANT})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def parca_top(self, query):
        r = self.parca.Query(qpb.QueryRequest(
            mode=qpb.QueryRequest.MODE_MERGE, report_type=qpb.QueryRequest.REPORT_TYPE_TOP,
            merge=qpb.MergeProfile(query=query, start=ts(START_MS // MS), end=ts(END_MS // MS))),
            metadata=MD, timeout=60)
        return r.total, {n.meta.function.name: n.flat for n in r.top.list}

    def merge_request(self, type_id, selector, **kw):
        return pq.SelectMergeStacktracesRequest(profile_typeID=type_id, label_selector=selector,
                                                start=START_MS, end=END_MS, **kw)

    def test_profile_types(self):
        r = self.call("ProfileTypes", pq.ProfileTypesRequest(start=START_MS, end=END_MS),
                      pq.ProfileTypesResponse)
        parca = self.parca.ProfileTypes(qpb.ProfileTypesRequest(), metadata=MD, timeout=60)
        want = sorted({":".join([t.name, t.sample_type, t.sample_unit, t.period_type,
                                 t.period_unit]) for t in parca.types})
        self.assertEqual(sorted(t.ID for t in r.profile_types), want)
        cpu = [t for t in r.profile_types if t.ID == CPU_ID][0]
        self.assertEqual((cpu.name, cpu.sample_type, cpu.sample_unit, cpu.period_type,
                          cpu.period_unit), ("process_cpu", "cpu", "nanoseconds", "cpu",
                                             "nanoseconds"))

    def test_label_names_and_values(self):
        names = self.call("LabelNames", pq.LabelNamesRequest(start=START_MS, end=END_MS),
                          pq.LabelNamesResponse).names
        parca = self.parca.Labels(qpb.LabelsRequest(), metadata=MD, timeout=60).label_names
        self.assertEqual(list(names), sorted(set(parca) | {"__name__", "__profile_type__"}))
        # a __profile_type__ matcher restricts to that type's series: only worker has queue
        r = self.call("LabelNames", pq.LabelNamesRequest(
            matchers=[f'{{__profile_type__="{SPACE_ID}"}}']), pq.LabelNamesResponse)
        self.assertNotIn("queue", r.names)
        self.assertIn("queue", names)
        values = self.call("LabelValues", pq.LabelValuesRequest(name="pod"),
                           pq.LabelValuesResponse).names
        self.assertEqual(list(values), ["api-1", "api-2", "worker-1"])
        values = self.call("LabelValues", pq.LabelValuesRequest(
            name="pod", matchers=['{job="api"}']), pq.LabelValuesResponse).names
        self.assertEqual(list(values), ["api-1", "api-2"])
        types = self.call("LabelValues", pq.LabelValuesRequest(name="__profile_type__"),
                          pq.LabelValuesResponse).names
        self.assertEqual(sorted(types), sorted({CPU_ID, SAMPLES_ID, SPACE_ID,
                                                five(qc.MEM_OBJECTS)}))
        self.assertEqual(list(self.call("LabelValues", pq.LabelValuesRequest(name="__name__"),
                                        pq.LabelValuesResponse).names), ["memory", "process_cpu"])

    def test_series(self):
        r = self.call("Series", pq.SeriesRequest(
            matchers=[f'{{__profile_type__="{CPU_ID}"}}'], label_names=["pod", "__profile_type__"],
            start=START_MS, end=END_MS), pq.SeriesResponse)
        sets = [{p.name: p.value for p in ls.labels} for ls in r.labels_set]
        self.assertEqual(sets, [{"__profile_type__": CPU_ID, "pod": p}
                                for p in ("api-1", "api-2", "worker-1")])
        r = self.call("Series", pq.SeriesRequest(matchers=['{job="worker"}'], start=START_MS,
                                                 end=END_MS), pq.SeriesResponse)
        sets = [{p.name: p.value for p in ls.labels} for ls in r.labels_set]
        self.assertEqual(len(sets), 2)  # one series, its two (CPU) profile types
        self.assertIn({**qc.S3, "__name__": "process_cpu", "__profile_type__": CPU_ID}, sets)

    def test_select_merge_stacktraces(self):
        r = self.call("SelectMergeStacktraces", self.merge_request(CPU_ID, '{job="api"}'),
                      pq.SelectMergeStacktracesResponse)
        want = qc.merge_stacks(qc.select(qc.CPU_NANOS, lambda ls: ls["job"] == "api"))
        self.assertEqual(flamegraph_stacks(r.flamegraph), want)
        self.assertEqual(r.flamegraph.total, sum(want.values()))
        self.assertEqual(r.flamegraph.max_self, max(want.values()))
        total, _ = self.parca_top(qc.CPU_NANOS + '{job="api"}')
        self.assertEqual(r.flamegraph.total, total)
        # samples:count types come in the period's unit, as Parca shows them
        r = self.call("SelectMergeStacktraces", self.merge_request(SAMPLES_ID, "{}"),
                      pq.SelectMergeStacktracesResponse)
        self.assertEqual(flamegraph_stacks(r.flamegraph),
                         qc.merge_stacks(qc.select(qc.CPU_SAMPLES)))
        # max_nodes keeps the biggest nodes
        r = self.call("SelectMergeStacktraces", self.merge_request(CPU_ID, "{}", max_nodes=3),
                      pq.SelectMergeStacktracesResponse)
        self.assertLessEqual(sum(len(level.values) // 4 for level in r.flamegraph.levels), 4)
        # an unknown type or no matching data: an empty flame graph, not an error
        r = self.call("SelectMergeStacktraces", self.merge_request(
            "nothing:a:b:c:d", "{}"), pq.SelectMergeStacktracesResponse)
        self.assertEqual((list(r.flamegraph.names), r.flamegraph.total), (["total"], 0))
        r = self.call("SelectMergeStacktraces", self.merge_request(
            CPU_ID, '{job="nope"}'), pq.SelectMergeStacktracesResponse)
        self.assertEqual(r.flamegraph.total, 0)

    def test_select_merge_profile(self):
        p = self.call("SelectMergeProfile", pq.SelectMergeProfileRequest(
            profile_typeID=SPACE_ID, label_selector='{pod="api-1"}', start=START_MS, end=END_MS),
            profile_pb2.Profile)
        strings = p.string_table
        self.assertEqual((strings[p.sample_type[0].type], strings[p.sample_type[0].unit]),
                         ("inuse_space", "bytes"))
        want = qc.merge_stacks(qc.select(qc.MEM_SPACE, lambda ls: ls["pod"] == "api-1"))
        self.assertEqual(sum(s.value[0] for s in p.sample), sum(want.values()))
        total, _ = self.parca_top(qc.MEM_SPACE + '{pod="api-1"}')
        self.assertEqual(sum(s.value[0] for s in p.sample), total)

    def test_select_series(self):
        r = self.call("SelectSeries", pq.SelectSeriesRequest(
            profile_typeID=CPU_ID, label_selector='{job="api"}', start=START_MS, end=END_MS,
            group_by=["pod"], step=60), pq.SelectSeriesResponse)
        got = {s.labels[0].value: {p.timestamp: p.value for p in s.points} for s in r.series}
        parca = self.parca.QueryRange(qpb.QueryRangeRequest(
            query=qc.CPU_NANOS + '{job="api"}', start=ts(START_MS // MS), end=ts(END_MS // MS),
            step=duration_pb2.Duration(seconds=60), sum_by=["pod"]), metadata=MD, timeout=60)
        want = {s.labelset.labels[0].value: {p.timestamp.seconds * MS + p.timestamp.nanos // 10**6:
                                             float(p.value) for p in s.samples}
                for s in parca.series}
        self.assertEqual(got, want)
        self.assertEqual([s.labels[0].value for s in r.series], ["api-1", "api-2"])  # by total
        # no group_by: one series, the sum; a gauge too (memory), and limit 1 keeps the top one
        r = self.call("SelectSeries", pq.SelectSeriesRequest(
            profile_typeID=SPACE_ID, label_selector="{}", start=START_MS, end=END_MS, step=3600),
            pq.SelectSeriesResponse)
        self.assertEqual(len(r.series), 1)
        self.assertEqual(list(r.series[0].labels), [])
        self.assertEqual(sum(p.value for p in r.series[0].points),
                         sum(sum(p.stacks.values()) for p in qc.select(qc.MEM_SPACE)))
        r = self.call("SelectSeries", pq.SelectSeriesRequest(
            profile_typeID=SPACE_ID, label_selector="{}", start=START_MS, end=END_MS, step=3600,
            aggregation=pq.TIME_SERIES_AGGREGATION_TYPE_AVERAGE), pq.SelectSeriesResponse)
        mem = [sum(p.stacks.values()) for p in qc.select(qc.MEM_SPACE)]
        self.assertEqual(sum(p.value for p in r.series[0].points), sum(mem) / len(mem))
        r = self.call("SelectSeries", pq.SelectSeriesRequest(
            profile_typeID=CPU_ID, label_selector="{}", start=START_MS, end=END_MS,
            group_by=["job"], step=3600, limit=1), pq.SelectSeriesResponse)
        self.assertEqual([s.labels[0].value for s in r.series], ["worker"])

    def test_select_merge_span_profile(self):
        """Samples labelled with span_id (as OpenTelemetry's profiling integrations label them)
        merged for the spans asked for, in a tenant of their own."""
        b = qc.PprofBuilder([("samples", "count"), ("cpu", "nanoseconds")],
                            ("cpu", "nanoseconds"), qc.PERIOD, qc.T0, qc.DURATION)
        for stack, n, span in [(qc.A, 3, "a1b2"), (qc.B, 5, "c3d4"), (qc.D, 7, None)]:
            b.sample(stack, [n, n * 1000])
            if span:
                b.p.sample[-1].label.add(key=b.s("span_id"), str=b.s(span))
        ps_grpc.ProfileStoreServiceStub(self.local.channel).WriteRaw(
            qc.write_request([({"__name__": "process_cpu", "service_name": "traced"},
                               [b.bytes()])]), metadata=[("x-scope-orgid", "spans")], timeout=60)

        def spans(ids, selector="{}"):
            r = self.call("SelectMergeSpanProfile", pq.SelectMergeSpanProfileRequest(
                profile_typeID=CPU_ID, label_selector=selector, span_selector=ids,
                start=START_MS, end=END_MS), pq.SelectMergeSpanProfileResponse, tenant="spans")
            return flamegraph_stacks(r.flamegraph)

        self.assertEqual(spans(["a1b2"]), {qc.A: 3000})
        self.assertEqual(spans(["a1b2", "C3D4"], '{service_name="traced"}'),
                         {qc.A: 3000, qc.B: 5000})
        self.assertEqual(spans(["c3d4"], '{service_name="other"}'), {})
        self.assertEqual(spans([]), {})
        with self.assertRaises(urllib.error.HTTPError) as e:
            spans(["not-hex|.*"])
        self.assertEqual(e.exception.code, 400)

    def test_diff(self):
        r = self.call("Diff", pq.DiffRequest(
            left=self.merge_request(CPU_ID, '{pod="api-2"}'),
            right=self.merge_request(CPU_ID, '{pod="api-1"}')), pq.DiffResponse)
        left = sum(qc.merge_stacks(qc.select(qc.CPU_NANOS,
                                             lambda ls: ls["pod"] == "api-2")).values())
        right = sum(qc.merge_stacks(qc.select(qc.CPU_NANOS,
                                              lambda ls: ls["pod"] == "api-1")).values())
        fg = r.flamegraph
        self.assertEqual((fg.leftTicks, fg.rightTicks, fg.total), (left, right, left + right))
        root = list(fg.levels[0].values)
        self.assertEqual(root, [0, left, 0, 0, right, 0, 0])
        self.assertIn("libc.memcpy", fg.names)

    def test_profile_stats(self):
        r = self.call("GetProfileStats", pq.GetProfileStatsRequest(), pq.GetProfileStatsResponse)
        self.assertTrue(r.data_ingested)
        self.assertLessEqual(r.oldest_profile_time, qc.T0_S * MS)
        self.assertGreaterEqual(r.newest_profile_time, (qc.T0_S + 130) * MS)

    def test_grafana_data_source_calls(self):
        """The request shapes Grafana's Pyroscope data source sends (its Go client): the health
        check's ProfileTypes over 1 s to 4 s, LabelNames and LabelValues with the query's
        selector as the one matcher, SelectSeries with a float step and a limit."""
        r = self.call("ProfileTypes", pq.ProfileTypesRequest(start=1000, end=4000),
                      pq.ProfileTypesResponse)
        self.assertEqual(list(r.profile_types), [])  # answered: the data source is healthy
        names = self.call("LabelNames", pq.LabelNamesRequest(
            matchers=['{job="worker"}'], start=START_MS, end=END_MS), pq.LabelNamesResponse).names
        self.assertEqual([n for n in names if not n.startswith("__")],
                         ["instance", "job", "pod", "queue"])
        values = self.call("LabelValues", pq.LabelValuesRequest(
            name="instance", matchers=["{}"], start=START_MS, end=END_MS),
            pq.LabelValuesResponse).names
        self.assertEqual(list(values), ["10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080"])
        r = self.call("SelectSeries", pq.SelectSeriesRequest(
            profile_typeID=CPU_ID, label_selector='{job="api"}', start=START_MS, end=END_MS,
            step=15.0, group_by=[], limit=10), pq.SelectSeriesResponse)
        self.assertEqual(len(r.series), 1)
        want = sum(qc.merge_stacks(qc.select(qc.CPU_NANOS,
                                             lambda ls: ls["job"] == "api")).values())
        self.assertEqual(sum(p.value for p in r.series[0].points), want)
        times = [p.timestamp for p in r.series[0].points]
        self.assertEqual(times, sorted(times))
        self.assertTrue(all(t % 15000 == 0 for t in times), times)

    def test_json_codec(self):
        status, body = self.call_json("SelectMergeStacktraces", {
            "profileTypeID": CPU_ID, "labelSelector": '{pod="worker-1"}',
            "start": str(START_MS), "end": str(END_MS)})
        self.assertEqual(status, 200, body)
        want = sum(qc.merge_stacks(qc.select(qc.CPU_NANOS,
                                             lambda ls: ls["pod"] == "worker-1")).values())
        self.assertEqual(int(body["flamegraph"]["total"]), want)
        self.assertIn("worker.step", body["flamegraph"]["names"])
        status, body = self.call_json("ProfileTypes", {})
        self.assertIn(CPU_ID, [t["ID"] for t in body["profileTypes"]])

    def test_refusals(self):
        status, body = self.call_json("SelectMergeStacktraces", {
            "profileTypeID": CPU_ID, "labelSelector": '{pod=~"("}'})
        self.assertEqual((status, body["code"]), (400, "invalid_argument"))
        status, body = self.call_json("SelectMergeStacktraces", {
            "profileTypeID": "not-a-type", "labelSelector": "{}"})
        self.assertEqual((status, body["code"]), (400, "invalid_argument"))
        self.assertIn("profile_typeID", body["message"])
        status, body = self.call_json("SelectMergeStacktraces", {
            "profileTypeID": CPU_ID, "labelSelector": "{}",
            "stackTraceSelector": {"callSite": [{"name": "main"}]}})
        self.assertEqual((status, body["code"]), (400, "invalid_argument"))
        self.assertIn("stack_trace_selector", body["message"])
        status, body = self.call_json("SelectHeatmap", {})  # not served
        self.assertEqual((status, body["code"]), (501, "unimplemented"))


if __name__ == "__main__":
    unittest.main()
