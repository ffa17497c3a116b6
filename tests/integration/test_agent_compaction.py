#!/usr/bin/python3
"""`strata all` with `strata agent` profiling real processes compacts to the top level (issue 14,
item 8). Needs root, kernel BTF and a `strata` built with the agent; skipped otherwise.

The agent (eBPF, 1 s windows, a relabel file that keeps only this test's programs) pushes to
`strata all` (FILESYSTEM bucket, compactor enabled with block_ranges 5s/10s/20s) while four
builds of tests/agent/cduty.c (each with a build id of its own) run at a 15 % duty cycle inside
one aligned 20-second window:

  cduty           frame pointers and symbols: main -> duty_outer -> duty_middle -> duty_leaf
  cduty_stripped  strip --strip-all: no symbols anywhere, so its frames are addresses (locations
                  without lines, what used to stop compaction for good)
  cduty_deleted   unlinked before it is executed (through /proc/self/fd), so from its first sample
                  its executable and mapping are "<path> (deleted)"; as root the agent reads its
                  symbols through /proc/PID/map_files, so its frames have names
  cduty_stripdel  stripped and deleted: addresses under a "<path> (deleted)" mapping

cduty reads CLOCK_MONOTONIC between short spins, so where the clock source has a vDSO fast path
(tsc) some samples land in [vdso], another mapping the agent sends as bare addresses.

The agent stops once they have exited (flushing its queue), so every profile is in the bucket as
a level-1 block before the first window closes for the compactor (consistency_delay 20s). The
answers over the window (JSON /api/v1/query?report=table per program, and for all of them) are
recorded then, with strata_compactor_blocks_out_total still 0 before and after. Then the test waits,
bounded, until the compactor has merged L1 -> L2 -> L3 -> L4: one unmarked block of level 4
holding every profile, the merged-away blocks deleted after delete_delay, no failed job, no
no-compact mark, no "merge failed" line. The same queries must give exactly the same answers
(identical profiles count once at query time and the compactor keeps one, so nothing may move).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import unittest
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_testlib as lib  # noqa: E402

SRC = os.path.join(lib.SOURCE_DIR, "tests", "agent", "cduty.c")
TENANT = "team-agent"
PROFILE_TYPE = "strata_agent:samples:count:cpu:nanoseconds:delta"
RANGES_S = (5, 10, 20)                  # compactor block_ranges: levels 2, 3 and 4
TOP_S = RANGES_S[-1]                    # the programs run inside one window of the top range
TOP_LEVEL = len(RANGES_S) + 1
CONSISTENCY_DELAY_S = 20                # no merge before the answers "before" are recorded
START_S, END_S = 1.5, TOP_S - 2.0       # program start and end, seconds into the window
# name: (stripped, deleted)
PROGRAMS = {"cduty": (False, False), "cduty_stripped": (True, False),
            "cduty_deleted": (False, True), "cduty_stripdel": (True, True)}
DUTY_PERCENT = 15
CHAIN = ["duty_leaf", "duty_middle", "duty_outer", "main"]
CLEAN_METRICS = ("strata_compactor_jobs_failed_total", "strata_compactor_no_compact_marks_total",
                 "strata_compactor_repeated_failure_marks_total",
                 "strata_compactor_jobs_given_up_total", "strata_compactor_failing_jobs",
                 "strata_compactor_halted")


def strata_has_agent():
    if not os.path.exists(lib.BINARY):
        return False
    r = subprocess.run([lib.BINARY, "agent", "-node", "x"], capture_output=True, text=True,
                       timeout=30)
    return r.returncode == 2 and "-remote-store is required" in r.stderr


def can_run():
    return (os.geteuid() == 0 and os.path.exists("/sys/kernel/btf/vmlinux")
            and shutil.which("gcc") and shutil.which("strip") and strata_has_agent())


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def http_json(base, path, params):
    url = base + path + "?" + urllib.parse.urlencode(params, doseq=True)
    req = urllib.request.Request(url, headers={"X-Scope-OrgID": TENANT,
                                               "Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise AssertionError(f"{url}: HTTP {e.code}: {e.read()[:500]!r}") from None


def metrics(base):
    """{name: sum over its label sets} from a Prometheus text page."""
    _, body = lib.http_get(base + "/metrics")
    out = {}
    for line in body.decode().splitlines():
        if not line or line.startswith("#"):
            continue
        key, value = line.rsplit(" ", 1)
        name = key.split("{", 1)[0]
        out[name] = out.get(name, 0.0) + float(value)
    return out


def bucket_blocks(data):
    """{ulid: {"meta": dict or None, "files": [...]}} straight from the tenant's directory."""
    out = {}
    root = os.path.join(data, TENANT)
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
        out[name] = {"meta": meta, "files": files}
    return out


def describe(blocks):
    return sorted((b["meta"]["compaction"]["level"] if b["meta"] else None,
                   b["meta"]["stats"]["numProfiles"] if b["meta"] else None,
                   [f for f in b["files"] if f.endswith(".json") and f != "meta.json"])
                  for b in blocks.values())


@unittest.skipUnless(can_run(), "needs root, /sys/kernel/btf/vmlinux, gcc and strata with the agent")
class AgentCompactionTest(unittest.TestCase):
    def setUp(self):
        self.work = lib.make_workdir("agent-compaction")
        self.procs = []
        self.strata = self.agent = None
        self.agent_log = None
        self.ok = False

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if self.agent is not None and self.agent.poll() is None:
            self.agent.kill()
            self.agent.wait()
        if self.agent_log is not None:
            self.agent_log.close()
        if self.strata is not None and self.strata.proc is not None:
            self.strata.stop()
        if not self.ok:
            for path in (self.strata.log_path if self.strata else None,
                         os.path.join(self.work, "agent.log")):
                if path and os.path.exists(path):
                    with open(path) as f:
                        print(f"--- {path} (tail)\n{f.read()[-6000:]}", file=sys.stderr)
        lib.remove_workdir(self.work)

    def build_programs(self):
        bindir = os.path.join(self.work, "bin")
        os.makedirs(bindir)
        paths = {name: os.path.join(bindir, name) for name in PROGRAMS}
        # A build id of its own each: the agent caches symbol tables by build id, so a stripped
        # copy of the same build would be named from the unstripped one's table.
        for i, (name, (stripped, _)) in enumerate(PROGRAMS.items()):
            subprocess.run(["gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-fno-inline",
                            f"-Wl,--build-id=0x{os.getpid():08x}{i + 1:08x}", "-o", paths[name],
                            SRC], check=True)
            if stripped:
                subprocess.run(["strip", "--strip-all", paths[name]], check=True)
                syms = subprocess.run(["nm", "-D", "--defined-only", paths[name]],
                                      capture_output=True, text=True).stdout
                self.assertNotIn("duty_", syms)  # nothing left to name its functions
        # The executable label and mapping file the agent reports for each.
        self.exe = {name: paths[name] + (" (deleted)" if deleted else "")
                    for name, (_, deleted) in PROGRAMS.items()}
        return bindir, paths

    def run_programs(self, paths, seconds):
        """Starts every program; a deleted one is opened, unlinked, then executed through
        /proc/self/fd, so it is never seen under its path."""
        for name, (_, deleted) in PROGRAMS.items():
            args = [f"{seconds:.2f}", str(DUTY_PERCENT)]
            if not deleted:
                self.procs.append(subprocess.Popen([paths[name], *args],
                                                   stdout=subprocess.DEVNULL))
                continue
            fd = os.open(paths[name], os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.unlink(paths[name])
                self.procs.append(subprocess.Popen([f"/proc/self/fd/{fd}", *args], pass_fds=[fd],
                                                   stdout=subprocess.DEVNULL))
            finally:
                os.close(fd)

    def start_strata(self):
        self.data = os.path.join(self.work, "data")
        grpc_port, http_port = lib.free_port(), lib.free_port()
        self.grpc_address = f"127.0.0.1:{grpc_port}"
        self.base = f"http://127.0.0.1:{http_port}"
        ranges = ", ".join(f"{r}s" for r in RANGES_S)
        config = f"""server:
  grpc_listen_address: 127.0.0.1:{grpc_port}
  http_listen_address: 127.0.0.1:{http_port}
bucket:
  type: FILESYSTEM
  config:
    directory: {self.data}
ingester:
  flush_interval: 200ms
querier:
  sync_interval: 200ms
compactor:
  enabled: true
  compaction_interval: 500ms
  block_ranges: [{ranges}]
  consistency_delay: {CONSISTENCY_DELAY_S}s
  delete_delay: 2s
"""
        self.strata = lib.Strata(self.work, "all", config).start(ready_url=self.base + "/ready")

    def start_agent(self, bindir):
        relabel = os.path.join(self.work, "relabel.yaml")
        with open(relabel, "w") as f:
            # Only this test's programs; a deleted one's executable ends in " (deleted)".
            f.write("relabel_configs:\n"
                    f"- {{action: keep, source_labels: [__meta_process_executable], "
                    f"regex: '{bindir}/.*'}}\n")
        self.agent_http = f"http://127.0.0.1:{lib.free_port()}"
        self.agent_log_path = os.path.join(self.work, "agent.log")
        self.agent_log = open(self.agent_log_path, "w")
        self.agent = subprocess.Popen(
            [lib.BINARY, "agent", "-remote-store", self.grpc_address, "-window", "1s",
             "-node", "test-node", "-tenant", TENANT, "-relabel-config", relabel,
             "-http-address", self.agent_http.removeprefix("http://")],
            stdout=self.agent_log, stderr=subprocess.STDOUT)

        def started():
            with open(self.agent_log_path) as f:
                text = f.read()
            if self.agent.poll() is not None:
                raise AssertionError(f"agent exited {self.agent.returncode}: {text[-2000:]}")
            return "agent started" in text
        lib.wait_for(started, timeout=60, what="agent start")

    def answers(self, window_start):
        """The answers compared before and after compaction: per program and for all of them, the
        JSON table report over the window (total, profiles, every row)."""
        start, end = window_start * 1000, (window_start + TOP_S) * 1000 - 1
        out = {}
        for name in (*PROGRAMS, None):
            query = PROFILE_TYPE + (f'{{executable="{self.exe[name]}"}}' if name else "")
            j = http_json(self.base, "/api/v1/query", {"query": query, "start": start, "end": end,
                                                       "report": "table", "max_nodes": 0})
            rows = sorted((r["name"], r["mapping_file"], r["flat"], r["cumulative"])
                          for r in j["table"]["rows"])
            out[name] = {"total": j["total"], "profiles": j["profiles"],
                         "rows_total": j["table"]["rows_total"], "rows": rows,
                         "warnings": j.get("warnings", [])}
        return out

    def test_agent_data_compacts_to_the_top_level(self):
        t_begin = time.time()
        bindir, paths = self.build_programs()
        self.start_strata()
        self.start_agent(bindir)

        # Every program runs inside one window [B, B + TOP_S) of the top range, starting late
        # enough that the agent window holding its first samples starts in it too.
        window = (int(time.time() + 1) // TOP_S + 1) * TOP_S
        log(f"waiting {window + START_S - time.time():.1f}s for the window at {window}")
        time.sleep(max(0.0, window + START_S - time.time()))
        seconds = window + END_S - time.time()
        self.run_programs(paths, seconds)
        for p in self.procs:
            self.assertEqual(p.wait(timeout=TOP_S + 30), 0)
        agent_metrics = metrics(self.agent_http)
        # SIGTERM pushes the last (partial) window, stamped with its start, and flushes the queue.
        stopped_at = time.time()
        self.assertLess(stopped_at, window + TOP_S, "the programs overran their window")
        self.agent.send_signal(signal.SIGTERM)
        self.assertEqual(self.agent.wait(timeout=60), 0)
        log(f"programs and agent done at +{time.time() - window:.1f}s into the window")
        self.assertEqual(agent_metrics.get("strata_agent_push_errors_total"), 0)
        self.assertEqual(agent_metrics.get("strata_agent_push_dropped_total"), 0)

        # Before any merge: level-1 blocks only, all inside the window.
        m = metrics(self.base)
        self.assertEqual(m.get("strata_compactor_blocks_out_total"), 0,
                         "a merge ran before the answers were recorded")
        blocks = bucket_blocks(self.data)
        self.assertTrue(blocks)
        for u, b in blocks.items():
            self.assertIsNotNone(b["meta"], u)
            self.assertEqual(b["meta"]["compaction"]["level"], 1, u)
            self.assertGreaterEqual(b["meta"]["minTime"], window * 1000, u)
            self.assertLessEqual(b["meta"]["maxTime"], (window + TOP_S) * 1000, u)
        n_profiles = sum(b["meta"]["stats"]["numProfiles"] for b in blocks.values())
        time.sleep(0.5)  # the querier has listed every block (sync_interval 200ms)
        before = self.answers(window)
        self.assertEqual(metrics(self.base).get("strata_compactor_blocks_out_total"), 0,
                         "a merge ran while the answers were recorded")
        log(f"before: {len(blocks)} level-1 blocks, {n_profiles} profiles, "
            + ", ".join(f"{k}: {v['total']} in {v['profiles']} profiles, {v['rows_total']} rows"
                        for k, v in before.items()))
        self.check_answers(before)
        self.assertEqual(before[None]["profiles"], n_profiles)

        # The compactor climbs to the top level: one live block of level 4 with every profile,
        # the blocks it replaced deleted after delete_delay.
        def top_level_only():
            blocks = bucket_blocks(self.data)
            return ([(b["meta"]["compaction"]["level"], b["meta"]["stats"]["numProfiles"])
                     for b in blocks.values() if b["meta"] is not None] ==
                    [(TOP_LEVEL, n_profiles)] and len(blocks) == 1)
        try:
            lib.wait_for(top_level_only,
                         timeout=window + TOP_S + CONSISTENCY_DELAY_S + 60 - time.time(),
                         interval=0.5, what=f"one level-{TOP_LEVEL} block of every profile")
        finally:
            blocks = bucket_blocks(self.data)
            log(f"bucket: {describe(blocks)} at +{time.time() - window:.1f}s into the window")
        (top,) = blocks.values()
        self.assertFalse([f for f in top["files"] if f.endswith("mark.json")], top["files"])
        self.assertGreater(len(top["meta"]["compaction"]["sources"]), 1)
        m = metrics(self.base)
        for name in CLEAN_METRICS:
            self.assertEqual(m.get(name, 0), 0, name)
        self.assertGreaterEqual(m.get("strata_compactor_blocks_out_total"), 3)
        self.assertEqual(m.get("strata_compactor_duplicate_profiles_total", 0), 0)
        logs = self.strata.logs()
        self.assertNotIn('msg="merge failed"', logs)
        self.assertNotIn("no-compact", logs)
        self.assertIn('msg="merged"', logs)

        time.sleep(0.5)
        after = self.answers(window)
        totals = ", ".join(f"{k}: {v['total']}" for k, v in after.items())
        log(f"after: {totals} ({time.time() - t_begin:.0f}s in all)")
        for name in (*PROGRAMS, None):
            self.assertEqual(after[name], before[name], name)
        self.ok = True

    def check_answers(self, answers):
        """Named frames for the programs with symbols, only addresses for the stripped ones, each
        under the mapping of its executable."""
        for name in (*PROGRAMS, None):
            a = answers[name]
            self.assertGreater(a["total"], 0, name)
            self.assertEqual(a["warnings"], [], name)
            self.assertEqual(a["rows_total"], len(a["rows"]), name)
        for name, (stripped, _) in PROGRAMS.items():
            rows = answers[name]["rows"]
            own = [r for r in rows if r[1] == self.exe[name]]
            names = {r[0] for r in own}
            self.assertFalse({r[0] for r in rows if r[0].startswith("duty_")} - names, rows)
            if stripped:
                self.assertTrue(own, rows)
                self.assertTrue(all(r[0].startswith("0x") for r in own), own)
            else:
                self.assertTrue(set(CHAIN) <= names, rows)
            log(f"{name}: {sorted(own, key=lambda r: -r[3])[:6]}")
        vdso = [r for r in answers[None]["rows"] if r[1] == "[vdso]"]
        log(f"[vdso] frames: {vdso}")
        self.assertTrue(all(r[0].startswith("0x") for r in vdso), vdso)
        with open("/sys/devices/system/clocksource/clocksource0/current_clocksource") as f:
            if f.read().strip() == "tsc":
                self.assertTrue(vdso, answers[None]["rows"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
