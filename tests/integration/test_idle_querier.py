#!/usr/bin/python3
"""An idle querier's cost on the bucket does not grow with the blocks in it (issue 18 item 2).

One real block is written by `strata all` (one profile through WriteRaw), then copied into 10,000
more block directories of the same tenant (new ULIDs of an hour ago; the data object hard-linked,
meta.json rewritten with the new ULID), and a bucket-index.json is written naming 100 of them as
marked, as the compactor's would. A separate `strata querier` with the default configuration loads
them all with its first, full listing; then, idle (no query yet), its bucket requests are counted
from strata_bucket_operations_total against its own strata_querier_bucket_syncs_total: per sync
(every idle_sync_interval, 10 s) one recent listing of the tenant (the ULIDs of the last 15
minutes: one request on S3 however many blocks), one listing of the tenants and one attributes
request for bucket-index.json (read whole only when it changed), and a full listing a minute
(one request here, 10 on S3 at 10,000 blocks). At most one request a second,
where before every tenth sync re-read every known block's deletion-mark.json (10,000 GETs) and
every sync listed all 10,000 blocks (10 requests on S3). The marked blocks are dropped. Blocks
committed while the querier is idle, one under an old ULID, are in the answer of the next query
(which waits for a full listing), and a merge over every block answers the one profile they all
hold, once.
"""
import json
import os
import random
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

TENANT = "idle"
COPIES = 10000
MARKED = 100
CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_ulid(ms):
    n = (ms << 80) | random.getrandbits(80)
    return "".join(CROCKFORD[(n >> (5 * i)) & 31] for i in range(25, -1, -1))


def ts(ns):
    t = timestamp_pb2.Timestamp()
    t.seconds, t.nanos = divmod(ns, 10**9)
    return t


def metric(http, name, labels=None):
    """Sum of a metric's samples (those whose labels contain `labels`)."""
    _, body = lib.http_get(http + "/metrics")
    total = 0.0
    for line in body.decode().splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        key, value = line.rsplit(" ", 1)
        if key != name and not key.startswith(name + "{"):
            continue
        if labels and labels not in key:
            continue
        total += float(value)
    return total


class IdleQuerierTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = lib.make_workdir("idle-querier")
        cls.data = os.path.join(cls.work, "data")
        ports = [lib.free_port() for _ in range(4)]
        bucket = f"""
bucket:
  type: FILESYSTEM
  config:
    directory: {cls.data}
"""
        # The one real block.
        writer = lib.Strata(cls.work, "all", f"""
server:
  grpc_listen_address: 127.0.0.1:{ports[0]}
  http_listen_address: 127.0.0.1:{ports[1]}
{bucket}
compactor:
  enabled: false
""").start(ready_url=f"http://127.0.0.1:{ports[1]}/ready")
        cls.t_ns = 1767225600 * 10**9
        b = qc.PprofBuilder([("samples", "count"), ("cpu", "nanoseconds")], ("cpu", "nanoseconds"),
                            qc.PERIOD, cls.t_ns, qc.DURATION)
        b.sample(qc.A, [7, 7 * qc.PERIOD])
        with grpc.insecure_channel(f"127.0.0.1:{ports[0]}") as ch:
            ps_grpc.ProfileStoreServiceStub(ch).WriteRaw(
                qc.write_request([({"__name__": "process_cpu", "job": "idle"}, [b.bytes()])]),
                metadata=[("x-scope-orgid", TENANT)], timeout=30)
        if writer.stop() != 0:
            print(writer.logs())
        tenant_dir = os.path.join(cls.data, TENANT)
        (original,) = [d for d in os.listdir(tenant_dir) if len(d) == 26]
        with open(os.path.join(tenant_dir, original, "meta.json")) as f:
            meta = json.load(f)
        # 10,000 copies: each its own ULID, so each counts once (no copy covers another).
        ms = int(time.time() * 1000) - 3600 * 1000
        cls.copies = []
        for i in range(COPIES):
            u = new_ulid(ms + i)
            d = os.path.join(tenant_dir, u)
            os.mkdir(d)
            for name in os.listdir(os.path.join(tenant_dir, original)):
                if name != "meta.json":
                    os.link(os.path.join(tenant_dir, original, name), os.path.join(d, name))
            meta["ulid"] = u
            meta["compaction"]["sources"] = [u]
            with open(os.path.join(d, "meta.json"), "w") as f:
                json.dump(meta, f)
            cls.copies.append(u)
        # The compactor's index: marks on the first MARKED copies (retention: no replacement).
        marks = []
        for u in cls.copies[:MARKED]:
            with open(os.path.join(tenant_dir, u, "deletion-mark.json"), "w") as f:
                json.dump({"id": u, "version": 1, "details": "past the tenant's retention",
                           "deletion_time": int(time.time())}, f)
            marks.append({"id": u, "deletion_time": int(time.time())})
        with open(os.path.join(tenant_dir, "bucket-index.json"), "w") as f:
            json.dump({"version": 1, "updated_at": int(time.time()), "blocks": [],
                       "block_deletion_marks": marks}, f)
        cls.http = f"http://127.0.0.1:{ports[3]}"
        cls.querier = lib.Strata(cls.work, "querier", f"""
server:
  grpc_listen_address: 127.0.0.1:{ports[2]}
  http_listen_address: 127.0.0.1:{ports[3]}
{bucket}
""").start(ready_url=cls.http + "/ready")
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{ports[2]}")

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        if cls.querier.stop() != 0:
            print(cls.querier.logs())
        lib.remove_workdir(cls.work)

    def copy_block(self, ulid_text):
        """A copy of the original block under ulid_text, committed (meta.json last)."""
        tenant_dir = os.path.join(self.data, TENANT)
        src = os.path.join(tenant_dir, self.copies[-1])
        d = os.path.join(tenant_dir, ulid_text)
        os.mkdir(d)
        for name in os.listdir(src):
            if name != "meta.json":
                os.link(os.path.join(src, name), os.path.join(d, name))
        with open(os.path.join(src, "meta.json")) as f:
            meta = json.load(f)
        meta["ulid"] = ulid_text
        meta["compaction"]["sources"] = [ulid_text]
        with open(os.path.join(d, "meta.json.tmp"), "w") as f:
            json.dump(meta, f)
        os.rename(os.path.join(d, "meta.json.tmp"), os.path.join(d, "meta.json"))

    def test_idle_requests_do_not_grow_with_blocks(self):
        want = 1 + COPIES - MARKED
        lib.wait_for(lambda: metric(self.http, "strata_querier_blocks") == want, timeout=300,
                     what=f"{want} blocks known")
        # Idle from the start (no query yet): the first sync listed every block; the next ones
        # come every idle_sync_interval (10 s) and cost three requests.
        syncs0 = metric(self.http, "strata_querier_bucket_syncs_total")
        full0 = metric(self.http, "strata_querier_bucket_full_listings_total")
        ops0 = metric(self.http, "strata_bucket_operations_total")
        t0 = time.monotonic()
        lib.wait_for(lambda: metric(self.http, "strata_querier_bucket_syncs_total") >= syncs0 + 3,
                     timeout=300, interval=0.5, what="3 more syncs")
        syncs = metric(self.http, "strata_querier_bucket_syncs_total") - syncs0
        full = metric(self.http, "strata_querier_bucket_full_listings_total") - full0
        ops = metric(self.http, "strata_bucket_operations_total") - ops0
        seconds = time.monotonic() - t0
        print(f"idle querier over {want} blocks: {ops:.0f} bucket requests in {syncs:.0f} syncs "
              f"({full:.0f} full), {seconds:.1f} s ({ops / seconds:.2f} per second)", flush=True)
        self.assertGreaterEqual(seconds, 15)  # two idle intervals at least: not listing each second
        self.assertLessEqual(full, 1)  # full_sync_interval: 1m (one request here too, 10 on S3)
        # recent listing, tenants, index attributes; its one GET (first recheck) and a sync that
        # was under way when counting began
        self.assertLessEqual(ops, 3 * syncs + 1 + 3)
        self.assertLessEqual(ops / seconds, 1.0)
        self.assertEqual(metric(self.http, "strata_querier_blocks"), want)

        # Blocks committed now are in the next query's answer: the query, arriving at an idle
        # querier, waits for a full listing (no sleep here: the count is read as the answer
        # returns), which finds a block copied in under an old ULID too.
        self.copy_block(new_ulid(int(time.time() * 1000)))
        self.copy_block(new_ulid(int(time.time() * 1000) - 2 * 3600 * 1000))
        self.assertEqual(metric(self.http, "strata_querier_blocks"), want)
        # A merge over every block: the copies hold one profile (same series, time and samples),
        # which the querier folds into one, as it folds a client's retried write.
        r = q_grpc.QueryServiceStub(self.channel).Query(qpb.QueryRequest(
            mode=qpb.QueryRequest.MODE_MERGE,
            merge=qpb.MergeProfile(query=qc.CPU_SAMPLES + "{}", start=ts(self.t_ns - 10**9),
                                   end=ts(self.t_ns + 10**9))),
            metadata=[("x-scope-orgid", TENANT)], timeout=120)
        self.assertEqual(r.total, 7 * qc.PERIOD)
        self.assertEqual(metric(self.http, "strata_querier_blocks"), want + 2)


if __name__ == "__main__":
    unittest.main()
