#!/usr/bin/env python3
"""Server memory under the hostile-client scenarios of issue 17.

Starts build/metalserve (or any --server binary, e.g. an older build to
compare) on a free loopback port with the metrics listener off, runs one
memory_attack scenario against it, and reports the server's VmRSS before,
its peak (VmHWM) and VmRSS after, in MiB, with what the calls got. One
fresh server per scenario, so peaks do not carry over.

With --check (the ctest reliability_memory_bounds), it runs small
scenarios against the given server and asserts the bounds the current
server promises: a gzip bomb refused UNIMPLEMENTED by default with the
peak growing by less than 64 MiB, and with --accept_compression refused
RESOURCE_EXHAUSTED while it is inflated (peak under +96 MiB) while valid
gzip Predict calls are answered, parallel messages over
--max_message_bytes refused RESOURCE_EXHAUSTED, and 4 x 128 MiB sent at
once against a 64 MiB --memory_quota_bytes cut off with the peak growing by
less than 256 MiB; 48 answers of 4 MiB on one connection whose window is
held at zero (window_zero.py) cut off at the per-connection bound with a
log line, and 3 such answers cut off at --unread_response_timeout. Standard
library only.

Run (figures in docs/reliability.md):
  python3 bench/reliability/memory_attack.py --server build/metalserve \\
      --attack build/bench/reliability/memory_attack --model build/models/tiny_cnn.pt
"""

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "tests", "testing"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import proc_util  # noqa: E402
import window_zero as window_zero_client  # noqa: E402

MIB = 1 << 20
GIB = 1 << 30


def mem(pid):
    """(VmRSS, VmHWM) of `pid` in MiB."""
    vals = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                vals[k] = int(v.split()[0]) / 1024
    return vals["VmRSS"], vals["VmHWM"]


def big_answer_model():
    """A null-runner signature whose answer is 4 MiB a row (1 Mi float32)."""
    path = f"/tmp/memory_attack_{os.getpid()}_big_answer.json"
    with open(path, "w") as f:
        json.dump({"name": "big_answer", "version": "1",
                   "inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 4]}],
                   "outputs": [{"name": "y", "dtype": "float32", "shape": [-1, 1 << 20]}]}, f)
    return "null:" + path


def run(args, server_flags, attack_flags, timeout=300, model=None):
    """Runs one scenario on a fresh server; returns a result dict. A callable
    `attack_flags` is the attack itself: called with the port, it returns
    what the calls got."""
    port = proc_util.free_port()
    log = f"/tmp/memory_attack_{os.getpid()}_{port}.log"
    cmd = [args.server, "--model=" + (model or args.model), "--device=cpu", "--threads=1",
           "--metrics_address=", f"--address=127.0.0.1:{port}", "--http_address="] + server_flags
    with open(log, "w") as out:
        srv = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        def ready():
            assert srv.poll() is None, f"server exited: {open(log).read()[-2000:]}"
            return "ready:" in open(log).read()
        proc_util.wait_for("server ready", ready, time.monotonic() + 120)
        before, _ = mem(srv.pid)
        t0 = time.monotonic()
        if callable(attack_flags):
            lines = [str(attack_flags(port))]
        else:
            att = subprocess.run([args.attack, f"--target=127.0.0.1:{port}"] + attack_flags,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 timeout=timeout)
            lines = [l for l in att.stdout.decode(errors="replace").splitlines()
                     if "code" in l or "started" in l]
        took = time.monotonic() - t0
        after, peak = mem(srv.pid)
        cut = sum(1 for l in open(log) if "cut off a call from" in l)
        return {"before": before, "peak": peak, "after": after, "took": took,
                "outcome": "; ".join(lines), "cut_lines": cut}
    finally:
        srv.terminate()
        try:
            srv.wait(timeout=30)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.wait()
        os.unlink(log)


def report(name, server_flags, attack_flags, args, model=None):
    r = run(args, server_flags, attack_flags, model=model)
    print(f"{name:<34} rss_before={r['before']:7.0f} MiB peak={r['peak']:7.0f} MiB "
          f"rss_after={r['after']:7.0f} MiB ({r['took']:.1f} s) | {r['outcome']} "
          f"| {r['cut_lines']} cut-off log lines", flush=True)
    return r


def check(args):
    failures = []
    r = report("bomb 256 MiB, default", [], ["--scenario=bomb", f"--bytes={256 * MIB}"],
               args)
    if "code 12 Compression algorithm 'gzip' is disabled" not in r["outcome"]:
        failures.append(f"bomb not refused UNIMPLEMENTED: {r['outcome']}")
    if r["peak"] - r["before"] > 64:
        failures.append(f"bomb raised the peak by {r['peak'] - r['before']:.0f} MiB")
    # --accept_compression: inflated by the server under --max_message_bytes
    # (before: gRPC inflated all 256 MiB, peak +273 MiB, then refused).
    r = report("bomb 256 MiB, --accept_compression", ["--accept_compression"],
               ["--scenario=bomb", f"--bytes={256 * MIB}"], args)
    if "code 8 request inflates to more than max_message_bytes (67108864" not in r["outcome"]:
        failures.append(f"bomb not refused RESOURCE_EXHAUSTED while inflating: {r['outcome']}")
    if r["peak"] - r["before"] > 64 + 32:
        failures.append(f"bomb with --accept_compression raised the peak by "
                        f"{r['peak'] - r['before']:.0f} MiB (limit 64 MiB)")
    r = report("gzip Predict, --accept_compression", ["--accept_compression"],
               ["--scenario=gzip_predict", "--calls=8"], args)
    if "8 x code 0" not in r["outcome"]:
        failures.append(f"valid gzip Predict calls not answered OK: {r['outcome']}")
    r = report("parallel 4 x 8 MiB, limit 1 MiB", [f"--max_message_bytes={MIB}"],
               ["--scenario=parallel", "--calls=4", f"--bytes={8 * MIB}"], args)
    if "4 x code 8" not in r["outcome"]:
        failures.append(f"large messages not refused RESOURCE_EXHAUSTED: {r['outcome']}")
    # gRPC 1.51 receives a message in full before checking its size: the
    # four bodies may all be held at once, not more.
    if r["peak"] - r["before"] > 4 * 8 + 32:
        failures.append(f"4 x 8 MiB raised the peak by {r['peak'] - r['before']:.0f} MiB")
    # The transport's quota: 4 x 128 MiB arriving at once is cut off near a
    # 64 MiB quota (with no quota the server held all 512 MiB).
    r = report("parallel 4 x 128 MiB, quota 64 MiB",
               [f"--max_message_bytes={MIB}", f"--memory_quota_bytes={64 * MIB}"],
               ["--scenario=parallel", "--calls=4", f"--bytes={128 * MIB}"], args)
    if "4 x code 8" not in r["outcome"]:
        failures.append(f"messages over the quota not refused: {r['outcome']}")
    if r["peak"] - r["before"] > 256:
        failures.append(f"4 x 128 MiB raised the peak by {r['peak'] - r['before']:.0f} MiB "
                        "with a 64 MiB quota")
    failures += check_unread(args)
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


def window_zero(calls, hold_s):
    """The attack: `calls` Predict calls on one connection whose client holds
    every stream's window at zero (window_zero.py)."""
    request = window_zero_client.predict_request("x", 16)
    return lambda port: window_zero_client.hold_unread(port, calls, hold_s, request)


def check_unread(args):
    """Answers never read: 48 x 4 MiB on one connection whose window is held
    at zero, against a 16 MiB per-connection bound (2 x --max_message_bytes),
    are cut off (before: all 192 MiB were kept, peak +212 MiB); answers
    unread past --unread_response_timeout too."""
    failures = []
    r = report("window-zero 48 x 4 MiB answers",
               ["--max_message_bytes=8388608", "--max_batch_size=1"],
               window_zero(48, 3), args, model=big_answer_model())
    if r["cut_lines"] < 1 or "'reset': 45" not in r["outcome"]:
        failures.append(f"48 unread 4 MiB answers: not 45 cut off with a log line "
                        f"({r['cut_lines']} lines): {r['outcome']}")
    if r["peak"] - r["before"] > 128:
        failures.append(f"48 unread 4 MiB answers raised the peak by "
                        f"{r['peak'] - r['before']:.0f} MiB (bound 16 MiB per connection)")
    # 3 x 4 MiB stay under the bytes bound; the timeout cuts them.
    r = report("window-zero 3 x 4 MiB, 1s timeout",
               ["--max_message_bytes=8388608", "--max_batch_size=1",
                "--unread_response_timeout=1s"],
               window_zero(3, 4), args, model=big_answer_model())
    if r["cut_lines"] < 1 or "'reset': 3" not in r["outcome"]:
        failures.append(f"answers unread past --unread_response_timeout=1s not cut off: "
                        f"{r['outcome']}")
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--attack", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--old", action="store_true",
                    help="a server from before issue 17 (no --accept_compression)")
    ap.add_argument("--big", type=int, default=GIB, help="bomb size, bytes")
    ap.add_argument("--parallel_bytes", type=int, default=512 * MIB)
    args = ap.parse_args()
    if not os.path.exists("/proc/self/status"):
        print("SKIP: no /proc here to read the server's RSS from")
        return 77  # ctest SKIP_RETURN_CODE
    if args.check:
        return check(args)
    report("gzip bomb, default flags", [], ["--scenario=bomb", f"--bytes={args.big}"], args)
    if not args.old:
        report("gzip bomb, --accept_compression", ["--accept_compression"],
               ["--scenario=bomb", f"--bytes={args.big}"], args)
    report(f"4 parallel x {args.parallel_bytes // MIB} MiB", [],
           ["--scenario=parallel", "--calls=4", f"--bytes={args.parallel_bytes}"], args)
    report("5000 never-read calls", [],
           ["--scenario=never_read", "--calls=5000", "--hold_s=3"], args)
    report("window-zero 200 x 4 MiB answers", ["--max_batch_size=1"],
           window_zero(200, 5), args, model=big_answer_model())
    return 0


if __name__ == "__main__":
    sys.exit(main())
