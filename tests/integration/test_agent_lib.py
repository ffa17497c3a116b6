"""Helpers for the agent's integration tests: a WriteRaw sink (Python grpcio, independent of
Strata's C code) that keeps every request the agent pushes, decodes the pprofs, and turns them
into (labels, stacks) records a test can assert on.
"""
import concurrent.futures
# Imported here, not lazily by concurrent.futures.__getattr__ inside a test: a lazy import while
# other threads (fault proxies, grpc) import can hit a CPython 3.11 import-lock KeyError.
import concurrent.futures.thread  # noqa: F401
import os
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_testlib as lib  # noqa: E402

lib.load_stubs()
import grpc  # noqa: E402
from parca.profilestore.v1alpha1 import profilestore_pb2 as ps  # noqa: E402
from parca.profilestore.v1alpha1 import profilestore_pb2_grpc as ps_grpc  # noqa: E402

AGENT_BINARY = os.environ.get("STRATA_AGENT_BINARY") or os.path.join(
    lib.SOURCE_DIR, "build-agent", "agent", "strata-agent")


class Sink(ps_grpc.ProfileStoreServiceServicer):
    """Accepts WriteRaw and records each series as a dict."""

    def __init__(self, fail_first=0):
        self.lock = threading.Lock()
        self.requests = []
        self.fail_first = fail_first
        self.calls = 0
        self.tenants = []

    def WriteRaw(self, request, context):
        with self.lock:
            self.calls += 1
            if self.calls <= self.fail_first:
                context.abort(grpc.StatusCode.UNAVAILABLE, "sink warming up")
            self.requests.append(request)
            md = dict(context.invocation_metadata())
            self.tenants.append(md.get("x-scope-orgid"))
        return ps.WriteRawResponse()

    def series(self):
        with self.lock:
            reqs = list(self.requests)
        out = []
        for r in reqs:
            for s in r.series:
                labels = {l.name: l.value for l in s.labels.labels}
                for sample in s.samples:
                    out.append((labels, lib.decode_pprof(sample.raw_profile)))
        return out


def start_sink(fail_first=0):
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
    sink = Sink(fail_first)
    ps_grpc.add_ProfileStoreServiceServicer_to_server(sink, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, sink, port


def stacks(profile):
    """[(count, [frame names leaf first], [mapping filenames])] for a decoded pprof; a frame
    without a function is shown as 0x<address>."""
    strings = profile.string_table
    functions = {f.id: strings[f.name] for f in profile.function}
    mappings = {m.id: m for m in profile.mapping}
    locations = {loc.id: loc for loc in profile.location}
    out = []
    for s in profile.sample:
        names, files = [], []
        for lid in s.location_id:
            loc = locations[lid]
            if loc.line:
                names.extend(functions[line.function_id] for line in loc.line)
            else:
                names.append(f"0x{loc.address:x}")
            m = mappings.get(loc.mapping_id)
            files.append(strings[m.filename] if m else "")
        out.append((s.value[0], names, files))
    return out


def contains_in_order(names, expected):
    """True if expected (callee first) appears as consecutive frames in names."""
    n = len(expected)
    return any(names[i:i + n] == expected for i in range(len(names) - n + 1))


def build_c(source, output, extra=()):
    subprocess.run(["gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-fno-inline", "-pthread",
                    *extra, "-o", output, source], check=True)


def build_cxx(source, output):
    subprocess.run(["g++", "-O1", "-g", "-fno-omit-frame-pointer", "-fno-inline", "-o", output,
                    source], check=True)


def build_go(source_dir, output):
    env = dict(os.environ, HOME=os.path.dirname(output), GOCACHE=output + ".gocache",
               GOFLAGS="-mod=mod", GOPROXY="off", GOTOOLCHAIN="local")
    subprocess.run(["go", "build", "-ldflags=-s -w", "-o", output, "."], cwd=source_dir, env=env,
                   check=True)
