#!/usr/bin/python3
"""metalservectl against the real server (docs/repository.md): build/
metalserve with --model_repository (a copy of build/model_repository:
identity and tiny_cnn, exported by models/export.py) and
--model_control=explicit on a free 127.0.0.1 port and a Unix socket, driven
through the built build/metalservectl binary:

  * index prints a table (MODEL VERSION STATE REASON) of both models, READY;
  * unload, then index shows the model no longer READY and ready exits 1
    with NOT_FOUND; load serves it again (ready exits 0), over the Unix
    socket as well as TCP;
  * a bad model name: load and unload exit 1, printing NOT_FOUND, the name
    and what the repository holds or what is loaded;
  * metadata prints the inputs and outputs; ready --version=9 of a version
    that does not exist exits 1 with NOT_FOUND;
  * usage errors exit 2, --help exits 0 listing the commands, a server that
    is not there exits 1 with UNAVAILABLE within the --timeout;
  * --tls_ca/--tls_cert/--tls_key reach a server under mutual TLS (certificates
    made with openssl), which refuses it without a client certificate;
  * gRPC loads run off gRPC's threads: LOADERS loads of a slow model (a
    forward of ~0.5 s; warm-up and verification take seconds) at once: one
    runs, the others and an unload meanwhile exit 1 with UNAVAILABLE
    "another load or unload is running", and ready, metadata and index
    answer within 1 s while it runs.

Needs /usr/bin/python3 with torch (the slow model is scripted here) and openssl. A
missing binary or model is a failure, not a skip. Everything it starts is
stopped; every wait is bounded.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "testing"))
from proc_util import Process, free_port, tail, wait_for  # noqa: E402

ARGS = None
# Concurrent gRPC loads of one slow model (more than gRPC's callback threads
# on a small machine).
LOADERS = 8


class Ctl(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="metalserve_ctl_")
        cls.root = os.path.join(cls.tmp, "repository")
        shutil.copytree(ARGS.repository, cls.root)
        cls.port = free_port()
        cls.socket = os.path.join(cls.tmp, "grpc.sock")
        cls.log = os.path.join(cls.tmp, "server.log")
        cls.server = Process(
            [ARGS.server, f"--model_repository={cls.root}", "--model_control=explicit",
             f"--address=127.0.0.1:{cls.port},unix://{cls.socket}", "--http_address=",
             "--metrics_address=", "--device=cpu", "--threads=1", "--cache_dir=none",
             "--monitor_log_interval=0", "--max_batch_size=8", "--max_queue_delay=1ms"],
            log_path=cls.log)

        def ready():
            assert cls.server.alive(), "server exited:\n" + tail(cls.log)
            return cls.run_ctl("ready", "identity").returncode == 0
        wait_for("server ready", ready, time.monotonic() + 120, interval=0.5)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def run_ctl(cls, *args, server=None):
        server = server or f"127.0.0.1:{cls.port}"
        return subprocess.run([ARGS.ctl, f"--server={server}"] + list(args),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=120)

    def ctl_ok(self, *args, **kw):
        r = self.run_ctl(*args, **kw)
        self.assertEqual(r.returncode, 0, f"{args}: {r.stdout}{r.stderr}")
        return r.stdout

    def index_rows(self):
        lines = self.ctl_ok("index").splitlines()
        self.assertEqual(lines[0].split(), ["MODEL", "VERSION", "STATE", "REASON"])
        return [line.split(None, 3) for line in lines[1:]]

    def test_index_lists_every_model_and_version_with_its_state(self):
        rows = self.index_rows()
        self.assertIn(["identity", "1", "READY"], [r[:3] for r in rows])
        self.assertIn(["tiny_cnn", "1", "READY"], [r[:3] for r in rows])

    def test_unload_then_load_changes_what_is_served(self):
        self.assertEqual(self.ctl_ok("unload", "tiny_cnn"), "unloaded tiny_cnn\n")

        def released():
            return ["tiny_cnn", "-", "UNAVAILABLE", "not loaded"] in self.index_rows()
        wait_for("tiny_cnn released", released, time.monotonic() + 30)
        r = self.run_ctl("ready", "tiny_cnn")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("NOT_FOUND", r.stderr)

        unix = f"unix://{self.socket}"
        self.assertEqual(self.ctl_ok("load", "tiny_cnn", server=unix), "loaded tiny_cnn\n")
        self.assertEqual(self.ctl_ok("ready", "tiny_cnn", server=unix), "tiny_cnn ready\n")
        self.assertIn(["tiny_cnn", "1", "READY"], [r[:3] for r in self.index_rows()])

    def test_bad_model_name_exits_1_with_not_found_listing_the_models(self):
        r = self.run_ctl("load", "no_such_model")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertEqual(r.stdout, "")
        for part in ("metalservectl: NOT_FOUND: RepositoryModelLoad:", "no_such_model",
                     "identity", "tiny_cnn"):
            self.assertIn(part, r.stderr)
        r = self.run_ctl("unload", "no_such_model")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        for part in ("NOT_FOUND: RepositoryModelUnload:", "no_such_model", "identity"):
            self.assertIn(part, r.stderr)

    def test_metadata_and_ready_of_a_version(self):
        out = self.ctl_ok("metadata", "identity")
        self.assertIn("name identity\n", out)
        self.assertIn("versions 1\n", out)
        self.assertRegex(out, r"input \S+ FP32 \[-1,4\]\n")
        self.assertEqual(self.ctl_ok("ready", "identity", "--version=1"),
                         "identity version 1 ready\n")
        r = self.run_ctl("ready", "identity", "--version=9")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("NOT_FOUND", r.stderr)
        self.assertIn("9", r.stderr)

    def add_slow_model(self, name):
        """A model `name` (identity's signature) whose forward loops ~0.5 s,
        so its load's warm-up and verification take seconds."""
        import torch

        class Slow(torch.nn.Module):
            def forward(self, x):
                y = torch.zeros(1)
                for _ in range(100000):
                    y = y + 1.0
                return x + y * 0.0
        os.makedirs(os.path.join(self.root, name, "1"))
        shutil.copy(os.path.join(self.root, "identity", "config.json"),
                    os.path.join(self.root, name))
        with open(os.path.join(self.root, name, "config.json")) as f:
            config = f.read().replace('"identity"', f'"{name}"')
        with open(os.path.join(self.root, name, "config.json"), "w") as f:
            f.write(config)
        torch.jit.script(Slow()).save(os.path.join(self.root, name, "1", "model.pt"))

    def test_requests_are_answered_while_grpc_loads_run(self):
        # LOADERS loads at once: run on gRPC's own threads, they took every
        # one of them and a readiness probe waited 9.5 s for the loads.
        self.add_slow_model("slow")
        loaders = [subprocess.Popen([ARGS.ctl, f"--server=127.0.0.1:{self.port}", "load", "slow"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    universal_newlines=True) for _ in range(LOADERS)]
        answers = []
        try:
            wait_for("the load of slow started",
                     lambda: "loading model " + os.path.join(self.root, "slow", "1")
                     in tail(self.log, 40), time.monotonic() + 60)
            # While it warms up: readiness, metadata and the index answer at once.
            for args in (["ready", "identity"], ["metadata", "tiny_cnn"], ["index"]):
                start = time.monotonic()
                self.ctl_ok(*args)
                self.assertLess(time.monotonic() - start, 1.0, args)
            r = self.run_ctl("unload", "tiny_cnn")
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("UNAVAILABLE: RepositoryModelUnload:", r.stderr)
            self.assertIn("another load or unload is running", r.stderr)
            self.assertTrue(any(p.poll() is None for p in loaders),
                            "the load ended before the checks")
        finally:
            for p in loaders:
                out, err = p.communicate(timeout=300)
                answers.append((p.returncode, out, err))
        # One ran; those that came while it ran were refused (one arriving
        # after it, on a slow machine, finds nothing to do and succeeds).
        loaded = [a for a in answers if a[:2] == (0, "loaded slow\n")]
        refused = [a for a in answers if a[0] != 0]
        self.assertEqual(len(loaded) + len(refused), LOADERS, answers)
        self.assertGreaterEqual(len(loaded), 1, answers)
        self.assertGreaterEqual(len(refused), 1, answers)
        for code, out, err in refused:
            self.assertEqual(code, 1, err)
            self.assertIn("UNAVAILABLE: RepositoryModelLoad:", err)
            self.assertIn("another load or unload is running", err)
        self.assertEqual(self.ctl_ok("ready", "slow"), "slow ready\n")
        self.assertEqual(self.ctl_ok("unload", "slow"), "unloaded slow\n")
        shutil.rmtree(os.path.join(self.root, "slow"))  # not for the other tests' servers

    def test_usage_errors_exit_2_and_help_exits_0(self):
        for args in ([], ["frobnicate"], ["load"], ["index", "extra"]):
            r = self.run_ctl(*args)
            self.assertEqual(r.returncode, 2, f"{args}: {r.stdout}{r.stderr}")
            self.assertIn("commands:", r.stderr)
        r = subprocess.run([ARGS.ctl, "--help"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        for part in ("index", "load MODEL", "unload MODEL", "--server", "--timeout"):
            self.assertIn(part, r.stdout)

    def test_tls_flags_connect_under_mutual_tls(self):
        from lifecycle_test import make_pki  # noqa: E402 (the same folder)
        pki = os.path.join(self.tmp, "pki")
        os.makedirs(pki)
        make_pki(pki)
        port = free_port()
        log = os.path.join(self.tmp, "tls_server.log")
        server = Process(
            [ARGS.server, f"--model_repository={self.root}", "--model_control=explicit",
             f"--address=127.0.0.1:{port}", "--http_address=", "--metrics_address=",
             "--device=cpu", "--threads=1", "--cache_dir=none", "--monitor_log_interval=0",
             f"--tls_cert={pki}/server.pem", f"--tls_key={pki}/server.key",
             f"--tls_client_ca={pki}/ca.pem"], log_path=log)
        try:
            tls = [f"--tls_ca={pki}/ca.pem", f"--tls_cert={pki}/client.pem",
                   f"--tls_key={pki}/client.key"]

            def ready():
                assert server.alive(), "server exited:\n" + tail(log)
                return self.run_ctl(*tls, "ready", "identity",
                                    server=f"127.0.0.1:{port}").returncode == 0
            wait_for("TLS server ready", ready, time.monotonic() + 120, interval=0.5)
            self.assertIn("identity", self.ctl_ok(*tls, "index", server=f"127.0.0.1:{port}"))
            # Without a client certificate, or without TLS: refused.
            for args in (tls[:1], []):
                r = self.run_ctl(*args, "--timeout=5s", "index", server=f"127.0.0.1:{port}")
                self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
                self.assertRegex(r.stderr, r"metalservectl: (UNAVAILABLE|DEADLINE_EXCEEDED): ")
        finally:
            server.stop()

    def test_server_not_there_exits_1_with_unavailable(self):
        start = time.monotonic()
        r = self.run_ctl("--timeout=2s", "index", server=f"127.0.0.1:{free_port()}")
        self.assertLess(time.monotonic() - start, 30)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertRegex(r.stderr, r"metalservectl: (UNAVAILABLE|DEADLINE_EXCEEDED): ")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--server", required=True)
    p.add_argument("--ctl", required=True)
    p.add_argument("--repository", required=True)
    ARGS, rest = p.parse_known_args()
    for path in (ARGS.server, ARGS.ctl,
                 os.path.join(ARGS.repository, "tiny_cnn", "1", "model.pt")):
        if not os.path.exists(path):
            sys.exit(f"ctl_test: {path} is missing (build first)")
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
