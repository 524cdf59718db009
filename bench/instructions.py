#!/usr/bin/env python3
"""User-space instructions per request of a server, counted by callgrind.

On a shared VM the server's CPU time per request moves by 10-20 % from one
run to the next (bench/transport.py), more than most single changes to the
request path are worth. The instructions the server executes per request do
not move: run the server under valgrind's callgrind, send warm-up requests,
zero the counters, send N requests, dump, and divide. The count leaves out
the kernel (socket copies, wake-ups), which both sides of a comparison pay
alike, and it weighs every instruction the same, so read it as the work a
change adds or removes, not as time.

  bench/instructions.py                               # null runner, [1,4] requests
  bench/instructions.py --servers=echo,null           # beside gRPC's own floor
  bench/instructions.py --servers=null,model          # the model's own share (identity.pt)
  bench/instructions.py --metalserve=/tmp/old/metalserve --metalserve=build/metalserve
  bench/instructions.py --server_env=METALSERVE_MUTEX_DEADLOCK_DETECTION=1  # detection on

Each server listens on a Unix socket in a temporary folder; the client is
metalserve-bench at concurrency 8. callgrind runs the server about 50x
slower, so 2,000 requests take tens of seconds. Prints, per server, the
instructions per request and the functions (self cost) that execute most of
them; --json writes the rows.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# callgrind_annotate lists a thread's entry point with the whole thread's
# cost even without --inclusive; these are left out of the top functions.
THREAD_ENTRIES = ("clone.S:clone", "start_thread", "std::thread::_State_impl", "???:0x")


def wait_ready(log_path, proc, timeout=180):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if "ready: gRPC" in open(log_path).read():
            return
        if proc.poll() is not None:
            raise SystemExit(f"server exited:\n{open(log_path).read()[-3000:]}")
        time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"server not ready in {timeout} s; log {log_path}")


def bench(a, target, requests):
    subprocess.run([os.path.join(a.build, "metalserve-bench"), f"--target={target}",
                    f"--concurrency={a.concurrency}", f"--requests={requests}",
                    f"--input={a.input}", "--progress=off"] + a.bench_args,
                   check=True, capture_output=True)


def totals(out_file):
    """(total instructions, [(instructions, function)] by self cost)."""
    text = subprocess.run(["callgrind_annotate", "--auto=no", "--inclusive=no",
                           "--threshold=100", out_file],
                          check=True, capture_output=True, text=True).stdout
    total, rows = 0, []
    for line in text.splitlines():
        parts = line.split(None, 1)
        if len(parts) < 2 or not parts[0].replace(",", "").isdigit():
            continue
        n = int(parts[0].replace(",", ""))
        if "PROGRAM TOTALS" in parts[1]:
            total = n
        elif any(k in parts[1] for k in THREAD_ENTRIES):
            continue  # thread entry points, listed with their callees' cost
        else:
            name = parts[1].split(")", 1)[-1].strip() if parts[1].startswith("(") else parts[1]
            rows.append((n, name))
    return total, rows


def measure(a, label, cmd, workdir, sock):
    out = os.path.join(workdir, f"{label}.callgrind")
    log = os.path.join(workdir, f"{label}.log")
    env = {**os.environ, **dict(kv.split("=", 1) for kv in a.server_env)}
    full = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
            "--dump-instr=no"] + cmd
    print("+ " + " ".join(full), file=sys.stderr, flush=True)
    with open(log, "w") as f:
        proc = subprocess.Popen(full, stdout=f, stderr=subprocess.STDOUT, env=env)
    try:
        wait_ready(log, proc)
        target = f"unix://{sock}"
        bench(a, target, a.warmup)
        subprocess.run(["callgrind_control", "-z", str(proc.pid)], check=True,
                       capture_output=True)
        bench(a, target, a.requests)
        subprocess.run(["callgrind_control", "-d", str(proc.pid)], check=True,
                       capture_output=True)
    finally:
        proc.terminate()
        proc.wait(timeout=120)
    dumps = sorted((p for p in os.listdir(workdir) if p.startswith(f"{label}.callgrind.")),
                   key=lambda p: os.path.getmtime(os.path.join(workdir, p)))
    if not dumps:
        raise SystemExit(f"no callgrind dump for {label}")
    total, rows = totals(os.path.join(workdir, dumps[0]))
    return {"server": label, "requests": a.requests,
            "instructions_per_request": total / a.requests,
            "top": [{"instructions_per_request": n / a.requests, "function": fn}
                    for n, fn in rows[:a.top]]}


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--signature", default="",
                   help="the payload's signature (default <build>/models/identity.json)")
    p.add_argument("--servers", default="null",
                   help="which of echo, null, model (comma-separated); model serves the "
                        "signature's .pt beside its .json (default <build>/models/identity.pt)")
    p.add_argument("--metalserve", action="append", default=[],
                   help="metalserve binary for the null and model servers (repeatable, to compare "
                        "builds; default <build>/metalserve)")
    p.add_argument("--server_arg", dest="server_args", action="append", default=[],
                   help="extra metalserve flag, repeatable")
    p.add_argument("--server_env", action="append", default=[], metavar="K=V",
                   help="set in the servers' environment (repeatable)")
    p.add_argument("--bench_arg", dest="bench_args", action="append", default=[],
                   help="extra metalserve-bench flag, repeatable")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--input", default="zeros")
    p.add_argument("--warmup", type=int, default=300)
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--top", type=int, default=15, help="functions listed per server")
    p.add_argument("--json", default="")
    a = p.parse_args()
    sig = a.signature or os.path.join(a.build, "models", "identity.json")
    binaries = a.metalserve or [os.path.join(a.build, "metalserve")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="metalserve-instructions-") as workdir:
        for n, server in enumerate(s for s in a.servers.split(",") if s):
            if server == "echo":
                sock = os.path.join(workdir, "echo.sock")
                cmd = [os.path.join(a.build, "bench/transport/echo_server"),
                       f"--signature={sig}", f"--address=unix://{sock}"]
                rows.append(measure(a, "echo", cmd, workdir, sock))
            elif server in ("null", "model"):
                model = (f"null:{sig}" if server == "null"
                         else os.path.splitext(sig)[0] + ".pt")
                for i, binary in enumerate(binaries):
                    label = f"{server}-{i}" if len(binaries) > 1 else server
                    sock = os.path.join(workdir, f"{label}.sock")
                    cmd = [binary, f"--model={model}", f"--address=unix://{sock}",
                           "--metrics_address=", "--http_address=", "--max_batch_size=1",
                           "--threads=1", "--monitor_log_interval=0",
                           "--device=cpu"] + a.server_args
                    row = measure(a, label, cmd, workdir, sock)
                    row["binary"] = binary
                    rows.append(row)
            else:
                raise SystemExit(f"--servers: unknown server '{server}' (echo, null, model)")
    for r in rows:
        print(f"{r['server']:>8}: {r['instructions_per_request']:,.0f} instructions per request"
              + (f"  ({r['binary']})" if "binary" in r else ""))
        for t in r["top"]:
            print(f"          {t['instructions_per_request']:>9,.0f}  {t['function'][:110]}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"command": " ".join(["bench/instructions.py", *sys.argv[1:]]),
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
