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
     client's, over each protocol;
  5. with --two_input_model (pair_add: a float32 [N,4] + b int64 [N,4]), a
     second server serves it and the example client must send both inputs,
     once as the README runs it (no files: generated zeros) and once with a
     row file for `a` only (b --fill=random, 3 rows): each protocol's output
     must equal a + b of the inputs the client reports.
Each server is stopped (SIGTERM, then SIGKILL) whatever happens.
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


def start_server(args, model, tmp, tag):
    """metalserve serving `model` on a free loopback port; bench_dump waits
    for it to answer."""
    target = f"127.0.0.1:{free_port()}"
    server = Process(
        [args.server, f"--model={model}", f"--address={target}", "--http_address=",
         "--metrics_address=", "--threads=1"],
        os.path.join(tmp, f"server-{tag}.log"))
    return server, target


def bench_dump(args, server, target, protocol, row, out, deadline):
    """metalserve-bench's outputs for one request, retried while the server
    is still loading the model."""
    source = f"--input=@{row}" if row else "--input=zeros"
    while True:
        p = run([args.bench, f"--target={target}", f"--protocol={protocol}",
                 "--requests=1", "--deadline=5s", source,
                 f"--dump_outputs={out}", "--progress=off"], deadline)
        if p.returncode == 0:
            with open(out) as f:
                return json.load(f)
        if server.poll() is not None:
            with open(server.log_path, errors="replace") as log:
                fail(f"metalserve exited with {server.returncode}:\n{log.read()}")
        remaining(deadline)
        time.sleep(0.5)  # the server is still loading the model


def run_client(args, examples, target, extra, result, deadline):
    if args.client == "python":
        argv = [sys.executable, os.path.join(examples, "python", "client.py")]
    else:
        argv = ["node", os.path.join(examples, "node", "client.js")]
    argv += [f"--target={target}", f"--out={result}"] + extra
    p = run(argv, deadline, what=f"{args.client} client")
    if p.returncode != 0:
        fail(f"{args.client} client failed:\n{p.stdout}\n{p.stderr}")
    with open(result) as f:
        return json.load(f)


def check_single_input(args, examples, tmp, deadline):
    """tiny_cnn: the example client and metalserve-bench agree, one row."""
    # One deterministic row of the model's input, float32 [3, 8, 8].
    row = os.path.join(tmp, "row.bin")
    values = [((i * 37) % 101) / 50.0 - 1.0 for i in range(3 * 8 * 8)]
    with open(row, "wb") as f:
        f.write(struct.pack(f"<{len(values)}f", *values))
    server, target = start_server(args, args.model, tmp, "single")
    try:
        dumps = {}
        for protocol in ("native", "kserve"):
            out = os.path.join(tmp, f"bench_{protocol}.json")
            dumps[protocol] = bench_dump(args, server, target, protocol, row, out,
                                         deadline)
        got = run_client(args, examples, target, [f"--input={row}"],
                         os.path.join(tmp, "client.json"), deadline)
        compare(f"{args.client} Predict vs metalserve-bench native", got["native"],
                dumps["native"])
        compare(f"{args.client} ModelInfer vs metalserve-bench kserve", got["kserve"],
                dumps["kserve"])
        compare("metalserve-bench kserve vs native", dumps["kserve"], dumps["native"])
    finally:
        server.stop(grace=20)


def check_sum(label, got, rows):
    """`got` (a client's JSON) sent inputs a and b, and each protocol's one
    output is a + b, `rows` rows of 4."""
    sent = {t["name"]: t for t in got["inputs"]}
    if sorted(sent) != ["a", "b"]:
        fail(f"{label}: sent inputs {sorted(sent)}; the model declares a, b")
    if sent["b"]["datatype"] != "INT64":
        fail(f"{label}: sent b as {sent['b']['datatype']}; the model declares INT64")
    want = [x + y for x, y in zip(sent["a"]["data"], sent["b"]["data"])]
    for protocol in ("native", "kserve"):
        (out,) = got[protocol]["outputs"]
        if out["shape"] != [rows, 4] or len(out["data"]) != len(want):
            fail(f"{label} {protocol}: output shape {out['shape']} != {[rows, 4]}")
        for i, (g, w) in enumerate(zip(out["data"], want)):
            if not math.isclose(g, w, rel_tol=1e-6, abs_tol=1e-6):
                fail(f"{label} {protocol}: output[{i}] = {g}, a + b = {w}")
        print(f"ok: {label} {protocol}: pair_add output == a + b ({len(want)} values)",
              flush=True)
    return sent


def check_two_inputs(args, examples, tmp, deadline):
    """pair_add: every declared input is sent, with the README's command (no
    files) and with a row file for `a` plus random `b`; output == a + b."""
    a_row = [0.5, -1.25, 3.0, 7.75]
    a_file = os.path.join(tmp, "a.bin")
    with open(a_file, "wb") as f:
        f.write(struct.pack("<4f", *a_row))
    server, target = start_server(args, args.two_input_model, tmp, "pair")
    try:
        bench_dump(args, server, target, "native", None,
                   os.path.join(tmp, "bench_pair.json"), deadline)
        plain = run_client(args, examples, target, [],
                           os.path.join(tmp, "client_plain.json"), deadline)
        mixed = run_client(args, examples, target,
                           [f"--input=a={a_file}", "--fill=random", "--rows=3"],
                           os.path.join(tmp, "client_pair.json"), deadline)
    finally:
        server.stop(grace=20)
    check_sum(f"{args.client} (README command)", plain, 1)
    sent = check_sum(f"{args.client} --input=a=FILE --fill=random", mixed, 3)
    if sent["a"]["data"] != a_row * 3:
        fail(f"{args.client}: sent a={sent['a']['data']}, the file holds {a_row} per row")
    if not any(sent["b"]["data"]):
        fail(f"{args.client}: --fill=random sent an all-zero b: {sent['b']['data']}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--client", choices=["python", "node"], required=True)
    ap.add_argument("--server", required=True)
    ap.add_argument("--bench", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--two_input_model", default="",
                    help="pair_add.pt: a float32 [N,4] + b int64 [N,4]")
    ap.add_argument("--source_dir", required=True)
    ap.add_argument("--timeout", type=float, default=240)
    args = ap.parse_args()
    deadline = time.monotonic() + args.timeout
    for path in (args.server, args.bench, args.model, args.two_input_model):
        if path and not os.path.exists(path):
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
        check_single_input(args, examples, tmp, deadline)
        if args.two_input_model:
            check_two_inputs(args, examples, tmp, deadline)
    print("PASS", flush=True)


if __name__ == "__main__":
    main()
