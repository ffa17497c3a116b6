#!/usr/bin/env python3
"""Line coverage per module from a gcov build (-DSTRATA_COVERAGE=ON) after its tests ran.

    scripts/coverage.py BUILD_DIR [--floor PERCENT] [--json FILE]

Reads every .gcda under BUILD_DIR through `gcov --json-format --stdout` (gcc's own tool, no
gcovr needed), keeps Strata's own .c files (lib/, services/, agent/, cmd/; not tests, fuzzers,
test servers, test data or generated protobuf code), and counts a line covered when any object
that compiled it ran it. Prints one row per module (lib/<dir>, services/<dir>, agent, cmd/strata)
and the total, and exits 1 when a module is under the floor (default 50 %), naming it.
"""
import argparse
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OWN = re.compile(r"^(lib/[^/]+|services/[^/]+|agent|cmd/strata)/[^/]+\.c$")
NOT_OWN = re.compile(r"(_test|_fuzz|_testserver|_testdata)\.c$")


def module_of(path):
    rel = os.path.relpath(os.path.realpath(path), ROOT)
    m = OWN.match(rel)
    if m is None or NOT_OWN.search(rel):
        return None, rel
    return m.group(1), rel


def gcov_json(gcda):
    out = subprocess.run(["gcov", "--json-format", "--stdout", os.path.basename(gcda)],
                         cwd=os.path.dirname(gcda), capture_output=True, check=False)
    if out.returncode != 0:
        return []
    docs = []
    for chunk in out.stdout.splitlines():
        chunk = chunk.strip()
        if chunk:
            try:
                docs.append(json.loads(chunk))
            except json.JSONDecodeError:
                pass
    return docs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--floor", type=float, default=50.0)
    ap.add_argument("--json")
    args = ap.parse_args()
    gcdas = []
    for d, _, files in os.walk(os.path.abspath(args.build)):
        gcdas += [os.path.join(d, f) for f in files if f.endswith(".gcda")]
    if not gcdas:
        print(f"coverage: no .gcda files under {args.build} (build with -DSTRATA_COVERAGE=ON and"
              " run the tests first)")
        return 1
    lines = {}  # rel path -> {line: covered}
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for docs in pool.map(gcov_json, gcdas):
            for doc in docs:
                cwd = doc.get("current_working_directory", "")
                for f in doc.get("files", []):
                    path = f["file"] if os.path.isabs(f["file"]) else os.path.join(cwd, f["file"])
                    module, rel = module_of(path)
                    if module is None:
                        continue
                    seen = lines.setdefault(rel, {})
                    for ln in f.get("lines", []):
                        n = ln["line_number"]
                        seen[n] = seen.get(n, False) or ln["count"] > 0
    per_module = {}
    for rel, seen in lines.items():
        module, _ = module_of(os.path.join(ROOT, rel))
        covered, total = per_module.get(module, (0, 0))
        per_module[module] = (covered + sum(seen.values()), total + len(seen))
    below = []
    print(f"{'module':<24} {'lines':>7} {'covered':>8} {'%':>6}")
    all_cov = all_total = 0
    for module in sorted(per_module):
        covered, total = per_module[module]
        pct = 100.0 * covered / total if total else 100.0
        all_cov += covered
        all_total += total
        flag = "  < floor" if pct < args.floor else ""
        print(f"{module:<24} {total:>7} {covered:>8} {pct:>5.1f}%{flag}")
        if pct < args.floor:
            below.append(f"{module} {pct:.1f}%")
    pct = 100.0 * all_cov / all_total if all_total else 0.0
    print(f"{'total':<24} {all_total:>7} {all_cov:>8} {pct:>5.1f}%")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({m: {"lines": t, "covered": c} for m, (c, t) in per_module.items()}, f,
                      indent=1, sort_keys=True)
    if below:
        print(f"coverage: under the {args.floor:.0f}% floor: {', '.join(below)}")
        return 1
    print(f"coverage: every module at or above {args.floor:.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
