#!/usr/bin/python3
"""Metrics per model version, end to end: a real Prometheus scrapes a real
metalserve serving a model repository (a copy of build/model_repository:
identity and tiny_cnn, tiny_cnn with its own max_queue_size), and

  * before any traffic, each loaded version's series exist at zero, labelled
    model and version (queue capacity from the model's own config.json);
  * native Predict (tiny_cnn), KServe ModelInfer over gRPC and REST
    (identity) are counted in their version's requests_total, latency,
    queue and batch series, each under its own model and no other;
  * requests naming models that are not loaded (NOT_FOUND) create no series
    (no model label a client can choose): they are counted without model
    labels;
  * after tiny_cnn is unloaded and has drained, /metrics holds none of its
    series, Prometheus's instant queries return none (staleness), and
    identity's are untouched;
  * a load that fails (a corrupt identity version 2) creates no series for
    that version, and the dashboard's model state and load panels and the
    MetalserveModelLoadFailed alert (read from deploy/, which
    dashboard_alerts_test.py cannot check under --model) name it.

Everything runs on 127.0.0.1 with free ports, bounded by --timeout; every
process it starts is stopped, pass or fail. Needs /usr/bin/python3 with
grpcio and grpc_tools and /usr/bin/prometheus; a missing binary, repository
or Prometheus is a failure, not a skip.
"""
import argparse
import json
import math
import os
import re
import shutil
import struct
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

import grpc
import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "testing"))
from proc_util import Process, compile_stubs, free_port, http_get, tail, wait_for  # noqa: E402

ARGS = None
N = 8              # successful calls per protocol
N_UNKNOWN = 4      # calls per protocol naming a model that is not loaded
TINY_QUEUE = 48    # tiny_cnn's own max_queue_size (config.json)
FLAG_QUEUE = 256   # --max_queue_size: identity's
POLL_S = 0.2
# The families whose series belong to one model version.
MODEL_FAMILIES = (
    "metalserve_requests_total", "metalserve_request_duration_seconds",
    "metalserve_queue_duration_seconds", "metalserve_compute_duration_seconds",
    "metalserve_batch_size_rows", "metalserve_batch_padding_rows_total",
    "metalserve_batches_cut_total", "metalserve_batch_cut_rows_total",
    "metalserve_batches_inline_total", "metalserve_compute_stage_seconds_total",
    "metalserve_compute_stage_batches_total", "metalserve_compute_staging_reused_total",
    "metalserve_batches_total",
    "metalserve_queue_depth_rows", "metalserve_queue_capacity_rows")


class ModelMetrics(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.deadline = time.monotonic() + ARGS.timeout
        cls.tmp = tempfile.mkdtemp(prefix="metalserve_model_metrics_")
        cls.procs = []
        try:
            cls._start()
        except BaseException:
            cls._stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls._stop()

    @classmethod
    def _stop(cls):
        if getattr(cls, "channel", None) is not None:
            cls.channel.close()
        for p in reversed(cls.procs):
            p.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def _start(cls):
        for path in (ARGS.server, ARGS.repository, ARGS.prometheus):
            if not os.path.exists(path):
                raise AssertionError(f"not found: {path}")
        compile_stubs(ARGS.proto_dir, cls.tmp,
                      protos=("inference/grpc_service.proto", "metalserve/v1/inference.proto"))
        global kpb, kgrpc, npb, ngrpc
        from inference import grpc_service_pb2 as kpb, grpc_service_pb2_grpc as kgrpc
        from metalserve.v1 import inference_pb2 as npb, inference_pb2_grpc as ngrpc
        root = cls.root = os.path.join(cls.tmp, "repository")
        shutil.copytree(ARGS.repository, root)
        config = os.path.join(root, "tiny_cnn", "config.json")
        with open(config) as f:
            c = json.load(f)
        c["max_queue_size"] = TINY_QUEUE
        with open(config, "w") as f:
            json.dump(c, f)
        port, cls.http_port = free_port(), free_port()
        cls.metrics_port, cls.prom_port = free_port(), free_port()
        cls.server = Process(
            [ARGS.server, f"--model_repository={root}", "--model_control=explicit",
             f"--address=127.0.0.1:{port}", f"--http_address=127.0.0.1:{cls.http_port}",
             f"--metrics_address=127.0.0.1:{cls.metrics_port}", "--device=cpu",
             "--threads=1", "--cache_dir=none", "--monitor_log_interval=0",
             "--max_batch_size=8", "--max_queue_delay=1ms",
             f"--max_queue_size={FLAG_QUEUE}"],
            os.path.join(cls.tmp, "metalserve.log"), name="metalserve")
        cls.procs.append(cls.server)
        prom_config = os.path.join(cls.tmp, "prometheus.yml")
        with open(prom_config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: metalserve\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{cls.metrics_port}']\n")
        cls.procs.append(Process(
            [ARGS.prometheus, f"--config.file={prom_config}",
             f"--storage.tsdb.path={os.path.join(cls.tmp, 'tsdb')}",
             f"--web.listen-address=127.0.0.1:{cls.prom_port}", "--log.level=warn"],
            os.path.join(cls.tmp, "prometheus.log"), name="prometheus"))
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        cls.kserve = kgrpc.GRPCInferenceServiceStub(cls.channel)
        cls.native = ngrpc.InferenceStub(cls.channel)

        def ready():
            assert cls.server.alive(), "server exited:\n" + tail(cls.server.log_path)
            return cls.kserve.ServerReady(kpb.ServerReadyRequest(), timeout=2).ready
        wait_for("metalserve ready", ready, cls.deadline, POLL_S)
        wait_for("prometheus ready", lambda: http_get(
            f"http://127.0.0.1:{cls.prom_port}/-/ready")[0] == 200, cls.deadline, POLL_S)

    # --- clients ---------------------------------------------------------------

    def predict(self, model):
        t = npb.Tensor(name="input", dtype=npb.DATA_TYPE_FLOAT32, shape=[1, 3, 8, 8],
                       data=struct.pack("<192f", *([0.25] * 192)))
        try:
            self.native.Predict(npb.PredictRequest(model_name=model, inputs=[t]), timeout=20)
            return "OK"
        except grpc.RpcError as e:
            return e.code().name

    def model_infer(self, model):
        req = kpb.ModelInferRequest(model_name=model)
        req.inputs.add(name="input", datatype="FP32", shape=[1, 4])
        req.raw_input_contents.append(struct.pack("<4f", 1, 2, 3, 4))
        try:
            self.kserve.ModelInfer(req, timeout=20)
            return "OK"
        except grpc.RpcError as e:
            return e.code().name

    def rest_infer(self, model):
        body = json.dumps({"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32",
                                       "data": [1, 2, 3, 4]}]}).encode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.http_port}/v2/models/{model}/infer", data=body)
        try:
            with urllib.request.urlopen(req, timeout=20) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    # --- Prometheus and /metrics ----------------------------------------------

    def query(self, promql):
        """Instant query: {frozenset(labels.items()): value}."""
        url = (f"http://127.0.0.1:{self.prom_port}/api/v1/query?" +
               urllib.parse.urlencode({"query": promql}))
        reply = json.loads(http_get(url)[1])
        self.assertEqual(reply["status"], "success", reply)
        return {frozenset(r["metric"].items()): float(r["value"][1])
                for r in reply["data"]["result"]}

    def value(self, promql):
        """The one value `promql` returns; None when it returns no series."""
        result = self.query(promql)
        self.assertLessEqual(len(result), 1, f"{promql}: {result}")
        return next(iter(result.values())) if result else None

    def wait_value(self, promql, want):
        try:
            wait_for(f"{promql} == {want}", lambda: self.value(promql) == want,
                     self.deadline, POLL_S)
        except AssertionError:
            self.fail(f"{promql} is {self.value(promql)}, want {want}")

    def scraped_model_lines(self, model):
        _, text = http_get(f"http://127.0.0.1:{self.metrics_port}/metrics")
        return [line for line in text.splitlines()
                if line.startswith(MODEL_FAMILIES) and f'model="{model}"' in line]

    # --- the test ----------------------------------------------------------------

    def test_series_follow_each_loaded_version_and_go_with_its_unload(self):
        self.check_created_at_zero_before_traffic()
        self.check_traffic_is_counted_under_its_model_only()
        self.check_unload_removes_the_series()
        self.check_failed_load_shows_in_state_panel_and_alert()

    TINY = 'model="tiny_cnn",version="1"'
    IDENT = 'model="identity",version="1"'

    def check_created_at_zero_before_traffic(self):
        tiny, ident = self.TINY, self.IDENT
        self.wait_value(f'metalserve_queue_capacity_rows{{{tiny}}}', TINY_QUEUE)
        self.wait_value(f'metalserve_queue_capacity_rows{{{ident}}}', FLAG_QUEUE)
        for model, method in (("tiny_cnn", "Predict"), ("identity", "ModelInfer"),
                              ("identity", "http_ModelInfer")):
            self.assertEqual(self.value(
                f'metalserve_requests_total{{model="{model}",version="1",method="{method}",'
                f'code="OK"}}'), 0, method)
        self.assertEqual(self.value(f'metalserve_queue_depth_rows{{{tiny}}}'), 0)

    def check_traffic_is_counted_under_its_model_only(self):
        tiny, ident, ok = self.TINY, self.IDENT, 'code="OK"'
        self.assertEqual([self.predict("tiny_cnn") for _ in range(N)], ["OK"] * N)
        self.assertEqual([self.model_infer("identity") for _ in range(N)], ["OK"] * N)
        self.assertEqual([self.rest_infer("identity") for _ in range(N)], [200] * N)
        unknown = [self.predict(f"hostile-{i}") for i in range(N_UNKNOWN)]
        unknown += [self.model_infer(f"nope-{i}") for i in range(N_UNKNOWN)]
        self.assertEqual(unknown, ["NOT_FOUND"] * (2 * N_UNKNOWN))
        self.assertEqual([self.rest_infer(f"nope-{i}") for i in range(N_UNKNOWN)],
                         [404] * N_UNKNOWN)
        self.wait_value(f'metalserve_requests_total{{{tiny},method="Predict",{ok}}}', N)
        self.wait_value(f'metalserve_requests_total{{{ident},method="ModelInfer",{ok}}}', N)
        self.wait_value(f'metalserve_requests_total{{{ident},method="http_ModelInfer",{ok}}}',
                        N)
        self.wait_value('sum(metalserve_requests_total{model="",code="NOT_FOUND"})',
                        3 * N_UNKNOWN)
        # Each under its own model only.
        self.assertEqual(self.value(f'sum(metalserve_requests_total{{{tiny},'
                                    f'method=~"ModelInfer|http_ModelInfer"}})'), 0)
        self.assertEqual(self.value(f'sum(metalserve_requests_total{{{ident},'
                                    f'method="Predict"}})'), 0)
        self.assertEqual(self.value(f'metalserve_request_duration_seconds_count{{{tiny},'
                                    f'method="Predict"}}'), N)
        self.wait_value(f'metalserve_queue_duration_seconds_count{{{tiny}}}', N)
        self.wait_value(f'metalserve_queue_duration_seconds_count{{{ident}}}', 2 * N)
        self.assertEqual(self.value(f'metalserve_batch_size_rows_sum{{{tiny}}}'), N)
        self.assertEqual(self.value(f'metalserve_batch_size_rows_sum{{{ident}}}'), 2 * N)
        # The dashboard's p99 by model: one finite figure per loaded version.
        p99 = self.query('histogram_quantile(0.99, sum by (le, model, version) '
                         '(rate(metalserve_request_duration_seconds_bucket{model!=""}[1m])))')
        self.assertEqual(sorted(dict(k)["model"] for k in p99), ["identity", "tiny_cnn"])
        self.assertTrue(all(math.isfinite(v) for v in p99.values()), p99)
        # No label value a client chose.
        models = {dict(k).get("model", "") for k in self.query(
            'count by (model) ({__name__=~"metalserve_(requests_total|request_duration_'
            'seconds_count)"})')}
        self.assertEqual(models, {"", "identity", "tiny_cnn"})

    def check_unload_removes_the_series(self):
        self.kserve.RepositoryModelUnload(
            kpb.RepositoryModelUnloadRequest(model_name="tiny_cnn"), timeout=60)
        # Gone from /metrics once drained and freed...
        wait_for("tiny_cnn's series removed from /metrics",
                 lambda: not self.scraped_model_lines("tiny_cnn"), self.deadline, POLL_S)
        # ... so Prometheus marks them stale: instant queries return none.
        wait_for("tiny_cnn's series stale in Prometheus", lambda: not self.query(
            '{__name__=~"metalserve_(requests_total|queue_depth_rows|batch_size_rows_count)",'
            'model="tiny_cnn"}'), self.deadline, POLL_S)
        self.assertEqual(self.value(f'metalserve_requests_total{{{self.IDENT},'
                                    f'method="ModelInfer",code="OK"}}'), N)
        self.assertTrue(self.scraped_model_lines("identity"))
        # The unload itself is counted, under the model that was loaded.
        self.wait_value('metalserve_model_unloads_total{model="tiny_cnn",outcome="ok"}', 1)

    def check_failed_load_shows_in_state_panel_and_alert(self):
        os.makedirs(os.path.join(self.root, "identity", "2"))
        with open(os.path.join(self.root, "identity", "2", "model.pt"), "wb") as f:
            f.write(b"not a TorchScript archive")
        with self.assertRaises(grpc.RpcError):
            self.kserve.RepositoryModelLoad(
                kpb.RepositoryModelLoadRequest(model_name="identity"), timeout=120)
        self.assertEqual(self.model_infer("identity"), "OK")  # version 1 serves
        lines = self.scraped_model_lines("identity")
        self.assertTrue(lines)
        self.assertEqual([l for l in lines if 'version="2"' in l], [])
        panels = dashboard_queries()
        state = self.wait_labels(panels[("Model versions and their state", "A")],
                                 lambda l: l.get("state") == "UNAVAILABLE")
        self.assertIn(("identity", "2", "UNAVAILABLE"),
                      {(l.get("model"), l.get("version"), l.get("state")) for l in state})
        loads = self.wait_labels(panels[("Model loads and their outcome", "A")],
                                 lambda l: l.get("outcome") == "failed")
        self.assertIn(("identity", "failed"), {(l["model"], l["outcome"]) for l in loads})
        alert = re.sub(r"\s*==\s*1\s*$", "", alert_rules()["MetalserveModelLoadFailed"])
        self.assertEqual([(l["model"], l["version"]) for l in self.wait_labels(alert)],
                         [("identity", "2")])

    def wait_labels(self, promql, want=lambda labels: True):
        """The label sets `promql` returns, once one of them satisfies `want`."""
        def labels():
            got = [dict(k) for k in self.query(promql)]
            return got if any(want(l) for l in got) else None
        return wait_for(f"series from {promql}", labels, self.deadline, POLL_S)


def dashboard_queries():
    """{(panel title, refId): expr} of deploy/grafana/metalserve.json, its
    variables substituted as Grafana would for every instance and model."""
    with open(os.path.join(ARGS.source_dir, "deploy/grafana/metalserve.json")) as f:
        board = json.load(f)
    return {(p["title"], t["refId"]): t["expr"].replace("$job", "metalserve")
            .replace("$instance", ".*").replace("$model", ".*")
            .replace("$__rate_interval", "1m")
            for p in board["panels"] for t in p.get("targets", [])}


def alert_rules():
    """{alert name: expr} of deploy/prometheus/alerts.yml."""
    with open(os.path.join(ARGS.source_dir, "deploy/prometheus/alerts.yml")) as f:
        groups = yaml.safe_load(f)["groups"]
    return {r["alert"]: r["expr"].strip() for g in groups for r in g["rules"]}


def main():
    global ARGS
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--server", required=True, help="build/metalserve")
    p.add_argument("--repository", required=True, help="build/model_repository")
    p.add_argument("--proto_dir", required=True, help="the repository's proto/")
    p.add_argument("--source_dir", required=True, help="the source tree (deploy/)")
    p.add_argument("--prometheus", default="/usr/bin/prometheus")
    p.add_argument("--timeout", type=float, default=150,
                   help="seconds for the whole test, start-up included")
    ARGS, rest = p.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
