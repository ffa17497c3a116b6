#!/usr/bin/python3
"""Runs every C unit test of a build directory under valgrind (memcheck).

The tests come from ctest (label "unit", `ctest --show-only=json-v1`), each with its own working
directory and environment; Python-driven tests are skipped (they exercise other processes, which
the sanitizer build covers). A test fails on any memcheck error or on a definite or indirect leak
(valgrind's exit code 99), or on its own failure; its log is printed without the "possibly
lost" records. scripts/valgrind.supp suppresses what is not ours, each entry saying why.

    scripts/valgrind-unit.py BUILD_DIR [-j N]
"""
import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import time

SUPPRESSIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "valgrind.supp")
VALGRIND = ["valgrind", "-q", "--error-exitcode=99", "--leak-check=full",
            "--errors-for-leak-kinds=definite,indirect", "--track-fds=no",
            f"--suppressions={SUPPRESSIONS}"]


def unit_tests(build):
    out = subprocess.run(["ctest", "-L", "unit", "--show-only=json-v1"], cwd=build,
                         capture_output=True, text=True, check=True).stdout
    for test in json.loads(out)["tests"]:
        command = test.get("command") or []
        if not command or os.path.basename(command[0]).startswith("python"):
            continue
        props = {p["name"]: p["value"] for p in test.get("properties", [])}
        env = dict(os.environ)
        for item in props.get("ENVIRONMENT", []):
            key, _, value = item.partition("=")
            env[key] = value
        yield test["name"], command, props.get("WORKING_DIRECTORY", build), env


def run(test):
    name, command, cwd, env = test
    start = time.monotonic()
    try:
        p = subprocess.run(VALGRIND + command, cwd=cwd, env=env, capture_output=True, text=True,
                           timeout=1200)
        rc, log = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc, log = -1, f"timed out after {e.timeout} s"
    return name, rc, time.monotonic() - start, log


def print_errors(log, limit=300):
    """Prints the output without the "possibly lost" records (valgrind -q prints them, but they
    are not errors here, and they fill reports where threads were alive at exit), so the records
    that failed the test and the test's own output show."""
    kept, record = [], []
    for line in log.splitlines() + ["==0== "]:
        if not line.startswith("=="):
            kept.append(line)  # the test's own output
            continue
        record.append(line)
        if re.fullmatch(r"==\d+== ?", line):
            if not any("possibly lost in loss record" in r for r in record):
                kept.extend(record)
            record = []
    print("\n".join(kept[:limit]))
    if len(kept) > limit:
        print(f"... ({len(kept) - limit} more lines)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("-j", type=int, default=2)
    args = ap.parse_args()
    tests = list(unit_tests(os.path.abspath(args.build)))
    if not tests:
        print("valgrind: no unit tests found", file=sys.stderr)
        return 1
    failed = []
    with concurrent.futures.ThreadPoolExecutor(args.j) as pool:
        for name, rc, seconds, log in pool.map(run, tests):
            status = "ok" if rc == 0 else ("memcheck errors" if rc == 99 else f"exit {rc}")
            print(f"valgrind {name:24s} {status} ({seconds:.0f} s)", flush=True)
            if rc != 0:
                failed.append(name)
                print_errors(log)
    print(f"valgrind: {len(tests) - len(failed)}/{len(tests)} unit tests clean")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
