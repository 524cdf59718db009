#!/usr/bin/env python3
"""Priority isolation with two metalserve-bench processes (issue 19, item 3).

One server with --priority_levels=2. Three measurements, each
--duration seconds:
  1. saturation: metalserve-bench closed loop at --load_concurrency, every
     request at level 2 (the lowest): its throughput X;
  2. idle: metalserve-bench open loop (Poisson) at level 1 alone, at
     --high_share of X (default 10 %): the high level's idle p99;
  3. loaded: both at once, the level-2 saturating client and the level-1
     client at the same rate: the high level's p99 under saturation.
Goal: loaded p99 <= 2 x idle p99. Latency of the open-loop client counts
from the intended send time. Prints the figures and writes
<out>/<host_label>-<date>-<model>[-tag]-priority2.json with the command.

--variants NAME=ARGS ... compares server variants in one run (ARGS are
server flags added after --server_args; "off=" adds none), each on a fresh
server doing the three measurements; --rounds N repeats them in N
interleaved rounds (each round runs every variant once, the order rotated
by one per round, so drift over the run does not favour one variant). The
file then holds every round and each variant's medians, and level 2's
loaded throughput against the first variant's.

  bench/priority.py --model=identity --duration=5 --load_concurrency=64
  bench/priority.py --build=build-gpu --model=resnet50 --device=cuda \\
      --threads=8 --max_batch_size=256 --load_concurrency=256 \\
      --bench_args=--connections=8
  bench/priority.py --model=tiny_cnn --duration=2 --rounds=2 --variants off= \\
      "r1.5-5ms=--priority_fill_cost_ratio=1.5 --priority_lower_batch_cost=5ms"

Only the standard library is needed (the GPU host has no extra packages).
"""
import argparse
import datetime
import json
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def quoted(arg):
    """`arg` as a shell would need it, so the recorded command can be re-run."""
    return shlex.quote(arg) if any(c in arg for c in " \"'$") else arg


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(a, port, log_path, variant_args=""):
    cmd = [os.path.join(a.build, "metalserve"), f"--model={a.build}/models/{a.model}.pt",
           f"--address=127.0.0.1:{port}", "--metrics_address=", "--http_address=",
           f"--device={a.device}", f"--threads={a.threads}",
           f"--max_batch_size={a.max_batch_size}", "--max_queue_size=8192",
           "--priority_levels=2", "--default_priority=2", "--monitor_log_interval=0"]
    cmd += a.server_args.split() + variant_args.split()
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + a.start_timeout
    while time.time() < deadline:
        if "ready: gRPC" in open(log_path).read():
            return proc
        if proc.poll() is not None:
            raise SystemExit(f"server exited:\n{open(log_path).read()[-3000:]}")
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("server did not become ready")


def bench(a, port, level, extra):
    """One metalserve-bench run at priority `level`; its JSON report's run."""
    cmd = [os.path.join(a.build, "metalserve-bench"), f"--target=127.0.0.1:{port}",
           f"--priority={level}", f"--duration={a.duration}s", f"--warmup={a.warmup}s",
           "--output=json", "--progress=off", "--max_error_rate=1"] + extra + a.bench_args.split()
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    out = subprocess.run(cmd, check=True, text=True, capture_output=True).stdout
    return json.loads(out)["runs"][0]


def summary(r):
    return {"requests_per_s": round(r["requests_per_s"], 1),
            "p50_ms": round(r["latency_us"]["p50"] / 1e3, 3),
            "p99_ms": round(r["latency_us"]["p99"] / 1e3, 3),
            "error_rate": r["error_rate"]}


def measure(a, port):
    saturating = ["--concurrency=" + str(a.load_concurrency)]
    low_alone = bench(a, port, 2, saturating)
    rate = max(1.0, a.high_share * low_alone["requests_per_s"])
    high = [f"--rate={rate:.1f}", "--arrival=poisson"]
    idle = bench(a, port, 1, high)
    runs = {}

    def run(name, level, extra):
        runs[name] = bench(a, port, level, extra)

    # Both clients start together; the same warm-up and duration.
    low_t = threading.Thread(target=run, args=("low", 2, saturating))
    low_t.start()
    run("high", 1, high)
    low_t.join()
    result = {"high_rate": round(rate, 1), "low_alone": summary(low_alone),
              "high_idle": summary(idle), "high_loaded": summary(runs["high"]),
              "low_loaded": summary(runs["low"])}
    result["p99_ratio"] = round(runs["high"]["latency_us"]["p99"] / idle["latency_us"]["p99"], 3)
    both = runs["high"]["requests_per_s"] + runs["low"]["requests_per_s"]
    result["high_share_realised"] = round(runs["high"]["requests_per_s"] / both, 4) if both else 0
    return result


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def parse_variants(p, items):
    """[(name, server args)] from NAME=ARGS items; p.error on a bad one."""
    variants = []
    for item in items:
        name, sep, args = item.partition("=")
        if not sep or not name:
            p.error(f"--variants: expected NAME=ARGS (NAME= for no extra flags), got {item!r}")
        if name in [v[0] for v in variants]:
            p.error(f"--variants: name {name!r} given twice")
        variants.append((name, args))
    return variants


def run_once(a, variant_args):
    """A fresh server with `variant_args`, the three measurements, stopped."""
    port = free_port()
    log = os.path.join(tempfile.mkdtemp(prefix="priority-"), "server.log")
    server = start_server(a, port, log, variant_args)
    try:
        return measure(a, port)
    finally:
        server.terminate()
        server.wait(timeout=60)


def compare(a, variants):
    """Every variant in each of a.rounds interleaved rounds; per variant its
    rounds and medians."""
    runs = {name: [] for name, _ in variants}
    for r in range(a.rounds):
        k = r % len(variants)
        for name, args in variants[k:] + variants[:k]:
            print(f"# round {r + 1}/{a.rounds}: {name}", file=sys.stderr, flush=True)
            runs[name].append(run_once(a, args))
    out = []
    for name, args in variants:
        rs = runs[name]
        med = {"high_idle_p99_ms": median([x["high_idle"]["p99_ms"] for x in rs]),
               "high_loaded_p99_ms": median([x["high_loaded"]["p99_ms"] for x in rs]),
               "high_loaded_p50_ms": median([x["high_loaded"]["p50_ms"] for x in rs]),
               "p99_ratio": median([x["p99_ratio"] for x in rs]),
               "low_alone_per_s": median([x["low_alone"]["requests_per_s"] for x in rs]),
               "low_loaded_per_s": median([x["low_loaded"]["requests_per_s"] for x in rs]),
               "high_share_realised": median([x["high_share_realised"] for x in rs])}
        out.append({"name": name, "server_args": args, "rounds": rs, "median": med})
    first = out[0]["median"]["low_loaded_per_s"]
    for v in out:
        v["median"]["low_loaded_vs_first"] = (
            round(v["median"]["low_loaded_per_s"] / first, 3) if first else None)
    return out


def print_table(variants):
    print(f"{'variant':<14} {'idle p99 ms':>11} {'loaded p99 ms':>13} {'ratio':>6} "
          f"{'level-2 req/s':>13} {'vs first':>8}  goal <= 2")
    for v in variants:
        m = v["median"]
        print(f"{v['name']:<14} {m['high_idle_p99_ms']:>11.3f} {m['high_loaded_p99_ms']:>13.3f} "
              f"{m['p99_ratio']:>6.2f} {m['low_loaded_per_s']:>13.1f} "
              f"{m['low_loaded_vs_first']:>8} "
              f" {'met' if m['p99_ratio'] <= 2 else 'NOT met'}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--model", default="identity")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max_batch_size", type=int, default=32)
    p.add_argument("--server_args", default="",
                   help="more server flags, space separated (e.g. --batching=fixed)")
    p.add_argument("--bench_args", default="", help="more metalserve-bench flags, space separated")
    p.add_argument("--duration", type=float, default=5)
    p.add_argument("--warmup", type=float, default=1)
    p.add_argument("--load_concurrency", type=int, default=64)
    p.add_argument("--high_share", type=float, default=0.1,
                   help="level-1 rate as a share of the level-2 saturating throughput")
    p.add_argument("--start_timeout", type=float, default=300)
    p.add_argument("--host_label", default=socket.gethostname())
    p.add_argument("--tag", default="")
    p.add_argument("--out", default=os.path.join(ROOT, "build", "bench-results"))
    p.add_argument("--variants", nargs="+", metavar="NAME=ARGS",
                   help="server variants compared in one run: NAME=ARGS, ARGS space separated "
                        "server flags added after --server_args (NAME= for none)")
    p.add_argument("--rounds", type=int, default=1,
                   help="interleaved rounds (each runs every variant once, order rotated)")
    a = p.parse_args()
    if a.rounds < 1:
        p.error(f"--rounds must be >= 1, got {a.rounds}")
    variants = parse_variants(p, a.variants) if a.variants else None
    command = " ".join([os.path.relpath(sys.argv[0], ROOT)] + [quoted(x) for x in sys.argv[1:]])
    if variants is None and a.rounds == 1:
        result = run_once(a, "")
    else:
        result = {"variants": compare(a, variants or [("default", "")])}
    result.update({"command": command, "host_label": a.host_label, "model": a.model,
                   "device": a.device, "date": datetime.datetime.now().isoformat(timespec="seconds"),
                   "load_concurrency": a.load_concurrency, "duration_s": a.duration,
                   "server_args": a.server_args, "rounds": a.rounds})
    os.makedirs(a.out, exist_ok=True)
    stem = f"{a.host_label}-{datetime.date.today().isoformat()}-{a.model}"
    path = os.path.join(a.out, stem + (f"-{a.tag}" if a.tag else "") + "-priority2.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    if "variants" in result:
        print_table(result["variants"])
        print(f"wrote {path}")
        return
    print(json.dumps(result, indent=1))
    verdict = "met" if result["p99_ratio"] <= 2 else "NOT met"
    print(f"wrote {path}; level-1 p99 loaded/idle {result['p99_ratio']}x (goal <= 2: {verdict})")


if __name__ == "__main__":
    main()
