#!/usr/bin/python3
"""Block freshness: in `strata all` a profile is queryable the moment WriteRaw returns (the
ingester announces each block to the querier in-process); a separate `strata querier` on the same
bucket (sync_interval 200ms) sees it within about a second. Each push uses a fresh series and
timestamp, and the answers are checked exactly, so an old block cannot satisfy the query.
"""
import os
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

CPU = qc.CPU_SAMPLES
TENANT = [("x-scope-orgid", "fresh")]


def ts(ns):
    t = timestamp_pb2.Timestamp()
    t.seconds, t.nanos = divmod(ns, 10**9)
    return t


def profile_at(t_ns, samples):
    b = qc.PprofBuilder([("samples", "count"), ("cpu", "nanoseconds")], ("cpu", "nanoseconds"),
                        qc.PERIOD, t_ns, qc.DURATION)
    b.sample(qc.A, [samples, samples * qc.PERIOD])
    return b.bytes()


class FreshnessTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = lib.make_workdir("query-fresh")
        data = os.path.join(cls.work, "data")
        ports = [lib.free_port() for _ in range(7)]
        cls.all_http = f"http://127.0.0.1:{ports[1]}"
        cls.q_http = f"http://127.0.0.1:{ports[3]}"
        bucket = f"""
bucket:
  type: FILESYSTEM
  config:
    directory: {data}
"""
        cls.all = lib.Strata(cls.work, "all", f"""
server:
  grpc_listen_address: 127.0.0.1:{ports[0]}
  http_listen_address: 127.0.0.1:{ports[1]}
{bucket}
ingester:
  flush_interval: 100ms
  announce_listen_address: tcp://127.0.0.1:{ports[4]}
querier:
  sync_interval: 1h
compactor:
  enabled: false
""").start(ready_url=cls.all_http + "/ready")
        cls.querier = lib.Strata(cls.work, "querier", f"""
server:
  grpc_listen_address: 127.0.0.1:{ports[2]}
  http_listen_address: 127.0.0.1:{ports[3]}
{bucket}
querier:
  sync_interval: 200ms
""").start(ready_url=cls.q_http + "/ready")
        # A querier that lists the bucket only hourly: it sees new blocks through the ingester's
        # nng announcements alone.
        cls.a_http = f"http://127.0.0.1:{ports[6]}"
        cls.announced = lib.Strata(cls.work, "querier-announced", f"""
server:
  grpc_listen_address: 127.0.0.1:{ports[5]}
  http_listen_address: 127.0.0.1:{ports[6]}
{bucket}
querier:
  sync_interval: 1h
  announce_addresses: [tcp://127.0.0.1:{ports[4]}]
""")
        cls.announced.mode = "querier"
        cls.announced.start(ready_url=cls.a_http + "/ready")
        cls.a_channel = grpc.insecure_channel(f"127.0.0.1:{ports[5]}")
        cls.a_q = q_grpc.QueryServiceStub(cls.a_channel)
        cls.all_channel = grpc.insecure_channel(f"127.0.0.1:{ports[0]}")
        cls.q_channel = grpc.insecure_channel(f"127.0.0.1:{ports[2]}")
        cls.store = ps_grpc.ProfileStoreServiceStub(cls.all_channel)
        cls.all_q = q_grpc.QueryServiceStub(cls.all_channel)
        cls.sep_q = q_grpc.QueryServiceStub(cls.q_channel)
        # Warm up both gRPC channels so connection set-up is not timed.
        for stub in (cls.all_q, cls.sep_q, cls.a_q):
            stub.ProfileTypes(qpb.ProfileTypesRequest(), metadata=TENANT, timeout=10)

    @classmethod
    def tearDownClass(cls):
        cls.all_channel.close()
        cls.q_channel.close()
        cls.a_channel.close()
        for s in (cls.announced, cls.querier, cls.all):
            if s.stop() != 0:
                print(s.logs())
        lib.remove_workdir(cls.work)

    def push(self, job, t_ns, samples):
        self.store.WriteRaw(qc.write_request([({"__name__": "process_cpu", "job": job},
                                               [profile_at(t_ns, samples)])]),
                            metadata=TENANT, timeout=30)

    def merged_total(self, stub, job, t_ns):
        r = stub.Query(qpb.QueryRequest(
            mode=qpb.QueryRequest.MODE_MERGE,
            merge=qpb.MergeProfile(query=CPU + f'{{job="{job}"}}', start=ts(t_ns - 10**9),
                                   end=ts(t_ns + 10**9))), metadata=TENANT, timeout=10)
        return r.total

    def test_strata_all_sees_a_block_when_write_returns(self):
        base = time.time_ns()
        for i in range(5):
            job, t_ns, n = f"all-{i}", base + i * 10**9, 3 + i
            self.push(job, t_ns, n)
            # No retry: the write was acknowledged, so the block must be visible now.
            self.assertEqual(self.merged_total(self.all_q, job, t_ns), n * qc.PERIOD, job)
            j = qc.http_json(self.all_http, "/api/v1/query_range",
                             {"query": CPU + f'{{job="{job}"}}', "start": qc.ms(t_ns - 60 * 10**9),
                              "end": qc.ms(t_ns + 60 * 10**9), "step": "60s"}, tenant="fresh")
            self.assertEqual([p["value"] for s in j["series"] for p in s["samples"]], [n * qc.PERIOD])

    def wait_visible(self, stub, job, t_ns, n, limit=5):
        pushed = time.monotonic()
        total = None
        while time.monotonic() - pushed < limit:
            try:
                total = self.merged_total(stub, job, t_ns)
                break
            except grpc.RpcError as e:
                self.assertEqual(e.code(), grpc.StatusCode.NOT_FOUND, e.details())
                time.sleep(0.02)
        delay = time.monotonic() - pushed
        self.assertEqual(total, n * qc.PERIOD, f"{job} not visible after {delay:.2f}s")
        return delay

    def test_announcements_reach_a_querier_that_does_not_list(self):
        base = time.time_ns() + 200 * 10**9
        delays = []
        for i in range(3):
            job, t_ns, n = f"ann-{i}", base + i * 10**9, 11 + i
            self.push(job, t_ns, n)
            delays.append(self.wait_visible(self.a_q, job, t_ns, n))
        self.assertLess(max(delays), 1.0, delays)
        # Both ends count what went over nng.
        _, body = lib.http_get(self.a_http + "/metrics")
        received = [l for l in body.decode().splitlines() if l.startswith("strata_announce_received_total ")]
        self.assertGreaterEqual(int(received[0].split()[1]), 3)
        _, body = lib.http_get(self.all_http + "/metrics")
        published = [l for l in body.decode().splitlines() if l.startswith("strata_announce_published_total ")]
        self.assertGreaterEqual(int(published[0].split()[1]), 3)

    def test_separate_querier_sees_a_block_within_a_second(self):
        base = time.time_ns() + 100 * 10**9
        delays = []
        for i in range(3):
            job, t_ns, n = f"sep-{i}", base + i * 10**9, 7 + i
            self.push(job, t_ns, n)
            pushed = time.monotonic()
            total = None
            while time.monotonic() - pushed < 5:
                try:
                    total = self.merged_total(self.sep_q, job, t_ns)
                    break
                except grpc.RpcError as e:
                    self.assertEqual(e.code(), grpc.StatusCode.NOT_FOUND, e.details())
                    time.sleep(0.02)
            delays.append(time.monotonic() - pushed)
            self.assertEqual(total, n * qc.PERIOD, f"{job} not visible after {delays[-1]:.2f}s")
        self.assertLess(max(delays), 1.2, delays)


if __name__ == "__main__":
    unittest.main(verbosity=2)
