#!/usr/bin/env python3
"""Exports the AOTInductor probe packages and their eager reference outputs.

Usage: python3 bench/aoti_probe/export_probe.py OUT_DIR DEVICES [MODELS]
  DEVICES: comma list of cuda, cpu, mps; MODELS: comma list of tiny, resnet50
Writes OUT_DIR/<model>_<device>.pt2 (dynamic batch 1..max) and
OUT_DIR/<model>_<device>_b<N>.bin: the eager output (float32, raw) for the
input torch.linspace(-1, 1, numel).reshape([N, C, H, W]), which
aoti_probe.cc rebuilds bit for bit.
"""
import os
import sys
import time

import torch
import torch._inductor  # noqa: F401  (aoti_compile_and_package)
import torch.export  # noqa: F401

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "models"))
import export as models  # noqa: E402  (models/export.py: TinyCnn, torchvision)

PROBES = {
    "tiny": (lambda: models.TinyCnn(), [3, 8, 8], 64, [1, 2, 7]),
    "resnet50": (lambda: models._torchvision("resnet50"), [3, 224, 224], 256, [1, 32, 256]),
}


def pattern(shape):
    n = 1
    for s in shape:
        n *= s
    return torch.linspace(-1, 1, n).reshape(shape)


def main():
    out, devices = sys.argv[1], sys.argv[2].split(",")
    names = sys.argv[3].split(",") if len(sys.argv) > 3 else list(PROBES)
    os.makedirs(out, exist_ok=True)
    print("torch", torch.__version__, flush=True)
    for name in names:
        build, chw, max_b, batches = PROBES[name]
        for dev in devices:
            torch.manual_seed(0)
            model = build().eval().to(dev)
            batch = torch.export.Dim("batch", min=1, max=max_b)
            t0 = time.time()
            with torch.no_grad():
                ep = torch.export.export(model, (pattern([2] + chw).to(dev),),
                                         dynamic_shapes=({0: batch},))
                path = torch._inductor.aoti_compile_and_package(
                    ep, package_path=os.path.join(out, f"{name}_{dev}.pt2"))
            print(f"exported {path} in {time.time() - t0:.1f} s "
                  f"({os.path.getsize(path) / 1e6:.1f} MB)", flush=True)
            with torch.no_grad():
                for b in batches:
                    y = model(pattern([b] + chw).to(dev)).float().cpu().contiguous()
                    y.numpy().tofile(os.path.join(out, f"{name}_{dev}_b{b}.bin"))


if __name__ == "__main__":
    main()
