#!/usr/bin/python3
"""gRPC ModelInfer, REST binary and REST JSON against one metalserve, in one
run: throughput, p50/p99 and the server's CPU per request (from
/proc/PID/stat, so independent of the client's own cost).

    bench/rest_compare.py [--build build] [--model build/models/identity.pt]
                          [--concurrency 16] [--duration 5]

Every load comes from the same client, build/metalserve-bench: gRPC
--protocol=kserve, REST --protocol=http with --http_format=binary (Triton's
binary tensor extension) and json; one row of zeros per request, inputs from
the model's metadata. Each protocol gets --warmup seconds (default 1) of
load first, not measured, and the three are measured --rounds times in turn
(read the last round: the first pays for the graph specializations). The server CPU per request counts the measured run only.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tests", "testing"))
from proc_util import Process, free_port, wait_for  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """User + system CPU seconds of process `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def bench_run(a, protocol_flags, extra=()):
    """One metalserve-bench run: its JSON report's first level."""
    out = subprocess.run([os.path.join(a.build, "metalserve-bench"), *protocol_flags,
                          f"--concurrency={a.concurrency}", "--output=json",
                          "--progress=off", *extra],
                         capture_output=True, text=True, timeout=max(a.duration, a.warmup) + 60)
    if out.returncode != 0:
        raise SystemExit(f"metalserve-bench {' '.join(protocol_flags)}: {out.stderr}")
    return json.loads(out.stdout)["runs"][0]


def measure(a, server_pid, protocol_flags):
    """A short warm-up run, then the measured one with the server's CPU."""
    bench_run(a, protocol_flags, [f"--duration={a.warmup}s"])
    before = cpu_seconds(server_pid)
    r = bench_run(a, protocol_flags, [f"--duration={a.duration}s"])
    used = cpu_seconds(server_pid) - before
    errors = sum(r["errors"].values())
    requests = r["ok"] + errors
    return {"rps": r["requests_per_s"], "p50_us": r["latency_us"]["p50"],
            "p99_us": r["latency_us"]["p99"], "requests": requests, "errors": errors,
            "server_cpu_us": 1e6 * used / max(requests, 1)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default="build")
    p.add_argument("--model", default="build/models/identity.pt")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--duration", type=int, default=5)
    p.add_argument("--warmup", type=float, default=1,
                   help="seconds of load before each measured run (not measured)")
    p.add_argument("--threads", type=int, default=1,
                   help="the server's --threads (LibTorch intra-op threads); "
                        "1 by default: on a small shared machine, more threads "
                        "spin for cores the clients need and the server CPU "
                        "per request swings tenfold between runs")
    p.add_argument("--rounds", type=int, default=2,
                   help="measure the three protocols this many times in turn; "
                        "LibTorch's profiling executor specializes the graph "
                        "for each new batch shape in the first runs, which "
                        "the first protocol would otherwise pay alone")
    p.add_argument("--json", help="also write the rows to this file")
    a = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="rest_compare_")
    grpc_port, http_port = free_port(), free_port()
    server = Process([os.path.join(a.build, "metalserve"), f"--model={a.model}",
                      "--device=cpu", f"--threads={a.threads}",
                      f"--address=127.0.0.1:{grpc_port}",
                      f"--http_address=127.0.0.1:{http_port}", "--metrics_address=",
                      "--monitor_log_interval=0"], os.path.join(tmp, "server.log"))
    try:
        base = f"http://127.0.0.1:{http_port}"
        wait_for("ready", lambda: urllib.request.urlopen(base + "/v2/health/ready").status == 200,
                 time.monotonic() + 120)
        name = json.load(urllib.request.urlopen(base + "/v2/models/" +
                                                os.path.basename(a.model)[:-3]))["name"]
        http = ["--protocol=http", f"--target=127.0.0.1:{http_port}", f"--model_name={name}"]
        runs = [("gRPC ModelInfer", ["--protocol=kserve", f"--target=127.0.0.1:{grpc_port}"]),
                ("REST binary", http + ["--http_format=binary"]),
                ("REST JSON", http + ["--http_format=json"])]
        print(f"model {name}, concurrency {a.concurrency}, {a.duration} s each, "
              "client metalserve-bench")
        print(f"{'protocol':18} {'req/s':>9} {'p50 us':>9} {'p99 us':>9} "
              f"{'errors':>7} {'server CPU us/req':>18}")
        rows = []
        for round_ in range(1, a.rounds + 1):
            for label, flags in runs:
                r = measure(a, server.pid, flags)
                rows.append(dict(r, protocol=label, model=name, concurrency=a.concurrency,
                                 round=round_))
                print(f"{label:18} {r['rps']:9.0f} {r['p50_us']:9.0f} {r['p99_us']:9.0f} "
                      f"{r['errors']:7d} {r['server_cpu_us']:18.1f}  round {round_}")
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"rows": rows}, f, indent=1)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
