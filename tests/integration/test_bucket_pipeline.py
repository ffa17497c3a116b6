#!/usr/bin/python3
"""The whole pipeline on every bucket backend, and through injected faults.

`strata all` runs with its bucket on FILESYSTEM, on S3 (Ceph radosgw) and on AZURE (Azurite); the
known dataset of test_query_common.py goes in through Parca's WriteRaw (Python grpcio) and comes
back through the JSON API (/api/v1/query, report=table, and /api/v1/profile_types). Every backend
must give exactly the answers FILESYSTEM gives. `strata bucket ls` and `verify` then check the
blocks each backend holds.

Faults: with tests/faultproxy between Strata and radosgw, 503s, slow answers and connections reset
mid-body are retried inside the bucket layer and the write is acknowledged; a meta.json upload
that keeps failing leaves a data object without meta.json that queries never see (`strata bucket
verify` reports it as PARTIAL), shows in /metrics (strata_ingester_upload_failures_total) and in
the logs, and the write is acknowledged only after the fault clears and the block is whole.

S3 and AZURE parts run when STRATA_S3_ENDPOINT / STRATA_AZURE_ENDPOINT are set (ctest starts the
servers with tests/servers/*.sh); without them they are skipped with a message.
"""
import concurrent.futures
# Imported here, not lazily by concurrent.futures.__getattr__ inside a test: a lazy import while
# other threads (fault proxies, grpc) import can hit a CPython 3.11 import-lock KeyError.
import concurrent.futures.thread  # noqa: F401
import json
import os
import re
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "faultproxy"))
import strata_testlib as lib  # noqa: E402
import test_query_common as qc  # noqa: E402
from test_query_common import ALL_TYPES, T0  # noqa: E402
import faultproxy  # noqa: E402
import grpc  # noqa: E402
from parca.profilestore.v1alpha1 import profilestore_pb2_grpc as ps_grpc  # noqa: E402

TENANT = "team-a"
END = T0 + 200 * qc.NS
RUN_ID = f"{os.getpid()}-{int(time.time())}"


def s3_bucket(endpoint, prefix, extra=""):
    return f"""
  type: S3
  prefix: {prefix}
  config:
    bucket: {os.environ["STRATA_S3_BUCKET"]}
    endpoint: {endpoint}
    insecure: true
    access_key: {os.environ["STRATA_S3_ACCESS_KEY"]}
    secret_key: {os.environ["STRATA_S3_SECRET_KEY"]}
    max_retries: 4
{extra}"""


def azure_bucket(prefix):
    return f"""
  type: AZURE
  prefix: {prefix}
  config:
    storage_account: {os.environ["STRATA_AZURE_ACCOUNT"]}
    storage_account_key: '{os.environ["STRATA_AZURE_KEY"]}'
    container: {os.environ["STRATA_AZURE_CONTAINER"]}
    endpoint: {os.environ["STRATA_AZURE_ENDPOINT"]}
"""


def filesystem_bucket(directory):
    return f"""
  type: FILESYSTEM
  config:
    directory: {directory}
"""


class Stack:
    """strata all on one bucket, with a gRPC channel for writes."""

    def __init__(self, work, name, bucket_yaml, ingester_extra=""):
        self.grpc_port = lib.free_port()
        self.http_port = lib.free_port()
        self.base = f"http://127.0.0.1:{self.http_port}"
        self.config = f"""
server:
  grpc_listen_address: 127.0.0.1:{self.grpc_port}
  http_listen_address: 127.0.0.1:{self.http_port}
bucket:{bucket_yaml}
ingester:
  flush_interval: 100ms
{ingester_extra}
querier:
  sync_interval: 200ms
"""
        d = os.path.join(work, name)
        os.makedirs(d)
        self.strata = lib.Strata(d, "all", self.config)
        self.config_path = self.strata.config_path

    def start(self):
        self.strata.start(ready_url=self.base + "/ready")
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}")
        self.store = ps_grpc.ProfileStoreServiceStub(self.channel)
        return self

    def push(self, requests, timeout=60):
        for req in requests:
            self.store.WriteRaw(req, metadata=[("x-scope-orgid", TENANT)], timeout=timeout)

    def answers(self, types=None):
        """Profile types, and the table report of every type, once every block is visible."""
        out = {"types": sorted(t["id"] for t in qc.http_json(
            self.base, "/api/v1/profile_types", {"start": qc.ms(T0), "end": qc.ms(END)},
            tenant=TENANT)["types"])}
        for t in types or ALL_TYPES:
            j = qc.http_json(self.base, "/api/v1/query", {"query": t, "start": qc.ms(T0),
                                                           "end": qc.ms(END), "report": "table"},
                             tenant=TENANT)
            out[t] = j["table"]
        return out

    def metric(self, name):
        _, _, body = qc.http(self.base, "/metrics")
        m = re.search(rf"^{re.escape(name)} (\S+)$", body.decode(), re.M)
        return float(m.group(1)) if m else None

    def bucket_tool(self, *args):
        return subprocess.run([lib.BINARY, "bucket", *args, "-config", self.config_path],
                              capture_output=True, text=True, timeout=120)

    def stop(self):
        self.channel.close()
        rc = self.strata.stop()
        if rc != 0:
            print(self.strata.logs())
        return rc


def wait_answers(stack, want, timeout=30):
    """Polls until the querier gives `want` (blocks become visible after a sync)."""
    deadline = time.time() + timeout
    got = None
    while time.time() < deadline:
        got = stack.answers()
        if got == want:
            return got
        time.sleep(0.3)
    return got


class BucketPipelineTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = lib.make_workdir("bucket-pipeline")
        cls.requests = list(qc.dataset_requests())
        fs = Stack(cls.work, "fs", filesystem_bucket(os.path.join(cls.work, "data"))).start()
        try:
            fs.push(cls.requests)
            lib.wait_for(lambda: fs.answers()["types"] == ALL_TYPES, what="filesystem blocks")
            cls.want = fs.answers()
        finally:
            fs.stop()

    @classmethod
    def tearDownClass(cls):
        lib.remove_workdir(cls.work)

    def run_backend(self, name, bucket_yaml):
        stack = Stack(self.work, name, bucket_yaml).start()
        try:
            stack.push(self.requests)
            self.assertEqual(wait_answers(stack, self.want), self.want)
            ls = stack.bucket_tool("ls")
            self.assertEqual(ls.returncode, 0, ls.stderr)
            self.assertIn(f"{TENANT}/", ls.stdout)
            verify = stack.bucket_tool("verify")
            self.assertEqual(verify.returncode, 0, verify.stdout + verify.stderr)
            self.assertRegex(verify.stdout, r"\d+ block\(s\) checked, 0 damaged")
            self.assertNotIn("FAIL", verify.stdout)
            # rm-block removes one block from queries.
            block = re.search(rf"OK\s+({TENANT}/\S+)", verify.stdout).group(1)
            rm = stack.bucket_tool("rm-block", block)
            self.assertEqual(rm.returncode, 0, rm.stderr)
            self.assertNotIn(block, stack.bucket_tool("ls").stdout)
        finally:
            self.assertEqual(stack.stop(), 0)

    def test_s3_same_answers_as_filesystem(self):
        if not os.environ.get("STRATA_S3_ENDPOINT"):
            self.skipTest("STRATA_S3_ENDPOINT is not set (tests/servers/radosgw.sh)")
        self.run_backend("s3", s3_bucket(os.environ["STRATA_S3_ENDPOINT"], f"pipeline-{RUN_ID}"))

    def test_azure_same_answers_as_filesystem(self):
        if not os.environ.get("STRATA_AZURE_ENDPOINT"):
            self.skipTest("STRATA_AZURE_ENDPOINT is not set (tests/servers/azurite.sh)")
        self.run_backend("azure", azure_bucket(f"pipeline-{RUN_ID}"))

    def test_s3_faults(self):
        if not os.environ.get("STRATA_S3_ENDPOINT"):
            self.skipTest("STRATA_S3_ENDPOINT is not set (tests/servers/radosgw.sh)")
        proxy = faultproxy.FaultProxy(os.environ["STRATA_S3_ENDPOINT"]).start()
        http = "    http_config:\n      response_header_timeout: 1s\n"
        stack = Stack(self.work, "s3-faults", s3_bucket(proxy.address, f"faults-{RUN_ID}", http),
                      ingester_extra="  upload_attempts: 1000\n").start()
        try:
            self.transient_faults_are_retried(stack, proxy)
            self.failing_meta_upload_is_never_visible(stack, proxy)
        finally:
            proxy.clear()
            self.assertEqual(stack.stop(), 0)
            proxy.stop()

    def transient_faults_are_retried(self, stack, proxy):
        proxy.set_rules([
            {"action": "status", "status": 503, "method": "PUT", "count": 2},
            {"action": "status", "status": 500, "method": "PUT", "count": 1},
            {"action": "reset", "method": "GET", "count": 2},
            {"action": "slow", "delay": 2.0, "method": "GET", "path": "list-type", "count": 1},
        ])
        stack.push(self.requests)
        self.assertEqual(wait_answers(stack, self.want), self.want)
        injected = proxy.stats()["injected"]
        self.assertEqual(injected.get("status"), 3)
        self.assertEqual(injected.get("reset"), 2)
        self.assertEqual(injected.get("slow"), 1)
        # Retried inside the bucket layer: no upload failed as far as the ingester knows.
        self.assertEqual(stack.metric("strata_ingester_upload_failures_total"), 0)

    def failing_meta_upload_is_never_visible(self, stack, proxy):
        before = stack.answers()
        proxy.set_rules([{"action": "status", "status": 500, "method": "PUT", "path": "meta.json"}])
        extra = [qc.write_request([({"__name__": "process_cpu", "job": "late"},
                                    [qc.cpu_pprof(150, {qc.A: 7})])])]
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pending = pool.submit(stack.push, extra, 120)
            lib.wait_for(lambda: (stack.metric("strata_ingester_upload_failures_total") or 0) >= 2,
                         timeout=60, what="upload failures in /metrics")
            self.assertFalse(pending.done(), "a write was acknowledged before it was durable")
            # The data object is there, meta.json is not: queries do not see the block.
            time.sleep(0.5)
            self.assertEqual(stack.answers(), before)
            verify = stack.bucket_tool("verify")
            self.assertIn("PARTIAL", verify.stdout)
            self.assertNotIn("FAIL", verify.stdout)
            self.assertIn("upload failed", stack.strata.logs())
            self.assertNotIn(os.environ["STRATA_S3_SECRET_KEY"], stack.strata.logs())
            proxy.clear()
            pending.result(timeout=60)  # acknowledged once the block is whole
        lib.wait_for(lambda: stack.answers() != before, what="the late block to become visible")
        self.assertNotIn("PARTIAL", stack.bucket_tool("verify").stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
