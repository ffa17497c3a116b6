#!/usr/bin/python3
"""agent_windows: the eBPF agent on agent_bench's busy node, window by window.

agent_bench.py gives a phase's totals beside perf; this shows how the agent's cost moves in time
and what it is per new process. On the busy node (50 services, two node and one python3 process,
the gcc build loop, `--clang` adds a clang one) with every CPU spinning, it starts the agent
(pushing every 10 s to a grpcio WriteRaw sink) and every 10 s prints the agent's CPU over those
10 s (/proc/PID/task/*/schedstat), its peak RSS (VmHWM) and its unwind-table metrics (/metrics:
files read, tables and rows held, evictions, refusals). At the end: compiler runs during the run,
the agent's CPU per compiler run, and the series (processes) pushed per command name.

  sudo bench/agent_windows.py [--agent build-perf/agent/strata-agent] [--seconds 60] [--clang]
                              [-- AGENT FLAGS...]     e.g. -- -unwind-table-rows 0
"""
import argparse
import collections
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))
import agent_bench as ab  # noqa: E402


def wait_started(log_path, agent):
    deadline = time.time() + 60
    while "agent started" not in open(log_path).read():
        if time.time() > deadline or agent.poll() is not None:
            raise SystemExit("agent did not start:\n" + open(log_path).read())
        time.sleep(0.05)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agent", default=os.path.join(os.path.dirname(HERE), "build-perf", "agent",
                                                     "strata-agent"))
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--clang", action="store_true")
    ap.add_argument("flags", nargs="*", help="more agent flags (after --)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("agent_windows needs root")
    import test_agent_lib as tl
    with tempfile.TemporaryDirectory(prefix="agent-windows-") as work:
        node = ab.BusyNode(work, args.clang)
        load = ab.build_load(work)
        spin = subprocess.Popen([load, str(args.seconds + 60), str(os.cpu_count())],
                                stdout=subprocess.DEVNULL)
        try:
            time.sleep(5)  # the services started, the build loop running
            server, sink, port = tl.start_sink()
            http_port = ab.free_port()
            log_path = os.path.join(work, "agent.log")
            with open(log_path, "w") as log:
                agent = subprocess.Popen([args.agent, "-remote-store", f"127.0.0.1:{port}",
                                          "-http-address", f"127.0.0.1:{http_port}", "-window",
                                          "10s", *args.flags], stdout=log, stderr=subprocess.STDOUT)
                wait_started(log_path, agent)
                start_ns = last_ns = ab.cpu_ns(agent.pid)
                builds0 = node.builds_done()
                for w in range(args.seconds // 10):
                    time.sleep(10)
                    now_ns = ab.cpu_ns(agent.pid)
                    m = ab.agent_metrics(http_port)

                    def metric(name):
                        return m.get("strata_agent_unwind_" + name, 0)
                    print(f"{10 * (w + 1):4d} s  CPU {(now_ns - last_ns) / 1e7 / 10:.3f} % of a "
                          f"core  peak RSS {ab.vm_hwm_kb(agent.pid) / 1024:.1f} MB  files read "
                          f"{metric('files_read_total'):.0f}  tables {metric('tables'):.0f}  rows "
                          f"{metric('table_rows'):.0f}  evicted "
                          f"{metric('table_evictions_total'):.0f}  refused "
                          f"{metric('tables_refused_total'):.0f}  symbol loads "
                          f"{m.get('strata_agent_symbol_cache_loads_total', 0):.0f}  symbol "
                          f"evictions {m.get('strata_agent_symbol_cache_evictions_total', 0):.0f}",
                          flush=True)
                    last_ns = now_ns
                builds = node.builds_done() - builds0
                total_ms = (ab.cpu_ns(agent.pid) - start_ns) / 1e6
                agent.send_signal(signal.SIGINT)
                agent.wait(timeout=60)
            server.stop(0)
            series = collections.Counter(labels.get("comm", "?") for labels, _ in sink.series())
            print(f"{builds} compiler runs; agent CPU {total_ms:.0f} ms after start-up, "
                  f"{total_ms / max(builds, 1):.2f} ms per compiler run")
            print("series pushed per command:",
                  ", ".join(f"{c} {n}" for c, n in series.most_common(10)))
        finally:
            node.stop()
            spin.kill()
            spin.wait()


if __name__ == "__main__":
    main()
