"""Shared helpers for Strata's integration tests: free ports, the Go pprof target, the strata
binary as a subprocess, Python gRPC stubs generated from proto/, and independent pprof parsing.

Tests run under /usr/bin/python3 (Debian's grpcio). Paths come from the environment that ctest
sets: STRATA_BINARY, STRATA_SOURCE_DIR, STRATA_PYTHON_STUBS (a directory to generate stubs into).
"""
import fcntl
import gzip
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

SOURCE_DIR = os.environ.get("STRATA_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
BINARY = os.environ.get("STRATA_BINARY", os.path.join(SOURCE_DIR, "build", "cmd", "strata", "strata"))


def stubs_stale(marker):
    """True when the stubs are missing or older than some .proto file (one added or edited)."""
    if not os.path.exists(marker):
        return True
    built = os.path.getmtime(marker)
    for root, _, files in os.walk(os.path.join(SOURCE_DIR, "proto")):
        if any(f.endswith(".proto") and os.path.getmtime(os.path.join(root, f)) > built
               for f in files):
            return True
    return False


def load_stubs():
    """Generates the Python stubs (again when a .proto changed) and puts them on sys.path."""
    out = os.environ.get("STRATA_PYTHON_STUBS") or os.path.join(tempfile.gettempdir(), "strata-stubs")
    marker = os.path.join(out, "parca", "profilestore", "v1alpha1", "profilestore_pb2_grpc.py")
    # ctest runs tests in parallel: under a lock one of them generates while the others wait, so
    # none imports a module another is still writing (a CI run's test failed on a stub module
    # without its classes yet).
    lock_path = os.path.abspath(out) + ".lock"
    os.makedirs(os.path.dirname(lock_path), exist_ok=True)
    try:
        lock = open(lock_path, "a")
    except PermissionError:  # made by a test run as root: a lock can be taken reading it too
        lock = open(lock_path)
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stubs_stale(marker):
            subprocess.run([os.path.join(SOURCE_DIR, "tests", "python", "gen_stubs.sh"), out],
                           check=True)
    if out not in sys.path:
        sys.path.insert(0, out)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout=30.0, interval=0.1, what="condition"):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            if predicate():
                return
        except Exception as e:  # noqa: BLE001 - reported on timeout
            last = e
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}: {last}")


def http_get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read()


class GoTarget:
    """The Go program in tests/gotarget serving net/http/pprof."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.binary = os.path.join(workdir, "gotarget")
        self.proc = None
        self.address = None

    def start(self):
        if not os.path.exists(self.binary):
            subprocess.run([os.path.join(SOURCE_DIR, "tests", "gotarget", "build.sh"), self.binary],
                           check=True)
        port_file = os.path.join(self.workdir, "gotarget.addr")
        self.proc = subprocess.Popen([self.binary, "-listen", "127.0.0.1:0", "-port-file", port_file],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: os.path.exists(port_file), what="gotarget to listen")
        with open(port_file) as f:
            self.address = f.read().strip()
        return self

    def fetch(self, path):
        status, body = http_get(f"http://{self.address}{path}", timeout=30)
        assert status == 200, f"{path}: HTTP {status}"
        return body

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


class Strata:
    """A strata process (any mode) with a config written to a temp dir."""

    def __init__(self, workdir, mode, config_text):
        self.workdir = workdir
        self.mode = mode
        self.config_path = os.path.join(workdir, f"strata-{mode}.yaml")
        with open(self.config_path, "w") as f:
            f.write(config_text)
        self.proc = None
        self.log_path = os.path.join(workdir, f"strata-{mode}.log")

    def start(self, ready_url=None, env=None):
        """env: extra environment variables for the process."""
        self.log = open(self.log_path, "w")
        full_env = dict(os.environ, **env) if env else None
        self.proc = subprocess.Popen([BINARY, self.mode, "-config", self.config_path],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=full_env)
        if ready_url:
            wait_for(lambda: http_get(ready_url)[0] == 200, what=f"{ready_url} to be ready")
        return self

    def stop(self, sig=None, timeout=30):
        if self.proc is None:
            return None
        if sig is None:
            self.proc.terminate()
        else:
            self.proc.send_signal(sig)
        rc = self.proc.wait(timeout=timeout)
        self.proc = None
        self.log.close()
        return rc

    def logs(self):
        with open(self.log_path) as f:
            return f.read()


class LocalStrata:
    """`strata all` on a FILESYSTEM bucket under a fresh work directory, no compactor, with a gRPC
    channel to it: the setup of tests that push and query one process."""

    def __init__(self, name, extra_config=""):
        import grpc
        self.work = make_workdir(name)
        ports = [free_port() for _ in range(2)]
        self.http = f"http://127.0.0.1:{ports[1]}"
        self.grpc_address = f"127.0.0.1:{ports[0]}"
        self.server = Strata(self.work, "all", f"""
server:
  grpc_listen_address: 127.0.0.1:{ports[0]}
  http_listen_address: 127.0.0.1:{ports[1]}
bucket:
  type: FILESYSTEM
  config:
    directory: {os.path.join(self.work, "data")}
compactor:
  enabled: false
{extra_config}""").start(ready_url=self.http + "/ready")
        self.channel = grpc.insecure_channel(self.grpc_address)

    def close(self):
        self.channel.close()
        if self.server.stop() != 0:
            print(self.server.logs())
        remove_workdir(self.work)


def arrow_rows(records):
    """Decodes Arrow IPC streams (bytes) with npm's apache-arrow: for each, {"fields": ["name:type",
    ...], "rows": [{column: value}]} with 64-bit integers as decimal strings (tests/clients/
    arrow_dump.mjs; needs `npm ci` there, as scripts/test.sh runs)."""
    import base64
    import json
    clients = os.path.join(SOURCE_DIR, "tests", "clients")
    lines = "\n".join(base64.b64encode(r).decode() for r in records) + "\n"
    out = subprocess.run(["node", "arrow_dump.mjs"], input=lines, cwd=clients,
                         capture_output=True, text=True, timeout=120, check=True)
    return [json.loads(line) for line in out.stdout.splitlines()]


def decode_pprof(data):
    """Parses pprof bytes with the Python protobuf stubs (independent of Strata's C decoder)."""
    from perftools.profiles import profile_pb2
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    p = profile_pb2.Profile()
    p.ParseFromString(data)
    return p


def pprof_expectations(p):
    """Per sample type: total, distinct non-zero stacks and the function names they touch."""
    strings = p.string_table
    functions = {f.id: strings[f.name] for f in p.function}
    locations = {loc.id: loc for loc in p.location}
    out = {}
    for t, st in enumerate(p.sample_type):
        key = (strings[st.type], strings[st.unit])
        stacks = {}
        for s in p.sample:
            v = s.value[t]
            if v == 0:
                continue
            stack = tuple(s.location_id)
            stacks[stack] = stacks.get(stack, 0) + v
        names = set()
        for stack, v in stacks.items():
            if v == 0:
                continue
            for lid in stack:
                for line in locations[lid].line:
                    names.add(functions[line.function_id])
        out[key] = {
            "total": sum(stacks.values()),
            "stacks": sum(1 for v in stacks.values() if v != 0),
            "functions": names,
        }
    return out


def make_workdir(name):
    d = tempfile.mkdtemp(prefix=f"strata-{name}-")
    return d


def remove_workdir(d):
    shutil.rmtree(d, ignore_errors=True)
