#!/usr/bin/python3
"""agent_bench: the eBPF agent's cost on a quiet and on a busy node, side by side with perf.

Per mode, five phases of SECONDS each (default 60) run the same load (bench/agent_bench_load.c,
one spinning thread per CPU, so every CPU is busy):
  1. the load alone (baseline work units),
  2. the load under `strata-agent` pushing every 10 s to a WriteRaw sink (Python grpcio),
  3. the same with `-unwind-table-rows 0` (frame pointers only; skipped with --no-fp-baseline),
  4. the load under `perf record -F 19 -a -g` (frame pointers),
  5. the load under `perf record -F 19 -a --call-graph dwarf` (8 KiB of stack copied per sample
     and unwound afterwards with the binaries' CFI, as the agent's .eh_frame tables do in BPF).
Modes:
  quiet  the load is the only thing running;
  busy   the load plus 50 services (bench/agent_bench_service.c, each built as its own binary:
         50 build ids and symbol tables, many distinct stacks, a wake-up every 25 ms), two node
         and one python3 process waking as often (node's symbol table alone is larger than the
         agent's symbol cache budget if held whole), and a build loop starting the compiler
         continuously (gcc -> cc1 -> as -> collect2 -> ld: new processes of large binaries
         several times a second, as a CI node or a node running builds has).
The agent runs twice: as deployed (.eh_frame unwinding on) and with -unwind-table-rows 0 (frame
pointers only), the baseline of what the unwind tables cost. For each profiler: CPU used, with
start-up (until sampling began) reported apart from steady state, and the agent's over the second
half of its phase apart (every binary running then has been seen once); peak RSS (VmHWM); samples captured against the periods that elapsed (19 x CPUs x time,
since every CPU is busy); and the load's slowdown against the baseline. For the agent also its
symbol cache at the end (bytes against its budget, loads, evictions) from its /metrics.

CPU times come from /proc/PID/task/*/schedstat (nanoseconds) for the agent, and from wait4 for
perf (whose start-up is measured apart with `perf record ... -- true`).

  sudo bench/agent_bench.py [--agent build-perf/agent/strata-agent] [--seconds 60]
                            [--mode quiet|busy|both]
"""
import argparse
import glob
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(SOURCE, "tests", "integration"))


def cpu_ns(pid):
    total = 0
    for f in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            with open(f) as fh:
                total += int(fh.read().split()[0])
        except (OSError, ValueError):
            pass
    return total


def vm_hwm_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        m = re.search(r"VmHWM:\s+(\d+) kB", f.read())
    return int(m.group(1)) if m else 0


def build_load(work):
    out = os.path.join(work, "agent_bench_load")
    subprocess.run(["gcc", "-O1", "-fno-omit-frame-pointer", "-pthread", "-o", out,
                    os.path.join(HERE, "agent_bench_load.c")], check=True)
    return out


def run_load(load, seconds, ncpu):
    r = subprocess.run([load, str(seconds), str(ncpu)], capture_output=True, text=True, check=True)
    return int(r.stdout.strip())


SERVICES = 50


class BusyNode:
    """50 services of their own binaries and a build loop starting the compiler continuously, all
    started (and ended) by the bench: the services' PIDs and the loop's own process group."""

    def __init__(self, work, clang=False):
        src = os.path.join(HERE, "agent_bench_service.c")
        self.dir = os.path.join(work, "busy")
        os.makedirs(self.dir, exist_ok=True)
        self.services = []
        for i in range(SERVICES):
            out = os.path.join(self.dir, f"svc{i:02d}")
            subprocess.run(["gcc", "-O1", "-fno-omit-frame-pointer", f"-DSERVICE={i}", "-o", out,
                            src], check=True)
        for i in range(SERVICES):
            self.services.append(subprocess.Popen([os.path.join(self.dir, f"svc{i:02d}")]))
        # runtimes with large symbol tables, as nodes run them: node's .symtab names 110,000
        # functions (7.5 MB of names), more than the agent's symbol cache budget alone
        for _ in range(2):
            self.services.append(subprocess.Popen(
                ["node", "-e", "setInterval(() => { let x = 0; for (let i = 0; i < 2e5; i++) "
                 "x += Math.sqrt(i); }, 25)"], stdout=subprocess.DEVNULL))
        self.services.append(subprocess.Popen(
            ["/usr/bin/python3", "-c", "import time\nwhile True:\n"
             "    sum(i * i for i in range(20000))\n    time.sleep(0.025)"]))
        churn = os.path.join(self.dir, "churn.c")
        with open(churn, "w") as f:
            f.write("#include <stdio.h>\nint main(void) { puts(\"built\"); return 0; }\n")
        self.builds = os.path.join(self.dir, "builds")
        script = (f"while :; do gcc -O1 -o {self.dir}/churn {churn} && {self.dir}/churn "
                  f">> {self.builds}; done")
        if clang:
            # a second loop with clang: libLLVM (949,000 rows) beside cc1 (479,000), node and
            # python take the unwind tables past the default 2 Mi rows, so the budget must hold
            # by refusing or evicting without reading tables in turns
            script = (f"{script} & while :; do clang -O1 -o {self.dir}/churn2 {churn} && "
                      f"{self.dir}/churn2 >> {self.builds}; done")
        self.loop = subprocess.Popen(["bash", "-c", script], start_new_session=True,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def builds_done(self):
        try:
            with open(self.builds) as f:
                return sum(1 for _ in f)
        except OSError:
            return 0

    def stop(self):
        # the loop's group is ours (start_new_session) and still led by the loop we started
        if self.loop.poll() is None:
            os.killpg(self.loop.pid, signal.SIGKILL)
        self.loop.wait()
        for p in self.services:
            p.kill()
            p.wait()


def agent_metrics(port):
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(("strata_agent_symbol_cache", "strata_agent_processes",
                            "strata_agent_unwind")):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def free_port():
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def bench_agent(agent_bin, load, seconds, ncpu, work, extra=()):
    import threading
    import test_agent_lib as tl
    server, sink, port = tl.start_sink()
    log_path = os.path.join(work, "agent.log")
    with open(log_path, "w") as log:
        http_port = free_port()
        agent = subprocess.Popen([agent_bin, "-remote-store", f"127.0.0.1:{port}", "-http-address",
                                  f"127.0.0.1:{http_port}", "-window", "10s", *extra], stdout=log,
                                 stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while "agent started" not in open(log_path).read():
            if time.time() > deadline or agent.poll() is not None:
                raise SystemExit("agent did not start:\n" + open(log_path).read())
            time.sleep(0.05)
        startup_ns = cpu_ns(agent.pid)
        t0 = time.time_ns()
        # The second half of the phase apart: by then every binary running has been seen once
        # (symbol and unwind tables read), and what is left is the cost of what keeps changing.
        half = {}
        timer = threading.Timer(seconds / 2, lambda: half.update(ns=cpu_ns(agent.pid),
                                                                 t=time.time_ns()))
        timer.start()
        units = run_load(load, seconds, ncpu)
        t1 = time.time_ns()
        timer.join()
        end_ns = cpu_ns(agent.pid)
        steady_ns = end_ns - startup_ns
        warm_pct = (end_ns - half["ns"]) / (t1 - half["t"]) * 100
        hwm = vm_hwm_kb(agent.pid)
        metrics = agent_metrics(http_port)
        agent.send_signal(signal.SIGINT)
        agent.wait(timeout=60)
    server.stop(0)
    windows = {}
    for _, p in sink.series():
        w = windows.setdefault(p.time_nanos, [p.duration_nanos, 0])
        w[1] += sum(s.value[0] for s in p.sample)
    inside = [(d, n) for t, (d, n) in windows.items() if t >= t0 and t + d <= t1]
    periods = sum(d for d, _ in inside) * 19 * ncpu / 1e9
    got = sum(n for _, n in inside)
    return {"startup_cpu_ms": startup_ns / 1e6, "steady_cpu_ms": steady_ns / 1e6,
            "steady_pct": steady_ns / ((t1 - t0)) * 100, "warm_pct": warm_pct, "rss_mb": hwm / 1024,
            "samples": got, "periods": periods, "units": units, "metrics": metrics}


def bench_perf(load, seconds, ncpu, work, callgraph):
    data = os.path.join(work, "perf.data")
    start = subprocess.run(["perf", "record", "-q", "-F", "19", "-a", *callgraph, "-o",
                            data + ".0", "--", "true"], capture_output=True)
    t0 = time.time()
    perf = subprocess.Popen(["perf", "record", "-q", "-F", "19", "-a", *callgraph, "-o", data,
                             "--", "sleep", str(seconds + 1)], stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    units = run_load(load, seconds, ncpu)
    _, _, usage = os.wait4(perf.pid, 0)
    wall = time.time() - t0
    r = subprocess.run(["perf", "script", "-i", data, "-F", "tid"], capture_output=True, text=True)
    samples = len(r.stdout.splitlines())
    startup = None
    if start.returncode == 0:
        r0 = subprocess.run(["perf", "script", "-i", data + ".0", "-F", "tid"], capture_output=True)
        startup = r0.returncode
    cpu_ms = (usage.ru_utime + usage.ru_stime) * 1e3
    return {"cpu_ms": cpu_ms, "pct": cpu_ms / 1e3 / wall * 100, "rss_mb": usage.ru_maxrss / 1024,
            "samples": samples, "periods": 19 * ncpu * wall, "units": units,
            "startup_ok": startup == 0}


def perf_startup_ms(callgraph):
    before = os.times()
    subprocess.run(["perf", "record", "-q", "-F", "19", "-a", *callgraph, "-o", "/dev/null", "--",
                    "true"], capture_output=True)
    after = os.times()
    return ((after.children_user - before.children_user) +
            (after.children_system - before.children_system)) * 1e3


PERF_G = ["-g"]
PERF_DWARF = ["--call-graph", "dwarf"]


def run_mode(mode, args, ncpu, load, work):
    node = BusyNode(work, args.clang) if mode == "busy" else None
    try:
        if node is not None:
            time.sleep(5)  # the services started, the build loop running
        builds0 = node.builds_done() if node else 0
        base = run_load(load, args.seconds, ncpu)
        a = bench_agent(args.agent, load, args.seconds, ncpu, work)
        fp = bench_agent(args.agent, load, args.seconds, ncpu, work,
                         ["-unwind-table-rows", "0"]) if args.fp_baseline else None
        p = bench_perf(load, args.seconds, ncpu, work, PERF_G)
        d = bench_perf(load, args.seconds, ncpu, work, PERF_DWARF)
        builds = (node.builds_done() - builds0) if node else 0
    finally:
        if node is not None:
            node.stop()
    starts = {"g": perf_startup_ms(PERF_G), "dwarf": perf_startup_ms(PERF_DWARF)}
    return base, a, fp, p, d, starts, builds


def share(part, whole):
    return part / whole if whole else float("nan")


def print_mode(mode, seconds, ncpu, base, a, fp, p, d, starts, builds, clang=False):
    uptime_load = open("/proc/loadavg").read().split()[0]
    what = (f"{ncpu} CPUs busy" if mode == "quiet" else
            f"{ncpu} CPUs busy, {SERVICES} services + 2 node + 1 python3, {builds} compiler runs "
            f"{'(gcc and clang) ' if clang else ''}"
            f"({builds / (4 * seconds):.1f}/s)")
    print(f"agent_bench {mode}: {seconds:.0f} s per phase, {what}, load average {uptime_load}")
    agents = [("strata-agent", a)] + ([("agent, frame pointers only", fp)] if fp else [])
    cols = [("perf -F 19 -a -g", p), ("perf ... --call-graph dwarf", d)]
    print(f"{'':24}" + "".join(f"{c:>30}" for c, _ in agents + cols))

    def row(label, agent_fn, fn, fmt):
        cells = [agent_fn(r) for _, r in agents]
        cells += [fn(r, k) if fn else float("nan") for k, (_, r) in zip(("g", "dwarf"), cols)]
        print(f"{label:24}" + "".join(f"{v:>30{fmt}}" for v in cells))
    row("start-up CPU (ms)", lambda r: r["startup_cpu_ms"], lambda r, k: starts[k], ".1f")
    row("steady CPU (ms)", lambda r: r["steady_cpu_ms"], lambda r, k: r["cpu_ms"] - starts[k],
        ".1f")
    row("steady CPU (% of core)", lambda r: r["steady_pct"],
        lambda r, k: (r["cpu_ms"] - starts[k]) / 10 / seconds, ".3f")
    row("2nd half (% of core)", lambda r: r["warm_pct"], None, ".3f")
    row("peak RSS (MB)", lambda r: r["rss_mb"], lambda r, k: r["rss_mb"], ".1f")
    row("periods sampled", lambda r: share(r["samples"], r["periods"]),
        lambda r, k: share(r["samples"], r["periods"]), ".2%")
    row("load slowdown", lambda r: 1 - r["units"] / base, lambda r, k: 1 - r["units"] / base,
        ".2%")
    m = a["metrics"]
    print(f"(baseline {base} units; agent run {a['units']}, perf runs {p['units']}, {d['units']})")
    print("agent symbol cache: {:.1f} MB held, peak {:.1f} MB, {:.0f} loads, {:.0f} evictions; "
          "{:.0f} processes tracked".format(
              m.get("strata_agent_symbol_cache_bytes", 0) / 1e6,
              m.get("strata_agent_symbol_cache_peak_bytes", 0) / 1e6,
              m.get("strata_agent_symbol_cache_loads_total", 0),
              m.get("strata_agent_symbol_cache_evictions_total", 0),
              m.get("strata_agent_processes", 0)))
    print("agent unwind tables: {:.0f} files read, {:.0f} loaded, {:.0f} rows, {:.0f} evicted, "
          "{:.0f} refused, {:.0f} processes listed, {:.0f} of {:.0f} BPF walks complete, {:.0f} "
          "stack copies walked".format(
              m.get("strata_agent_unwind_files_read_total", 0),
              m.get("strata_agent_unwind_tables", 0), m.get("strata_agent_unwind_table_rows", 0),
              m.get("strata_agent_unwind_table_evictions_total", 0),
              m.get("strata_agent_unwind_tables_refused_total", 0),
              m.get("strata_agent_unwind_processes", 0),
              m.get("strata_agent_unwind_complete_samples_total", 0),
              m.get("strata_agent_unwind_dwarf_samples_total", 0),
              m.get("strata_agent_unwind_stack_copies_total", 0)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agent", default=os.path.join(SOURCE, "build-perf", "agent", "strata-agent"))
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("AGENT_BENCH_SECONDS", 60)))
    ap.add_argument("--mode", choices=("quiet", "busy", "both"), default="both")
    ap.add_argument("--no-fp-baseline", dest="fp_baseline", action="store_false",
                    help="skip the agent phase with -unwind-table-rows 0 (frame pointers only)")
    ap.add_argument("--clang", action="store_true",
                    help="busy mode also runs a clang build loop (unwind tables past the budget)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("agent_bench needs root")
    ncpu = os.cpu_count()
    modes = ("quiet", "busy") if args.mode == "both" else (args.mode,)
    with tempfile.TemporaryDirectory(prefix="agent-bench-") as work:
        load = build_load(work)
        for mode in modes:
            print_mode(mode, args.seconds, ncpu, *run_mode(mode, args, ncpu, load, work),
                       clang=args.clang)
            sys.stdout.flush()


if __name__ == "__main__":
    main()
