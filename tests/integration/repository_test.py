#!/usr/bin/python3
"""The model repository served end to end: build/metalserve with
--model_repository (a copy of build/model_repository: identity and tiny_cnn,
exported by models/export.py) and --model_control=explicit, on free
127.0.0.1 ports, driven from Python grpcio over the KServe and native APIs:

  * two models on the one CPU device thread answer concurrently, each equal
    to its own direct forward (TorchScript in this process);
  * reload under load (issue 18's test): build/metalserve-bench calls
    identity over KServe gRPC at concurrency 32 for 20 s while versions 2..6
    are loaded 3 s apart: zero errors, every version 1..6 answered, no
    worker ever answered by a version older than one it had seen
    (model_version_regressions, client/model_versions.h), and version 6 ends
    READY alone;
  * unload under load: every answer is OK or NOT_FOUND (requests admitted
    before the unload succeed; none is cut off), and NOT_FOUND never comes
    before an OK on one client;
  * a load that fails (a corrupt model.pt) names the file and leaves the
    old version serving; metalserve_model_state and model_loads_total say so;
    an unloaded version's state series goes once it has drained;
  * an unknown model or version is NOT_FOUND listing what is loaded;
    request parameters on RepositoryModelLoad are INVALID_ARGUMENT naming
    them; ServerMetadata lists the model_repository extension;
  * the native Predict and GetModelMetadata take model_version;
  * SIGHUP rescans: a new version folder is served;
  * examples/python/repository.py lists, unloads and loads;
  * the same extension over REST (urllib): POST /v2/repository/index lists
    the models, .../load serves a new version folder (a REST infer reports
    it), .../unload then infer is 404, parameters are refused 400 naming
    them; and a load runs off the polling thread: with --http_threads=1,
    GET /v2/health/live answers within 1 s while a load (a model whose
    warm-up forwards take seconds) runs, and a second load meanwhile is
    refused 503.

Needs /usr/bin/python3 with grpcio, grpc_tools and torch. A missing binary,
model or tool is a failure, not a skip. Everything it starts is stopped;
every wait is bounded.
"""
import argparse
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import urllib.error
import urllib.request

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "testing"))
from proc_util import Process, compile_stubs, free_port, http_get, tail, wait_for  # noqa: E402

ARGS = None
CLIENTS = 4
# Issue 18's reload-under-load test: metalserve-bench's concurrency and run
# length, and the gap between the five loads.
RELOAD_CONCURRENCY = 32
RELOAD_SECONDS = 20
RELOAD_INTERVAL = 3.0


class Repository(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="metalserve_repository_")
        compile_stubs(ARGS.proto_dir, cls.tmp,
                      protos=("inference/grpc_service.proto", "metalserve/v1/inference.proto"))
        global kpb, kgrpc, npb, ngrpc
        from inference import grpc_service_pb2 as kpb, grpc_service_pb2_grpc as kgrpc
        from metalserve.v1 import inference_pb2 as npb, inference_pb2_grpc as ngrpc

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.root = os.path.join(self.tmp, self.id().split(".")[-1])
        shutil.copytree(ARGS.repository, self.root)
        port = free_port()
        self.http_port = free_port()
        self.metrics_port = free_port()
        self.log = self.root + ".log"
        self.server = Process(
            [ARGS.server, f"--model_repository={self.root}", "--model_control=explicit",
             f"--address=127.0.0.1:{port}", f"--http_address=127.0.0.1:{self.http_port}",
             "--http_threads=1",
             f"--metrics_address=127.0.0.1:{self.metrics_port}",
             "--device=cpu", "--threads=1", "--cache_dir=none", "--monitor_log_interval=0",
             "--max_batch_size=8", "--max_queue_delay=1ms"], log_path=self.log)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.kserve = kgrpc.GRPCInferenceServiceStub(self.channel)
        self.native = ngrpc.InferenceStub(self.channel)
        self.target = f"127.0.0.1:{port}"

        def ready():
            assert self.server.alive(), "server exited:\n" + tail(self.log)
            return self.kserve.ServerReady(kpb.ServerReadyRequest(), timeout=2).ready
        wait_for("server ready", ready, time.monotonic() + 120)

    def tearDown(self):
        self.channel.close()
        self.server.stop()

    def add_version(self, model, version, source_version=1, data=None):
        d = os.path.join(self.root, model, str(version))
        os.makedirs(d)
        if data is not None:
            with open(os.path.join(d, "model.pt"), "wb") as f:
                f.write(data)
        else:
            shutil.copy(os.path.join(self.root, model, str(source_version), "model.pt"), d)

    def infer(self, model, values, shape, version="", timeout=30):
        req = kpb.ModelInferRequest(model_name=model, model_version=version)
        req.inputs.add(name="input", datatype="FP32", shape=shape)
        req.raw_input_contents.append(struct.pack(f"<{len(values)}f", *values))
        return self.kserve.ModelInfer(req, timeout=timeout)

    def identity(self, version=""):
        return self.infer("identity", [1.0, 2.0, 3.0, 4.0], [1, 4], version)

    def metric(self, name, **labels):
        """The value of the series of `name` with (at least) `labels`, or None."""
        _, text = http_get(f"http://127.0.0.1:{self.metrics_port}/metrics")
        for line in text.splitlines():
            if line.startswith(name + "{") and all(f'{k}="{v}"' in line
                                                   for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
        return None

    def metric_sum(self, name, **labels):
        """The sum over every series of `name` with (at least) `labels`."""
        _, text = http_get(f"http://127.0.0.1:{self.metrics_port}/metrics")
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name + "{")
                   and all(f'{k}="{v}"' in line for k, v in labels.items()))

    @staticmethod
    def floats(resp, i=0):
        data = resp.raw_output_contents[i]
        return list(struct.unpack(f"<{len(data) // 4}f", data))

    def test_two_models_answer_concurrently_each_equal_to_its_own_forward(self):
        import torch
        tiny = torch.jit.load(os.path.join(ARGS.repository, "tiny_cnn", "1", "model.pt"))
        errors, checked = [], [0]

        def client(seed):
            g = torch.Generator().manual_seed(seed)
            for _ in range(15):
                try:
                    x = torch.rand(2, 3, 8, 8, generator=g)
                    got = self.floats(self.infer("tiny_cnn", x.flatten().tolist(), [2, 3, 8, 8]))
                    want = tiny(x).flatten().tolist()
                    assert max(abs(a - b) for a, b in zip(got, want)) < 1e-4, (got, want)
                    v = [float(seed), 2.0, 3.0, 4.0]
                    assert self.floats(self.infer("identity", v, [1, 4])) == v
                    checked[0] += 1
                except Exception as e:  # noqa: BLE001 - reported below
                    errors.append(repr(e))
        threads = [threading.Thread(target=client, args=(s,)) for s in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertEqual(errors, [])
        self.assertEqual(checked[0], 15 * CLIENTS)

    def test_a_model_whose_config_lists_devices_is_served_by_the_hybrid(self):
        # This machine's stand-in for two devices: first_available resolves to
        # the CPU, so the hybrid has two CPU runners, each on its device's
        # shared thread; what is checked is the path (config -> hybrid ->
        # per-device series), and that answers equal the plain model's.
        src = os.path.join(self.root, "tiny_cnn")
        dst = os.path.join(self.root, "tiny_hybrid")
        os.makedirs(os.path.join(dst, "1"))
        shutil.copy(os.path.join(src, "1", "model.pt"), os.path.join(dst, "1"))
        with open(os.path.join(src, "config.json")) as f:
            config = json.load(f)
        config["name"] = "tiny_hybrid"
        config["devices"] = ["first_available", "cpu"]
        with open(os.path.join(dst, "config.json"), "w") as f:
            json.dump(config, f)
        self.kserve.RepositoryModelLoad(
            kpb.RepositoryModelLoadRequest(model_name="tiny_hybrid"), timeout=120)
        x = [0.25] * 192
        for _ in range(5):
            self.assertEqual(self.floats(self.infer("tiny_hybrid", x, [1, 3, 8, 8])),
                             self.floats(self.infer("tiny_cnn", x, [1, 3, 8, 8])))
        meta = self.native.GetModelMetadata(
            npb.GetModelMetadataRequest(model_name="tiny_hybrid"), timeout=10)
        self.assertEqual(meta.device, "cpu+cpu")
        self.assertEqual(meta.device_choice.reason, "hybrid")
        # Both runners share the label "cpu": every batch is counted there.
        self.assertEqual(self.metric("metalserve_device_batches_total", model="tiny_hybrid",
                                     version="1", device="cpu"), 5.0)
        with open(self.log) as f:
            self.assertIn("hybrid: tiny_hybrid", f.read())
        # A config naming one device for hybrid serving is refused at load,
        # and the served models are untouched.
        config["devices"] = ["cpu"]
        with open(os.path.join(dst, "config.json"), "w") as f:
            json.dump(config, f)
        with self.assertRaises(grpc.RpcError) as e:
            self.kserve.RepositoryModelLoad(
                kpb.RepositoryModelLoadRequest(model_name="tiny_hybrid"), timeout=60)
        self.assertIn("devices: hybrid serving needs two or more devices", e.exception.details())
        self.assertEqual(self.floats(self.identity()), [1.0, 2.0, 3.0, 4.0])

    def run_clients(self, call, stop):
        """Each client calls `call()` until `stop` is set; returns one list
        per client of (code name, version or None)."""
        seen = [[] for _ in range(CLIENTS)]

        def client(i):
            while not stop.is_set():
                try:
                    r = call()
                    seen[i].append(("OK", r.model_version))
                except grpc.RpcError as e:
                    seen[i].append((e.code().name, e.details()))
        threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
        for t in threads:
            t.start()
        return seen, threads

    def test_reload_under_load_switches_versions_once_each_without_errors(self):
        # Loads start once version 1 has answered bench traffic, then one
        # every 3 s: the last (version 6) about 12 s in, serving 8 s more.
        bench = subprocess.Popen(
            [ARGS.bench, f"--target={self.target}", "--protocol=kserve",
             "--model_name=identity", f"--concurrency={RELOAD_CONCURRENCY}",
             f"--duration={RELOAD_SECONDS}s", "--warmup=0s", "--deadline=30s",
             "--output=json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_for("version 1 answering bench traffic",
                     lambda: self.metric_sum("metalserve_requests_total", model="identity",
                                             version="1", code="OK") > 0,
                     time.monotonic() + 30)
            start = time.monotonic()
            for i, v in enumerate(range(2, 7)):
                time.sleep(max(0.0, start + RELOAD_INTERVAL * i - time.monotonic()))
                self.add_version("identity", v)
                self.kserve.RepositoryModelLoad(
                    kpb.RepositoryModelLoadRequest(model_name="identity"), timeout=60)
            out, err = bench.communicate(timeout=RELOAD_SECONDS + 60)
        finally:
            if bench.poll() is None:
                bench.kill()
                bench.communicate()
        self.assertEqual(bench.returncode, 0, err)
        run = json.loads(out)["runs"][0]
        self.assertEqual(run["errors"], {}, run["error_messages"])
        self.assertGreater(run["ok"], 0)
        self.assertEqual(run["model_version_regressions"], 0, run["versions"])
        self.assertEqual(list(run["versions"]), ["1", "2", "3", "4", "5", "6"])
        index = self.kserve.RepositoryIndex(kpb.RepositoryIndexRequest(ready=True), timeout=10)
        self.assertEqual([(m.version, m.state) for m in index.models if m.name == "identity"],
                         [("6", "READY")])

    def test_unload_under_load_finishes_admitted_requests(self):
        stop = threading.Event()
        seen, threads = self.run_clients(
            lambda: self.infer("tiny_cnn", [0.5] * 192, [1, 3, 8, 8]), stop)
        try:
            time.sleep(1.0)
            self.kserve.RepositoryModelUnload(
                kpb.RepositoryModelUnloadRequest(model_name="tiny_cnn"), timeout=60)
            time.sleep(0.5)
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        for client in seen:
            codes = [c for c, _ in client]
            self.assertEqual(set(codes) - {"OK", "NOT_FOUND"}, set(), client[-5:])
            self.assertIn("OK", codes)
            first_missing = codes.index("NOT_FOUND")
            self.assertNotIn("OK", codes[first_missing:], "OK after NOT_FOUND")
            self.assertIn('"tiny_cnn" is not loaded; loaded: identity [1]',
                          client[first_missing][1])
        self.assertEqual(self.floats(self.identity()), [1.0, 2.0, 3.0, 4.0])
        # The unloaded version's state series goes once it has drained.
        wait_for("tiny_cnn's model_state series removed",
                 lambda: self.metric("metalserve_model_state", model="tiny_cnn") is None,
                 time.monotonic() + 30)
        self.assertEqual(self.metric("metalserve_model_state", model="identity", version="1",
                                     state="READY"), 1.0)

    def test_failed_load_names_the_file_and_keeps_the_old_version(self):
        self.add_version("identity", 2, data=b"not a TorchScript archive")
        with self.assertRaises(grpc.RpcError) as e:
            self.kserve.RepositoryModelLoad(
                kpb.RepositoryModelLoadRequest(model_name="identity"), timeout=120)
        self.assertIn(os.path.join("identity", "2", "model.pt"), e.exception.details())
        r = self.identity()
        self.assertEqual((r.model_version, self.floats(r)), ("1", [1.0, 2.0, 3.0, 4.0]))
        index = self.kserve.RepositoryIndex(kpb.RepositoryIndexRequest(), timeout=10)
        states = {(m.name, m.version): m.state for m in index.models}
        self.assertEqual(states[("identity", "1")], "READY")
        self.assertEqual(states[("identity", "2")], "UNAVAILABLE")
        self.assertEqual(self.metric("metalserve_model_state", model="identity", version="2",
                                     state="UNAVAILABLE"), 1.0)
        self.assertEqual(self.metric("metalserve_model_loads_total", model="identity",
                                     outcome="failed"), 1.0)
        self.assertEqual(self.metric("metalserve_model_loads_total", model="identity",
                                     outcome="ok"), 1.0)
        # Over REST: the same error, naming the file (INVALID_ARGUMENT: 400).
        status, err = self.rest("/v2/repository/models/identity/load", timeout=120)
        self.assertEqual(status, 400)  # INVALID_ARGUMENT, as on gRPC
        self.assertIn(os.path.join("identity", "2", "model.pt"), err["error"])

    def test_bad_requests_name_the_value_and_what_is_loaded(self):
        for model, version in (("nope", ""), ("identity", "9")):
            with self.assertRaises(grpc.RpcError) as e:
                self.infer(model, [1.0, 2.0, 3.0, 4.0], [1, 4], version)
            self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)
            self.assertIn(f'"{model}"', e.exception.details())
        self.assertIn("loaded: identity [1], tiny_cnn [1]", self.not_found_details("nope"))
        req = kpb.RepositoryModelLoadRequest(model_name="identity")
        req.parameters["config"].string_param = "{}"
        with self.assertRaises(grpc.RpcError) as e:
            self.kserve.RepositoryModelLoad(req, timeout=10)
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("parameters [config]", e.exception.details())
        meta = self.kserve.ServerMetadata(kpb.ServerMetadataRequest(), timeout=10)
        self.assertIn("model_repository", meta.extensions)

    def not_found_details(self, model):
        try:
            self.infer(model, [1.0, 2.0, 3.0, 4.0], [1, 4])
        except grpc.RpcError as e:
            return e.details()
        self.fail(f"{model} answered")

    def test_native_api_takes_a_version_and_reports_it(self):
        self.add_version("identity", 2)
        self.kserve.RepositoryModelLoad(
            kpb.RepositoryModelLoadRequest(model_name="identity"), timeout=120)
        meta = self.native.GetModelMetadata(
            npb.GetModelMetadataRequest(model_name="identity"), timeout=10)
        self.assertEqual((meta.model_name, meta.model_version), ("identity", "2"))
        req = npb.PredictRequest(model_name="identity", model_version="2")
        t = req.inputs.add(name="input", dtype=npb.DATA_TYPE_FLOAT32, shape=[1, 4])
        t.data = struct.pack("<4f", 1, 2, 3, 4)
        r = self.native.Predict(req, timeout=30)
        self.assertEqual((r.model_name, r.model_version), ("identity", "2"))
        req.model_version = "1"  # replaced by 2 under the latest-1 policy
        with self.assertRaises(grpc.RpcError) as e:
            self.native.Predict(req, timeout=30)
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)
        self.assertIn("ready: [2]", e.exception.details())

    def test_sighup_rescans_the_folder(self):
        self.add_version("identity", 2)
        self.assertEqual(self.identity().model_version, "1")  # nothing rescanned yet
        self.server.send_signal(signal.SIGHUP)
        wait_for("identity version 2 after SIGHUP",
                 lambda: self.identity().model_version == "2", time.monotonic() + 60)
        self.assertTrue(self.server.alive())

    def test_example_client_lists_unloads_and_loads(self):
        def run(*args):
            return subprocess.run(["/usr/bin/python3", ARGS.example, f"--target={self.target}",
                                   f"--proto_dir={ARGS.proto_dir}", *args],
                                  capture_output=True, text=True, timeout=180)
        out = run("index")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("identity\t1\tREADY", out.stdout)
        self.assertEqual(run("unload", "tiny_cnn").returncode, 0)
        missing = run("unload", "tiny_cnn")
        self.assertEqual(missing.returncode, 1)
        self.assertIn("NOT_FOUND", missing.stderr)
        self.assertEqual(run("load", "tiny_cnn").returncode, 0)
        self.assertIn("tiny_cnn\t1\tREADY", run("index", "--ready").stdout)


    # --- the model-repository extension over REST ---------------------------

    def rest(self, path, body=None, method="POST", timeout=30):
        """(status, parsed JSON body) of a request to the REST port."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.http_port}{path}", data=data,
                                     headers={"Content-Type": "application/json"},
                                     method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def rest_identity(self):
        return self.rest("/v2/models/identity/infer", {"inputs": [
            {"name": "input", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]})

    def test_rest_index_lists_models_and_filters_ready(self):
        self.assertEqual(self.rest("/v2/repository/models/tiny_cnn/unload"), (200, {}))
        # The unloaded version drains on the manager's release thread: UNLOADING
        # until its last request is done, then UNAVAILABLE (bounded wait).
        deadline, index_calls = time.monotonic() + 20, 0
        while True:
            status, index = self.rest("/v2/repository/index")
            index_calls += 1
            self.assertEqual(status, 200)
            states = [(m["name"], m["state"]) for m in index]
            if ("tiny_cnn", "UNLOADING") not in states or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertIn({"name": "identity", "version": "1", "state": "READY", "reason": ""},
                      index)
        self.assertIn(("tiny_cnn", "UNAVAILABLE"), states)
        status, ready = self.rest("/v2/repository/index", {"ready": True})
        self.assertEqual((status, [(m["name"], m["version"]) for m in ready]),
                         (200, [("identity", "1")]))
        status, err = self.rest("/v2/repository/index", {"ready": "yes"})
        self.assertEqual(status, 400)
        self.assertIn('"ready" must be true or false, got "yes"', err["error"])
        status, err = self.rest("/v2/repository/index", method="GET")
        self.assertEqual(status, 405)
        self.assertEqual(self.metric("metalserve_requests_total", method="http_RepositoryIndex",
                                     code="OK"), index_calls + 1.0)

    def test_rest_load_serves_a_new_version_and_unload_then_infer_is_404(self):
        self.assertEqual(self.rest_identity()[1]["model_version"], "1")
        self.add_version("identity", 2)
        self.assertEqual(self.rest("/v2/repository/models/identity/load", timeout=120),
                         (200, {}))
        status, answer = self.rest_identity()
        self.assertEqual((status, answer["model_version"], answer["outputs"][0]["data"]),
                         (200, "2", [1, 2, 3, 4]))
        self.assertEqual(self.rest("/v2/repository/models/identity/unload"), (200, {}))
        status, err = self.rest_identity()
        self.assertEqual(status, 404)
        self.assertIn('"identity" is not loaded', err["error"])
        status, err = self.rest("/v2/repository/models/identity/unload")
        self.assertEqual(status, 404)
        status, err = self.rest("/v2/repository/models/nope/load")
        self.assertEqual(status, 404)
        self.assertIn('model "nope" is not in repository', err["error"])
        self.assertEqual(self.metric("metalserve_requests_total",
                                     method="http_RepositoryModelLoad", code="OK"), 1.0)

    def test_rest_load_refuses_parameters_naming_them(self):
        status, err = self.rest("/v2/repository/models/identity/load",
                                {"parameters": {"config": "{}", "file:1/model.pt": "AAAA"}})
        self.assertEqual(status, 400)
        self.assertIn("RepositoryModelLoad parameters [config, file:1/model.pt] are not "
                      "supported", err["error"])
        status, err = self.rest("/v2/repository/models/identity/unload", "not an object")
        self.assertEqual(status, 400)
        self.assertIn("must be a JSON object", err["error"])
        self.assertEqual(self.rest_identity()[0], 200)

    def test_rest_health_answers_while_a_load_runs(self):
        import torch

        class Slow(torch.nn.Module):  # identity, after a loop of ~0.5 s a forward
            def forward(self, x):
                y = torch.zeros(1)
                for _ in range(100000):
                    y = y + 1.0
                return x + y * 0.0
        os.makedirs(os.path.join(self.root, "identity", "2"))
        torch.jit.script(Slow()).save(os.path.join(self.root, "identity", "2", "model.pt"))
        load = {}
        loader = threading.Thread(target=lambda: load.setdefault(
            "answer", self.rest("/v2/repository/models/identity/load", timeout=300)))
        loader.start()
        try:
            # The load has begun; its warm-up forwards take seconds more.
            wait_for("the load of identity version 2 started",
                     lambda: "loading model " + os.path.join(self.root, "identity", "2")
                     in tail(self.log, 20), time.monotonic() + 60)
            start = time.monotonic()
            self.assertEqual(http_get(f"http://127.0.0.1:{self.http_port}/v2/health/live",
                                      timeout=30), (200, '{"live":true}'))
            self.assertLess(time.monotonic() - start, 1.0)
            status, err = self.rest("/v2/repository/models/tiny_cnn/unload", timeout=30)
            self.assertEqual(status, 503)
            self.assertIn("another load or unload is running", err["error"])
            self.assertNotIn("answer", load)
        finally:
            loader.join(300)
        self.assertEqual(load["answer"], (200, {}))
        self.assertIn(("identity", "2"), [(m["name"], m["version"]) for m in
                                          self.rest("/v2/repository/index", {"ready": True})[1]])

if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--server", required=True)
    p.add_argument("--repository", required=True)
    p.add_argument("--proto_dir", required=True)
    p.add_argument("--example", required=True)
    p.add_argument("--bench", required=True, help="build/metalserve-bench")
    ARGS, rest = p.parse_known_args()
    for path in (ARGS.server, ARGS.repository, ARGS.example, ARGS.bench):
        if not os.path.exists(path):
            sys.exit(f"repository_test: {path} is missing (build first)")
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
