#!/usr/bin/python3
"""The querier's disk cache (querier.disk_cache_directory, lib/bucket/bucket_cache.h) on the
user's path: `strata all` on a FILESYSTEM bucket holding the query tests' dataset (one block per
WriteRaw, each with its own symbol tables), merged through gRPC.

- A merge reads the blocks' data objects through the cache: pages stored, counted as misses.
- After a restart the same merge gives the same flame graph without one ranged read of the bucket
  (strata_bucket_operations_total{operation="get_range"} does not move): every page comes from the
  disk.
- Every cached file damaged (one byte flipped), the next process still answers the same, counting
  the files as invalid and reading the bucket again.
- With a budget smaller than the data, the files on disk stay within it.
"""
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_testlib as lib  # noqa: E402
import test_query_common as qc  # noqa: E402
from test_query_api import END, flamegraph_shape, merge_req  # noqa: E402

import grpc  # noqa: E402
from parca.profilestore.v1alpha1 import profilestore_pb2_grpc as ps_grpc  # noqa: E402
from parca.query.v1alpha1 import query_pb2_grpc as q_grpc  # noqa: E402

TENANT = [("x-scope-orgid", "cache")]


def metric(http, series):
    """The value of one series (name with its exact labels) in /metrics; 0 when absent."""
    _, body = lib.http_get(http + "/metrics")
    m = re.search(rf"^{re.escape(series)} (\S+)$", body.decode(), re.M)
    return float(m.group(1)) if m else 0.0


def disk_bytes(directory):
    total = 0
    for root, _, files in os.walk(directory):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


class DiskCacheTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = lib.make_workdir("disk-cache")
        cls.data = os.path.join(cls.work, "data")
        cls.cache = os.path.join(cls.work, "cache")
        ports = [lib.free_port() for _ in range(2)]
        cls.grpc_address = f"127.0.0.1:{ports[0]}"
        cls.http = f"http://127.0.0.1:{ports[1]}"
        cls.config = f"""
server:
  grpc_listen_address: {cls.grpc_address}
  http_listen_address: 127.0.0.1:{ports[1]}
bucket:
  type: FILESYSTEM
  config:
    directory: {cls.data}
compactor:
  enabled: false
querier:
  disk_cache_directory: {cls.cache}
  disk_cache_max_bytes: {{max_bytes}}
"""
        cls.strata = cls.start(1 << 30)
        with grpc.insecure_channel(cls.grpc_address) as ch:
            stub = ps_grpc.ProfileStoreServiceStub(ch)
            for req in qc.dataset_requests():
                stub.WriteRaw(req, metadata=TENANT, timeout=30)
        cls.want, _ = qc.tree_shape(qc.build_tree(qc.merge_stacks(qc.select(qc.CPU_SAMPLES))))

    @classmethod
    def start(cls, max_bytes):
        s = lib.Strata(cls.work, "all", cls.config.format(max_bytes=max_bytes))
        return s.start(ready_url=cls.http + "/ready")

    @classmethod
    def restart(cls, max_bytes, between=None):
        """Stops the process, runs between() if given, starts it again with max_bytes."""
        if cls.strata.stop() != 0:
            print(cls.strata.logs())
        if between is not None:
            between()
        cls.strata = cls.start(max_bytes)

    @classmethod
    def tearDownClass(cls):
        if cls.strata.stop() != 0:
            print(cls.strata.logs())
        lib.remove_workdir(cls.work)

    def merge(self):
        with grpc.insecure_channel(self.grpc_address) as ch:
            r = q_grpc.QueryServiceStub(ch).Query(merge_req(qc.CPU_SAMPLES, qc.T0, END),
                                                  metadata=TENANT, timeout=30)
        self.assertEqual(r.total, 1_520_000_000)  # 152 samples x 10 ms, as test_query_api's
        self.assertEqual(flamegraph_shape(r.flamegraph), self.want)
        return r

    def range_reads(self):
        return metric(self.http, 'strata_bucket_operations_total{operation="get_range"}')

    def test_cache_across_restarts(self):
        # 1. Cold: the data objects are read through the cache and stored.
        before = self.range_reads()
        self.merge()
        self.assertGreater(metric(self.http, "strata_querier_disk_cache_misses_total"), 0)
        self.assertGreater(metric(self.http, "strata_querier_disk_cache_fetches_total"), 0)
        self.assertGreater(self.range_reads(), before)
        cached = metric(self.http, "strata_querier_disk_cache_bytes")
        self.assertGreater(cached, 0)
        self.assertEqual(cached, disk_bytes(os.path.join(self.cache, "v1")))

        # 2. Restarted: the same answer, every page from the disk.
        self.restart(1 << 30)
        self.assertEqual(metric(self.http, "strata_querier_disk_cache_bytes"), cached)
        before = self.range_reads()  # meta.json reads of the first listing
        self.merge()
        self.assertEqual(self.range_reads(), before)
        self.assertEqual(metric(self.http, "strata_querier_disk_cache_misses_total"), 0)
        self.assertGreater(metric(self.http, "strata_querier_disk_cache_hits_total"), 0)

        # 3. Every cached file damaged: found out, read again from the bucket, same answer.
        damaged = []

        def damage():
            for root, _, files in os.walk(os.path.join(self.cache, "v1")):
                for name in files:
                    if name == "lock":
                        continue  # the process's lock on the directory, empty
                    with open(os.path.join(root, name), "r+b") as f:
                        f.seek(-1, os.SEEK_END)
                        last = f.read(1)
                        f.seek(-1, os.SEEK_END)
                        f.write(bytes([last[0] ^ 0x5A]))
                    damaged.append(name)
        self.restart(1 << 30, damage)
        self.assertGreater(len(damaged), 0)
        before = self.range_reads()
        self.merge()
        self.assertEqual(metric(self.http, "strata_querier_disk_cache_invalid_total"), len(damaged))
        self.assertGreater(self.range_reads(), before)

        # 4. A budget smaller than the data: the files stay within it, the answer the same.
        budget = int(cached // 3)
        self.restart(budget)
        self.assertLessEqual(disk_bytes(os.path.join(self.cache, "v1")), budget)
        self.merge()
        self.assertLessEqual(disk_bytes(os.path.join(self.cache, "v1")), budget)
        self.assertLessEqual(metric(self.http, "strata_querier_disk_cache_bytes"), budget)
        self.assertGreater(metric(self.http, "strata_querier_disk_cache_evictions_total"), 0)


if __name__ == "__main__":
    unittest.main()
