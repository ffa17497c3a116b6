#!/usr/bin/python3
"""Visibility by lineage end to end: every profile counted exactly once while the compactor
climbs from level 1 to level 4, by a querier that runs all along and by queriers started at every
step.

The reported bug: two series x 12 profiles 30 minutes apart, pushed one at a time (two level-1
blocks per timestamp), compacted to level 2 (one block per timestamp), level 3 (2-hour windows)
and level 4 (the day); a querier started then answered twice the data (48 profiles instead of
24) until the marked level-2 blocks were deleted: their marks name level-3 blocks that are
themselves hidden, and the level-4 block lists only level-1 blocks as sources and level-3 blocks
as parents (services/querier/block_index.h, "visibility by lineage").

`strata all` with its compactor disabled takes the writes (Parca's WriteRaw through Python grpcio)
and serves a querier that reads throughout; `strata compactor` runs separately, one level at a
time (block_ranges [5m], then [5m, 2h], then [5m, 2h, 24h]) with a delete_delay long enough that
every mark stays. After each step a separate `strata querier` starts on the bucket (reading the
compactor's bucket-index.json, then listing) and must answer the merge total, the profile count
and the range points of the single-count data exactly, without a warning: the querier folds
identical profiles that it meets in two blocks (which would hide a double count in the totals)
and says so, and no profile was stored twice here. Then the marked blocks go in the
compactor's order (level 1, then level 2: `strata bucket rm-block`, meta.json first), and finally
the compactor deletes the rest itself.
"""
import json
import os
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_testlib as lib  # noqa: E402
import test_query_common as qc  # noqa: E402
from test_query_common import NS, CPU_SAMPLES  # noqa: E402

import grpc  # noqa: E402
from parca.profilestore.v1alpha1 import profilestore_pb2_grpc as ps_grpc  # noqa: E402

TENANT = "lineage"
MD = [("x-scope-orgid", TENANT)]
DAY_S = 1_700_006_400  # a UTC day's start: every window below lies inside that day
START_S = DAY_S + 600
STEPS = 12
STEP_S = 1800
PODS = ("p0", "p1")
QUERY = CPU_SAMPLES + '{job="lineage"}'
Q_START = (START_S - 60) * NS
Q_END = (START_S + STEPS * STEP_S) * NS


def samples(k, p):
    """The CPU samples of pod p at step k, per stack."""
    return {qc.A: 10 * k + p + 1, qc.D: 3 + p}


def requests():
    """One WriteRaw per profile, so each becomes a level-1 block of its own."""
    out = []
    for k in range(STEPS):
        for p, pod in enumerate(PODS):
            t = START_S + k * STEP_S
            out.append(qc.write_request([({"__name__": "process_cpu", "job": "lineage", "pod": pod},
                                          [qc.cpu_pprof(t - qc.T0_S, samples(k, p))])]))
    return out


def want_merge():
    """The single-count merge: (total, profiles, no warnings)."""
    total = sum(sum(samples(k, p).values()) * qc.PERIOD for k in range(STEPS) for p in range(len(PODS)))
    return total, STEPS * len(PODS), []


def want_range():
    """({pod: [(timestamp ms, value, count)]} for a 60 s step grouped by pod, no warnings)."""
    return ({pod: [((START_S + k * STEP_S) * 1000, sum(samples(k, p).values()) * qc.PERIOD, 1)
                   for k in range(STEPS)]
             for p, pod in enumerate(PODS)}, [])


def merge_answer(base):
    """(total, profiles, warnings). The querier folds identical profiles met in two blocks and
    says so in `warnings`: this data holds none, so any warning means a block was read together
    with a block that holds its data (the lineage bug, hidden in the totals by that folding)."""
    j = qc.http_json(base, "/api/v1/query", {"query": QUERY, "start": qc.ms(Q_START),
                                             "end": qc.ms(Q_END), "report": "top"}, tenant=TENANT)
    return j["total"], j["profiles"], j.get("warnings", [])


def range_answer(base):
    """({pod: [(timestamp ms, value, count)]}, warnings)"""
    j = qc.http_json(base, "/api/v1/query_range", {"query": QUERY, "start": qc.ms(Q_START),
                                                   "end": qc.ms(Q_END), "step": "60s",
                                                   "sum_by": ["pod"]}, tenant=TENANT)
    return ({s["labels"]["pod"]: [(int(x["timestamp"]), int(x["value"]), int(x["count"]))
                                  for x in s["samples"]]
             for s in j["series"]}, j.get("warnings", []))


def bucket_state(directory):
    """{ulid: {"level": int or None (no meta.json), "marked": bool}} of the tenant, from disk."""
    out = {}
    root = os.path.join(directory, TENANT)
    if not os.path.isdir(root):
        return out
    for name in os.listdir(root):
        d = os.path.join(root, name)
        if not os.path.isdir(d):
            continue
        level = None
        try:
            with open(os.path.join(d, "meta.json")) as f:
                level = json.load(f)["compaction"]["level"]
        except (OSError, ValueError, KeyError):
            pass
        out[name] = {"level": level, "marked": os.path.exists(os.path.join(d, "deletion-mark.json"))}
    return out


def census(directory):
    """(sorted (level, marked) counts of committed blocks, bucket-index.json matches the bucket)."""
    state = bucket_state(directory)
    counts = {}
    for b in state.values():
        if b["level"] is not None:
            key = (b["level"], b["marked"])
            counts[key] = counts.get(key, 0) + 1
    index_current = False
    try:
        with open(os.path.join(directory, TENANT, "bucket-index.json")) as f:
            index = json.load(f)
        committed = {u for u, b in state.items() if b["level"] is not None}
        marked = {u for u, b in state.items() if b["level"] is not None and b["marked"]}
        index_current = ({b["ulid"] for b in index["blocks"]} == committed
                         and {m["id"] for m in index["block_deletion_marks"]} == marked)
    except (OSError, ValueError, KeyError):
        pass
    return sorted(counts.items()), index_current


class Reader(threading.Thread):
    """Reads the long-running querier in a loop; records every answer that is not the single
    count."""

    def __init__(self, base, want):
        super().__init__(daemon=True)
        self.base, self.want = base, want
        self.stop_flag = threading.Event()
        self.reads = 0
        self.bad = []

    def run(self):
        while not self.stop_flag.is_set():
            try:
                got = merge_answer(self.base)
            except Exception as e:  # noqa: BLE001 - recorded as a wrong answer
                got = ("error", str(e)[:300])
            if got != self.want:
                self.bad.append(got)
            self.reads += 1
            time.sleep(0.02)

    def finish(self):
        self.stop_flag.set()
        self.join(timeout=30)
        return self.reads, self.bad


class LineageTest(unittest.TestCase):
    def setUp(self):
        self.work = lib.make_workdir("lineage")
        self.data = os.path.join(self.work, "data")
        self.bucket = f"""bucket:
  type: FILESYSTEM
  config:
    directory: {self.data}
"""
        self.grpc_port, self.http_port = lib.free_port(), lib.free_port()
        self.base = f"http://127.0.0.1:{self.http_port}"
        self.all = lib.Strata(self.work, "all", f"""server:
  grpc_listen_address: 127.0.0.1:{self.grpc_port}
  http_listen_address: 127.0.0.1:{self.http_port}
{self.bucket}ingester:
  flush_interval: 50ms
querier:
  sync_interval: 100ms
compactor:
  enabled: false
""").start(ready_url=self.base + "/ready")
        self.queriers = 0
        self.compactions = 0
        self.bad_exits = []
        self.reader = None

    def tearDown(self):
        if self.reader is not None:
            self.reader.finish()
        if self.all.proc is not None and self.all.stop() != 0:
            self.bad_exits.append(("all", self.all.logs()))
        lib.remove_workdir(self.work)
        for name, logs in self.bad_exits:
            print(f"--- strata {name} ---\n{logs[-5000:]}", file=sys.stderr)
        self.assertEqual([n for n, _ in self.bad_exits], [], "a strata process exited with an error")

    def compact(self, ranges, delete_delay, want):
        """Runs `strata compactor` with these block ranges until the bucket holds `want` (sorted
        ((level, marked), count)) and bucket-index.json describes it, then stops it."""
        self.compactions += 1
        port = lib.free_port()
        c = lib.Strata(self.work, f"compactor-{self.compactions}", f"""server:
  http_listen_address: 127.0.0.1:{port}
{self.bucket}compactor:
  compaction_interval: 200ms
  block_ranges: [{", ".join(ranges)}]
  consistency_delay: 1m
  delete_delay: {delete_delay}
""")
        c.mode = "compactor"
        c.start(ready_url=f"http://127.0.0.1:{port}/ready")
        try:
            lib.wait_for(lambda: census(self.data) == (want, True), timeout=90,
                         what=f"compaction with block_ranges {ranges} to give {want}")
        except AssertionError:
            print(census(self.data), c.logs()[-3000:], file=sys.stderr)
            raise
        finally:
            if c.stop() != 0:
                self.bad_exits.append((f"compactor-{self.compactions}", c.logs()))

    def fresh_querier(self, step):
        """A `strata querier` started now answers exactly the single-count data."""
        self.queriers += 1
        g, h = lib.free_port(), lib.free_port()
        q = lib.Strata(self.work, f"querier-{self.queriers}", f"""server:
  grpc_listen_address: 127.0.0.1:{g}
  http_listen_address: 127.0.0.1:{h}
{self.bucket}querier:
  sync_interval: 100ms
""")
        q.mode = "querier"
        base = f"http://127.0.0.1:{h}"
        q.start(ready_url=base + "/ready")
        try:
            self.assertEqual(merge_answer(base), want_merge(), f"{step}: merge of a querier started then")
            self.assertEqual(range_answer(base), want_range(), f"{step}: range of a querier started then")
        finally:
            if q.stop() != 0:
                self.bad_exits.append((f"querier-{self.queriers}", q.logs()))

    def rm_blocks(self, level):
        """Deletes the blocks of a level as the compactor does when their delay is over
        (`strata bucket rm-block`: meta.json first)."""
        cfg = os.path.join(self.work, "bucket.yaml")
        with open(cfg, "w") as f:
            f.write(self.bucket)
        for u, b in bucket_state(self.data).items():
            if b["level"] == level:
                p = subprocess.run([lib.BINARY, "bucket", "rm-block", "-config", cfg, f"{TENANT}/{u}"],
                                       capture_output=True, text=True, timeout=60)
                self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_each_profile_counted_once_at_every_level(self):
        channel = grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}")
        store = ps_grpc.ProfileStoreServiceStub(channel)
        for r in requests():
            store.WriteRaw(r, metadata=MD, timeout=30)
        channel.close()
        lib.wait_for(lambda: census(self.data)[0] == [((1, False), STEPS * len(PODS))],
                     what="one level-1 block per write")
        want = want_merge()
        self.assertEqual(merge_answer(self.base), want)
        self.assertEqual(range_answer(self.base), want_range())
        self.fresh_querier("level 1")

        reader = self.reader = Reader(self.base, want)
        reader.start()
        self.compact(["5m"], "1h", [((1, True), 24), ((2, False), 12)])
        self.fresh_querier("level 2, level 1 marked")
        self.compact(["5m", "2h"], "1h", [((1, True), 24), ((2, True), 12), ((3, False), 3)])
        self.fresh_querier("level 3, levels 1 and 2 marked")
        self.compact(["5m", "2h", "24h"], "1h",
                     [((1, True), 24), ((2, True), 12), ((3, True), 3), ((4, False), 1)])
        self.fresh_querier("level 4, levels 1 to 3 marked")
        reads, bad = reader.finish()
        self.reader = None
        self.assertGreater(reads, 10)
        self.assertEqual(bad, [], "answers of the querier running all along")

        # The report's case: `strata all` restarted now.
        self.assertEqual(self.all.stop(), 0)
        self.all.start(ready_url=self.base + "/ready")
        self.assertEqual(merge_answer(self.base), want, "strata all restarted at level 4")
        self.assertEqual(range_answer(self.base), want_range(), "strata all restarted at level 4")

        self.rm_blocks(1)
        self.fresh_querier("level 1 deleted, levels 2 and 3 marked")
        self.rm_blocks(2)
        self.fresh_querier("levels 1 and 2 deleted, level 3 marked")
        self.compact(["5m", "2h", "24h"], "0s", [((4, False), 1)])
        self.fresh_querier("level 4 alone")
        lib.wait_for(lambda: merge_answer(self.base) == want, what="the running querier's answer")
        self.assertEqual(range_answer(self.base), want_range())


if __name__ == "__main__":
    unittest.main(verbosity=2)
