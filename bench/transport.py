#!/usr/bin/env python3
"""The transport floor: server CPU per request and throughput of the same
client (metalserve-bench) against, for the same payload:

  echo   bench/transport/echo_server: gRPC alone (receives the request,
         answers a fixed response of the model's output size, parses nothing);
  echo_async  the same through gRPC's asynchronous API (completion queues
         polled by two threads of its own, echo_server --api=async); only
         when named in --servers: what the callback API that echo and
         metalserve use costs above it;
  null   metalserve --model=null:<signature.json>: the whole server (parse,
         validate, queue, batch, split, serialise) with no model work;
  model  metalserve with the real model (when --model is given);
  null_async, model_async  the same with --grpc_api=async
         --grpc_cq_threads=<--cq_threads>, only when named in --servers:
         compared with echo_async as null and model are with echo,

each over TCP loopback and over a Unix domain socket (one server listening on
both: --address=127.0.0.1:P,unix:///...). With --shared_memory, the metalserve
servers run with --shared_memory=unix and are measured a third way, "shm":
KServe ModelInfer over the socket with the inputs in a registered POSIX
shared-memory region (metalserve-bench --protocol=kserve
--shared_memory=system), so no tensor bytes cross gRPC; pass
--bench_arg=--protocol=kserve too to compare it with KServe over tcp and uds. Server CPU per request is the server
process's utime+stime from /proc/PID/stat over a timed metalserve-bench run,
divided by the requests it answered; so null - echo is the service's share
above gRPC, and model - null the runtime's (batch assembly, device copy,
forward, output copy).

  bench/transport.py                                  # identity [1,4] and 3x224x224
  bench/transport.py --payloads=build/models/resnet18.json --concurrency=64
  bench/transport.py --model=build/models/identity.pt --payloads=build/models/identity.json

Prints one table and writes it as JSON to --json when given. Linux only
(/proc). Only the standard library is needed.
"""
import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICKS = os.sysconf("SC_CLK_TCK")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import add_cpu_options, check_cpus, parse_cpus, pin  # noqa: E402  bench/run.py


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    """utime + stime of `pid`, seconds (fields 14 and 15 of /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


class Proc:
    """A server process started with `cmd`, ready when `ready` is in its log."""

    def __init__(self, cmd, log_path, ready, timeout=120, env=None, cpus=None):
        taskset = ["taskset", "-c", ",".join(map(str, cpus))] if cpus else []
        print("+ " + " ".join([f"{k}={v}" for k, v in (env or {}).items()] + taskset + cmd),
              file=sys.stderr, flush=True)
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})}, preexec_fn=pin(cpus))
        deadline = time.time() + timeout
        while time.time() < deadline:
            text = open(log_path).read()
            if ready in text:
                # What the kernel granted the Unix-socket buffers (metalserve's
                # start-up line), so a run shows whether a sysctl cap applied.
                granted = re.search(r"unix_socket_buffer=[^)]*\)?", text)
                if granted:
                    print(f"  {granted.group(0)}", file=sys.stderr, flush=True)
                return
            if self.proc.poll() is not None:
                raise SystemExit(f"{cmd[0]} exited:\n{text[-3000:]}")
            time.sleep(0.1)
        self.stop()
        raise SystemExit(f"{cmd[0]} did not become ready in {timeout} s")

    def stop(self):
        """SIGTERM, then SIGKILL after 60 s; returns the exit status (0 for a
        clean stop, negative for a signal)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        return self.proc.returncode


def server_env(a):
    """--server_env K=V pairs: the servers' environment on top of this one's
    (the client's stays as it is)."""
    return dict(kv.split("=", 1) for kv in a.server_env)


def addresses(workdir, tag):
    port = free_port()
    sock = os.path.join(workdir, f"{tag}.sock")
    return {"tcp": f"127.0.0.1:{port}", "uds": f"unix://{sock}"}


def start_echo(a, sig, workdir, tag, extra=()):
    addr = addresses(workdir, tag)
    # The echo server takes one address: one process per transport.
    procs = {}
    for kind, target in addr.items():
        procs[kind] = Proc([os.path.join(a.build, "bench/transport/echo_server"),
                            f"--signature={sig}", f"--address={target}",
                            *a.echo_args, *extra],
                           os.path.join(workdir, f"{tag}-{kind}.log"), "ready: gRPC",
                           env=server_env(a), cpus=parse_cpus(a.server_cpus))
    return procs, addr


def start_metalserve(a, model, workdir, tag, extra=()):
    addr = addresses(workdir, tag)
    cmd = [a.metalserve or os.path.join(a.build, "metalserve"), f"--model={model}",
           f"--address={addr['tcp']},{addr['uds']}", "--metrics_address=", "--http_address=",
           f"--max_batch_size={a.max_batch_size}", f"--threads={a.threads}",
           f"--max_queue_delay={a.max_queue_delay}", "--monitor_log_interval=0",
           "--device=cpu"] + (["--shared_memory=unix"] if a.shared_memory else []) + \
        a.server_args + list(extra)
    p = Proc(cmd, os.path.join(workdir, f"{tag}.log"), "ready: gRPC", env=server_env(a),
             cpus=parse_cpus(a.server_cpus))
    procs = {"tcp": p, "uds": p}
    if a.shared_memory:
        procs["shm"] = p
        addr["shm"] = addr["uds"]
    return procs, addr


SHM_ARGS = ["--protocol=kserve", "--shared_memory=system"]


def measure(a, proc, target, extra=()):
    """One timed metalserve-bench run; the server's CPU over it."""
    bench = os.path.join(a.build, "metalserve-bench")
    common = [bench, f"--target={target}", f"--concurrency={a.concurrency}",
              "--output=json", "--progress=off", f"--input={a.input}"] + a.bench_args + \
        list(extra)
    client = pin(parse_cpus(a.client_cpus))
    subprocess.run(common + ["--requests=200"], check=True, capture_output=True,
                   preexec_fn=client)  # warm-up
    c0 = cpu_seconds(proc.proc.pid)
    out = subprocess.run(common + [f"--duration={a.duration}s"], check=True,
                         capture_output=True, text=True, preexec_fn=client).stdout
    c1 = cpu_seconds(proc.proc.pid)
    r = json.loads(out)["runs"][0]
    n = max(1, r["ok"])
    return {"requests": r["ok"], "errors": sum(r["errors"].values()),
            "requests_per_s": r["requests_per_s"], "p50_ms": r["latency_us"]["p50"] / 1e3,
            "p99_ms": r["latency_us"]["p99"] / 1e3,
            "server_cpu_us_per_request": 1e6 * (c1 - c0) / n}


def payload_rows(a, sig, workdir):
    name = os.path.splitext(os.path.basename(sig))[0]
    queues = ["--grpc_api=async", f"--grpc_cq_threads={a.cq_threads}"]
    kinds = [("echo", lambda t: start_echo(a, sig, workdir, t)),
             ("echo_async", lambda t: start_echo(a, sig, workdir, t,
                                                 ["--api=async",
                                                  f"--cq_threads={a.cq_threads}"])),
             ("null", lambda t: start_metalserve(a, f"null:{sig}", workdir, t)),
             ("null_async", lambda t: start_metalserve(a, f"null:{sig}", workdir, t, queues))]
    # The model runs with its own signature's payload only (metalserve-bench
    # builds its requests from the server's metadata).
    if a.model and os.path.abspath(os.path.splitext(a.model)[0] + ".json") == os.path.abspath(sig):
        kinds.append(("model", lambda t: start_metalserve(a, a.model, workdir, t)))
        kinds.append(("model_async",
                      lambda t: start_metalserve(a, a.model, workdir, t, queues)))
    kinds = [k for k in kinds if k[0] in a.servers.split(",")]
    rows = []
    for kind, start in kinds:
        procs, addr = start(f"{name}-{kind}")
        try:
            for transport in procs:
                r = measure(a, procs[transport], addr[transport],
                            SHM_ARGS if transport == "shm" else ())
                r.update(payload=name, server=kind, transport=transport)
                rows.append(r)
                print_row(r)
        finally:
            codes = [(p, p.stop()) for p in set(procs.values())]
        # A server that crashes or hangs on SIGTERM is a broken run even when
        # its figures came back.
        for p, code in codes:
            if code != 0:
                with open(p.log.name, errors="replace") as f:
                    text = f.read()
                raise SystemExit(f"{kind} server did not stop cleanly (exit status "
                                 f"{code}):\n{text[-3000:]}")
    return rows


def print_row(r):
    print(f"{r['payload']:>10} {r['server']:>10} {r['transport']:>3}"
          f" {r['requests_per_s']:9.0f} req/s  p50 {r['p50_ms']:6.3f} ms"
          f"  p99 {r['p99_ms']:6.3f} ms  server CPU {r['server_cpu_us_per_request']:7.1f}"
          f" us/request  ({r['requests']} requests, {r['errors']} errors)", flush=True)


def summary(rows):
    """Each server's CPU per request over the echo floor of its API, same payload
    and transport: echo_async's for the *_async servers, echo's for the rest."""
    floor = {(r["payload"], r["transport"], r["server"]): r for r in rows
             if r["server"] in ("echo", "echo_async")}
    for r in rows:
        api_floor = "echo_async" if r["server"].endswith("_async") else "echo"
        f = floor.get((r["payload"], r["transport"], api_floor))
        if f and r["server"] != api_floor:
            r["cpu_over_floor"] = r["server_cpu_us_per_request"] / max(
                1e-9, f["server_cpu_us_per_request"])
            print(f"{r['payload']:>10} {r['server']:>10} {r['transport']:>3}: "
                  f"{r['cpu_over_floor']:.2f}x the {api_floor} floor's CPU per request, "
                  f"{r['requests_per_s'] / max(1e-9, f['requests_per_s']):.2f}x its throughput")


def parser():
    """The command line's parser; bench/run.py takes its defaults from it
    (parser().parse_args([])), so that every option payload_rows reads has a
    value there too."""
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--payloads", default="",
                   help="signature .json files, comma-separated; default: "
                        "<build>/models/identity.json and resnet18.json")
    p.add_argument("--model", default="",
                   help="also measure this TorchScript model, with the payload of its "
                        "signature (<model>.json, which must be among --payloads)")
    p.add_argument("--metalserve", default="",
                   help="the server binary (default <build>/metalserve), e.g. to compare builds")
    p.add_argument("--servers", default="echo,null,model",
                   help="which of echo, echo_async, null, null_async, model, model_async "
                        "to run (model* only with --model)")
    p.add_argument("--cq_threads", type=int, default=2,
                   help="completion queues (threads) of echo_async and the *_async servers")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--duration", type=float, default=5.0, help="seconds per run")
    p.add_argument("--input", default="zeros")
    p.add_argument("--max_batch_size", type=int, default=1,
                   help="metalserve's batch limit; default 1 (unbatched)")
    p.add_argument("--max_queue_delay", default="2ms")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--server_arg", dest="server_args", action="append", default=[],
                   help="extra metalserve flag, repeatable")
    p.add_argument("--echo_arg", dest="echo_args", action="append", default=[],
                   help="extra echo_server flag, repeatable (e.g. --unix_socket_buffer_bytes=0)")
    p.add_argument("--bench_arg", dest="bench_args", action="append", default=[],
                   help="extra metalserve-bench flag, repeatable (e.g. --protocol=kserve: "
                        "then leave echo out of --servers, it serves Predict only)")
    p.add_argument("--shared_memory", action="store_true",
                   help="also measure the metalserve servers with their inputs in shared "
                        "memory (KServe over the Unix socket; see above)")
    p.add_argument("--server_env", action="append", default=[], metavar="K=V",
                   help="set in the servers' environment only (repeatable), e.g. "
                        "METALSERVE_MUTEX_DEADLOCK_DETECTION=1")
    add_cpu_options(p)
    p.add_argument("--json", default="", help="write the rows here")
    return p


def main():
    a = parser().parse_args()
    check_cpus("--server_cpus", parse_cpus(a.server_cpus))
    check_cpus("--client_cpus", parse_cpus(a.client_cpus))
    sigs = [s for s in a.payloads.split(",") if s] or [
        os.path.join(a.build, "models", n) for n in ("identity.json", "resnet18.json")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="metalserve-transport-") as workdir:
        for sig in sigs:
            rows += payload_rows(a, sig, workdir)
    summary(rows)
    if a.json:
        with open(a.json, "w") as f:
            command = " ".join(["bench/transport.py", *sys.argv[1:]])
            json.dump({"command": command, "cores": os.cpu_count(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
