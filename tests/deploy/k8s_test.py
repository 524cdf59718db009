#!/usr/bin/python3
"""The Kubernetes manifests in deploy/k8s parse and agree with each other and
with the server: selectors match the pod labels, probes and Services name
the container's ports (gRPC, REST, metrics), the server binds those ports on 0.0.0.0, the pods are
scraped one way only (the ServiceMonitor, whose jobLabel yields the job the
alerts match; no prometheus.io annotations), the grace period outlasts the
drain, and the HPA scales on a metric the server exports. No cluster runs here;
`kubectl apply --dry-run=server -k deploy/k8s` against one is the next check.
"""

import argparse
import glob
import os
import sys
import unittest

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_common  # noqa: E402

ARGS = None
HEALTH_SERVICE = "metalserve.v1.Inference"


def load_all(directory):
    docs = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.yaml"))):
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if doc is not None:
                    docs.setdefault(doc["kind"], []).append((os.path.basename(path), doc))
    return docs


def one(docs, kind):
    items = docs.get(kind, [])
    if len(items) != 1:
        raise AssertionError(f"want exactly one {kind}, found {len(items)}")
    return items[0][1]


def matches(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


class K8sManifests(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.docs = load_all(ARGS.dir)
        cls.deploy = one(cls.docs, "Deployment")
        cls.pod = cls.deploy["spec"]["template"]
        cls.pod_labels = cls.pod["metadata"]["labels"]
        containers = cls.pod["spec"]["containers"]
        assert len(containers) == 1, "one container per pod"
        cls.container = containers[0]
        cls.ports = {p["name"]: p["containerPort"] for p in cls.container["ports"]}
        cls.flags = deploy_common.parse_flags(cls.container["args"])

    def test_every_document_is_a_named_object(self):
        for kind, items in self.docs.items():
            for path, doc in items:
                self.assertIn("apiVersion", doc, path)
                if kind != "Kustomization":
                    self.assertTrue(doc["metadata"]["name"], path)

    def test_kustomization_lists_existing_files(self):
        k = one(self.docs, "Kustomization")
        for res in k["resources"]:
            self.assertTrue(os.path.exists(os.path.join(ARGS.dir, res)), res)
        listed = {os.path.basename(r) for r in k["resources"]}
        for kind in ("Deployment", "HorizontalPodAutoscaler",
                     "PodDisruptionBudget"):
            self.assertIn(self.docs[kind][0][0], listed, kind)

    def test_deployment_selector_matches_pod_labels(self):
        self.assertTrue(matches(self.deploy["spec"]["selector"]["matchLabels"],
                                self.pod_labels))

    def test_ports_are_named_grpc_http_and_metrics(self):
        self.assertEqual(self.ports, {"grpc": 8500, "http": 8000, "metrics": 9464})

    def test_server_binds_the_container_ports_on_all_interfaces(self):
        self.assertEqual(self.flags["address"], f"0.0.0.0:{self.ports['grpc']}")
        self.assertEqual(self.flags["metrics_address"],
                         f"0.0.0.0:{self.ports['metrics']}")
        self.assertEqual(self.flags["http_address"], f"0.0.0.0:{self.ports['http']}")
        deploy_common.check_flags_known(self, self.flags, ARGS.server)

    def test_probes_are_native_grpc_on_the_grpc_port(self):
        c = self.container
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            grpc = c[probe]["grpc"]
            self.assertEqual(grpc["port"], self.ports["grpc"], probe)
            self.assertIn(grpc.get("service", ""), ("", HEALTH_SERVICE), probe)
        # Readiness asks for the inference service, which turns NOT_SERVING
        # during a drain; liveness asks for the server as a whole.
        self.assertEqual(c["readinessProbe"]["grpc"]["service"], HEALTH_SERVICE)

    def test_grace_period_outlasts_drain_and_shutdown(self):
        drain = deploy_common.duration_s(self.flags.get("drain_grace", "0"))
        shutdown = deploy_common.duration_s(self.flags.get("shutdown_timeout", "30s"))
        self.assertGreater(drain, 0, "without --drain_grace pods are cut off "
                           "before endpoints are removed")
        self.assertGreater(self.pod["spec"]["terminationGracePeriodSeconds"],
                           drain + shutdown)

    def test_resources_have_requests_and_memory_limit(self):
        r = self.container["resources"]
        self.assertIn("cpu", r["requests"])
        self.assertIn("memory", r["requests"])
        self.assertIn("memory", r["limits"])

    def test_runs_as_non_root(self):
        self.assertIs(self.pod["spec"]["securityContext"]["runAsNonRoot"], True)
        self.assertIs(self.container["securityContext"]["allowPrivilegeEscalation"],
                      False)

    def test_pods_carry_no_scrape_annotations(self):
        # The ServiceMonitor scrapes them; annotations would add a second
        # scrape under another job name.
        annotations = self.pod["metadata"].get("annotations") or {}
        self.assertEqual([k for k in annotations if k.startswith("prometheus.io/")],
                         [])

    def test_service_monitor_job_label_names_the_job_the_alerts_match(self):
        mon = one(self.docs, "ServiceMonitor")
        job_label = mon["spec"].get("jobLabel")
        self.assertTrue(job_label, "no jobLabel: the job would be the Service's name")
        svc = next(s for s in self.services().values()
                   if matches(mon["spec"]["selector"]["matchLabels"],
                              s["metadata"]["labels"]))
        job = svc["metadata"]["labels"].get(job_label)
        with open(os.path.join(ARGS.dir, "..", "prometheus", "alerts.yml")) as f:
            rules = [r for g in yaml.safe_load(f)["groups"] for r in g["rules"]]
        down = next(r for r in rules if r["alert"] == "MetalserveInstanceDown")
        self.assertIn(f'job="{job}"', down["expr"])

    def services(self):
        return {doc["metadata"]["name"]: doc for _, doc in self.docs["Service"]}

    def test_headless_grpc_service_for_client_side_round_robin(self):
        headless = [s for s in self.services().values()
                    if s["spec"].get("clusterIP") == "None"]
        self.assertEqual(len(headless), 1)
        spec = headless[0]["spec"]
        self.assertTrue(matches(spec["selector"], self.pod_labels))
        self.assertEqual([(p["name"], p["port"], p["targetPort"]) for p in spec["ports"]],
                         [("grpc", self.ports["grpc"], "grpc")])

    def test_http_service_reaches_the_rest_port_of_the_pods(self):
        http = [s for s in self.services().values()
                if any(p["name"] == "http" for p in s["spec"]["ports"])]
        self.assertEqual(len(http), 1)
        spec = http[0]["spec"]
        self.assertTrue(matches(spec["selector"], self.pod_labels))
        self.assertEqual([(p["name"], p["port"], p["targetPort"]) for p in spec["ports"]],
                         [("http", self.ports["http"], "http")])

    def test_metrics_service_and_service_monitor_reach_the_metrics_port(self):
        metrics = [s for s in self.services().values()
                   if any(p["name"] == "metrics" for p in s["spec"]["ports"])]
        self.assertEqual(len(metrics), 1)
        svc = metrics[0]
        self.assertTrue(matches(svc["spec"]["selector"], self.pod_labels))
        port = next(p for p in svc["spec"]["ports"] if p["name"] == "metrics")
        self.assertIn(port["targetPort"], ("metrics", self.ports["metrics"]))
        mon = one(self.docs, "ServiceMonitor")
        self.assertTrue(matches(mon["spec"]["selector"]["matchLabels"],
                                svc["metadata"]["labels"]))
        self.assertEqual([e["port"] for e in mon["spec"]["endpoints"]], ["metrics"])

    def test_pod_disruption_budget_selects_the_pods(self):
        pdb = one(self.docs, "PodDisruptionBudget")
        self.assertTrue(matches(pdb["spec"]["selector"]["matchLabels"],
                                self.pod_labels))
        self.assertLess(pdb["spec"].get("maxUnavailable", 0),
                        self.deploy["spec"]["replicas"])

    def test_autoscaler_scales_the_deployment_on_queue_depth(self):
        hpa = one(self.docs, "HorizontalPodAutoscaler")
        self.assertEqual(hpa["apiVersion"], "autoscaling/v2")
        ref = hpa["spec"]["scaleTargetRef"]
        self.assertEqual((ref["kind"], ref["name"]),
                         ("Deployment", self.deploy["metadata"]["name"]))
        self.assertGreaterEqual(hpa["spec"]["minReplicas"],
                                self.deploy["spec"]["replicas"])
        [metric] = hpa["spec"]["metrics"]
        self.assertEqual(metric["type"], "Pods")
        name = metric["pods"]["metric"]["name"]
        self.assertEqual(name, "metalserve_queue_depth_rows")
        if ARGS.metrics_source:
            # Every source file of the metrics module (the families are
            # built in more than one file).
            text = ""
            for file in sorted(os.listdir(ARGS.metrics_source)):
                if file.endswith(".cc"):
                    with open(os.path.join(ARGS.metrics_source, file)) as f:
                        text += f.read()
            self.assertIn(f'"{name}"', text,
                          "the server does not export the HPA's metric")


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--server", default="",
                   help="metalserve binary; its --helpfull must define every flag")
    p.add_argument("--metrics_source", default="",
                   help="the server/metrics folder, to check metric names")
    ARGS, rest = p.parse_known_args()
    deploy_common.run_tests([sys.argv[0], *rest])


if __name__ == "__main__":
    main()
