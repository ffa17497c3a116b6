#!/usr/bin/python3
"""The eBPF agent against real processes (needs root, kernel BTF and perf events).

Test programs (tests/agent/) run under the agent while a WriteRaw sink written with Python grpcio
(independent of Strata's C code) records what it pushes; the pprofs are decoded with the Python
protobuf stubs and the tests assert ordered frames, kernel frames, labels and sample counts:

  cchain            C, frame pointers, main -> chain_a -> chain_b -> chain_c (leaf with a frame)
  cchain_frameless  same, but GCC gives the leaf no frame: the agent must recover chain_b
  cchain_debuglink  stripped, symbols only in a .gnu_debuglink file beside it
  cchain_buildid    stripped, symbols only under <debug-dir>/.build-id/xx/yyyy.debug
  cchain_threads    cchain on three threads, for the per-sample labels thread_id, thread_name, cpu
  cxxchain          C++, main -> ns::Worker::run(double) -> ns::Worker::spin(unsigned long):
                    names demangled as c++filt prints them, mangled ones as system names
  gohot             Go, stripped (-s -w): main.hotFunction <- main.run <- main.main via .gopclntab
  urandom           reads /dev/urandom: kernel frames under the user stack
  sleeper           blocks in nanosleep 10 ms at a time under main -> wait_a -> wait_b: the
                    off-CPU profile (-off-cpu-threshold) holds that chain under the kernel's
                    schedule, with the time the program measured itself sleeping

AgentDwarfUnwindTest runs programs without frame pointers under the agent and, at the same time,
under perf record --call-graph dwarf (the reference), for the .eh_frame unwinder:

  nofp_chain_gcc    C, gcc -O2 -fomit-frame-pointer: main -> nofp_outer -> nofp_middle ->
                    nofp_inner, and main -> sort_round -> qsort (Debian's libc) -> compare_items
  nofp_chain_clang  the same built with clang (skipped without clang)
  nofp_exceptions   C++, g++ -O2 -fomit-frame-pointer: main -> throw_loop -> thrower -> __cxa_throw
                    -> libgcc_s's unwinder and libstdc++'s personality routine, and main ->
                    format_loop -> std::ostringstream (libstdc++) -> vsnprintf (libc)
  nofp_rust         Rust release build (-C force-frame-pointers=no): main -> std::rt::lang_start
                    ... -> rust_loop -> rust_outer -> rust_inner, and rust_loop -> rust_format ->
                    core::fmt (skipped without rustc)

Of each program's samples, at least 99% must hold the whole chain to main and end at _start, no
fewer than perf's share less one point, and the agent's hottest chain must be one of perf's top 5.

AgentLateLibraryTest runs nofp_dlopen (no frame pointers), which dlopen()s libnofp_late.so after
the agent has listed it, with the agent stopped for 0.4 s meanwhile: the samples taken before the
agent lists the library again must still reach main (BPF sends them with a copy of the stack).

AgentKubernetesTest puts cchain in a kubepods-style cgroup named after a container of a pod that a
fake API server (tests/kubernetes) lists for the agent's node, and checks its namespace, pod and
container labels.

The sample-count test checks that at least 99% of the sampling periods a busy process ran for
(19 Hz x its CPU seconds from wait4) arrive at the sink.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_testlib as lib  # noqa: E402
import test_agent_lib as tl  # noqa: E402

SRC = os.path.join(lib.SOURCE_DIR, "tests", "agent")
PERIOD = 1_000_000_000 // 19
CHAIN = ["chain_c", "chain_b", "chain_a", "main"]


def can_run_bpf():
    return os.geteuid() == 0 and os.path.exists("/sys/kernel/btf/vmlinux") and os.path.exists(
        tl.AGENT_BINARY)


def steal_seconds():
    """CPU time the hypervisor took from this VM (all CPUs), from /proc/stat."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return int(fields[8]) / os.sysconf("SC_CLK_TCK")


def build_id(path):
    out = subprocess.run(["readelf", "-n", path], capture_output=True, text=True, check=True).stdout
    m = re.search(r"Build ID: ([0-9a-f]+)", out)
    return m.group(1) if m else ""


class Agent:
    def __init__(self, work, port, *extra):
        self.http_port = lib.free_port()
        self.log_path = os.path.join(work, f"agent-{port}.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [tl.AGENT_BINARY, "-remote-store", f"127.0.0.1:{port}", "-window", "2s", "-node",
             "test-node", "-http-address", f"127.0.0.1:{self.http_port}", *extra],
            stdout=self.log, stderr=subprocess.STDOUT)
        lib.wait_for(lambda: "agent started" in self.logs(), timeout=30, what="agent start")

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/metrics", timeout=10) as r:
            return r.read().decode()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=60)
        self.log.close()
        return rc

    def logs(self):
        with open(self.log_path) as f:
            return f.read()


@unittest.skipUnless(can_run_bpf(), "needs root, /sys/kernel/btf/vmlinux and the agent binary")
class AgentTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = lib.make_workdir("agent")
        cls.bin = {}
        w = cls.work
        src = os.path.join(SRC, "cchain.c")
        cls.bin["cchain"] = os.path.join(w, "cchain")
        tl.build_c(src, cls.bin["cchain"])
        cls.bin["cchain_frameless"] = os.path.join(w, "cchain_frameless")
        tl.build_c(src, cls.bin["cchain_frameless"], ["-DCCHAIN_FRAMELESS_LEAF"])
        cls.bin["cchain_debuglink"] = cls.stripped_with_debuglink(src, w)
        cls.debug_dir = os.path.join(w, "debug")
        cls.bin["cchain_buildid"] = cls.stripped_with_build_id_file(src, w, cls.debug_dir)
        cls.bin["urandom"] = os.path.join(w, "urandom")
        tl.build_c(os.path.join(SRC, "urandom.c"), cls.bin["urandom"])
        cls.bin["cchain_threads"] = os.path.join(w, "cchain_threads")  # run with 3 threads
        tl.build_c(src, cls.bin["cchain_threads"])
        cls.bin["cxxchain"] = os.path.join(w, "cxxchain")
        tl.build_cxx(os.path.join(SRC, "cxxchain.cpp"), cls.bin["cxxchain"])
        cls.bin["gohot"] = os.path.join(w, "gohot")
        tl.build_go(os.path.join(SRC, "gohot"), cls.bin["gohot"])
        cls.run_loads()

    @staticmethod
    def stripped_with_debuglink(src, w):
        out = os.path.join(w, "cchain_debuglink")
        tl.build_c(src, out)
        subprocess.run(["objcopy", "--only-keep-debug", out, out + ".debug"], check=True)
        subprocess.run(["strip", "--strip-all", out], check=True)
        subprocess.run(["objcopy", f"--add-gnu-debuglink={out}.debug", out], check=True, cwd=w)
        return out

    @staticmethod
    def stripped_with_build_id_file(src, w, debug_dir):
        out = os.path.join(w, "cchain_buildid")
        tl.build_c(src, out)
        bid = build_id(out)
        d = os.path.join(debug_dir, ".build-id", bid[:2])
        os.makedirs(d)
        subprocess.run(["objcopy", "--only-keep-debug", out, os.path.join(d, bid[2:] + ".debug")],
                       check=True)
        subprocess.run(["strip", "--strip-all", out], check=True)
        return out

    @classmethod
    def run_loads(cls):
        # The first push fails (UNAVAILABLE): the agent must retry it.
        cls.server, cls.sink, port = tl.start_sink(fail_first=1)
        cls.agent = Agent(cls.work, port, "-tenant", "team-a", "-debug-dir", cls.debug_dir,
                          "-sample-labels", "thread_id,thread_name,cpu")
        args = {"cchain_threads": ["2", "3"]}
        procs = {name: subprocess.Popen([path, *args.get(name, ["2"])], stdout=subprocess.DEVNULL)
                 for name, path in cls.bin.items()}
        cls.pids = {name: p.pid for name, p in procs.items()}
        for p in procs.values():
            p.wait(timeout=60)
        time.sleep(2.5)  # one more window: a process that exited is still reported
        cls.metrics_text = cls.agent.metrics()
        cls.agent_rc = cls.agent.stop()
        cls.server.stop(0)

    @classmethod
    def tearDownClass(cls):
        lib.remove_workdir(cls.work)

    def series_of(self, name):
        pid = str(self.pids[name])
        found = [(labels, p) for labels, p in self.sink.series() if labels.get("pid") == pid]
        self.assertTrue(found, f"no series for {name} (pid {pid})")
        return found

    def stacks_of(self, name):
        return [s for _, p in self.series_of(name) for s in tl.stacks(p)]

    def assert_chain(self, name, chain, min_fraction=0.9):
        """Of the samples that landed in the hot leaf chain[0], at least min_fraction carry the
        whole chain, consecutively. Samples elsewhere (the dynamic loader at start, exit, the
        clock_gettime calls between spins, a Go runtime thread) are a fixed few per process and
        are not what is checked: on a loaded machine a 1.5 s load gets only ~25 samples, and those
        few made a plain fraction of all samples flaky. They must stay a minority, though, so a
        leaf that fails to symbolize cannot hide."""
        stacks = self.stacks_of(name)
        total = sum(c for c, _, _ in stacks)
        in_leaf = [s for s in stacks if chain[0] in s[1]]
        leaf = sum(c for c, _, _ in in_leaf)
        good = sum(c for c, names, _ in in_leaf if tl.contains_in_order(names, chain))
        bad = [s for s in stacks if not tl.contains_in_order(s[1], chain)]
        detail = f"top stacks without the chain: {sorted(bad, key=lambda s: -s[0])[:3]}"
        self.assertGreater(leaf, 15, f"{name}: {leaf}/{total} samples in {chain[0]}; {detail}")
        self.assertGreaterEqual(leaf / total, 0.6,
                                f"{name}: {leaf}/{total} samples in {chain[0]}; {detail}")
        self.assertGreaterEqual(good / leaf, min_fraction,
                                f"{name}: {good}/{leaf} samples in {chain[0]} with {chain}; {detail}")

    def test_agent_exits_cleanly_and_retries_pushes(self):
        self.assertEqual(self.agent_rc, 0, self.agent.logs())
        self.assertGreater(self.sink.calls, len(self.sink.requests))  # the refused first push
        self.assertIn("push failed", self.agent.logs())
        self.assertTrue(all(t == "team-a" for t in self.sink.tenants))

    def test_labels(self):
        for name, path in self.bin.items():
            for labels, _ in self.series_of(name):
                self.assertEqual(labels["__name__"], "strata_agent")
                self.assertEqual(labels["comm"], name[:15])
                self.assertEqual(labels["executable"], path)
                self.assertEqual(labels["node"], "test-node")
                self.assertEqual(labels["pid"], str(self.pids[name]))
                self.assertFalse(any(k.startswith("__meta") for k in labels))

    def test_profile_shape(self):
        for labels, p in self.series_of("cchain"):
            s = p.string_table
            self.assertEqual([(s[t.type], s[t.unit]) for t in p.sample_type], [("samples", "count")])
            self.assertEqual((s[p.period_type.type], s[p.period_type.unit]), ("cpu", "nanoseconds"))
            self.assertEqual(p.period, PERIOD)
            self.assertGreater(p.duration_nanos, 1_000_000_000)
            self.assertLess(abs(p.time_nanos - time.time_ns()), 600 * 10**9)
            exe = [m for m in p.mapping if s[m.filename] == self.bin["cchain"]]
            self.assertTrue(exe)
            self.assertEqual(s[exe[0].build_id], build_id(self.bin["cchain"]))
            self.assertTrue(exe[0].has_functions)

    def test_c_call_chain_with_frame_pointers(self):
        self.assert_chain("cchain", CHAIN)

    def test_frameless_leaf_caller_is_recovered(self):
        self.assert_chain("cchain_frameless", CHAIN)

    def test_debug_file_by_debuglink(self):
        self.assert_chain("cchain_debuglink", CHAIN)

    def test_debug_file_by_build_id(self):
        self.assert_chain("cchain_buildid", CHAIN)

    def test_sample_labels(self):
        """-sample-labels thread_id,thread_name,cpu: a three-thread process's samples carry its
        threads' ids (three of them, the main thread's the pid), their name and real CPUs."""
        tids, names, cpus, total = set(), set(), set(), 0
        for _, p in self.series_of("cchain_threads"):
            s = p.string_table
            for sample in p.sample:
                labels = {s[lb.key]: s[lb.str] for lb in sample.label}
                self.assertEqual(sorted(labels), ["cpu", "thread_id", "thread_name"])
                tids.add(int(labels["thread_id"]))
                names.add(labels["thread_name"])
                cpus.add(int(labels["cpu"]))
                total += sample.value[0]
        self.assertGreater(total, 30)
        self.assertEqual(len(tids), 3, tids)
        self.assertIn(self.pids["cchain_threads"], tids)
        self.assertEqual(names, {"cchain_threads"[:15]})
        self.assertTrue(all(0 <= c < os.cpu_count() for c in cpus), cpus)

    def test_cxx_names_demangled(self):
        """C++ frames carry c++filt's names, the mangled ones as system names."""
        self.assert_chain("cxxchain", ["ns::Worker::spin(unsigned long)", "ns::Worker::run(double)",
                                       "main"])
        systems = {}
        for _, p in self.series_of("cxxchain"):
            s = p.string_table
            systems.update({s[f.name]: s[f.system_name] for f in p.function})
        self.assertEqual(systems["ns::Worker::spin(unsigned long)"], "_ZN2ns6Worker4spinEm")
        self.assertEqual(systems["ns::Worker::run(double)"], "_ZN2ns6Worker3runEd")
        self.assertEqual(systems["main"], "main")

    def test_go_hot_function_from_gopclntab(self):
        self.assert_chain("gohot", ["main.hotFunction", "main.run", "main.main"])

    def test_kernel_frames(self):
        stacks = self.stacks_of("urandom")
        total = sum(c for c, _, _ in stacks)
        in_kernel = 0
        for count, names, files in stacks:
            kernel = [n for n, f in zip(names, files) if f == "[kernel.kallsyms]"]
            if not kernel:
                continue
            # Kernel frames come first (leaf first), then the user stack down to main.
            k = len(kernel)
            self.assertEqual(files[:k], ["[kernel.kallsyms]"] * k)
            self.assertNotIn("[kernel.kallsyms]", files[k:])
            if any("random" in n or "chacha" in n for n in kernel) and "main" in names[k:]:
                in_kernel += count
        self.assertGreaterEqual(in_kernel / total, 0.5, sorted(stacks, key=lambda s: -s[0])[:3])

    def test_metrics(self):
        text = self.metrics_text
        for name in ("strata_agent_samples_total", "strata_agent_samples_dropped_total",
                     "strata_agent_symbolization_misses_total", "strata_agent_push_errors_total",
                     "process_cpu_seconds_total", "process_resident_memory_bytes"):
            self.assertIn(name, text)
        samples = re.search(r"^strata_agent_samples_total (\d+)", text, re.M)
        self.assertGreater(int(samples.group(1)), 50)
        self.assertRegex(text, r"(?m)^strata_agent_samples_dropped_total 0$")


# --- DWARF (.eh_frame) unwinding: programs without frame pointers, against perf ---------------

LIB = "<lib>"  # in a path: one or more frames that are not the program's own functions
ANY = "<any>"  # in a path: zero or more such frames
# CPU seconds each program burns: ~190 agent samples at 19 Hz, ~1000 for perf. The ticks before
# the agent has listed a process's tables carry a copy of its stack, walked once it is listed.
DWARF_SECONDS = "10"
PERF_TOP = 5


def clang_binary():
    return next((c for c in ("clang", "clang-14") if shutil.which(c)), None)


def perf_unusable():
    """Why perf --call-graph dwarf cannot be the reference here, or None."""
    if not shutil.which("perf"):
        return "perf is not installed (Debian package linux-perf)"
    try:
        with open("/proc/sys/kernel/perf_event_paranoid") as f:
            paranoid = int(f.read())
    except OSError:
        return "no /proc/sys/kernel/perf_event_paranoid"
    if os.geteuid() != 0 and paranoid > 1:
        return f"perf_event_paranoid is {paranoid} and we are not root"
    return None


def normalize(name):
    """One spelling for a function name across the agent and perf script: no symbol version
    (__libc_start_main@@GLIBC_2.34), GCC clone suffix (.part.0, .isra.0, .cold), Rust legacy hash
    (::h0123456789abcdef) or C++ parameter list (perf script prints none)."""
    name = re.sub(r"@.*$", "", name)
    name = re.sub(r"::h[0-9a-f]{16}$", "", name)
    name = re.sub(r"(\.(part|isra|constprop|cold|lto_priv)(\.\d+)?)+$", "", name)
    name = re.sub(r"\s+const$", "", name)
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                if i > 0 and not name.startswith("("):
                    name = name[:i]
                break
    return name


def unknown(name):
    return not name or name == "[unknown]" or name.startswith("0x")


def agent_user_stacks(profiles):
    """[(count, [(name, file)] leaf first, user frames only)] from the agent's pprofs."""
    out = []
    for p in profiles:
        strings = p.string_table
        functions = {f.id: strings[f.name] for f in p.function}
        mappings = {m.id: strings[m.filename] for m in p.mapping}
        locations = {loc.id: loc for loc in p.location}
        for s in p.sample:
            frames = []
            for lid in s.location_id:
                loc = locations[lid]
                file = mappings.get(loc.mapping_id, "")
                names = [functions[ln.function_id] for ln in loc.line] or [f"0x{loc.address:x}"]
                frames.extend((n, file) for n in names)
            out.append((s.value[0], [f for f in frames if f[1] != "[kernel.kallsyms]"]))
    return out


def perf_user_stacks(script_text):
    """The same from `perf script -F comm,pid,tid,ip,sym,dso --no-inline` (count 1 each)."""
    out, frames, comm = [], None, None
    line_re = re.compile(r"^\s+[0-9a-f]+ (.*) \(([^()]*)\)$")
    for line in script_text.splitlines() + [""]:
        if not line.strip():
            if frames is not None and comm != "perf-exec":
                out.append((1, [f for f in frames if f[1] != "[kernel.kallsyms]"]))
            frames = None
            continue
        if not line[0].isspace():
            frames, comm = [], line.split()[0]
            continue
        m = line_re.match(line)
        if m and frames is not None:
            frames.append((m.group(1), m.group(2)))
    return out


def match_path(names, path, own):
    """True if names (normalized, leaf first) is exactly path, LIB and ANY standing for frames
    outside own."""
    if not path:
        return not names
    head, rest = path[0], path[1:]
    if head in (LIB, ANY):
        first = 1 if head == LIB else 0
        for k in range(first, len(names) + 1):
            if k > 0 and names[k - 1] in own:
                break
            if match_path(names[k:], rest, own):
                return True
        return False
    return bool(names) and names[0] == head and match_path(names[1:], rest, own)


class DwarfProgram:
    """A test program, how to build it, and the call chains its samples must show.

    paths: the program's call chains, leaf first, each down to main. A sample's user stack,
    leaf first, is complete when it is some frames outside the program's own functions (libc,
    libstdc++, the vdso: whatever the sample's leaf called), then the tail of one of the paths from
    one of its own functions down to main, and ends at _start. A frame-pointer walk stops at the
    first function without a frame pointer, and a wrong CFA skips or garbles frames: either breaks
    the chain. leaf_shares: the least share of the samples whose leaf frame is that function (a
    name) or in that library (a file name), to show the run really spent time there."""

    def __init__(self, name, build, paths, leaf_shares, follows=()):
        self.name, self.build, self.paths, self.leaf_shares = name, build, paths, leaf_shares
        self.follows = follows  # (library function, the frames that must come right after it)
        self.own = {n for p in paths for n in p if n not in (LIB, ANY)}
        self.binary = None


def dwarf_programs(clang):
    c_paths = [["nofp_inner", "nofp_middle", "nofp_outer", "main"],
               ["compare_items", LIB, "sort_round", "main"], ["clock_round", "main"]]
    c_shares = {"nofp_inner": 0.2, "compare_items": 0.05, "libc.so.6": 0.05, "[vdso]": 0.03}
    src = lambda f: os.path.join(SRC, f)  # noqa: E731
    progs = [DwarfProgram("nofp_chain_gcc", lambda out: [
        "gcc", "-O2", "-g", "-fomit-frame-pointer", "-o", out, src("nofp_chain.c")],
        c_paths, c_shares)]
    if clang:
        progs.append(DwarfProgram("nofp_chain_clang", lambda out: [
            clang, "-O2", "-g", "-fomit-frame-pointer", "-o", out, src("nofp_chain.c")],
            c_paths, c_shares))
    progs.append(DwarfProgram("nofp_exceptions", lambda out: [
        "g++", "-O2", "-g", "-fomit-frame-pointer", "-o", out, src("nofp_exceptions.cpp")],
        [["thrower", "throw_loop", "main"], ["format_loop", "main"]],
        {"thrower": 0.05, "libc.so.6": 0.05, "libstdc++.so.6": 0.05, "libgcc_s.so.1": 0.03},
        follows=[("__cxa_throw", ["thrower", "throw_loop", "main"])]))
    if shutil.which("rustc"):
        progs.append(DwarfProgram("nofp_rust", lambda out: [
            "rustc", "-C", "opt-level=3", "-C", "debuginfo=1", "-C", "force-frame-pointers=no",
            "-o", out, src("nofp_rust.rs")],
            [["nofp_rust::rust_inner", "nofp_rust::rust_outer", "nofp_rust::rust_loop", ANY,
              "main"], ["nofp_rust::rust_format", "nofp_rust::rust_loop", ANY, "main"]],
            {"nofp_rust::rust_inner": 0.2}))
    return progs


class Verdicts:
    """What one profiler's stacks of one program say."""

    def __init__(self, prog, stacks):
        exe = prog.binary
        self.prog = prog
        # no user frames (exec, exit), all in the dynamic loader (start-up), the loader running
        # a library's constructors before the program's _start (the outermost frame in the
        # loader: _dl_start_user > _dl_init > call_init > ...), or a library's _init/_fini the
        # loader runs at start-up and exit (crti's code there has no CFI: perf --call-graph dwarf
        # stops there too)
        self.excluded = 0
        self.total = self.chain = self.start = self.good = 0
        self.outermost, self.chains, self.seen, self.leaves = {}, {}, {}, {}
        self.incomplete = {}
        self.follow_bad = {}
        for count, frames in stacks:
            if (not frames or re.search(r"/ld-linux[^/]*\.so", frames[-1][1])
                    or (len(frames) <= 2 and frames[0][0] in ("_init", "_fini")
                        and frames[0][1] != exe)):
                self.excluded += count
                continue
            names = [normalize(n) for n, _ in frames]
            self.total += count
            base = os.path.basename(frames[0][1]) if frames[0][1] != exe else ""
            for key in {names[0], re.sub(r"\.so\.(\d+)\..*$", r".so.\1", base)} - {""}:
                self.leaves[key] = self.leaves.get(key, 0) + count
            mains = [i for i, (n, f) in enumerate(zip(names, frames)) if n == "main" and f[1] == exe]
            chain_ok = False
            if mains:
                m = mains[0]
                k = next(i for i, n in enumerate(names) if n in prog.own)
                chain_ok = any(match_path(names[k:m + 1], path[j:], prog.own)
                               for path in prog.paths for j in range(len(path))
                               if path[j] not in (LIB, ANY))
            start_ok = names[-1] == "_start"
            self.chain += count * chain_ok
            self.start += count * start_ok
            self.good += count * (chain_ok and start_ok)
            self.outermost[names[-1]] = self.outermost.get(names[-1], 0) + count
            key = tuple(n if f == exe else os.path.basename(f) or "?"
                        for n, (_, f) in zip(names[:mains[0] + 1] if mains else names, frames))
            self.chains[key] = self.chains.get(key, 0) + count
            shown = " > ".join(f"{n}" if f == exe else f"{n} [{os.path.basename(f)}]"
                               for n, (_, f) in zip(names, frames))
            self.seen[shown] = self.seen.get(shown, 0) + count
            if not (chain_ok and start_ok):
                self.incomplete[shown] = self.incomplete.get(shown, 0) + count
            for fn, after in prog.follows:
                if fn in names:
                    i = names.index(fn)
                    # gcc puts the throw in the caller's cold part: "thrower(unsigned long)
                    # [clone .cold]" is thrower
                    if [cold_base(n) for n in names[i + 1:i + 1 + len(after)]] != after:
                        self.follow_bad[fn] = self.follow_bad.get(fn, 0) + count

    def fraction(self, n):
        return n / self.total if self.total else 0.0

    def top(self, n=5, incomplete=False):
        seen = self.incomplete if incomplete else self.seen
        return "\n".join(f"  {c:5d}  {s}" for s, c in
                         sorted(seen.items(), key=lambda kv: -kv[1])[:n]) or "  (none)"

    def report(self, who):
        outermost = sorted(self.outermost.items(), key=lambda kv: -kv[1])
        return (f"\n{who}: {self.summary()}\n{who}: outermost frames {outermost}\n"
                f"{who}: top 5 stacks (leaf first):\n{self.top()}\n"
                f"{who}: top 5 incomplete stacks:\n{self.top(incomplete=True)}")

    def top_chains(self, n):
        return [k for k, _ in sorted(self.chains.items(), key=lambda kv: -kv[1])[:n]]

    def summary(self):
        return (f"{self.total} samples (+{self.excluded} at exec/start-up/exit): "
                f"chain to main {self.fraction(self.chain):.1%}, outermost _start "
                f"{self.fraction(self.start):.1%}, both {self.fraction(self.good):.1%}")


def cold_base(name):
    """thrower for "thrower(unsigned long) [clone .cold]" and "thrower.cold"."""
    for cut in (" [clone", ".cold"):
        if cut in name:
            name = name[:name.index(cut)]
            if "(" in name:
                name = name[:name.index("(")]
    return name


def same_chain(a, b):
    return len(a) == len(b) and all(x == y or unknown(x) or unknown(y) for x, y in zip(a, b))


@unittest.skipUnless(can_run_bpf(), "needs root, /sys/kernel/btf/vmlinux and the agent binary")
class AgentDwarfUnwindTest(unittest.TestCase):
    """Programs without frame pointers (gcc and clang -O2 -fomit-frame-pointer C through Debian's
    libc qsort, C++ exceptions and iostreams through libstdc++/libgcc_s/libc, a Rust release
    build) run under the agent and, at the same time, under perf record --call-graph dwarf. Of
    each program's samples, at least 99 % must carry the full chain to main and end at _start, no
    fewer than perf's (less one point), and the agent's hottest chain must be one of perf's top
    chains. Frame-pointer unwinding alone stops at the first function without one: this is the
    test of the .eh_frame unwinder."""

    @classmethod
    def setUpClass(cls):
        cls.work = lib.make_workdir("agent-dwarf")
        cls.clang = clang_binary()
        cls.no_perf = perf_unusable()
        cls.programs = {p.name: p for p in dwarf_programs(cls.clang)}
        builds = []
        for p in cls.programs.values():
            p.binary = os.path.join(cls.work, p.name)
            builds.append((p, subprocess.Popen(p.build(p.binary), cwd=cls.work,
                                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)))
        for p, b in builds:
            out = b.communicate(timeout=120)[0]
            if b.returncode != 0:
                raise AssertionError(f"building {p.name} failed:\n{out.decode(errors='replace')}")
        server, sink, port = tl.start_sink()
        # The agent samples at perf's rate: about 1,000 samples a program, not 190, so that the
        # few samples taken where no unwinder can succeed are not 1 % by the luck of a draw: while
        # libgcc installs the landing pad's context, _Unwind_RaiseException's frame already holds
        # throw_loop's values, and the walk above it reads garbage (perf fails there too, about
        # 0.3 % of its samples; a CI run's agent had 2 of 184).
        agent = Agent(cls.work, port, "-sampling-frequency", "99")
        # perf attaches to the running program (-p): with `perf record -- program` the agent can
        # sample perf's forked child before it execs and keep perf as the pid's executable.
        procs, perfs, errs = {}, {}, []
        try:
            for name, p in cls.programs.items():
                procs[name] = subprocess.Popen([p.binary, DWARF_SECONDS], stdout=subprocess.DEVNULL)
            if not cls.no_perf:
                for name, proc in procs.items():
                    errs.append(open(os.path.join(cls.work, name + ".perf.err"), "w"))
                    perfs[name] = subprocess.Popen(
                        ["perf", "record", "-q", "-e", "cpu-clock", "-F", "99", "--call-graph",
                         "dwarf", "-o", os.path.join(cls.work, name + ".perf.data"), "-p",
                         str(proc.pid)], stdout=subprocess.DEVNULL, stderr=errs[-1])
            for name, proc in procs.items():
                if proc.wait(timeout=120) != 0:
                    raise AssertionError(f"{name} exited {proc.returncode}")
            for name, proc in perfs.items():  # perf record -p ends when its process does
                if proc.wait(timeout=60) != 0:
                    with open(os.path.join(cls.work, name + ".perf.err")) as f:
                        raise AssertionError(f"perf record on {name} exited {proc.returncode}: "
                                             f"{f.read()}")
        finally:
            for proc in [*procs.values(), *perfs.values()]:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            for f in errs:
                f.close()
            cls.agent_rc = agent.stop()  # pushes the last window before it exits
            cls.agent_logs = agent.logs()
            server.stop(0)
        cls.agent, cls.executables = {}, {}
        for name, p in cls.programs.items():
            series = [(labels, prof) for labels, prof in sink.series()
                      if labels.get("pid") == str(procs[name].pid)]
            cls.executables[name] = {labels.get("executable") for labels, _ in series}
            cls.agent[name] = Verdicts(p, agent_user_stacks([prof for _, prof in series]))
        cls.perf = {}
        if not cls.no_perf:
            for name, p in cls.programs.items():
                text = subprocess.run(
                    ["perf", "script", "--no-inline", "-F", "comm,pid,tid,ip,sym,dso", "-i",
                     os.path.join(cls.work, name + ".perf.data")],
                    capture_output=True, text=True, check=True, timeout=120).stdout
                cls.perf[name] = Verdicts(p, perf_user_stacks(text))
        for name in cls.programs:
            agent = cls.agent[name]
            print(f"\n{name}: agent {agent.summary()}", file=sys.stderr)
            if name in cls.perf:
                perf = cls.perf[name]
                print(f"{name}: perf  {perf.summary()}", file=sys.stderr)
                print(f"{name}: hottest chains, agent {list((agent.top_chains(1) or [()])[0])}, "
                      f"perf {list((perf.top_chains(1) or [()])[0])}", file=sys.stderr)

    @classmethod
    def tearDownClass(cls):
        lib.remove_workdir(cls.work)

    def check_program(self, name):
        if name not in self.programs:
            self.skipTest({"nofp_chain_clang": "neither clang nor clang-14 is installed",
                           "nofp_rust": "rustc is not installed (Debian package rustc)"}[name])
        prog, agent, perf = self.programs[name], self.agent[name], self.perf.get(name)
        detail = agent.report("agent") + (perf.report("perf") if perf else "")
        self.assertEqual(self.agent_rc, 0, self.agent_logs)
        self.assertEqual(self.executables[name], {prog.binary})
        self.assertGreaterEqual(agent.total, 40, f"{name}: too few samples{detail}")
        # The run exercised what it is meant to (this does not depend on unwinding).
        for leaf, share in prog.leaf_shares.items():
            self.assertGreaterEqual(agent.fraction(agent.leaves.get(leaf, 0)), share,
                                    f"{name}: samples with the leaf in {leaf}{detail}")
        self.assertGreaterEqual(agent.fraction(agent.chain), 0.99,
                                f"{name}: samples with the full chain to main{detail}")
        self.assertGreaterEqual(agent.fraction(agent.start), 0.99,
                                f"{name}: samples whose outermost frame is _start{detail}")
        self.assertLessEqual(sum(agent.follow_bad.values()), 0.01 * agent.total,
                             f"{name}: samples with library frames under the wrong callers: "
                             f"{agent.follow_bad}{detail}")
        if self.no_perf:
            print(f"\n{name}: no comparison with perf: {self.no_perf}", file=sys.stderr)
            return
        self.assertGreaterEqual(perf.total, 100, f"{name}: too few perf samples{detail}")
        self.assertGreaterEqual(agent.fraction(agent.good), perf.fraction(perf.good) - 0.01,
                                f"{name}: complete stacks, agent against perf{detail}")
        hottest = agent.top_chains(1)[0]
        perf_top = perf.top_chains(PERF_TOP)
        self.assertTrue(any(same_chain(hottest, c) for c in perf_top),
                        f"{name}: the agent's hottest chain {list(hottest)} is not one of perf's "
                        f"top {PERF_TOP}: {[list(c) for c in perf_top]}{detail}")

    def test_c_gcc_without_frame_pointers(self):
        self.check_program("nofp_chain_gcc")

    def test_c_clang_without_frame_pointers(self):
        self.check_program("nofp_chain_clang")

    def test_cxx_exceptions_and_libstdcxx(self):
        self.check_program("nofp_exceptions")

    def test_rust_release_build(self):
        self.check_program("nofp_rust")


def profile_type(p):
    """"sample_type/unit period_type/unit" of a decoded pprof."""
    st = p.sample_type[0]
    return (f"{p.string_table[st.type]}/{p.string_table[st.unit]} "
            f"{p.string_table[p.period_type.type]}/{p.string_table[p.period_type.unit]}")


@unittest.skipUnless(can_run_bpf(), "needs root, /sys/kernel/btf/vmlinux and the agent binary")
class AgentLateLibraryTest(unittest.TestCase):
    """A library mapped after the agent listed the process, while the agent is too busy to list
    it again at once (stopped here for 0.4 s, as a loaded machine can hold it): nofp_dlopen, no
    frame pointers, is listed during its first 0.3 s, then dlopen()s libnofp_late.so and runs
    main -> late_outer -> late_middle -> late_inner for 1 s. The walks that meet the library
    before the agent lists it again leave the list; BPF sends them with a copy of the stack,
    which the agent walks once it has listed the library. Without that, the 0.4 s of samples
    taken meanwhile end at the library (a CI run lost 16 of a Rust program's 1,011 samples so,
    at start-up, while the loader was mapping libc). At least 98% of the samples must reach main
    and _start, and the library's samples must have the whole chain."""

    def test_samples_taken_before_the_library_is_listed(self):
        work = lib.make_workdir("agent-late")
        try:
            library = os.path.join(work, "libnofp_late.so")
            binary = os.path.join(work, "nofp_dlopen")
            subprocess.run(["gcc", "-O2", "-g", "-fomit-frame-pointer", "-shared", "-fPIC", "-o",
                            library, os.path.join(SRC, "nofp_late_lib.c")], check=True)
            subprocess.run(["gcc", "-O2", "-g", "-fomit-frame-pointer", "-o", binary,
                            os.path.join(SRC, "nofp_dlopen.c"), "-ldl"], check=True)
            prog = DwarfProgram("nofp_dlopen", None, [
                ["late_inner", "late_middle", "late_outer", "main"],
                ["cpu_now", "early_spin", "main"], ["cpu_now", "main"], ["early_spin", "main"]],
                {"late_inner": 0.3})
            prog.binary = binary
            server, sink, port = tl.start_sink()
            agent = Agent(work, port, "-sampling-frequency", "99")
            proc = subprocess.Popen([binary, library, "1"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE)
            stopped = False
            try:
                self.assertEqual(proc.stdout.readline(), b"ready\n")
                os.kill(agent.proc.pid, signal.SIGSTOP)
                stopped = True
                proc.stdin.write(b"go\n")
                proc.stdin.flush()
                time.sleep(0.4)
                os.kill(agent.proc.pid, signal.SIGCONT)
                stopped = False
                self.assertEqual(proc.wait(timeout=60), 0)
            finally:
                if stopped:
                    os.kill(agent.proc.pid, signal.SIGCONT)
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                proc.stdin.close()
                proc.stdout.close()
                metrics = agent.metrics()
                rc = agent.stop()
                server.stop(0)
            self.assertEqual(rc, 0, agent.logs())
            series = [prof for labels, prof in sink.series()
                      if labels.get("pid") == str(proc.pid)]
            verdicts = Verdicts(prog, agent_user_stacks(series))
            detail = verdicts.report("agent") + "\n" + "\n".join(
                line for line in metrics.splitlines() if "stack_copies" in line)
            late = verdicts.leaves.get("late_inner", 0)
            self.assertGreaterEqual(late, 30, f"samples in late_inner{detail}")
            self.assertGreaterEqual(verdicts.fraction(verdicts.good), 0.98,
                                    f"samples with the whole chain to main and _start{detail}")
        finally:
            lib.remove_workdir(work)


@unittest.skipUnless(can_run_bpf(), "needs root, /sys/kernel/btf/vmlinux and the agent binary")
class AgentOffCpuTest(unittest.TestCase):
    """-off-cpu-threshold 1 (every blocking timed): a program that sleeps 10 ms at a time for
    3 s gets an off-CPU profile (Parca's wallclock:nanoseconds:samples:count) whose time is the
    time the program measured itself sleeping, at main -> wait_a -> wait_b under the kernel's
    schedule; a busy program has next to no off-CPU time and its CPU ticks still arrive as on-CPU
    samples. The agent's counters show the timed blockings."""

    def test_off_cpu_profile(self):
        work = lib.make_workdir("agent-offcpu")
        try:
            sleeper = os.path.join(work, "sleeper")
            tl.build_c(os.path.join(SRC, "sleeper.c"), sleeper)
            cchain = os.path.join(work, "cchain")
            tl.build_c(os.path.join(SRC, "cchain.c"), cchain)
            server, sink, port = tl.start_sink()
            agent = Agent(work, port, "-off-cpu-threshold", "1")
            busy = subprocess.Popen([cchain, "2"], stdout=subprocess.DEVNULL)
            out = subprocess.run([sleeper, "3"], check=True, capture_output=True, text=True)
            slept_ns = int(out.stdout.strip())
            busy.wait(timeout=60)
            time.sleep(2.5)  # the last window
            metrics = agent.metrics()
            self.assertEqual(agent.stop(), 0)
            server.stop(0)
            pid = str(out.args and self.pid_of(sink, "sleeper"))
            off, on = [], []
            for labels, p in sink.series():
                if labels.get("pid") != pid:
                    continue
                self.assertEqual(labels.get("__name__"), "strata_agent")
                (off if profile_type(p) == "wallclock/nanoseconds samples/count" else on).append(p)
            self.assertTrue(off, "no off-CPU profile for the sleeper")
            for p in off:
                self.assertEqual(p.period, 1)
            stacks = [s for p in off for s in tl.stacks(p)]
            total = sum(c for c, _, _ in stacks)
            chain = sum(c for c, names, _ in stacks
                        if tl.contains_in_order(names, ["wait_b", "wait_a", "main"]))
            # kernel frames from the kernel's path to schedule (the tracer's own are left out)
            kernel = sum(c for c, names, _ in stacks
                         if names[:2] == ["__schedule", "schedule"] and "do_nanosleep" in names)
            print(f"\noff-CPU: {total / 1e9:.3f} s in {len(stacks)} stacks, measured sleep "
                  f"{slept_ns / 1e9:.3f} s; at wait_b > wait_a > main {chain / total:.1%}, under "
                  f"schedule {kernel / total:.1%}", file=sys.stderr)
            self.assertGreaterEqual(total, 0.9 * slept_ns)
            self.assertLessEqual(total, 1.1 * slept_ns + 0.1e9)
            self.assertGreaterEqual(chain, 0.99 * total)
            self.assertGreaterEqual(kernel, 0.95 * total)
            for p in on:  # the sleeper's few CPU ticks, if any, are plain on-CPU samples
                self.assertEqual(profile_type(p), "samples/count cpu/nanoseconds")
            totals = {kind: sum(s.value[0] for labels, p in sink.series()
                              if labels.get("pid") == str(busy.pid) and profile_type(p) == kind
                              for s in p.sample)
                    for kind in ("wallclock/nanoseconds samples/count",
                                 "samples/count cpu/nanoseconds")}
            self.assertLess(totals["wallclock/nanoseconds samples/count"], 0.5e9,
                            "a CPU-bound program is hardly ever off CPU")
            # with off-CPU on, CPU ticks still arrive: 2 CPU seconds at 19 Hz are 38 periods
            self.assertGreaterEqual(totals["samples/count cpu/nanoseconds"], 19,
                                    "the busy program's on-CPU samples")
            timed = re.search(r"^strata_agent_off_cpu_events_total (\d+)", metrics, re.M)
            self.assertIsNotNone(timed, "strata_agent_off_cpu_events_total missing")
            self.assertGreaterEqual(int(timed.group(1)), 250)  # 300 sleeps of 10 ms at least
        finally:
            lib.remove_workdir(work)

    @staticmethod
    def pid_of(sink, comm):
        for labels, _ in sink.series():
            if labels.get("comm") == comm:
                return int(labels["pid"])
        return None


DEBIAN_PYTHON = "/usr/bin/python3.11"


def is_python(frame):
    """A python_stacks frame of Python code (no mapping, a function with a file)."""
    return frame[4] == "" and frame[1] != ""


def python_stacks(profile):
    """[(count, [(name, filename, line, start_line, mapping filename)] leaf first)]: stacks() with
    the Python frames' files and lines."""
    strings = profile.string_table
    functions = {f.id: f for f in profile.function}
    mappings = {m.id: strings[m.filename] for m in profile.mapping}
    locations = {loc.id: loc for loc in profile.location}
    out = []
    for s in profile.sample:
        frames = []
        for lid in s.location_id:
            loc = locations[lid]
            mapping = mappings.get(loc.mapping_id, "")
            if not loc.line:
                frames.append((f"0x{loc.address:x}", "", 0, 0, mapping))
            for line in loc.line:
                f = functions[line.function_id]
                frames.append((strings[f.name], strings[f.filename], line.line, f.start_line,
                               mapping))
        out.append((s.value[0], frames))
    return out


@unittest.skipUnless(can_run_bpf() and os.path.exists(DEBIAN_PYTHON),
                     "needs root, kernel BTF, the agent binary and Debian's python3.11")
class AgentPythonTest(unittest.TestCase):
    """Debian's python3.11 (stripped, libpython linked in) runs tests/agent/pyhot.py: its samples
    carry the Python frames hot_leaf > middle > outer > <module> (leaf first) with pyhot.py's
    lines, among the interpreter's native frames."""

    SECONDS = 6

    def test_python_frames(self):
        work = lib.make_workdir("agent-python")
        try:
            server, sink, port = tl.start_sink()
            agent = Agent(work, port)
            script = os.path.join(SRC, "pyhot.py")
            proc = subprocess.run([DEBIAN_PYTHON, script, str(self.SECONDS)], check=True)
            time.sleep(2.5)  # the last window
            logs_rc = agent.stop()
            server.stop(0)
            self.assertEqual(logs_rc, 0, agent.logs())
            pid = str(proc.args and self.pid_of(sink, "python3.11"))
            stacks = [s for labels, p in sink.series() if labels.get("pid") == pid
                      for s in python_stacks(p)]
            total = sum(c for c, _ in stacks)
            # (name, line, start line) of the chain, leaf first: the hot loop is lines 15-16
            expect = [("middle", 22, 20), ("outer", 26, 25), ("<module>", 29, 1)]
            good, native_right, eval_below, shapes = 0, 0, 0, {}
            for count, frames in stacks:
                names = [f[0] for f in frames]
                if "hot_leaf" not in names:
                    continue
                i = names.index("hot_leaf")
                leaf = frames[i]
                chain = [(f[0], f[2], f[3]) for f in frames[i + 1:i + 4]]
                python = frames[i:i + 4]
                if (leaf[2] in (15, 16) and leaf[3] == 13 and chain == expect and
                        all(f[1] == script and f[4] == "" for f in python)):
                    good += count
                # The native frames around the chain: above it (leaf side) and below it only
                # native frames, and right below it _PyEval_EvalFrameDefault, the C-level
                # evaluation that runs it, whenever the native walk got that far. Debian's CPython
                # has no frame pointers, so without DWARF unwinding the walk often ends at its
                # leaf (then _PyEval_EvalFrameDefault itself, or a helper above the chain) or
                # goes on into unmapped garbage; main and Py_RunMain need DWARF unwinding.
                above, below = frames[:i], frames[i + 4:]
                shape = tuple(f[0] for f in above) + ("[chain]",) + tuple(f[0] for f in below)
                shapes[shape] = shapes.get(shape, 0) + count
                if not any(is_python(f) for f in above + below) and (
                        "_PyEval_EvalFrameDefault" not in [f[0] for f in below] or
                        below[0][0] == "_PyEval_EvalFrameDefault"):
                    native_right += count
                if below and below[0][0] == "_PyEval_EvalFrameDefault":
                    eval_below += count
            top = sorted(stacks, key=lambda s: -s[0])[:3]
            print(f"\npython: {good}/{total} samples with hot_leaf > middle > outer > <module>, "
                  f"{native_right} with the native frames in place, {eval_below} right above "
                  f"_PyEval_EvalFrameDefault; native shapes: "
                  f"{sorted(shapes.items(), key=lambda s: -s[1])[:6]}", file=sys.stderr)
            self.assertGreater(total, 30)
            self.assertGreaterEqual(good / total, 0.9, top)
            self.assertGreaterEqual(native_right, good, top)
            self.assertGreaterEqual(eval_below, 0.25 * good, shapes)
        finally:
            lib.remove_workdir(work)

    @staticmethod
    def pid_of(sink, comm):
        for labels, _ in sink.series():
            if labels.get("comm") == comm:
                return int(labels["pid"])
        return None


@unittest.skipUnless(can_run_bpf(), "needs root, /sys/kernel/btf/vmlinux and the agent binary")
class AgentSampleCountTest(unittest.TestCase):
    """Keeps every CPU busy (cchain, one thread per CPU) and counts what reaches the sink.

    While every CPU is busy, each tick of each CPU's 19 Hz clock must become a sample, so the
    samples of the windows that lie wholly inside the busy period must add up to
    19 x CPUs x their total duration (to within one tick per CPU: the window edges are
    contiguous). That is the "99% of sampling periods" criterion, and it holds however loaded the
    machine is. Periods the hypervisor stole (/proc/stat steal) are not periods of this machine
    and are taken out; ticks that hit the agent itself are skipped by design. The load's own samples against its CPU time (wait4) are reported too: exact on an
    idle machine, statistical on a shared one.
    """

    def test_99_percent_of_periods(self):
        work = lib.make_workdir("agent-count")
        ncpu = os.cpu_count()
        try:
            cchain = os.path.join(work, "cchain")
            tl.build_c(os.path.join(SRC, "cchain.c"), cchain)
            server, sink, port = tl.start_sink()
            agent = Agent(work, port, "-window", "1s")
            t0, steal0 = time.time_ns(), steal_seconds()
            load = subprocess.Popen([cchain, "8", str(ncpu)], stdout=subprocess.DEVNULL)
            _, status, usage = os.wait4(load.pid, 0)
            load.returncode = status
            t1, steal1 = time.time_ns(), steal_seconds()
            # A vCPU the hypervisor does not run has no clock ticks: those periods never existed.
            steal_share = (steal1 - steal0) / (ncpu * (t1 - t0) / 1e9)
            self.assertEqual(agent.stop(), 0)
            server.stop(0)
            # Ticks that hit the agent itself are skipped by design, not lost.
            self_ticks = int(re.search(r"agent stopped.* self=(\d+)", agent.logs()).group(1))
            windows = {}
            load_samples = 0
            for labels, p in sink.series():
                w = windows.setdefault(p.time_nanos, [p.duration_nanos, 0])
                n = sum(s.value[0] for s in p.sample)
                w[1] += n
                if labels.get("pid") == str(load.pid):
                    load_samples += n
            inside = [(d, n) for t, (d, n) in windows.items()
                      if t >= t0 + 200_000_000 and t + d <= t1 - 200_000_000]
            expected = sum(d for d, _ in inside) * 19 * ncpu / 1e9 * (1 - steal_share)
            got = sum(n for _, n in inside)
            cpu_s = usage.ru_utime + usage.ru_stime
            print(f"\n{got} samples in {len(inside)} busy windows, {expected:.1f} periods: "
                  f"{got / expected:.2%} (+{self_ticks} on the agent, {steal_share:.2%} stolen); load: {load_samples} samples for {cpu_s:.2f} CPU s "
                  f"({load_samples / (cpu_s * 19):.2%})", file=sys.stderr)
            self.assertGreaterEqual(len(inside), 4)
            self.assertGreaterEqual(got + self_ticks, 0.99 * expected - ncpu)
            # Steal accounting is coarse (clock ticks): the upper bound is the periods of the whole
            # windows, as if nothing had been stolen.
            self.assertLessEqual(got, expected / (1 - steal_share) + ncpu)
            self.assertGreater(load_samples, 0.7 * cpu_s * 19)
        finally:
            lib.remove_workdir(work)


@unittest.skipUnless(can_run_bpf(), "needs root, /sys/kernel/btf/vmlinux and the agent binary")
class AgentRelabelTest(unittest.TestCase):
    """-relabel-config keeps only the test programs (a keep rule on __meta_process_executable),
    drops one of them, and adds a label; two -remote-store sinks share the pushes."""

    def test_relabel_and_two_ingesters(self):
        work = lib.make_workdir("agent-relabel")
        try:
            keep, dropped = os.path.join(work, "cchain"), os.path.join(work, "cdrop")
            tl.build_c(os.path.join(SRC, "cchain.c"), keep)
            shutil.copy(keep, dropped)
            config = os.path.join(work, "relabel.yaml")
            with open(config, "w") as f:
                f.write("relabel_configs:\n"
                        f"- {{action: keep, source_labels: [__meta_process_executable], "
                        f"regex: '{work}/.*'}}\n"
                        "- {action: drop, source_labels: [__meta_process_executable_name], "
                        "regex: cdrop}\n"
                        "- {source_labels: [__meta_process_executable_name, node], "
                        "separator: \"@\", target_label: program}\n")
            servers, sinks, ports = zip(*(tl.start_sink() for _ in range(2)))
            agent = Agent(work, f"{ports[0]},127.0.0.1:{ports[1]}", "-window", "1s",
                          "-relabel-config", config)
            procs = [subprocess.Popen([path, "3"], stdout=subprocess.DEVNULL)
                     for path in (keep, dropped)]
            for p in procs:
                p.wait(timeout=60)
            time.sleep(1.5)
            metrics = agent.metrics()
            self.assertEqual(agent.stop(), 0, agent.logs())
            for server in servers:
                server.stop(0)
            series = [s for sink in sinks for s in sink.series()]
            self.assertTrue(series)
            for labels, _ in series:
                self.assertEqual(labels["executable"], keep)
                self.assertEqual(labels["program"], "cchain@test-node")
            # Windows alternate between the two ingesters.
            self.assertTrue(all(sink.requests for sink in sinks),
                            [len(sink.requests) for sink in sinks])
            self.assertRegex(metrics, r'(?m)^strata_agent_push_dropped_total{reason="queue_full"} 0$')
            for port in ports:
                self.assertRegex(metrics, r'(?m)^strata_agent_push_address_requests_total'
                                 rf'{{address="127.0.0.1:{port}"}} \d+$')
        finally:
            lib.remove_workdir(work)


@unittest.skipUnless(can_run_bpf() and os.path.isdir("/sys/fs/cgroup/pids"),
                     "needs root, BTF, the agent binary and a writable cgroup v1 pids hierarchy")
class AgentKubernetesTest(unittest.TestCase):
    """-kubeconfig: the agent watches its node's pods on a fake API server
    (tests/kubernetes/fake_apiserver.py) and labels a process in a kubepods cgroup named after a
    container of one of them with namespace, pod and container; -relabel-config maps the pod's
    labels (__meta_kubernetes_pod_label_*)."""

    def test_pod_labels(self):
        work = lib.make_workdir("agent-kubernetes")
        container_id = "%064x" % int(time.time() * 1e6)
        cgroup = os.path.join("/sys/fs/cgroup/pids", "strata-test-kubepods", "burstable",
                              "pod4f9c0000-0000-4000-8000-000000000001", container_id)
        api = None
        try:
            program = os.path.join(work, "cchain")
            tl.build_c(os.path.join(SRC, "cchain.c"), program)
            script = os.path.join(lib.SOURCE_DIR, "tests", "kubernetes", "fake_apiserver.py")
            api = subprocess.Popen(["/usr/bin/python3", script, "--token", "node-token"],
                                   stdout=subprocess.PIPE, text=True)
            api_port, control_port = api.stdout.readline().split()
            pod = {"metadata": {"name": "cart-5d8f", "namespace": "shop",
                                "labels": {"app": "cart"}},
                   "spec": {"nodeName": "test-node",
                            "containers": [{"name": "app", "image": "shop/cart:3"}]},
                   "status": {"phase": "Running", "podIP": "10.0.0.5", "containerStatuses": [
                       {"name": "app", "containerID": "containerd://" + container_id}]}}
            req = urllib.request.Request(f"http://127.0.0.1:{control_port}/apply",
                                         data=json.dumps(pod).encode(), method="POST")
            urllib.request.urlopen(req, timeout=10).read()
            kubeconfig = os.path.join(work, "kubeconfig")
            with open(kubeconfig, "w") as f:
                f.write("apiVersion: v1\nkind: Config\ncurrent-context: test\n"
                        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{api_port}'}}}}]\n"
                        "contexts: [{name: test, context: {cluster: c, user: u}}]\n"
                        "users: [{name: u, user: {token: node-token}}]\n")
            config = os.path.join(work, "relabel.yaml")
            with open(config, "w") as f:
                f.write("relabel_configs:\n"
                        f"- {{action: keep, source_labels: [__meta_process_executable], "
                        f"regex: '{work}/.*'}}\n"
                        "- {action: labelmap, regex: __meta_kubernetes_pod_label_(.+)}\n")
            os.makedirs(cgroup)
            server, sink, port = tl.start_sink()
            agent = Agent(work, port, "-window", "1s", "-kubeconfig", kubeconfig,
                          "-relabel-config", config)
            self.assertIn("watching the node's pods", agent.logs())
            # The process enters the container's cgroup before it runs.
            proc = subprocess.Popen(["/bin/sh", "-c", f"echo $$ > {cgroup}/cgroup.procs && "
                                     f"exec {program} 2"], stdout=subprocess.DEVNULL)
            proc.wait(timeout=60)
            time.sleep(1.5)
            self.assertEqual(agent.stop(), 0, agent.logs())
            server.stop(0)
            series = sink.series()
            self.assertTrue(series, agent.logs())
            for labels, _ in series:
                self.assertEqual(labels["container_id"], container_id)
                self.assertEqual(labels["namespace"], "shop")
                self.assertEqual(labels["pod"], "cart-5d8f")
                self.assertEqual(labels["container"], "app")
                self.assertEqual(labels["app"], "cart")
                self.assertFalse([k for k in labels if k.startswith("__meta")])
            with urllib.request.urlopen(f"http://127.0.0.1:{control_port}/requests",
                                        timeout=10) as r:
                requests = json.loads(r.read())
            self.assertTrue(requests)
            for r in requests:
                self.assertEqual(r["query"]["fieldSelector"], "spec.nodeName=test-node")
                self.assertEqual(r["authorization"], "Bearer node-token")
        finally:
            if api is not None:
                api.terminate()
                api.wait(timeout=10)
                api.stdout.close()
            for d in (cgroup, os.path.dirname(cgroup), os.path.dirname(os.path.dirname(cgroup)),
                      os.path.dirname(os.path.dirname(os.path.dirname(cgroup)))):
                if os.path.isdir(d):
                    os.rmdir(d)
            lib.remove_workdir(work)


class AgentPrivilegeTest(unittest.TestCase):
    @unittest.skipUnless(os.geteuid() == 0 and shutil.which("setpriv") and
                         os.path.exists(tl.AGENT_BINARY), "needs root to drop privileges")
    def test_unprivileged_agent_says_what_is_missing(self):
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                            "--inh-caps=-all", "--bounding-set=-all", tl.AGENT_BINARY,
                            "-remote-store", "127.0.0.1:1", "-http-address", ""],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("CAP_BPF", r.stderr)
        self.assertIn("root", r.stderr)

    @unittest.skipUnless(os.path.exists(tl.AGENT_BINARY), "needs the agent binary")
    def test_bad_flags(self):
        r = subprocess.run([tl.AGENT_BINARY, "-window", "ten"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("bad duration", r.stderr)
        r = subprocess.run([tl.AGENT_BINARY, "-node", "x"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("-remote-store is required", r.stderr)
        r = subprocess.run([tl.AGENT_BINARY, "-remote-store", "127.0.0.1:1", "-relabel-config",
                            "/nonexistent/relabel.yaml"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("/nonexistent/relabel.yaml", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
