#!/usr/bin/python3
"""Lists, loads and unloads the models of a metalserve model repository with
grpcio, through the KServe model-repository extension that Triton's clients
use (RepositoryIndex, RepositoryModelLoad, RepositoryModelUnload).

    /usr/bin/python3 repository.py --target=127.0.0.1:8500 index [--ready]
    /usr/bin/python3 repository.py --target=127.0.0.1:8500 load MODEL
    /usr/bin/python3 repository.py --target=127.0.0.1:8500 unload MODEL

The server must serve a repository (--model_repository=DIR); load and unload
also need --model_control=explicit. `load` (re)loads MODEL from its folder:
new versions load, verify and warm up while the served ones keep answering,
then traffic switches and the old versions drain. `index` prints one line per
model version: name, version, state and, for a failed load, the reason.

Needs grpcio and grpcio-tools (Debian: python3-grpcio python3-grpc-tools).
The stubs are generated from ../../proto into a temporary directory at start.
Exits 1 with the server's code and message when a call fails.
"""
import argparse
import importlib
import os
import sys
import tempfile

import grpc
from grpc_tools import protoc

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = "inference/grpc_service.proto"


def stubs(proto_dir, out_dir):
    """The KServe messages and stub, compiled from `proto_dir`."""
    args = ["protoc", f"-I{proto_dir}", f"--python_out={out_dir}",
            f"--grpc_python_out={out_dir}", os.path.join(proto_dir, PROTO)]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {PROTO} in {proto_dir}")
    sys.path.insert(0, out_dir)
    return (importlib.import_module("inference.grpc_service_pb2"),
            importlib.import_module("inference.grpc_service_pb2_grpc"))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="127.0.0.1:8500", help="gRPC host:port")
    p.add_argument("--proto_dir", default=os.path.join(HERE, "..", "..", "proto"))
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds to wait for an answer (a load includes warm-up)")
    sub = p.add_subparsers(dest="command", required=True)
    index = sub.add_parser("index", help="list every model version and its state")
    index.add_argument("--ready", action="store_true", help="only the READY versions")
    for name in ("load", "unload"):
        sub.add_parser(name, help=f"{name} a model").add_argument("model")
    args = p.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        pb, pb_grpc = stubs(args.proto_dir, tmp)
        stub = pb_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(args.target))
        try:
            if args.command == "index":
                r = stub.RepositoryIndex(pb.RepositoryIndexRequest(ready=args.ready),
                                         timeout=args.timeout)
                for m in r.models:
                    reason = f"  {m.reason}" if m.reason else ""
                    print(f"{m.name}\t{m.version or '-'}\t{m.state}{reason}")
            elif args.command == "load":
                stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name=args.model),
                                         timeout=args.timeout)
                print(f"loaded {args.model}")
            else:
                stub.RepositoryModelUnload(
                    pb.RepositoryModelUnloadRequest(model_name=args.model), timeout=args.timeout)
                print(f"unloaded {args.model}")
        except grpc.RpcError as e:
            sys.exit(f"repository.py: {e.code().name}: {e.details()}")


if __name__ == "__main__":
    main()
