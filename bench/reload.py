#!/usr/bin/python3
"""Latency during reloads against steady state (issue 18's benchmark):
build/metalserve serves a copy of a model repository (--model_control=
explicit); metalserve-bench calls MODEL at --concurrency for --duration,
once with nothing else happening (steady) and once while a new version of
MODEL is loaded --reloads times, evenly spread (reload: each load copies
version 1's model.pt into a new version folder and calls
RepositoryModelLoad, so the new version loads, verifies and warms up while
the old one serves, then traffic switches and the old one drains).
Prints both reports and the p99 ratio; exits 1 when any request failed.

    bench/reload.py --build=build --model=identity --concurrency=32 \\
        --duration=20s --reloads=5
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "testing"))
from proc_util import Process, free_port, tail, wait_for  # noqa: E402


def bench(args, target):
    out = subprocess.run(
        [os.path.join(args.build, "metalserve-bench"), f"--target={target}",
         "--protocol=kserve", f"--model_name={args.model}",
         f"--concurrency={args.concurrency}", f"--duration={args.duration}",
         "--warmup=1s", "--output=json"],
        capture_output=True, text=True, timeout=600)
    if out.returncode not in (0, 1):
        sys.exit(f"metalserve-bench failed ({out.returncode}):\n{out.stderr}")
    return json.loads(out.stdout)["runs"][0]


def load(root, model, version, target):
    d = os.path.join(root, model, str(version))
    os.makedirs(d)
    shutil.copy(os.path.join(root, model, "1", "model.pt"), d)
    started = time.monotonic()
    subprocess.run(["/usr/bin/python3", os.path.join(HERE, "..", "examples", "python",
                                                     "repository.py"),
                    f"--target={target}", "load", model], check=True, capture_output=True,
                   timeout=300)
    return time.monotonic() - started


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    p.add_argument("--repository", default=None, help="default BUILD/model_repository")
    p.add_argument("--model", default="identity")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--duration", default="20s")
    p.add_argument("--reloads", type=int, default=5)
    p.add_argument("--server_flags", default="--device=cpu --threads=1")
    args = p.parse_args()
    seconds = float(args.duration.rstrip("s"))
    tmp = tempfile.mkdtemp(prefix="metalserve_reload_")
    root = os.path.join(tmp, "repo")
    shutil.copytree(args.repository or os.path.join(args.build, "model_repository"), root)
    port = free_port()
    target = f"127.0.0.1:{port}"
    log = os.path.join(tmp, "server.log")
    server = Process([os.path.join(args.build, "metalserve"), f"--model_repository={root}",
                      "--model_control=explicit", f"--address={target}", "--http_address=",
                      "--metrics_address=", "--cache_dir=none", "--monitor_log_interval=0"]
                     + args.server_flags.split(), log_path=log)
    try:
        wait_for("server", lambda: "ready: gRPC" in tail(log, 200), time.monotonic() + 300)
        steady = bench(args, target)
        loads = []

        def reloader():
            for i in range(args.reloads):
                time.sleep(seconds / (args.reloads + 1) if i == 0 else 0)
                start = time.monotonic()
                loads.append(load(root, args.model, i + 2, target))
                time.sleep(max(0.0, seconds / (args.reloads + 1) - (time.monotonic() - start)))
        t = threading.Thread(target=reloader)
        t.start()
        during = bench(args, target)
        t.join(600)
    finally:
        server.stop()
    for name, r in (("steady", steady), ("reloading", during)):
        print(f"{name:10s} ok {r['ok']} errors {r['errors']} p50 {r['latency_us']['p50']:.0f} us "
              f"p99 {r['latency_us']['p99']:.0f} us")
    print(f"loads: {len(loads)}, each {', '.join(f'{s:.2f}' for s in loads)} s")
    print(f"p99 reloading / steady: {during['latency_us']['p99'] / steady['latency_us']['p99']:.2f}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 1 if steady["errors"] or during["errors"] or len(loads) != args.reloads else 0


if __name__ == "__main__":
    sys.exit(main())
