#!/usr/bin/python3
"""agent_bench: the eBPF agent's cost on a busy machine, side by side with `perf record -F 19 -a -g`.

Three phases of SECONDS each (default 60) run the same load (bench/agent_bench_load.c, one
spinning thread per CPU, so every CPU is busy):
  1. the load alone (baseline work units),
  2. the load under `strata-agent` pushing every 10 s to a WriteRaw sink (Python grpcio),
  3. the load under `perf record -F 19 -a -g`.
For each profiler: CPU used, with start-up (until sampling began) reported apart from steady
state; peak RSS (VmHWM); samples captured against the periods that elapsed (19 x CPUs x time,
since every CPU is busy); and the load's slowdown against the baseline.

CPU times come from /proc/PID/task/*/schedstat (nanoseconds) for the agent, and from wait4 for
perf (whose start-up is measured apart with `perf record ... -- true`).

  sudo bench/agent_bench.py [--agent build-agent/agent/strata-agent] [--seconds 60]
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


def bench_agent(agent_bin, load, seconds, ncpu, work):
    import test_agent_lib as tl
    server, sink, port = tl.start_sink()
    log_path = os.path.join(work, "agent.log")
    with open(log_path, "w") as log:
        agent = subprocess.Popen([agent_bin, "-remote-store", f"127.0.0.1:{port}", "-http-address",
                                  "", "-window", "10s"], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while "agent started" not in open(log_path).read():
            if time.time() > deadline or agent.poll() is not None:
                raise SystemExit("agent did not start:\n" + open(log_path).read())
            time.sleep(0.05)
        startup_ns = cpu_ns(agent.pid)
        t0 = time.time_ns()
        units = run_load(load, seconds, ncpu)
        t1 = time.time_ns()
        steady_ns = cpu_ns(agent.pid) - startup_ns
        hwm = vm_hwm_kb(agent.pid)
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
            "steady_pct": steady_ns / ((t1 - t0)) * 100, "rss_mb": hwm / 1024,
            "samples": got, "periods": periods, "units": units}


def bench_perf(load, seconds, ncpu, work):
    data = os.path.join(work, "perf.data")
    start = subprocess.run(["perf", "record", "-q", "-F", "19", "-a", "-g", "-o", data + ".0",
                            "--", "true"], capture_output=True)
    t0 = time.time()
    perf = subprocess.Popen(["perf", "record", "-q", "-F", "19", "-a", "-g", "-o", data, "--",
                             "sleep", str(seconds + 1)], stderr=subprocess.DEVNULL)
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


def perf_startup_ms():
    before = os.times()
    subprocess.run(["perf", "record", "-q", "-F", "19", "-a", "-g", "-o", "/dev/null", "--",
                    "true"], capture_output=True)
    after = os.times()
    return ((after.children_user - before.children_user) +
            (after.children_system - before.children_system)) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agent", default=os.path.join(SOURCE, "build-agent", "agent", "strata-agent"))
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("AGENT_BENCH_SECONDS", 60)))
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("agent_bench needs root")
    ncpu = os.cpu_count()
    with tempfile.TemporaryDirectory(prefix="agent-bench-") as work:
        load = build_load(work)
        base = run_load(load, args.seconds, ncpu)
        a = bench_agent(args.agent, load, args.seconds, ncpu, work)
        p = bench_perf(load, args.seconds, ncpu, work)
        p_start = perf_startup_ms()
    uptime_load = open("/proc/loadavg").read().split()[0]
    print(f"agent_bench: {args.seconds:.0f} s per phase, {ncpu} CPUs busy, load average {uptime_load}")
    print(f"{'':24}{'strata-agent':>16}{'perf -F 19 -a -g':>20}")
    print(f"{'start-up CPU (ms)':24}{a['startup_cpu_ms']:>16.1f}{p_start:>20.1f}")
    print(f"{'steady CPU (ms)':24}{a['steady_cpu_ms']:>16.1f}{p['cpu_ms'] - p_start:>20.1f}")
    print(f"{'steady CPU (% of core)':24}{a['steady_pct']:>16.3f}"
          f"{(p['cpu_ms'] - p_start) / 10 / args.seconds:>20.3f}")
    print(f"{'total CPU (% of core)':24}"
          f"{(a['startup_cpu_ms'] + a['steady_cpu_ms']) / 10 / args.seconds:>16.3f}{p['pct']:>20.3f}")
    print(f"{'peak RSS (MB)':24}{a['rss_mb']:>16.1f}{p['rss_mb']:>20.1f}")
    print(f"{'samples / periods':24}{a['samples']:>9}/{a['periods']:<6.0f}"
          f"{p['samples']:>13}/{p['periods']:<6.0f}")
    print(f"{'periods sampled':24}{a['samples'] / a['periods']:>16.2%}{p['samples'] / p['periods']:>20.2%}")
    print(f"{'load slowdown':24}{1 - a['units'] / base:>16.2%}{1 - p['units'] / base:>20.2%}")
    print(f"(baseline {base} units; agent run {a['units']}, perf run {p['units']})")


if __name__ == "__main__":
    main()
