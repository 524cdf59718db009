#!/usr/bin/python3
"""Device memory admission served end to end (docs/repository.md): build/
metalserve with --model_repository over two copies of tiny_cnn (from
build/model_repository, exported by models/export.py), --device=cpu and a
--device_memory_budget that fits one version's estimate but not two, on free
127.0.0.1 ports, driven from Python grpcio over the KServe API:

  * at start-up one copy loads and the other is refused (UNAVAILABLE in the
    index, the server keeps serving);
  * RepositoryModelLoad of the second is RESOURCE_EXHAUSTED naming the
    figures (its estimate, the device, the budget, what is loaded), and the
    first keeps answering;
  * after the first is unloaded (and released), the second loads and answers.

The budget is 1.5 x the documented estimate (server/repository/
memory_budget.h): file size x 1.5 + 2 x max_batch_size x row bytes of the
input (3x8x8 float32) and output (10 float32). A loaded version counts at
least its estimate, so two never fit, whatever the resident set measured.

Needs /usr/bin/python3 with grpcio and grpc_tools. A missing binary or model
is a failure, not a skip. Everything it starts is stopped; every wait is
bounded.
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
MAX_BATCH = 8
OVERHEAD = 1.5  # kMemoryOverheadFactor
ROW_BYTES = 3 * 8 * 8 * 4 + 10 * 4


class MemoryBudget(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="metalserve_memory_budget_")
        compile_stubs(ARGS.proto_dir, cls.tmp, protos=("inference/grpc_service.proto",))
        global kpb, kgrpc
        from inference import grpc_service_pb2 as kpb, grpc_service_pb2_grpc as kgrpc

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.root = os.path.join(self.tmp, "repository")
        for name in ("tiny_cnn", "tiny_cnn_copy"):
            shutil.copytree(os.path.join(ARGS.repository, "tiny_cnn"),
                            os.path.join(self.root, name))
            config = os.path.join(self.root, name, "config.json")
            with open(config) as f:
                settings = json.load(f)
            settings["name"] = name
            with open(config, "w") as f:
                json.dump(settings, f)
        size = os.path.getsize(os.path.join(self.root, "tiny_cnn", "1", "model.pt"))
        self.estimate = int(size * OVERHEAD + 0.999) + 2 * MAX_BATCH * ROW_BYTES
        port = free_port()
        self.log = self.root + ".log"
        self.server = Process(
            [ARGS.server, f"--model_repository={self.root}", "--model_control=explicit",
             f"--device_memory_budget={self.estimate * 3 // 2}",
             f"--address=127.0.0.1:{port}", "--http_address=", "--metrics_address=",
             "--device=cpu", "--threads=1", "--cache_dir=none", "--monitor_log_interval=0",
             f"--max_batch_size={MAX_BATCH}", "--max_queue_delay=1ms"], log_path=self.log)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.kserve = kgrpc.GRPCInferenceServiceStub(self.channel)

        def ready():
            assert self.server.alive(), "server exited:\n" + tail(self.log)
            return self.kserve.ServerReady(kpb.ServerReadyRequest(), timeout=2).ready
        wait_for("server ready", ready, time.monotonic() + 120)

    def tearDown(self):
        self.channel.close()
        self.server.stop()

    def states(self):
        index = self.kserve.RepositoryIndex(kpb.RepositoryIndexRequest(), timeout=10)
        return {(m.name, m.version): m.state for m in index.models}

    def infer(self, model):
        req = kpb.ModelInferRequest(model_name=model)
        req.inputs.add(name="input", datatype="FP32", shape=[1, 3, 8, 8])
        req.raw_input_contents.append(struct.pack("<192f", *([0.5] * 192)))
        resp = self.kserve.ModelInfer(req, timeout=30)
        self.assertEqual(len(resp.raw_output_contents[0]), 10 * 4)
        return resp

    def load(self, model):
        return self.kserve.RepositoryModelLoad(
            kpb.RepositoryModelLoadRequest(model_name=model), timeout=120)

    def test_second_load_is_refused_naming_the_figures_until_the_first_is_unloaded(self):
        states = self.states()
        ready = [m for (m, v), s in states.items() if s == "READY"]
        self.assertEqual(len(ready), 1, states)
        first = ready[0]
        second = "tiny_cnn_copy" if first == "tiny_cnn" else "tiny_cnn"
        self.assertEqual(states[(second, "1")], "UNAVAILABLE")

        with self.assertRaises(grpc.RpcError) as e:
            self.load(second)
        self.assertEqual(e.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        details = e.exception.details()
        mib = lambda b: f"{b / 2**20:.2f} MiB"  # noqa: E731
        for part in (f"loading {second} version 1 needs about {mib(self.estimate)}",
                     f"of its {mib(self.estimate * 3 // 2)} budget free",
                     f"(loaded: {first} version 1 "):
            self.assertIn(part, details)
        self.assertEqual(self.infer(first).model_version, "1")

        self.kserve.RepositoryModelUnload(
            kpb.RepositoryModelUnloadRequest(model_name=first), timeout=30)
        wait_for(f"{first} released", lambda: (first, "1") not in self.states(),
                 time.monotonic() + 30)
        self.load(second)
        self.assertEqual(self.infer(second).model_version, "1")
        self.assertEqual(self.states()[(second, "1")], "READY")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--server", required=True)
    p.add_argument("--repository", required=True)
    p.add_argument("--proto_dir", required=True)
    ARGS, rest = p.parse_known_args()
    for path in (ARGS.server, os.path.join(ARGS.repository, "tiny_cnn", "1", "model.pt")):
        if not os.path.exists(path):
            sys.exit(f"memory_budget_test: {path} is missing (build first)")
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
