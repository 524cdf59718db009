#!/usr/bin/python3
"""Priority isolation, measured (issue 19, item 3): the highest priority's
p99 on an idle server against its p99 while metalserve-bench saturates the
same server with lowest-priority traffic.

  /usr/bin/python3 bench/priority_check.py --model=identity --duration=5 \\
      --load_concurrency=64 --high_rate=200 --host_label=vm --out=bench/results

The server runs with --priority_levels=2 --default_priority=2, so the
bench's requests (which carry no priority) are level 2; this script sends
level-1 Predict requests at --high_rate per second (open loop, constant
spacing, from one thread per outstanding call) and records their latency.
Goal: saturated p99 <= 2 x idle p99. Writes
<host_label>-<date>-<model>-priority.json with the command.
"""
import argparse
import concurrent.futures
import datetime
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "testing"))
import proc_util  # noqa: E402


def high_priority_latencies(stub, pb, width, rate, duration):
    """Level-1 Predict calls at `rate`/s for `duration` s; their latencies (s)."""
    req = pb.PredictRequest(priority=1)
    t = req.inputs.add(name="input", dtype=pb.DATA_TYPE_FLOAT32, shape=[1, width])
    t.data = struct.pack(f"{width}f", *([0.5] * width))

    def one(send_at):
        time.sleep(max(0.0, send_at - time.monotonic()))
        stub.Predict(req, timeout=30)
        return time.monotonic() - send_at  # from the intended send time

    start = time.monotonic() + 0.05
    sends = [start + i / rate for i in range(int(rate * duration))]
    with concurrent.futures.ThreadPoolExecutor(max_workers=32) as pool:
        return sorted(pool.map(one, sends))


def p99(xs):
    return xs[min(len(xs) - 1, int(0.99 * len(xs)))]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--model", default="identity")
    p.add_argument("--width", type=int, default=4, help="the model's row width (identity: 4)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--duration", type=float, default=5)
    p.add_argument("--load_concurrency", type=int, default=64)
    p.add_argument("--high_rate", type=float, default=200)
    p.add_argument("--host_label", default=socket.gethostname())
    p.add_argument("--out", default=os.path.join(ROOT, "build", "bench-results"))
    a = p.parse_args()
    command = " ".join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])
    tmp = tempfile.mkdtemp(prefix="priority-check-")
    proc_util.compile_stubs(os.path.join(ROOT, "proto"), tmp)
    import grpc
    from metalserve.v1 import inference_pb2 as pb, inference_pb2_grpc as pbg

    port = proc_util.free_port()
    log = open(os.path.join(tmp, "server.log"), "w")
    server = subprocess.Popen(
        [os.path.join(a.build, "metalserve"), f"--model={a.build}/models/{a.model}.pt",
         f"--address=127.0.0.1:{port}", "--metrics_address=", f"--threads={a.threads}",
         "--priority_levels=2", "--default_priority=2", "--max_queue_size=4096"],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(channel).result(timeout=120)
        stub = pbg.InferenceStub(channel)
        high_priority_latencies(stub, pb, a.width, a.high_rate, 1)  # warm-up
        idle = high_priority_latencies(stub, pb, a.width, a.high_rate, a.duration)
        load = subprocess.Popen(
            [os.path.join(a.build, "metalserve-bench"), f"--target=127.0.0.1:{port}",
             f"--concurrency={a.load_concurrency}", f"--duration={a.duration + 2}s",
             "--warmup=0s", "--output=json", "--progress=off"],
            stdout=subprocess.PIPE, text=True)
        time.sleep(1)
        busy = high_priority_latencies(stub, pb, a.width, a.high_rate, a.duration)
        low = json.loads(load.communicate(timeout=120)[0])["runs"][0]
    finally:
        server.terminate()
        server.wait(timeout=60)
    result = {
        "command": command, "host_label": a.host_label, "model": a.model,
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "high_rate": a.high_rate, "load_concurrency": a.load_concurrency,
        "idle_p99_ms": round(p99(idle) * 1e3, 3), "idle_p50_ms": round(idle[len(idle) // 2] * 1e3, 3),
        "saturated_p99_ms": round(p99(busy) * 1e3, 3),
        "saturated_p50_ms": round(busy[len(busy) // 2] * 1e3, 3),
        "low_requests_per_s": low["requests_per_s"], "low_p99_ms": low["latency_us"]["p99"] / 1e3,
    }
    result["p99_ratio"] = round(result["saturated_p99_ms"] / result["idle_p99_ms"], 3)
    result["high_share"] = round(a.high_rate / (a.high_rate + low["requests_per_s"]), 4)
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, f"{a.host_label}-{datetime.date.today().isoformat()}-"
                               f"{a.model}-priority.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result, indent=1))
    print(f"wrote {path}; goal p99_ratio <= 2: {'met' if result['p99_ratio'] <= 2 else 'NOT met'}")


if __name__ == "__main__":
    main()
