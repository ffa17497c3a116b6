#!/usr/bin/python3
"""A multi-process Strata cluster on one shared bucket, under faults.

Two `strata ingester` processes, two `strata querier` processes (each subscribed to both
ingesters' nng block announcements and listing the bucket), a `strata compactor`, two
`strata scraper` processes sharing real Go pprof targets by hashmod, and (as root, with BTF) the
eBPF agent pushing to both ingesters - all on one bucket: S3 (Ceph radosgw) when
STRATA_S3_ENDPOINT is set (ctest runs it through tests/servers/radosgw.sh), else a shared
FILESYSTEM directory. Writers are Python grpcio clients that behave as Strata's pushers do: each
write goes to one ingester, and a write that fails is retried on the other one.

What it proves, in order:
  1. load goes through both ingesters; `kill -9` of an ingester under load loses no acknowledged
     profile (every profile whose WriteRaw returned OK is queryable afterwards, through both
     queriers); the restarted ingester (stateless) takes writes again at once;
  2. the two scrapers split the Go targets by hashmod with no target scraped by both; when one
     scraper is killed its targets are not picked up by the other, and they resume when it returns;
  3. while the compactor merges and deletes blocks underneath them, both queriers keep every
     acknowledged profile and give identical answers (labels, values, merged table, range series);
  4. `kill -9` of a querier: the other keeps answering, with the same numbers;
  5. the agent's whole-system profiles reach both queriers through either ingester.
Every load profile carries a unique `seq` label, so "queryable" is checked profile by profile.
"""
import hashlib
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
SCRAPED_TYPE = "memory:alloc_space:bytes:space:bytes"
AGENT_TYPE = "strata_agent:samples:count:cpu:nanoseconds:delta"
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

    def __init__(self, addresses):
        self.addresses = addresses
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
            req = profile_request(w, seq, time.time_ns())
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


def hashmod_shard(address, modulus):
    """The shard Prometheus's hashmod gives: md5 of the value, low 8 bytes big-endian, mod."""
    return int.from_bytes(hashlib.md5(address.encode()).digest()[8:], "big") % modulus


def metric(http, name):
    text = lib.http_get(http + "/metrics")[1].decode()
    total = 0
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def can_run_agent():
    """Root, kernel BTF, and a binary built with the agent (STRATA_AGENT, on by default)."""
    if os.geteuid() != 0 or not os.path.exists("/sys/kernel/btf/vmlinux"):
        return False
    usage = subprocess.run([lib.BINARY], capture_output=True, text=True, timeout=60).stderr
    return "agent -remote-store" in usage


class ClusterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        lib.load_stubs()
        cls.work = lib.make_workdir("cluster")
        cls.t_start = time.time_ns()
        cls.nodes = []
        cls.gotargets = []
        try:
            cls.start_cluster()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def node(cls, name, service, config, http_port):
        n = Node(cls.work, name, service, config)
        n.http = f"http://127.0.0.1:{http_port}"
        cls.nodes.append(n)
        return n

    @classmethod
    def start_cluster(cls):
        bucket = bucket_yaml(cls.work)
        cls.ingesters = []
        announce = []
        for n in (0, 1):
            grpc_port, http_port, ann = lib.free_port(), lib.free_port(), lib.free_port()
            node = cls.node(f"ingester{n}", "ingester", f"""
server:
  http_listen_address: 127.0.0.1:{http_port}
  grpc_listen_address: 127.0.0.1:{grpc_port}
bucket:{bucket}
ingester:
  flush_interval: 500ms
  announce_listen_address: tcp://127.0.0.1:{ann}
""", http_port)
            node.grpc = f"127.0.0.1:{grpc_port}"
            announce.append(f"tcp://127.0.0.1:{ann}")
            cls.ingesters.append(node)
        cls.queriers = []
        for n in (0, 1):
            grpc_port, http_port = lib.free_port(), lib.free_port()
            cls.queriers.append(cls.node(f"querier{n}", "querier", f"""
server:
  http_listen_address: 127.0.0.1:{http_port}
  grpc_listen_address: 127.0.0.1:{grpc_port}
bucket:{bucket}
querier:
  sync_interval: 1s
  announce_addresses: [{", ".join(announce)}]
""", http_port))
        http_port = lib.free_port()
        # Small aligned windows and short delays, so merges and deletions happen during the test.
        cls.compactor = cls.node("compactor", "compactor", f"""
server:
  http_listen_address: 127.0.0.1:{http_port}
  grpc_listen_address: 127.0.0.1:{lib.free_port()}
bucket:{bucket}
compactor:
  compaction_interval: 2s
  block_ranges: [10s, 1m]
  consistency_delay: 2s
  delete_delay: 10s
""", http_port)
        for node in cls.nodes:
            node.start(ready_url=node.http + "/ready")
        cls.start_scrapers(bucket)

    @classmethod
    def start_scrapers(cls, bucket):
        # Go targets until each of the two hashmod shards owns at least one.
        shards = {0: [], 1: []}
        while not (shards[0] and shards[1]) or len(cls.gotargets) < 3:
            d = os.path.join(cls.work, f"gotarget{len(cls.gotargets)}")
            os.makedirs(d)
            t = lib.GoTarget(d)
            if cls.gotargets:  # one build is enough
                t.binary = cls.gotargets[0].binary
            t.start()
            cls.gotargets.append(t)
            shards[hashmod_shard(t.address, 2)].append(t.address)
        cls.shards = shards
        addresses = ", ".join(f"'{t.address}'" for t in cls.gotargets)
        ingesters = ", ".join(f"'{n.grpc}'" for n in cls.ingesters)
        cls.scrapers = []
        for shard in (0, 1):
            grpc_port, http_port = lib.free_port(), lib.free_port()
            node = cls.node(f"scraper{shard}", "scraper", f"""
server:
  http_listen_address: 127.0.0.1:{http_port}
  grpc_listen_address: 127.0.0.1:{grpc_port}
bucket:{bucket}
scraper:
  ingester_addresses: [{ingesters}]
scrape_configs:
  - job_name: go
    scrape_interval: 1s
    static_configs:
      - targets: [{addresses}]
    relabel_configs:
      - {{source_labels: [__address__], modulus: 2, target_label: __tmp_hash, action: hashmod}}
      - {{source_labels: [__tmp_hash], regex: '{shard}', action: keep}}
      - {{target_label: scraper, replacement: 's{shard}'}}
    profiling_config:
      pprof_config:
        block: {{enabled: false}}
        goroutine: {{enabled: false}}
        mutex: {{enabled: false}}
        process_cpu: {{enabled: false}}
""", http_port)
            node.start(ready_url=node.http + "/ready")
            cls.scrapers.append(node)

    @classmethod
    def tearDownClass(cls):
        for node in cls.nodes:
            if node.proc is not None:
                node.stop()
        for t in cls.gotargets:
            t.stop()
        if os.environ.get("STRATA_KEEP_WORKDIR"):
            print(f"work directory kept: {cls.work}")
        else:
            lib.remove_workdir(cls.work)

    # ---- queries ---------------------------------------------------------------------------

    def window(self):
        return {"start": qc.ms(self.t_start - 60 * 10**9), "end": qc.ms(time.time_ns() + 60 * 10**9)}

    def live_querier(self):
        return next(q for q in self.queriers if q.proc is not None)

    def seqs(self, querier):
        params = {"match": f'{CPU_TYPE}{{job="cluster"}}', **self.window()}
        return set(qc.http_json(querier.http, "/api/v1/labels/seq/values", params)["label_values"])

    def answers(self, querier, w):
        """What a user sees from one querier: label names, writers, merged table, range series."""
        sel = f'{CPU_TYPE}{{job="cluster"}}'
        labels = qc.http_json(querier.http, "/api/v1/labels", {"match": sel, **w})
        table = qc.http_json(querier.http, "/api/v1/query",
                             {"query": sel, "mode": "merge", "report": "table", **w})
        rng = qc.http_json(querier.http, "/api/v1/query_range",
                           {"query": sel, "start": w["start"], "end": w["end"], "step": "3600s",
                            "sum_by": "writer"})
        return labels, table, rng

    def scraped(self, querier, since_ns):
        """instance -> set of scraper labels of the scraped profiles newer than since_ns (empty
        while none are visible yet: the querier answers NOT_FOUND)."""
        params = {"query": f'{SCRAPED_TYPE}{{job="go"}}', "start": qc.ms(since_ns),
                  "end": qc.ms(time.time_ns() + 10**9), "step": "1s",
                  "sum_by": ["instance", "scraper"]}
        status, _, raw = qc.http(querier.http, "/api/v1/query_range", params,
                                 accept="application/json")
        if status == 404 and b"NOT_FOUND" in raw:
            return {}
        self.assertEqual(status, 200, f"query_range {params}: HTTP {status}: {raw[:500]!r}")
        body = json.loads(raw)
        out = {}
        for series in body["series"]:
            if series["samples"]:
                labels = series["labels"]
                out.setdefault(labels["instance"], set()).add(labels["scraper"])
        return out

    # ---- the scenario, in order ------------------------------------------------------------

    def test_1_ingester_killed_under_load(self):
        addresses = [n.grpc for n in self.ingesters]
        load = Load(addresses)
        load.start()
        try:
            lib.wait_for(lambda: len(load.acked) >= 40, timeout=60, what="first acknowledged writes")
            acked_before_kill = len(load.acked)
            self.ingesters[0].kill9()
            lib.wait_for(lambda: len(load.acked) >= acked_before_kill + 40, timeout=60,
                         what="writes acknowledged by the surviving ingester")
            # The stateless ingester comes back and takes writes again.
            self.ingesters[0].start(ready_url=self.ingesters[0].http + "/ready")
            served_before = load.by_address[addresses[0]]
            lib.wait_for(lambda: load.by_address[addresses[0]] > served_before + 10, timeout=60,
                         what="the restarted ingester to take writes")
        finally:
            load.stop()
        print(f"load: sent={len(load.sent)} acked={len(load.acked)} "
              f"failed_attempts={load.failed_attempts} per_ingester={load.by_address}")
        self.assertGreater(load.failed_attempts, 0, "the kill should have failed some writes")
        for a in addresses:
            self.assertGreater(load.by_address[a], 10, f"ingester {a} took too few writes")
        # Nothing acknowledged is lost: every acknowledged seq is queryable on both queriers.
        for q in self.queriers:
            lib.wait_for(lambda q=q: load.acked <= self.seqs(q), timeout=30,
                         what=f"{q.http} to show every acknowledged profile")
            got = self.seqs(q)
            self.assertTrue(got <= load.sent, f"profiles nobody sent: {sorted(got - load.sent)[:5]}")
        type(self).load = load

    def test_2_scrapers_share_targets(self):
        q = self.live_querier()
        t0 = time.time_ns()
        everyone = set(self.shards[0]) | set(self.shards[1])
        lib.wait_for(lambda: set(self.scraped(q, t0)) == everyone, timeout=60,
                     what="every Go target scraped")
        seen = self.scraped(q, self.t_start)
        for shard in (0, 1):
            for instance in self.shards[shard]:
                self.assertEqual(seen[instance], {f"s{shard}"},
                                 f"{instance} scraped by {seen[instance]}, want only s{shard}")
        # One scraper dies: its targets are not taken over by the other...
        self.scrapers[1].kill9()
        time.sleep(2)  # profiles scraped just before the kill may still be in flight
        killed = time.time_ns()
        time.sleep(5)
        # On a loaded machine scrape, flush and the querier's sync can take longer than those 5 s:
        # wait until the live scraper's targets show profiles since the kill, so the window
        # checked below holds real scrapes.
        lib.wait_for(lambda: set(self.shards[0]) <= set(self.scraped(q, killed)), timeout=60,
                     what="the live scraper's targets after the kill")
        after = self.scraped(q, killed)
        for instance in self.shards[1]:
            self.assertNotIn(instance, after, "a dead scraper's target was scraped by the other")
        for instance in self.shards[0]:
            self.assertEqual(after.get(instance), {"s0"})
        # ...and resume when it returns.
        self.scrapers[1].start(ready_url=self.scrapers[1].http + "/ready")
        back = time.time_ns()
        lib.wait_for(lambda: set(self.shards[1]) <= set(self.scraped(q, back)), timeout=60,
                     what="the returning scraper's targets to resume")
        for instance, scrapers in self.scraped(q, self.t_start).items():
            self.assertEqual(len(scrapers), 1, f"{instance} scraped by {scrapers}")

    def test_3_compaction_under_queries(self):
        load = type(self).load
        lib.wait_for(lambda: metric(self.compactor.http, "strata_compactor_jobs_total") >= 2,
                     timeout=120, what="the compactor to merge blocks")
        lib.wait_for(lambda: metric(self.compactor.http, "strata_compactor_blocks_deleted_total") >= 1,
                     timeout=120, what="the compactor to delete merged sources")
        self.assertEqual(metric(self.compactor.http, "strata_compactor_halted"), 0)
        self.assertEqual(metric(self.compactor.http, "strata_compactor_jobs_failed_total"), 0)
        w = self.window()
        for q in self.queriers:
            self.assertTrue(load.acked <= self.seqs(q), "an acknowledged profile was lost")
        # Both queriers give identical answers (they may each be a listing apart: retry briefly).
        def same():
            return self.answers(self.queriers[0], w) == self.answers(self.queriers[1], w)
        lib.wait_for(same, timeout=30, what="both queriers to agree")
        table = self.answers(self.queriers[0], w)[1]
        # samples:count is reported scaled by the period (CPU nanoseconds), as Parca does. A write
        # that was durable but not acknowledged when its ingester died was retried elsewhere: it
        # may be stored twice until the compactor merges its window (identical profiles are kept
        # once), never more often than writes failed.
        per_profile = SAMPLES_PER_PROFILE * qc.PERIOD
        stored = table["total"] // per_profile
        self.assertEqual(table["total"] % per_profile, 0)
        self.assertGreaterEqual(stored, len(load.acked))
        self.assertLessEqual(stored, len(load.sent) + load.failed_attempts)
        names = {row["name"] for row in table["table"]["rows"]}
        self.assertTrue({"main", "work", "burn_w0", "burn_w3"} <= names, names)
        print(f"profiles stored: {stored} for {len(load.acked)} acknowledged; compactor jobs "
              f"{metric(self.compactor.http, 'strata_compactor_jobs_total'):.0f}, blocks deleted "
              f"{metric(self.compactor.http, 'strata_compactor_blocks_deleted_total'):.0f}")
        type(self).agreed = (w, self.answers(self.queriers[1], w))

    def test_4_querier_killed(self):
        w, expected = type(self).agreed
        self.queriers[0].kill9()
        self.assertEqual(self.answers(self.queriers[1], w), expected)
        self.assertTrue(type(self).load.acked <= self.seqs(self.queriers[1]))

    @unittest.skipUnless(can_run_agent(), "needs root and /sys/kernel/btf/vmlinux")
    def test_5_agent_pushes_to_both_ingesters(self):
        agent = self.node("agent", "agent", "", lib.free_port())
        agent.log = open(agent.log_path, "w")
        agent.proc = subprocess.Popen(
            [lib.BINARY, "agent", "-remote-store", ",".join(n.grpc for n in self.ingesters),
             "-window", "2s", "-node", "cluster-node", "-http-address", ""],
            stdout=agent.log, stderr=subprocess.STDOUT)
        q = self.live_querier()
        params = {"match": f'{AGENT_TYPE}{{node="cluster-node"}}', **self.window()}
        lib.wait_for(lambda: len(qc.http_json(q.http, "/api/v1/labels/comm/values", params)
                                 ["label_values"]) >= 2, timeout=60,
                     what="the agent's profiles to be queryable")
        comms = qc.http_json(q.http, "/api/v1/labels/comm/values", params)["label_values"]
        self.assertIn("gotarget", comms)  # the Go targets are busy being scraped
        pushed = [metric(n.http, "strata_ingester_profiles_total") for n in self.ingesters]
        print(f"agent: comms {sorted(comms)[:10]}...; ingester profiles {pushed}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
