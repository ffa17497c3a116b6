#!/usr/bin/python3
"""The compactor end to end on a FILESYSTEM bucket, with a separate querier reading throughout.

`strata all` with the compactor disabled runs the ingester and the querier; `strata compactor` runs
alone in its own process so it can be killed. The dataset of test_query_common.py (plus ten more
5-minute windows of CPU profiles) goes in through Parca's WriteRaw (Python grpcio), one block per
request. Then:

- the answers (merge totals, flame graph function names and values, range series, label values)
  are identical before and after compaction, and the querier reading all the while gets exactly
  those answers every time, while blocks are merged, marked and deleted;
- the compactor killed with SIGKILL at random points (5 seeds, several kills each) and restarted
  finishes with one level-3 block, and no answer read meanwhile lost or doubled anything;
- a querier started afterwards reads bucket-index.json instead of every meta.json;
- retention (a per-tenant override) deletes exactly the blocks whose maxTime is past it;
- in `strata all` (compactor enabled), pprof locations without lines (what the eBPF agent sends for
  stripped binaries and [vdso]) compact to a level-2 block, and queries still show their addresses.
"""
import gzip
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_testlib as lib  # noqa: E402
import test_query_common as qc  # noqa: E402
from test_query_common import NS, T0, CPU_SAMPLES, MEM_SPACE, ALL_TYPES  # noqa: E402

import grpc  # noqa: E402
from parca.profilestore.v1alpha1 import profilestore_pb2_grpc as ps_grpc  # noqa: E402
from perftools.profiles import profile_pb2  # noqa: E402

TENANT = "team-a"
MD = [("x-scope-orgid", TENANT)]
EXTRA_WINDOWS = 10
END = T0 + (EXTRA_WINDOWS + 1) * 300 * NS


def extra_requests():
    """Ten more 5-minute windows after the dataset's, three CPU profiles each."""
    reqs = []
    for w in range(1, EXTRA_WINDOWS + 1):
        for k in range(3):
            t = w * 300 + 20 * k
            stacks = {qc.A: w + k + 1, qc.D: 2 * w + 1} if k != 1 else {qc.R: w}
            reqs.append(qc.write_request([({"__name__": "process_cpu", **qc.S1}, [qc.cpu_pprof(t, stacks)])]))
    return reqs


def answers(base):
    """Everything compared before/after: per type the merged total and flame graph (names and
    values per level), range series per pod, and label values."""
    out = {}
    for t in ALL_TYPES:
        j = qc.http_json(base, "/api/v1/query", {"query": t, "start": qc.ms(T0), "end": qc.ms(END),
                                                 "report": "flamegraph"}, tenant=TENANT)
        fb = j["flamegraph"]["flamebearer"]
        out[t] = {"total": j["total"], "profiles": j["profiles"], "names": fb["names"],
                  "levels": fb["levels"]}
    j = qc.http_json(base, "/api/v1/query_range", {"query": CPU_SAMPLES, "start": qc.ms(T0),
                                                   "end": qc.ms(END), "step": "60s",
                                                   "sum_by": ["pod"]}, tenant=TENANT)
    out["range"] = sorted(json.dumps(s, sort_keys=True) for s in j["series"])
    out["pods"] = qc.http_json(base, "/api/v1/labels/pod/values", tenant=TENANT)["label_values"]
    return out


def lineless_pprof(t_s, n):
    """A CPU pprof as the eBPF agent sends it for code it cannot symbolize: locations with an
    address and a mapping but no line (a stripped binary, [vdso]) under a symbolized main. Stacks,
    leaf first: [0x401234, main] = n samples, [0x7fff0a10 in [vdso], 0x401234, main] = 2n."""
    p = profile_pb2.Profile()
    p.string_table.extend(["", "samples", "count", "cpu", "nanoseconds", "main", "main.go",
                           "/usr/bin/stripped", "[vdso]"])
    p.sample_type.add(type=1, unit=2)
    p.sample_type.add(type=3, unit=4)
    p.period_type.type, p.period_type.unit, p.period = 3, 4, qc.PERIOD
    p.time_nanos, p.duration_nanos = T0 + t_s * NS, qc.DURATION
    p.mapping.add(id=1, memory_start=0x400000, memory_limit=0x500000, filename=7)
    p.mapping.add(id=2, memory_start=0x7fff0000, memory_limit=0x7fff2000, filename=8)
    p.function.add(id=1, name=5, system_name=5, filename=6, start_line=3)
    p.location.add(id=1, mapping_id=1, address=0x401234)
    p.location.add(id=2, mapping_id=2, address=0x7fff0a10)
    p.location.add(id=3, mapping_id=1, address=0x400100).line.add(function_id=1, line=7)
    p.sample.add(location_id=[1, 3], value=[n, n * qc.CPU_NS_PER_SAMPLE])
    p.sample.add(location_id=[2, 1, 3], value=[2 * n, 2 * n * qc.CPU_NS_PER_SAMPLE])
    return gzip.compress(p.SerializeToString())


def quick_total(base):
    j = qc.http_json(base, "/api/v1/query", {"query": CPU_SAMPLES, "start": qc.ms(T0),
                                             "end": qc.ms(END), "report": "top"}, tenant=TENANT)
    return j["total"], j["profiles"]


def bucket_blocks(directory, tenant=TENANT):
    """{ulid: {"meta": dict or None, "marked": bool, "files": [...]}} straight from the disk."""
    out = {}
    root = os.path.join(directory, tenant)
    if not os.path.isdir(root):
        return out
    for name in os.listdir(root):
        d = os.path.join(root, name)
        if not os.path.isdir(d):
            continue
        files = sorted(os.listdir(d))
        meta = None
        if "meta.json" in files:
            try:
                with open(os.path.join(d, "meta.json")) as f:
                    meta = json.load(f)
            except (OSError, ValueError):
                meta = None
        out[name] = {"meta": meta, "marked": "deletion-mark.json" in files, "files": files}
    return out


def metric(base, name):
    _, body = lib.http_get(base + "/metrics")
    total = 0.0
    found = False
    for line in body.decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
            found = True
    return total if found else None


class Reader(threading.Thread):
    """Queries the querier in a loop and records every answer that differs from `want`."""

    def __init__(self, base, want):
        super().__init__(daemon=True)
        self.base, self.want = base, want
        self.stop_flag = threading.Event()
        self.reads = 0
        self.bad = []

    def run(self):
        while not self.stop_flag.is_set():
            try:
                got = quick_total(self.base)
            except AssertionError as e:
                got = ("error", str(e)[:300])
            if got != self.want:
                self.bad.append(got)
            self.reads += 1
            time.sleep(0.02)

    def finish(self):
        self.stop_flag.set()
        self.join(timeout=30)
        return self.reads, self.bad


class Stack:
    """strata all (ingester + querier, compactor disabled) and a separately started compactor."""

    def __init__(self, name, compactor_extra="", querier_extra="", consistency_delay="1m"):
        self.work = lib.make_workdir(name)
        self.data = os.path.join(self.work, "data")
        self.grpc_port, self.http_port, self.c_port = lib.free_port(), lib.free_port(), lib.free_port()
        self.base = f"http://127.0.0.1:{self.http_port}"
        self.c_base = f"http://127.0.0.1:{self.c_port}"
        bucket = f"""bucket:
  type: FILESYSTEM
  config:
    directory: {self.data}
"""
        self.all_config = f"""server:
  grpc_listen_address: 127.0.0.1:{self.grpc_port}
  http_listen_address: 127.0.0.1:{self.http_port}
{bucket}ingester:
  flush_interval: 50ms
querier:
  sync_interval: 100ms
{querier_extra}compactor:
  enabled: false
"""
        self.c_config = f"""server:
  http_listen_address: 127.0.0.1:{self.c_port}
{bucket}querier:
  sync_interval: 100ms
compactor:
  compaction_interval: 200ms
  consistency_delay: {consistency_delay}
  delete_delay: 2s
  progress_interval: 100ms
{compactor_extra}"""
        self.all = lib.Strata(self.work, "all", self.all_config).start(ready_url=self.base + "/ready")
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}")
        self.store = ps_grpc.ProfileStoreServiceStub(self.channel)
        self.compactor = None
        self.compactor_runs = 0

    def push(self, reqs):
        for r in reqs:
            self.store.WriteRaw(r, metadata=MD, timeout=30)

    def start_compactor(self, wait_ready=True):
        self.compactor_runs += 1
        self.compactor = lib.Strata(self.work, "compactor", self.c_config)
        self.compactor.log_path = os.path.join(self.work, f"compactor-{self.compactor_runs}.log")
        self.compactor.start(ready_url=self.c_base + "/ready" if wait_ready else None)
        return self.compactor

    def kill_compactor(self):
        self.compactor.proc.send_signal(signal.SIGKILL)
        self.compactor.proc.wait(timeout=30)
        self.compactor.proc = None
        self.compactor.log.close()

    def close(self):
        """Stops both processes (SIGTERM: a clean exit, also under ASan/LSan) and fails if one
        did not exit with 0."""
        self.channel.close()
        bad = []
        if self.compactor is not None and self.compactor.proc is not None:
            if self.compactor.stop() != 0:
                bad.append(("compactor", self.compactor.logs()))
        if self.all.stop() != 0:
            bad.append(("all", self.all.logs()))
        lib.remove_workdir(self.work)
        for name, logs in bad:
            print(f"--- strata {name} ---\n{logs[-5000:]}", file=sys.stderr)
        if bad:
            raise AssertionError(f"strata {', '.join(n for n, _ in bad)} exited with an error")

    def live_blocks(self):
        """Committed blocks, and marked ones (also those half deleted); merges killed before their
        meta.json left data objects nobody sees, deleted only after an hour: left out."""
        return {u: b for u, b in bucket_blocks(self.data).items()
                if b["meta"] is not None or b["marked"]}

    def settled(self, levels=(3,)):
        """True when the bucket holds only unmarked blocks of the given levels."""
        live = list(self.live_blocks().values())
        return (len(live) > 0 and not any(b["marked"] or b["meta"] is None for b in live)
                and all(b["meta"]["compaction"]["level"] in levels for b in live))


class CompactorTest(unittest.TestCase):
    def test_answers_identical_and_consistent_while_compacting(self):
        s = Stack("compactor-answers")
        try:
            s.push(qc.dataset_requests() + extra_requests())
            lib.wait_for(lambda: len(bucket_blocks(s.data)) >= 11 + 3 * EXTRA_WINDOWS,
                         what="one block per request")
            before = answers(s.base)
            # Sanity against the independent model of test_query_common.
            want = sum(sum(p.stacks.values()) for p in qc.select(MEM_SPACE))
            self.assertEqual(before[MEM_SPACE]["total"], want)
            self.assertEqual(before["pods"], ["api-1", "api-2", "worker-1"])
            n_before = len(bucket_blocks(s.data))

            reader = Reader(s.base, quick_total(s.base))
            reader.start()
            s.start_compactor()
            lib.wait_for(s.settled, timeout=60, what="one level-3 block")
            time.sleep(0.5)  # the querier's next listing drops the deleted blocks
            reads, bad = reader.finish()
            self.assertGreater(reads, 20)
            self.assertEqual(bad, [], "answers read while compacting differed")

            after = answers(s.base)
            self.assertEqual(after, before)
            blocks = bucket_blocks(s.data)
            self.assertEqual(len(blocks), 1)
            meta = next(iter(blocks.values()))["meta"]
            self.assertEqual(meta["compaction"]["level"], 3)
            self.assertEqual(len(meta["compaction"]["sources"]), n_before)
            self.assertEqual(meta["stats"]["numProfiles"],
                             sum(before[t]["profiles"] for t in ALL_TYPES))

            # Metrics of the compactor.
            m = lambda name: metric(s.c_base, name)  # noqa: E731
            self.assertEqual(m("strata_compactor_blocks_in_total"), n_before + 1 + EXTRA_WINDOWS)
            self.assertEqual(m("strata_compactor_blocks_out_total"), 1 + EXTRA_WINDOWS + 1)
            self.assertEqual(m("strata_compactor_jobs_total"), 1 + EXTRA_WINDOWS + 1)
            self.assertEqual(m("strata_compactor_jobs_failed_total"), 0)
            self.assertEqual(m("strata_compactor_halted"), 0)
            self.assertEqual(m("strata_compactor_duplicate_profiles_total"), 0)
            self.assertEqual(m("strata_compactor_blocks_deleted_total"), n_before + 1 + EXTRA_WINDOWS)
            self.assertEqual(m("strata_compactor_deletion_marks_total"), n_before + 1 + EXTRA_WINDOWS)
            self.assertGreater(m("strata_compactor_bytes_out_total"), 0)
            self.assertGreater(m("strata_compactor_lag_seconds"), 0)
            logs = s.compactor.logs()
            self.assertIn('msg="merged"', logs)
            self.assertIn('msg="merge progress"', logs)

            # A querier that starts now learns the block from bucket-index.json.
            with open(os.path.join(s.data, TENANT, "bucket-index.json")) as f:
                index = json.load(f)
            self.assertEqual([b["ulid"] for b in index["blocks"]], list(blocks))
            s.all.stop()
            s.all.start(ready_url=s.base + "/ready")
            self.assertEqual(metric(s.base, "strata_querier_blocks_from_bucket_index_total"), 1)
            self.assertEqual(metric(s.base, "strata_querier_meta_reads_total"), 0)
            self.assertEqual(answers(s.base), before)
        finally:
            s.close()

    def test_kill_at_random_points(self):
        for seed in range(5):
            with self.subTest(seed=seed):
                self.kill_run(seed)

    def kill_run(self, seed):
        rng = random.Random(seed)
        s = Stack(f"compactor-kill-{seed}")
        try:
            s.push(qc.dataset_requests() + extra_requests())
            lib.wait_for(lambda: len(bucket_blocks(s.data)) >= 11 + 3 * EXTRA_WINDOWS,
                         what="one block per request")
            before = answers(s.base)
            reader = Reader(s.base, quick_total(s.base))
            reader.start()
            kills = 0
            # Early kills land in merges and marks; later ones (marks by then older than the 2 s
            # delete_delay) also in deletions.
            for k in range(5):
                s.start_compactor(wait_ready=False)
                time.sleep(rng.uniform(0.0, 0.4) if k < 3 else rng.uniform(0.5, 2.5))
                s.kill_compactor()
                kills += 1
                if s.settled():
                    break
            s.start_compactor()
            lib.wait_for(s.settled, timeout=60, what="one level-3 block after the kills")
            time.sleep(0.5)
            reads, bad = reader.finish()
            self.assertEqual(bad, [], f"seed {seed}: answers differed while killing the compactor")
            self.assertGreater(reads, 5)
            self.assertEqual(answers(s.base), before)
            blocks = s.live_blocks()
            self.assertEqual(len(blocks), 1, blocks)
            self.assertEqual(metric(s.c_base, "strata_compactor_halted"), 0)
            merges = marks = deletions = 0
            for run in range(1, s.compactor_runs + 1):
                with open(os.path.join(s.work, f"compactor-{run}.log")) as f:
                    text = f.read()
                merges += text.count('msg="merged"')
                marks += text.count('msg="marked for deletion"')
                deletions += text.count('msg="deleted block"')
            unfinished = len(bucket_blocks(s.data)) - len(blocks)
            # 11 level-2 blocks and one level-3 were needed; a committed merge is never redone (a
            # kill between a merge's meta.json and its log line can hide one from this count).
            self.assertLessEqual(merges, 12, f"seed {seed}: merges redone")
            self.assertGreaterEqual(merges, 10)
            print(f"seed {seed}: {kills} kills, {reads} consistent reads, {merges} merges, "
                  f"{marks} marks, {deletions} deletions logged before the end, "
                  f"{unfinished} merges killed before meta.json", file=sys.stderr)
        finally:
            s.close()

    def test_retention_deletes_exactly_the_expired_blocks(self):
        # consistency_delay 3h: the recent blocks are not merged meanwhile, so "kept" stays the
        # same set of blocks whatever the time of day.
        s = Stack("compactor-retention", compactor_extra="""  retention: 0s
  tenant_overrides:
    - tenant: team-a
      retention: 2h
""", consistency_delay="3h")
        try:
            now_s = int(time.time())
            # The old dataset (2023) expires; profiles 90 and 30 minutes old do not; one 3 hours
            # old does. Recent ones are CPU profiles of pod api-2 at their own times.
            s.push(qc.dataset_requests())
            recent = {}
            for age_min, n in ((180, 7), (90, 5), (30, 3)):
                t = now_s - age_min * 60
                req = qc.write_request([({"__name__": "process_cpu", **qc.S2},
                                         [qc.cpu_pprof(t - T0 // NS, {qc.A: n})])])
                s.push([req])
                recent[age_min] = n
            lib.wait_for(lambda: len(bucket_blocks(s.data)) >= 14, what="blocks")
            blocks = bucket_blocks(s.data)
            cutoff_ms = (now_s - 2 * 3600) * 1000
            expired = {u for u, b in blocks.items() if b["meta"]["maxTime"] <= cutoff_ms}
            kept = set(blocks) - expired
            self.assertEqual(len(expired), 12)  # 11 dataset blocks + the 3-hour-old one
            self.assertEqual(len(kept), 2)
            s.start_compactor()
            try:
                lib.wait_for(lambda: set(bucket_blocks(s.data)) == kept, timeout=60,
                             what="exactly the expired blocks deleted")
            except AssertionError:
                print(json.dumps(bucket_blocks(s.data), indent=1)[:3000], s.compactor.logs()[-3000:],
                      file=sys.stderr)
                raise
            self.assertEqual(metric(s.c_base, "strata_compactor_deletion_marks_total"), 12)
            self.assertEqual(metric(s.c_base, "strata_compactor_blocks_deleted_total"), 12)
            time.sleep(0.5)
            start, end = (now_s - 4 * 3600) * NS, (now_s + 60) * NS
            j = qc.http_json(s.base, "/api/v1/query", {"query": CPU_SAMPLES, "start": qc.ms(start),
                                                       "end": qc.ms(end), "report": "top"},
                             tenant=TENANT)
            self.assertEqual(j["total"], (5 + 3) * qc.PERIOD)
            status, _, _ = qc.http(s.base, "/api/v1/query", {"query": CPU_SAMPLES, "start": qc.ms(T0),
                                                             "end": qc.ms(T0 + 200 * NS)},
                                   tenant=TENANT)
            self.assertEqual(status, 404)
        finally:
            s.close()

    def test_locations_without_lines_compact_in_strata_all(self):
        """The eBPF agent's unsymbolized frames used to stop compaction for good: the ingester
        stored them, the merger refused them every cycle ("a location needs at least one line")
        and strata_compactor_blocks_out_total stayed 0. Now they reach level 2 with their
        addresses, in `strata all` as a user runs it with the agent."""
        work = lib.make_workdir("compactor-lineless")
        data = os.path.join(work, "data")
        grpc_port, http_port = lib.free_port(), lib.free_port()
        base = f"http://127.0.0.1:{http_port}"
        config = f"""server:
  grpc_listen_address: 127.0.0.1:{grpc_port}
  http_listen_address: 127.0.0.1:{http_port}
bucket:
  type: FILESYSTEM
  config:
    directory: {data}
ingester:
  flush_interval: 50ms
querier:
  sync_interval: 100ms
compactor:
  compaction_interval: 200ms
  consistency_delay: 1m
  delete_delay: 2s
"""
        strata = lib.Strata(work, "all", config).start(ready_url=base + "/ready")
        channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
        ok = False
        try:
            store = ps_grpc.ProfileStoreServiceStub(channel)
            labels = {"__name__": "process_cpu", "comm": "stripped", "node": "n1"}
            for k, n in enumerate((1, 2, 3)):  # three blocks in one 5-minute window (2023)
                store.WriteRaw(qc.write_request([(labels, [lineless_pprof(10 * k, n)])]),
                               metadata=MD, timeout=30)
            m = lambda name: metric(base, name)  # noqa: E731

            def one_level2_block():
                live = [b for b in bucket_blocks(data).values()
                        if b["meta"] is not None and not b["marked"]]
                return (m("strata_compactor_blocks_out_total") >= 1 and len(live) == 1
                        and live[0]["meta"]["compaction"]["level"] == 2
                        and live[0]["meta"]["stats"]["numProfiles"] == 2 * 3)
            lib.wait_for(one_level2_block, timeout=60, what="one level-2 block of every profile")
            blocks = bucket_blocks(data)
            for u, b in blocks.items():
                self.assertNotIn("no-compact-mark.json", b["files"], u)
            self.assertEqual(m("strata_compactor_jobs_failed_total"), 0)
            self.assertEqual(m("strata_compactor_no_compact_marks_total"), 0)
            self.assertEqual(m("strata_compactor_repeated_failure_marks_total"), 0)
            self.assertEqual(m("strata_compactor_failing_jobs"), 0)
            self.assertEqual(m("strata_compactor_halted"), 0)

            time.sleep(0.5)  # the querier's next listings hide the sources
            j = qc.http_json(base, "/api/v1/query", {"query": CPU_SAMPLES + '{comm="stripped"}',
                                                     "start": qc.ms(T0), "end": qc.ms(END),
                                                     "report": "flamegraph"}, tenant=TENANT)
            self.assertEqual(j["total"], 3 * (1 + 2 + 3) * qc.PERIOD)
            self.assertEqual(j["profiles"], 3)
            names = j["flamegraph"]["flamebearer"]["names"]
            self.assertTrue(any("0x401234" in name for name in names), names)
            self.assertTrue(any("0x7fff0a10" in name for name in names), names)
            self.assertIn("main", names)
            logs = strata.logs()
            self.assertIn('msg="merged"', logs)
            self.assertNotIn('msg="merge failed"', logs)
            ok = True
        finally:
            channel.close()
            rc = strata.stop()
            if not ok or rc != 0:
                print(strata.logs()[-5000:], file=sys.stderr)
            lib.remove_workdir(work)
        self.assertEqual(rc, 0)

    def test_check_config(self):
        work = lib.make_workdir("compactor-check")
        try:
            def check(extra):
                path = os.path.join(work, "c.yaml")
                with open(path, "w") as f:
                    f.write(f"""bucket:
  type: FILESYSTEM
  config:
    directory: {work}/data
compactor:
{extra}""")
                p = subprocess.run([lib.BINARY, "compactor", "-config", path, "-check-config"],
                                   capture_output=True, text=True, timeout=30)
                return p.returncode, p.stdout + p.stderr
            rc, out = check("  block_ranges: [5m, 2h]\n  retention: 30d\n")
            self.assertEqual(rc, 0, out)
            self.assertIn("configuration is valid", out)
            rc, out = check("  block_ranges: [5m, 7m]\n")
            self.assertNotEqual(rc, 0)
            self.assertIn("block_ranges[1]", out)
            rc, out = check("  tenant_overrides:\n    - tenant: a\n")
            self.assertNotEqual(rc, 0)
            self.assertIn("retention", out)
            rc, out = check("  delete_dely: 1h\n")
            self.assertNotEqual(rc, 0)
            self.assertIn("delete_dely", out)
        finally:
            lib.remove_workdir(work)


if __name__ == "__main__":
    unittest.main(verbosity=2)
