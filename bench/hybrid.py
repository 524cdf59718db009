#!/usr/bin/python3
"""Hybrid serving against either device alone, in one run: for each model,
build/metalserve started three ways (--device=ACCEL, --device=cpu,
--devices=ACCEL,cpu), one after the other with the same flags otherwise,
and build/metalserve-bench run against each at every concurrency level
(default 1, 16, 256; closed loop, one image or row per request).

    bench/hybrid.py [--build build] [--models_dir BUILD/models]
        [--models tiny_cnn,lstm_small,mobilenet_v3_small,resnet50]
        [--accel cuda] [--modes accel,cpu,hybrid] [--levels 1,16,256]
        [--duration 3] [--warmup 1] [--threads N] [--max_batch_size 64]
        [--allowed_batch_sizes 1,8,32,64] [--connections 8]
        [--hybrid_starts level] [--host_label vm] [--tag T]
        [--out build/bench-results]
    bench/hybrid.py --from_json F.json [--plot F.png]    # table (and plot) again
    bench/hybrid.py --from_log LOG --host_label h200 --out bench/results
        # a log in .devtools/h200-s5c.sh's format, into the same JSON

The batches each device of the hybrid ran come from the server's shutdown
log line ("hybrid: batches run per device: cuda:0=N cpu=M"); no metric
carries them yet. With --hybrid_starts=level (the default) the hybrid
server is started afresh for each concurrency level, so each level has its
own split (the client's warm-up seconds included); with once, one server
serves every level and the split covers them all.

--accel=cpu on a machine without an accelerator: a stand-in. The hybrid is
then --devices=first_available,cpu, which resolves to two CPU runners, each
with its own device thread (sharing LibTorch's one intra-op pool); the
accelerator-alone run would repeat the CPU run and is skipped. A model
whose .pt is missing from --models_dir is skipped with the command that
exports it (resnet50 is exported only when named).

Writes <out>/<host_label>-<date>-hybrid[-tag].json (the command, host, torch
version, flags, every level's metalserve-bench figures per mode, the
hybrid's batches per device, and per level the hybrid's throughput and p99
against the better device alone), prints the table and, where matplotlib is
installed, writes the PNG beside it (throughput and p99 against
concurrency, one line per mode, one column per model). Standard library
only otherwise (the GPU host has no extra packages).
"""
import argparse
import datetime
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "testing"))
from proc_util import Process, free_port, tail, wait_for  # noqa: E402

DEFAULT_MODELS = "tiny_cnn,lstm_small,mobilenet_v3_small,resnet50"
MODES = ("accel", "cpu", "hybrid")
_RUNTIME = re.compile(r"runtime: device (\S+) \(requested [^)]*\), LibTorch (\S+),")
_HYBRID_ON = re.compile(r"hybrid: \S+ on (\S+), outputs agree")
_SPLIT = re.compile(r"hybrid: batches run per device: (.*)$", re.M)


def mode_flags(a, mode):
    """The server flags that make `mode` (None: skipped, with why)."""
    stand_in = a.accel == "cpu"
    if mode == "accel":
        if stand_in:
            return None, "--accel=cpu: the accelerator-alone run would repeat the CPU run"
        return [f"--device={a.accel}"], ""
    if mode == "cpu":
        return ["--device=cpu"], ""
    first = "first_available" if stand_in else a.accel
    return [f"--devices={first},cpu"], ""


def parse_split(text):
    """[(device, batches)] from the hybrid's shutdown line, in its order
    (the accelerator first), or [] when the line is missing."""
    m = _SPLIT.findall(text)
    if not m:
        return []
    out = []
    for part in m[-1].split():
        device, _, n = part.rpartition("=")
        out.append((device, int(n)))
    return out


def split_fields(pairs):
    """The JSON fields for a hybrid split: the list, and by position."""
    if not pairs:
        return {}
    return {"batches_per_device": [{"device": d, "batches": n} for d, n in pairs],
            "batches_accel": pairs[0][1], "batches_cpu": pairs[-1][1]}


_DEVICE_SAMPLE = re.compile(
    r'^metalserve_device_(batches_total|batch_rows_total|busy_seconds_total)'
    r'\{([^}]*)\}\s+(\S+)$', re.M)
_DEVICE_FIELD = {"batches_total": "batches", "batch_rows_total": "rows",
                 "busy_seconds_total": "busy_s"}


def parse_device_metrics(text):
    """{device: {"batches", "rows", "busy_s"}} of a /metrics scrape's
    metalserve_device_* counters, summed over models and versions."""
    out = {}
    for family, labels, value in _DEVICE_SAMPLE.findall(text):
        m = re.search(r'device="([^"]*)"', labels)
        if not m:
            continue
        d = out.setdefault(m.group(1), {"batches": 0, "rows": 0, "busy_s": 0.0})
        field = _DEVICE_FIELD[family]
        d[field] += float(value) if field == "busy_s" else int(float(value))
    return out


class Server:
    """build/metalserve on free loopback ports, its log in `log`."""

    def __init__(self, a, model_path, flags, log):
        self.port, self.http_port, self.log = free_port(), free_port(), log
        self.metrics_port = free_port()
        argv = [os.path.join(a.build, "metalserve"), f"--model={model_path}",
                f"--address=127.0.0.1:{self.port}",
                f"--http_address=127.0.0.1:{self.http_port}",
                f"--metrics_address=127.0.0.1:{self.metrics_port}",
                f"--threads={a.threads}", f"--max_batch_size={a.max_batch_size}",
                f"--executors={a.executors}", f"--device_concurrency={a.device_concurrency}",
                f"--max_queue_size={max(1024, 4 * max(a.level_list))}",
                "--monitor_log_interval=0"]
        if a.allowed_batch_sizes:
            argv.append(f"--allowed_batch_sizes={a.allowed_batch_sizes}")
        argv += flags + a.server_args.split()
        print("+ " + " ".join(argv), file=sys.stderr, flush=True)
        self.argv = argv
        self.proc = Process(argv, log_path=log)

        def ready():
            text = open(log, errors="replace").read()
            if "ready: gRPC" in text:
                return text
            if not self.proc.alive():
                raise AssertionError(f"server exited ({self.proc.returncode}):\n{tail(log)}")
            return None
        try:
            text = wait_for("metalserve ready", ready, time.monotonic() + a.start_timeout,
                            interval=0.2)
        except BaseException:
            self.proc.stop()
            raise
        m = _RUNTIME.search(text)
        self.device, self.torch_version = (m.group(1), m.group(2)) if m else ("?", "?")
        m = _HYBRID_ON.search(text)
        if m:
            self.device = m.group(1)

    def device_choice(self, model):
        """The REST metadata's device_choice (warm-up timings per device)."""
        url = f"http://127.0.0.1:{self.http_port}/v2/models/{model}"
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return json.loads(r.read()).get("device_choice")
        except (OSError, ValueError) as e:
            return {"error": str(e)}

    def device_metrics(self):
        """{device: {"batches", "rows", "busy_s"}} from the server's
        metalserve_device_* counters (every batch of its one model so far);
        {} when /metrics cannot be read."""
        try:
            url = f"http://127.0.0.1:{self.metrics_port}/metrics"
            with urllib.request.urlopen(url, timeout=10) as r:
                return parse_device_metrics(r.read().decode())
        except (OSError, http.client.HTTPException, ValueError):
            return {}

    def stop(self):
        """Stops it; returns the log's text (the hybrid's split is in it)."""
        rc = self.proc.stop(grace=60)
        if rc not in (0, None):
            print(f"  (server exited {rc})", file=sys.stderr)
        return open(self.log, errors="replace").read()


def bench(a, server, level):
    cmd = [os.path.join(a.build, "metalserve-bench"), f"--target=127.0.0.1:{server.port}",
           f"--concurrency={level}", f"--duration={a.duration}s", f"--warmup={a.warmup}s",
           f"--connections={a.connections}", "--input=random", "--output=json",
           "--progress=off"] + a.bench_args.split()
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True,
                       timeout=a.start_timeout + 4 * (a.duration + a.warmup) + 60)
    if p.returncode != 0:
        raise SystemExit(f"metalserve-bench failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(p.stdout)["runs"][0]


def show_level(model, mode, r):
    extra = f"  batches {r['batches_accel']}/{r['batches_cpu']}" if "batches_accel" in r else ""
    print(f"  {model} {mode:6s} c={r['concurrency']:<4} {r['requests_per_s']:9.1f} req/s"
          f"  p50 {r['latency_us']['p50'] / 1e3:8.3f} ms"
          f"  p99 {r['latency_us']['p99'] / 1e3:8.3f} ms"
          f"  err {r.get('error_rate', 0):.4f}{extra}", file=sys.stderr, flush=True)


def run_mode(a, model, model_path, mode, flags, logs):
    """One mode of one model: its levels, device, torch version."""
    per_level = mode == "hybrid" and a.hybrid_starts == "level"
    out = {"flags": " ".join(flags), "levels": []}
    groups = [[c] for c in a.level_list] if per_level else [a.level_list]
    for group in groups:
        log = os.path.join(logs, f"{model}-{mode}-{group[0]}.log")
        s = Server(a, model_path, flags, log)
        try:
            out["device"], out["torch_version"] = s.device, s.torch_version
            if "device_choice" not in out:
                out["device_choice"] = s.device_choice(model)
            rows = []
            for c in group:
                rows.append(bench(a, s, c))
                if not per_level:
                    show_level(model, mode, rows[-1])
            device_metrics = s.device_metrics()
        finally:
            text = s.stop()
        split = split_fields(parse_split(text)) if mode == "hybrid" else {}
        if per_level:
            rows[0].update(split)
            rows[0]["device_metrics"] = device_metrics
            show_level(model, mode, rows[0])
        else:
            out.update(split)
            out["device_metrics"] = device_metrics
            if split:
                out["batches_cover"] = "every level and its warm-up, one server"
        out["levels"] += rows
    return out


def summarize(models):
    """Per model and level: the hybrid against the better device alone
    (levels matched by concurrency; a mode that failed has none)."""
    summary = {}
    for model, m in models.items():
        modes = m.get("modes", {})
        if not modes.get("hybrid", {}).get("levels"):
            continue
        rows = []
        for h in modes["hybrid"]["levels"]:
            row = {"concurrency": h["concurrency"], "hybrid_requests_per_s": h["requests_per_s"],
                   "hybrid_p99_us": h["latency_us"]["p99"]}
            best = None
            for k in ("accel", "cpu"):
                same = [r for r in modes.get(k, {}).get("levels", [])
                        if r["concurrency"] == h["concurrency"]]
                if not same:
                    continue
                r = same[0]
                row[f"{k}_requests_per_s"] = r["requests_per_s"]
                row[f"hybrid_over_{k}"] = round(h["requests_per_s"] / r["requests_per_s"], 3)
                if best is None or r["requests_per_s"] > best[1]["requests_per_s"]:
                    best = (k, r)
            if best:
                row["best_alone"] = best[0]
                row["hybrid_over_best_alone"] = round(
                    h["requests_per_s"] / best[1]["requests_per_s"], 3)
                row["hybrid_p99_over_best_alone"] = round(
                    h["latency_us"]["p99"] / best[1]["latency_us"]["p99"], 3)
            rows.append(row)
        summary[model] = rows
    return summary


def host_info(a):
    info = {"host": socket.gethostname(), "cpus": os.cpu_count()}
    try:
        info["cpu_model"] = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                                 if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    if a.accel.startswith("cuda"):
        try:
            info["gpu"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                 "--format=csv,noheader"], capture_output=True, text=True,
                timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return info


def measure(a):
    date = datetime.date.today().isoformat()
    models_dir = a.models_dir or os.path.join(a.build, "models")
    a.level_list = [int(x) for x in a.levels.split(",")]
    result = {"command": " ".join(["bench/hybrid.py", *sys.argv[1:]]),
              "host_label": a.host_label, "date": date,
              "started": datetime.datetime.now().isoformat(timespec="seconds"),
              "machine": host_info(a), "accel": a.accel, "stand_in": a.accel == "cpu",
              "levels": a.level_list, "duration_s": a.duration, "warmup_s": a.warmup,
              "threads": a.threads, "max_batch_size": a.max_batch_size,
              "allowed_batch_sizes": a.allowed_batch_sizes, "executors": a.executors,
              "device_concurrency": a.device_concurrency, "connections": a.connections,
              "hybrid_starts": a.hybrid_starts, "server_args": a.server_args,
              "bench_args": a.bench_args,
              "load_average_at_start": list(os.getloadavg()), "skipped": [], "models": {}}
    logs = tempfile.mkdtemp(prefix="metalserve_hybrid_")
    os.makedirs(a.out, exist_ok=True)
    name = f"{a.host_label}-{date}-hybrid{'-' + a.tag if a.tag else ''}.json"
    out = os.path.join(a.out, name)

    def save():  # after every model, so a run cut short keeps what it measured
        result["load_average_at_end"] = list(os.getloadavg())
        result["summary"] = summarize(result["models"])
        with open(out, "w") as f:
            json.dump(result, f, indent=1)

    for model in a.models.split(","):
        path = os.path.join(models_dir, model + ".pt")
        if not os.path.isfile(path):
            why = (f"{model}: {path} is missing (python3 models/export.py --out {models_dir}"
                   f" --only {model})")
            print("skipped " + why, file=sys.stderr)
            result["skipped"].append(why)
            continue
        modes = result["models"].setdefault(model, {"modes": {}})["modes"]
        for mode in a.modes.split(","):
            flags, why = mode_flags(a, mode)
            if flags is None:
                print(f"{model} {mode}: skipped: {why}", file=sys.stderr)
                result["skipped"].append(f"{model} {mode}: {why}")
                continue
            try:
                modes[mode] = run_mode(a, model, path, mode, flags, logs)
            except (AssertionError, SystemExit, subprocess.SubprocessError, ValueError) as e:
                # A mode that fails (a device refused, outputs that disagree,
                # a client error) is recorded and the others still run.
                print(f"{model} {mode}: FAILED: {e}", file=sys.stderr)
                modes[mode] = {"flags": " ".join(flags), "levels": [], "error": str(e)[-3000:]}
                continue
            result.setdefault("torch_version", modes[mode]["torch_version"])
        save()
    save()
    print(f"wrote {out}; server logs in {logs}", file=sys.stderr)
    return out, result


# --- a hand-run log (.devtools/h200-s5c.sh's format) ---------------------

_LOG_MODE = re.compile(r"== (\S+) (--devices?=\S+) ready rc=(\d+)")
_LOG_LEVEL = re.compile(r"c=(\d+) throughput ([\d.]+) req/s, ([\d.]+) rows/s latency us (.*)")


def from_log(path):
    """The log's figures in this script's JSON shape (no error counts or
    durations: the log printed none; the hybrid's split covers its whole
    run, every level and warm-up)."""
    text = open(path).read()
    header = text.splitlines()[0].lstrip("# ").strip()
    env = re.search(r"gpu-env: torch (\S+) (.*)", text)
    models, model, mode = {}, None, None
    for line in text.splitlines():
        m = _LOG_MODE.search(line)
        if m:
            model, flag = m.group(1), m.group(2)
            mode = ("hybrid" if flag.startswith("--devices=") else
                    "cpu" if flag == "--device=cpu" else "accel")
            models.setdefault(model, {"modes": {}})["modes"][mode] = {
                "flags": flag, "levels": []}
            continue
        m = _LOG_LEVEL.search(line)
        if m and model:
            words = m.group(4).split()
            lat = {k.replace(".", "_"): float(v) for k, v in zip(words[::2], words[1::2])}
            models[model]["modes"][mode]["levels"].append(
                {"concurrency": int(m.group(1)), "requests_per_s": float(m.group(2)),
                 "rows_per_s": float(m.group(3)), "latency_us": lat})
            continue
        pairs = parse_split(line)
        if pairs and model:
            models[model]["modes"]["hybrid"].update(split_fields(pairs))
            models[model]["modes"]["hybrid"]["batches_cover"] = (
                "every level and its warm-up, one server")
    date = re.search(r"(\d{4}-\d{2}-\d{2})", header)

    def flag(name, kind=str):
        m = re.search(r"--%s=([\w.,/]+)" % name, header)
        return kind(m.group(1).rstrip("s")) if m and kind is not str else m.group(1) if m else None
    cores = re.search(r"(\d+) cores", header)
    machine = {"gpu": env.group(2).split(",")[0] if env else "",
               "cpus": int(cores.group(1)) if cores else None}
    flags = {"threads": flag("threads", int), "max_batch_size": flag("max_batch_size", int),
             "allowed_batch_sizes": flag("allowed_batch_sizes"),
             "executors": flag("executors", int),
             "device_concurrency": flag("device_concurrency", int),
             "duration_s": flag("duration", float), "warmup_s": flag("warmup", float),
             "connections": flag("connections", int)}
    return {**flags, "source_log": os.path.relpath(path, ROOT), "made_by": header,
            "date": date.group(1) if date else "", "accel": "cuda", "stand_in": False,
            "torch_version": env.group(1) if env else "",
            "machine": machine,
            "levels": sorted({l["concurrency"] for m in models.values()
                              for x in m["modes"].values() for l in x["levels"]}),
            "models": models, "summary": summarize(models)}


# --- table and plot ---------------------------------------------------------

def print_table(r):
    print(f"\nhybrid against either device alone: {r.get('host_label', '')} {r['date']}, "
          f"accelerator {r['accel']}{' (CPU stand-in)' if r.get('stand_in') else ''}, "
          f"torch {r.get('torch_version', '?')}")
    print(f"command: {r['command']}")
    modes = [m for m in MODES if any(m in x["modes"] for x in r["models"].values())]
    head = "".join(f" {m + ' req/s':>13} {'p99 ms':>8}" for m in modes)
    print(f"{'model':20s} {'conc':>5}{head} {'batches a/cpu':>14} {'hyb/best':>8}")
    for model, m in r["models"].items():
        summary = {s["concurrency"]: s for s in r.get("summary", {}).get(model, [])}
        for i, c in enumerate(sorted({l["concurrency"] for x in m["modes"].values()
                                      for l in x["levels"]})):
            cells = ""
            for k in modes:
                lv = [l for l in m["modes"].get(k, {}).get("levels", []) if l["concurrency"] == c]
                cells += (f" {lv[0]['requests_per_s']:>13.1f}"
                          f" {lv[0]['latency_us']['p99'] / 1e3:>8.3f}"
                          if lv else f" {'-':>13} {'-':>8}")
            h = m["modes"].get("hybrid", {})
            hl = [l for l in h.get("levels", []) if l["concurrency"] == c]
            split = (hl[0] if hl and "batches_accel" in hl[0] else h if i == 0 else {})
            split = (f"{split['batches_accel']}/{split['batches_cpu']}"
                     if "batches_accel" in split else "")
            ratio = summary.get(c, {}).get("hybrid_over_best_alone")
            print(f"{model:20s} {c:>5}{cells} {split:>14} "
                  f"{'' if ratio is None else format(ratio, '.3f'):>8}")
    for model, m in r["models"].items():
        for mode, x in m["modes"].items():
            if x.get("error"):
                lines = x["error"].strip().splitlines()  # the server's error line, if any
                why = next((l for l in lines if l.startswith("E")), lines[0] if lines else "")
                print(f"FAILED: {model} {x['flags']}: {why}")
    for why in r.get("skipped", []):
        print(f"skipped: {why}")


def plot(r, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(r["models"])
    fig, axes = plt.subplots(2, len(models), figsize=(3.6 * len(models) + 1, 6.5),
                             squeeze=False)
    styles = {"accel": "o-", "cpu": "s--", "hybrid": "^-"}
    colors = {"accel": "C0", "cpu": "C1", "hybrid": "C2"}  # the same in every plot
    for j, model in enumerate(models):
        for mode, x in r["models"][model]["modes"].items():
            cs = [l["concurrency"] for l in x["levels"]]
            label = x["flags"].lstrip("-")
            axes[0][j].plot(cs, [l["requests_per_s"] for l in x["levels"]], styles[mode],
                            color=colors[mode], label=label)
            axes[1][j].plot(cs, [l["latency_us"]["p99"] / 1e3 for l in x["levels"]],
                            styles[mode], color=colors[mode], label=label)
        axes[0][j].set_title(model, fontsize=9)
        for i, what in enumerate(("throughput (req/s)", "p99 latency (ms)")):
            ax = axes[i][j]
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
            ax.set_xlabel("client concurrency", fontsize=8)
            if j == 0:
                ax.set_ylabel(what, fontsize=8)
            ax.tick_params(labelsize=7)
        axes[0][j].legend(fontsize=6)
    stand_in = " (CPU stand-in: first_available,cpu)" if r.get("stand_in") else ""
    fig.suptitle(f"hybrid vs either device alone, {r.get('host_label', '')} {r['date']}, "
                 f"accelerator {r['accel']}{stand_in}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default="build")
    p.add_argument("--models_dir", default="", help="the .pt files (default BUILD/models)")
    p.add_argument("--models", default=DEFAULT_MODELS)
    p.add_argument("--accel", default="cuda",
                   help="the accelerator: cuda, cuda:N, mps; cpu = a stand-in (above)")
    p.add_argument("--modes", default=",".join(MODES), help="any of accel,cpu,hybrid")
    p.add_argument("--levels", default="1,16,256", help="client concurrency levels")
    p.add_argument("--duration", type=float, default=3, help="seconds measured per level")
    p.add_argument("--warmup", type=float, default=1, help="client warm-up seconds per level")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 2,
                   help="server CPU intra-op threads")
    p.add_argument("--max_batch_size", type=int, default=64)
    p.add_argument("--allowed_batch_sizes", default="1,8,32,64",
                   help="padding sizes, also the warm-up sizes the picker's costs come from")
    p.add_argument("--executors", type=int, default=2)
    p.add_argument("--device_concurrency", type=int, default=2)
    p.add_argument("--connections", type=int, default=8, help="client gRPC channels")
    p.add_argument("--hybrid_starts", choices=["level", "once"], default="level",
                   help="a hybrid server per level (its own batch split) or one for all")
    p.add_argument("--server_args", default="", help="extra metalserve flags, every mode")
    p.add_argument("--bench_args", default="", help="extra metalserve-bench flags")
    p.add_argument("--start_timeout", type=float, default=600)
    p.add_argument("--host_label", default=socket.gethostname())
    p.add_argument("--tag", default="")
    p.add_argument("--out", default=os.path.join("build", "bench-results"))
    p.add_argument("--from_json", default="", help="print (and --plot) an earlier result")
    p.add_argument("--from_log", default="", help="convert a hand-run log (above)")
    p.add_argument("--plot", default="", help="the PNG (default: beside the JSON)")
    a = p.parse_args()
    if a.from_json:
        path, r = a.from_json, json.load(open(a.from_json))
    elif a.from_log:
        r = from_log(a.from_log)
        r = {"command": " ".join(["bench/hybrid.py", *sys.argv[1:]]),
             "host_label": a.host_label, **r}
        os.makedirs(a.out, exist_ok=True)
        path = os.path.join(a.out, f"{a.host_label}-{r['date']}-hybrid"
                                   f"{'-' + a.tag if a.tag else ''}.json")
        with open(path, "w") as f:
            json.dump(r, f, indent=1)
        print(f"wrote {path}")
    else:
        bad = [m for m in a.modes.split(",") if m not in MODES]
        if bad:
            raise SystemExit(f"--modes: {bad}; want any of {','.join(MODES)}")
        path, r = measure(a)
    print_table(r)
    try:
        plot(r, a.plot or os.path.splitext(path)[0] + ".png")
    except ImportError as e:
        print(f"(no plot: {e}; run bench/hybrid.py --from_json {path} where matplotlib is "
              "installed)")
    failed = [f"{model} {mode}" for model, m in r["models"].items()
              for mode, x in m.get("modes", {}).items() if x.get("error")]
    if failed:
        sys.exit(f"failed: {', '.join(failed)} (the rest is in {path})")


if __name__ == "__main__":
    main()
