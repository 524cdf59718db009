#!/usr/bin/python3
"""--device=auto's measured table per model, as a client reads it, in one run:
for each model, --runs starts of build/metalserve with --device=auto, each
asked over REST for GET /v2/models/{name} (the device_choice field: the
forward time at each warm-up batch size on each working device, the median
of 3 forwards, host copies included) and stopped. Several starts per model,
because one start times each cell only 3 times and a shared machine's load
moves a cell by several times; the median over the starts is kept.

    bench/device_choice.py [--build build] [--models_dir BUILD/models]
        [--models tiny_cnn,lstm_small,mobilenet_v3_small,resnet18,resnet50]
        [--runs 3] [--max_batch_size 32] [--threads 1] [--host_label vm]
        [--tag T] [--out build/bench-results]

A model whose .pt is not in --models_dir is skipped with the command that
exports it, and listed under "skipped" (resnet50 is exported only when
named: models/export.py --only resnet50).

Writes <out>/<host_label>-<date>-device_choice[-tag].json: the command,
each model's parameter count, each start's device_choice and, per device
and batch size, the forward times of every start and their median
(microseconds), and prints the table README's "Where each device wins"
shows.
"""
import argparse
import datetime
import json
import os
import socket
import statistics
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tests", "testing"))
from proc_util import Process, free_port, tail, wait_for  # noqa: E402


def device_choice(a, model, log):
    """One start of the server on `model`: its REST device_choice."""
    http_port = free_port()
    server = Process([os.path.join(a.build, "metalserve"),
                      f"--model={os.path.join(a.models_dir, model + '.pt')}",
                      "--device=auto", f"--max_batch_size={a.max_batch_size}",
                      f"--threads={a.threads}", f"--address=127.0.0.1:{free_port()}",
                      f"--http_address=127.0.0.1:{http_port}", "--metrics_address=",
                      "--cache_dir=none", "--monitor_log_interval=0"], log_path=log)
    try:
        def metadata():
            if not server.alive():
                raise AssertionError(f"{model}: server exited:\n{tail(log)}")
            url = f"http://127.0.0.1:{http_port}/v2/models/{model}"
            with urllib.request.urlopen(url, timeout=5) as r:
                return json.loads(r.read())["device_choice"]
        return wait_for(f"{model} metadata", metadata, time.monotonic() + 600, interval=0.5)
    finally:
        server.stop()


def parameters(a, model):
    import torch  # only here: the rest runs without torch
    m = torch.jit.load(os.path.join(a.models_dir, model + ".pt"))
    return sum(p.numel() for p in m.parameters())


def summarize(runs):
    """{device: {batch: {"forward_us": [...], "median_forward_us": m}}}."""
    cells = {}
    for choice in runs:
        for t in choice["timings"]:
            cells.setdefault(t["device"], {}).setdefault(str(t["batch_size"]), []).append(
                t["forward_us"])
    return {d: {b: {"forward_us": v, "median_forward_us": statistics.median(v)}
                for b, v in sizes.items()} for d, sizes in cells.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default="build")
    p.add_argument("--models_dir", default="", help="the .pt files (default BUILD/models)")
    p.add_argument("--models",
                   default="tiny_cnn,lstm_small,mobilenet_v3_small,resnet18,resnet50")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--max_batch_size", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--host_label", default=socket.gethostname())
    p.add_argument("--tag", default="")
    p.add_argument("--out", default=os.path.join("build", "bench-results"))
    a = p.parse_args()
    a.models_dir = a.models_dir or os.path.join(a.build, "models")
    os.makedirs(a.out, exist_ok=True)
    date = datetime.date.today().isoformat()
    name = f"{a.host_label}-{date}-device_choice{'-' + a.tag if a.tag else ''}"
    result = {"command": " ".join(["bench/device_choice.py", *sys.argv[1:]]),
              "host_label": a.host_label, "date": date, "cpus": os.cpu_count(),
              "load_average_at_start": list(os.getloadavg()), "skipped": [], "models": {}}
    logs = tempfile.mkdtemp(prefix="metalserve_device_choice_")
    for model in a.models.split(","):
        path = os.path.join(a.models_dir, model + ".pt")
        if not os.path.isfile(path):
            why = (f"{model}: {path} is missing (python3 models/export.py --out "
                   f"{a.models_dir} --only {model})")
            print("skipped " + why, flush=True)
            result["skipped"].append(why)
            continue
        runs = [device_choice(a, model, os.path.join(logs, f"{model}-{i}.log"))
                for i in range(a.runs)]
        n = parameters(a, model)
        result["models"][model] = {"parameters": n, "parameters_millions": round(n / 1e6, 2),
                                   "runs": runs, "cells": summarize(runs)}
        for device, sizes in result["models"][model]["cells"].items():
            for batch, c in sizes.items():
                print(f"{model:20s} {device:6s} batch {batch:>4s}: median "
                      f"{c['median_forward_us'] / 1e3:.3f} ms of {c['forward_us']} us",
                      flush=True)
    result["load_average_at_end"] = list(os.getloadavg())
    path = os.path.join(a.out, name + ".json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {path}; server logs in {logs}")


if __name__ == "__main__":
    main()
