"""Shared pieces of the querier integration tests (not a test by itself): a synthetic dataset built
as real pprof protobufs with known stacks, values and times, an independent Python model of what
Parca's query semantics give for it (reference/parca-api.md sections 1.3, 1.7, 3), and small
gRPC / HTTP helpers.

The model is deliberately simple and written from the reference, not from Strata's code: merges
sum values per stack (x period for samples:count), trees are prefix trees of function names with
children sorted by name, the top table counts a function once per stack, and a diff in relative
mode scales each node of the smaller side by larger/smaller rounding half away from zero.
"""
import gzip
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from fractions import Fraction

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_testlib as lib  # noqa: E402

lib.load_stubs()
from perftools.profiles import profile_pb2  # noqa: E402
from parca.profilestore.v1alpha1 import profilestore_pb2 as ps  # noqa: E402

NS = 1_000_000_000
T0_S = 1_700_000_400          # aligned to 10 s, 60 s and 120 s
T0 = T0_S * NS
PERIOD = 10_000_000           # 100 Hz
CPU_NS_PER_SAMPLE = 10_001_000  # deliberately != PERIOD: tells the two CPU sample types apart
DURATION = 10 * NS
MEM_PERIOD = 524288

CPU_SAMPLES = "process_cpu:samples:count:cpu:nanoseconds:delta"
CPU_NANOS = "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta"
MEM_SPACE = "memory:inuse_space:bytes:space:bytes"
MEM_OBJECTS = "memory:inuse_objects:count:space:bytes"
ALL_TYPES = sorted([CPU_SAMPLES, CPU_NANOS, MEM_SPACE, MEM_OBJECTS])

S1 = {"job": "api", "instance": "10.0.0.1:8080", "pod": "api-1"}
S2 = {"job": "api", "instance": "10.0.0.2:8080", "pod": "api-2"}
S3 = {"job": "worker", "instance": "10.0.0.3:8080", "pod": "worker-1", "queue": "jobs"}

# Stacks, root first.
A = ("main", "app.handle", "app.parse")
B = ("main", "app.handle", "app.encode")
C = ("main", "app.handle")
D = ("main", "app.encode", "libc.memcpy")
T = ("main", "app.tiny")
R = ("main", "worker.run", "worker.run", "worker.step")  # recursion
W = ("main", "worker.run")
M1 = ("main", "app.alloc", "bytes.makeSlice")
M2 = ("main", "app.cache")

# CPU profiles: (series, seconds after T0, {stack: samples}).
CPU_PROFILES = [
    (S1, 0, {A: 10, B: 5}),
    (S1, 10, {A: 20, C: 3, T: 1}),
    (S1, 20, {B: 7}),
    (S1, 70, {A: 4, D: 6}),
    (S2, 0, {A: 1, B: 2}),
    (S2, 30, {D: 8}),
    (S3, 10, {R: 50}),
    (S3, 130, {R: 30, W: 5}),
]
# Heap-like profiles (duration 0): (series, seconds after T0, {stack: (objects, bytes)}).
MEM_PROFILES = [
    (S1, 5, {M1: (2, 4096), M2: (1, 1000)}),
    (S1, 35, {M1: (3, 6144)}),
    (S1, 65, {M1: (1, 2048), M2: (4, 4000)}),
    (S2, 25, {M2: (10, 10000)}),
    (S2, 90, {M1: (5, 10240)}),
]


class PprofBuilder:
    """Builds one pprof Profile with interned strings, one function and location per name."""

    def __init__(self, sample_types, period_type, period, time_ns, duration_ns, build_id=None):
        self.p = profile_pb2.Profile()
        self.strings = {"": 0}
        self.p.string_table.append("")
        self.functions = {}
        for t, u in sample_types:
            self.p.sample_type.add(type=self.s(t), unit=self.s(u))
        self.p.period_type.type = self.s(period_type[0])
        self.p.period_type.unit = self.s(period_type[1])
        self.p.period = period
        self.p.time_nanos = time_ns
        self.p.duration_nanos = duration_ns
        self.p.mapping.add(id=1, memory_start=0x400000, memory_limit=0x800000, file_offset=0,
                           filename=self.s("/usr/bin/app"), has_functions=True,
                           build_id=self.s(build_id) if build_id else 0)

    def s(self, text):
        if text not in self.strings:
            self.strings[text] = len(self.p.string_table)
            self.p.string_table.append(text)
        return self.strings[text]

    def location(self, name):
        if name not in self.functions:
            fid = len(self.functions) + 1
            self.p.function.add(id=fid, name=self.s(name), system_name=self.s(name),
                                filename=self.s("app.go"), start_line=10 * fid)
            loc = self.p.location.add(id=fid, mapping_id=1, address=0x400000 + 0x100 * fid)
            loc.line.add(function_id=fid, line=10 * fid + 1)
            self.functions[name] = fid
        return self.functions[name]

    def sample(self, stack, values):
        self.p.sample.add(location_id=[self.location(n) for n in reversed(stack)], value=values)

    def bytes(self, gz=True):
        raw = self.p.SerializeToString()
        return gzip.compress(raw) if gz else raw


def cpu_pprof(t_s, stacks, gz=True):
    b = PprofBuilder([("samples", "count"), ("cpu", "nanoseconds")], ("cpu", "nanoseconds"), PERIOD,
                     T0 + t_s * NS, DURATION)
    for stack, n in stacks.items():
        b.sample(stack, [n, n * CPU_NS_PER_SAMPLE])
    return b.bytes(gz)


def mem_pprof(t_s, stacks, gz=True):
    b = PprofBuilder([("inuse_objects", "count"), ("inuse_space", "bytes")], ("space", "bytes"),
                     MEM_PERIOD, T0 + t_s * NS, 0)
    for stack, (objs, nbytes) in stacks.items():
        b.sample(stack, [objs, nbytes])
    return b.bytes(gz)


def write_request(series):
    """series: list of (labels dict incl. __name__, [raw pprof bytes])"""
    req = ps.WriteRawRequest()
    for labels, raws in series:
        s = req.series.add()
        for k, v in labels.items():
            s.labels.labels.add(name=k, value=v)
        for raw in raws:
            s.samples.add(raw_profile=raw)
    return req


def dataset_requests():
    """One WriteRaw per distinct timestamp (so the data spans many blocks with different symbol
    tables), in time order."""
    by_time = {}
    for labels, t, stacks in CPU_PROFILES:
        by_time.setdefault(t, []).append(({"__name__": "process_cpu", **labels}, [cpu_pprof(t, stacks)]))
    for labels, t, stacks in MEM_PROFILES:
        # Uncompressed on purpose: both encodings must be accepted.
        by_time.setdefault(t, []).append(({"__name__": "memory", **labels}, [mem_pprof(t, stacks, gz=False)]))
    return [write_request(by_time[t]) for t in sorted(by_time)]


# ---- the model ------------------------------------------------------------------------------

class Profile:
    def __init__(self, type_name, labels, time_ns, duration_ns, stacks):
        self.type = type_name
        self.labels = labels
        self.time_ns = time_ns
        self.duration_ns = duration_ns
        self.stacks = stacks  # {stack: value already scaled as Parca shows it}


def model_profiles():
    out = []
    for labels, t, stacks in CPU_PROFILES:
        out.append(Profile(CPU_SAMPLES, labels, T0 + t * NS, DURATION,
                           {s: n * PERIOD for s, n in stacks.items()}))
        out.append(Profile(CPU_NANOS, labels, T0 + t * NS, DURATION,
                           {s: n * CPU_NS_PER_SAMPLE for s, n in stacks.items()}))
    for labels, t, stacks in MEM_PROFILES:
        out.append(Profile(MEM_OBJECTS, labels, T0 + t * NS, 0, {s: v[0] for s, v in stacks.items()}))
        out.append(Profile(MEM_SPACE, labels, T0 + t * NS, 0, {s: v[1] for s, v in stacks.items()}))
    return out


PROFILES = model_profiles()


def select(type_name, pred=lambda labels: True, start=None, end=None):
    return [p for p in PROFILES if p.type == type_name and pred(p.labels)
            and (start is None or p.time_ns >= start) and (end is None or p.time_ns <= end)]


def merge_stacks(profiles):
    out = {}
    for p in profiles:
        for s, v in p.stacks.items():
            out[s] = out.get(s, 0) + v
    return out


class Node:
    def __init__(self, name):
        self.name = name
        self.self_b = 0
        self.self_a = 0
        self.children = {}

    def child(self, name):
        if name not in self.children:
            self.children[name] = Node(name)
        return self.children[name]

    def total_b(self):
        return self.self_b + sum(c.total_b() for c in self.children.values())

    def total_a(self):
        return self.self_a + sum(c.total_a() for c in self.children.values())

    def sorted_children(self):
        return [self.children[k] for k in sorted(self.children)]


def build_tree(b_stacks, a_stacks=None):
    root = Node("total")
    for s, v in b_stacks.items():
        n = root
        for f in s:
            n = n.child(f)
        n.self_b += v
    for s, v in (a_stacks or {}).items():
        n = root
        for f in s:
            n = n.child(f)
        n.self_a += v
    return root


def round_half_away(fr):
    n = abs(fr.numerator) * 2 + fr.denominator
    q = n // (2 * fr.denominator)
    return q if fr >= 0 else -q


def scale_stacks(stacks, num, den):
    return {s: round_half_away(Fraction(v * num, den)) for s, v in stacks.items()}


def diff_stacks(a, b, absolute=False):
    """Returns (a, b) as compared: relative mode scales the smaller side to the larger."""
    ta, tb = sum(a.values()), sum(b.values())
    if absolute or ta == 0 or tb == 0 or ta == tb:
        return a, b
    if ta < tb:
        return scale_stacks(a, tb, ta), b
    return a, scale_stacks(b, ta, tb)


def tree_shape(node, trim=0.0, diff=False):
    """Nested (name, cumulative, diff, [children]) as Parca's Flamegraph, trimming children with
    cumulative <= parent cumulative * trim / 100; returns (shape, trimmed sum)."""
    trimmed = 0
    kids = []
    cum = node.total_b()
    for c in node.sorted_children():
        if trim > 0 and c.total_b() <= cum * trim / 100.0:
            trimmed += c.total_b()
            continue
        shape, t = tree_shape(c, trim, diff)
        trimmed += t
        kids.append(shape)
    d = cum - node.total_a() if diff else 0
    return (node.name, cum, d, kids), trimmed


def top_rows(b_stacks, a_stacks=None):
    """[(name, flat, cumulative, diff)] sorted by flat desc, cumulative desc (then name for ties,
    which the dataset avoids)."""
    flat, cum, cum_a = {}, {}, {}
    for s, v in b_stacks.items():
        flat[s[-1]] = flat.get(s[-1], 0) + v
        for f in set(s):
            cum[f] = cum.get(f, 0) + v
    for s, v in (a_stacks or {}).items():
        for f in set(s):
            cum_a[f] = cum_a.get(f, 0) + v
    names = set(cum) | set(cum_a)
    rows = [(n, flat.get(n, 0), cum.get(n, 0),
             cum.get(n, 0) - cum_a.get(n, 0) if a_stacks is not None else 0) for n in names]
    rows = [r for r in rows if r[1] or r[2] or cum_a.get(r[0], 0)]
    rows.sort(key=lambda r: (-r[1], -r[2]))
    return rows


def flamebearer_levels(root, side="b"):
    """Absolute (x, total, self, name) per level for one side of the tree, as the flamebearer
    positions nodes (a node's x = parent's x + totals of preceding siblings)."""
    levels = []

    def total(n):
        return n.total_b() if side == "b" else n.total_a()

    def self_of(n):
        return n.self_b if side == "b" else n.self_a

    def walk(n, depth, x):
        while len(levels) <= depth:
            levels.append([])
        levels[depth].append((x, total(n), self_of(n), n.name))
        cx = x
        for c in n.sorted_children():
            walk(c, depth + 1, cx)
            cx += total(c)

    walk(root, 0, 0)
    return levels


# ---- range model ----------------------------------------------------------------------------

def range_delta(type_name, pred, start, end, step, sum_by):
    """{labels tuple: [(bucket_ns, value, duration, count)]} for a delta type."""
    cells = {}
    for p in select(type_name, pred, start, end):
        key = tuple(sorted((k, p.labels[k]) for k in sum_by if k in p.labels))
        bucket = p.time_ns // step * step
        c = cells.setdefault(key, {}).setdefault(bucket, {"value": 0, "times": set(), "count": 0,
                                                         "dur": p.duration_ns})
        c["value"] += sum(p.stacks.values())
        c["times"].add(p.time_ns)
        c["count"] += 1
    out = {}
    for key, buckets in cells.items():
        out[key] = [(b, c["value"], c["dur"] if len(c["times"]) == 1 else step, c["count"])
                    for b, c in sorted(buckets.items())]
    return out


def range_nondelta(type_name, pred, start, end, step):
    """{labels tuple: [(time_ns, value)]}: the first profile of each step bucket per series."""
    out = {}
    for p in sorted(select(type_name, pred, start, end), key=lambda p: p.time_ns):
        key = tuple(sorted(p.labels.items()))
        pts = out.setdefault(key, [])
        if pts and pts[-1][0] // step == p.time_ns // step:
            continue
        pts.append((p.time_ns, sum(p.stacks.values())))
    return out


# ---- HTTP -----------------------------------------------------------------------------------

def http(base, path, params=None, tenant=None, accept=None, timeout=30):
    """GET base+path?params; returns (status, content type, body bytes) without raising."""
    url = base + path
    if params:
        url += "?" + urllib.parse.urlencode(params, doseq=True)
    req = urllib.request.Request(url)
    if tenant:
        req.add_header("X-Scope-OrgID", tenant)
    if accept:
        req.add_header("Accept", accept)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read()


def http_json(base, path, params=None, tenant=None):
    status, ctype, body = http(base, path, params, tenant, accept="application/json")
    if status != 200:
        raise AssertionError(f"{path} {params}: HTTP {status}: {body[:500]!r}")
    return json.loads(body)


def ms(ns):
    return str(ns // 1_000_000)
