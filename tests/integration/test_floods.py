#!/usr/bin/python3
"""Availability of `strata all` against hostile clients and a failing bucket (issue 15, items 4
and 8), with raw sockets from many loopback addresses (127.0.0.0/8 is all local on Linux):

- FloodTest: thousands of connections held open (10,000 where RLIMIT_NOFILE allows), half idle
  and half trickling headers a byte at a time, while /ready and a merge query over real data still
  answer within 100 ms; every flood connection is still held afterwards.
- DeadlineAndCapTest: a trickle is cut at server.http_header_timeout however steadily it sends;
  the connection past server.http_max_connections_per_address from one address is closed at once.
- ReadOnlyBucketTest: /ready of a writing process says 503 "bucket not writable" while its
  FILESYSTEM bucket refuses writes and 200 again once it accepts them; a querier alone on the same
  read-only bucket is ready (it never writes). Root ignores file modes, so as root strata runs as
  `nobody` (setpriv) and the bucket is made read-only with chmod.
- ConfigCheckTest: -check-config refuses out-of-range thread counts and delays at once, with
  file:line and the bound, and starts nothing (the query threads are not created).
"""
import os
import pwd
import re
import resource
import select
import shutil
import socket
import subprocess
import sys
import threading
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_testlib as lib  # noqa: E402
import test_query_common as qc  # noqa: E402
from test_query_common import CPU_SAMPLES, NS, T0  # noqa: E402

import grpc  # noqa: E402
from parca.profilestore.v1alpha1 import profilestore_pb2_grpc as ps_grpc  # noqa: E402

FLOOD = 10_000
PER_ADDRESS = 200  # flood connections per source address (the server's cap is 256)
TRICKLE_HEADERS = b"GET /ready HTTP/1.1\r\nHost: x\r\nX-Slow: "


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def connect_from(src, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s


def timed_get(url, tenant=None):
    req = urllib.request.Request(url, headers={"X-Scope-OrgID": tenant} if tenant else {})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            status, body = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read()
    return time.monotonic() - t0, status, body


def get_status(url):
    return timed_get(url)[1:]


def metric(base, series):
    _, status, body = timed_get(base + "/metrics")
    assert status == 200
    for line in body.decode().splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return None


def closed_within(sock, seconds):
    """True once the peer closed sock (EOF or reset), reading and dropping anything it sent."""
    deadline = time.monotonic() + seconds
    sock.setblocking(False)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            ready, _, _ = select.select([sock], [], [], left)
            if not ready:
                return False
            try:
                if not sock.recv(65536):
                    return True
            except (ConnectionResetError, BrokenPipeError):
                return True
            except BlockingIOError:
                continue
    finally:
        sock.setblocking(True)


def bucket_config(directory):
    return f"""bucket:
  type: FILESYSTEM
  config:
    directory: {directory}
"""


class FloodTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.limit = raise_nofile()
        cls.work = lib.make_workdir("floods")
        cls.grpc_port, cls.http_port = lib.free_port(), lib.free_port()
        cls.base = f"http://127.0.0.1:{cls.http_port}"
        # headers due after 60 s, so the trickles are held for the whole measurement
        config = f"""server:
  grpc_listen_address: 127.0.0.1:{cls.grpc_port}
  http_listen_address: 127.0.0.1:{cls.http_port}
  http_header_timeout: 60s
{bucket_config(os.path.join(cls.work, "data"))}ingester:
  flush_interval: 100ms
querier:
  sync_interval: 200ms
"""
        cls.strata = lib.Strata(cls.work, "all", config).start(ready_url=cls.base + "/ready")
        with grpc.insecure_channel(f"127.0.0.1:{cls.grpc_port}") as ch:
            store = ps_grpc.ProfileStoreServiceStub(ch)
            for req in qc.dataset_requests():
                store.WriteRaw(req, metadata=[("x-scope-orgid", "team-a")], timeout=30)

    @classmethod
    def tearDownClass(cls):
        rc = cls.strata.stop()
        if rc != 0:
            print(cls.strata.logs()[-5000:], file=sys.stderr)
        lib.remove_workdir(cls.work)

    def query_url(self):
        return (f"{self.base}/api/v1/query?query={CPU_SAMPLES}&start={qc.ms(T0)}"
                f"&end={qc.ms(T0 + 200 * NS)}&report=top")

    def test_flood_of_idle_and_trickling_connections(self):
        n = min(FLOOD, self.limit - 300)
        if n < 1200:
            self.skipTest(f"RLIMIT_NOFILE {self.limit} allows no flood beyond a thread per connection")
        lib.wait_for(lambda: timed_get(self.query_url(), "team-a")[1] == 200, what="the data")
        socks = []
        try:
            for i in range(n):
                socks.append(connect_from(f"127.0.1.{1 + i // PER_ADDRESS}", self.http_port))
            trickling = socks[n // 2:]
            for s in trickling:
                s.sendall(TRICKLE_HEADERS)
            stop = threading.Event()

            def trickle():
                while not stop.is_set():
                    for s in trickling:
                        try:
                            s.send(b"a", socket.MSG_DONTWAIT)
                        except OSError:
                            pass
                    stop.wait(0.5)  # the trickle's pace

            t = threading.Thread(target=trickle, daemon=True)
            t.start()
            try:
                lib.wait_for(lambda: metric(self.base, "http_open_connections") >= n, timeout=60,
                             what=f"{n} open connections")
                times = []
                for _ in range(6):
                    took, status, body = timed_get(self.base + "/ready")
                    self.assertEqual((status, body), (200, b"ready\n"))
                    times.append(took)
                    took, status, body = timed_get(self.query_url(), "team-a")
                    self.assertEqual(status, 200, body)
                    self.assertIn(b'"total":', body)
                    times.append(took)
                print(f"flood of {n} connections: slowest of {len(times)} answers "
                      f"{max(times) * 1000:.1f} ms", file=sys.stderr)
                self.assertLess(max(times), 0.100, f"answers took {times}")
            finally:
                stop.set()
                t.join()
            poller = select.poll()
            for s in socks:
                poller.register(s, select.POLLIN)
            self.assertEqual(poller.poll(0), [], "flood connections were closed or answered")
        finally:
            for s in socks:
                s.close()


class DeadlineAndCapTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = lib.make_workdir("deadlines")
        cls.http_port = lib.free_port()
        cls.base = f"http://127.0.0.1:{cls.http_port}"
        config = f"""server:
  grpc_listen_address: 127.0.0.1:{lib.free_port()}
  http_listen_address: 127.0.0.1:{cls.http_port}
  http_header_timeout: 1s
  http_max_connections_per_address: 8
{bucket_config(os.path.join(cls.work, "data"))}"""
        cls.strata = lib.Strata(cls.work, "all", config).start(ready_url=cls.base + "/ready")

    @classmethod
    def tearDownClass(cls):
        rc = cls.strata.stop()
        if rc != 0:
            print(cls.strata.logs()[-5000:], file=sys.stderr)
        lib.remove_workdir(cls.work)

    def test_trickle_cut_at_header_deadline(self):
        before = metric(self.base, 'http_connections_timed_out_total{phase="headers"}') or 0
        t0 = time.monotonic()
        s = connect_from("127.0.2.1", self.http_port)
        try:
            s.sendall(TRICKLE_HEADERS)
            closed = None
            while time.monotonic() - t0 < 10:
                try:
                    s.send(b"a")
                except OSError:
                    closed = time.monotonic() - t0
                    break
                if closed_within(s, 0.1):
                    closed = time.monotonic() - t0
                    break
            self.assertIsNotNone(closed, "a trickle kept its connection for 10 s")
            self.assertGreater(closed, 0.9)
            self.assertLess(closed, 3.0)
        finally:
            s.close()
        self.assertEqual(metric(self.base, 'http_connections_timed_out_total{phase="headers"}'),
                         before + 1)

    def test_cap_per_address(self):
        held = [connect_from("127.0.3.1", self.http_port) for _ in range(8)]
        try:
            lib.wait_for(lambda: metric(self.base, "http_open_connections") >= 8,
                         what="8 open connections")
            excess = connect_from("127.0.3.1", self.http_port)
            try:
                self.assertTrue(closed_within(excess, 5), "the 9th connection was not refused")
            finally:
                excess.close()
            other = connect_from("127.0.3.2", self.http_port)
            other.sendall(b"GET /ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = b""
            while True:
                chunk = other.recv(4096)
                if not chunk:
                    break
                answer += chunk
            other.close()
            self.assertTrue(answer.startswith(b"HTTP/1.1 200"), answer)
            poller = select.poll()
            for s in held:
                poller.register(s, select.POLLIN)
            self.assertEqual(poller.poll(0), [], "held connections were closed")
        finally:
            for s in held:
                s.close()


class ReadOnlyBucketTest(unittest.TestCase):
    """Root writes through any file mode, so as root strata runs as nobody (setpriv)."""

    @classmethod
    def setUpClass(cls):
        cls.prefix = []
        cls.owner = None
        if os.geteuid() == 0:
            if shutil.which("setpriv") is None:
                raise unittest.SkipTest("root without setpriv: cannot make a bucket read-only")
            nobody = pwd.getpwnam("nobody")
            cls.owner = (nobody.pw_uid, nobody.pw_gid)
            cls.prefix = ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}",
                          "--clear-groups", "--"]
        cls.work = lib.make_workdir("readonly-bucket")
        os.chmod(cls.work, 0o755)
        cls.data = os.path.join(cls.work, "data")
        os.mkdir(cls.data)
        if cls.owner:
            os.chown(cls.data, *cls.owner)
        cls.procs = []

    @classmethod
    def tearDownClass(cls):
        cls.set_writable(True)
        for p, log in cls.procs:
            if p.poll() is None:
                p.terminate()
                p.wait(timeout=30)
            log.close()
        lib.remove_workdir(cls.work)

    @classmethod
    def set_writable(cls, writable):
        for root, dirs, files in os.walk(cls.data):
            for d in [root] + [os.path.join(root, x) for x in dirs]:
                os.chmod(d, 0o755 if writable else 0o555)

    def start(self, mode, name, extra=""):
        http_port = lib.free_port()
        path = os.path.join(self.work, f"{name}.yaml")
        with open(path, "w") as f:
            f.write(f"""server:
  grpc_listen_address: 127.0.0.1:{lib.free_port()}
  http_listen_address: 127.0.0.1:{http_port}
{bucket_config(self.data)}{extra}""")
        os.chmod(path, 0o644)
        log = open(os.path.join(self.work, f"{name}.log"), "w")
        p = subprocess.Popen(self.prefix + [lib.BINARY, mode, "-config", path], stdout=log,
                             stderr=subprocess.STDOUT)
        self.procs.append((p, log))
        return f"http://127.0.0.1:{http_port}/ready", p

    def test_ready_follows_bucket_writability(self):
        ready, writer = self.start("all", "writer", "querier:\n  sync_interval: 200ms\n")
        lib.wait_for(lambda: get_status(ready)[0] == 200, what="the writer to be ready")
        self.set_writable(False)
        try:
            lib.wait_for(lambda: get_status(ready)[0] == 503, timeout=20,
                         what="/ready to fail on a read-only bucket")
            status, body = get_status(ready)
            self.assertEqual(status, 503)
            self.assertRegex(body.decode(), r"^bucket not writable: .+\n$")
            # a querier alone never writes: ready on the same read-only bucket
            qready, querier = self.start("querier", "querier", "querier:\n  sync_interval: 200ms\n")
            lib.wait_for(lambda: get_status(qready)[0] == 200,
                         what="a querier on a read-only bucket to be ready")
            self.assertEqual([f for f in os.listdir(self.data) if f.startswith(".strata-ready")],
                             [])
        finally:
            self.set_writable(True)
        lib.wait_for(lambda: get_status(ready)[0] == 200, timeout=20,
                     what="/ready back once the bucket is writable")
        self.assertIsNone(writer.poll(), "the writer exited")


class ConfigCheckTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = lib.make_workdir("config-check")

    @classmethod
    def tearDownClass(cls):
        lib.remove_workdir(cls.work)

    def check(self, mode, text):
        path = os.path.join(self.work, "strata.yaml")
        with open(path, "w") as f:
            f.write(text)
        t0 = time.monotonic()
        p = subprocess.run([lib.BINARY, mode, "-config", path, "-check-config"],
                           capture_output=True, text=True, timeout=60)
        return p.returncode, p.stdout + p.stderr, time.monotonic() - t0, path

    def base(self, port=None):
        return f"""server:
  http_listen_address: 127.0.0.1:{port or lib.free_port()}
{bucket_config(os.path.join(self.work, "data"))}"""

    def test_out_of_range_values_refused_with_position(self):
        cases = [
            ("all", "querier:\n  query_threads: 1000000\n",
             r"querier\.query_threads: 1000000 is above the maximum 1024"),
            ("querier", "querier:\n  parallelism: 100000\n",
             r"querier\.parallelism: 100000 is above the maximum 1024"),
            ("compactor", "compactor:\n  delete_delay: 1s\n",
             r"compactor\.delete_delay: 1s is below the minimum 10s"),
            ("compactor", "compactor:\n  compaction_interval: 0s\n",
             r"compactor\.compaction_interval: 0s is below the minimum 100ms"),
            ("ingester", "ingester:\n  flush_interval: 0s\n",
             r"ingester\.flush_interval: 0s is below the minimum 10ms"),
        ]
        for mode, extra, message in cases:
            rc, out, took, path = self.check(mode, self.base() + extra)
            self.assertNotEqual(rc, 0, out)
            self.assertRegex(out, re.escape(path) + r":\d+:\d+: " + message, out)
            self.assertLess(took, 5, f"{mode}: -check-config took {took:.1f} s")

    def test_bounds_of_server_section(self):
        rc, out, _, path = self.check("all", f"""server:
  http_listen_address: 127.0.0.1:{lib.free_port()}
  grpc_threads: 5000
{bucket_config(os.path.join(self.work, "data"))}""")
        self.assertNotEqual(rc, 0)
        self.assertRegex(out, re.escape(path) + r":3:17: server\.grpc_threads: 5000 is above the "
                         r"maximum 1024")

    def test_delete_delay_follows_the_queriers_sync_interval(self):
        rc, out, _, _ = self.check("compactor", self.base() +
                                   "querier:\n  sync_interval: 100ms\ncompactor:\n"
                                   "  delete_delay: 1s\n")
        self.assertEqual(rc, 0, out)
        # a compactor that does not run does not judge its delete_delay
        rc, out, _, _ = self.check("querier", self.base() + "compactor:\n  delete_delay: 1s\n")
        self.assertEqual(rc, 0, out)
        # 0 deletes at once, as Thanos' --delete-delay=0 (tests)
        rc, out, _, _ = self.check("compactor", self.base() + "compactor:\n  delete_delay: 0s\n")
        self.assertEqual(rc, 0, out)
        # a long sync_interval raises the minimum above the default delete_delay
        rc, out, _, path = self.check("all", self.base() + "querier:\n  sync_interval: 1h\n")
        self.assertNotEqual(rc, 0)
        self.assertRegex(out, re.escape(path) + r":\d+:\d+: querier\.sync_interval: 1h makes the "
                         r"minimum compactor\.delete_delay 10h, above its value 30m")

    def test_check_config_starts_nothing(self):
        port = lib.free_port()
        rc, out, took, _ = self.check("all", self.base(port) + "querier:\n  query_threads: 1024\n")
        self.assertEqual(rc, 0, out)
        self.assertIn("configuration is valid", out)
        self.assertLess(took, 5)
        # nothing listened on the HTTP port
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


if __name__ == "__main__":
    unittest.main(verbosity=2)
