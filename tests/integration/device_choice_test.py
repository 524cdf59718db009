#!/usr/bin/python3
"""--device=auto's measurement table, seen by a client: build/metalserve
serving tiny_cnn with --device=auto on free 127.0.0.1 ports, asked over
gRPC (grpcio, the native API) for GetModelMetadata, and as KServe clients
read it: REST GET /v2/models/{name} (the device_choice extension field) and
the KServe gRPC ModelConfig's parameters["device_choice"] (JSON text).

On this CPU-only machine auto finds no working accelerator, so the CPU is
the one device timed: device_choice must say requested "auto", reason
"no_accelerator", and carry one CPU row per warm-up batch size (1 and
--max_batch_size) with a positive time, the same cells the metric
metalserve_device_forward_seconds exports. An explicit --device=cpu
reports "explicit" and no table. examples/python/client.py prints the
table in its JSON. Under --model_repository, a model whose config.json
says "auto" is measured the same way, and models asking "auto" and "cpu"
share the CPU's one device thread.

Needs /usr/bin/python3 with grpcio and grpc_tools.
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

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "testing"))
from proc_util import Process, compile_stubs, free_port, http_get, tail, wait_for  # noqa: E402

ARGS = None


class DeviceChoice(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="metalserve_device_choice_")
        compile_stubs(ARGS.proto_dir, cls.tmp,
                      protos=("inference/grpc_service.proto", "metalserve/v1/inference.proto"))
        global kpb, kgrpc, npb, ngrpc
        from inference import grpc_service_pb2 as kpb, grpc_service_pb2_grpc as kgrpc
        from metalserve.v1 import inference_pb2 as npb, inference_pb2_grpc as ngrpc

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def serve(self, device, model_flag=None, model_names=("",)):
        """Starts the server; returns the GetModelMetadata answer of the last
        of `model_names` once every one of them answers ("": the one model)."""
        port = free_port()
        self.metrics_port = free_port()
        self.http_port = free_port()
        self.log = os.path.join(self.tmp, self.id().split(".")[-1] + ".log")
        self.server = Process(
            [ARGS.server, model_flag or f"--model={ARGS.model}", f"--device={device}",
             f"--address=127.0.0.1:{port}", f"--http_address=127.0.0.1:{self.http_port}",
             f"--metrics_address=127.0.0.1:{self.metrics_port}", "--threads=1",
             "--cache_dir=none", "--monitor_log_interval=0", "--max_batch_size=4"],
            log_path=self.log)
        self.target = f"127.0.0.1:{port}"
        self.addCleanup(self.server.stop)
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.addCleanup(channel.close)
        stub = ngrpc.InferenceStub(channel)
        self.kserve = kgrpc.GRPCInferenceServiceStub(channel)

        def metadata():
            self.assertTrue(self.server.alive(), "server exited:\n" + tail(self.log))
            answers = [stub.GetModelMetadata(npb.GetModelMetadataRequest(model_name=m), timeout=2)
                       for m in model_names]
            return answers[-1]
        self.native = stub
        return wait_for("GetModelMetadata", metadata, time.monotonic() + 120)

    def rest_choice(self, path):
        status, body = http_get(f"http://127.0.0.1:{self.http_port}{path}")
        self.assertEqual(status, 200, body)
        return json.loads(body).get("device_choice")

    def config_choice(self, model):
        config = self.kserve.ModelConfig(kpb.ModelConfigRequest(name=model), timeout=10).config
        self.assertIn("device_choice", config.parameters)
        return json.loads(config.parameters["device_choice"].string_value)

    def test_auto_on_a_cpu_only_machine_reports_the_cpu_rows_and_why(self):
        meta = self.serve("auto")
        self.assertEqual(meta.device, "cpu")
        choice = meta.device_choice
        self.assertEqual(choice.requested, "auto")
        self.assertEqual(choice.reason, "no_accelerator")
        self.assertEqual([(t.device, t.batch_size) for t in choice.timings],
                         [("cpu", 1), ("cpu", 4)])
        for t in choice.timings:
            self.assertGreater(t.seconds, 0)
            self.assertLess(t.seconds, 60)
        _, body = http_get(f"http://127.0.0.1:{self.metrics_port}/metrics")
        # The table is the served version's (labelled with its model and
        # version, removed with it).
        self.assertIn('metalserve_device_forward_seconds{batch_size="4",device="cpu",'
                      f'model="{meta.model_name}",version="1"}}', body)
        example = subprocess.run(
            ["/usr/bin/python3", ARGS.example, f"--target={self.target}",
             f"--proto_dir={ARGS.proto_dir}"], capture_output=True, text=True, timeout=120)
        self.assertEqual(example.returncode, 0, example.stderr)
        printed = json.loads(example.stdout)["device_choice"]
        self.assertEqual((printed["device"], printed["reason"]), ("cpu", "no_accelerator"))
        self.assertEqual([t["batch_size"] for t in printed["timings"]], [1, 4])

    def test_kserve_clients_read_the_table_in_rest_metadata_and_model_config(self):
        meta = self.serve("auto")
        choice = self.rest_choice(f"/v2/models/{meta.model_name}")
        self.assertEqual((choice["requested"], choice["device"], choice["reason"]),
                         ("auto", "cpu", "no_accelerator"))
        self.assertEqual([(t["device"], t["batch_size"]) for t in choice["timings"]],
                         [("cpu", 1), ("cpu", 4)])
        for t in choice["timings"]:
            self.assertGreater(t["forward_us"], 0)
        self.assertEqual(choice["skipped"], [])
        self.assertEqual(
            self.rest_choice(f"/v2/models/{meta.model_name}/versions/{meta.model_version}"),
            choice)
        self.assertEqual(self.config_choice(meta.model_name), choice)

    def test_a_repository_measures_auto_per_model_and_shares_one_thread_per_device(self):
        """Two models of one repository on this CPU-only machine, config.json
        device "auto" and "cpu": auto is measured at load as with --model
        (not the fixed order of a shared thread), both land on the CPU, and
        the device thread is keyed by that resolved device: one thread, one
        log line, for both."""
        root = os.path.join(self.tmp, "repository")
        with open(os.path.splitext(ARGS.model)[0] + ".json") as f:
            signature = json.load(f)
        for name, device in (("auto_cnn", "auto"), ("cpu_cnn", "cpu")):
            os.makedirs(os.path.join(root, name, "1"))
            shutil.copy(ARGS.model, os.path.join(root, name, "1", "model.pt"))
            with open(os.path.join(root, name, "config.json"), "w") as f:
                json.dump({"name": name, "inputs": signature["inputs"],
                           "outputs": signature["outputs"], "device": device}, f)
        self.serve("cpu", f"--model_repository={root}", ("auto_cnn", "cpu_cnn"))

        def meta(name):
            return self.native.GetModelMetadata(
                npb.GetModelMetadataRequest(model_name=name), timeout=10)
        auto, cpu = meta("auto_cnn"), meta("cpu_cnn")
        self.assertEqual((auto.device, cpu.device), ("cpu", "cpu"))
        self.assertEqual((auto.device_choice.requested, auto.device_choice.reason),
                         ("auto", "no_accelerator"))
        self.assertEqual([(t.device, t.batch_size) for t in auto.device_choice.timings],
                         [("cpu", 1), ("cpu", 4)])
        self.assertEqual((cpu.device_choice.requested, cpu.device_choice.reason),
                         ("cpu", "explicit"))
        rest = self.rest_choice("/v2/models/auto_cnn")
        self.assertEqual([t["batch_size"] for t in rest["timings"]], [1, 4])
        with open(self.log, errors="replace") as f:
            started = re.findall(r"device thread for (\S+) started", f.read())
        self.assertEqual(started, ["cpu"], tail(self.log))

    def test_an_explicit_device_reports_explicit_and_no_table(self):
        meta = self.serve("cpu")
        choice = meta.device_choice
        self.assertEqual((choice.requested, choice.reason), ("cpu", "explicit"))
        self.assertEqual(len(choice.timings), 0)
        rest = self.rest_choice(f"/v2/models/{meta.model_name}")
        self.assertEqual((rest["reason"], rest["timings"]), ("explicit", []))


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--server", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--proto_dir", required=True)
    p.add_argument("--example", required=True)
    ARGS, rest = p.parse_known_args()
    for path in (ARGS.server, ARGS.model, ARGS.example):
        if not os.path.exists(path):
            sys.exit(f"device_choice_test: {path} is missing (build first)")
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
