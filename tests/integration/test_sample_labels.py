#!/usr/bin/python3
"""pprof sample labels end to end (issue 23), with a real Go program.

tests/golabels runs two kinds of request in one goroutine, each inside
pprof.Do(ctx, pprof.Labels("endpoint", ...)): a /checkout request does three times the work of a
/browse one (main.checkout calls fibonacci three times, main.browse once). `strata all` scrapes its
CPU profiles, and:

- grouping by the label (gRPC group_by `labels.endpoint`, JSON `group_by=labels.endpoint`) puts
  each endpoint's stacks under an `endpoint="/checkout"` / `endpoint="/browse"` frame, /checkout
  with about three quarters of their CPU; samples without the label (the HTTP server, the
  runtime) stay under the root, as in Parca;
- a selector on the label (`{endpoint="/checkout"}`) gives only that endpoint's stacks (main.checkout,
  never main.browse) and exactly the CPU its group has, in merges and in QueryRange;
- the PPROF export carries the labels on its samples: `go tool pprof -tags` shows both endpoints
  with the same split, and the samples decoded independently (Python protobuf) have them;
- the Labels and Values APIs list the label and its two values, and `strata query` groups and
  filters by it too.
"""
import os
import re
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_testlib as lib  # noqa: E402
import test_query_common as qc  # noqa: E402

import grpc  # noqa: E402
from google.protobuf import timestamp_pb2  # noqa: E402
from parca.query.v1alpha1 import query_pb2 as qpb  # noqa: E402
from parca.query.v1alpha1 import query_pb2_grpc as q_grpc  # noqa: E402
from parca.scrape.v1alpha1 import scrape_pb2 as spb  # noqa: E402
from parca.scrape.v1alpha1 import scrape_pb2_grpc as s_grpc  # noqa: E402

NS = 10**9
CPU = "process_cpu:samples:count:cpu:nanoseconds:delta"
CHECKOUT = 'endpoint="/checkout"'
BROWSE = 'endpoint="/browse"'
PROFILES = 5   # scraped CPU profiles before the program stops
# /checkout does 3 units of work for every unit /browse does: its share of the labelled CPU is
# 0.75; CPU sampling at 100 Hz over the scraped seconds leaves a few percent of noise.
SHARE_LOW, SHARE_HIGH = 0.62, 0.88


def ts(ns):
    t = timestamp_pb2.Timestamp()
    t.seconds, t.nanos = divmod(ns, NS)
    return t


def go_env(work):
    return dict(os.environ, HOME=work, GOFLAGS="", GOPROXY="off", GOTOOLCHAIN="local",
                PPROF_TMPDIR=work, GOCACHE=os.path.join(work, "gocache"))


def metric(base, name):
    _, body = lib.http_get(base + "/metrics")
    for line in body.decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def flamegraph_nodes(fg):
    """Yields (path of names from the root, node) for every node."""
    def walk(node, path):
        yield path, node
        for c in node.children:
            yield from walk(c, path + (c.meta.function.name,))
    yield from walk(fg.root, ())


class SampleLabelsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.work = lib.make_workdir("sample-labels")
        cls.target = None
        cls.strata = None
        cls.channel = None
        try:
            binary = os.path.join(cls.work, "golabels")
            subprocess.run([os.path.join(lib.SOURCE_DIR, "tests", "golabels", "build.sh"), binary],
                           check=True, timeout=300)
            os.makedirs(os.path.join(cls.work, "target"))
            cls.target = lib.GoTarget(os.path.join(cls.work, "target"))
            cls.target.binary = binary
            cls.target.start()
            cls.grpc_port, cls.http_port = lib.free_port(), lib.free_port()
            cls.base = f"http://127.0.0.1:{cls.http_port}"
            config = f"""
server:
  grpc_listen_address: 127.0.0.1:{cls.grpc_port}
  http_listen_address: 127.0.0.1:{cls.http_port}
bucket:
  type: FILESYSTEM
  config:
    directory: {os.path.join(cls.work, "data")}
ingester:
  flush_interval: 100ms
querier:
  sync_interval: 100ms
scrape_configs:
  - job_name: golabels
    scrape_interval: 2s
    static_configs:
      - targets: ['{cls.target.address}']
    profiling_config:
      pprof_config:
        memory: {{enabled: false}}
        block: {{enabled: false}}
        goroutine: {{enabled: false}}
        mutex: {{enabled: false}}
"""
            cls.window_start = time.time_ns() - 60 * NS
            cls.strata = lib.Strata(cls.work, "all", config)
            cls.strata.start(ready_url=cls.base + "/ready")
            cls.channel = grpc.insecure_channel(f"127.0.0.1:{cls.grpc_port}")
            cls.q = q_grpc.QueryServiceStub(cls.channel)
            cls.collect()
        except BaseException:
            if cls.strata is not None and cls.strata.proc is not None:
                print(f"--- strata all ---\n{cls.strata.logs()[-5000:]}", file=sys.stderr)
            cls.tearDownClass()
            raise

    @classmethod
    def collect(cls):
        def profiles():
            j = qc.http_json(cls.base, "/api/v1/query",
                             {"query": CPU, "start": qc.ms(cls.window_start), "end": "now",
                              "report": "top", "max_nodes": "1"})
            return j["profiles"]

        lib.wait_for(lambda: profiles() >= PROFILES, timeout=120, interval=0.5,
                     what=f"{PROFILES} CPU profiles of golabels")
        # Stop the program so that the data stops changing: the next scrape fails, and every
        # profile scraped before is acknowledged (durable and visible to the querier).
        killed = time.time_ns()
        cls.target.stop()

        def target_down():
            with grpc.insecure_channel(f"127.0.0.1:{cls.grpc_port}") as ch:
                r = s_grpc.ScrapeServiceStub(ch).Targets(spb.TargetsRequest(), timeout=10)
            ts_ = r.targets["golabels"].targets
            return len(ts_) == 1 and ts_[0].health == spb.Target.HEALTH_BAD and \
                ts_[0].last_scrape.ToNanoseconds() > killed
        lib.wait_for(target_down, timeout=30, what="the target to fail a scrape after the stop")
        lib.wait_for(lambda: metric(cls.base, "strata_scraper_push_enqueued_series_total") ==
                     metric(cls.base, "strata_scraper_push_acknowledged_series_total"),
                     timeout=30, what="every scraped profile acknowledged")
        cls.window_end = time.time_ns() + NS

    @classmethod
    def tearDownClass(cls):
        if cls.channel is not None:
            cls.channel.close()
        if cls.target is not None:
            cls.target.stop()
        rc = 0
        if cls.strata is not None and cls.strata.proc is not None:
            rc = cls.strata.stop()
            if rc != 0:
                print(cls.strata.logs()[-5000:], file=sys.stderr)
        lib.remove_workdir(cls.work)
        assert rc == 0, f"strata all exited with {rc}"

    # ---- helpers ----

    def query(self, query, report, group_by=None):
        req = qpb.QueryRequest(mode=qpb.QueryRequest.MODE_MERGE,
                               merge=qpb.MergeProfile(query=query, start=ts(self.window_start),
                                                      end=ts(self.window_end)),
                               report_type=report)
        if group_by is not None:
            req.group_by.fields.extend(group_by)
        return self.q.Query(req, timeout=60)

    def grouped(self):
        """{label frame name: cumulative} of the root's children grouped by endpoint, and the
        flame graph."""
        r = self.query(CPU, qpb.QueryRequest.REPORT_TYPE_FLAMEGRAPH_TABLE, ["labels.endpoint"])
        return {c.meta.function.name: c.cumulative for c in r.flamegraph.root.children}, r

    def functions(self, fg):
        return {name for path, _ in flamegraph_nodes(fg) for name in path}

    # ---- the tests ----

    def test_group_by_label_gives_each_endpoint_its_share(self):
        roots, r = self.grouped()
        self.assertIn(CHECKOUT, roots, sorted(roots))
        self.assertIn(BROWSE, roots, sorted(roots))
        checkout, browse = roots[CHECKOUT], roots[BROWSE]
        share = checkout / (checkout + browse)
        self.assertTrue(SHARE_LOW <= share <= SHARE_HIGH, (checkout, browse, share))
        # Each endpoint's frame holds its own code: main.checkout under /checkout only.
        paths = {path for path, _ in flamegraph_nodes(r.flamegraph)}
        under = {p[0] for p in paths if p and p[-1] == "main.checkout"}
        self.assertEqual(under, {CHECKOUT})
        under = {p[0] for p in paths if p and p[-1] == "main.browse"}
        self.assertEqual(under, {BROWSE})
        # The labelled work is most of the program's CPU; the rest is under the root.
        self.assertGreater(checkout + browse, r.flamegraph.root.cumulative // 2)
        self.assertEqual(sum(roots.values()), r.flamegraph.root.cumulative)
        # The JSON API groups the same way: the table lists the label frames with their shares.
        j = qc.http_json(self.base, "/api/v1/query",
                         {"query": CPU, "start": qc.ms(self.window_start),
                          "end": qc.ms(self.window_end), "report": "table",
                          "group_by": "labels.endpoint"})
        rows = {row["name"]: row["cumulative"] for row in j["table"]["rows"]}
        self.assertEqual(rows.get(CHECKOUT), checkout)
        self.assertEqual(rows.get(BROWSE), browse)

    def test_filter_by_label_gives_only_its_stacks(self):
        roots, _ = self.grouped()
        r = self.query(CPU + '{endpoint="/checkout"}',
                       qpb.QueryRequest.REPORT_TYPE_FLAMEGRAPH_TABLE)
        names = self.functions(r.flamegraph)
        self.assertIn("main.checkout", names)
        self.assertNotIn("main.browse", names)
        self.assertEqual(r.flamegraph.root.cumulative, roots[CHECKOUT])
        r = self.query(CPU + '{endpoint="/browse"}', qpb.QueryRequest.REPORT_TYPE_TOP)
        names = {n.meta.function.name for n in r.top.list}
        self.assertIn("main.browse", names)
        self.assertNotIn("main.checkout", names)
        self.assertEqual(r.total, roots[BROWSE])
        # The metrics graph of one endpoint sums only its samples.
        j = qc.http_json(self.base, "/api/v1/query_range",
                         {"query": CPU + '{endpoint="/checkout"}', "start": qc.ms(self.window_start),
                          "end": qc.ms(self.window_end), "step": "3600s"})
        total = sum(p["value"] for s in j["series"] for p in s["samples"])
        self.assertEqual(total, roots[CHECKOUT])
        # A label value nobody has: nothing to show.
        with self.assertRaises(grpc.RpcError) as e:
            self.query(CPU + '{endpoint="/nowhere"}', qpb.QueryRequest.REPORT_TYPE_TOP)
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_pprof_export_carries_the_labels(self):
        roots, _ = self.grouped()
        r = self.query(CPU, qpb.QueryRequest.REPORT_TYPE_PPROF)
        path = os.path.join(self.work, "export.pb.gz")
        with open(path, "wb") as f:
            f.write(r.pprof)
        out = subprocess.run(["go", "tool", "pprof", "-tags", path], env=go_env(self.work),
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("endpoint:", out.stdout)
        # "   3.48s (74.36%): /checkout": the split go tool pprof computes from the labels
        shares = {m.group(2): float(m.group(1)) / 100
                  for m in re.finditer(r"\(([\d.]+)%\): (/\w+)", out.stdout)}
        self.assertEqual(set(shares), {"/checkout", "/browse"}, out.stdout)
        want = roots[CHECKOUT] / (roots[CHECKOUT] + roots[BROWSE])
        self.assertAlmostEqual(shares["/checkout"], want, delta=0.001)
        # Independently decoded: per endpoint the exported samples sum to the grouped values.
        p = lib.decode_pprof(r.pprof)
        strings = p.string_table
        sums = {}
        for s in p.sample:
            labels = {strings[label.key]: strings[label.str] for label in s.label}
            sums[labels.get("endpoint")] = sums.get(labels.get("endpoint"), 0) + s.value[0]
        self.assertEqual(sums.get("/checkout"), roots[CHECKOUT])
        self.assertEqual(sums.get("/browse"), roots[BROWSE])
        self.assertEqual(sum(sums.values()), r.total)

    def test_cli_groups_and_filters_by_label(self):
        def cli(*args):
            out = subprocess.run([lib.BINARY, "query", *args, "--address",
                                  f"127.0.0.1:{self.grpc_port}", "--start",
                                  qc.ms(self.window_start), "--end", qc.ms(self.window_end)],
                                 capture_output=True, text=True, timeout=60)
            self.assertEqual(out.returncode, 0, out.stderr)
            return out.stdout
        text = cli("merge", CPU + '{endpoint="/browse"}', "--top", "50")
        self.assertIn("main.browse", text)
        self.assertNotIn("main.checkout", text)
        text = cli("merge", CPU, "--group-by", "labels.endpoint", "--top", "200")
        self.assertIn(CHECKOUT, text)
        self.assertIn(BROWSE, text)

    def test_labels_and_values_list_the_sample_label(self):
        j = qc.http_json(self.base, "/api/v1/labels",
                         {"start": qc.ms(self.window_start), "end": qc.ms(self.window_end)})
        self.assertIn("endpoint", j["label_names"])
        self.assertIn("job", j["label_names"])
        j = qc.http_json(self.base, "/api/v1/labels/endpoint/values",
                         {"start": qc.ms(self.window_start), "end": qc.ms(self.window_end)})
        self.assertEqual(j["label_values"], ["/browse", "/checkout"])
        r = self.q.Values(qpb.ValuesRequest(label_name="endpoint", match=[CPU],
                                            start=ts(self.window_start), end=ts(self.window_end)),
                          timeout=30)
        self.assertEqual(sorted(r.label_values), ["/browse", "/checkout"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
