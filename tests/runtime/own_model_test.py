#!/usr/bin/python3
"""README.md's "Serve your own model", run as written, and the load phases
the server logs while it does.

OwnModelTest takes the code blocks between the README's own-model markers
and runs them in a fresh folder: the export block through bash (its
/usr/bin/python3 heredoc verbatim; a stub `torchvision` package in that
folder, first on the heredoc's sys.path, hands it a small scripted model with
resnet50's `forward(self, x)`, so nothing is downloaded and the run stays
short), then the server command (with free loopback ports appended), then the
bench command against it. It fails when the README's blocks change shape or
stop working: the server must reach "ready", write the inferred signature,
and answer every request. It also removes the signature and drops
--input_shape: the start must stop with the flag to pass and the docs page.

LoadLogTest serves tiny_cnn and checks that every load phase is logged as it
happens, with its duration, in order.

Usage: own_model_test.py --build DIR --readme README.md [unittest args]
"""
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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "testing"))
import proc_util  # noqa: E402

ARGS = None
TIMEOUT_S = 150

STUB_TORCHVISION = '''
import torch


class _Small(torch.nn.Module):
    """resnet50's interface ([N,3,224,224] -> [N,1000], forward(self, x)) at a
    tiny fraction of its cost."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, kernel_size=8, stride=8)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(4, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(torch.relu(self.conv(x))), 1))


class models:
    @staticmethod
    def resnet50(weights=None):
        torch.manual_seed(0)
        return _Small()
'''


def readme_blocks():
    """The indented code blocks between the own-model markers, as text."""
    with open(ARGS.readme) as f:
        text = f.read()
    m = re.search(r"<!-- own-model:begin.*?-->(.*?)<!-- own-model:end -->", text, re.S)
    assert m, "README.md has no own-model markers"
    blocks, current = [], []
    for line in m.group(1).split("\n"):
        if line.startswith("    "):
            current.append(line[4:])
        elif line.strip() == "" and current:
            blocks.append("\n".join(current) + "\n")
            current = []
    if current:
        blocks.append("\n".join(current) + "\n")
    assert len(blocks) == 3, f"expected export, serve and bench blocks, got {blocks}"
    return blocks


def with_build_dir(command):
    """The README's `build/...` commands, pointed at the build under test."""
    assert command.startswith("build/"), command
    return os.path.join(ARGS.build, command[len("build/"):]).strip()


class Server:
    """`command` (a shell line) started in `cwd` on free loopback ports."""

    def __init__(self, command, cwd):
        self.port = proc_util.free_port()
        self.log = os.path.join(cwd, "server.log")
        argv = ["bash", "-c", "exec " + command +
                f" --address=127.0.0.1:{self.port} --http_address="
                f" --metrics_address=127.0.0.1:{proc_util.free_port()}"]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT)

    def text(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def wait_ready(self):
        def ready():
            assert self.proc.poll() is None, "server exited:\n" + self.text()
            return "ready: gRPC on" in self.text()
        proc_util.wait_for("server ready", ready, time.monotonic() + TIMEOUT_S)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


class OwnModelTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="own_model_")
        os.makedirs(os.path.join(self.dir, "torchvision"))
        with open(os.path.join(self.dir, "torchvision", "__init__.py"), "w") as f:
            f.write(STUB_TORCHVISION)

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_readme_commands_serve_a_model_without_a_signature_file(self):
        export, serve, bench = readme_blocks()
        subprocess.run(["bash", "-c", export], cwd=self.dir, check=True, timeout=TIMEOUT_S)
        self.assertTrue(os.path.exists(os.path.join(self.dir, "resnet50.pt")))

        server = Server(with_build_dir(serve), self.dir)
        try:
            server.wait_ready()
            log = server.text()
            self.assertIn("wrote the inferred signature to resnet50.json", log)
            with open(os.path.join(self.dir, "resnet50.json")) as f:
                sig = json.load(f)
            self.assertEqual(sig["inputs"], [{"name": "x", "dtype": "float32",
                                              "shape": [-1, 3, 224, 224]}])
            self.assertEqual(sig["outputs"], [{"name": "output", "dtype": "float32",
                                               "shape": [-1, 1000]}])
            out = subprocess.run(
                ["bash", "-c", with_build_dir(bench) +
                 f" --target=127.0.0.1:{server.port} --output=json"],
                cwd=self.dir, check=True, timeout=TIMEOUT_S, stdout=subprocess.PIPE)
            run = json.loads(out.stdout)["runs"][0]
            self.assertEqual(run["ok"], 100, run)
        finally:
            server.stop()

    def test_missing_signature_without_input_shape_says_what_to_pass(self):
        export, serve, _ = readme_blocks()
        subprocess.run(["bash", "-c", export], cwd=self.dir, check=True, timeout=TIMEOUT_S)
        command = re.sub(r" --input_shape=\S+", "", with_build_dir(serve))
        self.assertNotEqual(command, with_build_dir(serve))
        # Free ports: the metrics listener starts before the model loads.
        command += (f" --address=127.0.0.1:{proc_util.free_port()} --http_address="
                    f" --metrics_address=127.0.0.1:{proc_util.free_port()}")
        done = subprocess.run(["bash", "-c", command], cwd=self.dir, timeout=TIMEOUT_S,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        text = done.stdout.decode(errors="replace")
        self.assertEqual(done.returncode, 1, text)
        self.assertIn("INVALID_ARGUMENT: no signature file resnet50.json", text)
        self.assertIn("--input_shape=x=3,224,224", text)
        self.assertIn("docs/signature.md", text)


class LoadLogTest(unittest.TestCase):
    def test_each_load_phase_is_logged_with_its_duration_in_order(self):
        model = os.path.join(ARGS.build, "models", "tiny_cnn.pt")
        work = tempfile.mkdtemp(prefix="load_log_")
        # A fresh verification cache, so the verification is logged.
        server = Server(f"{os.path.join(ARGS.build, 'metalserve')} --model={model}"
                        f" --device=cpu --optimize=full --max_batch_size=4"
                        f" --cache_dir={work}/cache", work)
        try:
            server.wait_ready()
            log = server.text()
        finally:
            server.stop()
            shutil.rmtree(work, ignore_errors=True)
        phases = [
            r"runtime: loading model \S+tiny_cnn.pt \([0-9.]+ MB\) onto cpu",
            r"runtime: loaded \S+ in \d+ ms",
            r"runtime: signature checked by a probe forward at batch 2 in \d+ ms",
            r"runtime: optimizing at level full \(freeze \+ optimize_for_inference\)",
            r"runtime: built full in \d+ ms; verifying it against the plain model "
            r"at batch sizes \[1,4\]",
            # A LibTorch whose rewrite is inexact falls back; either is logged.
            r"runtime: (full verified .* in \d+ ms|optimization full rejected)",
            r"runtime: warming up batch sizes \[1,4\]",
            r"runtime: warmed up batch size 1 in \d+ ms",
            r"runtime: warmed up batch size 4 in \d+ ms",
            r"ready: gRPC on",
        ]
        at = 0
        for phase in phases:
            m = re.compile(phase).search(log, at)
            self.assertIsNotNone(m, f"no /{phase}/ after offset {at} in:\n{log}")
            at = m.end()


    def test_second_start_reuses_the_cached_verification(self):
        model = os.path.join(ARGS.build, "models", "tiny_cnn.pt")
        work = tempfile.mkdtemp(prefix="load_cache_")
        logs = []
        try:
            for run in ("first", "second"):
                os.mkdir(os.path.join(work, run))
                server = Server(f"{os.path.join(ARGS.build, 'metalserve')} --model={model}"
                                f" --device=cpu --optimize=full --max_batch_size=4"
                                f" --cache_dir={work}/cache", os.path.join(work, run))
                try:
                    server.wait_ready()
                    logs.append(server.text())
                finally:
                    server.stop()
        finally:
            shutil.rmtree(work, ignore_errors=True)
        self.assertRegex(logs[0], r"verifying it against the plain model")
        self.assertRegex(logs[0], r"runtime: verification result cached in \S+")
        self.assertNotRegex(logs[1], r"verifying it against the plain model")
        self.assertRegex(logs[1], r"verification skipped, its result cached")


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--build", required=True)
    p.add_argument("--readme", required=True)
    ARGS, rest = p.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
