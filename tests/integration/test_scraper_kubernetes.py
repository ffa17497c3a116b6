#!/usr/bin/python3
"""kubernetes_sd_configs end to end: `strata all` discovers pods from a fake API server
(tests/kubernetes/fake_apiserver.py, pod list and watch in the official JSON shapes, bearer token
checked) whose podIP is 127.0.0.1 and whose container ports point at two real Go programs serving
net/http/pprof (tests/gotarget). relabel_configs keep pods by annotation and port name and map pod
labels; pods added, relabeled and removed show up in and disappear from ScrapeService/Targets and
GET /api/v1/targets, and their profiles arrive with the mapped labels.
"""
import json
import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_testlib as lib  # noqa: E402

lib.load_stubs()
import grpc  # noqa: E402
from google.protobuf import timestamp_pb2  # noqa: E402
from parca.query.v1alpha1 import query_pb2 as qpb  # noqa: E402
from parca.query.v1alpha1 import query_pb2_grpc as q_grpc  # noqa: E402
from parca.scrape.v1alpha1 import scrape_pb2 as spb  # noqa: E402
from parca.scrape.v1alpha1 import scrape_pb2_grpc as s_grpc  # noqa: E402

JOB = "kubernetes-pods"
MEMORY = "memory:inuse_space:bytes:space:bytes"


class FakeApiServer:
    def __init__(self, token):
        script = os.path.join(lib.SOURCE_DIR, "tests", "kubernetes", "fake_apiserver.py")
        self.proc = subprocess.Popen(["/usr/bin/python3", script, "--token", token],
                                     stdout=subprocess.PIPE, text=True)
        api, control = self.proc.stdout.readline().split()
        self.url = f"http://127.0.0.1:{api}"
        self.control = f"http://127.0.0.1:{control}"

    def post(self, path, obj):
        import urllib.request
        req = urllib.request.Request(self.control + path, data=json.dumps(obj).encode(),
                                     method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200

    def requests(self):
        return json.loads(lib.http_get(self.control + "/requests")[1])

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


def pod(name, port, app, scrape=True, namespace="shop"):
    annotations = {"strata.dev/scrape": "true"} if scrape else {}
    return {
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"app": app, "pod-template-hash": "7f9c"},
                     "annotations": annotations,
                     "ownerReferences": [{"kind": "ReplicaSet", "name": app + "-7f9c",
                                          "controller": True}]},
        "spec": {"nodeName": "node-1", "containers": [
            {"name": "app", "image": "strata/gotarget:test", "ports": [
                {"name": "http", "containerPort": 1, "protocol": "TCP"},
                {"name": "pprof", "containerPort": int(port), "protocol": "TCP"}]},
            {"name": "sidecar", "image": "envoy:1"}]},
        "status": {"phase": "Running", "podIP": "127.0.0.1", "hostIP": "127.0.0.1",
                   "conditions": [{"type": "Ready", "status": "True"}],
                   "containerStatuses": [{"name": "app", "containerID": "containerd://aa"},
                                         {"name": "sidecar", "containerID": "containerd://bb"}]},
    }


def labels_of(label_set):
    return {l.name: l.value for l in label_set.labels}


class KubernetesScrapeTest(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        cls.work = lib.make_workdir("scraper-kubernetes")
        cls.go1 = lib.GoTarget(cls.work).start()
        cls.go2 = lib.GoTarget(cls.work).start()
        cls.port1 = cls.go1.address.rsplit(":", 1)[1]
        cls.port2 = cls.go2.address.rsplit(":", 1)[1]
        cls.api = FakeApiServer("k8s-token")
        cls.api.post("/apply", pod("api-1", cls.port1, "api"))
        cls.api.post("/apply", pod("quiet", cls.port2, "api", scrape=False))
        cls.api.post("/apply", pod("elsewhere", cls.port2, "api", namespace="other"))
        token_file = os.path.join(cls.work, "token")
        with open(token_file, "w") as f:
            f.write("k8s-token\n")
        cls.grpc_port, cls.http_port = lib.free_port(), lib.free_port()
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
  sync_interval: 200ms
scrape_configs:
  - job_name: {JOB}
    scrape_interval: 1s
    kubernetes_sd_configs:
      - role: pod
        api_server: {cls.api.url}
        bearer_token_file: {token_file}
        namespaces: {{names: [shop]}}
    relabel_configs:
      - source_labels: [__meta_kubernetes_pod_annotation_strata_dev_scrape]
        action: keep
        regex: "true"
      - source_labels: [__meta_kubernetes_pod_container_port_name]
        action: keep
        regex: pprof
      - action: labelmap
        regex: __meta_kubernetes_pod_label_(.+)
      - source_labels: [__meta_kubernetes_namespace]
        target_label: namespace
      - source_labels: [__meta_kubernetes_pod_name]
        target_label: pod
      - source_labels: [__meta_kubernetes_pod_controller_name]
        target_label: controller
    profiling_config:
      pprof_config:
        block: {{enabled: false}}
        goroutine: {{enabled: false}}
        mutex: {{enabled: false}}
        process_cpu: {{enabled: false}}
"""
        cls.strata = lib.Strata(cls.work, "all", config)
        cls.strata.start(ready_url=f"http://127.0.0.1:{cls.http_port}/ready")

    @classmethod
    def tearDownClass(cls):
        cls.strata.stop()
        cls.api.stop()
        cls.go1.stop()
        cls.go2.stop()
        lib.remove_workdir(cls.work)

    def targets(self, state):
        with grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}") as ch:
            resp = s_grpc.ScrapeServiceStub(ch).Targets(spb.TargetsRequest(state=state),
                                                         timeout=10)
        return list(resp.targets[JOB].targets) if JOB in resp.targets else []

    def active_pods(self):
        return sorted(labels_of(t.labels).get("pod") for t in self.targets(spb.TargetsRequest.STATE_ACTIVE))

    def pods_with_profiles(self, since_ns):
        start, end = timestamp_pb2.Timestamp(), timestamp_pb2.Timestamp()
        start.FromNanoseconds(since_ns)
        end.FromNanoseconds(time.time_ns() + 10**9)
        with grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}") as ch:
            values = q_grpc.QueryServiceStub(ch).Values(qpb.ValuesRequest(
                label_name="pod", match=[f'{MEMORY}{{job="{JOB}", namespace="shop", app="api"}}'],
                start=start, end=end), timeout=10)
        return set(values.label_values)

    def test_pods_added_relabeled_removed(self):
        started = time.time_ns()
        # Discovered, relabeled: only api-1's pprof port of the annotated pods in namespace shop.
        lib.wait_for(lambda: self.active_pods() == ["api-1"], timeout=30, what="api-1 active")
        (t,) = self.targets(spb.TargetsRequest.STATE_ACTIVE)
        labels = labels_of(t.labels)
        self.assertEqual(labels["instance"], self.go1.address)
        self.assertEqual(labels["namespace"], "shop")
        self.assertEqual(labels["app"], "api")
        self.assertEqual(labels["pod_template_hash"], "7f9c")
        self.assertEqual(labels["controller"], "api-7f9c")
        self.assertEqual(labels["job"], JOB)
        self.assertFalse([k for k in labels if k.startswith("__meta_")])
        discovered = labels_of(t.discovered_labels)
        self.assertEqual(discovered["__address__"], self.go1.address)
        self.assertEqual(discovered["__meta_kubernetes_pod_container_name"], "app")
        self.assertEqual(discovered["__meta_kubernetes_pod_container_port_number"], self.port1)
        self.assertEqual(discovered["__meta_kubernetes_pod_container_id"], "containerd://aa")
        self.assertEqual(discovered["__meta_kubernetes_pod_ready"], "true")
        self.assertEqual(discovered["__meta_kubernetes_pod_annotationpresent_strata_dev_scrape"],
                         "true")
        self.assertTrue(t.url.endswith(f"{self.go1.address}/debug/pprof/allocs"), t.url)
        # The other containers and ports, and the unannotated pod, are dropped targets.
        dropped = self.targets(spb.TargetsRequest.STATE_DROPPED)
        dropped_pods = sorted({labels_of(d.discovered_labels)["__meta_kubernetes_pod_name"]
                               for d in dropped})
        self.assertEqual(dropped_pods, ["api-1", "quiet"])
        # Its profiles arrive with the mapped labels.
        lib.wait_for(lambda: self.pods_with_profiles(started) == {"api-1"}, timeout=60,
                     what="api-1's memory profiles")

        # Added: a second pod on the other Go program; relabeled: the quiet pod is annotated.
        self.api.post("/apply", pod("api-2", self.port2, "api"))
        lib.wait_for(lambda: self.active_pods() == ["api-1", "api-2"], timeout=30,
                     what="api-2 active")
        lib.wait_for(lambda: self.pods_with_profiles(started) == {"api-1", "api-2"}, timeout=60,
                     what="api-2's memory profiles")
        self.api.post("/apply", pod("quiet", self.port2, "api", scrape=True))
        lib.wait_for(lambda: self.active_pods() == ["api-1", "api-2", "quiet"], timeout=30,
                     what="the annotated pod active")
        # The annotation removed again: dropped.
        self.api.post("/apply", pod("quiet", self.port2, "api", scrape=False))
        lib.wait_for(lambda: self.active_pods() == ["api-1", "api-2"], timeout=30,
                     what="the unannotated pod dropped")

        # Removed: deleted, and evicted (no podIP any more).
        self.api.post("/delete", {"namespace": "shop", "name": "api-1"})
        evicted = pod("api-2", self.port2, "api")
        evicted["status"]["podIP"] = ""
        evicted["status"]["phase"] = "Failed"
        self.api.post("/apply", evicted)
        lib.wait_for(lambda: self.active_pods() == [], timeout=30, what="no active targets")
        dropped = self.targets(spb.TargetsRequest.STATE_DROPPED)
        self.assertEqual(sorted({labels_of(d.discovered_labels)["__meta_kubernetes_pod_name"]
                                 for d in dropped}), ["quiet"])

        # The same through the JSON the UI reads, and the API server saw the token.
        _, body = lib.http_get(f"http://127.0.0.1:{self.http_port}/api/v1/targets?state=active")
        doc = json.loads(body)
        self.assertEqual(doc["targets"].get(JOB, {}).get("targets", []), [])
        reqs = self.api.requests()
        self.assertTrue(reqs)
        self.assertEqual({r["authorization"] for r in reqs}, {"Bearer k8s-token"})
        self.assertEqual({r["path"] for r in reqs}, {"/api/v1/namespaces/shop/pods"})
        self.assertNotIn("kubernetes_sd error", self.strata.logs())


class KubernetesConfigErrorsTest(unittest.TestCase):
    """-check-config reports kubernetes_sd_configs mistakes with file and line."""

    def test_check_config(self):
        work = lib.make_workdir("scraper-kubernetes-check")
        try:
            for body, message in [
                ("role: service", "role: role \"service\" is not supported (only pod)"),
                ("role: pod\n        namespace: [a]", "unknown key \"namespace\""),
                ("role: pod\n        api_server: http://a\n        kubeconfig_file: k",
                 "api_server and kubeconfig_file exclude each other"),
            ]:
                config = f"""
bucket:
  type: FILESYSTEM
  config: {{directory: {work}}}
scrape_configs:
  - job_name: k
    kubernetes_sd_configs:
      - {body}
"""
                path = os.path.join(work, "strata.yaml")
                with open(path, "w") as f:
                    f.write(config)
                r = subprocess.run([lib.BINARY, "scraper", "-config", path, "-check-config"],
                                   capture_output=True, text=True, timeout=30)
                self.assertNotEqual(r.returncode, 0)
                out = (r.stdout + r.stderr).replace("\\\"", "\"")  # logfmt quoting
                self.assertIn(message, out)
                self.assertRegex(out, r"strata\.yaml:\d+:\d+: scrape_configs\[0\]\."
                                      r"kubernetes_sd_configs\[0\]")
        finally:
            lib.remove_workdir(work)


if __name__ == "__main__":
    unittest.main(verbosity=2)
