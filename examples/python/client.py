#!/usr/bin/python3
"""Calls a metalserve server with grpcio: the native API (GetModelMetadata,
Predict) and the Open Inference Protocol (KServe v2) ModelInfer, with the same
input, and prints (or writes) the outputs as JSON in the format of
`metalserve-bench --dump_outputs`.

    /usr/bin/python3 client.py --target=127.0.0.1:8500 [--input=row.bin] [--out=FILE]

Needs grpcio and grpcio-tools (Debian: python3-grpcio python3-grpc-tools).
The stubs are generated from ../../proto into a temporary directory at start.
--input: raw little-endian bytes of one input row (default: zeros).
"""
import argparse
import importlib
import json
import os
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
          "INT8": "b", "BOOL": "?"}
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
    if datatype not in FORMAT:
        raise ValueError(f"cannot decode datatype {datatype}")
    n = len(data) // ITEM[datatype]
    return list(struct.unpack(f"<{n}{FORMAT[datatype]}", data))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="127.0.0.1:8500")
    p.add_argument("--proto_dir", default=os.path.join(HERE, "..", "..", "proto"))
    p.add_argument("--input", default="", help="raw bytes of one input row")
    p.add_argument("--out", default="", help="write the JSON here (default stdout)")
    p.add_argument("--timeout_s", type=float, default=10)
    args = p.parse_args()

    with tempfile.TemporaryDirectory(prefix="metalserve_stubs_") as stubs:
        m = generate_stubs(os.path.abspath(args.proto_dir), stubs)
        pb = m["metalserve.v1.inference_pb2"]
        pb_grpc = m["metalserve.v1.inference_pb2_grpc"]
        kpb = m["inference.grpc_service_pb2"]
        kpb_grpc = m["inference.grpc_service_pb2_grpc"]

        with grpc.insecure_channel(args.target) as channel:
            native = pb_grpc.InferenceStub(channel)
            kserve = kpb_grpc.GRPCInferenceServiceStub(channel)

            # Native API: metadata, then Predict with one row.
            md = native.GetModelMetadata(pb.GetModelMetadataRequest(),
                                         timeout=args.timeout_s)
            spec = md.inputs[0]
            dtype_name = pb.DataType.Name(spec.dtype)
            datatype = NATIVE_TO_KSERVE[dtype_name]
            shape = [1] + list(spec.shape[1:])
            row_bytes = ITEM[datatype]
            for d in shape[1:]:
                row_bytes *= d
            if args.input:
                with open(args.input, "rb") as f:
                    data = f.read()
                if len(data) != row_bytes:
                    sys.exit(f"client.py: --input={args.input} has {len(data)} bytes; "
                             f"one row {shape[1:]} of {datatype} needs {row_bytes}")
            else:
                data = bytes(row_bytes)
            req = pb.PredictRequest(model_name=md.model_name)
            req.inputs.add(name=spec.name, dtype=spec.dtype, shape=shape, data=data)
            predicted = native.Predict(req, timeout=args.timeout_s)

            # KServe v2: ModelInfer with raw_input_contents.
            kreq = kpb.ModelInferRequest(model_name=md.model_name)
            kreq.inputs.add(name=spec.name, datatype=datatype, shape=shape)
            kreq.raw_input_contents.append(data)
            inferred = kserve.ModelInfer(kreq, timeout=args.timeout_s)

    result = {
        "model": md.model_name,
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
    text = json.dumps(result) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
