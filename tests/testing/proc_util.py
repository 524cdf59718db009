"""Helpers shared by the Python integration tests and bench scripts: free
loopback ports, polling with a deadline, log tails, plain HTTP GET, Python
gRPC stubs compiled from the repository's protos, and a
child process that is always stopped (SIGTERM, then SIGKILL).

Standard library only, and no syntax newer than Python 3.6, so it runs under
Debian's /usr/bin/python3 and whatever python3 the GPU host has. A script
imports it with

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "..", "testing"))
    import proc_util  # noqa: E402
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]



def compile_stubs(proto_dir, tmp, health_package=None,
                  protos=("metalserve/v1/inference.proto",)):
    """Compiles `protos` (default metalserve/v1/inference.proto; e.g. also
    KServe's inference/grpc_service.proto) from `proto_dir` into TMP/stubs
    with grpc_tools and puts that folder first on sys.path. With
    `health_package`, grpc/health/v1/health.proto too, as that top-level
    package: a module named grpc.health would be shadowed by the grpc package
    itself."""
    out = os.path.join(tmp, "stubs")
    os.makedirs(out)
    jobs = [(proto_dir, list(protos))]
    if health_package:
        health_dir = os.path.join(tmp, "protos", health_package)
        os.makedirs(health_dir)
        shutil.copy(os.path.join(proto_dir, "grpc/health/v1/health.proto"), health_dir)
        jobs.append((os.path.join(tmp, "protos"), [health_package + "/health.proto"]))
    for include, files in jobs:
        subprocess.run(["/usr/bin/python3", "-m", "grpc_tools.protoc", "-I" + include,
                        "--python_out=" + out, "--grpc_python_out=" + out] + files,
                       check=True, timeout=60)
    sys.path.insert(0, out)

def wait_for(what, predicate, deadline, interval=0.1):
    """Polls `predicate` until it returns a truthy value or `deadline`
    (time.monotonic()) passes; returns the value or raises AssertionError.

    Any other exception from `predicate` means "not up yet" and is retried;
    an AssertionError (a failed check, such as the process having exited)
    ends the wait at once."""
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except AssertionError:
            raise
        except Exception as e:  # not up yet
            last_error = e
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}; last error: {last_error!r}")


def tail(path, lines=40):
    """The last `lines` lines of the file at `path`, or "(no log)"."""
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return "(no log)"


def http_get(url, timeout=5):
    """(status, body as str) of a GET; raises OSError (urllib.error.URLError,
    HTTPError for a non-2xx status) when it fails."""
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


class Process:
    """A child process started from `argv`, stdin from /dev/null, stdout and
    stderr together into the file `log_path` (truncated), or discarded when
    `log_path` is None. stop() ends it; call it in a finally/tearDown."""

    def __init__(self, argv, log_path=None, name=None):
        self.argv = list(argv)
        self.name = name or os.path.basename(self.argv[0])
        self.log_path = log_path
        if log_path is None:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)
        else:
            # The child holds its own descriptor; the parent's closes here.
            with open(log_path, "wb") as log:
                self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                             stdout=log, stderr=subprocess.STDOUT)

    @property
    def pid(self):
        return self.proc.pid

    @property
    def returncode(self):
        """The exit status once poll(), wait() or stop() saw the exit, else None."""
        return self.proc.returncode

    def poll(self):
        return self.proc.poll()

    def alive(self):
        return self.proc.poll() is None

    def wait(self, timeout=None):
        """Popen.wait: the exit status; raises subprocess.TimeoutExpired."""
        return self.proc.wait(timeout=timeout)

    def send_signal(self, sig):
        self.proc.send_signal(sig)

    def kill(self, timeout=10):
        """SIGKILL now (if still running) and reap it; returns the exit status."""
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=timeout)
        return self.proc.returncode

    def stop(self, grace=15):
        """SIGTERM, up to `grace` seconds to exit, then SIGKILL (reaped within
        10 s). Does nothing to a process that already exited; returns the
        exit status."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode
