#!/usr/bin/python3
"""End-to-end ingest test with real parts: a Go program's real net/http/pprof profiles, pushed
through Parca's WriteRaw by Python grpcio (an independent gRPC client), stored by `strata ingester`
in a filesystem bucket, then read back from the blocks with `strata block dump --json` and compared
exactly with what Python's own protobuf parsing of the same pprof files says.
"""
import concurrent.futures
# Imported here, not lazily by concurrent.futures.__getattr__ inside a test: a lazy import while
# other threads (fault proxies, grpc) import can hit a CPython 3.11 import-lock KeyError.
import concurrent.futures.thread  # noqa: F401
import glob
import json
import os
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_testlib as lib  # noqa: E402

lib.load_stubs()
import grpc  # noqa: E402
from parca.profilestore.v1alpha1 import profilestore_pb2 as ps  # noqa: E402
from parca.profilestore.v1alpha1 import profilestore_pb2_grpc as ps_grpc  # noqa: E402


def write_request(series):
    """series: list of (labels dict, [raw pprof bytes])"""
    req = ps.WriteRawRequest()
    for labels, raws in series:
        s = req.series.add()
        for k, v in labels.items():
            s.labels.labels.add(name=k, value=v)
        for raw in raws:
            s.samples.add(raw_profile=raw)
    return req


class IngestPipelineTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = lib.make_workdir("ingest")
        cls.target = lib.GoTarget(cls.work).start()
        # Let the target run so the heap and CPU profiles have content.
        time.sleep(0.5)
        cls.cpu = cls.target.fetch("/debug/pprof/profile?seconds=1")
        cls.heap = cls.target.fetch("/debug/pprof/allocs")
        cls.grpc_port = lib.free_port()
        cls.http_port = lib.free_port()
        cls.data_dir = os.path.join(cls.work, "data")
        config = f"""
server:
  grpc_listen_address: 127.0.0.1:{cls.grpc_port}
  http_listen_address: 127.0.0.1:{cls.http_port}
bucket:
  type: FILESYSTEM
  config:
    directory: {cls.data_dir}
ingester:
  flush_interval: 200ms
"""
        cls.strata = lib.Strata(cls.work, "ingester", config).start(
            ready_url=f"http://127.0.0.1:{cls.http_port}/ready")
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{cls.grpc_port}")
        cls.store = ps_grpc.ProfileStoreServiceStub(cls.channel)
        cls.agents = ps_grpc.AgentsServiceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        rc = cls.strata.stop()
        cls.target.stop()
        if rc != 0:
            print(cls.strata.logs())
        lib.remove_workdir(cls.work)

    def blocks(self, tenant):
        return sorted(os.path.dirname(p) for p in glob.glob(os.path.join(self.data_dir, tenant, "*", "meta.json")))

    def dump(self, block_dir):
        out = subprocess.run([lib.BINARY, "block", "dump", block_dir, "--json"], check=True,
                             capture_output=True, text=True).stdout
        return json.loads(out)

    def stored_profiles(self, tenant):
        """All profiles in all blocks of tenant, keyed by (type, job label)."""
        found = {}
        for b in self.blocks(tenant):
            d = self.dump(b)
            for p in d["profiles"]:
                series = d["series"][p["series"]]
                found.setdefault(series["type"], []).append((series["labels"], p))
        return found

    def test_real_go_profiles_round_trip_exactly(self):
        labels_cpu = {"__name__": "process_cpu", "job": "gotarget", "instance": self.target.address,
                      "node": "node-a"}
        labels_mem = {"__name__": "memory", "job": "gotarget", "instance": self.target.address}
        self.store.WriteRaw(write_request([(labels_cpu, [self.cpu]), (labels_mem, [self.heap])]),
                            metadata=[("x-scope-orgid", "team-a")], timeout=30)
        # Acknowledged means durable: the block is complete in the bucket already.
        self.assertGreaterEqual(len(self.blocks("team-a")), 1)
        stored = self.stored_profiles("team-a")

        cpu = lib.pprof_expectations(lib.decode_pprof(self.cpu))
        heap = lib.pprof_expectations(lib.decode_pprof(self.heap))
        expected = {}
        for (st, unit), e in cpu.items():
            expected[f"process_cpu:{st}:{unit}:cpu:nanoseconds:delta"] = e
        for (st, unit), e in heap.items():
            expected[f"memory:{st}:{unit}:space:bytes"] = e
        self.assertEqual(len(expected), 6)
        for type_name, e in expected.items():
            if e["total"] == 0:
                self.assertNotIn(type_name, stored)
                continue
            self.assertIn(type_name, stored, f"missing {type_name}; have {sorted(stored)}")
            self.assertEqual(len(stored[type_name]), 1)
            labels, p = stored[type_name][0]
            self.assertEqual(labels["job"], "gotarget")
            self.assertNotIn("__name__", labels)
            self.assertEqual(p["total"], e["total"], type_name)
            self.assertEqual(p["samples"], e["stacks"], type_name)
            self.assertEqual(set(p["functions"]), e["functions"], type_name)
        cpu_samples = stored["process_cpu:samples:count:cpu:nanoseconds:delta"][0][1]
        self.assertIn("main.fibonacciStep", cpu_samples["functions"])
        self.assertIn("main.cpuHotLoop", cpu_samples["functions"])
        self.assertGreater(cpu_samples["duration_ns"], 0)
        self.assertEqual(cpu_samples["period"], 10000000)  # Go's 100 Hz

        agents = self.agents.Agents(ps.AgentsRequest(), timeout=10).agents
        ids = [a.id for a in agents]
        self.assertTrue(any(i.startswith("node-a ") for i in ids), ids)
        self.assertTrue(all(a.last_error == "" for a in agents if a.id.startswith("node-a ")))
        # The same list as JSON for the web UI.
        status, body = lib.http_get(f"http://127.0.0.1:{self.http_port}/api/v1/agents")
        self.assertEqual(status, 200)
        listed = json.loads(body)["agents"]
        node_a = [a for a in listed if a["id"].startswith("node-a ")]
        self.assertEqual(len(node_a), 1)
        self.assertEqual(node_a[0]["last_error"], "")
        self.assertRegex(node_a[0]["last_push"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z$")
        # protojson Duration: seconds with nine decimals and an "s", as the UI and Parca read it.
        self.assertRegex(node_a[0]["last_push_duration"], r"^\d+\.\d{9}s$")

    def test_bad_profiles_fail_alone(self):
        good = write_request([({"__name__": "process_cpu", "job": "concurrent"}, [self.cpu])])
        bad = write_request([({"__name__": "process_cpu", "job": "bad"}, [self.cpu, b"\x0a\x05garbage"])])
        results = {}

        def push(kind, i):
            req = good if kind == "good" else bad
            try:
                self.store.WriteRaw(req, metadata=[("x-scope-orgid", "concurrency")], timeout=30)
                return (kind, i, grpc.StatusCode.OK, "")
            except grpc.RpcError as e:
                return (kind, i, e.code(), e.details())

        with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
            futures = [pool.submit(push, kind, i) for i in range(12) for kind in ("good", "bad")]
            for f in futures:
                kind, i, code, details = f.result()
                results[(kind, i)] = (code, details)
        for i in range(12):
            self.assertEqual(results[("good", i)][0], grpc.StatusCode.OK)
            code, details = results[("bad", i)]
            self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("series 0 sample 1: invalid pprof", details)
        stored = self.stored_profiles("concurrency")
        jobs = [labels["job"] for labels, _ in stored["process_cpu:samples:count:cpu:nanoseconds:delta"]]
        self.assertEqual(jobs.count("concurrent"), 12)
        self.assertEqual(jobs.count("bad"), 0)

    def test_label_validation(self):
        cases = [
            ({"job": "x"}, "__name__"),
            ({"__name__": "process_cpu", "bad-name": "x"}, "bad-name"),
            ({"__name__": "process cpu"}, "not a valid profile name"),
        ]
        for labels, needle in cases:
            with self.assertRaises(grpc.RpcError) as ctx:
                self.store.WriteRaw(write_request([(labels, [self.cpu])]), timeout=10)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn(needle, ctx.exception.details())
        with self.assertRaises(grpc.RpcError) as ctx:
            self.store.WriteRaw(write_request([({"__name__": "p"}, [self.cpu])]),
                                metadata=[("x-scope-orgid", "../etc")], timeout=10)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("tenant", ctx.exception.details())

    def test_metrics_and_default_tenant(self):
        self.store.WriteRaw(write_request([({"__name__": "process_cpu", "job": "anon"}, [self.cpu])]),
                            timeout=30)
        self.assertGreaterEqual(len(self.blocks("anonymous")), 1)
        status, body = lib.http_get(f"http://127.0.0.1:{self.http_port}/metrics")
        self.assertEqual(status, 200)
        text = body.decode()
        for name in ("strata_ingester_profiles_total", "strata_ingester_blocks_written_total",
                     "strata_ingester_write_duration_seconds_bucket", "process_resident_memory_bytes"):
            self.assertIn(name, text)
        uploads = [line for line in text.splitlines()
                   if line.startswith('strata_bucket_operations_total{operation="upload"} ')]
        self.assertEqual(len(uploads), 1)
        self.assertGreaterEqual(int(uploads[0].split()[1]), 2)  # data object and meta.json
        value = [line for line in text.splitlines() if line.startswith("strata_ingester_blocks_written_total ")]
        self.assertEqual(len(value), 1)
        self.assertGreaterEqual(int(float(value[0].split()[1])), 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
