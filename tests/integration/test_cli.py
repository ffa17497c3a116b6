#!/usr/bin/python3
"""`strata query`, the command-line client, table-driven (issue 22 item 5): each row runs the real
binary against `strata all` holding the shared query dataset (test_query_common) and states the
exit code and what stdout or stderr must say, down to values the Python model gives. Covers every
subcommand, the -o pprof export, and the refusals (bad selector, time, flag, subcommand, missing
argument, unreachable server) with their codes: 0 answered, 1 the request failed, 2 usage.
"""
import gzip
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_testlib as lib  # noqa: E402
import test_query_common as qc  # noqa: E402

from parca.profilestore.v1alpha1 import profilestore_pb2_grpc as ps_grpc  # noqa: E402
from perftools.profiles import profile_pb2  # noqa: E402

TENANT = "cli"
START = str((qc.T0_S - 60) * 1000)
END = str((qc.T0_S + 600) * 1000)
WINDOW = ["--start", START, "--end", END]
API = qc.CPU_NANOS + '{job="api"}'


def model_total(type_name, pred):
    return sum(qc.merge_stacks(qc.select(type_name, pred)).values())


API_NS = model_total(qc.CPU_NANOS, lambda ls: ls["job"] == "api")


class CliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.local = lib.LocalStrata("cli")
        store = ps_grpc.ProfileStoreServiceStub(cls.local.channel)
        for req in qc.dataset_requests():
            store.WriteRaw(req, metadata=[("x-scope-orgid", TENANT)], timeout=60)
        cls.tmp = tempfile.mkdtemp(prefix="strata-cli-")

    @classmethod
    def tearDownClass(cls):
        cls.local.close()

    def run_cli(self, args, address=None):
        common = ["--address", address or self.local.grpc_address, "--tenant", TENANT]
        return subprocess.run([lib.BINARY, "query", *args, *common], capture_output=True,
                              text=True, timeout=120)

    def test_table(self):
        # (args, exit code, exact stdout or None, substrings of stdout, substrings of stderr)
        rows = [
            (["types"], 0, "\n".join(qc.ALL_TYPES) + "\n", [], []),
            (["labels"], 0, "instance\njob\npod\nqueue\n", [], []),
            (["labels", "--type", qc.MEM_SPACE], 0, "instance\njob\npod\n", [], []),
            (["values", "job"], 0, "api\nworker\n", [], []),
            (["values", "pod", "--match", '{job="api"}'], 0, "api-1\napi-2\n", [], []),
            (["range", API, *WINDOW, "--step", "60s", "--sum-by", "pod"], 0, None,
             ['{pod="api-1"} cpu/nanoseconds',
              f"1700000400000  value={(10 + 5 + 20 + 3 + 1 + 7) * qc.CPU_NS_PER_SAMPLE}",
              f"1700000460000  value={(4 + 6) * qc.CPU_NS_PER_SAMPLE}",
              '{pod="api-2"} cpu/nanoseconds',
              f"1700000400000  value={(1 + 2 + 8) * qc.CPU_NS_PER_SAMPLE}"], []),
            (["merge", API, *WINDOW, "--top", "3"], 0, None,
             [f"total {API_NS / 1e9:.2f}s (nanoseconds)", "app.parse", "app.encode",
              "libc.memcpy"], []),
            (["diff", qc.CPU_NANOS + '{pod="api-2"}', qc.CPU_NANOS + '{pod="api-1"}',
              "--start-a", START, "--end-a", END, "--start-b", START, "--end-b", END,
              "--absolute", "--top", "2"], 0, None, ["diff  function", "app.parse"], []),
            (["merge", "{"], 1, "", [], ["INVALID_ARGUMENT", "column 2"]),
            (["merge", qc.CPU_NANOS, "--start", "yesterday"], 1, "", [],
             ['start: "yesterday" is not a time']),
            (["merge", qc.CPU_NANOS + '{job="nobody"}', *WINDOW], 1, "", [], ["NOT_FOUND"]),
            (["values"], 1, "", [], ["values needs a label NAME"]),
            (["bogus"], 2, "", [], ['unknown subcommand "bogus"']),
            (["types", "--nope"], 2, "", [], ["unknown flag --nope"]),
            (["merge", API, *WINDOW, "--top", "three"], 2, "", [],
             ['--top: "three" is not a count']),
        ]
        for args, code, stdout, out_has, err_has in rows:
            with self.subTest(args=args):
                r = self.run_cli(args)
                self.assertEqual(r.returncode, code, r.stderr)
                if stdout is not None:
                    self.assertEqual(r.stdout, stdout)
                for words in out_has:
                    self.assertIn(words, r.stdout)
                for words in err_has:
                    self.assertIn(words, r.stderr)

    def test_top_order_and_values(self):
        """The top table's rows, in order, against the model's flat values."""
        r = self.run_cli(["merge", API, *WINDOW, "--top", "10"])
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = [line.split() for line in r.stdout.splitlines()[2:]]
        flat = {}
        for stack, v in qc.merge_stacks(qc.select(qc.CPU_NANOS,
                                                  lambda ls: ls["job"] == "api")).items():
            flat[stack[-1]] = flat.get(stack[-1], 0) + v
        want = sorted(((v, f) for f, v in flat.items() if v), key=lambda x: (-x[0], x[1]))
        self.assertEqual([row[-1] for row in rows[:len(want)]], [f for _, f in want])
        self.assertEqual([row[0] for row in rows[:len(want)]], [f"{v / 1e9:.2f}s" for v, _ in want])

    def test_pprof_export(self):
        out = os.path.join(self.tmp, "api.pb.gz")
        r = self.run_cli(["merge", API, *WINDOW, "-o", out])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out, "rb") as f:
            p = profile_pb2.Profile()
            p.ParseFromString(gzip.decompress(f.read()))
        self.assertEqual(sum(s.value[0] for s in p.sample), API_NS)
        names = {p.string_table[fn.name] for fn in p.function}
        self.assertTrue({"main", "app.handle", "app.parse", "libc.memcpy"} <= names, names)

    def test_unreachable_server(self):
        r = self.run_cli(["types"], address=f"127.0.0.1:{lib.free_port()}")
        self.assertEqual(r.returncode, 1)
        self.assertIn("UNAVAILABLE", r.stderr)


if __name__ == "__main__":
    unittest.main()
