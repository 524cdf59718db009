#!/usr/bin/python3
"""A real container: builds metalserve:fast with docker/make-base and
docker/build fast (podman, or docker where podman is absent), runs it in the
host network on 127.0.0.1 and free ports, and checks, against the image:
  - gRPC health says SERVING and /metrics has `metalserve_ready 1`;
  - a Predict gives the same bytes as the host binary for the same request;
  - the server process runs as uid 10001 (the Deployment's runAsUser);
  - `stop` (SIGTERM) drains, and the container exits 0 within the grace;
  - the image keeps its HEALTHCHECK (podman builds use --format docker),
    and it passes once the server is ready.
Exits 77 (skipped) only on macOS, where no Linux container engine runs
natively; on Linux a missing engine is a failure (scripts/setup installs
podman, buildah, runc and debootstrap).
"""

import argparse
import json
import os
import platform
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "testing"))
from proc_util import Process, compile_stubs, free_port, http_get, tail, wait_for  # noqa: E402

ARGS = None
SKIP = 77
IMAGE = "metalserve:fast"
MODEL_IN_IMAGE = "/opt/metalserve/models/tiny_cnn.pt"
STOP_GRACE_S = 20  # given to `stop`; the server drains in about 1 s
SERVER_FLAGS = ["--device=cpu", "--threads=1", "--drain_grace=1s",
                "--shutdown_timeout=5s", "--monitor_log_interval=0"]


def engine():
    for name in ("podman", "docker"):
        if shutil.which(name):
            return name
    return None


def run(cmd, timeout, **kw):
    return subprocess.run(cmd, timeout=timeout, capture_output=True,
                          text=True, **kw)


class Container(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.engine = engine()
        cls.env = dict(os.environ, ENGINE=cls.engine)
        if cls.engine == "podman":
            cls.env.setdefault("CONTAINERS_CONF", os.path.join(
                ARGS.source_dir, "docker", "containers.conf"))
        cls.tmp = tempfile.mkdtemp(prefix="metalserve-container-")
        cls.timings = {}
        for step, cmd, limit in (("base", ["docker/make-base"], 420),
                                 ("image", ["docker/build", "fast"], 300)):
            start = time.monotonic()
            r = run(cmd, limit, cwd=ARGS.source_dir, env=cls.env)
            cls.timings[step] = time.monotonic() - start
            if r.returncode != 0:
                raise AssertionError(f"{' '.join(cmd)} failed:\n"
                                     f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
        print(f"container_test: base {cls.timings['base']:.0f} s, "
              f"image {cls.timings['image']:.0f} s", file=sys.stderr)
        cls._load_stubs()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def _load_stubs(cls):
        compile_stubs(ARGS.proto_dir, cls.tmp)
        from metalserve.v1 import inference_pb2, inference_pb2_grpc
        cls.pb2 = inference_pb2
        cls.pb2_grpc = inference_pb2_grpc

    # --- helpers -------------------------------------------------------------

    def engine_cmd(self, *args, timeout=60):
        return run([self.engine, *args], timeout, env=self.env)

    def start_container(self, name, grpc_port, metrics_port):
        r = self.engine_cmd(
            "run", "-d", "--name", name, "--network=host", "--no-healthcheck",
            IMAGE, f"--model={MODEL_IN_IMAGE}",
            f"--address=127.0.0.1:{grpc_port}", "--http_address=",
            f"--metrics_address=127.0.0.1:{metrics_port}", *SERVER_FLAGS)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.addCleanup(self.engine_cmd, "rm", "-f", "-t", "0", name)

    def wait_ready(self, metrics_port, alive, log):
        def ready():
            if not alive():
                raise AssertionError("server exited early:\n" + log())
            _, body = http_get(f"http://127.0.0.1:{metrics_port}/metrics")
            return "\nmetalserve_ready 1" in body
        try:
            wait_for("the server to report ready", ready,
                     time.monotonic() + 120, interval=0.2)
        except AssertionError as e:
            raise AssertionError(f"{e}\n--- log ---\n{log()}") from None

    def request(self):
        values = [((i * 37) % 101) / 50.0 - 1.0 for i in range(2 * 3 * 8 * 8)]
        return self.pb2.PredictRequest(inputs=[self.pb2.Tensor(
            name="input", dtype=self.pb2.DATA_TYPE_FLOAT32, shape=[2, 3, 8, 8],
            data=struct.pack(f"<{len(values)}f", *values))])

    def predict(self, grpc_port):
        import grpc
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=30)
            reply = self.pb2_grpc.InferenceStub(channel).Predict(
                self.request(), timeout=30)
        return [(t.name, list(t.shape), t.data) for t in reply.outputs]

    def health(self, grpc_port):
        """grpc.health.v1.Health/Check for the whole server, as raw bytes:
        the reply is field 1 (status), SERVING = 1."""
        import grpc
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            check = channel.unary_unary("/grpc.health.v1.Health/Check")
            return check(b"", timeout=30)

    def host_answer(self):
        grpc_port, metrics_port = free_port(), free_port()
        log = os.path.join(self.tmp, "host.log")
        proc = Process([ARGS.server, f"--model={ARGS.model}",
                        f"--address=127.0.0.1:{grpc_port}", "--http_address=",
                        f"--metrics_address=127.0.0.1:{metrics_port}",
                        *SERVER_FLAGS], log, name="host metalserve")
        try:
            self.wait_ready(metrics_port, proc.alive, lambda: tail(log))
            return self.predict(grpc_port)
        finally:
            proc.stop(grace=20)

    # --- the test ------------------------------------------------------------

    def test_image_serves_like_the_host_binary_and_drains_on_stop(self):
        name = f"metalserve-test-{os.getpid()}"
        grpc_port, metrics_port = free_port(), free_port()
        self.start_container(name, grpc_port, metrics_port)

        def alive():
            r = self.engine_cmd("inspect", "-f", "{{.State.Running}}", name)
            return r.stdout.strip() == "true"

        def log():
            r = self.engine_cmd("logs", name)
            return (r.stdout + r.stderr)[-4000:]

        self.wait_ready(metrics_port, alive, log)
        self.assertEqual(self.health(grpc_port), b"\x08\x01", "not SERVING")

        pid = self.engine_cmd("inspect", "-f", "{{.State.Pid}}", name).stdout
        with open(f"/proc/{int(pid)}/status") as f:
            uids = [line.split()[1:] for line in f if line.startswith("Uid:")][0]
        self.assertEqual(set(uids), {"10001"}, "server not running as 10001")

        in_container = self.predict(grpc_port)
        self.assertTrue(in_container and in_container[0][2])
        self.assertEqual(in_container, self.host_answer(),
                         "container and host binaries answer differently")

        start = time.monotonic()
        r = self.engine_cmd("stop", "-t", str(STOP_GRACE_S), name,
                            timeout=STOP_GRACE_S + 30)
        took = time.monotonic() - start
        self.assertEqual(r.returncode, 0, r.stderr)
        code = self.engine_cmd("inspect", "-f", "{{.State.ExitCode}}", name)
        self.assertEqual(code.stdout.strip(), "0", log())
        self.assertLess(took, STOP_GRACE_S, "stop needed SIGKILL")
        self.assertIn("draining", log())

    def test_image_keeps_its_healthcheck(self):
        r = self.engine_cmd("image", "inspect", IMAGE)
        self.assertEqual(r.returncode, 0, r.stderr)
        image = json.loads(r.stdout)[0]
        # docker: Config.Healthcheck; podman: Healthcheck beside Config.
        check = image["Config"].get("Healthcheck") or image.get("Healthcheck")
        test = (check or {}).get("Test") or []
        self.assertIn("metalserve_ready 1", " ".join(test),
                      "HEALTHCHECK dropped (OCI format?)")

    def test_healthcheck_passes_once_the_server_is_ready(self):
        """The image's own HEALTHCHECK, on its default ports, in a network
        namespace of its own (loopback only: no port can clash)."""
        name = f"metalserve-health-{os.getpid()}"
        r = self.engine_cmd(
            "run", "-d", "--name", name, "--network=none", IMAGE,
            f"--model={MODEL_IN_IMAGE}", "--address=127.0.0.1:8500",
            "--metrics_address=127.0.0.1:9464", *SERVER_FLAGS)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.addCleanup(self.engine_cmd, "rm", "-f", "-t", "0", name)

        def healthy():
            if self.engine == "podman":  # runs the check now
                return self.engine_cmd("healthcheck", "run", name).returncode == 0
            r = self.engine_cmd("inspect", "-f", "{{.State.Health.Status}}", name)
            return r.stdout.strip() == "healthy"
        wait_for("the HEALTHCHECK to pass", healthy, time.monotonic() + 120,
                 interval=0.5)

    def test_cuda_dockerfile_parses_and_resolves_its_build_args(self):
        """The CUDA image cannot be built here (no nvidia/cuda base image and
        no registry): the engine parses the file, substitutes CUDA_VERSION
        into FROM, and stops only because the base image is absent."""
        for args, version in (([], "13.0.0"),
                              (["--build-arg", "CUDA_VERSION=12.8.0"], "12.8.0")):
            r = self.engine_cmd("build", "--pull=never", "--isolation=chroot",
                                "-f", "docker/Dockerfile.cuda", *args,
                                "-t", "metalserve:cuda-check", ARGS.source_dir,
                                timeout=120) if self.engine == "podman" else \
                self.engine_cmd("build", "--pull=false", "-f",
                                os.path.join(ARGS.source_dir,
                                             "docker/Dockerfile.cuda"),
                                *args, ARGS.source_dir, timeout=120)
            out = r.stdout + r.stderr
            self.assertNotEqual(r.returncode, 0, "built without a CUDA base?")
            self.assertIn(f"nvidia/cuda:{version}-cudnn-devel-ubuntu24.04", out)
            self.assertRegex(out, r"(?i)not known|not found|no such image|"
                                  r"pull access denied", out[-2000:])


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--source_dir", required=True)
    p.add_argument("--server", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--proto_dir", required=True)
    ARGS, rest = p.parse_known_args()
    if engine() is None:
        if platform.system() == "Darwin":
            print("SKIP: no Linux container engine on macOS", file=sys.stderr)
            sys.exit(SKIP)
        print("FAIL: neither podman nor docker is installed; scripts/setup "
              "installs podman buildah runc debootstrap on Debian",
              file=sys.stderr)
        sys.exit(1)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
