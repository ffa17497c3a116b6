#!/usr/bin/python3
"""The Helm chart (deploy/helm/strata), validated without helm or a cluster.

The chart is rendered by tests/helm/render (Go text/template + sprig, Helm's extra functions) for
the default values and each file in deploy/helm/strata/ci/, and every rendering must
  - pass yamllint (tests/helm/yamllint.yaml, strict);
  - have the structure the services need: images and tags, container ports equal to the listen
    ports in each service's config, Services whose ports reach them, probes on /ready, RBAC of
    exactly get/list/watch on pods and nodes, the agent's capabilities, mounts and flags (each flag
    one `strata agent -h` documents), one Recreate compactor, scrapers sharing targets by hashmod;
  - hold in its Secret a Thanos objstore bucket equal to the `bucket:` section of every service;
  - give configs that `strata <service> -config F -check-config` accepts, so a chart that would
    crash-loop fails here. Services the binary does not have yet are listed, not failed.
Environment (set by ctest): STRATA_BINARY, STRATA_SOURCE_DIR, STRATA_WORK_DIR.
"""
import glob
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

import yaml

SOURCE_DIR = os.environ.get("STRATA_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
BINARY = os.environ.get("STRATA_BINARY", os.path.join(SOURCE_DIR, "build", "cmd", "strata", "strata"))
WORK_DIR = os.environ.get("STRATA_WORK_DIR") or os.path.join(tempfile.gettempdir(), "strata-helm")
CHART = os.path.join(SOURCE_DIR, "deploy", "helm", "strata")
YAMLLINT_CONFIG = os.path.join(SOURCE_DIR, "tests", "helm", "yamllint.yaml")
RENDERER = os.path.join(WORK_DIR, "helm-render")

# name -> (values files under ci/, release name, namespace)
SCENARIOS = {
    "default": ([], "strata", "default"),
    "s3": (["s3-values.yaml"], "strata", "profiling"),
    "azure": (["azure-values.yaml"], "strata", "profiling"),
    "filesystem-pvc": (["filesystem-pvc-values.yaml"], "strata", "profiling"),
    "monitoring": (["monitoring-values.yaml"], "prof", "observability"),
    "agent-off": (["agent-off-values.yaml"], "strata", "default"),
    "tls-auth": (["tls-auth-values.yaml"], "strata", "profiling"),
}
BUCKET_SERVICES = ("ingester", "querier", "compactor")
AGENT_CAPABILITIES = {"BPF", "PERFMON", "SYS_RESOURCE", "SYS_PTRACE", "SYSLOG", "DAC_READ_SEARCH"}


def build_renderer():
    os.makedirs(WORK_DIR, exist_ok=True)
    source = os.path.join(SOURCE_DIR, "tests", "helm", "render", "main.go")
    if os.path.exists(RENDERER) and os.path.getmtime(RENDERER) >= os.path.getmtime(source):
        return
    env = dict(os.environ, GOCACHE=os.path.join(WORK_DIR, "gocache"))
    subprocess.run([os.path.join(SOURCE_DIR, "tests", "helm", "build.sh"), RENDERER], check=True, env=env)


def render(values_files, name="strata", namespace="default", notes=False):
    """Renders the chart; returns (returncode, stdout, stderr)."""
    cmd = [RENDERER, "-chart", CHART, "-name", name, "-namespace", namespace]
    for f in values_files:
        cmd += ["-f", f]
    if notes:
        cmd.append("-notes")
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


def ci_file(name):
    return os.path.join(CHART, "ci", name)


def load_values(files):
    """values.yaml merged with the given files (the renderer does the same merge)."""
    def merge(dst, src):
        for k, v in src.items():
            if v is None:
                dst.pop(k, None)
            elif isinstance(v, dict) and isinstance(dst.get(k), dict):
                merge(dst[k], v)
            else:
                dst[k] = v
    with open(os.path.join(CHART, "values.yaml")) as f:
        values = yaml.safe_load(f)
    for path in files:
        with open(path) as f:
            merge(values, yaml.safe_load(f) or {})
    return values


class Rendering:
    """One rendering: its documents by kind and name, and the service configs in its Secret."""

    def __init__(self, scenario, text, values):
        self.scenario = scenario
        self.text = text
        self.values = values
        self.docs = [d for d in yaml.safe_load_all(text) if d]
        self.by_kind = {}
        for d in self.docs:
            self.by_kind.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
        secrets = list(self.by_kind.get("Secret", {}).values())
        assert len(secrets) == 1, f"{scenario}: want one Secret, got {len(secrets)}"
        self.secret = secrets[0]
        self.files = self.secret["stringData"]
        self.configs = {k: yaml.safe_load(v) for k, v in self.files.items()}

    def kind(self, kind):
        return self.by_kind.get(kind, {})

    def workloads(self):
        for kind in ("Deployment", "StatefulSet", "DaemonSet"):
            for name, d in self.kind(kind).items():
                yield kind, name, d

    def component_workload(self, component):
        for kind, name, d in self.workloads():
            if d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == component:
                return d
        return None

    def service_for(self, workload):
        """The Service clients use for a workload (not the queriers' headless peers Service)."""
        selector = workload["spec"]["selector"]["matchLabels"]
        for name, svc in self.kind("Service").items():
            if svc["spec"]["selector"] == selector and not name.endswith("-querier-peers"):
                return svc
        return None

    def config_of(self, container):
        """The Secret key a bucket service or scraper container reads (-config /etc/strata/KEY)."""
        args = container["args"]
        path = args[args.index("-config") + 1]
        return os.path.basename(path)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_of(address):
    return int(address.rsplit(":", 1)[1])


def flag_value(args, flag):
    return args[args.index(flag) + 1]


class HelmChartTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        build_renderer()
        with open(os.path.join(CHART, "Chart.yaml")) as f:
            cls.chart = yaml.safe_load(f)
        cls.renders = {}
        for scenario, (files, name, ns) in SCENARIOS.items():
            paths = [ci_file(f) for f in files]
            rc, out, err = render(paths, name, ns)
            if rc != 0:
                raise AssertionError(f"{scenario}: render failed: {err}")
            cls.renders[scenario] = Rendering(scenario, out, load_values(paths))
        cls.tmp = tempfile.mkdtemp(prefix="strata-helm-", dir=WORK_DIR)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_yamllint_values_and_renderings(self):
        files = [os.path.join(CHART, "Chart.yaml"), os.path.join(CHART, "values.yaml")]
        files += sorted(glob.glob(os.path.join(CHART, "ci", "*.yaml")))
        for scenario, r in self.renders.items():
            path = os.path.join(self.tmp, f"{scenario}.yaml")
            with open(path, "w") as f:
                f.write(r.text)
            files.append(path)
        lint = subprocess.run(["yamllint", "-s", "-c", YAMLLINT_CONFIG] + files,
                              capture_output=True, text=True)
        self.assertEqual(lint.returncode, 0, lint.stdout + lint.stderr)

    def test_every_document_is_a_named_kubernetes_object(self):
        for scenario, r in self.renders.items():
            with self.subTest(scenario=scenario):
                for d in r.docs:
                    self.assertIn("apiVersion", d)
                    self.assertRegex(d["metadata"]["name"], r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
                expected = {"Deployment": 3, "StatefulSet": 1, "Secret": 1, "ServiceAccount": 1,
                            "ClusterRole": 1, "ClusterRoleBinding": 1, "Service": 4}
                for kind, count in expected.items():
                    if kind == "Service" and r.values["querier"]["fanout"]:
                        count += 1  # the queriers' headless peers Service
                    self.assertEqual(len(r.kind(kind)), count, f"{kind} in {scenario}")
                self.assertEqual(len(r.kind("DaemonSet")), 0 if scenario == "agent-off" else 1)

    def test_images_and_tags(self):
        for scenario, r in self.renders.items():
            tag = r.values["image"]["tag"] or self.chart["appVersion"]
            want = f"{r.values['image']['repository']}:{tag}"
            with self.subTest(scenario=scenario):
                for kind, name, d in r.workloads():
                    for c in d["spec"]["template"]["spec"]["containers"]:
                        self.assertEqual(c["image"], want, f"{kind}/{name}")
                        self.assertEqual(c["imagePullPolicy"], "IfNotPresent")
        self.assertEqual(self.renders["monitoring"].component_workload("querier")["spec"]["template"]
                         ["spec"]["containers"][0]["image"], "ghcr.io/strata-profiler/strata:0.1.0-rc1")
        self.assertEqual(self.renders["default"].component_workload("querier")["spec"]["template"]
                         ["spec"]["containers"][0]["image"], "ghcr.io/strata-profiler/strata:0.1.0")

    def test_ports_match_service_configs(self):
        for scenario, r in self.renders.items():
            for component in BUCKET_SERVICES + ("scraper",):
                with self.subTest(scenario=scenario, component=component):
                    w = r.component_workload(component)
                    c = w["spec"]["template"]["spec"]["containers"][0]
                    self.assertEqual(c["args"][0], component)
                    if component == "scraper":
                        keys = [k for k in r.configs if k.startswith(w["metadata"]["name"] + "-")]
                    else:
                        keys = [r.config_of(c)]
                    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
                    for key in keys:
                        server = r.configs[key]["server"]
                        self.assertEqual(port_of(server["http_listen_address"]), ports["http"], key)
                        self.assertEqual(port_of(server["grpc_listen_address"]), ports["grpc"], key)
                    self.assertEqual(ports, {"http": 7070, "grpc": 7071})
                    svc = r.service_for(w)
                    self.assertIsNotNone(svc, f"no Service selects the {component} pods")
                    svc_ports = {p["name"]: (p["port"], p["targetPort"]) for p in svc["spec"]["ports"]}
                    self.assertEqual(svc_ports, {"http": (7070, "http"), "grpc": (7071, "grpc")})
                    if component == "scraper":
                        self.assertEqual(svc["spec"]["clusterIP"], "None")
                        self.assertEqual(w["spec"]["serviceName"], svc["metadata"]["name"])

    def test_probes_on_ready(self):
        for scenario, r in self.renders.items():
            for kind, name, d in r.workloads():
                c = d["spec"]["template"]["spec"]["containers"][0]
                ports = {p["name"]: p["containerPort"] for p in c["ports"]}
                with self.subTest(scenario=scenario, workload=name):
                    for probe in ("readinessProbe", "livenessProbe"):
                        get = c[probe]["httpGet"]
                        self.assertEqual(get["path"], "/ready")
                        self.assertEqual(get["port"], "http")
                    self.assertIn("http", ports)
                    if kind == "DaemonSet":
                        self.assertEqual(flag_value(c["args"], "-http-address"), f":{ports['http']}")

    def test_rbac_is_get_list_watch_on_pods_and_nodes(self):
        for scenario, r in self.renders.items():
            with self.subTest(scenario=scenario):
                roles = list(r.kind("ClusterRole").values())
                self.assertEqual(len(roles), 1)
                self.assertEqual(r.kind("Role"), {})
                self.assertEqual(roles[0]["rules"], [
                    {"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["get", "list", "watch"]}])
                binding = list(r.kind("ClusterRoleBinding").values())[0]
                self.assertEqual(binding["roleRef"]["name"], roles[0]["metadata"]["name"])
                sa = list(r.kind("ServiceAccount").values())[0]
                self.assertEqual(binding["subjects"], [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                                        "namespace": SCENARIOS[scenario][2]}])
                # Only the scrapers (Kubernetes discovery) and agents (pod labels) get an API token.
                for kind, name, d in r.workloads():
                    spec = d["spec"]["template"]["spec"]
                    self.assertEqual(spec["serviceAccountName"], sa["metadata"]["name"])
                    self.assertEqual(spec["automountServiceAccountToken"], kind in ("StatefulSet", "DaemonSet"),
                                     name)
                self.assertFalse(sa["automountServiceAccountToken"])
        # Neither scrapers nor agents: nothing needs the API server, so no ClusterRole.
        quiet = self.render_ok([self.overlay("no-api", "scraper:\n  enabled: false\nagent:\n  enabled: false\n")])
        self.assertEqual((quiet.kind("ClusterRole"), quiet.kind("ClusterRoleBinding")), ({}, {}))
        self.assertEqual(quiet.kind("StatefulSet"), {})

    def test_agent_daemonset(self):
        r = self.renders["default"]
        ds = list(r.kind("DaemonSet").values())[0]
        spec = ds["spec"]["template"]["spec"]
        self.assertTrue(spec["hostPID"])
        c = spec["containers"][0]
        sc = c["securityContext"]
        self.assertEqual(set(sc["capabilities"]["add"]), AGENT_CAPABILITIES)
        self.assertEqual(sc["capabilities"]["drop"], ["ALL"])
        self.assertFalse(sc["privileged"])
        self.assertEqual(sc["runAsUser"], 0)
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        volumes = {v["name"]: v for v in spec["volumes"]}
        self.assertEqual(mounts["btf"]["mountPath"], "/sys/kernel/btf")
        self.assertTrue(mounts["btf"]["readOnly"])
        self.assertEqual(volumes["btf"]["hostPath"]["path"], "/sys/kernel/btf")
        self.assertEqual(set(volumes), {"btf"}, "no host mounts beyond BTF by default")
        env = {e["name"]: e for e in c["env"]}
        self.assertEqual(env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName")
        self.assertEqual(flag_value(c["args"], "-node"), "$(NODE_NAME)")
        self.assertEqual(c["args"][0], "agent")
        # It pushes to the ingesters' Service, on its gRPC port.
        ingester_svc = r.service_for(r.component_workload("ingester"))
        grpc = [p["port"] for p in ingester_svc["spec"]["ports"] if p["name"] == "grpc"][0]
        self.assertEqual(flag_value(c["args"], "-remote-store"), f"{ingester_svc['metadata']['name']}:{grpc}")
        self.assertEqual(flag_value(c["args"], "-sampling-frequency"), "19")
        self.assertNotIn("-off-cpu-threshold", c["args"], "off-CPU is off by default")
        self.assertEqual([t.get("operator") for t in spec["tolerations"]], ["Exists"])
        off = self.render_ok([self.overlay("off-cpu", "agent:\n  offCpuThreshold: 0.01\n")])
        c = list(off.kind("DaemonSet").values())[0]["spec"]["template"]["spec"]["containers"][0]
        self.assertEqual(flag_value(c["args"], "-off-cpu-threshold"), "0.01")

    def test_services_meet_the_restricted_pod_security_level(self):
        for scenario, r in self.renders.items():
            for kind, name, d in r.workloads():
                if kind == "DaemonSet":
                    continue
                spec = d["spec"]["template"]["spec"]
                with self.subTest(scenario=scenario, workload=name):
                    self.assertNotIn("hostPID", spec)
                    self.assertTrue(spec["securityContext"]["runAsNonRoot"])
                    self.assertEqual(spec["securityContext"]["seccompProfile"], {"type": "RuntimeDefault"})
                    for v in spec["volumes"]:
                        self.assertNotIn("hostPath", v)
                    sc = spec["containers"][0]["securityContext"]
                    self.assertEqual(sc, {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                          "capabilities": {"drop": ["ALL"]}})

    def test_agent_flags_are_the_binarys(self):
        usage = subprocess.run([BINARY, "agent", "-h"], capture_output=True, text=True)
        if usage.returncode != 0 or "-remote-store" not in usage.stdout:
            self.skipTest("this strata binary is built without the agent")
        documented = set(re.findall(r"^\s+(-[a-z-]+)", usage.stdout, re.M))
        with_debug = self.render_ok([self.overlay("debug", "agent:\n  hostDebugFiles: true\n"
                                                  "  tenant: team-a\n")])
        for r in (self.renders["default"], with_debug):
            args = list(r.kind("DaemonSet").values())[0]["spec"]["template"]["spec"]["containers"][0]["args"]
            flags = [a for a in args[1:] if a.startswith("-")]
            self.assertGreaterEqual(len(flags), 5)
            for flag in flags:
                self.assertIn(flag, documented, f"strata agent has no flag {flag}")
        args = list(with_debug.kind("DaemonSet").values())[0]["spec"]["template"]["spec"]["containers"][0]["args"]
        self.assertEqual(flag_value(args, "-debug-dir"), "/host/usr/lib/debug")
        self.assertEqual(flag_value(args, "-tenant"), "team-a")

    def test_agent_off(self):
        r = self.renders["agent-off"]
        self.assertEqual(r.kind("DaemonSet"), {})
        self.assertIsNone(r.component_workload("agent"))
        self.assertIsNotNone(r.component_workload("compactor"))

    def test_compactor_is_one_recreate_replica(self):
        for scenario, r in self.renders.items():
            with self.subTest(scenario=scenario):
                d = r.component_workload("compactor")
                self.assertEqual(d["kind"], "Deployment")
                self.assertEqual(d["spec"]["replicas"], 1)
                self.assertEqual(d["spec"]["strategy"], {"type": "Recreate"})
        scaled = self.render_ok([self.overlay("compactor", "compactor:\n  replicas: 5\n")])
        self.assertEqual(scaled.component_workload("compactor")["spec"]["replicas"], 1)

    def test_stateless_services_scale_with_values(self):
        r = self.renders["s3"]
        for component in ("ingester", "querier"):
            d = r.component_workload(component)
            self.assertEqual(d["spec"]["replicas"], 3)
            self.assertEqual(d["spec"]["strategy"]["type"], "RollingUpdate")

    def test_scrapers_share_targets_by_hashmod(self):
        for scenario, r in self.renders.items():
            sts = list(r.kind("StatefulSet").values())[0]
            n = r.values["scraper"]["replicas"]
            with self.subTest(scenario=scenario, replicas=n):
                self.assertEqual(sts["spec"]["replicas"], n)
                spec = sts["spec"]["template"]["spec"]
                c = spec["containers"][0]
                self.assertEqual(c["args"], ["scraper", "-config", "/etc/strata/$(POD_NAME).yaml"])
                env = {e["name"]: e for e in c["env"]}
                self.assertEqual(env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"], "metadata.name")
                name = sts["metadata"]["name"]
                keys = sorted(k for k in r.files if k.startswith(name + "-"))
                # StatefulSet pods are <name>-0 .. <name>-(n-1): one config each, each mounted.
                self.assertEqual(keys, [f"{name}-{i}.yaml" for i in range(n)])
                items = spec["volumes"][0]["secret"]["items"]
                self.assertEqual([i["key"] for i in items], keys)
                ingester_svc = r.service_for(r.component_workload("ingester"))["metadata"]["name"]
                shards = []
                for i, key in enumerate(keys):
                    cfg = r.configs[key]
                    self.assertEqual(cfg["scraper"]["ingester_addresses"], [f"{ingester_svc}:7071"])
                    self.assertEqual(len(cfg["scrape_configs"]), len(r.values["scraper"]["scrapeConfigs"]))
                    for job in cfg["scrape_configs"]:
                        rules = job["relabel_configs"]
                        if n == 1:
                            self.assertFalse(any(x.get("action") == "hashmod" for x in rules))
                            continue
                        hashmod, keep = rules[-2], rules[-1]
                        self.assertEqual(hashmod, {"action": "hashmod", "modulus": n,
                                                   "source_labels": ["__address__"],
                                                   "target_label": "__tmp_strata_shard"})
                        self.assertEqual(keep, {"action": "keep", "regex": str(i),
                                                "source_labels": ["__tmp_strata_shard"]})
                        shards.append((job["job_name"], keep["regex"]))
                if n > 1:
                    # Every hashmod value 0..n-1 is kept by exactly one replica, per job.
                    jobs = {j for j, _ in shards}
                    for job in jobs:
                        self.assertEqual(sorted(s for j, s in shards if j == job), [str(i) for i in range(n)])
        self.assertEqual(self.renders["filesystem-pvc"].values["scraper"]["replicas"], 3)

    def test_bucket_secret_is_thanos_objstore(self):
        want_type = {"default": "FILESYSTEM", "s3": "S3", "azure": "AZURE", "filesystem-pvc": "FILESYSTEM",
                     "monitoring": "FILESYSTEM", "agent-off": "FILESYSTEM",
                     "tls-auth": "FILESYSTEM"}
        for scenario, r in self.renders.items():
            with self.subTest(scenario=scenario):
                objstore = r.configs["objstore.yaml"]
                self.assertEqual(objstore["type"], want_type[scenario])
                self.assertLessEqual(set(objstore), {"type", "config", "prefix"})
                for key, cfg in r.configs.items():
                    if key != "objstore.yaml":
                        self.assertEqual(cfg["bucket"], objstore, key)
                self.assertEqual(len(r.configs), 4 + r.values["scraper"]["replicas"])
        s3 = self.renders["s3"].configs["objstore.yaml"]
        self.assertEqual(s3, {"type": "S3", "prefix": "strata", "config": {
            "bucket": "profiles", "endpoint": "s3.eu-west-1.amazonaws.com", "region": "eu-west-1",
            "access_key": "AKIAEXAMPLEEXAMPLE00", "secret_key": "example-secret-key-not-a-real-one",
            "part_size": "64MiB", "http_config": {"response_header_timeout": "2m"}}})
        azure = self.renders["azure"].configs["objstore.yaml"]["config"]
        self.assertEqual((azure["storage_account"], azure["container"]), ("strataprofiles", "profiles"))

    def test_filesystem_bucket_volume(self):
        for scenario, r in self.renders.items():
            fs = r.configs["objstore.yaml"]["type"] == "FILESYSTEM"
            mount = r.values["bucket"]["filesystem"]["mountPath"]
            with self.subTest(scenario=scenario):
                pvcs = list(r.kind("PersistentVolumeClaim").values())
                self.assertEqual(len(pvcs), 1 if fs else 0)
                for component in BUCKET_SERVICES + ("scraper",):
                    spec = r.component_workload(component)["spec"]["template"]["spec"]
                    claims = [v for v in spec["volumes"] if "persistentVolumeClaim" in v]
                    mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
                    if not fs:
                        self.assertEqual(claims, [])
                        continue
                    self.assertEqual(claims[0]["persistentVolumeClaim"]["claimName"], pvcs[0]["metadata"]["name"])
                    self.assertEqual(mounts[claims[0]["name"]], mount)
                    self.assertEqual(r.configs["objstore.yaml"]["config"]["directory"], mount + "/bucket")
        pvc = list(self.renders["filesystem-pvc"].kind("PersistentVolumeClaim").values())[0]
        self.assertEqual(pvc["spec"]["accessModes"], ["ReadWriteMany"])
        self.assertEqual(pvc["spec"]["storageClassName"], "cephfs")
        self.assertEqual(pvc["spec"]["resources"]["requests"]["storage"], "100Gi")
        self.assertEqual(self.renders["filesystem-pvc"].configs["objstore.yaml"]["prefix"], "cluster-a")
        existing = self.render_ok([self.overlay("claim", "bucket:\n  filesystem:\n    persistence:\n"
                                                "      existingClaim: my-claim\n")])
        self.assertEqual(existing.kind("PersistentVolumeClaim"), {})
        spec = existing.component_workload("ingester")["spec"]["template"]["spec"]
        self.assertIn({"name": "bucket", "persistentVolumeClaim": {"claimName": "my-claim"}}, spec["volumes"])

    def test_service_monitor(self):
        r = self.renders["monitoring"]
        sm = r.kind("ServiceMonitor")["prof-strata"]
        self.assertEqual(sm["metadata"]["labels"]["release"], "kube-prometheus-stack")
        self.assertEqual(sm["spec"]["endpoints"], [{"port": "http", "path": "/metrics", "interval": "15s",
                                                    "scrapeTimeout": "10s"}])
        self.assertEqual(sm["spec"]["namespaceSelector"], {"matchNames": ["observability"]})
        selected = []
        for svc in r.kind("Service").values():
            labels = svc["metadata"]["labels"]
            if all(labels.get(k) == v for k, v in sm["spec"]["selector"]["matchLabels"].items()) and all(
                    labels.get(e["key"]) in e["values"] for e in sm["spec"]["selector"]["matchExpressions"]):
                selected.append(labels["app.kubernetes.io/component"])
                self.assertIn("http", [p["name"] for p in svc["spec"]["ports"]])
        self.assertEqual(sorted(selected), ["compactor", "ingester", "querier", "scraper"])
        pm = r.kind("PodMonitor")["prof-strata-agent"]
        ds = r.component_workload("agent")
        self.assertEqual(pm["spec"]["selector"]["matchLabels"], ds["spec"]["selector"]["matchLabels"])
        self.assertEqual(pm["spec"]["podMetricsEndpoints"][0]["port"], "http")
        for scenario in ("default", "s3", "agent-off"):
            self.assertEqual(self.renders[scenario].kind("ServiceMonitor"), {})
            self.assertEqual(self.renders[scenario].kind("PodMonitor"), {})
        # A release named apart from the chart: every name carries it.
        self.assertIn("prof-strata-querier", r.kind("Deployment"))

    def test_required_values_fail_the_render(self):
        cases = {
            "bucket:\n  type: S3\n  config:\n    bucket: b\n":
                "bucket.config.endpoint is required for an S3 bucket",
            "bucket:\n  type: AZURE\n  config:\n    storage_account: a\n":
                "bucket.config.container is required for an AZURE bucket",
            "bucket:\n  type: GCS\n": 'bucket.type "GCS" is not supported',
        }
        for i, (values, message) in enumerate(cases.items()):
            rc, out, err = render([self.overlay(f"bad{i}", values)])
            self.assertNotEqual(rc, 0, values)
            self.assertIn(message, err)

    def test_notes_say_how_to_open_the_ui(self):
        rc, out, err = render([], "strata", "profiling", notes=True)
        self.assertEqual(rc, 0, err)
        self.assertIn("kubectl --namespace profiling port-forward svc/strata-querier 7070:7070", out)
        self.assertIn("http://localhost:7070", out)
        self.assertIn("strata-ingester.profiling.svc:7071", out)
        self.assertIn("ReadWriteOnce", out)
        rc, out, err = render([ci_file("s3-values.yaml")], notes=True)
        self.assertNotIn("ReadWriteOnce", out)

    def test_tls_and_tokens_from_secrets(self):
        """tls.secretName and auth.tokenSecretName: the Secrets mounted read-only in every service
        and the agent, server.tls / server.auth in every service config, the scrapers' push_tls and
        bearer_token_file, the agent's flags, probes over HTTPS; and nothing of it by default."""
        r = self.renders["tls-auth"]
        for kind, name, d in r.workloads():
            spec = d["spec"]["template"]["spec"]
            c = spec["containers"][0]
            with self.subTest(workload=name):
                volumes = {v["name"]: v for v in spec["volumes"]}
                self.assertEqual(volumes["tls"]["secret"]["secretName"], "strata-tls")
                self.assertEqual(volumes["tokens"]["secret"]["secretName"], "strata-tokens")
                mounts = {m["name"]: m for m in c["volumeMounts"]}
                self.assertEqual(mounts["tls"]["mountPath"], "/etc/strata/tls")
                self.assertEqual(mounts["tokens"]["mountPath"], "/etc/strata/tokens")
                self.assertTrue(mounts["tls"]["readOnly"] and mounts["tokens"]["readOnly"])
                if kind == "DaemonSet":
                    args = c["args"]
                    self.assertEqual(flag_value(args, "-remote-store-ca-file"), "/etc/strata/tls/ca.crt")
                    self.assertEqual(flag_value(args, "-remote-store-cert-file"), "/etc/strata/tls/tls.crt")
                    self.assertEqual(flag_value(args, "-remote-store-key-file"), "/etc/strata/tls/tls.key")
                    self.assertEqual(flag_value(args, "-remote-store-server-name"),
                                     "strata-ingester.profiling.svc")
                    self.assertEqual(flag_value(args, "-bearer-token-file"), "/etc/strata/tokens/pushers")
                    self.assertNotIn("scheme", c["readinessProbe"]["httpGet"])  # the agent's own port
                else:
                    self.assertEqual(c["readinessProbe"]["httpGet"]["scheme"], "HTTPS")
        for key, config in r.configs.items():
            if key == "objstore.yaml":
                continue
            with self.subTest(config=key):
                self.assertEqual(config["server"]["tls"], {
                    "cert_file": "/etc/strata/tls/tls.crt", "key_file": "/etc/strata/tls/tls.key",
                    "client_ca_file": "/etc/strata/tls/ca.crt"})
                self.assertEqual(config["server"]["auth"], {"tokens": [
                    {"token_file": "/etc/strata/tokens/team-a", "tenants": ["team-a"]},
                    {"token_file": "/etc/strata/tokens/pushers", "tenants": ["*"]}]})
                if "scrape_configs" in config:
                    self.assertEqual(config["scraper"]["push_tls"], {
                        "ca_file": "/etc/strata/tls/ca.crt", "cert_file": "/etc/strata/tls/tls.crt",
                        "key_file": "/etc/strata/tls/tls.key",
                        "server_name": "strata-ingester.profiling.svc"})
                    self.assertEqual(config["scraper"]["bearer_token_file"], "/etc/strata/tokens/pushers")
        sm = r.kind("ServiceMonitor")["strata"]["spec"]["endpoints"][0]
        self.assertEqual(sm["scheme"], "https")
        self.assertEqual(sm["tlsConfig"], {"ca": {"secret": {"name": "strata-tls", "key": "ca.crt"}},
                                           "serverName": "strata-ingester.profiling.svc"})
        self.assertNotIn("scheme", self.renders["monitoring"].kind("ServiceMonitor")["prof-strata"]
                         ["spec"]["endpoints"][0])
        d = self.renders["default"]
        for kind, name, w in d.workloads():
            spec = w["spec"]["template"]["spec"]
            self.assertNotIn("tls", [v["name"] for v in spec.get("volumes", [])])
        for key, config in d.configs.items():
            if key != "objstore.yaml":
                self.assertNotIn("tls", config["server"])
                self.assertNotIn("auth", config["server"])
        rc, _, err = render([self.overlay("tokens-without-secret",
                                          "auth:\n  tokens: [{key: a, tenants: [a]}]\n")])
        self.assertNotEqual(rc, 0)
        self.assertIn("auth.tokens needs auth.tokenSecretName", err)

    def test_configs_pass_check_config(self):
        """Each rendered service config through `strata <service> -config F -check-config`. The
        FILESYSTEM mount path is moved into a scratch directory (the check opens the bucket, which
        creates its directory, as the volume mount would provide it in a pod)."""
        unchecked = set()
        checked = 0
        for scenario, (files, name, ns) in SCENARIOS.items():
            scratch = tempfile.mkdtemp(prefix=f"{scenario}-", dir=self.tmp)
            paths = [ci_file(f) for f in files]
            paths.append(self.overlay(f"mount-{scenario}",
                                      f"bucket:\n  filesystem:\n    mountPath: {scratch}/mnt\n"))
            r = self.render_ok(paths, name, ns)
            for key, text in r.files.items():
                if key == "objstore.yaml":
                    continue
                service = "scraper" if "scrape_configs" in r.configs[key] else key[:-len(".yaml")]
                path = os.path.join(scratch, key)
                with open(path, "w") as f:
                    f.write(text)
                out = subprocess.run([BINARY, service, "-config", path, "-check-config"],
                                     capture_output=True, text=True, timeout=60)
                if out.returncode == 2 and f'unknown command "{service}"' in out.stderr:
                    unchecked.add(service)
                    continue
                with self.subTest(scenario=scenario, config=key):
                    self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
                    self.assertIn("configuration is valid", out.stdout)
                    checked += 1
        if unchecked:
            print(f"\nnot checked, this binary has no such service yet: {', '.join(sorted(unchecked))}",
                  file=sys.stderr)
        # The ingester and querier exist: a chart change that breaks them cannot hide here.
        self.assertTrue(unchecked <= {"compactor", "scraper"}, unchecked)
        self.assertGreaterEqual(checked, 2 * len(SCENARIOS))

    def test_queriers_find_each_other(self):
        """Fan-out (querier.fanout, on in the s3 scenario, off by default): a headless Service
        selects the querier pods (ready ones only) on the gRPC port, and every querier's config
        names it as its peers, in the release's namespace; off, neither exists."""
        for scenario, r in self.renders.items():
            with self.subTest(scenario=scenario):
                peers = [n for n in r.kind("Service") if n.endswith("-querier-peers")]
                querier = r.configs["querier.yaml"]["querier"]
                if not r.values["querier"]["fanout"]:
                    self.assertEqual(peers, [])
                    self.assertNotIn("peers", querier)
                    continue
                self.assertEqual(scenario, "s3")
                self.assertEqual(len(peers), 1)
                svc = r.kind("Service")[peers[0]]
                self.assertEqual(svc["spec"]["clusterIP"], "None")
                self.assertFalse(svc["spec"]["publishNotReadyAddresses"])
                w = r.component_workload("querier")
                self.assertEqual(svc["spec"]["selector"], w["spec"]["selector"]["matchLabels"])
                self.assertEqual([(p["name"], p["port"]) for p in svc["spec"]["ports"]],
                                 [("grpc", 7071)])
                ns = SCENARIOS[scenario][2]
                self.assertEqual(querier["peers"], [f"{peers[0]}.{ns}.svc:7071"])
        self.assertTrue(self.renders["s3"].values["querier"]["fanout"])

    def test_querier_disk_cache(self):
        """querier.diskCache (on in the s3 scenario, off by default): an emptyDir of sizeLimit
        mounted at mountPath in the querier pods only, named as the querier's
        disk_cache_directory with maxBytes under the sizeLimit; off, none of it."""
        for scenario, r in self.renders.items():
            with self.subTest(scenario=scenario):
                querier = r.configs["querier.yaml"]["querier"]
                for component in BUCKET_SERVICES:
                    pod = r.component_workload(component)["spec"]["template"]["spec"]
                    volumes = {v["name"]: v for v in pod.get("volumes", [])}
                    mounts = {m["name"]: m for m in pod["containers"][0].get("volumeMounts", [])}
                    on = component == "querier" and r.values["querier"]["diskCache"]["enabled"]
                    self.assertEqual("disk-cache" in volumes, on)
                    self.assertEqual("disk-cache" in mounts, on)
                    if on:
                        self.assertEqual(volumes["disk-cache"]["emptyDir"], {"sizeLimit": "20Gi"})
                        self.assertEqual(mounts["disk-cache"]["mountPath"], "/var/cache/strata")
                if not r.values["querier"]["diskCache"]["enabled"]:
                    self.assertNotIn("disk_cache_directory", querier)
                    continue
                self.assertEqual(scenario, "s3")
                self.assertEqual(querier["disk_cache_directory"], "/var/cache/strata")
                self.assertEqual(querier["disk_cache_max_bytes"], "18GiB")
        self.assertTrue(self.renders["s3"].values["querier"]["diskCache"]["enabled"])

    def test_querier_memory_limit_covers_its_bounds(self):
        """The default querier's memory limit holds query_threads merges of max_query_bytes each
        plus the cached block readers, which the chart bounds by bytes (max_open_block_bytes):
        bounded by count alone, 128 compacted hourly blocks' readers take 5-6 GiB by themselves."""
        units = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "Ki": 1 << 10,
                 "Mi": 1 << 20, "Gi": 1 << 30}

        def size(text):
            m = re.fullmatch(r"(\d+)([A-Za-z]*)", str(text))
            self.assertIsNotNone(m, text)
            self.assertIn(m.group(2), units, text)
            return int(m.group(1)) * units[m.group(2)]
        r = self.renders["default"]
        querier = r.configs["querier.yaml"]["querier"]
        self.assertIn("max_open_block_bytes", querier)
        limit = size(r.component_workload("querier")["spec"]["template"]["spec"]["containers"][0]
                     ["resources"]["limits"]["memory"])
        queries = querier.get("query_threads", 4) * size(querier.get("max_query_bytes", "1GiB"))
        self.assertGreater(size(querier["max_open_block_bytes"]), 0)
        self.assertLessEqual(queries + size(querier["max_open_block_bytes"]), limit)

    def test_check_config_rejects_a_bad_chart_value(self):
        """The check above can fail: a misspelt ingester key in values reaches the config file and
        the binary rejects it with the file, line and key."""
        scratch = tempfile.mkdtemp(prefix="bad-", dir=self.tmp)
        r = self.render_ok([self.overlay("typo", f"bucket:\n  filesystem:\n    mountPath: {scratch}/mnt\n"
                                         "ingester:\n  config:\n    flush_intervall: 1s\n")])
        path = os.path.join(scratch, "ingester.yaml")
        with open(path, "w") as f:
            f.write(r.files["ingester.yaml"])
        out = subprocess.run([BINARY, "ingester", "-config", path, "-check-config"],
                             capture_output=True, text=True, timeout=60)
        self.assertNotEqual(out.returncode, 0)
        # logfmt quotes the message: unknown key \"flush_intervall\"
        self.assertRegex(out.stdout + out.stderr, r'ingester\.yaml:\d+:\d+: ingester: unknown key \\?"flush_intervall')

    def test_rendered_scrapers_share_targets_without_overlap(self):
        """Three scraper replicas from the chart's own configs, run as real `strata scraper`
        processes on twelve static targets: every target is active in exactly one replica."""
        probe = subprocess.run([BINARY, "scraper", "-config", "/nonexistent"], capture_output=True, text=True)
        if 'unknown command "scraper"' in probe.stderr:
            self.skipTest("this strata binary has no scraper yet")
        targets = [f"127.0.0.{i + 1}:{6000 + i}" for i in range(12)]  # never answer: health bad, still active
        scratch = tempfile.mkdtemp(prefix="shard-", dir=self.tmp)
        procs, ports, logs = [], [], []
        try:
            for i in range(3):
                http, grpc = free_port(), free_port()
                values = ("bucket:\n  filesystem:\n    mountPath: " + scratch + "/mnt\n"
                          f"ports:\n  http: {http}\n  grpc: {grpc}\n"
                          "scraper:\n  replicas: 3\n  config:\n    ingester_addresses: ['127.0.0.1:1']\n"
                          "  scrapeConfigs:\n    - job_name: static\n      scrape_interval: 1h\n"
                          f"      static_configs:\n        - targets: {targets}\n")
                r = self.render_ok([self.overlay(f"shard{i}", values)])
                name = list(r.kind("StatefulSet"))[0]
                path = os.path.join(scratch, f"{name}-{i}.yaml")
                with open(path, "w") as f:
                    # The pod's own file, as $(POD_NAME) picks it; addresses on loopback here.
                    f.write(r.files[f"{name}-{i}.yaml"].replace("0.0.0.0:", "127.0.0.1:"))
                log = open(os.path.join(scratch, f"scraper-{i}.log"), "w")
                logs.append(log)
                procs.append(subprocess.Popen([BINARY, "scraper", "-config", path], stdout=log, stderr=log))
                ports.append(http)
            active = [self.active_addresses(port, procs[i]) for i, port in enumerate(ports)]
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            for log in logs:
                log.close()
        for i, a in enumerate(active):
            for j in range(i + 1, len(active)):
                self.assertEqual(a & active[j], set(), f"replicas {i} and {j} share targets")
        self.assertEqual(set().union(*active), set(targets))
        self.assertTrue(all(active), f"a replica got no target: {[sorted(a) for a in active]}")

    def active_addresses(self, port, proc):
        deadline = time.time() + 30
        last = None
        while time.time() < deadline:
            self.assertIsNone(proc.poll(), "a scraper exited")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/targets?state=active",
                                            timeout=5) as resp:
                    body = json.load(resp)
                jobs = body.get("targets", {})
                if "static" in jobs:
                    out = set()
                    for t in jobs["static"].get("targets", []):
                        labels = {x["name"]: x["value"] for x in t["discoveredLabels"]["labels"]}
                        out.add(labels["__address__"])
                    return out
            except (OSError, ValueError) as e:
                last = e
            time.sleep(0.2)
        raise AssertionError(f"no targets from the scraper on :{port}: {last}")

    def test_renderer_follows_helm_semantics(self):
        """The renderer itself, on tests/helm/testdata/mini: Helm's float64 numbers (3e+06 unless
        converted), tpl, include, toYaml, toJson, fromYaml, a missing value as "", null in a -f
        file deleting a key, comment-only documents dropped, fail and required."""
        mini = os.path.join(SOURCE_DIR, "tests", "helm", "testdata", "mini")
        over = self.overlay("mini", "nested:\n  drop: null\n")

        def run(*files):
            cmd = [RENDERER, "-chart", mini, "-name", "rel", "-namespace", "ns"]
            for f in files:
                cmd += ["-f", f]
            return subprocess.run(cmd, capture_output=True, text=True)
        out = run(over)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout, "---\n# Source: mini/templates/all.yaml\n"
                         "name: mini-rel\nreplicas: 3\nbig: 3e+06\nbigInt: 3000000\n"
                         'greeting: "hello rel"\nnested:\n  keep: 1\nlist: ["b","a"]\nparsed: x\n'
                         'missing: ""\nchart: mini/1.2.3/4.5\nnamespace: ns\nreq: 3\n')
        self.assertIn("  drop: 2\n", run().stdout)
        failed = run(self.overlay("mini-fail", "fail: true\n"))
        self.assertNotEqual(failed.returncode, 0)
        self.assertIn("asked to fail", failed.stderr)
        unset = run(self.overlay("mini-req", "replicas: null\n"))
        self.assertNotEqual(unset.returncode, 0)
        self.assertIn("need .Values.replicas", unset.stderr)

    def test_image_contract_of_the_dockerfile(self):
        """deploy/docker/Dockerfile builds what the chart runs: the binary as entrypoint, the UI
        where querier.uiDirectory points, the chart's user, and a runtime package for every shared
        library the binary needs (found from its DT_NEEDED entries and dpkg)."""
        with open(os.path.join(SOURCE_DIR, "deploy", "docker", "Dockerfile")) as f:
            dockerfile = f.read()
        values = self.renders["default"].values
        self.assertIn('ENTRYPOINT ["/usr/bin/strata"]', dockerfile)
        self.assertIn(f"COPY --from=build /src/ui/dist {values['querier']['uiDirectory']}\n", dockerfile)
        user = values["podSecurityContext"]
        self.assertIn(f"USER {user['runAsUser']}:{user['runAsGroup']}\n", dockerfile)
        runtime = dockerfile.split("FROM debian:12-slim", 1)[1]
        installed = set(re.findall(r"\b(lib[a-z0-9.+-]+|zlib1g|ca-certificates)\b", runtime.split("COPY")[0]))
        needed = subprocess.run(["readelf", "-d", BINARY], capture_output=True, text=True, check=True).stdout
        if "libasan" in needed:
            self.skipTest("a sanitizer build links other libraries than the image's Release build")
        cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
        base = {"libc6", "libgcc-s1"}  # in every Debian image
        missing = []
        for lib in re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", needed):
            m = re.search(rf"^\s*{re.escape(lib)} \(libc6,x86-64[^)]*\) => (\S+)", cache, re.M)
            self.assertIsNotNone(m, f"{lib} not in the linker cache")
            real = os.path.realpath(m.group(1))
            package = None
            for path in (real, re.sub(r"^/usr", "", real)):
                out = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
                if out.returncode == 0:
                    package = out.stdout.split(":")[0]
                    break
            self.assertIsNotNone(package, f"no Debian package owns {real}")
            if package not in base and package not in installed:
                missing.append(f"{lib} ({package})")
        self.assertEqual(missing, [], "runtime packages missing from deploy/docker/Dockerfile")

    # ---- helpers --------------------------------------------------------------------------------

    def overlay(self, name, text):
        path = os.path.join(self.tmp, f"{name}-values.yaml")
        with open(path, "w") as f:
            f.write(text)
        return path

    def render_ok(self, files, name="strata", namespace="default"):
        rc, out, err = render(files, name, namespace)
        self.assertEqual(rc, 0, err)
        return Rendering(",".join(files), out, load_values(files))


if __name__ == "__main__":
    unittest.main(verbosity=2)
