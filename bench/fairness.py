#!/usr/bin/python3
"""A light model next to a flooded one on one CPU device thread (issue 18):
build/metalserve serves a repository of two models on --device=cpu, so both
share one device thread; metalserve-bench calls LIGHT at --light_concurrency
for --duration:
  alone  nothing else running (--device_scheduling=fair);
  fifo   while a second metalserve-bench floods HEAVY at --heavy_concurrency,
         --device_scheduling=fifo (the order before fair queueing);
  fair   the same flood, --device_scheduling=fair (server/runtime/
         fair_queue.h).
Each of --rounds runs all three; prints LIGHT's p50/p99 per case and the
flood's throughput, and writes every report to --output (JSON).
--device_concurrency (also given as --executors) is how many batches of one
model can wait on the device thread at once: what FIFO makes the light
model wait behind (the server's default is 2).

    bench/fairness.py --build=build --heavy=mobilenet_v2 --rounds=2 \\
        --device_concurrency=16 --output=bench/results/vm-2026-12-01-fairness-dc16.json
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "testing"))
from proc_util import Process, free_port, tail, wait_for  # noqa: E402


def make_repository(args, root):
    """LIGHT from the build's model repository, HEAVY from build/models."""
    shutil.copytree(os.path.join(args.build, "model_repository", args.light),
                    os.path.join(root, args.light))
    heavy = os.path.join(root, args.heavy)
    os.makedirs(os.path.join(heavy, "1"))
    shutil.copy(os.path.join(args.build, "models", args.heavy + ".pt"),
                os.path.join(heavy, "1", "model.pt"))
    with open(os.path.join(args.build, "models", args.heavy + ".json")) as f:
        config = json.load(f)
    config.pop("version", None)  # a repository's versions are its folders
    config["name"] = args.heavy
    config["max_batch_size"] = args.heavy_max_batch_size
    with open(os.path.join(heavy, "config.json"), "w") as f:
        json.dump(config, f)


def bench_cmd(args, target, model, concurrency, duration):
    return [os.path.join(args.build, "metalserve-bench"), f"--target={target}",
            "--protocol=kserve", f"--model_name={model}", f"--concurrency={concurrency}",
            f"--duration={duration}s", "--warmup=1s", "--output=json", "--progress=off"]


def report(out, what):
    if out.returncode not in (0, 1):
        sys.exit(f"metalserve-bench ({what}) failed ({out.returncode}):\n{out.stderr}")
    return json.loads(out.stdout)["runs"][0]


def run_case(args, root, tmp, order, flood):
    port = free_port()
    target = f"127.0.0.1:{port}"
    log = os.path.join(tmp, f"server-{order}-{int(time.time() * 1000)}.log")
    server = Process([os.path.join(args.build, "metalserve"), f"--model_repository={root}",
                      f"--address={target}", "--http_address=", "--metrics_address=",
                      "--cache_dir=none", "--monitor_log_interval=0",
                      f"--device_scheduling={order}",
                      f"--executors={args.device_concurrency}",
                      f"--device_concurrency={args.device_concurrency}"]
                     + args.server_flags.split(), log_path=log)
    try:
        wait_for("server", lambda: "ready: gRPC" in tail(log, 200), time.monotonic() + 300)
        heavy = None
        if flood:
            heavy = subprocess.Popen(
                bench_cmd(args, target, args.heavy, args.heavy_concurrency, args.duration + 3),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(2)  # pacing only: let the flood fill the device queue first
        light = report(subprocess.run(
            bench_cmd(args, target, args.light, args.light_concurrency, args.duration),
            capture_output=True, text=True, timeout=600), "light")
        result = {"light": light}
        if heavy is not None:
            out, err = heavy.communicate(timeout=600)
            result["heavy"] = report(subprocess.CompletedProcess([], heavy.returncode, out, err),
                                     "heavy")
        return result
    finally:
        server.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    p.add_argument("--light", default="identity")
    p.add_argument("--heavy", default="mobilenet_v2")
    p.add_argument("--light_concurrency", type=int, default=2)
    p.add_argument("--heavy_concurrency", type=int, default=32)
    p.add_argument("--heavy_max_batch_size", type=int, default=1)
    p.add_argument("--device_concurrency", type=int, default=16,
                   help="--executors and --device_concurrency: batches of one model that "
                        "can wait on the device thread at once (the server's default is 2)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per case")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--server_flags",
                   default="--device=cpu --threads=1 --max_queue_delay=1ms --optimize=none")
    p.add_argument("--output", default="")
    args = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="metalserve_fairness_")
    root = os.path.join(tmp, "repo")
    make_repository(args, root)
    results = []
    try:
        for r in range(args.rounds):
            for case, order, flood in (("alone", "fair", False), ("fifo", "fifo", True),
                                       ("fair", "fair", True)):
                res = run_case(args, root, tmp, order, flood)
                res.update(round=r + 1, case=case)
                results.append(res)
                lat = res["light"]["latency_us"]
                line = (f"round {r + 1} {case:5s} {args.light} p50 {lat['p50'] / 1e3:8.2f} ms"
                        f"  p99 {lat['p99'] / 1e3:8.2f} ms  ok {res['light']['ok']}"
                        f"  errors {sum(res['light']['errors'].values())}")
                if "heavy" in res:
                    h = res["heavy"]
                    line += (f"  | {args.heavy} {h['rows_per_s']:.1f} rows/s"
                             f" p99 {h['latency_us']['p99'] / 1e3:.1f} ms"
                             f" errors {sum(h['errors'].values())}")
                print(line, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.output:
        with open(args.output, "w") as f:
            command = " ".join(["bench/fairness.py"] + sys.argv[1:])
            json.dump({"command": command, "args": vars(args), "results": results}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
