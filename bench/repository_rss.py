#!/usr/bin/python3
"""The server's resident set before a model load, after it and after the
unload (docs/repository.md, "Memory admission"). Starts build/metalserve on
CPU over a temporary repository holding identity only, adds MODEL (a
TorchScript file with its signature .json beside it, from build/models),
loads it with RepositoryModelLoad, unloads it, loads it again, and prints VmRSS of the server
at each step with the server's own memory log line.

Usage: bench/repository_rss.py --server build/metalserve \
           --models build/models --model mobilenet_v2 [--budget BYTES]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "testing"))
from proc_util import Process, free_port, wait_for  # noqa: E402


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def add_model(root, models, name):
    os.makedirs(os.path.join(root, name, "1"))
    shutil.copy(os.path.join(models, name + ".pt"), os.path.join(root, name, "1", "model.pt"))
    with open(os.path.join(models, name + ".json")) as f:
        config = json.load(f)
    config.pop("version", None)
    with open(os.path.join(root, name, "config.json"), "w") as f:
        json.dump(config, f)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--server", required=True)
    p.add_argument("--models", required=True)
    p.add_argument("--model", default="mobilenet_v2")
    p.add_argument("--budget", type=int, default=0)
    a = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="metalserve_rss_")
    stubs = os.path.join(tmp, "stubs")
    os.makedirs(stubs)
    proto = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "proto")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I" + proto,
                    "--python_out=" + stubs, "--grpc_python_out=" + stubs,
                    "inference/grpc_service.proto"], check=True, timeout=60)
    sys.path.insert(0, stubs)
    from inference import grpc_service_pb2 as kpb, grpc_service_pb2_grpc as kgrpc
    root, port, log = os.path.join(tmp, "repo"), free_port(), os.path.join(tmp, "server.log")
    add_model(root, a.models, "identity")
    server = Process([a.server, f"--model_repository={root}", "--model_control=explicit",
                      f"--device_memory_budget={a.budget}", f"--address=127.0.0.1:{port}",
                      "--http_address=", "--metrics_address=", "--device=cpu",
                      "--cache_dir=none", "--monitor_log_interval=0"], log_path=log)
    try:
        stub = kgrpc.GRPCInferenceServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
        wait_for("ready", lambda: stub.ServerReady(kpb.ServerReadyRequest(), timeout=2).ready,
                 time.monotonic() + 120)
        pid = server.proc.pid
        print(f"before the load: RSS {rss_mib(pid):.1f} MiB")
        add_model(root, a.models, a.model)
        stub.RepositoryModelLoad(kpb.RepositoryModelLoadRequest(model_name=a.model), timeout=300)
        print(f"after loading {a.model}: RSS {rss_mib(pid):.1f} MiB")
        stub.RepositoryModelUnload(kpb.RepositoryModelUnloadRequest(model_name=a.model),
                                   timeout=60)
        index = lambda: stub.RepositoryIndex(kpb.RepositoryIndexRequest(), timeout=10)  # noqa
        wait_for("released", lambda: all((m.name, m.version) != (a.model, "1")
                                         for m in index().models),
                 time.monotonic() + 60)
        print(f"after the unload (released): RSS {rss_mib(pid):.1f} MiB")
        stub.RepositoryModelLoad(kpb.RepositoryModelLoadRequest(model_name=a.model), timeout=300)
        print(f"after loading {a.model} again: RSS {rss_mib(pid):.1f} MiB")
    finally:
        server.stop()
    with open(log) as f:
        for line in f:
            if "memory of " in line:
                print("server:", line.split("] ", 1)[1].rstrip())
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
