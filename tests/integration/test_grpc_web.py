#!/usr/bin/python3
"""gRPC-Web (binary and text) and Connect (unary, binary and JSON) on the HTTP port of
`strata all`, into the same handlers as gRPC (issue 19 item 1).

Profiles are written through WriteRaw over gRPC and over gRPC-Web (an ingester write answered
only once durable, through the bridge), then every QueryService method is asked the same
questions over native gRPC (grpcio), gRPC-Web binary, gRPC-Web text and Connect: every answer
decodes to the same message, and errors carry the same code and message in each protocol's
shape (grpc-status trailer frame, Connect's JSON error with its HTTP status).
"""
import base64
import json
import os
import struct
import sys
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_testlib as lib  # noqa: E402
import test_query_common as qc  # noqa: E402

import grpc  # noqa: E402
from google.protobuf import json_format  # noqa: E402
from google.protobuf import timestamp_pb2  # noqa: E402
from parca.profilestore.v1alpha1 import profilestore_pb2 as pspb  # noqa: E402
from parca.profilestore.v1alpha1 import profilestore_pb2_grpc as ps_grpc  # noqa: E402
from parca.query.v1alpha1 import query_pb2 as qpb  # noqa: E402
from parca.query.v1alpha1 import query_pb2_grpc as q_grpc  # noqa: E402

TENANT = "web"
QUERY = "/parca.query.v1alpha1.QueryService/"
STORE = "/parca.profilestore.v1alpha1.ProfileStoreService/"


def ts(ns):
    t = timestamp_pb2.Timestamp()
    t.seconds, t.nanos = divmod(ns, 10**9)
    return t


def post(url, content_type, body, headers=None):
    req = urllib.request.Request(url, data=body, method="POST")
    req.add_header("Content-Type", content_type)
    req.add_header("X-Scope-OrgID", TENANT)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def frames(body):
    """(data messages, trailers dict) of a gRPC-Web response body."""
    data, trailers, i = [], {}, 0
    while i < len(body):
        flag, n = struct.unpack(">BI", body[i:i + 5])
        payload = body[i + 5:i + 5 + n]
        i += 5 + n
        if flag & 0x80:
            for line in payload.decode().split("\r\n"):
                if line:
                    k, v = line.split(":", 1)
                    trailers[k] = urllib.request.unquote(v)
        else:
            data.append(payload)
    return data, trailers


class GrpcWebTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.local = lib.LocalStrata("grpc-web")
        cls.http, cls.channel = cls.local.http, cls.local.channel
        cls.query = q_grpc.QueryServiceStub(cls.channel)
        cls.t_ns = 1767225600 * 10**9
        a = qc.PprofBuilder([("samples", "count"), ("cpu", "nanoseconds")], ("cpu", "nanoseconds"),
                            qc.PERIOD, cls.t_ns, qc.DURATION)
        a.sample(qc.A, [7, 7 * qc.PERIOD])
        b = qc.PprofBuilder([("samples", "count"), ("cpu", "nanoseconds")], ("cpu", "nanoseconds"),
                            qc.PERIOD, cls.t_ns + 10**9, qc.DURATION)
        b.sample(qc.B, [5, 5 * qc.PERIOD])
        ps_grpc.ProfileStoreServiceStub(cls.channel).WriteRaw(
            qc.write_request([({"__name__": "process_cpu", "job": "grpc"}, [a.bytes()])]),
            metadata=[("x-scope-orgid", TENANT)], timeout=30)
        # The second one through gRPC-Web: acknowledged once durable, like over gRPC.
        req = qc.write_request([({"__name__": "process_cpu", "job": "web"}, [b.bytes()])])
        msg = req.SerializeToString()
        status, _, body = post(cls.http + STORE + "WriteRaw", "application/grpc-web+proto",
                               struct.pack(">BI", 0, len(msg)) + msg)
        data, trailers = frames(body)
        assert status == 200 and trailers.get("grpc-status") == "0", (status, trailers)
        pspb.WriteRawResponse.FromString(data[0])

    @classmethod
    def tearDownClass(cls):
        cls.local.close()

    def call_all(self, method, request, response_type):
        """The answer over gRPC and each web protocol: all equal; returns it."""
        native = getattr(self.query, method)(request, metadata=[("x-scope-orgid", TENANT)],
                                             timeout=60)
        msg = request.SerializeToString()
        framed = struct.pack(">BI", 0, len(msg)) + msg
        url = self.http + QUERY + method
        # gRPC-Web, binary
        status, headers, body = post(url, "application/grpc-web+proto", framed)
        self.assertEqual(status, 200)
        self.assertEqual(headers["Content-Type"], "application/grpc-web+proto")
        data, trailers = frames(body)
        self.assertEqual(trailers["grpc-status"], "0")
        self.assertEqual(response_type.FromString(data[0]), native, f"{method} over gRPC-Web")
        # gRPC-Web, text
        status, headers, body = post(url, "application/grpc-web-text",
                                     base64.b64encode(framed))
        self.assertEqual(status, 200)
        data, trailers = frames(base64.b64decode(body))
        self.assertEqual(response_type.FromString(data[0]), native, f"{method} over gRPC-Web text")
        # Connect, binary
        status, headers, body = post(url, "application/proto", msg,
                                     {"Connect-Protocol-Version": "1"})
        self.assertEqual(status, 200)
        self.assertEqual(response_type.FromString(body), native, f"{method} over Connect")
        # Connect, JSON (the proto3 JSON mapping, as Python's json_format writes and reads it)
        status, headers, body = post(url, "application/json",
                                     json_format.MessageToJson(request).encode(),
                                     {"Connect-Protocol-Version": "1"})
        self.assertEqual(status, 200, body)
        self.assertEqual(headers["Content-Type"], "application/json")
        self.assertEqual(json_format.Parse(body, response_type()), native,
                         f"{method} over Connect JSON")
        return native

    def test_every_method_answers_alike(self):
        r = self.call_all("ProfileTypes", qpb.ProfileTypesRequest(), qpb.ProfileTypesResponse)
        self.assertIn("cpu", [t.sample_type for t in r.types])
        r = self.call_all("Labels", qpb.LabelsRequest(), qpb.LabelsResponse)
        self.assertIn("job", r.label_names)
        r = self.call_all("Values", qpb.ValuesRequest(label_name="job"), qpb.ValuesResponse)
        self.assertEqual(sorted(r.label_values), ["grpc", "web"])
        start, end = ts(self.t_ns - 60 * 10**9), ts(self.t_ns + 60 * 10**9)
        r = self.call_all("QueryRange", qpb.QueryRangeRequest(
            query=qc.CPU_SAMPLES + "{}", start=start, end=end, sum_by=["job"]),
            qpb.QueryRangeResponse)
        self.assertEqual(sorted(lbl.value for s in r.series for lbl in s.labelset.labels),
                         ["grpc", "web"])
        for report in (qpb.QueryRequest.REPORT_TYPE_FLAMEGRAPH_TABLE,
                       qpb.QueryRequest.REPORT_TYPE_TOP, qpb.QueryRequest.REPORT_TYPE_PPROF):
            r = self.call_all("Query", qpb.QueryRequest(
                mode=qpb.QueryRequest.MODE_MERGE, report_type=report,
                merge=qpb.MergeProfile(query=qc.CPU_SAMPLES + "{}", start=start, end=end)),
                qpb.QueryResponse)
            self.assertEqual(r.total, 12 * qc.PERIOD)
        self.call_all("HasProfileData", qpb.HasProfileDataRequest(), qpb.HasProfileDataResponse)

    def test_errors_alike(self):
        request = qpb.QueryRangeRequest(query="not a selector{", start=ts(0), end=ts(10**9))
        with self.assertRaises(grpc.RpcError) as native:
            self.query.QueryRange(request, metadata=[("x-scope-orgid", TENANT)], timeout=30)
        self.assertEqual(native.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        msg = request.SerializeToString()
        status, _, body = post(self.http + QUERY + "QueryRange", "application/grpc-web+proto",
                               struct.pack(">BI", 0, len(msg)) + msg)
        self.assertEqual(status, 200)
        data, trailers = frames(body)
        self.assertEqual(data, [])
        self.assertEqual(trailers["grpc-status"], "3")
        self.assertEqual(trailers["grpc-message"], native.exception.details())
        status, headers, body = post(self.http + QUERY + "QueryRange", "application/proto", msg)
        self.assertEqual(status, 400)
        self.assertEqual(json.loads(body), {"code": "invalid_argument",
                                            "message": native.exception.details()})
        status, _, body = post(self.http + QUERY + "QueryRange", "application/json",
                               json_format.MessageToJson(request).encode())
        self.assertEqual(status, 400)
        self.assertEqual(json.loads(body), {"code": "invalid_argument",
                                            "message": native.exception.details()})
        status, _, body = post(self.http + QUERY + "QueryRange", "application/json",
                               b'{"query": 7}')
        self.assertEqual(status, 400)
        self.assertEqual(json.loads(body)["message"], "JSON field query: not a string")
        status, _, body = post(self.http + QUERY + "Nope", "application/proto", b"")
        self.assertEqual(status, 501)
        self.assertEqual(json.loads(body)["code"], "unimplemented")


if __name__ == "__main__":
    unittest.main()
