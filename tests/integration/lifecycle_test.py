#!/usr/bin/python3
"""Promises of the real server process (server/main.cc) that only its flags
and signal handling keep, each checked against build/metalserve serving
tiny_cnn on free 127.0.0.1 ports:

  * metalserve_ready 0 and no health answer until the model is loaded;
  * after SIGTERM, during --drain_grace: health NOT_SERVING for "" and
    "metalserve.v1.Inference", metalserve_ready 0, Predict still served;
  * SIGINT drains and exits 0 like SIGTERM;
  * SIGUSR1 writes --metrics_dump while serving, each time with the
    figures of that moment (and once more at exit); SIGHUP without a
    repository is logged and ignored;
  * the default --drain_grace is 0: no grace period, a prompt exit;
  * the default --max_message_bytes is 64 MiB: 40 MiB reaches the service
    (INVALID_ARGUMENT from its checks, not gRPC's 4 MiB default), 65 MiB is
    refused by gRPC with RESOURCE_EXHAUSTED;
  * --tls_cert/--tls_key serve TLS (a plaintext client fails), and
    --tls_client_ca requires a client certificate from that CA.

Needs /usr/bin/python3 with grpcio and grpc_tools, and openssl. A missing
binary, model or tool is a failure, not a skip. Everything it starts is
stopped; every wait is bounded.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "testing"))
from proc_util import Process, compile_stubs, free_port, http_get, tail, wait_for  # noqa: E402

ARGS = None
MIB = 1 << 20


def make_pki(d):
    """CA, server certificate for localhost/127.0.0.1, client certificate."""
    key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
    with open(os.path.join(d, "server.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    with open(os.path.join(d, "client.ext"), "w") as f:
        f.write("extendedKeyUsage=clientAuth\n")
    cmds = [f"openssl req -x509 {key} -keyout ca.key -out ca.pem -days 2 -subj /CN=test-ca"]
    for name in ("server", "client"):
        cmds += [f"openssl req {key} -keyout {name}.key -out {name}.csr -subj /CN={name}",
                 f"openssl x509 -req -in {name}.csr -CA ca.pem -CAkey ca.key "
                 f"-CAcreateserial -days 2 -extfile {name}.ext -out {name}.pem"]
    for c in cmds:
        subprocess.run(c.split(), cwd=d, check=True, timeout=30, capture_output=True)


class Lifecycle(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="metalserve_lifecycle_")
        compile_stubs(ARGS.proto_dir, cls.tmp, health_package="lifecycle_health")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.server = None

    def tearDown(self):
        if self.server is not None:
            self.server.kill()

    def start(self, *flags, metrics=True):
        """Starts the server; returns its gRPC port once it logs ready."""
        port = free_port()
        self.metrics_port = free_port() if metrics else 0
        self.log = os.path.join(self.tmp, f"server-{self.id().split('.')[-1]}.log")
        argv = [ARGS.server, f"--model={ARGS.model}", f"--address=127.0.0.1:{port}", "--http_address=",
                "--device=cpu", "--threads=1", "--monitor_log_interval=0",
                f"--metrics_address=127.0.0.1:{self.metrics_port}" if metrics
                else "--metrics_address=", *flags]
        self.server = Process(argv, self.log)
        wait_for("the server's ready line",
                 lambda: self.assertTrue(self.server.alive(), tail(self.log))
                 or "ready: gRPC on" in tail(self.log, 400),
                 time.monotonic() + 90)
        return port

    def ready_gauge(self):
        _, body = http_get(f"http://127.0.0.1:{self.metrics_port}/metrics")
        line = next(l for l in body.splitlines() if l.startswith("metalserve_ready "))
        return float(line.split()[1])

    def wait_exit(self, within_s):
        try:
            rc = self.server.wait(timeout=within_s)
        except subprocess.TimeoutExpired:
            self.fail(f"server still running {within_s} s after the signal:\n" +
                      tail(self.log))
        self.assertEqual(rc, 0, tail(self.log))
        self.assertIn("exit", tail(self.log, 5))

    @staticmethod
    def predict_request(data_bytes=4 * 3 * 8 * 8):
        from metalserve.v1 import inference_pb2
        req = inference_pb2.PredictRequest()
        t = req.inputs.add(name="input", dtype=inference_pb2.DATA_TYPE_FLOAT32,
                           shape=[1, 3, 8, 8])
        t.data = bytes(data_bytes)
        return req

    def test_sigterm_reports_not_serving_and_ready_0_while_still_serving(self):
        import grpc
        from lifecycle_health import health_pb2, health_pb2_grpc
        from metalserve.v1 import inference_pb2_grpc
        port = self.start("--drain_grace=5s")
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        health = health_pb2_grpc.HealthStub(channel)
        stub = inference_pb2_grpc.InferenceStub(channel)
        services = ("", "metalserve.v1.Inference")

        def statuses():
            return [health.Check(health_pb2.HealthCheckRequest(service=s), timeout=5).status
                    for s in services]
        SERVING = health_pb2.HealthCheckResponse.SERVING
        NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
        self.assertEqual(statuses(), [SERVING, SERVING])
        self.assertEqual(self.ready_gauge(), 1)
        self.server.send_signal(signal.SIGTERM)
        t_term = time.monotonic()
        wait_for("health NOT_SERVING after SIGTERM",
                 lambda: statuses() == [NOT_SERVING, NOT_SERVING], t_term + 4, 0.02)
        self.assertEqual(self.ready_gauge(), 0)
        self.assertEqual(len(stub.Predict(self.predict_request(), timeout=5).outputs), 1)
        self.assertLess(time.monotonic() - t_term, 5, "checks ran past the grace")
        self.assertTrue(self.server.alive(), "exited inside --drain_grace")
        channel.close()
        self.wait_exit(30)

    def test_not_serving_and_ready_0_until_the_model_is_loaded(self):
        """Metrics listen from start-up; mobilenet_v2 takes a second or two
        to load and warm up. Every probe whose result the log
        shows was taken before "loaded in" must say not ready: gauge 0, and
        no health answer (gRPC is not listening yet)."""
        import grpc
        from lifecycle_health import health_pb2, health_pb2_grpc
        model = os.path.join(os.path.dirname(ARGS.model), "mobilenet_v2.pt")
        port, self.metrics_port = free_port(), free_port()
        self.log = os.path.join(self.tmp, "server-loading.log")
        self.server = Process([ARGS.server, f"--model={model}", "--optimize=none",
                               "--max_batch_size=4",
                               f"--address=127.0.0.1:{port}", "--http_address=", "--device=cpu",
                               f"--metrics_address=127.0.0.1:{self.metrics_port}",
                               "--threads=1", "--monitor_log_interval=0"], self.log)
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        health = health_pb2_grpc.HealthStub(channel)
        probes_during_load = 0
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            self.assertTrue(self.server.alive(), tail(self.log))
            try:
                gauge = self.ready_gauge()
            except OSError:
                gauge = None  # metrics not listening yet
            try:
                status = health.Check(health_pb2.HealthCheckRequest(), timeout=0.5).status
            except grpc.RpcError as e:
                status = e.code()
            if "loaded in" not in tail(self.log, 400):  # read after both probes
                probes_during_load += 1
                self.assertIn(gauge, (None, 0), "metalserve_ready 1 before the model loaded")
                self.assertIn(status, (grpc.StatusCode.UNAVAILABLE,
                                       grpc.StatusCode.DEADLINE_EXCEEDED),
                              "health answered before the model loaded")
            elif gauge == 1 and status == health_pb2.HealthCheckResponse.SERVING:
                break
            time.sleep(0.05)
        else:
            self.fail("never became ready:\n" + tail(self.log))
        channel.close()
        self.assertGreater(probes_during_load, 0, "no probe landed during the load")
        print(f"{probes_during_load} probes during the model load said not ready")

    def test_sigint_drains_and_exits_zero(self):
        self.start(metrics=False)
        self.server.send_signal(signal.SIGINT)
        self.wait_exit(30)
        self.assertIn(f"signal {int(signal.SIGINT)}: health NOT_SERVING", tail(self.log))

    def test_sigusr1_dumps_the_metrics_and_sighup_alone_is_ignored(self):
        import grpc
        from metalserve.v1 import inference_pb2_grpc
        dump = os.path.join(self.tmp, "dump.prom")
        if os.path.exists(dump):
            os.remove(dump)
        port = self.start(f"--metrics_dump={dump}", metrics=False)

        def requests_in_dump():
            with open(dump) as f:
                return sum(float(l.split()[-1]) for l in f.read().splitlines()
                           if l.startswith("metalserve_requests_total{")
                           and 'code="OK"' in l)

        def dumped_again(before):
            def check():
                return os.path.exists(dump) and os.stat(dump).st_mtime_ns != before
            return check

        self.server.send_signal(signal.SIGUSR1)
        wait_for("the first dump", dumped_again(None), time.monotonic() + 10)
        self.assertEqual(requests_in_dump(), 0)
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        stub = inference_pb2_grpc.InferenceStub(channel)
        for _ in range(3):
            stub.Predict(self.predict_request(), timeout=30)
        channel.close()
        first = os.stat(dump).st_mtime_ns
        self.server.send_signal(signal.SIGUSR1)
        wait_for("a second dump", dumped_again(first), time.monotonic() + 10)
        self.assertEqual(requests_in_dump(), 3)
        self.server.send_signal(signal.SIGHUP)
        wait_for("the SIGHUP log line",
                 lambda: "SIGHUP ignored: no --model_repository" in tail(self.log, 400),
                 time.monotonic() + 10)
        self.assertTrue(self.server.alive(), tail(self.log))
        self.server.send_signal(signal.SIGTERM)
        self.wait_exit(30)

    def test_default_drain_grace_is_zero(self):
        self.start(metrics=False)
        t_term = time.monotonic()
        self.server.send_signal(signal.SIGTERM)
        self.wait_exit(30)
        self.assertNotIn("drain grace", tail(self.log), "a grace period was applied")
        self.assertLess(time.monotonic() - t_term, 10)

    def test_default_message_limit_is_64_mib(self):
        import grpc
        from metalserve.v1 import inference_pb2_grpc
        port = self.start(metrics=False)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = inference_pb2_grpc.InferenceStub(channel)
            for size, code in ((40 * MIB, grpc.StatusCode.INVALID_ARGUMENT),
                               (65 * MIB, grpc.StatusCode.RESOURCE_EXHAUSTED)):
                with self.assertRaises(grpc.RpcError) as e:
                    stub.Predict(self.predict_request(size), timeout=30)
                self.assertEqual(e.exception.code(), code,
                                 f"{size // MIB} MiB: {e.exception.details()}")
            self.assertEqual(len(stub.Predict(self.predict_request(), timeout=5).outputs), 1)

    def tls_call(self, port, root=True, client_cert=False, tls=True):
        """The gRPC code of one Predict over TLS (or plaintext)."""
        import grpc
        from metalserve.v1 import inference_pb2_grpc
        pki = self.pki

        def read(name):
            with open(os.path.join(pki, name), "rb") as f:
                return f.read()
        if tls:
            creds = grpc.ssl_channel_credentials(
                read("ca.pem") if root else None,
                read("client.key") if client_cert else None,
                read("client.pem") if client_cert else None)
            channel = grpc.secure_channel(
                f"127.0.0.1:{port}", creds,
                options=[("grpc.ssl_target_name_override", "localhost")])
        else:
            channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        with channel:
            try:
                inference_pb2_grpc.InferenceStub(channel).Predict(
                    self.predict_request(), timeout=10)
                return grpc.StatusCode.OK
            except grpc.RpcError as e:
                return e.code()

    def test_tls_flags_serve_tls_and_require_client_certificates(self):
        import grpc
        self.pki = os.path.join(self.tmp, "pki")
        os.makedirs(self.pki, exist_ok=True)
        make_pki(self.pki)
        tls = [f"--tls_cert={self.pki}/server.pem", f"--tls_key={self.pki}/server.key"]
        port = self.start(*tls, metrics=False)
        self.assertEqual(self.tls_call(port), grpc.StatusCode.OK)
        self.assertEqual(self.tls_call(port, tls=False), grpc.StatusCode.UNAVAILABLE)
        self.server.stop()
        port = self.start(*tls, f"--tls_client_ca={self.pki}/ca.pem", metrics=False)
        self.assertEqual(self.tls_call(port, client_cert=True), grpc.StatusCode.OK)
        self.assertEqual(self.tls_call(port), grpc.StatusCode.UNAVAILABLE)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--proto_dir", required=True)
    ARGS, rest = ap.parse_known_args()
    for path in (ARGS.server, ARGS.model):
        if not os.path.exists(path):
            sys.exit(f"missing: {path}")
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
