#!/usr/bin/python3
"""gRPC ModelInfer, REST binary and REST JSON against one metalserve, in one
run: throughput, p50/p99 and the server's CPU per request (from
/proc/PID/stat, so independent of the client's own cost).

    bench/rest_compare.py [--build build] [--model build/models/identity.pt]
                          [--concurrency 16] [--duration 5]

gRPC load comes from build/metalserve-bench --protocol=kserve; REST load
from wrk (Debian package `wrk`), with a Lua body of one row of zeros per
request in each form. The two clients differ in their own cost, so compare
throughput and latency with care on a small machine; the server CPU per
request compares the protocols themselves. Float32 inputs only.
"""
import argparse
import json
import os
import re
import shutil
import struct
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


def wrk_run(a, url, script):
    out = subprocess.run(["wrk", "-t2", f"-c{a.concurrency}", f"-d{a.duration}s",
                          "--latency", "-s", script, url],
                         capture_output=True, text=True, timeout=a.duration + 60).stdout
    rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1))

    def pct(p):
        m = re.search(rf"^\s+{p}%\s+([0-9.]+)(us|ms|s)", out, re.M)
        scale = {"us": 1, "ms": 1e3, "s": 1e6}[m.group(2)]
        return float(m.group(1)) * scale
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"rps": rps, "p50_us": pct(50), "p99_us": pct(99), "requests": requests,
            "errors": int(bad.group(1)) if bad else 0}


def grpc_run(a, port):
    out = subprocess.run([os.path.join(a.build, "metalserve-bench"),
                          f"--target=127.0.0.1:{port}", "--protocol=kserve",
                          f"--concurrency={a.concurrency}", f"--duration={a.duration}s",
                          "--output=json", "--progress=off"],
                         capture_output=True, text=True, timeout=a.duration + 60)
    r = json.loads(out.stdout)["runs"][0]
    return {"rps": r["requests_per_s"], "p50_us": r["latency_us"]["p50"],
            "p99_us": r["latency_us"]["p99"], "requests": r["ok"] + sum(r["errors"].values()),
            "errors": sum(r["errors"].values())}


def lua_scripts(meta, tmp):
    """(json script, binary script) posting one row of zeros per input."""
    inputs, header_in, tail = [], [], b""
    for t in meta["inputs"]:
        if t["datatype"] != "FP32":
            raise SystemExit(f"input {t['name']} is {t['datatype']}; only FP32 is built")
        shape = [1] + [d for d in t["shape"][1:]]
        n = 1
        for d in shape:
            n *= d
        inputs.append({"name": t["name"], "shape": shape, "datatype": "FP32", "data": [0.0] * n})
        header_in.append({"name": t["name"], "shape": shape, "datatype": "FP32",
                          "parameters": {"binary_data_size": 4 * n}})
        tail += struct.pack(f"<{n}f", *([0.0] * n))
    json_body = json.dumps({"inputs": inputs})
    header = json.dumps({"inputs": header_in, "parameters": {"binary_data_output": True}})
    binary = header.encode() + tail
    paths = (os.path.join(tmp, "json.lua"), os.path.join(tmp, "binary.lua"))
    with open(paths[0], "w") as f:
        f.write(f'wrk.method="POST"\nwrk.body={json.dumps(json_body)}\n'
                'wrk.headers["Content-Type"]="application/json"\n')
    with open(paths[1], "w") as f:
        f.write('wrk.method="POST"\nwrk.body="' + "".join(f"\\{b:03d}" for b in binary) +
                f'"\nwrk.headers["Inference-Header-Content-Length"]="{len(header)}"\n')
    return paths


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default="build")
    p.add_argument("--model", default="build/models/identity.pt")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--duration", type=int, default=5)
    a = p.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("needs wrk (apt-get install wrk)")
    tmp = tempfile.mkdtemp(prefix="rest_compare_")
    grpc_port, http_port = free_port(), free_port()
    server = Process([os.path.join(a.build, "metalserve"), f"--model={a.model}",
                      "--device=cpu", f"--address=127.0.0.1:{grpc_port}",
                      f"--http_address=127.0.0.1:{http_port}", "--metrics_address=",
                      "--monitor_log_interval=0"], os.path.join(tmp, "server.log"))
    try:
        base = f"http://127.0.0.1:{http_port}"
        wait_for("ready", lambda: urllib.request.urlopen(base + "/v2/health/ready").status == 200,
                 time.monotonic() + 120)
        meta = json.load(urllib.request.urlopen(base + "/v2/models/" +
                                                os.path.basename(a.model)[:-3]))
        json_lua, binary_lua = lua_scripts(meta, tmp)
        url = f"{base}/v2/models/{meta['name']}/infer"
        runs = [("gRPC ModelInfer", lambda: grpc_run(a, grpc_port)),
                ("REST binary", lambda: wrk_run(a, url, binary_lua)),
                ("REST JSON", lambda: wrk_run(a, url, json_lua))]
        print(f"model {meta['name']}, concurrency {a.concurrency}, {a.duration} s each")
        print(f"{'protocol':18} {'req/s':>9} {'p50 us':>9} {'p99 us':>9} "
              f"{'errors':>7} {'server CPU us/req':>18}")
        for name, run in runs:
            before = cpu_seconds(server.pid)
            r = run()
            used = cpu_seconds(server.pid) - before
            print(f"{name:18} {r['rps']:9.0f} {r['p50_us']:9.0f} {r['p99_us']:9.0f} "
                  f"{r['errors']:7d} {1e6 * used / max(r['requests'], 1):18.1f}")
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
