#!/usr/bin/python3
"""What off-CPU profiling costs (issue 21 item 3): a context-switch-bound load timed with the
agent off, on-CPU only, and off-CPU at several -off-cpu-threshold values, side by side.

The load is `perf bench sched pipe` (two threads ping-ponging through a pipe: every round trip is
two voluntary context switches, the worst case for a sched_switch tracepoint). Settings run in
turn, --rounds times, so drift on a shared machine touches all of them alike; the table gives the
median microseconds per round trip, the agent's CPU per second of load (utime + stime from
/proc/PID/stat) and its peak RSS (VmHWM), plus the load's own slowdown against no agent.

  sudo bench/offcpu_bench.py [--agent build-perf/agent/strata-agent] [--rounds 5] [--loops 100000]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_bench import ROOT, cpu_seconds  # noqa: E402
from ingest_cost import peak_rss_mib  # noqa: E402


def pipe_round_trip_us(loops):
    out = subprocess.run(["perf", "bench", "sched", "pipe", "-l", str(loops)], check=True,
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "usecs/op" in line:
            return float(line.split()[0])
    raise SystemExit("perf bench sched pipe printed no usecs/op")


def one_round(agent, flags, loops):
    proc = None
    if flags is not None:
        proc = subprocess.Popen([agent, "-remote-store", "127.0.0.1:1", "-http-address", "",
                                 "-log-level", "error", *flags],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(3)  # started, first symbol tables loaded
        if proc.poll() is not None:
            raise SystemExit(f"the agent exited with {proc.returncode} ({flags})")
    cpu0 = cpu_seconds(proc.pid) if proc else 0
    t0 = time.monotonic()
    us = pipe_round_trip_us(loops)
    wall = time.monotonic() - t0
    cpu = (cpu_seconds(proc.pid) - cpu0) / wall if proc else 0.0
    rss = peak_rss_mib(proc.pid) if proc else 0.0
    if proc:
        proc.terminate()
        proc.wait(timeout=60)
    return us, cpu, rss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agent", default=os.path.join(ROOT, "build-perf", "agent", "strata-agent"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--loops", type=int, default=100000)
    ap.add_argument("--thresholds", default="0.01,0.1,1")
    args = ap.parse_args()
    settings = [("no agent", None), ("on-CPU only", [])]
    settings += [(f"off-CPU {t}", ["-off-cpu-threshold", t]) for t in args.thresholds.split(",")]
    results = {name: [] for name, _ in settings}
    for _ in range(args.rounds):
        for name, flags in settings:
            results[name].append(one_round(args.agent, flags, args.loops))
    base = statistics.median(r[0] for r in results["no agent"])
    print(f"{'setting':<16} {'us/round trip':>13} {'slowdown':>9} {'agent CPU':>10} "
          f"{'agent peak RSS':>15}")
    for name, _ in settings:
        rs = results[name]
        us = statistics.median(r[0] for r in rs)
        cpu = statistics.median(r[1] for r in rs)
        rss = max(r[2] for r in rs)
        print(f"{name:<16} {us:>13.2f} {us / base - 1:>+9.1%} {cpu:>9.2%} "
              f"{rss:>12.1f} MiB" if name != "no agent" else
              f"{name:<16} {us:>13.2f} {'':>9} {'':>10} {'':>15}")


if __name__ == "__main__":
    main()
