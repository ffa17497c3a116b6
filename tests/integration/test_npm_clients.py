#!/usr/bin/python3
"""Parca's own client library, npm's @parca/client, and a Connect client against `strata all`: over
@protobuf-ts/grpcweb-transport (fetch, gRPC-Web binary and text) on the HTTP port and over
@protobuf-ts/grpc-transport (@grpc/grpc-js) on the gRPC port (issue 19 item 4, first part).

tests/clients/grpcweb_client.mjs asks every QueryService method: ProfileTypes, Labels, Values,
QueryRange, Query (merge, every report type: flame graph table and Arrow, Arrow table, top, pprof,
call graph, flame chart, source with uploaded sources, profile metadata), Series, ShareProfile,
HasProfileData, a malformed QueryRange and Grafana's QueryRange
(query, start, end and limit, no step); each answer, as the
client decoded it and encoded again, must equal the answer grpcio gets over native gRPC, and the
error the same code and message. Needs `npm ci` in tests/clients (scripts/test.sh runs it).
"""
import base64
import io
import json
import os
import subprocess
import sys
import tarfile
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_testlib as lib  # noqa: E402
import test_query_common as qc  # noqa: E402

import grpc  # noqa: E402
from google.protobuf import timestamp_pb2  # noqa: E402
from parca.debuginfo.v1alpha1 import debuginfo_pb2 as dpb  # noqa: E402
from parca.debuginfo.v1alpha1 import debuginfo_pb2_grpc as d_grpc  # noqa: E402
from parca.profilestore.v1alpha1 import profilestore_pb2_grpc as ps_grpc  # noqa: E402
from parca.query.v1alpha1 import query_pb2 as qpb  # noqa: E402
from parca.query.v1alpha1 import query_pb2_grpc as q_grpc  # noqa: E402

TENANT = "npm"
BUILD = "4e504d6275696c64"
# app.go as uploaded. Each job's profile numbers its functions from the leaf: app.parse (api) and
# app.encode (worker) both sit at line 11, app.handle at 21, main at 31.
APP_GO = "".join(f"// line {i}\n" for i in range(1, 46))
CLIENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients")


def ts(s):
    t = timestamp_pb2.Timestamp()
    t.seconds = s
    return t


class NpmClientsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.local = lib.LocalStrata("npm-clients")
        cls.http, cls.channel = cls.local.http, cls.local.channel
        cls.t_s = 1767225600
        for i, (job, stack, n) in enumerate([("api", qc.A, 7), ("worker", qc.B, 5)]):
            b = qc.PprofBuilder([("samples", "count"), ("cpu", "nanoseconds")],
                                ("cpu", "nanoseconds"), qc.PERIOD, (cls.t_s + i) * 10**9,
                                qc.DURATION, build_id=BUILD)
            b.sample(stack, [n, n * qc.PERIOD])
            ps_grpc.ProfileStoreServiceStub(cls.channel).WriteRaw(
                qc.write_request([({"__name__": "process_cpu", "job": job}, [b.bytes()])]),
                metadata=[("x-scope-orgid", TENANT)], timeout=30)
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w:gz") as tar:
            info = tarfile.TarInfo("app.go")
            info.size = len(APP_GO)
            tar.addfile(info, io.BytesIO(APP_GO.encode()))
        d_grpc.DebuginfoServiceStub(cls.channel).Upload(iter([
            dpb.UploadRequest(info=dpb.UploadInfo(build_id=BUILD, type=dpb.DEBUGINFO_TYPE_SOURCES)),
            dpb.UploadRequest(chunk_data=raw.getvalue())]),
            metadata=[("x-scope-orgid", TENANT)], timeout=30)

    @classmethod
    def tearDownClass(cls):
        cls.local.close()

    def native(self, name, start, end):
        """(response type, answer or RpcError) over grpcio for the client's call `name`."""
        q = q_grpc.QueryServiceStub(self.channel)
        md = [("x-scope-orgid", TENANT)]
        query = qc.CPU_SAMPLES + "{}"
        calls = {
            "ProfileTypes": (qpb.ProfileTypesResponse,
                             lambda: q.ProfileTypes(qpb.ProfileTypesRequest(), metadata=md)),
            "Labels": (qpb.LabelsResponse, lambda: q.Labels(qpb.LabelsRequest(), metadata=md)),
            "Values": (qpb.ValuesResponse,
                       lambda: q.Values(qpb.ValuesRequest(label_name="job"), metadata=md)),
            "QueryRange": (qpb.QueryRangeResponse, lambda: q.QueryRange(qpb.QueryRangeRequest(
                query=query, start=ts(start), end=ts(end), sum_by=["job"]), metadata=md)),
            "HasProfileData": (qpb.HasProfileDataResponse, lambda: q.HasProfileData(
                qpb.HasProfileDataRequest(), metadata=md)),
            "Series": (qpb.SeriesResponse, lambda: q.Series(qpb.SeriesRequest(
                match=[query], start=ts(start), end=ts(end)), metadata=md)),
            "ShareProfile": (qpb.ShareProfileResponse, lambda: q.ShareProfile(
                qpb.ShareProfileRequest(query_request=qpb.QueryRequest(
                    mode=qpb.QueryRequest.MODE_MERGE,
                    report_type=qpb.QueryRequest.REPORT_TYPE_FLAMEGRAPH_TABLE,
                    merge=qpb.MergeProfile(query=query, start=ts(start), end=ts(end))),
                    description="npm"), metadata=md)),
            "QueryRange/bad": (qpb.QueryRangeResponse, lambda: q.QueryRange(qpb.QueryRangeRequest(
                query="not a selector{", start=ts(start), end=ts(end)), metadata=md)),
            "QueryRange/grafana": (qpb.QueryRangeResponse, lambda: q.QueryRange(
                qpb.QueryRangeRequest(query=query, start=ts(start), end=ts(end), limit=1),
                metadata=md)),
        }
        for report in ("FLAMEGRAPH_TABLE", "TOP", "PPROF", "FLAMEGRAPH_ARROW", "TABLE_ARROW",
                       "CALLGRAPH", "FLAMECHART", "PROFILE_METADATA"):
            calls["Query/" + report] = (qpb.QueryResponse, lambda r=report: q.Query(
                qpb.QueryRequest(mode=qpb.QueryRequest.MODE_MERGE,
                                 report_type=qpb.QueryRequest.ReportType.Value("REPORT_TYPE_" + r),
                                 merge=qpb.MergeProfile(query=query, start=ts(start),
                                                        end=ts(end))), metadata=md))
        for name_, only in (("Query/SOURCE", False), ("Query/SOURCE/exists", True)):
            calls[name_] = (qpb.QueryResponse, lambda only=only: q.Query(
                qpb.QueryRequest(mode=qpb.QueryRequest.MODE_MERGE,
                                 report_type=qpb.QueryRequest.REPORT_TYPE_SOURCE,
                                 source_reference=qpb.SourceReference(
                                     build_id=BUILD, filename="app.go", source_only=only),
                                 merge=qpb.MergeProfile(query=query, start=ts(start),
                                                        end=ts(end))), metadata=md))
        response_type, call = calls[name]
        try:
            return response_type, call()
        except grpc.RpcError as e:
            return response_type, e

    def test_parca_client(self):
        start, end = self.t_s - 60, self.t_s + 60
        out = subprocess.run(
            ["node", "--import", "./register.mjs", "grpcweb_client.mjs", self.http,
             self.local.grpc_address, TENANT, str(start), str(end)],
            cwd=CLIENTS, capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        answers = [json.loads(line) for line in out.stdout.splitlines()]
        self.assertEqual(len(answers), 3 * 19, out.stdout)
        _, table = self.native("Query/FLAMEGRAPH_TABLE", start, end)
        _, top = self.native("Query/TOP", start, end)
        _, callgraph = self.native("Query/CALLGRAPH", start, end)
        for a in answers:
            what = f"{a['name']} over {a['format']}"
            response_type, want = self.native(a["name"], start, end)
            if isinstance(want, grpc.RpcError):
                self.assertFalse(a["ok"], what)
                self.assertEqual(a["code"], want.code().name, what)
                self.assertEqual(a["message"], want.details(), what)
                continue
            self.assertTrue(a["ok"], f"{what}: {a}")
            got = response_type.FromString(base64.b64decode(a["b64"]))
            if a["name"] == "ShareProfile":  # a new link each time: same form, both served
                prefix = self.http + "/api/v1/shared/"
                for link in (got.link, want.link):
                    self.assertRegex(link, "^" + prefix + "[0-9a-f]{32}$", what)
                    with urllib.request.urlopen(urllib.request.Request(
                            link, headers={"X-Scope-OrgID": TENANT}), timeout=30) as r:
                        self.assertEqual(r.read()[:2], b"\x1f\x8b", what)  # a gzipped pprof
                continue
            self.assertEqual(got, want, what)
            if a["name"] == "Values":
                self.assertEqual(sorted(got.label_values), ["api", "worker"])
            if a["name"] == "Query/PROFILE_METADATA":
                self.assertEqual(list(got.profile_metadata.mapping_files), ["/usr/bin/app"], what)
                self.assertIn("job", list(got.profile_metadata.labels), what)
            elif a["name"].startswith("Query/") and a["name"] != "Query/SOURCE/exists":
                self.assertEqual(got.total, 12 * qc.PERIOD, what)
            if a["name"] == "Query/FLAMECHART":
                self.check_chart_arrow(a["arrow"], what)
            if a["name"] == "Query/SOURCE":
                self.assertEqual(got.source.source, APP_GO, what)
                self.check_source_arrow(a["arrow"], what)
            if a["name"] == "Query/SOURCE/exists":
                self.assertEqual((got.source.source, got.source.record), ("", b""), what)
            if a["name"] == "Query/FLAMEGRAPH_ARROW":
                self.check_arrow(a["arrow"], table.flamegraph, what)
            if a["name"] == "Query/TABLE_ARROW":
                self.check_table_arrow(a["arrow"], top.top, callgraph.callgraph, what)

    def test_arrow_writer_columns(self):
        """lib/arrow's every column kind, as apache-arrow reads the stream arrow_ipc_test writes."""
        test = os.path.join(os.path.dirname(lib.BINARY), "..", "..", "lib", "arrow", "arrow_ipc_test")
        path = os.path.join(self.local.work, "sample.arrow")
        subprocess.run([test], env=dict(os.environ, STRATA_ARROW_OUT=path), check=True,
                       capture_output=True, timeout=60)
        with open(path, "rb") as f:
            arrow = lib.arrow_rows([f.read()])[0]
        self.assertEqual(arrow["fields"], [
            "labels_only:Bool", "location_address:Uint64",
            "function_name:Dictionary<Int32, Binary>", "children:List<Uint32>", "parent:Int32",
            "cumulative:Int64", "u8:Uint8", "u16:Uint16", "neg:Int8", "i32:Int32", "u64:Uint64"])
        rows = arrow["rows"]
        self.assertEqual([r["function_name"] for r in rows], ["", "main", "app.h\u00e9"])
        self.assertEqual([r["location_address"] for r in rows], ["0", "4198400", str(2**64 - 1)])
        self.assertEqual([r["children"] for r in rows], [[1], [2], []])
        self.assertEqual([r["cumulative"] for r in rows], ["12", "12", "-5"])
        self.assertEqual([r["u8"] for r in rows], [0, 200, 255])
        self.assertEqual([r["u16"] for r in rows], [0, 256, 65535])
        self.assertEqual([r["neg"] for r in rows], [3, -5, 100])
        self.assertEqual([r["i32"] for r in rows], [-40000, 0, 40000])
        self.assertEqual([r["u64"] for r in rows], ["1", str(2**40), "7"])

    def check_chart_arrow(self, arrow, what):
        """FLAMECHART as apache-arrow reads it: the api profile (t) and the worker's (t + 1 s, inside
        the first one's 10 s) share main and app.handle; app.parse starts at t, app.encode at
        t + 1 s to its right (value_offset 7 periods)."""
        t = self.t_s * 10**9
        rows = [(r["function_name"], int(r["timestamp"]), int(r["value_offset"]),
                 int(r["cumulative"]) // qc.PERIOD, list(r["children"])) for r in arrow["rows"]]
        self.assertEqual(rows, [("", 0, 0, 12, [1]), ("main", t, 0, 12, [2]),
                                ("app.handle", t, 0, 12, [3, 4]),
                                ("app.parse", t, 0, 7, []),
                                ("app.encode", t + 10**9, 7 * qc.PERIOD, 5, [])], what)

    def check_source_arrow(self, arrow, what):
        """SOURCE's record as apache-arrow reads it: one row per line of app.go, Int64 columns."""
        self.assertEqual(arrow["fields"], ["cumulative:Int64", "flat:Int64"], what)
        self.assertEqual(len(arrow["rows"]), 45, what)
        want = {11: (12, 12), 21: (12, 0), 31: (12, 0)}
        for i, row in enumerate(arrow["rows"]):
            cum, flat = want.get(i + 1, (0, 0))
            self.assertEqual((int(row["cumulative"]), int(row["flat"])),
                             (cum * qc.PERIOD, flat * qc.PERIOD), f"{what}: line {i + 1}")

    def test_connect_client(self):
        """npm's Connect client (@connectrpc/connect-node), JSON and binary codecs, built from a
        descriptor set protoc makes of Strata's own query.proto: every answer equal to grpcio's,
        the error the same code and message."""
        start, end = self.t_s - 60, self.t_s + 60
        proto = os.path.join(CLIENTS, "..", "..", "proto")
        descriptors = os.path.join(self.local.work, "query.pb")
        subprocess.run(["protoc", "--include_imports", f"--descriptor_set_out={descriptors}",
                        f"-I{proto}", os.path.join(proto, "parca/query/v1alpha1/query.proto")],
                       check=True, timeout=60)
        out = subprocess.run(["node", "connect_client.mjs", descriptors, self.http, TENANT,
                              str(start), str(end)],
                             cwd=CLIENTS, capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        answers = [json.loads(line) for line in out.stdout.splitlines()]
        self.assertEqual(len(answers), 2 * 10, out.stdout)
        for a in answers:
            what = f"{a['name']} over {a['format']}"
            response_type, want = self.native(a["name"], start, end)
            if isinstance(want, grpc.RpcError):
                self.assertFalse(a["ok"], what)
                self.assertEqual(a["code"].lower(), want.code().name.replace("_", "").lower(), what)
                self.assertEqual(a["message"], want.details(), what)
                continue
            self.assertTrue(a["ok"], f"{what}: {a}")
            self.assertEqual(response_type.FromString(base64.b64decode(a["b64"])), want, what)

    def check_table_arrow(self, arrow, top, callgraph, what):
        """TABLE_ARROW's rows against TOP (names, flat, cumulative, in order) and CALLGRAPH's
        edges (callers and callees as row numbers)."""
        rows = arrow["rows"]
        self.assertEqual([(r["function_name"], r["flat"], r["cumulative"]) for r in rows],
                         [(n.meta.function.name, str(n.flat), str(n.cumulative)) for n in top.list],
                         what)
        names = {n.id: n.meta.function.name for n in callgraph.nodes}
        row_of = {r["function_name"]: i for i, r in enumerate(rows)}
        edges = {(names[e.source], names[e.target]) for e in callgraph.edges}
        self.assertTrue(edges, what)
        got = {(rows[int(c)]["function_name"], r["function_name"]) for r in rows
               for c in r["callers"]}
        self.assertEqual(got, edges, what)
        got = {(r["function_name"], rows[int(c)]["function_name"]) for r in rows
               for c in r["callees"]}
        self.assertEqual(got, edges, what)
        self.assertEqual(set(row_of), {n.meta.function.name for n in top.list}, what)

    def check_arrow(self, arrow, fg, what):
        """The Arrow record, as npm's apache-arrow reads it, against FLAMEGRAPH_TABLE node for
        node: names, cumulatives, parents, depths and children."""
        self.assertIn("function_name:Dictionary<Int32, Binary>", arrow["fields"], what)
        self.assertIn("children:List<Uint32>", arrow["fields"], what)
        # Parca's types: counts narrowed to the smallest width, unsigned where they cannot be
        # negative (Grafana's reader wants cumulative unsigned); 1.2e8 needs 32 bits.
        for field in ("labels_only:Bool", "location_address:Uint64", "cumulative:Uint32",
                      "flat:Uint32", "diff:Int8", "parent:Int32", "timestamp:Int64",
                      "depth:Uint8", "value_offset:Uint8", "location_line:Uint8",
                      "function_startline:Uint8", "mapping_file:Dictionary<Int32, Binary>"):
            self.assertIn(field, arrow["fields"], what)
        rows = arrow["rows"]
        want = []  # (name, cumulative, parent row, depth), depth first in children order

        def walk(node, name, parent, depth):
            row = len(want)
            want.append((name, str(node.cumulative), parent, depth))
            for child in node.children:
                walk(child, child.meta.function.name, row, depth + 1)

        walk(fg.root, "", -1, 0)
        got = [(r["function_name"], str(r["cumulative"]), r["parent"], r["depth"]) for r in rows]
        self.assertEqual(got, want, what)
        for i, r in enumerate(rows):
            self.assertEqual(r["children"], [j for j, w in enumerate(want) if w[2] == i], what)


if __name__ == "__main__":
    unittest.main()
