#!/usr/bin/python3
"""AOTInductor packages (.pt2) through the real server, over gRPC on
127.0.0.1 (free ports, bounded by TIMEOUT_S).

RefusedWithoutAotInductorTest (a runtime built without AOTInductor, e.g.
against Debian's LibTorch 1.13): `metalserve --model=X.pt2` stops before
serving, with a non-zero status and an error naming the file and saying the
runtime lacks AOTInductor. Skipped where the runtime has AOTInductor.

ServesPackageTest (a runtime with AOTInductor, LibTorch 2.6+; the GPU host):
exports tiny_cnn as TorchScript and as a package for the first device of
cuda/cpu (models/export.py --format=pt2), serves the package and the
TorchScript model from two servers, and sends both the same seeded requests
of 1, 3 and 8 rows through metalserve-bench: the outputs must agree within
1e-3 of their scale, and the package's load must say it was verified against
the TorchScript model. Skipped where the runtime lacks AOTInductor.

Usage: aoti_serve_test.py --build DIR --aoti ON|OFF [unittest args]
Exit status 77 (ctest: skipped) when every test was skipped.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testing"))
import proc_util  # noqa: E402

ARGS = None
TIMEOUT_S = 240


def server(model, tmp, name, extra=()):
    port = proc_util.free_port()
    log = os.path.join(tmp, name + ".log")
    proc = proc_util.Process([os.path.join(ARGS.build, "metalserve"), f"--model={model}",
                              f"--address=127.0.0.1:{port}", "--http_address=",
                              f"--metrics_address=127.0.0.1:{proc_util.free_port()}",
                              "--allowed_batch_sizes=1,3,8", "--max_batch_size=8", *extra],
                             log_path=log)
    return proc, port, log


def log_text(log):
    with open(log, errors="replace") as f:
        return f.read()


class RefusedWithoutAotInductorTest(unittest.TestCase):
    def setUp(self):
        if ARGS.aoti == "ON":
            self.skipTest("this runtime has AOTInductor")

    def test_package_is_refused_naming_the_file_and_the_missing_runtime(self):
        with tempfile.TemporaryDirectory() as tmp:
            package = os.path.join(tmp, "tiny_cnn.cpu.pt2")
            with open(package, "wb") as f:
                f.write(b"PK\x03\x04 not a real package")
            proc, _, log = server(package, tmp, "refused")
            try:
                status = proc.wait(timeout=TIMEOUT_S)
            finally:
                proc.stop()
            text = log_text(log)
            self.assertNotEqual(status, 0, text)
            self.assertIn(package, text)
            self.assertIn("lacks AOTInductor", text)
            self.assertNotIn("ready: gRPC on", text)


class ServesPackageTest(unittest.TestCase):
    def setUp(self):
        if ARGS.aoti != "ON":
            self.skipTest("this runtime was built without AOTInductor")

    def bench(self, server_proc, log, port, rows, out):
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            if not server_proc.alive():
                self.fail(f"metalserve exited with {server_proc.returncode}:\n{log_text(log)}")
            p = subprocess.run([os.path.join(ARGS.build, "metalserve-bench"),
                                f"--target=127.0.0.1:{port}", "--requests=1",
                                f"--batch={rows}", "--input=random", "--seed=5",
                                f"--dump_outputs={out}", "--progress=off"],
                               capture_output=True, text=True, timeout=TIMEOUT_S)
            if p.returncode == 0:
                with open(out) as f:
                    return json.load(f)["outputs"]
            self.assertLess(time.monotonic(), deadline, p.stderr)
            time.sleep(0.5)  # still loading

    def test_package_serves_the_torchscript_models_outputs(self):
        import torch  # the GPU host's torch, the one the runtime was built with
        device = "cuda" if torch.cuda.is_available() else "cpu"
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, os.path.join(HERE, "..", "..", "models", "export.py"),
                            "--out", tmp, "--only", "tiny_cnn", "--format=pt2",
                            f"--devices={device}", "--max_batch_size=8"],
                           check=True, timeout=TIMEOUT_S)
            package = os.path.join(tmp, f"tiny_cnn.{device}.pt2")
            procs = []
            try:
                aoti, aoti_port, aoti_log = server(package, tmp, "aoti")
                procs.append(aoti)
                ts, ts_port, ts_log = server(os.path.join(tmp, "tiny_cnn.pt"), tmp, "ts",
                                        [f"--device={device}"])
                procs.append(ts)
                for rows in (1, 3, 8):
                    got = self.bench(aoti, aoti_log, aoti_port, rows,
                                     os.path.join(tmp, f"aoti{rows}.json"))
                    want = self.bench(ts, ts_log, ts_port, rows, os.path.join(tmp, f"ts{rows}.json"))
                    self.assertEqual(len(got), len(want))
                    for g, w in zip(got, want):
                        self.assertEqual(g["shape"], w["shape"])
                        scale = max(abs(v) for v in w["data"])
                        worst = max(abs(a - b) for a, b in zip(g["data"], w["data"]))
                        # The runtime's verification tolerance: cuDNN may run
                        # TF32 and other kernels for the two graphs.
                        self.assertLessEqual(worst, 1e-3 * scale, f"rows={rows}")
                text = log_text(aoti_log)
                self.assertIn("verified against its TorchScript model", text)
            finally:
                for p in procs:
                    p.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", required=True)
    parser.add_argument("--aoti", choices=["ON", "OFF"], required=True)
    ARGS, rest = parser.parse_known_args()
    result = unittest.main(argv=[sys.argv[0]] + rest, exit=False).result
    if not result.wasSuccessful():
        sys.exit(1)
    sys.exit(77 if len(result.skipped) == result.testsRun else 0)
