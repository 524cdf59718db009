#!/usr/bin/python3
"""A real Prometheus server scrapes a real metalserve; the counters it stores
must equal the requests the test sent.

The test starts, all on 127.0.0.1 with free ports and bounded by --timeout:
  1. build/metalserve serving the tiny_cnn model, metrics on its own port;
  2. /usr/bin/prometheus with a generated configuration (scrape every 1 s) and
     a temporary TSDB directory;
then sends a known mix of Predict calls (successes, invalid arguments and
deadlines that expire in the batcher queue) with Python grpcio, and checks
through Prometheus's HTTP query API that metalserve_requests_total per code
and the histogram counts moved by exactly what was sent, and that the
series labelled model="tiny_cnn" (created at zero when the model loaded)
hold them. Every process it
started is stopped at the end, pass or fail.

Needs /usr/bin/python3 with grpcio and grpc_tools (Debian: python3-grpcio,
python3-grpc-tools); the stubs are generated into a temporary directory.
A missing server binary, model or Prometheus is a failure, not a skip.
"""

import argparse
import json
import os
import shutil
import struct
import sys
import tempfile
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "testing"))
from proc_util import Process, compile_stubs, free_port, http_get, tail, wait_for  # noqa: E402

ARGS = None

N_OK = 12          # valid Predict calls, ROWS_OK rows each
ROWS_OK = 4        # = --max_batch_size: each call closes its batch at once
N_INVALID = 6      # rejected by validation: INVALID_ARGUMENT
N_DEADLINE = 4     # 1 row, deadline far shorter than --max_queue_delay
DEADLINE_S = 0.3
QUEUE_DELAY = "5s"  # a lone 1-row request waits this long for company
POLL_S = 0.2       # wait_for interval
QUEUE_SIZE = 64    # --max_queue_size: queue_capacity_rows
MODEL_VERSION = "1"  # what --model serves tiny_cnn.pt as


class PrometheusScrapesMetalserve(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.deadline = time.monotonic() + ARGS.timeout
        cls.tmp = tempfile.mkdtemp(prefix="metalserve_prom_")
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
        for p in reversed(cls.procs):
            p.stop()
        if os.environ.get("METALSERVE_KEEP_TMP"):
            print(f"kept {cls.tmp}", file=sys.stderr)
        else:
            shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def _start(cls):
        for path, what in ((ARGS.server, "server binary"),
                           (ARGS.model, "model"),
                           (ARGS.prometheus, "prometheus")):
            if not os.path.exists(path):
                raise AssertionError(f"{what} not found: {path}")
        cls._load_stubs()

        cls.grpc_port = free_port()
        cls.metrics_port = free_port()
        cls.prom_port = free_port()
        server = Process([
            ARGS.server,
            f"--model={ARGS.model}",
            f"--address=127.0.0.1:{cls.grpc_port}", "--http_address=",
            f"--metrics_address=127.0.0.1:{cls.metrics_port}",
            "--device=cpu", "--threads=1",
            f"--max_batch_size={ROWS_OK}", f"--max_queue_size={QUEUE_SIZE}",
            f"--max_queue_delay={QUEUE_DELAY}",
            "--batching=fixed",  # a lone request waits the whole delay (N_DEADLINE)
            "--monitor_log_interval=0",
        ], os.path.join(cls.tmp, "metalserve.log"), name="metalserve")
        cls.procs.append(server)
        cls.server = server

        config = os.path.join(cls.tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write(
                "global:\n"
                "  scrape_interval: 1s\n"
                "  scrape_timeout: 1s\n"
                "  evaluation_interval: 1s\n"
                "scrape_configs:\n"
                "  - job_name: metalserve\n"
                "    static_configs:\n"
                f"      - targets: ['127.0.0.1:{cls.metrics_port}']\n")
        cls.procs.append(Process([
            ARGS.prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={os.path.join(cls.tmp, 'tsdb')}",
            f"--web.listen-address=127.0.0.1:{cls.prom_port}",
            "--log.level=warn",
        ], os.path.join(cls.tmp, "prometheus.log"), name="prometheus"))

        def server_ready():
            if not server.alive():
                raise AssertionError(
                    "metalserve exited early:\n" + tail(server.log_path))
            _, body = http_get(f"http://127.0.0.1:{cls.metrics_port}/metrics")
            return "\nmetalserve_ready 1" in body

        try:
            wait_for("metalserve to report ready", server_ready, cls.deadline,
                     interval=POLL_S)
        except AssertionError as e:
            raise AssertionError(f"{e}\n--- metalserve log ---\n"
                                 f"{tail(server.log_path)}") from None

        import grpc
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{cls.grpc_port}")
        grpc.channel_ready_future(cls.channel).result(
            timeout=max(1, cls.deadline - time.monotonic()))
        cls.stub = cls.pb2_grpc.InferenceStub(cls.channel)

        wait_for("prometheus to be ready",
                 lambda: http_get(f"http://127.0.0.1:{cls.prom_port}/-/ready")[0] == 200,
                 cls.deadline, interval=POLL_S)

    @classmethod
    def _load_stubs(cls):
        compile_stubs(ARGS.proto_dir, cls.tmp)
        from metalserve.v1 import inference_pb2, inference_pb2_grpc
        cls.pb2 = inference_pb2
        cls.pb2_grpc = inference_pb2_grpc

    # --- helpers -----------------------------------------------------------

    def query(self, promql):
        """Instant query; {frozenset(labels.items()): value}."""
        url = (f"http://127.0.0.1:{self.prom_port}/api/v1/query?" +
               urllib.parse.urlencode({"query": promql}))
        _, body = http_get(url)
        reply = json.loads(body)
        self.assertEqual(reply["status"], "success", body)
        return {frozenset(r["metric"].items()): float(r["value"][1])
                for r in reply["data"]["result"]}

    def scalar(self, promql):
        """Value of a query expected to return at most one series; None if
        it returns none."""
        result = self.query(promql)
        self.assertLessEqual(len(result), 1, result)
        return next(iter(result.values())) if result else None

    def predict(self, rows, shape=None, data_bytes=None, timeout=30.0,
                dtype=None):
        pb2 = self.pb2
        shape = shape or [rows, 3, 8, 8]
        n = 1
        for d in shape:
            n *= d
        data = data_bytes if data_bytes is not None else struct.pack(
            f"<{n}f", *([0.25] * n))
        request = pb2.PredictRequest(inputs=[pb2.Tensor(
            name="input",
            dtype=dtype if dtype is not None else pb2.DATA_TYPE_FLOAT32,
            shape=shape, data=data)])
        import grpc
        try:
            self.stub.Predict(request, timeout=timeout)
            return grpc.StatusCode.OK
        except grpc.RpcError as e:
            return e.code()

    # --- the test ------------------------------------------------------------

    def test_counters_and_histograms_match_requests_sent(self):
        import grpc
        job = 'job="metalserve"'
        # Summed over the model labels: every call is counted once, under
        # tiny_cnn's series once it named the model (all of these do).
        requests = f'sum by (code) (metalserve_requests_total{{{job},method="Predict"}})'
        duration_count = (f'sum(metalserve_request_duration_seconds_count'
                          f'{{{job},method="Predict"}})')
        queue_count = f'sum(metalserve_queue_duration_seconds_count{{{job}}})'
        rows_sum = f'sum(metalserve_batch_size_rows_sum{{{job}}})'
        model = f'{job},model="tiny_cnn",version="{MODEL_VERSION}"'

        def code_values():
            return {dict(k)["code"]: v for k, v in self.query(requests).items()}

        def model_codes():
            return {dict(k)["code"]: v for k, v in self.query(
                f'metalserve_requests_total{{{model},method="Predict"}}').items()}

        # Baseline from Prometheus itself, once it holds a scrape with the
        # pre-created per-code series.
        wait_for("a first scrape",
                 lambda: "OK" in code_values() and self.scalar(f'up{{{job}}}') == 1,
                 self.deadline, interval=POLL_S)
        before = code_values()
        before_model = model_codes()
        # Created when the model loaded, at zero, before any traffic.
        self.assertEqual(self.scalar(f'metalserve_queue_depth_rows{{{model}}}'), 0)
        self.assertEqual(self.scalar(f'metalserve_queue_capacity_rows{{{model}}}'),
                         QUEUE_SIZE)
        before_duration = self.scalar(duration_count) or 0
        before_queue = self.scalar(queue_count) or 0
        before_rows = self.scalar(rows_sum) or 0

        sent = {"OK": 0, "INVALID_ARGUMENT": 0, "DEADLINE_EXCEEDED": 0}
        for _ in range(N_OK):
            got = self.predict(ROWS_OK)
            self.assertEqual(got, grpc.StatusCode.OK)
            sent["OK"] += 1
        f64 = struct.pack("<192d", *([0.25] * 192))
        invalid = [
            dict(rows=1, shape=[1, 3, 8, 9]),                  # wrong shape
            dict(rows=1, data_bytes=b"\0" * 10),               # short data
            dict(rows=1, shape=[1, 3, 8]),                     # wrong rank
            dict(rows=1, shape=[1, 4, 8, 8]),                  # wrong channels
            dict(rows=1, dtype=self.pb2.DATA_TYPE_FLOAT64, data_bytes=f64),
            dict(rows=2, shape=[2, 3, 9, 8]),
        ]
        for kwargs in invalid[:N_INVALID]:
            got = self.predict(**kwargs)
            self.assertEqual(got, grpc.StatusCode.INVALID_ARGUMENT, kwargs)
            sent["INVALID_ARGUMENT"] += 1
        for _ in range(N_DEADLINE):
            got = self.predict(1, timeout=DEADLINE_S)
            self.assertEqual(got, grpc.StatusCode.DEADLINE_EXCEEDED)
            sent["DEADLINE_EXCEEDED"] += 1
        total = sum(sent.values())

        def deltas():
            now = code_values()
            return {c: now.get(c, 0) - before.get(c, 0) for c in now}

        expected = {c: float(n) for c, n in sent.items()}

        # Wait until every call is counted under some code, then compare per
        # code: a wrong code fails at once rather than at the timeout.
        try:
            wait_for("Prometheus to hold the new counts",
                     lambda: sum(deltas().values()) >= total, self.deadline,
                     interval=POLL_S)
        except AssertionError:
            self.fail(f"per-code deltas in Prometheus {deltas()} != sent {sent}"
                      f"\n--- metalserve log ---\n{tail(self.server.log_path)}")

        d = deltas()
        for code, n in expected.items():
            self.assertEqual(d.get(code), n,
                             f"code {code}: Prometheus deltas {d}, sent {sent}")
        self.assertEqual(sum(d.values()), total,
                         f"unexpected codes counted: {d}")

        # The histograms: each reads its own scrape, so wait for each value.
        def moved_by(promql, before_value, want):
            return lambda: (self.scalar(promql) or 0) - before_value == want
        checks = [
            ("request_duration_seconds_count == calls sent",
             moved_by(duration_count, before_duration, total)),
            # Only calls that reached a batch waited in the queue and ran.
            ("queue_duration_seconds_count == successful calls",
             moved_by(queue_count, before_queue, N_OK)),
            ("batch_size_rows_sum == rows of successful calls",
             moved_by(rows_sum, before_rows, N_OK * ROWS_OK)),
            ("inflight_requests == 0 once every call returned",
             lambda: self.scalar(f'metalserve_inflight_requests{{{job}}}') == 0),
        ]
        for what, check in checks:
            wait_for(what, check, self.deadline, interval=POLL_S)

        # Each of these calls named tiny_cnn (empty = the only model), so
        # each is in tiny_cnn's labelled series, and so are its batches.
        now_model = model_codes()
        self.assertEqual({c: now_model.get(c, 0) - before_model.get(c, 0) for c in sent},
                         expected, "tiny_cnn's labelled series")
        self.assertEqual(self.scalar(
            f'metalserve_batch_size_rows_sum{{{model}}}') - before_rows, N_OK * ROWS_OK)


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True, help="build/metalserve")
    parser.add_argument("--model", required=True, help="tiny_cnn.pt")
    parser.add_argument("--proto_dir", required=True, help="the repo's proto/")
    parser.add_argument("--prometheus", default="/usr/bin/prometheus")
    parser.add_argument("--timeout", type=float, default=120,
                        help="seconds for the whole test, start-up included")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
