#!/usr/bin/python3
"""Grafana Pyroscope's HTTP push, POST /ingest, on `strata all` (issue 20 items 1 and 4): collapsed
stacks (folded, lines) sent with curl, pyroscope-go's multipart pprof with sample_type_config, a raw
gzipped pprof as npm's @pyroscope/nodejs sends it, and a real Node.js program profiled by that SDK.
Every push is read back through Parca's QueryService with grpcio (profile types, labels, totals,
function names); bad pushes get a 4xx whose body says why, and store nothing.
"""
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_testlib as lib  # noqa: E402
import test_query_common as qc  # noqa: E402

from google.protobuf import timestamp_pb2  # noqa: E402
from parca.query.v1alpha1 import query_pb2 as qpb  # noqa: E402
from parca.query.v1alpha1 import query_pb2_grpc as q_grpc  # noqa: E402

TENANT = "pyro"
MD = [("x-scope-orgid", TENANT)]
T = 1767225600
NS = 10**9
CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta"
CLIENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients")


def ts(s):
    t = timestamp_pb2.Timestamp()
    t.seconds = s
    return t


class PyroscopeIngestTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.local = lib.LocalStrata("pyroscope-ingest")
        cls.query = q_grpc.QueryServiceStub(cls.local.channel)
        cls.tmp = tempfile.mkdtemp(prefix="strata-ingest-")

    @classmethod
    def tearDownClass(cls):
        cls.local.close()

    def curl(self, params, body_args, tenant=TENANT):
        """POSTs with curl; returns (HTTP status, body)."""
        url = self.local.http + "/ingest?" + urllib.parse.urlencode(params)
        out = subprocess.run(["curl", "-sS", "-o", "-", "-w", "\n%{http_code}", "-X", "POST",
                              "-H", f"X-Scope-OrgID: {tenant}", *body_args, url],
                             capture_output=True, timeout=60, check=True)
        body, _, code = out.stdout.rpartition(b"\n")
        return int(code), body.decode()

    def write(self, name, data):
        path = os.path.join(self.tmp, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def merge(self, type_name, selector, report, start=T - 60, end=T + 600):
        return self.query.Query(qpb.QueryRequest(
            mode=qpb.QueryRequest.MODE_MERGE, report_type=report,
            merge=qpb.MergeProfile(query=type_name + selector, start=ts(start), end=ts(end))),
            metadata=MD, timeout=60)

    def top(self, type_name, selector, **kw):
        r = self.merge(type_name, selector, qpb.QueryRequest.REPORT_TYPE_TOP, **kw)
        return r.total, {n.meta.function.name: (n.flat, n.cumulative) for n in r.top.list}

    def label_values(self, name):
        return sorted(self.query.Values(qpb.ValuesRequest(label_name=name), metadata=MD,
                                        timeout=60).label_values)

    def types(self):
        r = self.query.ProfileTypes(qpb.ProfileTypesRequest(), metadata=MD, timeout=60)
        return {":".join([t.name, t.sample_type, t.sample_unit, t.period_type, t.period_unit])
                + (":delta" if t.delta else "") for t in r.types}

    def test_folded_with_curl(self):
        path = self.write("cpu.folded", b"main;work;leaf 10\nmain;idle 3\n")
        code, body = self.curl({"name": "curlapp.cpu{env=test,service.version=1.2}",
                                "from": T, "until": T + 10, "sampleRate": 100,
                                "spyName": "rbspy", "format": "folded"},
                               ["--data-binary", "@" + path])
        self.assertEqual((code, body), (200, ""))
        total, fns = self.top(CPU, '{service_name="curlapp"}')
        self.assertEqual(total, 13 * 10**7)  # samples x 10 ms at 100 Hz
        self.assertEqual(fns["leaf"], (10 * 10**7, 10 * 10**7))
        self.assertEqual(fns["main"], (0, 13 * 10**7))
        self.assertEqual(fns["idle"][0], 3 * 10**7)
        self.assertIn("test", self.label_values("env"))
        self.assertIn("1.2", self.label_values("service_version"))  # '.' became '_'
        self.assertIn("rbspy", self.label_values("pyroscope_spy"))

    def test_lines_and_types(self):
        path = self.write("heap.lines", b"main;cache\nmain;cache\nmain;alloc\n")
        code, _ = self.curl({"name": "linesapp.inuse_objects", "from": T, "until": T + 10,
                             "format": "lines"}, ["--data-binary", "@" + path])
        self.assertEqual(code, 200)
        gauge = "memory:inuse_objects:count:inuse_objects:count"
        self.assertIn(gauge, self.types())
        total, fns = self.top(gauge, '{service_name="linesapp"}')
        self.assertEqual((total, fns["cache"][0], fns["alloc"][0]), (3, 2, 1))

    def test_pyroscope_go_multipart(self):
        """pyroscope-go's shape: multipart form, no format parameter, sample_type_config."""
        b = qc.PprofBuilder([("contentions", "count"), ("delay", "nanoseconds")],
                            ("contentions", "count"), 1, (T + 20) * NS, 10 * NS)
        b.sample(("main", "sync.(*Mutex).Lock"), [4, 4000])
        b.sample(("main", "work", "sync.(*Mutex).Lock"), [1, 9000])
        profile = self.write("mutex.pprof", b.bytes())
        config = self.write("config.json", json.dumps({
            "contentions": {"units": "lock_samples", "display-name": "mutex_count"},
            "delay": {"units": "lock_nanoseconds", "display-name": "mutex_duration"}}).encode())
        code, body = self.curl({"name": "goapp{pod=a}", "from": T + 20, "until": T + 30,
                                "spyName": "gospy", "sampleRate": 100},
                               ["-F", f"profile=@{profile}", "-F",
                                f"sample_type_config=@{config}"])
        self.assertEqual((code, body), (200, ""))
        delay = "mutex:delay:nanoseconds:contentions:count:delta"
        self.assertIn(delay, self.types())
        total, fns = self.top(delay, '{service_name="goapp",pod="a"}')
        self.assertEqual((total, fns["sync.(*Mutex).Lock"][0], fns["work"][1]), (13000, 13000, 9000))

    def test_raw_gzipped_pprof(self):
        """@pyroscope/nodejs's shape: format=pprof, the gzipped pprof as the body."""
        b = qc.PprofBuilder([("samples", "count"), ("wall", "nanoseconds")],
                            ("wall", "nanoseconds"), 10**7, 0, 10 * NS)  # no time: from is used
        b.sample(("main", "./app.js:handler:3"), [5, 5 * 10**7])
        path = self.write("wall.pb.gz", b.bytes(gz=True))
        code, _ = self.curl({"name": "rawapp{otel.scope.name=sdk}", "from": T + 40,
                             "until": T + 50, "format": "pprof", "spyName": "nodespy"},
                            ["-H", "Content-Type: application/octet-stream",
                             "--data-binary", "@" + path])
        self.assertEqual(code, 200)
        wall = "wall:wall:nanoseconds:wall:nanoseconds:delta"
        total, fns = self.top(wall, '{service_name="rawapp",otel_scope_name="sdk"}',
                              start=T + 39, end=T + 41)
        self.assertEqual((total, fns["./app.js:handler:3"][0]), (5 * 10**7, 5 * 10**7))

    def test_refused_alone(self):
        cases = [
            ({"name": "bad.cpu", "format": "folded"}, b"main;x notanumber\n", 400,
             "folded line 1"),
            ({"name": "bad.cpu", "format": "jfr"}, b"", 400, "format \"jfr\" is not supported"),
            ({"format": "folded"}, b"main 1\n", 400, "name parameter"),
            ({"name": "bad", "format": "pprof"}, b"\x1f\x8b not gzip", 400, "invalid pprof"),
            ({"name": "bad{a-b=1}", "format": "folded"}, b"main 1\n", 400, "invalid label name"),
        ]
        for params, data, want, words in cases:
            path = self.write("bad", data)
            code, body = self.curl({**params, "from": T, "until": T + 10},
                                   ["--data-binary", "@" + path])
            self.assertEqual(code, want, body)
            self.assertIn(words, body)
        code, body = self.curl({"name": "bad.cpu", "format": "folded"},
                               ["--data-binary", "main 1"], tenant="no/slashes")
        self.assertEqual(code, 400, body)
        self.assertNotIn("bad", self.label_values("service_name"))

    def test_nodejs_sdk(self):
        """A Node.js program profiled by npm's @pyroscope/nodejs, pushing to Strata's /ingest: its
        wall and heap profiles arrive with the program's function names and the SDK's labels."""
        start = int(time.time()) - 5
        out = subprocess.run(["node", "pyroscope_node_app.mjs", self.local.http, TENANT, "6"],
                             cwd=CLIENTS, capture_output=True, text=True, timeout=180)
        self.assertEqual(out.returncode, 0, out.stderr)
        end = int(time.time()) + 5
        types = self.types()
        wall = "wall:wall:nanoseconds:wall:nanoseconds:delta"
        heap = "memory:inuse_space:bytes:inuse_space:bytes"
        self.assertIn(wall, types)
        self.assertIn(heap, types)
        self.assertIn("nodeapp", self.label_values("service_name"))
        self.assertIn("com.grafana.pyroscope/nodejs", self.label_values("otel_scope_name"))
        self.assertIn("nodespy", self.label_values("pyroscope_spy"))
        sel = '{service_name="nodeapp",region="eu"}'
        total, fns = self.top(wall, sel, start=start, end=end)
        hot = {n: v for n, v in fns.items() if ":hotLoop:" in n}
        self.assertEqual(len(hot), 1, sorted(fns))
        (hot_name, (hot_flat, _)), = hot.items()
        self.assertTrue(hot_name.endswith(".mjs:hotLoop:" + hot_name.rsplit(":", 1)[1]))
        self.assertGreater(hot_flat, total // 2, (hot_name, hot_flat, total))  # most wall time
        _, heap_fns = self.top(heap, sel, start=start, end=end)
        self.assertTrue(any(":allocateChunk:" in n for n in heap_fns), sorted(heap_fns))


if __name__ == "__main__":
    unittest.main()
