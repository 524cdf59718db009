#!/usr/bin/python3
"""Exports the TorchScript models metalserve serves and tests against.

Usage: /usr/bin/python3 models/export.py --out DIR [--only a,b]
       /usr/bin/python3 models/export.py --repository DIR [--version N] [--only a,b]
       python3 models/export.py --out DIR --format=pt2 [--devices=cuda,cpu]
           [--max_batch_size=256] [--precision=fp16] [--channels_last] [--only a,b]

With --out, writes DIR/<name>.pt (TorchScript) and DIR/<name>.json (the
signature: input/output names, dtypes and shapes with -1 for the batch
dimension), because TorchScript does not carry a usable signature.

With --format=pt2 (torch 2.6+), also writes an AOTInductor package per device,
DIR/<name>.<device>[.fp16|.bf16][.cl].pt2, next to the TorchScript file and
the same signature: torch.export with a dynamic batch dimension (1 up to
--max_batch_size), compiled by torch._inductor.aoti_compile_and_package for
that device. --precision/--channels_last are compiled into the package (it
still takes and returns the signature's dtypes). The package's batch range
and precision go into its metadata (metalserve.min_batch, .max_batch,
.precision), which the server reads (docs/aoti.md).

With --repository, writes a model repository (docs/repository.md):
DIR/<name>/<N>/model.pt and DIR/<name>/config.json (the signature; an
existing config.json is kept, so settings added to it survive a new version).

Models (all seeded, random weights; pretrained weights cannot be downloaded
in CI, see README for serving your own model):
  resnet18            default image classifier, [N,3,224,224] -> [N,1000]
  mobilenet_v2        optimization tests: freeze + optimize_for_inference safe
  mobilenet_v3_small  optimization tests: optimize_for_inference breaks it on
                      LibTorch 1.13 CPU (rows change with batch position)
  tiny_cnn            [N,3,8,8] -> [N,10]
  identity            [N,4] -> [N,4], returns its input
  image_head          [N,3,224,224] -> [N,1000], the first 1,000 values of each
                      image: an image classifier's interface with no compute
                      (bench/transport.py's runtime share at 602 KB)
  poison              [N,4] -> [N,4] = 2*x; raises when any element is -777
  two_in_two_out      forward(image [N,3] float32, count [N,1] int64) ->
                      (scaled = image*count [N,3] float32, next = count+1 [N,1] int64)
  dict_out            [N,4] -> {"probs": softmax [N,4] float32,
                                "top": arg-max [N,1] int64}
  pair_add            two inputs: a float32 [N,4], b int64 [N,4] -> [N,4] = a + b
                      (clients must send every input the model declares)
  lstm_small          the write-up's small LSTM: nn.LSTM(16 -> 64) over
                      sequence [N,32,16] -> logits [N,4] (device choice)

Works with torch 1.13 and 2.x.
"""
import argparse
import importlib
import json
import os
import sys
import time
from typing import Dict, Tuple

import torch

POISON_MARKER = -777.0


class TinyCnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, kernel_size=3, padding=1)
        self.pool = torch.nn.AdaptiveAvgPool2d(2)
        self.fc = torch.nn.Linear(8 * 2 * 2, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv(x))
        x = self.pool(x)
        return self.fc(torch.flatten(x, 1))


class SmallLstm(torch.nn.Module):
    """The write-up's kind of small LSTM (where the CPU beat MPS by about
    20 %): a fixed sequence of 32 steps of 16 features, one layer of 64
    hidden units, the last step's state to 4 classes (about 21k parameters)."""

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(16, 64, batch_first=True)
        self.fc = torch.nn.Linear(64, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.fc(out[:, -1])


class Identity(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class ImageHead(torch.nn.Module):
    """An image classifier's interface (3x224x224 float32 in, 1,000 logits
    out) without its compute: the first 1,000 values of each image. Serves
    bench/transport.py the runtime's share at 602 KB requests (batch
    assembly, the forward call, the output copy) with no network's work."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1)[:, :1000]


class KeepsInput(torch.nn.Module):
    """Keeps a reference to its last input: the runtime must not lend that
    batch's host buffer to a later batch (tests/runtime/torch_runner_test.cc)."""

    def __init__(self):
        super().__init__()
        self.last = torch.zeros(1, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.last = x
        return x * 2.0


class Poison(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool((x == -777.0).any()):
            raise RuntimeError("poison: input contains the marker value -777")
        return x * 2.0


class TwoInTwoOut(torch.nn.Module):
    """Two inputs of different dtypes and two outputs: binding inputs by
    position instead of name would give wrong dtypes and values."""

    def forward(self, image: torch.Tensor, count: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return image * count.to(image.dtype), count + 1


class DictOut(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> Dict[str, torch.Tensor]:
        return {"probs": torch.softmax(x, 1), "top": torch.argmax(x, 1, keepdim=True)}
class PairAdd(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b.to(a.dtype)


def _torchvision(name):
    import torchvision  # imported lazily: the small models do not need it

    ctor = getattr(torchvision.models, name)
    try:
        return ctor(weights=None)
    except TypeError:  # torchvision < 0.13
        return ctor(pretrained=False)


def _spec(name, shape, dtype="float32"):
    return {"name": name, "dtype": dtype, "shape": shape}


def _image_model(name, classes=1000):
    def build():
        torch.manual_seed(0)
        return _torchvision(name).eval()

    sig = {"inputs": [_spec("input", [-1, 3, 224, 224])],
           "outputs": [_spec("logits", [-1, classes])]}
    return build, sig


class DeviceInput(torch.nn.Module):
    """Wraps an image classifier so that its input is cast (and, for uint8
    pixels, scaled and normalised) on the device, in the model's own dtype:
    uint8 moves 4x fewer bytes than float32, float16 2x fewer."""

    def __init__(self, net: torch.nn.Module, pixels: bool):
        super().__init__()
        self.net = net
        self.pixels = pixels
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.to(self.mean.dtype)
        if self.pixels:
            y = (y / 255.0 - self.mean) / self.std
        return self.net(y)


def _device_input_model(name, dtype):
    def build():
        torch.manual_seed(0)
        net = _torchvision(name).eval()
        return DeviceInput(net, dtype == "uint8").eval()

    sig = {"inputs": [_spec("input", [-1, 3, 224, 224], dtype)],
           "outputs": [_spec("logits", [-1, 1000])]}
    return build, sig


def _small(cls, in_shape, out_shape, in_name="input", out_name="output", inputs=None):
    def build():
        torch.manual_seed(0)
        return cls().eval()

    return build, {"inputs": inputs or [_spec(in_name, in_shape)],
                   "outputs": [_spec(out_name, out_shape)]}


def _scripted(cls, inputs, outputs):
    def build():
        return cls().eval()

    return build, {"inputs": [_spec(*i) for i in inputs],
                   "outputs": [_spec(*o) for o in outputs]}


MODELS = {
    "resnet18": _image_model("resnet18"),
    "mobilenet_v2": _image_model("mobilenet_v2"),
    "mobilenet_v3_small": _image_model("mobilenet_v3_small"),
    "tiny_cnn": _small(TinyCnn, [-1, 3, 8, 8], [-1, 10], out_name="logits"),
    "identity": _small(Identity, [-1, 4], [-1, 4]),
    "image_head": _small(ImageHead, [-1, 3, 224, 224], [-1, 1000], out_name="logits"),
    "poison": _small(Poison, [-1, 4], [-1, 4]),
    "keeps_input": _small(KeepsInput, [-1, 4], [-1, 4]),
    "two_in_two_out": _scripted(
        TwoInTwoOut, [("image", [-1, 3]), ("count", [-1, 1], "int64")],
        [("scaled", [-1, 3]), ("next", [-1, 1], "int64")]),
    "dict_out": _scripted(DictOut, [("x", [-1, 4])],
                          [("probs", [-1, 4]), ("top", [-1, 1], "int64")]),
    "pair_add": _small(PairAdd, None, [-1, 4], inputs=[
        _spec("a", [-1, 4]), _spec("b", [-1, 4], "int64")]),
    # README "Where each device wins".
    "lstm_small": _small(SmallLstm, [-1, 32, 16], [-1, 4], in_name="sequence",
                         out_name="logits"),
}

# Exported only when named with --only (benchmarks on the GPU host).
EXTRA_MODELS = {
    "resnet50": _image_model("resnet50"),
    "resnet50_u8": _device_input_model("resnet50", "uint8"),
    "resnet50_f16": _device_input_model("resnet50", "float16"),
}


_DTYPES = {"float32": torch.float32, "float16": torch.float16,
           "uint8": torch.uint8, "int64": torch.int64}


def _check(module, sig):
    """Runs the exported module once on a batch of 2 to prove it loads and
    gives the declared outputs (a tensor, a tuple, or a dict by key)."""
    args = []
    for spec in sig["inputs"]:
        dtype = _DTYPES[spec["dtype"]]
        scale = 1 if dtype.is_floating_point else 10
        args.append((torch.rand([2] + spec["shape"][1:]) * scale).to(dtype))
    with torch.no_grad():
        out = module(*args)
    if isinstance(out, dict):
        out = [out[spec["name"]] for spec in sig["outputs"]]
    elif isinstance(out, torch.Tensor):
        out = [out]
    for got, spec in zip(out, sig["outputs"]):
        want = [2] + spec["shape"][1:]
        if list(got.shape) != want or got.dtype != _DTYPES[spec["dtype"]]:
            raise SystemExit(f"output {spec['name']}: {list(got.shape)} {got.dtype} != {want}")


def _write_json(path, meta):
    with open(path + ".tmp", "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    os.replace(path + ".tmp", path)


def _save(module, name, sig, args):
    """Writes the module and its signature; returns the model file's path."""
    if not args.repository:
        pt = os.path.join(args.out, name + ".pt")
        module.save(pt + ".tmp")
        os.replace(pt + ".tmp", pt)
        _write_json(os.path.join(args.out, name + ".json"),
                    {"name": name, "version": "1", "torch_version": torch.__version__, **sig})
        return pt
    version_dir = os.path.join(args.repository, name, str(args.version))
    os.makedirs(version_dir, exist_ok=True)
    pt = os.path.join(version_dir, "model.pt")
    module.save(pt + ".tmp")
    os.replace(pt + ".tmp", pt)
    config = os.path.join(args.repository, name, "config.json")
    if not os.path.exists(config):
        _write_json(config, {"name": name, "torch_version": torch.__version__, **sig})
    return pt


class _Compiled(torch.nn.Module):
    """An image model in a reduced precision and/or channels-last, taking and
    returning float32 as its signature says: the cast and the layout change
    are compiled into the package."""

    def __init__(self, net, dtype, channels_last):
        super().__init__()
        self.dtype = dtype
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        self.net = net.to(dtype).to(memory_format=self.memory_format)

    def forward(self, x):
        y = self.net(x.to(self.dtype).contiguous(memory_format=self.memory_format))
        return y.float()


_PRECISIONS = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def _pt2_devices(arg):
    if arg:
        return [d for d in arg.split(",") if d]
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices.insert(0, "cuda")
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        devices.insert(0, "mps")
    return devices


def _example(sig, device):
    args = []
    for spec in sig["inputs"]:
        dtype = _DTYPES[spec["dtype"]]
        scale = 1 if dtype.is_floating_point else 10
        args.append((torch.rand([2] + spec["shape"][1:]) * scale).to(dtype).to(device))
    return tuple(args)


def _save_pt2(eager, name, sig, device, args):
    """torch.export with a dynamic batch dimension, compiled for `device`;
    returns the package's path."""
    net = eager
    suffix = ""
    if args.precision != "fp32" or args.channels_last:
        net = _Compiled(eager, _PRECISIONS[args.precision], args.channels_last)
        suffix = ("" if args.precision == "fp32" else "." + args.precision) + \
            (".cl" if args.channels_last else "")
    net = net.to(device).eval()
    batch = torch.export.Dim("batch", min=1, max=args.max_batch_size)
    example = _example(sig, device)
    with torch.no_grad():
        ep = torch.export.export(net, example, dynamic_shapes=tuple({0: batch} for _ in example))
    lowest = [int(r.lower) for r in ep.range_constraints.values()]
    meta = {"metalserve.min_batch": str(max([1] + lowest)),
            "metalserve.max_batch": str(args.max_batch_size),
            "metalserve.precision": args.precision}
    configs = {}
    importlib.import_module("torch._inductor.config")
    if hasattr(torch._inductor.config.aot_inductor, "metadata"):
        configs["aot_inductor.metadata"] = meta
    path = os.path.join(args.out, f"{name}.{device}{suffix}.pt2")
    with torch.no_grad():
        torch._inductor.aoti_compile_and_package(ep, package_path=path + ".tmp.pt2",
                                                 inductor_configs=configs)
    os.replace(path + ".tmp.pt2", path)
    _save_expected(net, sig, device, path, args.max_batch_size)
    return path


def _save_expected(net, sig, device, path, max_batch):
    """Eager outputs on seeded inputs, for the server to verify the package
    against when no TorchScript model is beside it: <package>.expected, a
    torch.save'd tuple of (inputs, outputs) per batch size (1 and 3)."""
    torch.manual_seed(1234)
    records = []
    for b in sorted({1, min(3, max_batch)}):
        inputs = []
        for spec in sig["inputs"]:
            dtype = _DTYPES[spec["dtype"]]
            scale = 1 if dtype.is_floating_point else 10
            inputs.append((torch.rand([b] + spec["shape"][1:]) * scale).to(dtype))
        with torch.no_grad():
            out = net(*[x.to(device) for x in inputs])
        if isinstance(out, dict):
            outs = [out[spec["name"]] for spec in sig["outputs"]]
        else:
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
        records.append((tuple(inputs), tuple(o.cpu() for o in outs)))
    # Tuples: LibTorch's unpickler (torch::jit::pickle_load) reads them, not
    # the APPEND opcode a short Python list is written with.
    torch.save(tuple(records), path + ".expected")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", help="output folder: <name>.pt and <name>.json")
    where.add_argument("--repository", help="model repository folder: "
                       "<name>/<version>/model.pt and <name>/config.json")
    p.add_argument("--version", type=int, default=1,
                   help="with --repository: the version folder to write (default 1)")
    p.add_argument("--only", default="", help="comma-separated model names")
    p.add_argument("--format", choices=["torchscript", "pt2"], default="torchscript",
                   help="pt2: also an AOTInductor package per device (torch 2.6+)")
    p.add_argument("--devices", default="", help="pt2: comma list of cuda, mps, cpu "
                   "(default: cpu and each available accelerator)")
    p.add_argument("--max_batch_size", type=int, default=256,
                   help="pt2: largest batch the package accepts (default 256)")
    p.add_argument("--precision", choices=list(_PRECISIONS), default="fp32",
                   help="pt2: compute precision compiled in (default fp32)")
    p.add_argument("--channels_last", action="store_true",
                   help="pt2: channels-last layout compiled in (image models)")
    args = p.parse_args(argv)
    if args.version < 1:
        p.error(f"--version {args.version}: a version is a positive number")
    if args.format == "pt2" and (args.repository or args.max_batch_size < 1):
        p.error("--format=pt2 needs --out and a positive --max_batch_size")
    if args.format == "pt2":
        try:
            # AOTInductor (torch 2.6+); imported here, not at the top: the
            # TorchScript path runs on torch 1.13 too.
            importlib.import_module("torch.export")
            if not hasattr(importlib.import_module("torch._inductor"), "aoti_compile_and_package"):
                raise ImportError("no aoti_compile_and_package")
        except ImportError:
            p.error(f"--format=pt2 needs torch 2.6 or newer (AOTInductor); "
                    f"this is {torch.__version__}")
    names = [n for n in args.only.split(",") if n] or list(MODELS)
    known = {**MODELS, **EXTRA_MODELS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown model(s) {unknown}; known: {list(known)}")
    os.makedirs(args.out or args.repository, exist_ok=True)
    if args.format == "torchscript":
        torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    for name in names:
        start = time.time()
        build, sig = known[name]
        eager = build()
        module = torch.jit.script(eager)
        _check(module, sig)
        pt = _save(module, name, sig, args)
        print(f"exported {pt} in {time.time() - start:.1f}s", flush=True)
        for device in (_pt2_devices(args.devices) if args.format == "pt2" else []):
            start = time.time()
            path = _save_pt2(eager, name, sig, device, args)
            print(f"exported {path} in {time.time() - start:.1f}s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
