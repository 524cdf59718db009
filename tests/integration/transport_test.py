#!/usr/bin/env python3
"""End to end over a Unix domain socket (issue 20): the real metalserve with
the null runner (--model=null:<signature.json>) listening on TCP loopback and
a socket at once; metalserve-bench load-tests it over each (--target=unix://...)
and reads zeros of the signature's output; SIGTERM exits 0 and removes the
socket file. Then bench/transport.py runs briefly (echo floor and null runner,
TCP and socket) so the measurement script keeps working.

Bounded: fixed request counts, every wait with a deadline; only 127.0.0.1 and
a socket in a temporary folder."""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testing"))
import proc_util  # noqa: E402

ARGS = None


class TransportTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="metalserve-uds-")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.sock = os.path.join(self.tmp, "m.sock")
        self.port = proc_util.free_port()
        self.log = os.path.join(self.tmp, "server.log")
        self.server = proc_util.Process(
            [ARGS.server, f"--model=null:{ARGS.signature}",
             f"--address=127.0.0.1:{self.port},unix://{self.sock}",
             "--metrics_address=", "--http_address=", "--max_batch_size=8", "--monitor_log_interval=0"],
            log_path=self.log)
        self.addCleanup(self.server.stop)

        def ready():
            assert self.server.alive(), proc_util.tail(self.log)
            with open(self.log) as f:
                return "ready: gRPC" in f.read()
        proc_util.wait_for("the server to be ready", ready, time.monotonic() + 60)

    def bench(self, target, *extra):
        out = subprocess.run(
            [ARGS.bench, f"--target={target}", "--requests=200", "--concurrency=4",
             "--output=json", "--progress=off", "--deadline=10s", *extra],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        return json.loads(out.stdout)["runs"][0]

    def test_bench_over_socket_and_tcp_then_socket_removed_on_sigterm(self):
        self.assertTrue(os.path.exists(self.sock), proc_util.tail(self.log))
        dump = os.path.join(self.tmp, "outputs.json")
        for target in (f"unix://{self.sock}", f"127.0.0.1:{self.port}"):
            r = self.bench(target, f"--dump_outputs={dump}")
            self.assertEqual(r["ok"], 200, (target, r["errors"], r["error_messages"]))
            with open(dump) as f:
                outputs = json.load(f)
            text = json.dumps(outputs)
            self.assertIn('"output"', text)
            self.assertIn("[1, 4]", text.replace("[1,4]", "[1, 4]"))
        self.server.send_signal(signal.SIGTERM)
        self.assertEqual(self.server.wait(timeout=30), 0, proc_util.tail(self.log))
        self.assertFalse(os.path.exists(self.sock), "socket file left after SIGTERM")

    def test_second_server_on_the_live_socket_exits_naming_it(self):
        other = subprocess.run(
            [ARGS.server, f"--model=null:{ARGS.signature}",
             f"--address=unix://{self.sock}", "--metrics_address=", "--http_address="],
            capture_output=True, text=True, timeout=60)
        self.assertNotEqual(other.returncode, 0)
        self.assertIn("already answers", other.stderr)
        self.assertIn(self.sock, other.stderr)
        r = self.bench(f"unix://{self.sock}")
        self.assertEqual(r["ok"], 200)


class TransportScriptTest(unittest.TestCase):
    def test_transport_script_measures_echo_and_null_over_tcp_and_socket(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "t.json")
            subprocess.run([sys.executable, ARGS.script, f"--build={ARGS.build}",
                            f"--payloads={ARGS.signature}", "--duration=0.5",
                            "--concurrency=2", f"--json={out}"],
                           check=True, timeout=120, capture_output=True)
            with open(out) as f:
                rows = json.load(f)["rows"]
        got = sorted((r["server"], r["transport"]) for r in rows)
        self.assertEqual(got, [("echo", "tcp"), ("echo", "uds"),
                               ("null", "tcp"), ("null", "uds")])
        for r in rows:
            self.assertEqual(r["errors"], 0, r)
            self.assertGreater(r["requests"], 0, r)
            self.assertGreater(r["server_cpu_us_per_request"], 0, r)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--server", required=True)
    p.add_argument("--bench", required=True)
    p.add_argument("--signature", required=True)
    p.add_argument("--build", required=True)
    p.add_argument("--script", required=True)
    ARGS, rest = p.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)
