#!/usr/bin/python3
"""Grafana Pyroscope's push API on `strata all` (issue 20 item 2): push.v1.PusherService/Push over
native gRPC (grpcio) and over Connect on the HTTP port (binary and JSON codecs), each push then
read back through Parca's QueryService (profile types, labels, top functions and totals); bad
pushes are refused alone with WriteRaw's own codes and messages, and store nothing.
"""
import base64
import json
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
from parca.query.v1alpha1 import query_pb2 as qpb  # noqa: E402
from parca.query.v1alpha1 import query_pb2_grpc as q_grpc  # noqa: E402
from push.v1 import push_pb2  # noqa: E402
from push.v1 import push_pb2_grpc  # noqa: E402

TENANT = "pyroscope"
MD = [("x-scope-orgid", TENANT)]
T = 1767225600
P = qc.PERIOD


def ts(s):
    t = timestamp_pb2.Timestamp()
    t.seconds = s
    return t


def cpu(t_s, stacks):
    b = qc.PprofBuilder([("samples", "count"), ("cpu", "nanoseconds")], ("cpu", "nanoseconds"),
                        P, t_s * 10**9, qc.DURATION)
    for stack, n in stacks.items():
        b.sample(stack, [n, n * P])
    return b.bytes()


def push_request(service, raw, name="process_cpu"):
    labels = [push_pb2.LabelPair(name="service_name", value=service)]
    if name is not None:
        labels.insert(0, push_pb2.LabelPair(name="__name__", value=name))
    return push_pb2.PushRequest(series=[push_pb2.RawProfileSeries(
        labels=labels, samples=[push_pb2.RawSample(raw_profile=raw, ID="0b1d")])])


class PyroscopePushTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.local = lib.LocalStrata("pyroscope-push")
        cls.pusher = push_pb2_grpc.PusherServiceStub(cls.local.channel)
        cls.query = q_grpc.QueryServiceStub(cls.local.channel)

    @classmethod
    def tearDownClass(cls):
        cls.local.close()

    def top(self, service):
        r = self.query.Query(qpb.QueryRequest(
            mode=qpb.QueryRequest.MODE_MERGE, report_type=qpb.QueryRequest.REPORT_TYPE_TOP,
            merge=qpb.MergeProfile(query=qc.CPU_SAMPLES + f'{{service_name="{service}"}}',
                                   start=ts(T - 60), end=ts(T + 600))), metadata=MD, timeout=60)
        return r.total // P, {n.meta.function.name: n.flat // P for n in r.top.list}

    def connect(self, body, content_type):
        req = urllib.request.Request(self.local.http + "/push.v1.PusherService/Push", data=body,
                                     headers={"Content-Type": content_type,
                                              "X-Scope-OrgID": TENANT})
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()

    def test_grpc(self):
        r = self.pusher.Push(push_request("shop", cpu(T, {qc.A: 7, qc.B: 5})), metadata=MD,
                             timeout=60)
        self.assertEqual(r, push_pb2.PushResponse())
        self.assertEqual(self.top("shop"), (12, {"app.parse": 7, "app.encode": 5, "main": 0,
                                                 "app.handle": 0}))
        values = self.query.Values(qpb.ValuesRequest(label_name="service_name"), metadata=MD)
        self.assertIn("shop", list(values.label_values))
        types = [t.name + ":" + t.sample_type for t in
                 self.query.ProfileTypes(qpb.ProfileTypesRequest(), metadata=MD).types]
        self.assertIn("process_cpu:samples", types)

    def test_connect_binary(self):
        body = push_request("cart", cpu(T + 10, {qc.A: 3})).SerializeToString()
        self.assertEqual(self.connect(body, "application/proto"), (200, b""))
        self.assertEqual(self.top("cart"), (3, {"app.parse": 3, "main": 0, "app.handle": 0}))

    def test_connect_json(self):
        body = json.dumps({"series": [{
            "labels": [{"name": "__name__", "value": "process_cpu"},
                       {"name": "service_name", "value": "billing"}],
            "samples": [{"rawProfile": base64.b64encode(cpu(T + 20, {qc.B: 4})).decode()}]}]})
        status, answer = self.connect(body.encode(), "application/json")
        self.assertEqual((status, json.loads(answer)), (200, {}))
        self.assertEqual(self.top("billing"), (4, {"app.encode": 4, "main": 0, "app.handle": 0}))

    def test_refused_alone(self):
        cases = [
            (push_request("bad", b"\x1f\x8b not gzip"), "invalid pprof"),
            (push_request("bad", cpu(T, {qc.A: 1}), name=None), "__name__"),
        ]
        for req, words in cases:
            with self.assertRaises(grpc.RpcError) as e:
                self.pusher.Push(req, metadata=MD, timeout=60)
            self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, words)
            self.assertIn(words, e.exception.details())
        raw = self.local.channel.unary_unary("/push.v1.PusherService/Push",
                                             request_serializer=None, response_deserializer=None)
        with self.assertRaises(grpc.RpcError) as e:
            raw(b"\x0a\xff", metadata=MD, timeout=60)  # a truncated field: not a PushRequest
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        with self.assertRaises(urllib.error.HTTPError) as e:
            self.connect(b'{"series": [{"labels": 5}]}', "application/json")
        self.assertEqual(e.exception.code, 400)
        values = self.query.Values(qpb.ValuesRequest(label_name="service_name"), metadata=MD)
        self.assertNotIn("bad", list(values.label_values))


if __name__ == "__main__":
    unittest.main()
