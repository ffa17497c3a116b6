#!/usr/bin/python3
"""TLS on both ports of `strata all` (issue 15 item 6, docs/security.md), with certificates made by
openssl at test time (tests/kubernetes/make_certs.sh: a CA, a server certificate for 127.0.0.1 and
a client certificate CN=strata-test, and a second CA that signed nothing here), through real
clients: Python grpcio and curl.

- server.tls {cert_file, key_file}: grpcio with the CA calls every service; a plaintext gRPC client
  and a plain-HTTP curl are refused; a client trusting another CA refuses the server.
- server.tls.client_ca_file (mutual TLS): a client certificate signed by the CA is required on
  both ports: grpcio without one fails the handshake, curl without one is answered 401 (but on
  /ready and /metrics, left open for probes and Prometheus), with one 200. `strata push` and `strata query` with --tls-ca, --tls-cert, --tls-key and --tls-server-name
  write a profile and read its type back; without the client certificate they fail.
- The scraper of `strata all` with scraper.push_tls (CA, client certificate, server_name) and
  bearer_token_file pushes what it scrapes to its own mutual-TLS port with server.auth on.
"""
import os
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
from parca.query.v1alpha1 import query_pb2 as qpb  # noqa: E402
from parca.query.v1alpha1 import query_pb2_grpc as q_grpc  # noqa: E402
from perftools.profiles import profile_pb2  # noqa: E402


def cpu_pprof_file(path):
    p = profile_pb2.Profile()
    p.string_table.extend(["", "samples", "count", "cpu", "nanoseconds", "main", "tlsOnly"])
    p.sample_type.add(type=1, unit=2)
    p.sample_type.add(type=3, unit=4)
    p.period_type.type = 3
    p.period_type.unit = 4
    p.period = 10_000_000
    p.time_nanos = time.time_ns()
    p.duration_nanos = 10_000_000_000
    for i, name in ((1, 5), (2, 6)):
        p.function.add(id=i, name=name, system_name=name)
        p.location.add(id=i, address=0x1000 * i).line.add(function_id=i, line=i)
    p.sample.add(location_id=[2, 1], value=[3, 30_000_000])
    with open(path, "wb") as f:
        f.write(p.SerializeToString())


def make_certs(directory):
    subprocess.run([os.path.join(lib.SOURCE_DIR, "tests", "kubernetes", "make_certs.sh"), directory],
                   check=True)
    return {name: os.path.join(directory, name) for name in os.listdir(directory)}


def read(path):
    with open(path, "rb") as f:
        return f.read()


def curl(url, *args):
    """(HTTP status or 0 when no answer came, curl's exit code)."""
    r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10",
                        *args, url], capture_output=True, text=True)
    return int(r.stdout or "0"), r.returncode


class StrataTls:
    def __init__(self, name, client_ca, extra_server="", extra=""):
        self.work = lib.make_workdir(name)
        self.certs = make_certs(os.path.join(self.work, "certs"))
        self.grpc_port = lib.free_port()
        self.http_port = lib.free_port()
        if callable(extra):  # config that names the certificates
            extra = extra(self.certs)
        ca_line = f"\n    client_ca_file: {self.certs['ca.crt']}" if client_ca else ""
        config = f"""
server:
  grpc_listen_address: 127.0.0.1:{self.grpc_port}
  http_listen_address: 127.0.0.1:{self.http_port}
  tls:
    cert_file: {self.certs['server.crt']}
    key_file: {self.certs['server.key']}{ca_line}{extra_server}
bucket:
  type: FILESYSTEM
  config:
    directory: {os.path.join(self.work, "data")}
ingester:
  flush_interval: 200ms
{extra}"""
        self.strata = lib.Strata(self.work, "all", config).start()
        self.client_args = (["--cert", self.certs["client.crt"], "--key", self.certs["client.key"]]
                            if client_ca else [])
        lib.wait_for(lambda: curl(self.https("/ready"), "--cacert", self.certs["ca.crt"],
                                  *self.client_args)[0] == 200, what="strata over https")

    def https(self, path):
        return f"https://127.0.0.1:{self.http_port}{path}"

    def channel(self, ca="ca.crt", client=True):
        creds = grpc.ssl_channel_credentials(
            root_certificates=read(self.certs[ca]),
            private_key=read(self.certs["client.key"]) if client else None,
            certificate_chain=read(self.certs["client.crt"]) if client else None)
        return grpc.secure_channel(f"127.0.0.1:{self.grpc_port}", creds)

    def stop(self):
        rc = self.strata.stop()
        if rc != 0:
            print(self.strata.logs())
        lib.remove_workdir(self.work)
        return rc


class TlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = StrataTls("tls", client_ca=False)

    @classmethod
    def tearDownClass(cls):
        assert cls.s.stop() == 0

    def test_grpc_over_tls_writes_and_reads(self):
        with self.s.channel(client=False) as ch:
            ps_grpc.ProfileStoreServiceStub(ch).WriteRaw(ps.WriteRawRequest(), timeout=30)
            q_grpc.QueryServiceStub(ch).ProfileTypes(qpb.ProfileTypesRequest(), timeout=30)

    def test_plaintext_grpc_is_refused(self):
        with grpc.insecure_channel(f"127.0.0.1:{self.s.grpc_port}") as ch:
            with self.assertRaises(grpc.RpcError) as e:
                q_grpc.QueryServiceStub(ch).ProfileTypes(qpb.ProfileTypesRequest(), timeout=5)
            self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)

    def test_client_trusting_another_ca_refuses_the_server(self):
        with self.s.channel(ca="other-ca.crt", client=False) as ch:
            with self.assertRaises(grpc.RpcError) as e:
                q_grpc.QueryServiceStub(ch).ProfileTypes(qpb.ProfileTypesRequest(), timeout=5)
            self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
        status, rc = curl(self.s.https("/ready"), "--cacert", self.s.certs["other-ca.crt"])
        self.assertEqual(status, 0)
        self.assertNotEqual(rc, 0)

    def test_https_answers_and_plain_http_does_not(self):
        status, _ = curl(self.s.https("/metrics"), "--cacert", self.s.certs["ca.crt"])
        self.assertEqual(status, 200)
        status, _ = curl(f"http://127.0.0.1:{self.s.http_port}/ready")
        self.assertNotEqual(status, 200)


class MutualTlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = StrataTls("mtls", client_ca=True)

    @classmethod
    def tearDownClass(cls):
        assert cls.s.stop() == 0

    def test_grpc_with_client_certificate(self):
        with self.s.channel(client=True) as ch:
            ps_grpc.ProfileStoreServiceStub(ch).WriteRaw(ps.WriteRawRequest(), timeout=30)
            q_grpc.QueryServiceStub(ch).ProfileTypes(qpb.ProfileTypesRequest(), timeout=30)

    def test_grpc_without_client_certificate_is_refused(self):
        with self.s.channel(client=False) as ch:
            with self.assertRaises(grpc.RpcError) as e:
                q_grpc.QueryServiceStub(ch).ProfileTypes(qpb.ProfileTypesRequest(), timeout=5)
            self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)

    def test_http_requires_client_certificate(self):
        ca = ["--cacert", self.s.certs["ca.crt"]]
        url = self.s.https("/api/v1/profile_types")
        self.assertEqual(curl(url, *ca, *self.s.client_args)[0], 200)
        self.assertEqual(curl(url, *ca)[0], 401)
        self.assertEqual(curl(self.s.https("/"), *ca)[0], 401)
        # Probes and Prometheus scrapes carry no client certificate: /ready and /metrics stay open.
        self.assertEqual(curl(self.s.https("/ready"), *ca)[0], 200)
        self.assertEqual(curl(self.s.https("/metrics"), *ca)[0], 200)

    def strata_cli(self, *args):
        return subprocess.run([lib.BINARY, *args], capture_output=True, text=True, timeout=60)

    def test_cli_push_and_query_over_mutual_tls(self):
        pprof = os.path.join(self.s.work, "cpu.pb")
        cpu_pprof_file(pprof)
        address = ["--address", f"localhost:{self.s.grpc_port}"]
        # The certificate names 127.0.0.1, localhost and kubernetes.test; --tls-server-name picks
        # the name to check, whatever host the address has.
        tls = ["--tls-ca", self.s.certs["ca.crt"], "--tls-server-name", "kubernetes.test"]
        client = ["--tls-cert", self.s.certs["client.crt"], "--tls-key", self.s.certs["client.key"]]
        r = self.strata_cli("push", pprof, "--name", "process_cpu", *address, *tls, *client)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.strata_cli("push", pprof, "--name", "process_cpu", *address, *tls)
        self.assertNotEqual(r.returncode, 0)
        r = self.strata_cli("push", pprof, "--name", "process_cpu", *address)
        self.assertNotEqual(r.returncode, 0)

        def has_type():
            r = self.strata_cli("query", "types", *address, *tls, *client)
            return r.returncode == 0 and "process_cpu:samples:count:cpu:nanoseconds" in r.stdout
        lib.wait_for(has_type, what="the pushed profile's type")
        r = self.strata_cli("query", "types", *address, "--tls-ca", self.s.certs["other-ca.crt"],
                            *client)
        self.assertNotEqual(r.returncode, 0)


class ScraperPushOverTlsTest(unittest.TestCase):
    def test_scraper_pushes_over_mutual_tls_with_a_token(self):
        import test_scraper  # its fake pprof target
        target = test_scraper.FakeTarget("good")
        work = lib.make_workdir("scraper-push-tls")
        token = os.path.join(work, "token")
        with open(token, "w") as f:
            f.write("scraper-token\n")
        s = None
        try:
            s = StrataTls("scraper-push", client_ca=True, extra_server=f"""
  auth:
    tokens:
      - token_file: {token}
        tenants: [anonymous]
""", extra=lambda c: f"""scraper:
  push_tls:
    ca_file: {c['ca.crt']}
    cert_file: {c['client.crt']}
    key_file: {c['client.key']}
    server_name: localhost
  bearer_token_file: {token}
scrape_configs:
  - job_name: fake
    scrape_interval: 1s
    static_configs: [{{targets: ['{target.address}']}}]
    profiling_config:
      pprof_config:
        block: {{enabled: false}}
        goroutine: {{enabled: false}}
        mutex: {{enabled: false}}
        process_cpu: {{enabled: false}}
""")
            with s.channel(client=True) as ch:
                q = q_grpc.QueryServiceStub(ch)
                md = [("authorization", "Bearer scraper-token")]

                def stored():
                    types = q.ProfileTypes(qpb.ProfileTypesRequest(), metadata=md, timeout=10)
                    return any(t.name == "memory" for t in types.types)
                lib.wait_for(stored, timeout=60, what="scraped profiles pushed over mutual TLS")
        finally:
            target.stop()
            if s is not None:
                self.assertEqual(s.stop(), 0)
            lib.remove_workdir(work)


if __name__ == "__main__":
    unittest.main(verbosity=2)
