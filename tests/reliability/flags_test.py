#!/usr/bin/env python3
"""Operator mistakes in metalserve's flags end the process with exit code 2
and a message that names the mistake, before any model loads or port binds
(issue 17, item 8): a port out of range, an address without a port, a
device_concurrency below 1, TLS files that do not parse or do not match,
an unread-answer timeout of 0, a global unread-answer bound below the
per-connection one, or a priority isolation setting out of range.

Each case runs build/metalserve with the metrics listener off and a 30 s
limit; a server that starts instead of refusing is stopped and the case
fails. Certificates are made by the openssl command line in a temporary
directory. Standard library only.

Run: python3 tests/reliability/flags_test.py --server build/metalserve \
         --model build/models/tiny_cnn.pt
"""

import argparse
import os
import subprocess
import sys
import tempfile


def make_tls(d):
    for n in ("a", "b"):
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
             "-subj", "/CN=localhost", "-keyout", os.path.join(d, n + ".key"),
             "-out", os.path.join(d, n + ".pem")],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(os.path.join(d, "garbage.pem"), "w") as f:
        f.write("this is not a certificate\n")


def run_case(server, model, flags, want):
    cmd = [server, "--model=" + model, "--metrics_address=", "--http_address=", "--device=cpu"] + flags
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=30)
    except subprocess.TimeoutExpired as e:
        out = (e.output or b"").decode(errors="replace")
        return f"still running after 30 s (it should have refused):\n{out[-2000:]}"
    out = p.stdout.decode(errors="replace")
    if p.returncode != 2:
        return f"exit code {p.returncode}, want 2:\n{out[-2000:]}"
    if want not in out:
        return f"message lacks {want!r}:\n{out[-2000:]}"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        make_tls(d)
        p = lambda n: os.path.join(d, n)  # noqa: E731
        cases = [
            (["--address=127.0.0.1:99999"], "has port '99999', not in [0, 65535]"),
            (["--address=127.0.0.1"], "address '127.0.0.1' has no port"),
            (["--address=127.0.0.1:0", "--device_concurrency=0"],
             "device_concurrency must be at least 1, got 0"),
            (["--address=127.0.0.1:0", "--unread_response_timeout=0"],
             "unread_response_timeout must be > 0"),
            (["--address=127.0.0.1:0", "--max_unread_response_bytes=1000",
              "--max_unread_response_bytes_per_connection=2000"],
             "max_unread_response_bytes (1000) must be >= "
             "max_unread_response_bytes_per_connection (2000)"),
            (["--address=127.0.0.1:0", "--priority_fill_cost_ratio=0.5"],
             "priority_fill_cost_ratio must be 0 (off) or a finite number >= 1, got 0.5"),
            (["--address=127.0.0.1:0", "--priority_lower_batch_cost=-2ms"],
             "priority_lower_batch_cost must be >= 0 (0: off), got -2ms"),
            (["--address=127.0.0.1:0", "--priority_active_window=0s"],
             "priority_active_window must be > 0, got 0"),
            (["--address=127.0.0.1:0", "--grpc_api=sync"],
             "grpc_api must be auto, callback or async, got 'sync'"),
            (["--address=127.0.0.1:0", "--unix_socket_buffer_bytes=-1"],
             "unix_socket_buffer_bytes must be in [0, 1073741824] (0: the kernel's default), "
             "got -1"),
            (["--address=127.0.0.1:0", "--grpc_cq_threads=65"],
             "grpc_cq_threads must be in [0, 64] (0: the default), got 65"),
            (["--address=127.0.0.1:0", "--accelerator_spin=-1ms"],
             "accelerator_spin=-1ms must be in [0, 100ms]"),
            (["--address=127.0.0.1:0", "--accelerator_spin=101ms"],
             "accelerator_spin=101ms must be in [0, 100ms]"),
            (["--address=127.0.0.1:0", "--staging_buffers=65"],
             "staging_buffers=65 must be in [0, 64]"),
            (["--address=127.0.0.1:0", "--null_device_time=1ms"],
             "null_device_time=1ms must be >= 0, with --model=null:<signature.json>"),
            (["--address=127.0.0.1:0", "--tls_cert=" + p("a.pem"),
              "--tls_key=" + p("b.key")], "TLS key does not match certificate"),
            (["--address=127.0.0.1:0", "--tls_cert=" + p("garbage.pem"),
              "--tls_key=" + p("a.key")],
             "cannot parse certificate " + p("garbage.pem")),
        ]
        failures = []
        for flags, want in cases:
            why = run_case(args.server, args.model, flags, want)
            print(("FAIL " if why else "ok   ") + " ".join(flags), flush=True)
            if why:
                failures.append(f"{' '.join(flags)}: {why}")
    if failures:
        print("\n\n".join(failures))
        return 1
    print(f"all {len(cases)} bad-flag cases exit 2 with their message")
    return 0


if __name__ == "__main__":
    sys.exit(main())
