#!/usr/bin/python3
"""Every Grafana dashboard query (deploy/grafana/metalserve.json), every alert
rule (deploy/prometheus/alerts.yml) and the prometheus-adapter rule in
docs/fleet.md, evaluated by a real Prometheus that scraped a real metalserve
fed by native Predict, KServe ModelInfer (gRPC) and KServe REST infer
(method http_ModelInfer) traffic.

The test starts, all on 127.0.0.1 with free ports and bounded by --timeout:
  1. build/metalserve serving the tiny_cnn model;
  2. /usr/bin/prometheus scraping it every second as job "metalserve" (with
     the namespace/pod labels a Kubernetes scrape adds) and loading
     alerts.yml;
then sends, with metalserve-bench (gRPC) and urllib (REST), successful calls
over the three and caller errors (an unknown model name: NOT_FOUND) over
each, and checks:
  - each dashboard query and each alert expression (its threshold
    comparison removed) returns series; a query over the per-method families
    (metalserve_requests_total, metalserve_request_duration_seconds) returns
    series for Predict, ModelInfer and http_ModelInfer, either as a `method` label or,
    for a query summed over methods, when restricted to each method in turn;
    latency quantiles are finite numbers;
  - Prometheus evaluates every rule without error;
  - the dashboard's error ratio and MetalserveHighErrorRate both read 0
    while NOT_FOUND calls were counted: caller errors are not server errors;
  - every "by model" panel shows the served model's version (tiny_cnn 1),
    never a name a client sent;
  - the adapter rule returns one series per pod, labelled by pod only.
Every process it started is stopped at the end, pass or fail. A missing
binary, model or Prometheus is a failure, not a skip.
"""

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "testing"))
from proc_util import Process, free_port, http_get, tail, wait_for  # noqa: E402

ARGS = None
METHODS = ("Predict", "ModelInfer", "http_ModelInfer")
# Families with a `method` label: a query over them must see both methods.
PER_METHOD = re.compile(
    r"\b(metalserve_requests_total|metalserve_request_duration_seconds_\w+)\{")
# A trailing threshold comparison of an alert expression.
THRESHOLD = re.compile(r"(?s)^(.*\S)\s*(?:>=|<=|==|!=|>|<)\s*-?[0-9.]+\s*$")
# Expressions that rightly return nothing here: the CPU runtime reports no
# device memory (metalserve_device_memory_bytes is absent until it does).
EMPTY_ON_CPU = {"MetalserveDeviceMemoryNearWatermark", ("Device memory", "A")}
# Families of the model repository, absent under --model: model_metrics_test.py
# evaluates these against a repository server.
REPOSITORY_ONLY = {"MetalserveModelLoadFailed", ("Model versions and their state", "A"),
                   ("Model loads and their outcome", "A")}
POD = "metalserve-0"
N_CALLS = 30        # successful calls per protocol
N_CALLER_ERRORS = 5  # NOT_FOUND calls per protocol
POLL_S = 0.2


def dashboard_queries():
    """[(title, refId, expr)] of every panel target, variables substituted
    as Grafana would for job "metalserve", all instances and all models."""
    path = os.path.join(ARGS.source_dir, "deploy/grafana/metalserve.json")
    with open(path) as f:
        board = json.load(f)
    out = []
    for panel in board["panels"]:
        for t in panel.get("targets", []):
            expr = (t["expr"].replace("$job", "metalserve")
                    .replace("$instance", ".*").replace("$model", ".*")
                    .replace("$__rate_interval", "1m"))
            out.append((panel["title"], t["refId"], expr))
    return out


def alert_rules():
    """{alert name: expr} of deploy/prometheus/alerts.yml."""
    with open(os.path.join(ARGS.source_dir, "deploy/prometheus/alerts.yml")) as f:
        groups = yaml.safe_load(f)["groups"]
    return {r["alert"]: r["expr"].strip() for g in groups for r in g["rules"]}


def restrict(expr, method):
    """`expr` with method="METHOD" added to every per-method selector."""
    return PER_METHOD.sub(lambda m: f'{m.group(1)}{{method="{method}",', expr)


class DashboardAndAlertsSeeBothMethods(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.deadline = time.monotonic() + ARGS.timeout
        cls.tmp = tempfile.mkdtemp(prefix="metalserve_dash_")
        cls.procs = []
        try:
            cls._start()
            cls._send_traffic()
        except BaseException:
            cls._stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls._stop()

    @classmethod
    def _stop(cls):
        for p in reversed(cls.procs):
            p.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def _start(cls):
        for path in (ARGS.server, ARGS.bench, ARGS.model, ARGS.prometheus):
            if not os.path.exists(path):
                raise AssertionError(f"not found: {path}")
        cls.grpc_port, cls.metrics_port = free_port(), free_port()
        cls.http_port = free_port()
        cls.prom_port = free_port()
        server = Process([
            ARGS.server, f"--model={ARGS.model}",
            f"--address=127.0.0.1:{cls.grpc_port}",
            f"--http_address=127.0.0.1:{cls.http_port}",
            f"--metrics_address=127.0.0.1:{cls.metrics_port}",
            "--device=cpu", "--threads=1", "--max_batch_size=4",
            "--max_queue_delay=1ms", "--monitor_log_interval=0",
        ], os.path.join(cls.tmp, "metalserve.log"), name="metalserve")
        cls.procs.append(server)
        cls.server = server
        config = os.path.join(cls.tmp, "prometheus.yml")
        rules = os.path.join(ARGS.source_dir, "deploy/prometheus/alerts.yml")
        with open(config, "w") as f:
            f.write(
                "global:\n"
                "  scrape_interval: 1s\n"
                "  scrape_timeout: 1s\n"
                "  evaluation_interval: 1s\n"
                f"rule_files: ['{rules}']\n"
                "scrape_configs:\n"
                "  - job_name: metalserve\n"
                "    static_configs:\n"
                f"      - targets: ['127.0.0.1:{cls.metrics_port}']\n"
                f"        labels: {{namespace: test, pod: {POD}}}\n")
        cls.procs.append(Process([
            ARGS.prometheus, f"--config.file={config}",
            f"--storage.tsdb.path={os.path.join(cls.tmp, 'tsdb')}",
            f"--web.listen-address=127.0.0.1:{cls.prom_port}",
            "--log.level=warn",
        ], os.path.join(cls.tmp, "prometheus.log"), name="prometheus"))

        def server_ready():
            if not server.alive():
                raise AssertionError("metalserve exited:\n" + tail(server.log_path))
            _, body = http_get(f"http://127.0.0.1:{cls.metrics_port}/metrics")
            return "\nmetalserve_ready 1" in body
        wait_for("metalserve ready", server_ready, cls.deadline, POLL_S)
        wait_for("prometheus ready", lambda: http_get(
            f"http://127.0.0.1:{cls.prom_port}/-/ready")[0] == 200,
            cls.deadline, POLL_S)

    @classmethod
    def _bench(cls, protocol, requests, model_name=""):
        # Explicit shape: no metadata call, so an unknown model name reaches
        # Predict / ModelInfer itself.
        argv = [ARGS.bench, f"--target=127.0.0.1:{cls.grpc_port}",
                f"--protocol={protocol}", f"--requests={requests}",
                "--concurrency=2", "--shape=3,8,8", "--dtype=float32",
                "--input_name=input", "--deadline=20s", "--progress=off"]
        # Calls meant to succeed must all succeed (exit 2 otherwise).
        argv.append(f"--model_name={model_name}" if model_name
                    else "--max_error_rate=0")
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise AssertionError(f"{argv}: exit {r.returncode}\n{r.stdout}{r.stderr}")
        return r.stdout

    @classmethod
    def _rest(cls, requests, model_name="tiny_cnn"):
        """`requests` REST infers of one zero image; their HTTP statuses."""
        body = json.dumps({"inputs": [{"name": "input", "shape": [1, 3, 8, 8],
                                       "datatype": "FP32", "data": [0.0] * 192}]}).encode()
        statuses = []
        for _ in range(requests):
            req = urllib.request.Request(
                f"http://127.0.0.1:{cls.http_port}/v2/models/{model_name}/infer", data=body)
            try:
                with urllib.request.urlopen(req, timeout=20) as r:
                    statuses.append(r.status)
            except urllib.error.HTTPError as e:
                statuses.append(e.code)
        return statuses

    @classmethod
    def _send_traffic(cls):
        # Every series must be in a scrape before its calls are counted: a
        # series first seen with its final count has a rate of zero. Predict's
        # exist from the start; ModelInfer's appear with its first call.
        cls._wait_count('method="Predict",code="OK"', 0)
        cls._bench("kserve", 1)
        if cls._rest(1) != [200]:
            raise AssertionError("the first REST infer failed")
        cls._wait_count('method="ModelInfer",code="NOT_FOUND"', 0)
        cls._wait_count('method="http_ModelInfer",code="NOT_FOUND"', 0)
        for protocol in ("native", "kserve"):
            out = cls._bench(protocol, N_CALLER_ERRORS, model_name="nope")
            if f"NOT_FOUND {N_CALLER_ERRORS}" not in out:
                raise AssertionError(f"expected NOT_FOUND errors:\n{out}")
            cls._bench(protocol, N_CALLS)
        cls._wait_count('method="Predict",code="OK"', N_CALLS)
        if cls._rest(N_CALLER_ERRORS, model_name="nope") != [404] * N_CALLER_ERRORS:
            raise AssertionError("expected 404 from REST infers of another model")
        if cls._rest(N_CALLS) != [200] * N_CALLS:
            raise AssertionError("REST infers failed")
        cls._wait_count('method="ModelInfer",code="OK"', N_CALLS + 1)
        cls._wait_count('method="http_ModelInfer",code="OK"', N_CALLS + 1)

    @classmethod
    def _wait_count(cls, matchers, want):
        promql = f"sum(metalserve_requests_total{{{matchers}}})"
        wait_for(f"{promql} >= {want}",
                 lambda: (cls.values(promql) or [-1])[0] >= want,
                 cls.deadline, POLL_S)

    # --- queries -------------------------------------------------------------

    @classmethod
    def query(cls, promql):
        """Instant query: [(labels dict, value)]."""
        url = (f"http://127.0.0.1:{cls.prom_port}/api/v1/query?" +
               urllib.parse.urlencode({"query": promql}))
        reply = json.loads(http_get(url)[1])
        if reply["status"] != "success":
            raise AssertionError(f"{promql}: {reply}")
        return [(r["metric"], float(r["value"][1])) for r in reply["data"]["result"]]

    @classmethod
    def values(cls, promql):
        return [v for _, v in cls.query(promql)]

    def check_expr(self, what, expr):
        """The checks every dashboard query and alert expression must pass."""
        result = self.query(expr)
        self.assertTrue(result, f"{what}: no series for {expr}")
        if not PER_METHOD.search(expr):
            return
        quantile = "histogram_quantile" in expr
        if any("method" in labels for labels, _ in result):
            by_method = {labels.get("method"): v for labels, v in result}
            for method in METHODS:
                self.assertIn(method, by_method, f"{what}: {expr} -> {result}")
                if quantile:
                    self.assertTrue(math.isfinite(by_method[method]),
                                    f"{what} {method}: {by_method}")
            return
        for method in METHODS:
            narrowed = restrict(expr, method)
            got = self.values(narrowed)
            self.assertTrue(got, f"{what}: no {method} series: {narrowed}")
            if quantile:
                self.assertTrue(all(math.isfinite(v) for v in got),
                                f"{what} {method}: {got}")

    # --- the tests ---------------------------------------------------------------

    def test_every_dashboard_query_sees_both_methods(self):
        queries = dashboard_queries()
        self.assertGreater(len(queries), 15)
        for title, ref, expr in queries:
            with self.subTest(panel=title, ref=ref):
                if (title, ref) in EMPTY_ON_CPU | REPOSITORY_ONLY:
                    continue
                self.check_expr(f"panel {title!r} {ref}", expr)

    def test_every_alert_expression_sees_both_methods(self):
        for name, expr in alert_rules().items():
            with self.subTest(alert=name):
                m = THRESHOLD.match(expr)
                self.assertTrue(m, f"{name}: no threshold in {expr!r}")
                if name in EMPTY_ON_CPU | REPOSITORY_ONLY:
                    continue
                self.check_expr(f"alert {name}", m.group(1))

    def test_per_model_panels_show_the_served_model(self):
        panels = [(t, r, e) for t, r, e in dashboard_queries()
                  if "by model" in t and 'model=""' not in e]
        self.assertGreaterEqual(len(panels), 8)
        for title, ref, expr in panels:
            with self.subTest(panel=title, ref=ref):
                got = {(labels.get("model"), labels.get("version"))
                       for labels, _ in self.query(expr)}
                self.assertEqual(got, {("tiny_cnn", "1")}, expr)

    def test_prometheus_evaluates_every_rule_without_error(self):
        def rules():
            _, body = http_get(f"http://127.0.0.1:{self.prom_port}/api/v1/rules")
            got = [r for g in json.loads(body)["data"]["groups"] for r in g["rules"]]
            done = all(r.get("lastEvaluation", "").startswith("20") for r in got)
            return got if got and done else None
        got = wait_for("every rule evaluated", rules, self.deadline, POLL_S)
        self.assertEqual(sorted(r["name"] for r in got), sorted(alert_rules()))
        for r in got:
            self.assertEqual((r["name"], r["health"], r.get("lastError", "")),
                             (r["name"], "ok", ""))

    def test_error_ratios_leave_caller_errors_out(self):
        caller = self.values('sum(rate(metalserve_requests_total{code="NOT_FOUND"}[5m]))')
        self.assertTrue(caller and caller[0] > 0, f"NOT_FOUND rate: {caller}")
        [dash] = [e for t, _, e in dashboard_queries() if t == "Error ratio (5m)"]
        self.assertEqual(self.values(dash), [0.0], dash)
        alert = THRESHOLD.match(alert_rules()["MetalserveHighErrorRate"]).group(1)
        self.assertEqual(self.values(alert), [0.0], alert)

    def test_adapter_rule_gives_one_series_per_pod(self):
        with open(os.path.join(ARGS.source_dir, "docs/fleet.md")) as f:
            m = re.search(r"metricsQuery: '([^']+)'", f.read())
        self.assertTrue(m, "no metricsQuery in docs/fleet.md")
        promql = (m.group(1).replace("<<.Series>>", "metalserve_queue_depth_rows")
                  .replace("<<.LabelMatchers>>", f'namespace="test",pod=~"{POD}"')
                  .replace("<<.GroupBy>>", "pod"))
        result = self.query(promql)
        self.assertEqual([labels for labels, _ in result], [{"pod": POD}], promql)


def main():
    global ARGS
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--server", required=True, help="build/metalserve")
    p.add_argument("--bench", required=True, help="build/metalserve-bench")
    p.add_argument("--model", required=True, help="tiny_cnn.pt")
    p.add_argument("--source_dir", required=True, help="the repository root")
    p.add_argument("--prometheus", default="/usr/bin/prometheus")
    p.add_argument("--timeout", type=float, default=150,
                   help="seconds for the whole test, start-up included")
    ARGS, rest = p.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
