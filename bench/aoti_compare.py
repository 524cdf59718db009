#!/usr/bin/env python3
"""TorchScript against AOTInductor, side by side in one run: raw forward
through the runtime (runtime_bench: copy in, forward, copy out) and served
throughput (metalserve over loopback gRPC, driven by metalserve-bench with one
image per request at each concurrency, so that the server forms batches of
about that size), and the load time of each (load and verification, then
warm-up, as the server logs them).

  python3 bench/aoti_compare.py --build=build-gpu --model=resnet50 --device=cuda \\
      --variants=ts-fp32,aoti-fp32,ts-fp16cl,aoti-fp16cl --batches=1,32,256

Variants: ts-fp32 (<model>.pt, --optimize=auto), aoti-fp32
(<model>.<device>.pt2), ts-fp16cl (<model>.pt --precision=fp16
--channels_last), aoti-fp16cl (<model>.<device>.fp16.cl.pt2); export them
first with models/export.py --format=pt2 (and --precision=fp16
--channels_last). Reuses bench/run.py's server, sweep and raw forward.
Writes --json and prints a Markdown table.
"""
import argparse
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as runpy  # noqa: E402  (bench/run.py)

VARIANTS = {
    "ts-fp32": ("TorchScript", "fp32", False, "{model}.pt"),
    "aoti-fp32": ("AOTInductor", "fp32", False, "{model}.{device}.pt2"),
    "ts-fp16cl": ("TorchScript", "fp16", True, "{model}.pt"),
    "aoti-fp16cl": ("AOTInductor", "fp16", True, "{model}.{device}.fp16.cl.pt2"),
}


def args_for(a, key):
    runtime, precision, cl, pattern = VARIANTS[key]
    v = argparse.Namespace(**vars(a))
    v.model_file = pattern.format(model=a.model, device=a.device)
    v.model_path = os.path.join(a.build, "models", v.model_file)
    aoti = runtime == "AOTInductor"
    # A package has its precision and layout compiled in.
    v.precision = "fp32" if aoti else precision
    v.channels_last = cl and not aoti
    v.model = v.model_file[:-3] if v.model_file.endswith(".pt") else v.model_file
    return v, runtime, precision, cl


def measure(a, key):
    v, runtime, precision, cl = args_for(a, key)
    print(f"[{key}] {v.model_path}", file=sys.stderr)
    start = time.monotonic()
    s = runpy.Server(v, a.max_batch_size, a.allowed_batch_sizes, key, 0)
    ready_s = time.monotonic() - start
    try:
        served = runpy.sweep(v, s, v.sweep_levels)
    finally:
        s.stop()
    text = open(os.path.join(v.workdir, f"server-{key}.log"), errors="replace").read()
    m = re.search(r"load_ms=(\d+) warmup_ms=(\d+)", text)
    raw = runpy.raw_forward(v, s.optimization if runtime == "TorchScript" else "none")
    return {"variant": key, "runtime": runtime, "precision": precision, "channels_last": cl,
            "model_file": v.model_file, "optimization": s.optimization,
            "load_ms": int(m.group(1)) if m else None,
            "warmup_ms": int(m.group(2)) if m else None, "ready_s": ready_s,
            "raw": {str(b): r for b, r in raw.items()},
            "served": {str(r["concurrency"]): r["rows_per_s"] for r in served},
            "served_batch": {str(r["concurrency"]): r["realised_batch_rows_mean"] for r in served}}


def table(rows, batches, command):
    out = [f"command: `{command}`", "",
           "| runtime | precision | raw img/s " + " / ".join(f"b{b}" for b in batches)
           + " | served img/s " + " / ".join(f"c{b}" for b in batches)
           + " | load + verify s | warm-up s |", "|---|---|---|---|---|---|"]
    for r in rows:
        raw = " / ".join(f"{r['raw'][str(b)]['items_per_s']:,.0f}" for b in batches)
        served = " / ".join(f"{r['served'][str(b)]:,.0f}" for b in batches)
        prec = r["precision"] + (" channels-last" if r["channels_last"] else "")
        out.append(f"| {r['runtime']} | {prec} | {raw} | {served} | "
                   f"{(r['load_ms'] or 0) / 1e3:.1f} | {(r['warmup_ms'] or 0) / 1e3:.1f} |")
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default="build")
    p.add_argument("--model", default="resnet50")
    p.add_argument("--device", default="cuda")
    p.add_argument("--variants", default="ts-fp32,aoti-fp32")
    p.add_argument("--batches", default="1,32,256", help="raw batch sizes = concurrency levels")
    p.add_argument("--max_batch_size", type=int, default=256)
    p.add_argument("--allowed_batch_sizes", default="1,2,4,8,16,32,64,128,256")
    p.add_argument("--max_queue_delay", default="2ms")
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--executors", type=int, default=2)
    p.add_argument("--device_concurrency", type=int, default=2)
    p.add_argument("--duration", type=float, default=3)
    p.add_argument("--warmup", type=float, default=1)
    p.add_argument("--raw_min_time", type=float, default=1)
    p.add_argument("--bench_args", default="--connections=8")
    p.add_argument("--json", default="")
    a = p.parse_args()
    a.bench_args = a.bench_args.split()
    a.sweep_levels = [int(x) for x in a.batches.split(",")]
    a.optimize, a.input, a.start_timeout = "auto", "random", 600
    a.workdir = os.path.join(a.build, "aoti-compare")
    os.makedirs(a.workdir, exist_ok=True)
    command = " ".join([os.path.relpath(sys.argv[0], runpy.ROOT)] + sys.argv[1:])
    rows = []
    for key in a.variants.split(","):
        try:
            rows.append(measure(a, key))
        except (SystemExit, Exception) as e:  # one variant failing keeps the others
            print(f"[{key}] failed: {e}", file=sys.stderr)
            continue
        if a.json:  # after each variant: a run cut short keeps what it measured
            with open(a.json, "w") as f:
                json.dump({"command": command, "rows": rows}, f, indent=1)
        print(table(rows[-1:], a.sweep_levels, command), file=sys.stderr, flush=True)
    print(table(rows, a.sweep_levels, command))


if __name__ == "__main__":
    main()
