#!/usr/bin/python3
"""Memory returned after an unload (docs/repository.md, "Memory admission"):
build/metalserve on CPU with --model_repository over a temporary repository
holding identity, on a free 127.0.0.1 port. resnet18 (build/models, exported
by models/export.py; 45 MiB of weights) is added, loaded with
RepositoryModelLoad, answered once, unloaded, and its release awaited; the
server's resident set (VmRSS) is read before the load, after it and after
the release.

Asserted: the release gives back at least RETURNED_FRACTION of what the load
added. The server keeps large freed blocks in its heap (process_setup.cc),
so without the release thread's malloc_trim the resident set did not fall
at all (mobilenet_v2: 456 MiB before and after the unload).

Linux only (/proc); elsewhere the test is skipped, shown as skipped. A
missing binary or model is a failure. Everything it starts is stopped;
every wait is bounded.
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

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "testing"))
from proc_util import Process, compile_stubs, free_port, tail, wait_for  # noqa: E402

ARGS = None
MODEL = "resnet18"
# Share of the load's resident growth that the release must give back. The
# rest is LibTorch's one-time state of a first load of this architecture
# (kernels, thread pools, JIT structures) and heap fragmentation.
RETURNED_FRACTION = 0.5


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS in /proc/{pid}/status")


def add_model(root, name):
    os.makedirs(os.path.join(root, name, "1"))
    shutil.copy(os.path.join(ARGS.models, name + ".pt"), os.path.join(root, name, "1", "model.pt"))
    with open(os.path.join(ARGS.models, name + ".json")) as f:
        config = json.load(f)
    config.pop("version", None)
    config.pop("torch_version", None)
    with open(os.path.join(root, name, "config.json"), "w") as f:
        json.dump(config, f)


@unittest.skipUnless(os.path.exists("/proc/self/status"), "needs /proc (Linux)")
class UnloadMemory(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="metalserve_unload_memory_")
        compile_stubs(ARGS.proto_dir, cls.tmp, protos=("inference/grpc_service.proto",))
        global kpb, kgrpc
        from inference import grpc_service_pb2 as kpb, grpc_service_pb2_grpc as kgrpc

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.root = os.path.join(self.tmp, "repository")
        add_model(self.root, "identity")
        port = free_port()
        self.log = os.path.join(self.tmp, "server.log")
        self.server = Process(
            [ARGS.server, f"--model_repository={self.root}", "--model_control=explicit",
             f"--address=127.0.0.1:{port}", "--http_address=", "--metrics_address=",
             "--device=cpu", "--threads=1", "--cache_dir=none", "--monitor_log_interval=0",
             "--optimize=none", "--max_batch_size=2", "--max_queue_delay=1ms"],
            log_path=self.log)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.kserve = kgrpc.GRPCInferenceServiceStub(self.channel)

        def ready():
            assert self.server.alive(), "server exited:\n" + tail(self.log)
            return self.kserve.ServerReady(kpb.ServerReadyRequest(), timeout=2).ready
        wait_for("server ready", ready, time.monotonic() + 120)

    def tearDown(self):
        self.channel.close()
        self.server.stop()

    def released(self):
        index = self.kserve.RepositoryIndex(kpb.RepositoryIndexRequest(), timeout=10)
        return all((m.name, m.version) != (MODEL, "1") for m in index.models)

    def infer(self):
        req = kpb.ModelInferRequest(model_name=MODEL)
        req.inputs.add(name="input", datatype="FP32", shape=[1, 3, 224, 224])
        req.raw_input_contents.append(bytes(3 * 224 * 224 * 4))
        resp = self.kserve.ModelInfer(req, timeout=60)
        self.assertEqual(len(resp.raw_output_contents[0]), 1000 * 4)

    def test_release_after_unload_returns_most_of_what_the_load_added(self):
        pid = self.server.pid
        before = rss_bytes(pid)
        add_model(self.root, MODEL)
        self.kserve.RepositoryModelLoad(kpb.RepositoryModelLoadRequest(model_name=MODEL),
                                        timeout=120)
        self.infer()
        loaded = rss_bytes(pid)
        self.kserve.RepositoryModelUnload(kpb.RepositoryModelUnloadRequest(model_name=MODEL),
                                          timeout=60)
        wait_for(f"{MODEL} released", self.released, time.monotonic() + 60)
        after = rss_bytes(pid)
        mib = lambda b: f"{b / 2**20:.1f} MiB"  # noqa: E731
        figures = (f"RSS before the load {mib(before)}, after it {mib(loaded)}, "
                   f"after the release {mib(after)}")
        print(figures, file=sys.stderr)
        grown = loaded - before
        self.assertGreater(grown, 40 << 20, figures)  # the weights alone are 45 MiB
        self.assertGreaterEqual(loaded - after, RETURNED_FRACTION * grown, figures)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--server", required=True)
    p.add_argument("--models", required=True)
    p.add_argument("--proto_dir", required=True)
    ARGS, rest = p.parse_known_args()
    for path in (ARGS.server, os.path.join(ARGS.models, MODEL + ".pt"),
                 os.path.join(ARGS.models, "identity.pt")):
        if not os.path.exists(path):
            sys.exit(f"unload_memory_test: {path} is missing (build first)")
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
