#!/usr/bin/python3
"""Authentication with a tenant map (server.auth, issue 15 item 6, docs/security.md) on `strata
all`, through grpcio, curl and the strata CLI.

- Tokens (plaintext ports): a call without "authorization: Bearer", or with an unknown token, is
  UNAUTHENTICATED / HTTP 401 on every gRPC service and API route; a known token naming a tenant
  outside its list (the default tenant "anonymous" included) is PERMISSION_DENIED / 403; its own
  tenants and a "*" token's any tenant are served. /ready and /metrics stay open.
  `strata push` / `strata query` with --bearer-token-file are served.
- Client certificates (mutual TLS): the subject of a verified client certificate (CN=strata-test)
  allows its listed tenants on both ports without any token; other tenants are PERMISSION_DENIED.
"""
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_testlib as lib  # noqa: E402

lib.load_stubs()
import grpc  # noqa: E402
from parca.profilestore.v1alpha1 import profilestore_pb2 as ps  # noqa: E402
from parca.profilestore.v1alpha1 import profilestore_pb2_grpc as ps_grpc  # noqa: E402
from parca.query.v1alpha1 import query_pb2 as qpb  # noqa: E402
from parca.query.v1alpha1 import query_pb2_grpc as q_grpc  # noqa: E402
from parca.scrape.v1alpha1 import scrape_pb2 as spb  # noqa: E402
from parca.scrape.v1alpha1 import scrape_pb2_grpc as s_grpc  # noqa: E402
import test_tls  # noqa: E402

TOKEN_A = "token-for-team-a-0123456789"
TOKEN_ALL = "token-for-every-tenant-abcdef"


def curl(url, *args):
    return test_tls.curl(url, *args)


class TokenAuthTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = lib.make_workdir("auth")
        cls.grpc_port = lib.free_port()
        cls.http_port = lib.free_port()
        cls.base = f"http://127.0.0.1:{cls.http_port}"
        cls.token_file = os.path.join(cls.work, "token-a")
        with open(cls.token_file, "w") as f:
            f.write(TOKEN_A + "\n")
        cls.all_file = os.path.join(cls.work, "token-all")
        with open(cls.all_file, "w") as f:
            f.write(TOKEN_ALL)
        config = f"""
server:
  grpc_listen_address: 127.0.0.1:{cls.grpc_port}
  http_listen_address: 127.0.0.1:{cls.http_port}
  auth:
    tokens:
      - token_file: {cls.token_file}
        tenants: [team-a, team-b]
      - token: {TOKEN_ALL}
        tenants: ["*"]
bucket:
  type: FILESYSTEM
  config:
    directory: {os.path.join(cls.work, "data")}
ingester:
  flush_interval: 200ms
scraper:
  bearer_token_file: {cls.all_file}
"""
        cls.strata = lib.Strata(cls.work, "all", config).start(ready_url=cls.base + "/ready")
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{cls.grpc_port}")

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        rc = cls.strata.stop()
        if rc != 0:
            print(cls.strata.logs())
        lib.remove_workdir(cls.work)
        assert rc == 0

    def calls(self):
        store = ps_grpc.ProfileStoreServiceStub(self.channel)
        q = q_grpc.QueryServiceStub(self.channel)
        targets = s_grpc.ScrapeServiceStub(self.channel)
        return {
            "WriteRaw": lambda md: store.WriteRaw(ps.WriteRawRequest(), metadata=md, timeout=30),
            "ProfileTypes": lambda md: q.ProfileTypes(qpb.ProfileTypesRequest(), metadata=md,
                                                      timeout=30),
            "Labels": lambda md: q.Labels(qpb.LabelsRequest(), metadata=md, timeout=30),
            "Targets": lambda md: targets.Targets(spb.TargetsRequest(), metadata=md, timeout=30),
        }

    def assert_code(self, fn, md, code):
        with self.assertRaises(grpc.RpcError) as e:
            fn(md)
        self.assertEqual(e.exception.code(), code, e.exception.details())

    def test_grpc(self):
        for name, fn in self.calls().items():
            with self.subTest(method=name):
                self.assert_code(fn, [], grpc.StatusCode.UNAUTHENTICATED)
                self.assert_code(fn, [("authorization", "Bearer wrong")],
                                 grpc.StatusCode.UNAUTHENTICATED)
                self.assert_code(fn, [("authorization", "Bearer " + TOKEN_A[:-1])],
                                 grpc.StatusCode.UNAUTHENTICATED)
                self.assert_code(fn, [("x-scope-orgid", "team-a")],
                                 grpc.StatusCode.UNAUTHENTICATED)
                a = [("authorization", "Bearer " + TOKEN_A)]
                self.assert_code(fn, a, grpc.StatusCode.PERMISSION_DENIED)  # anonymous
                self.assert_code(fn, a + [("x-scope-orgid", "team-c")],
                                 grpc.StatusCode.PERMISSION_DENIED)
                fn(a + [("x-scope-orgid", "team-a")])
                fn(a + [("x-scope-orgid", "team-b")])
                fn([("authorization", "Bearer " + TOKEN_ALL), ("x-scope-orgid", "team-z")])
                fn([("authorization", "Bearer " + TOKEN_ALL)])
                # A known token with a malformed tenant: the tenant rule's message.
                self.assert_code(fn, a + [("x-scope-orgid", "../x")],
                                 grpc.StatusCode.INVALID_ARGUMENT)

    def test_http(self):
        self.assertEqual(curl(self.base + "/ready")[0], 200)
        self.assertEqual(curl(self.base + "/metrics")[0], 200)
        a = ["-H", "Authorization: Bearer " + TOKEN_A]
        for route in ["/api/v1/profile_types", "/api/v1/labels", "/api/v1/targets",
                      "/api/v1/agents", "/"]:
            with self.subTest(route=route):
                url = self.base + route
                self.assertEqual(curl(url)[0], 401)
                self.assertEqual(curl(url, "-H", "Authorization: Bearer nope")[0], 401)
                self.assertEqual(curl(url, *a)[0], 403)
                self.assertEqual(curl(url, *a, "-H", "X-Scope-OrgID: team-c")[0], 403)
        # A refused request with a body still gets its answer (the body is read and discarded).
        body = os.path.join(self.work, "body")
        with open(body, "wb") as f:
            f.write(b"x" * (4 << 20))
        for expect in ([], ["-H", "Expect: 100-continue"], ["-H", "Expect:"]):
            with self.subTest(expect=expect):
                self.assertEqual(curl(self.base + "/ingest?name=x", "--data-binary", "@" + body,
                                      *expect)[0], 401)
        url = self.base + "/api/v1/profile_types"
        self.assertEqual(curl(url, *a, "-H", "X-Scope-OrgID: team-a")[0], 200)
        self.assertEqual(curl(url, "-H", "Authorization: Bearer " + TOKEN_ALL)[0], 200)

    def test_cli_with_bearer_token_file(self):
        pprof = os.path.join(self.work, "cpu.pb")
        test_tls.cpu_pprof_file(pprof)
        address = ["--address", f"127.0.0.1:{self.grpc_port}"]
        run = lambda *args: subprocess.run([lib.BINARY, *args], capture_output=True, text=True,  # noqa: E731
                                           timeout=60)
        r = run("push", pprof, "--name", "process_cpu", *address, "--tenant", "team-a",
                "--bearer-token-file", self.token_file)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = run("push", pprof, "--name", "process_cpu", *address, "--tenant", "team-c",
                "--bearer-token-file", self.token_file)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("not allowed", r.stderr + r.stdout)
        r = run("query", "types", *address, "--tenant", "team-a")
        self.assertNotEqual(r.returncode, 0)

        def has_type():
            r = run("query", "types", *address, "--tenant", "team-a", "--bearer-token-file",
                    self.token_file)
            return r.returncode == 0 and "process_cpu:samples:count" in r.stdout
        lib.wait_for(has_type, what="the pushed profile's type")


class CheckConfigTest(unittest.TestCase):
    def test_check_config_refuses_bad_tls_and_auth(self):
        work = lib.make_workdir("auth-check")
        cases = {
            "tls:\n    cert_file: /c.pem\n": "cert_file and key_file go together",
            "tls:\n    client_ca_file: /ca.pem\n": "client_ca_file needs cert_file and key_file",
            "auth:\n    tokens: [{token: a, token_file: /t, tenants: [a]}]\n":
                "tokens[0]: want one of token and token_file",
            "auth:\n    tokens: [{tenants: [a]}]\n": "tokens[0]: want one of token and token_file",
            "auth:\n    client_certificates: [{subject: CN=a, tenants: [a]}]\n":
                "client_certificates need server.tls.client_ca_file",
            "auth:\n    tokens: [{token: a}]\n": "tenants",
        }
        try:
            for server, needle in cases.items():
                with self.subTest(server=server):
                    path = os.path.join(work, "c.yaml")
                    with open(path, "w") as f:
                        f.write(f"server:\n  {server}bucket:\n  type: FILESYSTEM\n"
                                f"  config: {{directory: {work}/data}}\n")
                    r = subprocess.run([lib.BINARY, "all", "-config", path, "-check-config"],
                                       capture_output=True, text=True, timeout=60)
                    self.assertNotEqual(r.returncode, 0)
                    self.assertIn(needle, r.stdout + r.stderr)
        finally:
            lib.remove_workdir(work)


class CertificateAuthTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = test_tls.StrataTls("auth-mtls", client_ca=True, extra_server="""
  auth:
    client_certificates:
      - subject: CN=strata-test
        tenants: [team-c]
""")

    @classmethod
    def tearDownClass(cls):
        assert cls.s.stop() == 0

    def test_grpc_subject_allows_its_tenants(self):
        with self.s.channel(client=True) as ch:
            q = q_grpc.QueryServiceStub(ch)
            q.ProfileTypes(qpb.ProfileTypesRequest(), metadata=[("x-scope-orgid", "team-c")],
                           timeout=30)
            with self.assertRaises(grpc.RpcError) as e:
                q.ProfileTypes(qpb.ProfileTypesRequest(), timeout=30)
            self.assertEqual(e.exception.code(), grpc.StatusCode.PERMISSION_DENIED)

    def test_http_subject_allows_its_tenants(self):
        ca = ["--cacert", self.s.certs["ca.crt"], *self.s.client_args]
        url = self.s.https("/api/v1/profile_types")
        self.assertEqual(curl(url, *ca, "-H", "X-Scope-OrgID: team-c")[0], 200)
        self.assertEqual(curl(url, *ca)[0], 403)


if __name__ == "__main__":
    unittest.main(verbosity=2)
