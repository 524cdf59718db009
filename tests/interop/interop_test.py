#!/usr/bin/python3
"""Interoperability: clients this project did not write against a real
metalserve, checked against metalserve-bench.

All on 127.0.0.1 with a free port and bounded by --timeout:
  1. build/metalserve serves the tiny_cnn model (no metrics listener);
  2. metalserve-bench sends one deterministic row (--input=@row.bin) over the
     native API and over KServe v2 and writes the outputs (--dump_outputs);
  3. the example client (examples/python/client.py with grpcio, or
     examples/node/client.js with @grpc/grpc-js; `npm ci` first when
     examples/node/node_modules is absent) calls GetModelMetadata, Predict and
     ModelInfer with the same row;
  4. every output's name, datatype, shape and values must match the C++
     client's, over each protocol.
The server is stopped (SIGTERM, then SIGKILL) whatever happens.
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "testing"))
from proc_util import Process, free_port  # noqa: E402


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def remaining(deadline):
    left = deadline - time.monotonic()
    if left <= 0:
        fail("time limit reached")
    return left


def run(argv, deadline, cwd=None, what=None):
    print("+", " ".join(argv), flush=True)
    try:
        p = subprocess.run(argv, cwd=cwd, capture_output=True, text=True,
                           timeout=remaining(deadline))
    except subprocess.TimeoutExpired:
        fail(f"{what or argv[0]} did not finish in time")
    return p


def compare(label, got, want):
    g, w = got["outputs"], want["outputs"]
    if [o["name"] for o in g] != [o["name"] for o in w]:
        fail(f"{label}: output names {[o['name'] for o in g]} != {[o['name'] for o in w]}")
    for go, wo in zip(g, w):
        for key in ("datatype", "shape"):
            if go[key] != wo[key]:
                fail(f"{label}: output '{go['name']}' {key} {go[key]} != {wo[key]}")
        if len(go["data"]) != len(wo["data"]):
            fail(f"{label}: output '{go['name']}' has {len(go['data'])} values, "
                 f"the C++ client got {len(wo['data'])}")
        for i, (a, b) in enumerate(zip(go["data"], wo["data"])):
            if not math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-6):
                fail(f"{label}: output '{go['name']}'[{i}] = {a}, the C++ client got {b}")
    print(f"ok: {label}: {sum(len(o['data']) for o in g)} values match", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--client", choices=["python", "node"], required=True)
    ap.add_argument("--server", required=True)
    ap.add_argument("--bench", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--source_dir", required=True)
    ap.add_argument("--timeout", type=float, default=240)
    args = ap.parse_args()
    deadline = time.monotonic() + args.timeout
    for path in (args.server, args.bench, args.model):
        if not os.path.exists(path):
            fail(f"{path} does not exist (build it first)")

    examples = os.path.join(args.source_dir, "examples")
    if args.client == "node":
        node_dir = os.path.join(examples, "node")
        if not os.path.isdir(os.path.join(node_dir, "node_modules")):
            p = run(["npm", "ci", "--no-audit", "--no-fund"], deadline, cwd=node_dir,
                    what="npm ci")
            if p.returncode != 0:
                fail(f"npm ci in {node_dir} failed:\n{p.stdout}\n{p.stderr}")

    with tempfile.TemporaryDirectory(prefix="metalserve_interop_") as tmp:
        # One deterministic row of the model's input, float32 [3, 8, 8].
        row = os.path.join(tmp, "row.bin")
        values = [((i * 37) % 101) / 50.0 - 1.0 for i in range(3 * 8 * 8)]
        with open(row, "wb") as f:
            f.write(struct.pack(f"<{len(values)}f", *values))

        port = free_port()
        target = f"127.0.0.1:{port}"
        server = Process(
            [args.server, f"--model={args.model}", f"--address={target}",
             "--metrics_address=", "--threads=1"],
            os.path.join(tmp, "server.log"))
        try:
            dumps = {}
            for protocol in ("native", "kserve"):
                out = os.path.join(tmp, f"bench_{protocol}.json")
                while True:
                    p = run([args.bench, f"--target={target}", f"--protocol={protocol}",
                             "--requests=1", "--deadline=5s", f"--input=@{row}",
                             f"--dump_outputs={out}", "--progress=off"], deadline)
                    if p.returncode == 0:
                        break
                    if server.poll() is not None:
                        with open(server.log_path, errors="replace") as log:
                            fail(f"metalserve exited with {server.returncode}:\n{log.read()}")
                    remaining(deadline)
                    time.sleep(0.5)  # the server is still loading the model
                with open(out) as f:
                    dumps[protocol] = json.load(f)

            result = os.path.join(tmp, "client.json")
            if args.client == "python":
                argv = [sys.executable, os.path.join(examples, "python", "client.py")]
            else:
                argv = ["node", os.path.join(examples, "node", "client.js")]
            argv += [f"--target={target}", f"--input={row}", f"--out={result}"]
            p = run(argv, deadline, what=f"{args.client} client")
            if p.returncode != 0:
                fail(f"{args.client} client failed:\n{p.stdout}\n{p.stderr}")
            with open(result) as f:
                got = json.load(f)
            compare(f"{args.client} Predict vs metalserve-bench native", got["native"],
                    dumps["native"])
            compare(f"{args.client} ModelInfer vs metalserve-bench kserve", got["kserve"],
                    dumps["kserve"])
            compare("metalserve-bench kserve vs native", dumps["kserve"], dumps["native"])
        finally:
            server.stop(grace=20)
    print("PASS", flush=True)


if __name__ == "__main__":
    main()
