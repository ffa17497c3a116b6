#!/usr/bin/python3
"""The scraper end to end, with real parts: the Go program in tests/gotarget (net/http/pprof, built
from source) scraped by `strata all`, every default profile type queried back through the
querier's gRPC API with the right name and delta flag; targets that hang, answer 500 or answer
garbage are unhealthy with a clear last error while the Go target keeps being scraped (read through
ScrapeService/Targets with Python grpcio and through GET /api/v1/targets); SIGHUP reloads, valid
and invalid; and two `strata scraper` processes sharing six targets with hashmod relabeling, each
target scraped by exactly one of them.
"""
import base64
import hashlib
import http.server
import json
import os
import signal
import socketserver
import ssl
import subprocess
import sys
import threading
import time
import unittest
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_testlib as lib  # noqa: E402

lib.load_stubs()
import grpc  # noqa: E402
from google.protobuf import timestamp_pb2  # noqa: E402
from parca.query.v1alpha1 import query_pb2 as qpb  # noqa: E402
from parca.query.v1alpha1 import query_pb2_grpc as q_grpc  # noqa: E402
from parca.scrape.v1alpha1 import scrape_pb2 as spb  # noqa: E402
from parca.scrape.v1alpha1 import scrape_pb2_grpc as s_grpc  # noqa: E402

with open(os.path.join(lib.SOURCE_DIR, "lib", "pprof", "testdata", "go_heap.pb.gz"), "rb") as _f:
    HEAP = _f.read()

# Parca's names for what Go's runtime serves on the default endpoints.
EXPECTED_TYPES = {
    "memory:alloc_objects:count:space:bytes",
    "memory:alloc_space:bytes:space:bytes",
    "memory:inuse_objects:count:space:bytes",
    "memory:inuse_space:bytes:space:bytes",
    "block:contentions:count:contentions:count",
    "block:delay:nanoseconds:contentions:count",
    "mutex:contentions:count:contentions:count",
    "mutex:delay:nanoseconds:contentions:count",
    "goroutine:goroutine:count:goroutine:count",
    "process_cpu:samples:count:cpu:nanoseconds:delta",
    "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta",
}


class FakeTarget:
    """An HTTP server on its own port that answers pprof paths in one way: good, 500, garbage or
    hang. Records the query string of every request, and the Authorization and Host headers. With
    an ssl context it serves HTTPS; with `authorization` it answers 401 to any other header."""

    def __init__(self, mode, ssl_context=None, authorization=None):
        self.mode = mode
        self.queries = []
        self.hosts = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                outer.queries.append(urllib.parse.urlparse(self.path).query)
                outer.hosts.append(self.headers.get("Host"))
                if authorization and self.headers.get("Authorization") != authorization:
                    self.send_response(401)
                    self.end_headers()
                    return
                if outer.mode == "hang":
                    time.sleep(30)
                    return
                if outer.mode == "500":
                    self.send_response(500)
                    self.end_headers()
                    self.wfile.write(b"internal error\n")
                    return
                body = HEAP if outer.mode == "good" else b"<html>definitely not pprof</html>"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        if ssl_context is not None:
            self.server.socket = ssl_context.wrap_socket(self.server.socket, server_side=True)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def base_config(work, grpc_port, http_port, extra):
    return f"""
server:
  grpc_listen_address: 127.0.0.1:{grpc_port}
  http_listen_address: 127.0.0.1:{http_port}
bucket:
  type: FILESYSTEM
  config:
    directory: {os.path.join(work, "data")}
ingester:
  flush_interval: 100ms
querier:
  sync_interval: 200ms
{extra}
"""


def targets_grpc(port, state=spb.TargetsRequest.STATE_ANY_UNSPECIFIED):
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        return s_grpc.ScrapeServiceStub(ch).Targets(spb.TargetsRequest(state=state), timeout=10)


def labels_of(label_set):
    return {l.name: l.value for l in label_set.labels}


class ScraperTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = lib.make_workdir("scraper")
        cls.go = lib.GoTarget(cls.work).start()
        cls.hang = FakeTarget("hang")
        cls.fail = FakeTarget("500")
        cls.garbage = FakeTarget("garbage")
        cls.grpc_port = lib.free_port()
        cls.http_port = lib.free_port()
        cls.jobs = f"""
scrape_configs:
  - job_name: go
    scrape_interval: 2s
    static_configs:
      - targets: ['{cls.go.address}']
        labels: {{env: test}}
  - job_name: broken
    scrape_interval: 2s
    scrape_timeout: 1s
    static_configs:
      - targets: ['{cls.hang.address}', '{cls.fail.address}', '{cls.garbage.address}']
    profiling_config:
      pprof_config:
        block: {{enabled: false}}
        goroutine: {{enabled: false}}
        mutex: {{enabled: false}}
        process_cpu: {{enabled: false}}
"""
        cls.strata = lib.Strata(cls.work, "all",
                                base_config(cls.work, cls.grpc_port, cls.http_port, cls.jobs))
        cls.strata.start(ready_url=f"http://127.0.0.1:{cls.http_port}/ready")

    @classmethod
    def tearDownClass(cls):
        rc = cls.strata.stop()
        logs = cls.strata.logs()
        for t in (cls.go, cls.hang, cls.fail, cls.garbage):
            t.stop()
        lib.remove_workdir(cls.work)
        # A clean exit (the ASan build exits non-zero on a leak or error).
        assert rc == 0, f"strata all exited with {rc}:\n{logs[-3000:]}"

    def test_1_every_default_profile_type_arrives(self):
        def types():
            with grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}") as ch:
                resp = q_grpc.QueryServiceStub(ch).ProfileTypes(qpb.ProfileTypesRequest(),
                                                                timeout=10)
            out = {}
            for t in resp.types:
                name = f"{t.name}:{t.sample_type}:{t.sample_unit}:{t.period_type}:{t.period_unit}"
                out[name + (":delta" if t.delta else "")] = t.delta
            return out

        lib.wait_for(lambda: EXPECTED_TYPES <= set(types()), timeout=60,
                     what="every default profile type")
        got = types()
        for name in EXPECTED_TYPES:
            self.assertEqual(got[name], name.startswith("process_cpu:"), name)
        # The series carry the target labels, and the CPU profile really is the Go program's.
        now = time.time_ns()
        start, end = timestamp_pb2.Timestamp(), timestamp_pb2.Timestamp()
        start.FromNanoseconds(now - 120 * 10**9)
        end.FromNanoseconds(now + 10**9)
        with grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}") as ch:
            stub = q_grpc.QueryServiceStub(ch)
            values = stub.Values(qpb.ValuesRequest(label_name="instance", match=[
                'process_cpu:samples:count:cpu:nanoseconds:delta{job="go",env="test"}'],
                start=start, end=end), timeout=10)
            self.assertEqual(list(values.label_values), [self.go.address])
            q = stub.Query(qpb.QueryRequest(
                mode=qpb.QueryRequest.MODE_MERGE,
                merge=qpb.MergeProfile(
                    query='process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta{job="go"}',
                    start=start, end=end),
                report_type=qpb.QueryRequest.REPORT_TYPE_TOP), timeout=30)
        names = {row.meta.function.name for row in q.top.list}
        self.assertIn("main.fibonacciStep", names)

    def test_2_bad_targets_are_unhealthy_while_the_good_one_is_scraped(self):
        def broken():
            resp = targets_grpc(self.grpc_port)
            return {labels_of(t.labels)["instance"]: t for t in resp.targets["broken"].targets}

        lib.wait_for(lambda: all(t.health == spb.Target.HEALTH_BAD for t in broken().values())
                     and len(broken()) == 3, timeout=30, what="three unhealthy targets")
        got = broken()
        self.assertIn("timed out after 1000 ms", got[self.hang.address].last_error)
        self.assertEqual(got[self.fail.address].last_error, "server returned HTTP status 500")
        self.assertIn("invalid pprof profile", got[self.garbage.address].last_error)
        for t in got.values():
            self.assertEqual(labels_of(t.labels)["__name__"], "memory")
            self.assertEqual(labels_of(t.labels)["job"], "broken")
            self.assertTrue(t.url.endswith("/debug/pprof/allocs"), t.url)
            self.assertGreater(t.last_scrape.seconds, 0)

        go = targets_grpc(self.grpc_port).targets["go"].targets
        self.assertEqual(len(go), 5)
        first = {t.url: t.last_scrape.ToNanoseconds() for t in go}
        for t in go:
            self.assertEqual(t.health, spb.Target.HEALTH_GOOD, t.url)
            self.assertEqual(t.last_error, "")
            self.assertEqual(labels_of(t.discovered_labels)["__address__"], self.go.address)
        cpu = [t.url for t in go if "/debug/pprof/profile" in t.url]
        self.assertEqual(cpu, [f"http://{self.go.address}/debug/pprof/profile?seconds=2"])

        def advanced():
            now = {t.url: t.last_scrape.ToNanoseconds()
                   for t in targets_grpc(self.grpc_port).targets["go"].targets}
            return all(now[u] > first[u] for u in first)
        lib.wait_for(advanced, timeout=20, what="the Go target to be scraped again")

        # The same through the JSON the UI reads.
        _, body = lib.http_get(f"http://127.0.0.1:{self.http_port}/api/v1/targets?state=active")
        doc = json.loads(body)
        health = {t["url"]: t["health"] for t in doc["targets"]["broken"]["targets"]}
        self.assertEqual(set(health.values()), {"HEALTH_BAD"})
        go_json = doc["targets"]["go"]["targets"]
        self.assertEqual({t["health"] for t in go_json}, {"HEALTH_GOOD"})
        self.assertRegex(go_json[0]["lastScrape"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z$")
        self.assertRegex(go_json[0]["lastScrapeDuration"], r"^\d+\.\d{9}s$")

        _, metrics = lib.http_get(f"http://127.0.0.1:{self.http_port}/metrics")
        text = metrics.decode()
        self.assertRegex(text, r'strata_scraper_scrape_failures_total\{job="broken"\} [1-9]')
        self.assertIn('strata_scraper_scrape_failures_total{job="go"} 0', text)

    def test_3_sighup_reload_invalid_then_valid(self):
        path = self.strata.config_path
        with open(path) as f:
            good = f.read()
        with open(path, "w") as f:
            f.write(good.replace("scrape_interval: 2s", "scrape_interval: soon", 1))
        self.strata.proc.send_signal(signal.SIGHUP)
        lib.wait_for(lambda: "config reload rejected" in self.strata.logs(), timeout=10,
                     what="the rejected reload in the log")
        line = [l for l in self.strata.logs().splitlines() if "config reload rejected" in l][0]
        self.assertRegex(line, r"strata-all\.yaml:\d+:\d+: scrape_configs\[0\]\.scrape_interval")
        self.assertEqual(set(targets_grpc(self.grpc_port).targets.keys()), {"go", "broken"})
        _, metrics = lib.http_get(f"http://127.0.0.1:{self.http_port}/metrics")
        self.assertIn('strata_config_reloads_total{result="failure"} 1', metrics.decode())
        self.assertIn("strata_config_last_reload_successful 0", metrics.decode())

        with open(path, "w") as f:
            f.write(good.replace("job_name: broken", "job_name: renamed"))
        self.strata.proc.send_signal(signal.SIGHUP)
        lib.wait_for(lambda: set(targets_grpc(self.grpc_port).targets.keys()) == {"go", "renamed"},
                     timeout=10, what="the reloaded jobs")
        # The unchanged job kept its targets' state: no target went back to unknown.
        go = targets_grpc(self.grpc_port).targets["go"].targets
        self.assertEqual({t.health for t in go}, {spb.Target.HEALTH_GOOD})
        renamed = targets_grpc(self.grpc_port).targets["renamed"].targets
        self.assertEqual(len(renamed), 3)
        _, metrics = lib.http_get(f"http://127.0.0.1:{self.http_port}/metrics")
        self.assertIn('strata_config_reloads_total{result="success"} 1', metrics.decode())
        self.assertIn("strata_config_last_reload_successful 1", metrics.decode())
        with open(path, "w") as f:
            f.write(good)
        self.strata.proc.send_signal(signal.SIGHUP)


class AuthAndTlsTest(unittest.TestCase):
    """bearer_token_file over HTTPS with ca_file and server_name (the certificate names
    scrape.test, the target is 127.0.0.1), and basic_auth with password_file over HTTP."""

    maxDiff = None

    def test_tls_bearer_and_basic_auth(self):
        work = lib.make_workdir("scraper-tls")
        cert, key = os.path.join(work, "cert.pem"), os.path.join(work, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=scrape.test", "-addext", "subjectAltName=DNS:scrape.test",
                        "-keyout", key, "-out", cert], check=True, capture_output=True)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        token_file, password_file = os.path.join(work, "token"), os.path.join(work, "password")
        with open(token_file, "w") as f:
            f.write("s3cret\n")
        with open(password_file, "w") as f:
            f.write("pa55\n")
        tls = FakeTarget("good", ssl_context=ctx, authorization="Bearer s3cret")
        basic = FakeTarget("good", authorization="Basic " +
                           base64.b64encode(b"scraper:pa55").decode())
        wrong = FakeTarget("good", authorization="Bearer other")
        grpc_port, http_port = lib.free_port(), lib.free_port()
        only_memory = """
    profiling_config:
      pprof_config:
        block: {enabled: false}
        goroutine: {enabled: false}
        mutex: {enabled: false}
        process_cpu: {enabled: false}"""
        jobs = f"""
scrape_configs:
  - job_name: tls
    scrape_interval: 1s
    scheme: https
    bearer_token_file: {token_file}
    tls_config: {{ca_file: {cert}, server_name: scrape.test}}
    static_configs: [{{targets: ['{tls.address}']}}]{only_memory}
  - job_name: basic
    scrape_interval: 1s
    basic_auth: {{username: scraper, password_file: {password_file}}}
    static_configs: [{{targets: ['{basic.address}']}}]{only_memory}
  - job_name: wrong
    scrape_interval: 1s
    bearer_token: nope
    static_configs: [{{targets: ['{wrong.address}']}}]{only_memory}
  - job_name: unverified
    scrape_interval: 1s
    scheme: https
    bearer_token_file: {token_file}
    static_configs: [{{targets: ['{tls.address}']}}]{only_memory}
"""
        strata = lib.Strata(work, "all", base_config(work, grpc_port, http_port, jobs))
        try:
            strata.start(ready_url=f"http://127.0.0.1:{http_port}/ready")

            def health():
                resp = targets_grpc(grpc_port)
                return {job: (ts.targets[0].health, ts.targets[0].last_error)
                        for job, ts in resp.targets.items()}
            lib.wait_for(lambda: all(h != spb.Target.HEALTH_UNKNOWN_UNSPECIFIED
                                     for h, _ in health().values()), timeout=20,
                         what="every target scraped once")
            got = health()
            self.assertEqual(got["tls"], (spb.Target.HEALTH_GOOD, ""))
            self.assertEqual(got["basic"], (spb.Target.HEALTH_GOOD, ""))
            self.assertEqual(got["wrong"], (spb.Target.HEALTH_BAD,
                                            "server returned HTTP status 401"))
            # Without ca_file the self-signed certificate is not trusted.
            self.assertEqual(got["unverified"][0], spb.Target.HEALTH_BAD)
            self.assertIn("SSL certificate problem", got["unverified"][1])
            # server_name changes TLS only: the Host header is still the target's address.
            self.assertIn(tls.address, tls.hosts)
        finally:
            strata.stop()
            for t in (tls, basic, wrong):
                t.stop()
            lib.remove_workdir(work)


class HashmodShardingTest(unittest.TestCase):
    """Two scrapers, one ingester: hashmod over __address__ splits six targets between them."""

    def test_every_target_scraped_by_exactly_one_scraper(self):
        work = lib.make_workdir("scraper-shards")
        targets = [FakeTarget("good") for _ in range(6)]
        grpc_port, http_port = lib.free_port(), lib.free_port()
        store = lib.Strata(work, "all", base_config(work, grpc_port, http_port, ""))
        scrapers = []
        try:
            store.start(ready_url=f"http://127.0.0.1:{http_port}/ready")
            addresses = ", ".join(f"'{t.address}'" for t in targets)
            ports = []
            for shard in (0, 1):
                g, h = lib.free_port(), lib.free_port()
                ports.append(g)
                jobs = f"""
scraper:
  ingester_addresses: ['127.0.0.1:{grpc_port}']
scrape_configs:
  - job_name: shared
    scrape_interval: 1s
    params: {{shard: ['{shard}']}}
    static_configs:
      - targets: [{addresses}]
    relabel_configs:
      - {{source_labels: [__address__], modulus: 2, target_label: __tmp_hash, action: hashmod}}
      - {{source_labels: [__tmp_hash], regex: '{shard}', action: keep}}
    profiling_config:
      pprof_config:
        block: {{enabled: false}}
        goroutine: {{enabled: false}}
        mutex: {{enabled: false}}
        process_cpu: {{enabled: false}}
"""
                d = os.path.join(work, f"shard{shard}")
                os.makedirs(d)
                s = lib.Strata(d, "scraper", base_config(d, g, h, jobs))
                s.start(ready_url=f"http://127.0.0.1:{h}/ready")
                scrapers.append(s)

            def active(port):
                resp = targets_grpc(port, spb.TargetsRequest.STATE_ACTIVE)
                return {labels_of(t.labels)["instance"] for t in resp.targets["shared"].targets}

            shard0, shard1 = active(ports[0]), active(ports[1])
            self.assertEqual(shard0 & shard1, set())
            self.assertEqual(shard0 | shard1, {t.address for t in targets})
            # Prometheus' hashmod: the last 8 bytes of the md5 of the value, big-endian, mod 2.
            # Exact shards rather than "both non-empty": random ports may all land on one.
            def shard_of(address):
                return int.from_bytes(hashlib.md5(address.encode()).digest()[8:], "big") % 2

            self.assertEqual(shard0, {t.address for t in targets if shard_of(t.address) == 0})
            self.assertEqual(shard1, {t.address for t in targets if shard_of(t.address) == 1})
            dropped = targets_grpc(ports[0], spb.TargetsRequest.STATE_DROPPED)
            self.assertEqual(len(dropped.targets["shared"].targets), len(shard1))  # memory only

            lib.wait_for(lambda: all(t.queries for t in targets), timeout=20,
                         what="every target to be scraped")
            time.sleep(2.5)
            for t in targets:
                shards = {urllib.parse.parse_qs(q)["shard"][0] for q in t.queries}
                want = "0" if t.address in shard0 else "1"
                self.assertEqual(shards, {want}, t.address)

            # What they scraped arrived at the one ingester, from both shards.
            def instances():
                with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as ch:
                    now = time.time_ns()
                    start, end = timestamp_pb2.Timestamp(), timestamp_pb2.Timestamp()
                    start.FromNanoseconds(0)  # the served heap profile carries its old time
                    end.FromNanoseconds(now + 10**9)
                    r = q_grpc.QueryServiceStub(ch).Values(qpb.ValuesRequest(
                        label_name="instance", match=['{job="shared"}'], start=start, end=end),
                        timeout=10)
                return set(r.label_values)
            lib.wait_for(lambda: instances() == {t.address for t in targets}, timeout=20,
                         what="profiles of all six targets in the ingester")
        finally:
            rcs = [s.stop() for s in scrapers] + [store.stop()]
            for t in targets:
                t.stop()
            lib.remove_workdir(work)
        self.assertEqual(rcs, [0, 0, 0])


if __name__ == "__main__":
    unittest.main(verbosity=2)
