#!/usr/bin/python3
"""Calls a metalserve server with grpcio: the native API (GetModelMetadata,
Predict) and the Open Inference Protocol (KServe v2) ModelInfer, with the same
inputs, and prints (or writes) the inputs sent and the outputs of both as JSON
(outputs in the format of `metalserve-bench --dump_outputs`).

    /usr/bin/python3 client.py --target=127.0.0.1:8500 [--fill=zeros|random]
        [--rows=N] [--input=[NAME=]FILE ...] [--out=FILE]

Every input the model declares (read from GetModelMetadata) is sent. An input
named by --input takes its rows from FILE; the others are generated per their
declared dtype and shape: zeros (default) or seeded random values (floats in
[0, 1), integers in [0, 100), uint8/int8 any byte, bool 0/1).

Needs grpcio and grpcio-tools (Debian: python3-grpcio python3-grpc-tools).
The stubs are generated from ../../proto into a temporary directory at start.
"""
import argparse
import importlib
import json
import os
import random
import struct
import sys
import tempfile

import grpc
from grpc_tools import protoc

HERE = os.path.dirname(os.path.abspath(__file__))
PROTOS = ["metalserve/v1/inference.proto", "inference/grpc_service.proto"]

NATIVE_TO_KSERVE = {
    "DATA_TYPE_FLOAT32": "FP32", "DATA_TYPE_FLOAT16": "FP16",
    "DATA_TYPE_BFLOAT16": "BF16", "DATA_TYPE_FLOAT64": "FP64",
    "DATA_TYPE_INT64": "INT64", "DATA_TYPE_INT32": "INT32",
    "DATA_TYPE_UINT8": "UINT8", "DATA_TYPE_INT8": "INT8", "DATA_TYPE_BOOL": "BOOL",
}
FORMAT = {"FP32": "f", "FP64": "d", "INT64": "q", "INT32": "i", "UINT8": "B",
          "INT8": "b", "BOOL": "?", "FP16": "e"}
ITEM = {"FP32": 4, "FP64": 8, "INT64": 8, "INT32": 4, "UINT8": 1, "INT8": 1,
        "BOOL": 1, "FP16": 2, "BF16": 2}


def generate_stubs(proto_dir, out_dir):
    """Compiles the protos with grpc_tools.protoc and makes them importable."""
    args = ["protoc", f"-I{proto_dir}", f"--python_out={out_dir}",
            f"--grpc_python_out={out_dir}"] + [os.path.join(proto_dir, p) for p in PROTOS]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {PROTOS} in {proto_dir}")
    sys.path.insert(0, out_dir)
    mods = {}
    for name in ["metalserve.v1.inference_pb2", "metalserve.v1.inference_pb2_grpc",
                 "inference.grpc_service_pb2", "inference.grpc_service_pb2_grpc"]:
        mods[name] = importlib.import_module(name)
    return mods


def decode(datatype, data):
    if datatype == "BF16":  # the high half of a float32
        n = len(data) // 2
        return [struct.unpack("<f", b"\0\0" + data[2 * i:2 * i + 2])[0] for i in range(n)]
    if datatype not in FORMAT:
        raise ValueError(f"cannot decode datatype {datatype}")
    n = len(data) // ITEM[datatype]
    return list(struct.unpack(f"<{n}{FORMAT[datatype]}", data))


def generate(datatype, count, fill, rng):
    """`count` elements of `datatype` as little-endian bytes."""
    if fill == "zeros":
        return bytes(count * ITEM[datatype])
    if datatype in ("FP32", "FP64", "FP16"):
        values = [rng.random() for _ in range(count)]
    elif datatype == "BF16":
        return b"".join(struct.pack("<f", rng.random())[2:] for _ in range(count))
    elif datatype in ("INT64", "INT32"):
        values = [rng.randrange(100) for _ in range(count)]
    elif datatype == "UINT8":
        values = [rng.randrange(256) for _ in range(count)]
    elif datatype == "INT8":
        values = [rng.randrange(-128, 128) for _ in range(count)]
    else:  # BOOL
        values = [bool(rng.randrange(2)) for _ in range(count)]
    return struct.pack(f"<{count}{FORMAT[datatype]}", *values)


def parse_files(specs, names):
    """--input values ([NAME=]FILE) as {input name: path}."""
    files = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep:
            if len(names) != 1:
                sys.exit(f"client.py: --input={spec} names no input; the model has "
                         f"{len(names)} inputs {names}: use --input=NAME=FILE")
            name, path = names[0], spec
        if name not in names:
            sys.exit(f"client.py: --input={spec}: the model has no input '{name}' "
                     f"(its inputs: {names})")
        files[name] = path
    return files


def build_inputs(pb, md, args):
    """One (name, dtype enum, KServe datatype, shape, bytes) per declared input."""
    names = [spec.name for spec in md.inputs]
    files = parse_files(args.input, names)
    rng = random.Random(args.seed)
    inputs = []
    for spec in md.inputs:
        datatype = NATIVE_TO_KSERVE[pb.DataType.Name(spec.dtype)]
        row_shape = list(spec.shape[1:])
        if any(d < 1 for d in row_shape):
            sys.exit(f"client.py: input '{spec.name}' has a variable dimension "
                     f"{list(spec.shape)}; this client sends fixed shapes only")
        count = 1
        for d in row_shape:
            count *= d
        if spec.name in files:
            path = files[spec.name]
            with open(path, "rb") as f:
                row = f.read()
            if len(row) != count * ITEM[datatype]:
                sys.exit(f"client.py: --input={spec.name}={path} has {len(row)} bytes; one "
                         f"row {row_shape} of {datatype} needs {count * ITEM[datatype]}")
            data = row * args.rows
        else:
            data = generate(datatype, count * args.rows, args.fill, rng)
        inputs.append((spec.name, spec.dtype, datatype, [args.rows] + row_shape, data))
    return inputs


def call(args, m):
    """GetModelMetadata, then Predict and ModelInfer with the same inputs."""
    pb = m["metalserve.v1.inference_pb2"]
    kpb = m["inference.grpc_service_pb2"]
    with grpc.insecure_channel(args.target) as channel:
        native = m["metalserve.v1.inference_pb2_grpc"].InferenceStub(channel)
        kserve = m["inference.grpc_service_pb2_grpc"].GRPCInferenceServiceStub(channel)
        md = native.GetModelMetadata(pb.GetModelMetadataRequest(), timeout=args.timeout_s)
        inputs = build_inputs(pb, md, args)

        req = pb.PredictRequest(model_name=md.model_name)
        kreq = kpb.ModelInferRequest(model_name=md.model_name)
        for name, dtype, datatype, shape, data in inputs:
            req.inputs.add(name=name, dtype=dtype, shape=shape, data=data)
            kreq.inputs.add(name=name, datatype=datatype, shape=shape)
            kreq.raw_input_contents.append(data)
        predicted = native.Predict(req, timeout=args.timeout_s)
        inferred = kserve.ModelInfer(kreq, timeout=args.timeout_s)
    choice = md.device_choice
    return {
        "model": md.model_name,
        # How the server chose its device; with --device=auto, the forward
        # time it measured per device and warm-up batch size.
        "device_choice": {
            "device": md.device, "requested": choice.requested, "reason": choice.reason,
            "timings": [{"device": t.device, "batch_size": t.batch_size, "seconds": t.seconds}
                        for t in choice.timings],
            "skipped": list(choice.skipped)},
        "inputs": [{"name": n, "datatype": dt, "shape": s, "data": decode(dt, d)}
                   for n, _, dt, s, d in inputs],
        "native": {"outputs": [
            {"name": o.name, "datatype": NATIVE_TO_KSERVE[pb.DataType.Name(o.dtype)],
             "shape": list(o.shape),
             "data": decode(NATIVE_TO_KSERVE[pb.DataType.Name(o.dtype)], o.data)}
            for o in predicted.outputs]},
        "kserve": {"outputs": [
            {"name": o.name, "datatype": o.datatype, "shape": list(o.shape),
             "data": decode(o.datatype, inferred.raw_output_contents[i])}
            for i, o in enumerate(inferred.outputs)]},
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="127.0.0.1:8500")
    p.add_argument("--proto_dir", default=os.path.join(HERE, "..", "..", "proto"))
    p.add_argument("--input", action="append", default=[], metavar="[NAME=]FILE",
                   help="raw little-endian bytes of one row of input NAME (repeat per "
                        "input; NAME may be left out for a single-input model)")
    p.add_argument("--fill", choices=["zeros", "random"], default="zeros",
                   help="data for inputs without --input (default zeros)")
    p.add_argument("--seed", type=int, default=1, help="seed of --fill=random")
    p.add_argument("--rows", type=int, default=1, help="rows per request (batch)")
    p.add_argument("--out", default="", help="write the JSON here (default stdout)")
    p.add_argument("--timeout_s", type=float, default=10)
    args = p.parse_args()
    if args.rows < 1:
        sys.exit(f"client.py: --rows={args.rows} must be >= 1")

    with tempfile.TemporaryDirectory(prefix="metalserve_stubs_") as stubs:
        try:
            result = call(args, generate_stubs(os.path.abspath(args.proto_dir), stubs))
        except grpc.RpcError as e:
            sys.exit(f"client.py: {e.code().name}: {e.details()}")
    text = json.dumps(result) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
