#!/usr/bin/python3
"""A multi-process Strata cluster on one shared bucket, under faults.

Two `strata ingester` processes, two `strata querier` processes (each subscribed to both
ingesters' nng block announcements and listing the bucket), all on one bucket: S3 (Ceph radosgw)
when STRATA_S3_ENDPOINT is set (ctest runs it through tests/servers/radosgw.sh), else a shared
FILESYSTEM directory. Writers are Python grpcio clients that behave as Strata's pushers do: each
write goes to one ingester, and a write that fails is retried on the other one.

What it proves:
  * load goes through both ingesters (each one's /metrics counts writes);
  * `kill -9` of an ingester under load loses no acknowledged profile: every profile whose WriteRaw
    returned OK is queryable afterwards, through both queriers;
  * both queriers give identical answers (labels, values, merged table, range series);
  * `kill -9` of a querier: the other keeps answering, with the same numbers;
  * a restarted ingester (stateless: nothing on local disk) takes writes again at once.
Every profile carries a unique `seq` label, so "queryable" is checked profile by profile.
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import strata_testlib as lib  # noqa: E402
import test_query_common as qc  # noqa: E402
import grpc  # noqa: E402
from parca.profilestore.v1alpha1 import profilestore_pb2_grpc as ps_grpc  # noqa: E402

CPU_TYPE = "process_cpu:samples:count:cpu:nanoseconds:delta"
SAMPLES_PER_PROFILE = 3  # every profile: stack main>work>burn with 3 samples
WRITERS = 4
RUN_ID = f"{os.getpid()}-{int(time.time())}"


def bucket_yaml(workdir):
    if os.environ.get("STRATA_S3_ENDPOINT"):
        return f"""
  type: S3
  prefix: cluster-{RUN_ID}
  config:
    bucket: {os.environ["STRATA_S3_BUCKET"]}
    endpoint: {os.environ["STRATA_S3_ENDPOINT"]}
    insecure: true
    access_key: {os.environ["STRATA_S3_ACCESS_KEY"]}
    secret_key: {os.environ["STRATA_S3_SECRET_KEY"]}
"""
    return f"""
  type: FILESYSTEM
  config:
    directory: {workdir}/bucket
"""


class Node(lib.Strata):
    """One strata process of the cluster: `name` names its files, `service` is what it runs."""

    def __init__(self, workdir, name, service, config_text):
        super().__init__(workdir, name, config_text)
        self.service = service
        self.http = None

    def start(self, ready_url=None):
        self.log = open(self.log_path, "a")
        self.proc = subprocess.Popen([lib.BINARY, self.service, "-config", self.config_path],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        if ready_url:
            lib.wait_for(lambda: lib.http_get(ready_url)[0] == 200, timeout=60,
                         what=f"{ready_url} to be ready")
        return self

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.proc = None
        self.log.close()


def profile_request(writer, seq, t_ns):
    b = qc.PprofBuilder([("samples", "count"), ("cpu", "nanoseconds")], ("cpu", "nanoseconds"),
                        qc.PERIOD, t_ns, qc.DURATION)
    b.sample(("main", "work", f"burn_w{writer}"), [SAMPLES_PER_PROFILE,
                                                   SAMPLES_PER_PROFILE * qc.CPU_NS_PER_SAMPLE])
    labels = {"__name__": "process_cpu", "job": "cluster", "writer": str(writer), "seq": seq}
    return qc.write_request([(labels, [b.bytes()])])


class Load:
    """WRITERS threads writing unique profiles, alternating between the ingesters, retrying a
    failed write on the other ingester as Strata's pusher does. Records what was acknowledged."""

    def __init__(self, addresses, t0_ns):
        self.addresses = addresses
        self.t0_ns = t0_ns
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.acked = set()
        self.sent = set()
        self.failed_attempts = 0
        self.by_address = {a: 0 for a in addresses}
        self.threads = []

    def _writer(self, w):
        channels = [grpc.insecure_channel(a) for a in self.addresses]
        stubs = [ps_grpc.ProfileStoreServiceStub(c) for c in channels]
        i = 0
        while not self.stop_event.is_set():
            seq = f"{w}-{i}"
            req = profile_request(w, seq, self.t0_ns + (i * WRITERS + w) * 1_000_000)
            with self.lock:
                self.sent.add(seq)
            first = (w + i) % len(stubs)
            for attempt in range(20):
                k = (first + attempt) % len(stubs)
                try:
                    stubs[k].WriteRaw(req, timeout=15)
                except grpc.RpcError:
                    with self.lock:
                        self.failed_attempts += 1
                    time.sleep(0.05)
                    continue
                with self.lock:
                    self.acked.add(seq)
                    self.by_address[self.addresses[k]] += 1
                break
            i += 1
        for c in channels:
            c.close()

    def start(self):
        for w in range(WRITERS):
            t = threading.Thread(target=self._writer, args=(w,), daemon=True)
            t.start()
            self.threads.append(t)

    def stop(self):
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout=60)


class ClusterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        lib.load_stubs()
        cls.work = lib.make_workdir("cluster")
        cls.t0 = (int(time.time()) - 600) * 1_000_000_000
        ports = {name: lib.free_port() for name in
                 ("i0_grpc", "i0_http", "i0_ann", "i1_grpc", "i1_http", "i1_ann",
                  "q0_grpc", "q0_http", "q1_grpc", "q1_http")}
        cls.ports = ports
        bucket = bucket_yaml(cls.work)
        cls.ingesters = []
        for n in (0, 1):
            node = Node(cls.work, f"ingester{n}", "ingester", f"""
server:
  http_listen_address: 127.0.0.1:{ports[f"i{n}_http"]}
  grpc_listen_address: 127.0.0.1:{ports[f"i{n}_grpc"]}
bucket:{bucket}
ingester:
  flush_interval: 500ms
  announce_listen_address: tcp://127.0.0.1:{ports[f"i{n}_ann"]}
""")
            node.http = f"http://127.0.0.1:{ports[f'i{n}_http']}"
            node.grpc = f"127.0.0.1:{ports[f'i{n}_grpc']}"
            cls.ingesters.append(node)
        announce = ", ".join(f"tcp://127.0.0.1:{ports[f'i{n}_ann']}" for n in (0, 1))
        cls.queriers = []
        for n in (0, 1):
            node = Node(cls.work, f"querier{n}", "querier", f"""
server:
  http_listen_address: 127.0.0.1:{ports[f"q{n}_http"]}
  grpc_listen_address: 127.0.0.1:{ports[f"q{n}_grpc"]}
bucket:{bucket}
querier:
  sync_interval: 1s
  announce_addresses: [{announce}]
""")
            node.http = f"http://127.0.0.1:{ports[f'q{n}_http']}"
            cls.queriers.append(node)
        for node in cls.ingesters + cls.queriers:
            node.start(ready_url=node.http + "/ready")

    @classmethod
    def tearDownClass(cls):
        for node in cls.ingesters + cls.queriers:
            if node.proc is not None:
                node.stop()
        if os.environ.get("STRATA_KEEP_WORKDIR"):
            print(f"work directory kept: {cls.work}")
        else:
            lib.remove_workdir(cls.work)

    # ---- queries ---------------------------------------------------------------------------

    def window(self):
        return {"start": qc.ms(self.t0 - 10**9), "end": qc.ms(self.t0 + 3600 * 10**9)}

    def seqs(self, querier):
        params = {"match": f'{CPU_TYPE}{{job="cluster"}}', **self.window()}
        return set(qc.http_json(querier.http, "/api/v1/labels/seq/values", params)["label_values"])

    def answers(self, querier):
        """What a user sees from one querier: label names, writers, merged table, range series."""
        w = self.window()
        sel = f'{CPU_TYPE}{{job="cluster"}}'
        labels = qc.http_json(querier.http, "/api/v1/labels", {"match": sel, **w})
        table = qc.http_json(querier.http, "/api/v1/query",
                             {"query": sel, "mode": "merge", "report": "table", **w})
        rng = qc.http_json(querier.http, "/api/v1/query_range",
                           {"query": sel, "start": w["start"], "end": w["end"], "step": "3600s",
                            "sum_by": "writer"})
        return labels, table, rng

    # ---- the scenario ----------------------------------------------------------------------

    def test_cluster_under_faults(self):
        addresses = [n.grpc for n in self.ingesters]
        load = Load(addresses, self.t0)
        load.start()
        lib.wait_for(lambda: len(load.acked) >= 40, timeout=60, what="first acknowledged writes")

        # kill -9 one ingester under load; writers fail over to the other.
        acked_before_kill = len(load.acked)
        self.ingesters[0].kill9()
        killed_at = time.time()
        lib.wait_for(lambda: len(load.acked) >= acked_before_kill + 40, timeout=60,
                     what="writes acknowledged by the surviving ingester")
        # The stateless ingester comes back and takes writes again.
        self.ingesters[0].start(ready_url=self.ingesters[0].http + "/ready")
        served_before = load.by_address[addresses[0]]
        lib.wait_for(lambda: load.by_address[addresses[0]] > served_before + 10, timeout=60,
                     what="the restarted ingester to take writes")
        load.stop()
        print(f"load: sent={len(load.sent)} acked={len(load.acked)} "
              f"failed_attempts={load.failed_attempts} per_ingester={load.by_address} "
              f"ingester killed {time.time() - killed_at:.1f}s before the load stopped")
        self.assertGreater(load.failed_attempts, 0, "the kill should have failed some writes")
        for a in addresses:
            self.assertGreater(load.by_address[a], 10, f"ingester {a} took too few writes")

        # Nothing acknowledged is lost: every acknowledged seq is queryable on both queriers.
        for q in self.queriers:
            lib.wait_for(lambda q=q: load.acked <= self.seqs(q), timeout=30,
                         what=f"{q.service} {q.http} to show every acknowledged profile")
            got = self.seqs(q)
            self.assertTrue(got <= load.sent, f"profiles nobody sent: {sorted(got - load.sent)[:5]}")

        # Both queriers give identical answers.
        a0 = self.answers(self.queriers[0])
        a1 = self.answers(self.queriers[1])
        self.assertEqual(a0, a1)
        table = a0[1]
        # samples:count is reported scaled by the period (CPU nanoseconds), as Parca does. A write
        # that was durable but not acknowledged when its ingester died was retried elsewhere: it
        # may be stored twice (at-least-once; the compactor removes such duplicates), never more
        # often than writes failed.
        per_profile = SAMPLES_PER_PROFILE * qc.PERIOD
        stored = table["total"] // per_profile
        self.assertEqual(table["total"] % per_profile, 0)
        self.assertGreaterEqual(stored, len(load.acked))
        self.assertLessEqual(stored, len(load.sent) + load.failed_attempts)
        print(f"profiles stored: {stored} for {len(load.acked)} acknowledged")
        names = {row["name"] for row in table["table"]["rows"]}
        self.assertTrue({"main", "work", "burn_w0", "burn_w3"} <= names, names)

        # kill -9 a querier: the other keeps answering, with the same numbers.
        self.queriers[0].kill9()
        self.assertEqual(self.answers(self.queriers[1]), a1)
        self.assertTrue(load.acked <= self.seqs(self.queriers[1]))


if __name__ == "__main__":
    unittest.main(verbosity=2)
