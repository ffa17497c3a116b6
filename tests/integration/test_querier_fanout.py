#!/usr/bin/python3
"""Queriers share a merge out (issue 18 item 1): three `strata querier` processes on one S3 bucket
(Ceph radosgw) give, byte for byte, the answers a lone querier gives, and a querier killed with
SIGKILL while it merges its share does not change the answer.

Data: `strata all` (compactor off, 100 ms flushes) takes BLOCKS WriteRaw calls through Python
grpcio, each one block of three series (job a, b, c), each profile with hundreds of distinct stacks
4 to 16 deep over 400 function names, ten seconds apart; the first call is retried later, so one
profile sits in two blocks and must count once (both copies have the same time, so they fall in the
same shard of time, and whichever querier merges that shard drops the copy).
Then a lone querier (no peers) and three queriers whose `peers` list names all three gRPC ports
(each leaves itself out by its instance id) serve the bucket. Every query (merge, a selector,
single, diff, TOP, PPROF, group-by binary) goes to each of the three and to the lone querier, and
the answers' bytes must be equal; the coordinators' strata_querier_fanout_shares_total and the
peers' merge_shard counts show the work was shared.

Kill: the third querier is restarted with STRATA_TEST_SHARE_DELAY_MS (its shares wait before
merging); a merge sent to the first waits until the third holds a share
(strata_querier_shares_in_flight), the third is killed with SIGKILL, and the answer must still
equal the lone querier's, the first having merged that share itself
(strata_querier_fanout_shares_total{result="failed"}).

Needs STRATA_S3_* (ctest starts radosgw through tests/servers/radosgw.sh); skipped without them.
"""
import os
import random
import re
import signal
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_testlib as lib  # noqa: E402
import test_query_common as qc  # noqa: E402

lib.load_stubs()
import grpc  # noqa: E402
from google.protobuf import timestamp_pb2  # noqa: E402
from parca.profilestore.v1alpha1 import profilestore_pb2_grpc as ps_grpc  # noqa: E402
from parca.query.v1alpha1 import query_pb2 as qpb  # noqa: E402
from parca.query.v1alpha1 import query_pb2_grpc as q_grpc  # noqa: E402
from strata.querier.v1 import peer_pb2  # noqa: E402

TENANT = "fanout"
BLOCKS = 12
NS = 10**9
T0 = 1767225600 * NS
RUN_ID = f"{os.getpid()}-{int(time.time())}"
CPU = qc.CPU_SAMPLES
FUNCTIONS = [f"pkg{i % 23}.fn{i}" for i in range(400)]


def ts(ns):
    t = timestamp_pb2.Timestamp()
    t.seconds, t.nanos = divmod(ns, NS)
    return t


def profile(rng, t_ns, job):
    b = qc.PprofBuilder([("samples", "count"), ("cpu", "nanoseconds")], ("cpu", "nanoseconds"),
                        qc.PERIOD, t_ns, qc.DURATION)
    for _ in range(300):
        depth = rng.randint(4, 16)
        stack = ("main", f"{job}.serve") + tuple(rng.choice(FUNCTIONS) for _ in range(depth))
        n = rng.randint(1, 50)
        b.sample(stack, [n, n * qc.PERIOD])
    return b.bytes()


def push_request(i):
    rng = random.Random(1000 + i)
    t = T0 + i * 10 * NS
    return qc.write_request([({"__name__": "process_cpu", "job": job}, [profile(rng, t, job)])
                             for job in ("a", "b", "c")])


def metric(http, name, labels=""):
    _, body = lib.http_get(http + "/metrics")
    total = 0.0
    for line in body.decode().splitlines():
        if line.startswith("#"):
            continue
        m = re.match(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", line)
        if m and labels in (m.group(1) or ""):
            total += float(m.group(2))
    return total


def s3_bucket():
    return f"""
bucket:
  type: S3
  prefix: fanout-{RUN_ID}
  config:
    bucket: {os.environ["STRATA_S3_BUCKET"]}
    endpoint: {os.environ["STRATA_S3_ENDPOINT"]}
    insecure: true
    access_key: {os.environ["STRATA_S3_ACCESS_KEY"]}
    secret_key: {os.environ["STRATA_S3_SECRET_KEY"]}
"""


class Querier:
    def __init__(self, work, name, peers):
        self.grpc_port, self.http_port = lib.free_port(), lib.free_port()
        self.http = f"http://127.0.0.1:{self.http_port}"
        self.peers = peers
        self.dir = os.path.join(work, name)
        os.makedirs(self.dir, exist_ok=True)
        self.proc = None

    def start(self, env=None):
        peers = "".join(f"\n    - {p}" for p in self.peers) if self.peers else " []"
        self.proc = lib.Strata(self.dir, "querier", f"""
server:
  grpc_listen_address: 127.0.0.1:{self.grpc_port}
  http_listen_address: 127.0.0.1:{self.http_port}
{s3_bucket()}
querier:
  sync_interval: 200ms
  peers:{peers}
  peer_refresh_interval: 200ms
  fanout_min_rows: 0
""").start(ready_url=self.http + "/ready", env=env)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}",
                                             options=[("grpc.max_receive_message_length", 1 << 28)])
        self.query = q_grpc.QueryServiceStub(self.channel)
        return self

    def ask(self, req, timeout=120):
        return self.query.Query(req, metadata=[("x-scope-orgid", TENANT)],
                                timeout=timeout).SerializeToString()

    def stop(self, sig=None):
        self.channel.close()
        rc = self.proc.stop(sig)
        if rc not in (0, -signal.SIGKILL):
            print(self.proc.logs())
        return rc


def merge_req(query, report=qpb.QueryRequest.REPORT_TYPE_FLAMEGRAPH_TABLE, group_by=None):
    r = qpb.QueryRequest(mode=qpb.QueryRequest.MODE_MERGE,
                         merge=qpb.MergeProfile(query=query, start=ts(T0 - 60 * NS),
                                                end=ts(T0 + 3600 * NS)),
                         report_type=report)
    if group_by:
        r.group_by.fields.extend(group_by)
    return r


def queries():
    single = qpb.QueryRequest(mode=qpb.QueryRequest.MODE_SINGLE_UNSPECIFIED,
                              single=qpb.SingleProfile(query=CPU, time=ts(T0 + 50 * NS)),
                              report_type=qpb.QueryRequest.REPORT_TYPE_FLAMEGRAPH_TABLE)
    side = lambda q: qpb.ProfileDiffSelection(  # noqa: E731
        mode=qpb.ProfileDiffSelection.MODE_MERGE,
        merge=qpb.MergeProfile(query=q, start=ts(T0 - 60 * NS), end=ts(T0 + 3600 * NS)))
    diff = qpb.QueryRequest(mode=qpb.QueryRequest.MODE_DIFF,
                            diff=qpb.DiffProfile(a=side(CPU + '{job="a"}'), b=side(CPU + '{job="b"}')),
                            report_type=qpb.QueryRequest.REPORT_TYPE_FLAMEGRAPH_TABLE)
    return {
        "merge": merge_req(CPU),
        "selector": merge_req(CPU + '{job=~"a|c"}'),
        "top": merge_req(CPU, qpb.QueryRequest.REPORT_TYPE_TOP),
        "pprof": merge_req(CPU, qpb.QueryRequest.REPORT_TYPE_PPROF),
        "group_by_binary": merge_req(CPU, group_by=["function_name", "mapping_file"]),
        "single": single,
        "diff": diff,
    }


@unittest.skipUnless(os.environ.get("STRATA_S3_ENDPOINT"),
                     "STRATA_S3_ENDPOINT is not set (tests/servers/radosgw.sh)")
class QuerierFanoutTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = lib.make_workdir("querier-fanout")
        ports = [lib.free_port() for _ in range(2)]
        writer = lib.Strata(cls.work, "all", f"""
server:
  grpc_listen_address: 127.0.0.1:{ports[0]}
  http_listen_address: 127.0.0.1:{ports[1]}
{s3_bucket()}
ingester:
  flush_interval: 100ms
compactor:
  enabled: false
""").start(ready_url=f"http://127.0.0.1:{ports[1]}/ready")
        with grpc.insecure_channel(f"127.0.0.1:{ports[0]}") as ch:
            store = ps_grpc.ProfileStoreServiceStub(ch)
            for i in list(range(BLOCKS)) + [0]:  # the first push retried: a copy in a later block
                store.WriteRaw(push_request(i), metadata=[("x-scope-orgid", TENANT)], timeout=120)
        if writer.stop() != 0:
            print(writer.logs())
        cls.lone = Querier(cls.work, "lone", None).start()
        cls.queriers = [Querier(cls.work, f"q{i}", None) for i in range(3)]
        addresses = [f"127.0.0.1:{q.grpc_port}" for q in cls.queriers]
        for q in cls.queriers:
            q.peers = addresses
            q.start()
        for q in [cls.lone] + cls.queriers:
            lib.wait_for(lambda q=q: metric(q.http, "strata_querier_blocks") >= BLOCKS + 1,
                         timeout=60, what=f"{q.dir} to see every block")
        for q in cls.queriers:
            lib.wait_for(lambda q=q: metric(q.http, "strata_querier_peers") == 2, timeout=60,
                         what=f"{q.dir} to find its two peers")

    @classmethod
    def tearDownClass(cls):
        for q in [cls.lone] + cls.queriers:
            if q.proc is not None and q.proc.proc is not None:
                q.stop()
        lib.remove_workdir(cls.work)

    def test_1_same_answers_as_one_querier(self):
        want = {name: self.lone.ask(req) for name, req in queries().items()}
        self.assertEqual(metric(self.lone.http, "strata_querier_fanout_shares_total"), 0)
        resp = qpb.QueryResponse()
        resp.ParseFromString(want["merge"])
        names = {f.name for f in resp.flamegraph.function}
        self.assertIn("a.serve", names)
        self.assertIn("c.serve", names)
        for q in self.queriers:
            for name, req in queries().items():
                self.assertEqual(q.ask(req), want[name], f"{q.dir}: {name} differs")
        shared = sum(metric(q.http, "strata_querier_fanout_shares_total", 'result="ok"')
                     for q in self.queriers)
        served = sum(metric(q.http, "strata_querier_queries_total", 'operation="merge_shard"')
                     for q in self.queriers)
        # every merge of the three queriers fans out to both peers (13 blocks ten seconds apart:
        # three shards of time)
        self.assertGreaterEqual(shared, 3 * len(queries()))
        self.assertEqual(served, shared)
        self.assertEqual(sum(metric(q.http, "strata_querier_fanout_shares_total", 'result="failed"')
                             for q in self.queriers), 0)

    def test_2_hostile_shares_are_refused(self):
        """MergeShard is on the public gRPC port: a request that is not a share a querier would
        send is refused with INVALID_ARGUMENT and a message, and the querier answers on."""
        q = self.queriers[1]
        call = q.channel.unary_unary("/strata.querier.v1.PeerService/MergeShard",
                                     request_serializer=lambda b: b,
                                     response_deserializer=lambda b: b)
        good = dict(query=CPU, start_ns=T0, end_ns=T0 + 3600 * NS, use_rollups=True,
                    max_query_bytes=1 << 30, group_mask=1)
        cases = {
            "block id is not a ULID": peer_pb2.MergeShardRequest(
                **good, blocks=[peer_pb2.ShareBlock(ulid="../../etc/passwd")]),
            "group_mask": peer_pb2.MergeShardRequest(**dict(good, group_mask=99)),
            "selector": peer_pb2.MergeShardRequest(**dict(good, query="process_cpu{")),
            "end is before start": peer_pb2.MergeShardRequest(**dict(good, end_ns=T0 - 1)),
        }
        for what, req in cases.items():
            with self.assertRaises(grpc.RpcError, msg=what) as cm:
                call(req.SerializeToString(), metadata=[("x-scope-orgid", TENANT)], timeout=30)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, what)
        with self.assertRaises(grpc.RpcError) as cm:
            call(b"\xff\xff\xff", metadata=[("x-scope-orgid", TENANT)], timeout=30)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("MergeShardRequest", cm.exception.details())
        self.assertEqual(q.ask(merge_req(CPU)), self.lone.ask(merge_req(CPU)))

    def test_3_peer_killed_mid_query(self):
        want = self.lone.ask(merge_req(CPU))
        first, victim = self.queriers[0], self.queriers[2]
        victim.stop()
        victim.start(env={"STRATA_TEST_SHARE_DELAY_MS": "60000"})
        lib.wait_for(lambda: metric(victim.http, "strata_querier_blocks") >= BLOCKS + 1,
                     timeout=60, what="the restarted querier to see every block")
        # the first querier finds the restarted one (a new instance id) among its peers
        lib.wait_for(lambda: metric(first.http, "strata_querier_peers") == 2 and
                     metric(victim.http, "strata_querier_peers") == 2, timeout=60,
                     what="the peers to find each other again")
        failed_before = metric(first.http, "strata_querier_fanout_shares_total", 'result="failed"')
        got = {}
        t = threading.Thread(target=lambda: got.setdefault("answer", first.ask(merge_req(CPU))))
        t.start()
        lib.wait_for(lambda: metric(victim.http, "strata_querier_shares_in_flight") >= 1,
                     timeout=60, what="the victim to hold a share")
        self.assertEqual(victim.stop(signal.SIGKILL), -signal.SIGKILL)
        t.join(timeout=120)
        self.assertFalse(t.is_alive(), "the merge did not finish after its peer died")
        self.assertEqual(got.get("answer"), want)
        self.assertGreater(
            metric(first.http, "strata_querier_fanout_shares_total", 'result="failed"'),
            failed_before)
        # the dead querier leaves the first's peers at its next refresh
        lib.wait_for(lambda: metric(first.http, "strata_querier_peers") == 1, timeout=30,
                     what="the dead querier to leave the peer list")
        self.assertEqual(first.ask(merge_req(CPU)), want)


if __name__ == "__main__":
    unittest.main(verbosity=2)
