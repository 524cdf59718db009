#!/usr/bin/python3
"""The KServe v2 REST API (--http_address, docs/rest.md) of the real server
process, serving the identity model (float32 [rows, 4]) on free 127.0.0.1
ports, called with curl and with Python's urllib as a user would:

  * every endpoint: health live/ready, server and model metadata (with and
    without /versions/1), model ready, infer with JSON (flat and nested) and
    with Triton's binary tensor extension both ways;
  * bad input answered {"error": ...} with 400/404/405/411/413;
  * readiness 503 from the moment drain begins (SIGTERM with
    --drain_grace), while infer is still served, as grpc.health.v1 does;
  * TLS with the gRPC certificates (--tls_cert/--tls_key), and mutual TLS
    (--tls_client_ca): no client certificate, no answer.

Needs /usr/bin/python3, curl and openssl; a missing tool, binary or model is
a failure, not a skip. Everything it starts is stopped; every wait is
bounded.
"""
import argparse
import json
import os
import shutil
import signal
import ssl
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "testing"))
from proc_util import Process, free_port, tail, wait_for  # noqa: E402
from lifecycle_test import make_pki  # noqa: E402

ARGS = None


def infer_body(rows=2, nested=False):
    values = [float(i) for i in range(rows * 4)]
    data = [values[r * 4:(r + 1) * 4] for r in range(rows)] if nested else values
    return {"id": "q1", "inputs": [{"name": "input", "shape": [rows, 4],
                                    "datatype": "FP32", "data": data}]}


class RestServer(object):
    """build/metalserve with REST on a free port; stopped by stop()."""

    def __init__(self, tmp, name, *flags, scheme="http"):
        self.port = free_port()
        self.base = f"{scheme}://127.0.0.1:{self.port}"
        self.log = os.path.join(tmp, f"{name}.log")
        self.proc = Process([ARGS.server, f"--model={ARGS.model}", "--device=cpu",
                             "--threads=1", f"--address=127.0.0.1:{free_port()}",
                             f"--http_address=127.0.0.1:{self.port}", "--metrics_address=",
                             "--monitor_log_interval=0", *flags], self.log)

    def wait_ready(self, probe):
        def check():
            if not self.proc.alive():
                raise AssertionError("server exited:\n" + tail(self.log))
            return probe()
        wait_for("REST ready", check, time.monotonic() + 90)

    def stop(self):
        self.proc.stop()


def urlopen(url, body=None, headers=None, context=None, method=None):
    """(status, headers, body bytes) of one request; HTTP errors included."""
    req = urllib.request.Request(url, data=body, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10, context=context) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def curl(*args):
    """(status, body) of `curl args`; status 0 when curl itself failed."""
    out = subprocess.run([ARGS.curl, "-sS", "--max-time", "10", "-w", "\n%{http_code}",
                          *args], capture_output=True, text=True, timeout=30)
    body, _, code = out.stdout.rpartition("\n")
    return int(code or 0), body


class Plain(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="metalserve_rest_")
        cls.server = RestServer(cls.tmp, "plain", "--drain_grace=60s")
        cls.server.wait_ready(
            lambda: urlopen(cls.server.base + "/v2/health/ready")[0] == 200)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def url(self, path):
        return self.server.base + path

    def test_1_every_get_endpoint_with_curl_and_urllib(self):
        for path, want in [("/v2/health/live", {"live": True}),
                           ("/v2/health/ready", {"ready": True}),
                           ("/v2/models/identity/ready", {"name": "identity", "ready": True}),
                           ("/v2/models/identity/versions/1/ready",
                            {"name": "identity", "ready": True})]:
            status, body = curl(self.url(path))
            self.assertEqual((status, json.loads(body)), (200, want), path)
            status, _, raw = urlopen(self.url(path))
            self.assertEqual((status, json.loads(raw)), (200, want), path)
        status, body = curl(self.url("/v2"))
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body)["name"], "metalserve")
        for path in ("/v2/models/identity", "/v2/models/identity/versions/1"):
            status, _, raw = urlopen(self.url(path))
            meta = json.loads(raw)
            self.assertEqual(status, 200)
            self.assertEqual(meta["inputs"], [{"name": "input", "datatype": "FP32",
                                               "shape": [-1, 4]}])
            self.assertEqual(meta["versions"], ["1"])

    def test_2_json_infer_flat_and_nested(self):
        for nested in (False, True):
            status, _, raw = urlopen(self.url("/v2/models/identity/infer"),
                                     json.dumps(infer_body(2, nested)).encode(),
                                     {"Content-Type": "application/json"})
            self.assertEqual(status, 200, raw)
            out = json.loads(raw)
            self.assertEqual(out["id"], "q1")
            self.assertEqual(out["outputs"][0]["shape"], [2, 4])
            self.assertEqual(out["outputs"][0]["data"], [float(i) for i in range(8)])
        status, body = curl("-X", "POST", "-H", "Content-Type: application/json",
                            "--data-binary", json.dumps(infer_body(1)),
                            self.url("/v2/models/identity/versions/1/infer"))
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["outputs"][0]["data"], [0.0, 1.0, 2.0, 3.0])

    def test_3_binary_extension_both_ways(self):
        header = json.dumps({
            "inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32",
                        "parameters": {"binary_data_size": 16}}],
            "outputs": [{"name": "output", "parameters": {"binary_data": True}}]}).encode()
        status, headers, raw = urlopen(
            self.url("/v2/models/identity/infer"), header + struct.pack("<4f", 1, 2, 3, 4.5),
            {"Inference-Header-Content-Length": str(len(header)),
             "Content-Type": "application/octet-stream"})
        self.assertEqual(status, 200, raw)
        n = int(headers["Inference-Header-Content-Length"])
        meta = json.loads(raw[:n])
        self.assertEqual(meta["outputs"][0]["parameters"], {"binary_data_size": 16})
        self.assertEqual(struct.unpack("<4f", raw[n:]), (1.0, 2.0, 3.0, 4.5))
        path = os.path.join(self.tmp, "body.bin")
        with open(path, "wb") as f:
            f.write(header + struct.pack("<4f", 1, 2, 3, 4.5))
        out = subprocess.run(
            [ARGS.curl, "-sS", "--max-time", "10", "-D", "-", "--data-binary", "@" + path,
             "-H", f"Inference-Header-Content-Length: {len(header)}",
             self.url("/v2/models/identity/infer")], capture_output=True, timeout=30)
        self.assertIn(b"200 OK", out.stdout)
        self.assertTrue(out.stdout.endswith(struct.pack("<4f", 1, 2, 3, 4.5)))

    def test_4_bad_input_statuses(self):
        infer = self.url("/v2/models/identity/infer")
        cases = [
            ("unknown model", "/v2/models/other/infer", infer_body(1), 404, "'other'"),
            ("bytes", None, {"inputs": [{"name": "input", "shape": [1, 4],
                                         "datatype": "BYTES", "data": ["a"] * 4}]},
             400, "'BYTES' is not supported"),
            ("wrong count", None, {"inputs": [{"name": "input", "shape": [1, 4],
                                               "datatype": "FP32", "data": [1, 2]}]},
             400, "data has 2 values"),
            ("wrong dtype", None, {"inputs": [{"name": "input", "shape": [1, 4],
                                               "datatype": "INT64", "data": [1, 2, 3, 4]}]},
             400, "dtype is int64"),
            ("wrong name", None, {"inputs": [{"name": "x", "shape": [1, 4],
                                              "datatype": "FP32", "data": [1, 2, 3, 4]}]},
             400, "inputs[0].name 'x'"),
        ]
        for what, path, body, want, text in cases:
            status, _, raw = urlopen(self.url(path) if path else infer, json.dumps(body).encode())
            self.assertEqual(status, want, what)
            self.assertIn(text, json.loads(raw)["error"], what)
        status, _, raw = urlopen(infer, b"{not json")
        self.assertEqual(status, 400)
        self.assertIn("not valid JSON", json.loads(raw)["error"])
        self.assertEqual(urlopen(infer)[0], 405)  # GET on infer
        status, body = curl("-X", "POST", "-H", "Transfer-Encoding: chunked",
                            "--data-binary", "{}", infer)
        self.assertEqual(status, 411, body)
        big = os.path.join(self.tmp, "big.json")
        with open(big, "wb") as f:
            f.write(b" " * (65 << 20))  # over the default 64 MiB --max_message_bytes
        status, body = curl("-X", "POST", "--data-binary", "@" + big, infer)
        self.assertEqual(status, 413, body)

    def test_9_readiness_503_once_drain_begins_while_infer_still_served(self):
        self.server.proc.send_signal(signal.SIGTERM)  # --drain_grace=60s follows
        wait_for("ready 503", lambda: urlopen(self.url("/v2/health/ready"))[0] == 503,
                 time.monotonic() + 20)
        status, _, raw = urlopen(self.url("/v2/health/ready"))
        self.assertEqual(json.loads(raw), {"ready": False})
        status, body = curl(self.url("/v2/health/ready"))
        self.assertEqual(status, 503)
        self.assertEqual(urlopen(self.url("/v2/health/live"))[0], 200)
        status, _, _ = urlopen(self.url("/v2/models/identity/infer"),
                               json.dumps(infer_body(1)).encode())
        self.assertEqual(status, 200)


class Tls(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="metalserve_rest_tls_")
        make_pki(cls.tmp)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def start(self, name, *flags):
        p = lambda n: os.path.join(self.tmp, n)  # noqa: E731
        server = RestServer(self.tmp, name, f"--tls_cert={p('server.pem')}",
                            f"--tls_key={p('server.key')}", *flags, scheme="https")
        self.addCleanup(server.stop)
        return server

    def test_tls_serves_with_the_grpc_certificate(self):
        server = self.start("tls")
        ca = os.path.join(self.tmp, "ca.pem")
        ctx = ssl.create_default_context(cafile=ca)
        server.wait_ready(lambda: urlopen(server.base + "/v2/health/ready", context=ctx)[0] == 200)
        status, body = curl("--cacert", ca, server.base + "/v2/models/identity/infer",
                            "--data-binary", json.dumps(infer_body(1)))
        self.assertEqual(status, 200, body)
        plain = subprocess.run([ARGS.curl, "-sS", "--max-time", "5",
                                f"http://127.0.0.1:{server.port}/v2/health/live"],
                               capture_output=True, timeout=30)
        self.assertNotIn(b'"live"', plain.stdout)

    def test_mutual_tls_requires_a_client_certificate(self):
        p = lambda n: os.path.join(self.tmp, n)  # noqa: E731
        server = self.start("mtls", f"--tls_client_ca={p('ca.pem')}")
        with_cert = ["--cacert", p("ca.pem"), "--cert", p("client.pem"), "--key", p("client.key")]
        server.wait_ready(lambda: curl(*with_cert, server.base + "/v2/health/ready")[0] == 200)
        status, _ = curl("--cacert", p("ca.pem"), server.base + "/v2/health/ready")
        self.assertNotEqual(status, 200)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--curl", default=shutil.which("curl") or "/usr/bin/curl")
    ARGS, rest = parser.parse_known_args()
    for path in (ARGS.server, ARGS.model, ARGS.curl, shutil.which("openssl") or ""):
        if not os.path.exists(path):
            print(f"missing: {path or 'openssl'}", file=sys.stderr)
            return 1
    prog = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    return 0 if prog.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
