#!/usr/bin/env python3
"""Soak benchmark: at least 200,000 requests to a real metalserve through
metalserve-bench, sampling the server's RSS (/proc/<pid>/status VmRSS) and
its device memory gauge (metalserve_device_memory_bytes from /metrics) at
intervals. Reports growth after warm-up; the goal is under 5 %.

    python3 bench/reliability/soak.py --server build/metalserve \\
        --bench build/metalserve-bench --model build/models/tiny_cnn.pt

Phases: start the server on free 127.0.0.1 ports; a warm-up run
(--warmup_requests) so allocator pools, gRPC buffers and the model's
shape caches settle; then --requests in --chunks consecutive bench runs,
sampling after each chunk and every --interval seconds in between. Growth is
(last - baseline) / baseline where baseline is the first sample after
warm-up; the report also gives the maximum and the slope per 100k requests.
Exit 1 when any request failed, 3 when growth exceeds --max_growth.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "tests", "testing"))
from proc_util import Process, free_port, http_get  # noqa: E402


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def device_bytes(metrics_port):
    """Sum of metalserve_device_memory_bytes series (allocated etc.); None
    when the gauge is absent (CPU reports none)."""
    try:
        _, text = http_get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2)
    except OSError:
        return None
    vals = {}
    for m in re.finditer(r'^metalserve_device_memory_bytes\{([^}]*)\} (\S+)$', text, re.M):
        vals[m.group(1)] = float(m.group(2))
    return vals or None


def run_bench(args, port, requests):
    out = subprocess.run(
        [args.bench, f"--target=127.0.0.1:{port}", f"--requests={requests}",
         f"--concurrency={args.concurrency}", "--output=json", "--progress=off",
         "--deadline=30s"], capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        sys.exit(f"metalserve-bench failed ({out.returncode}): {out.stderr[-2000:]}")
    report = json.loads(out.stdout)
    return report["runs"][0] if "runs" in report else report


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", default="build/metalserve")
    ap.add_argument("--bench", default="build/metalserve-bench")
    ap.add_argument("--model", default="build/models/tiny_cnn.pt")
    ap.add_argument("--requests", type=int, default=200_000)
    ap.add_argument("--warmup_requests", type=int, default=20_000)
    ap.add_argument("--chunks", type=int, default=10)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--interval", type=float, default=2.0, help="seconds between samples")
    ap.add_argument("--max_growth", type=float, default=0.05)
    ap.add_argument("--server_args", default="--threads=1 --max_batch_size=16",
                    help="extra metalserve flags")
    ap.add_argument("--json", help="write the report here as JSON")
    args = ap.parse_args()

    port, mport = free_port(), free_port()
    tmp = tempfile.mkdtemp(prefix="metalserve_soak_")
    log_path = os.path.join(tmp, "server.log")
    server = Process(
        [args.server, f"--model={args.model}", f"--address=127.0.0.1:{port}", "--http_address=",
         f"--metrics_address=127.0.0.1:{mport}", "--monitor_log_interval=0"]
        + args.server_args.split(), log_path)
    samples = []  # (seconds since start, requests done, rss KiB, device dict)
    done = {"n": 0}
    stop = threading.Event()
    t0 = time.monotonic()

    def sampler():
        while not stop.wait(args.interval):
            samples.append((time.monotonic() - t0, done["n"], rss_kib(server.pid),
                            device_bytes(mport)))

    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if server.poll() is not None:
                sys.exit("server exited:\n" + open(log_path).read()[-3000:])
            if "ready:" in open(log_path).read():
                break
            time.sleep(0.2)
        warm = run_bench(args, port, args.warmup_requests)
        baseline = (0.0, 0, rss_kib(server.pid), device_bytes(mport))
        t0 = time.monotonic()
        samples.append(baseline)
        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        ok = errors = 0
        per_chunk = args.requests // args.chunks
        latencies = []
        for i in range(args.chunks):
            r = run_bench(args, port, per_chunk)
            ok += r["ok"]
            errors += sum(r["errors"].values())
            done["n"] += per_chunk
            latencies.append(r["latency_us"]["p99"])
            samples.append((time.monotonic() - t0, done["n"], rss_kib(server.pid),
                            device_bytes(mport)))
            print(f"chunk {i + 1}/{args.chunks}: {done['n']} requests, "
                  f"{r['requests_per_s']:.0f} req/s, p99 {r['latency_us']['p99']:.0f} us, "
                  f"RSS {samples[-1][2] / 1024:.1f} MiB", flush=True)
        stop.set()
        th.join()
        elapsed = time.monotonic() - t0
    finally:
        stop.set()
        server.stop(grace=40)

    base_rss = baseline[2]
    last_rss = samples[-1][2]
    max_rss = max(s[2] for s in samples)
    growth = (last_rss - base_rss) / base_rss
    # Least-squares slope of RSS over requests, KiB per 100k requests.
    xs = [s[1] for s in samples]
    ys = [s[2] for s in samples]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs) or 1
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var * 100_000
    report = {
        "requests": done["n"], "warmup_requests": args.warmup_requests,
        "ok": ok, "errors": errors, "elapsed_s": round(elapsed, 1),
        "requests_per_s": round(done["n"] / elapsed, 1),
        "rss_kib": {"after_warmup": base_rss, "last": last_rss, "max": max_rss,
                    "warmup_start_first_sample_before": None},
        "rss_growth": round(growth, 4),
        "rss_max_growth": round((max_rss - base_rss) / base_rss, 4),
        "rss_slope_kib_per_100k_requests": round(slope, 1),
        "device_memory_bytes": {"after_warmup": baseline[3], "last": samples[-1][3]},
        "p99_us_per_chunk": latencies, "samples": len(samples),
        "server_exit_code": server.returncode,
        "warmup_requests_per_s": warm["requests_per_s"],
    }
    del report["rss_kib"]["warmup_start_first_sample_before"]
    print(json.dumps(report, indent=1))
    print(f"soak: {done['n']} requests after {args.warmup_requests} warm-up, {errors} errors; "
          f"RSS {base_rss / 1024:.1f} -> {last_rss / 1024:.1f} MiB "
          f"(growth {100 * growth:+.2f} %, max {100 * report['rss_max_growth']:+.2f} %, "
          f"slope {slope:+.0f} KiB/100k requests); goal < {100 * args.max_growth:.0f} %")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**report, "samples_data": samples}, f, indent=1)
    if errors:
        return 1
    return 3 if growth > args.max_growth else 0


if __name__ == "__main__":
    sys.exit(main())
