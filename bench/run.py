#!/usr/bin/env python3
"""Served vs raw: one command, one run, side-by-side figures.

Measures, in a single run on this host:
  (a) raw in-process forward through the runtime (runtime_bench) per batch size;
  (b) the server driven by metalserve-bench over a concurrency sweep, once with
      batching on and once with --max_batch_size=1;
  (c) serial batch-1 latency through the server (max_batch_size=1, so no
      batching delay) against the raw batch-1 forward;
and prints the ratios: served / raw best-batch throughput, batching gain, and
p50/p99 overhead at concurrency 1, each with a WARNING beside it when the run
behind it is too short or too noisy to mean much (fewer than MIN_REQUESTS
requests or MIN_DURATION_S seconds, errors, a negative overhead, served above
raw, a gain below 1 from few requests). Writes
<--out>/<host_label>-<date>[-tag].json (holding the command
and --host_label) (default build/bench-results; pass
--out=bench/results to add a run to the repository's record) and, when
matplotlib is present, a PNG of throughput against p99 latency.

  bench/run.py                                   # CPU defaults (a few minutes)
  bench/run.py --model=resnet50 --device=cuda --batches=1,8,32,64,128,256 \\
      --sweep=1,16,64,256,512 --max_batch_size=256 --tag=fp32 --out=bench/results
  bench/run.py --port=9000   # servers on 127.0.0.1:9000 (batched), :9001 (unbatched)
  bench/run.py --transport   # also the transport floor: echo, null runner, model; TCP and a Unix socket

Only the standard library is needed (the GPU host has no extra packages).
"""
import argparse
import datetime
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Below these, a level's figures are too few or too short to compare.
MIN_REQUESTS = 200
MIN_DURATION_S = 3.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_cpus(spec):
    """--server_cpus/--client_cpus: "0", "0,2", "0-3" -> sorted CPU numbers;
    "" -> None (not pinned). Pure: tested by tests/client/bench_run_test.py."""
    if not spec:
        return None
    cpus = set()
    for part in spec.split(","):
        lo, dash, hi = part.strip().partition("-")
        try:
            first, last = int(lo), int(hi) if dash else int(lo)
        except ValueError:
            raise SystemExit(f"'{spec}': want CPU numbers such as 0 or 0,2 or 0-3") from None
        if first < 0 or last < first:
            raise SystemExit(f"'{spec}': '{part}' is no CPU range")
        cpus.update(range(first, last + 1))
    return sorted(cpus)


def add_cpu_options(p):
    """--server_cpus and --client_cpus (parse_cpus reads them), here and in
    bench/transport.py."""
    p.add_argument("--server_cpus", default="",
                   help="run every server on these CPUs only (e.g. 0, or 0-3; Linux): with "
                        "--client_cpus, server and client stop taking each other's cores, "
                        "which on a 2-core machine is most of the round-to-round spread")
    p.add_argument("--client_cpus", default="",
                   help="run metalserve-bench on these CPUs only (e.g. 1)")


def check_cpus(flag, cpus):
    """Exits naming `flag` when `cpus` (parse_cpus's list; None: unpinned)
    cannot be pinned to here."""
    if cpus is None:
        return
    if not hasattr(os, "sched_setaffinity"):
        raise SystemExit(f"{flag}: this system cannot pin a process to CPUs")
    if not set(cpus) <= os.sched_getaffinity(0):
        raise SystemExit(f"{flag}={','.join(map(str, cpus))}: not all of them are "
                         f"available here ({sorted(os.sched_getaffinity(0))})")


def pin(cpus):
    """A preexec_fn that runs the child on `cpus` only (None: anywhere)."""
    if cpus is None:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


def echo(cmd, cpus=None):
    """Prints the command line as a shell would run it (pinned: with taskset)."""
    print("+ " + ("taskset -c " + ",".join(map(str, cpus)) + " " if cpus else "")
          + " ".join(cmd), file=sys.stderr, flush=True)


def run(cmd, cpus=None, **kw):
    echo(cmd, cpus)
    return subprocess.run(cmd, check=True, text=True, capture_output=True,
                          preexec_fn=pin(cpus), **kw).stdout


def raw_forward(a, level, batches=None, gap_us=0):
    """Runtime throughput and batch latency per batch size (of --batches, or
    `batches`); with gap_us > 0 each forward follows that long an idle gap
    (runtime_bench --gap_us)."""
    out = run([os.path.join(a.build, "bench/runtime/runtime_bench"),
               f"--device={a.device}", f"--threads={a.threads}", f"--models={a.model}",
               f"--levels={level}", f"--batches={batches or a.batches}",
               f"--precision={a.precision}", f"--channels_last={int(a.channels_last)}",
               f"--gap_us={gap_us}",
               f"--benchmark_min_time={a.raw_min_time}", "--benchmark_format=json"])
    rows = {}
    for b in json.loads(out)["benchmarks"]:
        if b.get("error_occurred"):
            raise SystemExit(f"raw forward failed: {b.get('error_message')}")
        batch = int(b["name"].split("/")[3])
        rows[batch] = {"items_per_s": b["items_per_second"],
                       "batch_ms": b["real_time"], "label": b.get("label", "")}
    return rows


class Server:
    """build/metalserve on a free loopback port, metrics dumped to a file."""

    def __init__(self, a, max_batch, allowed, tag, port=0, extra=(), binary=None):
        self.port = port or free_port()
        self.dump = os.path.join(a.workdir, f"metrics-{tag}.prom")
        self.log = open(os.path.join(a.workdir, f"server-{tag}.log"), "w")
        cmd = [binary or os.path.join(a.build, "metalserve"), f"--model={a.model_path}",
               f"--address=127.0.0.1:{self.port}", "--metrics_address=", "--http_address=",
               f"--metrics_dump={self.dump}", f"--device={a.device}",
               f"--threads={a.threads}", f"--precision={a.precision}",
               f"--optimize={a.optimize}", f"--max_batch_size={max_batch}",
               f"--max_queue_delay={a.max_queue_delay}",
               f"--max_queue_size={max(1024, 4 * max(a.sweep_levels))}",
               f"--executors={a.executors}", f"--device_concurrency={a.device_concurrency}",
               "--monitor_log_interval=0"] + a.server_args
        cmd += list(extra)  # later flags win: a policy's --max_queue_delay
        if a.channels_last:
            cmd.append("--channels_last")
        if allowed:
            cmd.append(f"--allowed_batch_sizes={allowed}")
        cpus = getattr(a, "server_cpu_list", None)
        echo(cmd, cpus)
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     preexec_fn=pin(cpus))
        self.target = f"127.0.0.1:{self.port}"
        self.optimization = "?"
        deadline = time.time() + a.start_timeout
        logpath = self.log.name
        while time.time() < deadline:
            text = open(logpath).read()
            m = re.search(r"optimize=(\w+): ", text)
            if m:
                self.optimization = m.group(1)
            if "ready: gRPC" in text:
                return
            if self.proc.poll() is not None:
                raise SystemExit(f"server exited:\n{text[-3000:]}")
            time.sleep(0.2)
        self.stop()
        raise SystemExit("server did not become ready")

    def metrics(self):
        """Scrapes the in-process registry through SIGUSR1 + --metrics_dump."""
        before = os.path.getmtime(self.dump) if os.path.exists(self.dump) else 0
        self.proc.send_signal(signal.SIGUSR1)
        for _ in range(200):
            if os.path.exists(self.dump) and os.path.getmtime(self.dump) != before:
                break
            time.sleep(0.02)
        vals = {}
        for line in open(self.dump):
            if line.startswith("#") or not line.strip():
                continue
            name, _, v = line.rpartition(" ")
            vals[name] = float(v)
        return vals

    def cpu_seconds(self):
        """The server's user + system CPU time so far, from /proc (None where
        there is none, e.g. macOS)."""
        try:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return None

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def batch_counts(m):
    """Rows, batches and padding rows, summed over the model versions (the
    batch families carry model and version labels)."""
    def total(name):
        return sum(v for k, v in m.items() if k == name or k.startswith(name + "{"))
    return (total("metalserve_batch_size_rows_sum"),
            total("metalserve_batch_size_rows_count"),
            total("metalserve_batch_padding_rows_total"))


def answered(m):
    """Requests the server answered OK, every method and model."""
    return sum(v for k, v in m.items()
               if k.startswith("metalserve_requests_total{") and 'code="OK"' in k)


def cpu_per_request_us(cpu0, cpu1, m0, m1):
    """Server CPU microseconds per request answered between two scrapes
    (warm-up included on both sides); None without /proc or requests."""
    n = answered(m1) - answered(m0)
    if cpu0 is None or cpu1 is None or n <= 0:
        return None
    return (cpu1 - cpu0) * 1e6 / n


def sweep(a, server, levels):
    results = []
    for c in levels:
        m0_all = server.metrics()
        cpu0 = server.cpu_seconds()
        m0 = batch_counts(m0_all)
        out = run([os.path.join(a.build, "metalserve-bench"), f"--target={server.target}",
                   f"--concurrency={c}", f"--duration={a.duration}s",
                   f"--warmup={a.warmup}s", f"--input={a.input}", "--output=json",
                   "--progress=off"] + a.bench_args, cpus=getattr(a, "client_cpu_list", None))
        r = json.loads(out)["runs"][0]
        cpu1 = server.cpu_seconds()
        m1_all = server.metrics()
        m1 = batch_counts(m1_all)
        rows, n, pad = (x1 - x0 for x0, x1 in zip(m0, m1))
        r["realised_batch_rows_mean"] = rows / n if n else 0.0
        r["padding_share"] = pad / (rows + pad) if rows + pad else 0.0
        r["server_cpu_us_per_request"] = cpu_per_request_us(cpu0, cpu1, m0_all, m1_all)
        results.append(r)
        cpu = r["server_cpu_us_per_request"]
        print(f"  c={c:<4} {r['requests_per_s']:9.1f} req/s  p50 {r['latency_us']['p50']/1e3:8.2f} ms"
              f"  p99 {r['latency_us']['p99']/1e3:8.2f} ms  batch {r['realised_batch_rows_mean']:.2f}"
              f"  pad {100*r['padding_share']:.1f}%  err {r['error_rate']:.4f}"
              + (f"  server cpu {cpu:.1f} us/req" if cpu is not None else ""), file=sys.stderr)
    return results


def level_warnings(r, what):
    """Why one metalserve-bench level is too small or noisy to compare."""
    w = []
    if r["ok"] < MIN_REQUESTS:
        w.append(f"{what}: only {r['ok']} requests (< {MIN_REQUESTS})")
    if r["elapsed_s"] < MIN_DURATION_S:
        w.append(f"{what}: measured {r['elapsed_s']:.1f} s (< {MIN_DURATION_S:g} s)")
    if r["error_rate"] > 0:
        w.append(f"{what}: error rate {r['error_rate']:.4f}")
    return w


def ratio_warnings(s, served_best, unbatched_best, serial):
    """{ratio: [warning, ...]} for the summary's ratios; a ratio missing from
    the dict has nothing against it. Pure: tested by tests/client/bench_run_test.py."""
    served = level_warnings(served_best, f"batched c={served_best['concurrency']}")
    unbatched = level_warnings(unbatched_best,
                               f"unbatched c={unbatched_best['concurrency']}")
    serial_w = level_warnings(serial, "serial c=1")
    out = {"served_over_raw_best": list(served),
           "batching_gain": served + unbatched,
           "p50_overhead_ms": list(serial_w), "p99_overhead_ms": list(serial_w)}
    if s["served_over_raw_best"] > 1.05:
        out["served_over_raw_best"].append(
            "served above raw: the raw measurement is too short or noisy "
            "(raise --raw_min_time)")
    if s["batching_gain"] < 1 and (served or unbatched):
        out["batching_gain"].append(
            "gain below 1 from too few requests: noise, not a finding "
            "(raise --duration)")
    for key in ("p50_overhead_ms", "p99_overhead_ms"):
        if not s[key] >= 0:  # negative or NaN
            out[key].append(
                f"{s[key]:.3f} ms: a served call cannot beat the raw forward; the "
                "runs are too short or noisy (raise --duration and --raw_min_time)")
    return {k: v for k, v in out.items() if v}


def warned(summary, key):
    """'  WARNING: ...' for the ratio `key`, or ''."""
    w = summary.get("warnings", {}).get(key)
    return f"   WARNING: {'; '.join(w)}" if w else ""


def transport_args(a, concurrency):
    """bench/transport.py's options for this run: its own defaults (so that
    every option its payload_rows reads is there), then this run's build,
    model, load and server flags, unbatched."""
    import transport  # bench/transport.py
    t = transport.parser().parse_args([])
    t.build, t.servers, t.model, t.concurrency = a.build, "echo,null,model", a.model_path, concurrency
    t.duration, t.input, t.max_batch_size = a.duration, a.input, 1
    t.max_queue_delay, t.threads = a.max_queue_delay, a.threads
    t.server_cpus, t.client_cpus = a.server_cpus, a.client_cpus
    t.server_args = [f"--device={a.device}", f"--precision={a.precision}",
                     f"--optimize={a.optimize}"] + (["--channels_last"] if a.channels_last else [])
    return t


def transport_floor(a):
    """bench/transport.py's rows for this model's payload: the echo floor, the
    null runner and the model, over TCP and a Unix socket, at the sweep's
    highest concurrency, unbatched: server CPU per request against gRPC's own.
    When that concurrency is not 1, also the echo floor and the null runner at
    concurrency 1 (their p50 is the latency floor the c=1 overhead is read
    against; see floor_overhead)."""
    import transport  # bench/transport.py
    top = max(a.sweep_levels)
    t = transport_args(a, top)
    sig = os.path.splitext(a.model_path)[0] + ".json"
    rows = transport.payload_rows(t, sig, a.workdir)
    for r in rows:
        r["concurrency"] = top
    if top != 1:
        t.concurrency, t.servers = 1, "echo,null"
        c1 = transport.payload_rows(t, sig, a.workdir)
        for r in c1:
            r["concurrency"] = 1
        rows += c1
    transport.summary([r for r in rows if r["concurrency"] == top])
    return rows


# Issue 20's goal for concurrency 1: the served p50 above the raw batch-1
# forward is at most the transport floor's p50 (the echo server's, same
# payload and client, TCP) plus this.
C1_SERVICE_BUDGET_MS = 0.15


def floor_overhead(s, transport_rows):
    """{c1_floor_p50_ms, p50_overhead_over_floor_ms, c1_null_p50_ms} from the
    echo and null runner's TCP rows at concurrency 1, or {} without them.
    Pure: tested by tests/client/bench_run_test.py."""
    by = {r["server"]: r for r in transport_rows or []
          if r.get("concurrency") == 1 and r["transport"] == "tcp"}
    if "echo" not in by:
        return {}
    out = {"c1_floor_p50_ms": by["echo"]["p50_ms"],
           "p50_overhead_over_floor_ms": s["p50_overhead_ms"] - by["echo"]["p50_ms"]}
    if "null" in by:
        out["c1_null_p50_ms"] = by["null"]["p50_ms"]
    return out


def host_info(a):
    info = {"host": socket.gethostname(), "cpus": os.cpu_count(),
            "date": datetime.datetime.now().isoformat(timespec="seconds")}
    for key in ("server_cpu_list", "client_cpu_list"):
        if getattr(a, key, None) is not None:
            info[key.replace("_list", "s")] = getattr(a, key)
    try:
        info["cpu_model"] = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                                 if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    if a.device.startswith("cuda"):
        try:
            info["gpu"] = run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                               "--format=csv,noheader"]).strip()
        except (OSError, subprocess.CalledProcessError):
            pass
    return info


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--model", default="mobilenet_v3_small")
    p.add_argument("--models_dir", default="")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    p.add_argument("--precision", default="fp32")
    p.add_argument("--channels_last", action="store_true")
    p.add_argument("--optimize", default="freeze",
                   help="graph level for both raw and served (verified at load)")
    p.add_argument("--batches", default="1,2,4,8,16", help="raw batch sizes")
    p.add_argument("--sweep", default="1,2,4,8,16,32", help="client concurrency levels")
    p.add_argument("--max_batch_size", type=int, default=16)
    p.add_argument("--allowed_batch_sizes", default="",
                   help="padding sizes for the batching server (default: none)")
    p.add_argument("--max_queue_delay", default="2ms")
    p.add_argument("--executors", type=int, default=0,
                   help="the servers' --executors; default 0, the server's own default "
                        "(4 executors and device slots for a model on CUDA, 2 elsewhere)")
    p.add_argument("--device_concurrency", type=int, default=2,
                   help="the servers' --device_concurrency (the server's default; "
                        "--executors=0 overrides it on CUDA)")
    p.add_argument("--duration", type=float, default=5)
    p.add_argument("--warmup", type=float, default=1)
    p.add_argument("--raw_min_time", type=float, default=2)
    p.add_argument("--raw_gap_us", type=int, default=0,
                   help="also time the raw batch-1 forward after this many microseconds "
                        "idle before each one (runtime_bench --gap_us), as a served call "
                        "at concurrency 1 finds the device, and read the c=1 p50 over it")
    p.add_argument("--input", default="random")
    p.add_argument("--bench_args", default="", help="extra metalserve-bench flags")
    p.add_argument("--server_args", default="",
                   help="extra metalserve flags for every served run (e.g. --cuda_sync=block)")
    p.add_argument("--start_timeout", type=float, default=300)
    p.add_argument("--tag", default="")
    p.add_argument("--policies", default="",
                   help="compare batching policies instead (e.g. " + policies.DEFAULT +
                        "); see bench/policies.py")
    p.add_argument("--rates", default="",
                   help="with --policies: open-loop Poisson rates (requests/s) instead of "
                        "--sweep concurrency levels")
    p.add_argument("--rounds", type=int, default=1,
                   help="with --policies: measure every policy this many times, the "
                        "policies interleaved round by round, and report each level's "
                        "median round (a shared machine's load drifts over minutes)")
    p.add_argument("--port", type=int, default=0,
                   help="base port on 127.0.0.1: the batched server listens on PORT, "
                        "the unbatched one on PORT+1 (default 0: free ports)")
    p.add_argument("--out", default="",
                   help="folder for the results (default BUILD/bench-results; "
                        "bench/results is the repository's record, only on request)")
    p.add_argument("--transport", action="store_true",
                   help="also measure the transport floor (bench/transport.py) for this payload")
    add_cpu_options(p)
    p.add_argument("--host_label", default=socket.gethostname(),
                   help="names the host in the JSON and its file name (default: hostname)")
    a = p.parse_args()
    if not 0 <= a.port <= 65534:
        raise SystemExit(f"--port={a.port}: want 1..65534, or 0 for free ports")
    a.out = a.out or os.path.join(a.build, "bench-results")
    a.bench_args = a.bench_args.split()
    a.server_args = a.server_args.split()
    a.sweep_levels = [int(x) for x in a.sweep.split(",")]
    a.server_cpu_list = parse_cpus(a.server_cpus)
    a.client_cpu_list = parse_cpus(a.client_cpus)
    check_cpus("--server_cpus", a.server_cpu_list)
    check_cpus("--client_cpus", a.client_cpu_list)
    models_dir = a.models_dir or os.path.join(a.build, "models")
    a.model_path = os.path.join(models_dir, a.model + ".pt")
    os.makedirs(a.out, exist_ok=True)
    a.workdir = os.path.join(a.out, ".work")
    os.makedirs(a.workdir, exist_ok=True)
    command = " ".join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])
    if a.policies:
        policies.compare(a, Server, sweep, host_info, command, run)
        return

    print(f"[1/4] server with batching (max_batch_size={a.max_batch_size})", file=sys.stderr)
    s = Server(a, a.max_batch_size, a.allowed_batch_sizes, "batched", a.port)
    try:
        batched = sweep(a, s, a.sweep_levels)
    finally:
        s.stop()
    level = s.optimization
    print(f"[2/4] server with max_batch_size=1", file=sys.stderr)
    s = Server(a, 1, "", "unbatched", a.port + 1 if a.port else 0)
    try:
        unbatched = sweep(a, s, a.sweep_levels)
        serial = sweep(a, s, [1])[0]
    finally:
        s.stop()
    print(f"[3/4] raw forward through the runtime (level {level})", file=sys.stderr)
    raw = raw_forward(a, level)
    raw1_gap = raw_forward(a, level, "1", a.raw_gap_us)[1] if a.raw_gap_us > 0 else None
    transport_rows = transport_floor(a) if a.transport else None

    best_b, best = max(raw.items(), key=lambda kv: kv[1]["items_per_s"])
    served_best = max(batched, key=lambda r: r["rows_per_s"])
    unbatched_best = max(unbatched, key=lambda r: r["rows_per_s"])
    raw1_ms = raw[1]["batch_ms"] if 1 in raw else float("nan")
    summary = {
        "raw_best_batch": best_b,
        "raw_best_items_per_s": best["items_per_s"],
        "served_best_rows_per_s": served_best["rows_per_s"],
        "served_best_concurrency": served_best["concurrency"],
        "served_over_raw_best": served_best["rows_per_s"] / best["items_per_s"],
        "unbatched_best_rows_per_s": unbatched_best["rows_per_s"],
        "batching_gain": served_best["rows_per_s"] / unbatched_best["rows_per_s"],
        "raw_batch1_ms": raw1_ms,
        "serial_p50_ms": serial["latency_us"]["p50"] / 1e3,
        "serial_p99_ms": serial["latency_us"]["p99"] / 1e3,
        "p50_overhead_ms": serial["latency_us"]["p50"] / 1e3 - raw1_ms,
        "p99_overhead_ms": serial["latency_us"]["p99"] / 1e3 - raw1_ms,
    }
    if raw1_gap is not None:
        summary["raw_gap_us"] = a.raw_gap_us
        summary["raw_batch1_after_gap_ms"] = raw1_gap["batch_ms"]
        summary["p50_overhead_after_gap_ms"] = (serial["latency_us"]["p50"] / 1e3
                                                - raw1_gap["batch_ms"])
    same_c = {r["concurrency"]: r for r in unbatched}
    for r in batched:
        u = same_c.get(r["concurrency"])
        if u:
            r["gain_vs_unbatched"] = r["rows_per_s"] / u["rows_per_s"]
    summary.update(floor_overhead(summary, transport_rows))
    summary["warnings"] = ratio_warnings(summary, served_best, unbatched_best, serial)
    if best_b in a.sweep_levels:
        summary[f"served_c{best_b}_over_raw_b{best_b}"] = (
            next(r for r in batched if r["concurrency"] == best_b)["rows_per_s"]
            / raw[best_b]["items_per_s"])

    result = {"command": command, "host_label": a.host_label,
              "machine": host_info(a), "model": a.model,
              "device": a.device, "precision": a.precision, "channels_last": a.channels_last,
              "optimization": level, "threads": a.threads,
              "max_batch_size": a.max_batch_size, "allowed_batch_sizes": a.allowed_batch_sizes,
              "max_queue_delay": a.max_queue_delay, "raw": raw, "batched": batched,
              "unbatched": unbatched, "serial": serial, "summary": summary,
              "transport": transport_rows}
    stem = f"{a.host_label}-{datetime.date.today().isoformat()}"
    stem += f"-{a.model}" + (f"-{a.tag}" if a.tag else "")
    path = os.path.join(a.out, stem + ".json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(f"[4/4] wrote {path}", file=sys.stderr)
    print_table(result)
    try:
        import plot  # bench/plot.py, needs matplotlib
        plot.plot(path)
    except ImportError as e:
        print(f"(no plot: {e}; run bench/plot.py {path} where matplotlib is installed)")


def print_table(r):
    s = r["summary"]
    print(f"\n{r['model']} on {r['device']} ({r['precision']}, optimize={r['optimization']}, "
          f"{r['threads']} threads), {r['machine']['date']}, {r['machine'].get('gpu', r['machine'].get('cpu_model', ''))}")
    print(f"command: {r['command']}")
    print("raw forward:  " + "  ".join(f"b{b}: {v['items_per_s']:.0f}/s ({v['batch_ms']:.2f} ms)"
                                        for b, v in sorted(r["raw"].items(), key=lambda kv: int(kv[0]))))
    print(f"{'conc':>5} {'batched rows/s':>15} {'p50 ms':>8} {'p99 ms':>8} {'batch':>6} {'pad%':>5}"
          f" {'unbatched rows/s':>17} {'p99 ms':>8} {'gain':>6}")
    for b, u in zip(r["batched"], r["unbatched"]):
        print(f"{b['concurrency']:>5} {b['rows_per_s']:>15.1f} {b['latency_us']['p50']/1e3:>8.2f}"
              f" {b['latency_us']['p99']/1e3:>8.2f} {b['realised_batch_rows_mean']:>6.2f}"
              f" {100*b['padding_share']:>5.1f} {u['rows_per_s']:>17.1f} {u['latency_us']['p99']/1e3:>8.2f}"
              f" {b.get('gain_vs_unbatched', 0):>6.2f}")
    print(f"served / raw best batch ({s['raw_best_batch']}): {s['served_over_raw_best']:.2f}"
          + warned(s, "served_over_raw_best"))
    print(f"batching gain: {s['batching_gain']:.2f}x" + warned(s, "batching_gain"))
    for k, v in s.items():
        if k.startswith("served_c"):
            print(f"{k}: {v:.2f}")
    print(f"concurrency 1, batch 1: served p50 {s['serial_p50_ms']:.3f} ms, p99 {s['serial_p99_ms']:.3f} ms;"
          f" raw {s['raw_batch1_ms']:.3f} ms")
    for q in ("p50", "p99"):
        print(f"overhead {q}: {s[q + '_overhead_ms']:.3f} ms" + warned(s, q + "_overhead_ms"))
    if "raw_batch1_after_gap_ms" in s:
        print(f"raw batch 1 after {s['raw_gap_us']} us idle: {s['raw_batch1_after_gap_ms']:.3f} ms;"
              f" served p50 over it: {s['p50_overhead_after_gap_ms']:.3f} ms")
    if "c1_floor_p50_ms" in s:
        over = s["p50_overhead_over_floor_ms"]
        print(f"c=1 p50 overhead {s['p50_overhead_ms']:.3f} ms = transport floor (echo, TCP) "
              f"{s['c1_floor_p50_ms']:.3f} ms + {over:.3f} ms "
              f"({'within' if over <= C1_SERVICE_BUDGET_MS else 'above'} the "
              f"{C1_SERVICE_BUDGET_MS} ms goal); null runner c=1 p50 "
              f"{s.get('c1_null_p50_ms', float('nan')):.3f} ms")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import policies  # bench/policies.py
    main()
