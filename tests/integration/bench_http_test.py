#!/usr/bin/env python3
"""metalserve-bench --protocol=http (docs/rest.md) against the real server's
REST front end, identity model on free 127.0.0.1 ports:

  * a bounded run in each tensor form (binary and json) gets exactly the
    requests asked for answered OK, the server's own counter
    metalserve_requests_total{method="http_ModelInfer",code="OK"} moves by
    the same number, and the report carries the server's figures;
  * keep-alive: 150 requests at concurrency 4 arrive over at most 4
    connections (peers in the server's access log);
  * --priority travels as parameters["priority"] (out of range: 400, counted
    as INVALID_ARGUMENT with the server's message);
  * a refused connection, a wrong URL and an unknown model end with exit 1
    and a message naming the URL and the reason; no --model_name names the
    flag;
  * --deadline travels as Triton's parameters.timeout and the server
    enforces it: against a server that holds a lone request for 3 s
    (fixed batching), every request is answered DEADLINE_EXCEEDED and the
    server counts it so, never OK.

Every run is bounded by a request count and a subprocess timeout; every
process it starts is stopped."""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testing"))
import proc_util  # noqa: E402
from lifecycle_test import make_pki  # noqa: E402

ARGS = None
REQUESTS = 150


class BenchHttpTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="metalserve-bench-http-")
        cls.http_port = proc_util.free_port()
        cls.metrics_port = proc_util.free_port()
        cls.log = os.path.join(cls.tmp, "server.log")
        cls.server = proc_util.Process(
            [ARGS.server, f"--model={ARGS.model}", "--device=cpu", "--threads=1",
             f"--address=127.0.0.1:{proc_util.free_port()}",
             f"--http_address=127.0.0.1:{cls.http_port}",
             f"--metrics_address=127.0.0.1:{cls.metrics_port}",
             "--priority_levels=2", "--monitor_log_interval=0",
             f"--access_log={os.path.join(cls.tmp, 'access.log')}"], cls.log)
        base = f"http://127.0.0.1:{cls.http_port}"

        def ready():
            assert cls.server.alive(), proc_util.tail(cls.log)
            try:
                status, _ = proc_util.http_get(base + "/v2/health/ready")
            except OSError:
                return False
            return status == 200
        proc_util.wait_for("REST ready", ready, time.monotonic() + 90)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def bench(self, *flags, check=True):
        out = subprocess.run(
            [ARGS.bench, "--protocol=http", "--progress=off", "--deadline=20s",
             *flags], capture_output=True, text=True, timeout=120)
        if check:
            self.assertEqual(out.returncode, 0, out.stderr + proc_util.tail(self.log))
        return out

    def counter(self, code):
        _, body = proc_util.http_get(f"http://127.0.0.1:{self.metrics_port}/metrics")
        text = body.decode() if isinstance(body, bytes) else body
        total = 0.0
        for line in text.splitlines():
            if (line.startswith("metalserve_requests_total{") and
                    'method="http_ModelInfer"' in line and f'code="{code}"' in line):
                total += float(line.rsplit(" ", 1)[1])
        return int(total)

    def run_counted(self, *flags):
        before = self.counter("OK")
        out = self.bench(f"--target=127.0.0.1:{self.http_port}", "--model_name=identity",
                         f"--requests={REQUESTS}", "--concurrency=4", "--output=json",
                         *flags)
        run = json.loads(out.stdout)["runs"][0]
        # The server counts a request when it answers; the client may see the
        # answer a moment before the scrape does.
        proc_util.wait_for("the counter", lambda: self.counter("OK") - before >= run["ok"],
                           time.monotonic() + 10)
        return run, self.counter("OK") - before

    def test_binary_run_answers_every_request_and_server_counts_them(self):
        run, counted = self.run_counted("--http_format=binary", "--batch=2")
        self.assertEqual(run["ok"], REQUESTS, (run["errors"], run["error_messages"]))
        self.assertEqual(run["errors"], {})
        self.assertEqual(counted, REQUESTS)
        self.assertAlmostEqual(run["rows_per_s"], 2 * run["requests_per_s"], delta=0.01)
        self.assertGreaterEqual(run["server"]["batch_rows_mean"], 2.0, run["server"])

    def test_json_run_answers_every_request_and_server_counts_them(self):
        run, counted = self.run_counted("--http_format=json", "--input=random")
        self.assertEqual(run["ok"], REQUESTS, (run["errors"], run["error_messages"]))
        self.assertEqual(counted, REQUESTS)
        self.assertGreaterEqual(run["server"]["batch_rows_mean"], 1.0, run["server"])

    def test_keep_alive_uses_one_connection_per_call_in_flight(self):
        """The access log names each request's peer address: 150 requests at
        concurrency 4 come from at most 4 client ports."""
        path = os.path.join(self.tmp, "access.log")

        def lines():
            with open(path) as f:
                return [l for l in f if "method=http_ModelInfer" in l]
        before = len(lines())
        self.bench(f"--target=127.0.0.1:{self.http_port}", "--model_name=identity",
                   f"--requests={REQUESTS}", "--concurrency=4")
        proc_util.wait_for("the access log", lambda: len(lines()) - before >= REQUESTS,
                           time.monotonic() + 10)
        peers = {re.search(r"peer=(\S+)", l).group(1) for l in lines()[before:]}
        self.assertLessEqual(len(peers), 4, peers)

    def test_priority_travels_as_a_parameter(self):
        out = self.bench(f"--target=127.0.0.1:{self.http_port}", "--model_name=identity",
                         "--requests=5", "--priority=3", "--output=json")
        run = json.loads(out.stdout)["runs"][0]
        self.assertEqual(run["ok"], 0)
        self.assertEqual(run["errors"], {"INVALID_ARGUMENT": 5})
        self.assertIn("priority 3 is out of range",
                      " ".join(run["error_messages"]["INVALID_ARGUMENT"]))

    def test_refused_connection_names_url_and_reason(self):
        port = proc_util.free_port()
        out = self.bench(f"--target=127.0.0.1:{port}", "--model_name=identity",
                         "--requests=5", check=False)
        self.assertEqual(out.returncode, 1, out.stdout)
        self.assertIn(f"GET http://127.0.0.1:{port}/v2/models/identity", out.stderr)
        self.assertRegex(out.stderr, re.compile("connect", re.I))

    def test_wrong_url_or_model_names_the_status_and_server_message(self):
        for target, name, expect in (
                (f"http://127.0.0.1:{self.http_port}/nope", "identity", "no such path"),
                (f"127.0.0.1:{self.http_port}", "resnet", "resnet")):
            out = self.bench(f"--target={target}", f"--model_name={name}",
                             "--requests=5", check=False)
            self.assertEqual(out.returncode, 1, out.stdout)
            self.assertIn("HTTP 404", out.stderr)
            self.assertIn(expect, out.stderr)

    def test_missing_model_name_names_the_flag(self):
        out = self.bench(f"--target=127.0.0.1:{self.http_port}", "--requests=5",
                         check=False)
        self.assertEqual(out.returncode, 1)
        self.assertIn("--model_name", out.stderr)


class BenchHttpDeadlineTest(unittest.TestCase):
    def test_deadline_is_enforced_by_the_server(self):
        tmp = tempfile.mkdtemp(prefix="metalserve-bench-http-deadline-")
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        http_port, metrics_port = proc_util.free_port(), proc_util.free_port()
        log = os.path.join(tmp, "server.log")
        server = proc_util.Process(
            [ARGS.server, f"--model={ARGS.model}", "--device=cpu", "--threads=1",
             f"--address=127.0.0.1:{proc_util.free_port()}",
             f"--http_address=127.0.0.1:{http_port}",
             f"--metrics_address=127.0.0.1:{metrics_port}", "--batching=fixed",
             "--max_queue_delay=3s", "--max_batch_size=8", "--monitor_log_interval=0"],
            log)
        self.addCleanup(server.stop)
        metrics = f"http://127.0.0.1:{metrics_port}/metrics"

        def count(code):
            try:
                _, text = proc_util.http_get(metrics)
            except OSError:
                return -1
            return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
                       if line.startswith("metalserve_requests_total{") and
                       'method="http_ModelInfer"' in line and f'code="{code}"' in line)
        def ready():
            assert server.alive(), proc_util.tail(log)
            try:
                status, _ = proc_util.http_get(f"http://127.0.0.1:{http_port}/v2/health/ready")
            except OSError:
                return False
            return status == 200 and count("OK") >= 0
        proc_util.wait_for("REST and metrics ready", ready, time.monotonic() + 90)
        out = subprocess.run(
            [ARGS.bench, "--protocol=http", f"--target=127.0.0.1:{http_port}",
             "--model_name=identity", "--requests=3", "--concurrency=1",
             "--deadline=200ms", "--output=json", "--progress=off"],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr + proc_util.tail(log))
        run = json.loads(out.stdout)["runs"][0]
        self.assertEqual(run["errors"], {"DEADLINE_EXCEEDED": 3}, run)
        proc_util.wait_for("the server's count",
                           lambda: count("DEADLINE_EXCEEDED") == 3, time.monotonic() + 10)
        self.assertEqual(count("OK"), 0)


class BenchHttpTlsTest(unittest.TestCase):
    def test_mutual_tls_run_is_answered_and_needs_the_client_certificate(self):
        tmp = tempfile.mkdtemp(prefix="metalserve-bench-https-")
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        make_pki(tmp)
        pem = lambda name: os.path.join(tmp, name)  # noqa: E731
        port = proc_util.free_port()
        log = os.path.join(tmp, "server.log")
        server = proc_util.Process(
            [ARGS.server, f"--model={ARGS.model}", "--device=cpu", "--threads=1",
             f"--address=127.0.0.1:{proc_util.free_port()}",
             f"--http_address=127.0.0.1:{port}", "--metrics_address=",
             f"--tls_cert={pem('server.pem')}", f"--tls_key={pem('server.key')}",
             f"--tls_client_ca={pem('ca.pem')}", "--monitor_log_interval=0"], log)
        self.addCleanup(server.stop)

        def bench(*tls):
            return subprocess.run(
                [ARGS.bench, "--protocol=http", f"--target=127.0.0.1:{port}",
                 "--model_name=identity", "--requests=20", "--concurrency=2",
                 "--output=json", "--progress=off", f"--tls_ca={pem('ca.pem')}", *tls],
                capture_output=True, text=True, timeout=60)
        mtls = (f"--tls_cert={pem('client.pem')}", f"--tls_key={pem('client.key')}")

        def answered():
            assert server.alive(), proc_util.tail(log)
            return bench(*mtls).returncode == 0
        proc_util.wait_for("an https answer", answered, time.monotonic() + 90, interval=0.5)
        out = bench(*mtls)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(json.loads(out.stdout)["runs"][0]["ok"], 20)
        refused = bench()
        self.assertEqual(refused.returncode, 1, refused.stdout)
        self.assertIn(f"https://127.0.0.1:{port}/v2/models/identity", refused.stderr)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--server", required=True)
    p.add_argument("--bench", required=True)
    p.add_argument("--model", required=True)
    ARGS, rest = p.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)
