#!/usr/bin/python3
"""Scale-out on one machine: three metalserve processes behind the client's
round_robin, and one of them killed mid-run.

All on 127.0.0.1 with free ports, bounded by --timeout; every process the
test starts is stopped at the end, pass or fail.

  1. Three servers serve the tiny_cnn model, each with its own gRPC and
     metrics port; the test waits until each one's grpc.health.v1 reports
     SERVING (through metalserve-bench's own view of /metrics would not
     prove the gRPC port is up, so health is asked over gRPC).
  2. even spread: metalserve-bench --target=a,b,c --requests=N sends N calls;
     each server's metalserve_requests_total{method="Predict",code="OK"}
     must have moved by N/3 within 20%, and the three moves must sum to N.
  3. failover: a second bench run with --retries=4; once a third of its
     requests have been answered, one server is killed with SIGKILL. The
     bench must report N OK calls and no errors, and the OK counts of the
     servers must add up to at least N. The killed server's count is the
     last one scraped before the kill (a lower bound of its true count), so
     the sum is a lower bound too: that it still reaches N shows every
     request was answered by a server, none lost.

Health is asked with Python grpcio (Debian: python3-grpcio,
python3-grpc-tools); the stubs are generated into a temporary directory.
A missing binary or model is a failure, not a skip.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "testing"))
from proc_util import Process, free_port, http_get, tail, wait_for  # noqa: E402

ARGS = None

N_SPREAD = 600      # requests in the even-spread run
N_FAILOVER = 1500   # requests in the failover run
CONCURRENCY = 6
SPREAD_TOLERANCE = 0.20


OK_LINE = re.compile(
    r'^metalserve_requests_total\{([^}]*)\}\s+([0-9.eE+-]+)\s*$', re.M)


def predict_ok(metrics_text):
    """metalserve_requests_total{method="Predict",code="OK"} from a scrape,
    summed over the model labels."""
    return sum(int(float(value)) for labels, value in OK_LINE.findall(metrics_text)
               if 'method="Predict"' in labels and 'code="OK"' in labels)


INFLIGHT_LINE = re.compile(
    r'^metalserve_inflight_requests(?:\{[^}]*\})?\s+([0-9.eE+-]+)\s*$', re.M)


def inflight(metrics_text):
    """metalserve_inflight_requests from a scrape (RPCs started, not finished)."""
    m = INFLIGHT_LINE.search(metrics_text)
    return int(float(m.group(1))) if m else 0


class Server(Process):
    """One metalserve child process with its own ports and log file."""

    def __init__(self, index, tmp):
        self.index = index
        self.grpc_port = free_port()
        self.metrics_port = free_port()
        self.address = f"127.0.0.1:{self.grpc_port}"
        super().__init__([
            ARGS.server,
            f"--model={ARGS.model}",
            f"--address={self.address}", "--http_address=",
            f"--metrics_address=127.0.0.1:{self.metrics_port}",
            "--device=cpu", "--threads=1", "--executors=1",
            "--max_batch_size=8", "--max_queue_delay=1ms",
            "--monitor_log_interval=0",
        ], os.path.join(tmp, f"metalserve{index}.log"), name=f"metalserve{index}")

    def scrape(self, timeout=5):
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        return http_get(url, timeout=timeout)[1]

    def predict_ok(self):
        return predict_ok(self.scrape())


class ScaleOut(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.deadline = time.monotonic() + ARGS.timeout
        cls.tmp = tempfile.mkdtemp(prefix="metalserve_scaleout_")
        cls.servers = []
        try:
            for path, what in ((ARGS.server, "server binary"),
                               (ARGS.bench, "bench binary"),
                               (ARGS.model, "model")):
                if not os.path.exists(path):
                    raise AssertionError(f"{what} not found: {path}")
            cls._load_health_stub()
            for i in range(3):
                cls.servers.append(Server(i, cls.tmp))
            for s in cls.servers:
                cls._wait_serving(s)
        except BaseException:
            cls._stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls._stop()

    @classmethod
    def _stop(cls):
        for s in cls.servers:
            s.stop()
        if os.environ.get("METALSERVE_KEEP_TMP"):
            print(f"kept {cls.tmp}", file=sys.stderr)
        else:
            shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def _load_health_stub(cls):
        # The proto's own path (grpc/health/v1) would shadow grpcio's `grpc`
        # package; a copy under another file name keeps the service name
        # (from the proto package) and imports cleanly.
        out = os.path.join(cls.tmp, "stubs")
        os.makedirs(out)
        shutil.copy(os.path.join(ARGS.proto_dir, "grpc/health/v1/health.proto"),
                    os.path.join(out, "metalserve_health.proto"))
        from grpc_tools import protoc
        rc = protoc.main(["protoc", f"-I{out}", f"--python_out={out}",
                          f"--grpc_python_out={out}",
                          os.path.join(out, "metalserve_health.proto")])
        if rc != 0:
            raise AssertionError(f"protoc failed for health.proto: {rc}")
        sys.path.insert(0, out)
        import metalserve_health_pb2 as health_pb2
        import metalserve_health_pb2_grpc as health_pb2_grpc
        cls.health_pb2, cls.health_pb2_grpc = health_pb2, health_pb2_grpc

    @classmethod
    def _wait_serving(cls, server):
        import grpc
        channel = grpc.insecure_channel(server.address)
        stub = cls.health_pb2_grpc.HealthStub(channel)
        serving = cls.health_pb2.HealthCheckResponse.SERVING

        def healthy():
            if not server.alive():
                raise AssertionError(f"metalserve {server.index} exited early:\n"
                                     + tail(server.log_path, 30))
            for name in ("", "metalserve.v1.Inference"):
                reply = stub.Check(cls.health_pb2.HealthCheckRequest(service=name),
                                   timeout=2)
                if reply.status != serving:
                    return False
            return True

        try:
            wait_for(f"metalserve {server.index} to report SERVING", healthy,
                     cls.deadline)
        finally:
            channel.close()

    def _bench(self, requests, extra=()):
        """Starts metalserve-bench against all servers; returns the Popen."""
        argv = [ARGS.bench,
                "--target=" + ",".join(s.address for s in self.servers),
                f"--requests={requests}", f"--concurrency={CONCURRENCY}",
                "--output=json", "--progress=off", "--deadline=20s", *extra]
        return subprocess.Popen(argv, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                text=True)

    def _finish(self, proc):
        remaining = max(1, self.deadline - time.monotonic())
        try:
            out, err = proc.communicate(timeout=remaining)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise AssertionError("metalserve-bench did not finish in time")
        self.assertEqual(proc.returncode, 0, f"bench failed:\n{err}")
        report = json.loads(out)
        self.assertEqual(len(report["runs"]), 1, out)
        return report["runs"][0]

    def test_1_round_robin_spreads_evenly(self):
        before = [s.predict_ok() for s in self.servers]
        run = self._finish(self._bench(N_SPREAD))
        self.assertEqual(run["ok"], N_SPREAD, run)
        self.assertEqual(run["errors"], {}, run)
        moved = [s.predict_ok() - b for s, b in zip(self.servers, before)]
        self.assertEqual(sum(moved), N_SPREAD, f"per-server OK deltas {moved}")
        share = N_SPREAD / 3
        for i, m in enumerate(moved):
            self.assertLessEqual(
                abs(m - share), SPREAD_TOLERANCE * share,
                f"server {i} answered {m} of {N_SPREAD} (deltas {moved}); "
                f"round_robin should give each about {share:.0f}")

    def test_2_no_request_lost_when_a_server_is_killed(self):
        before = [s.predict_ok() for s in self.servers]
        victim = self.servers[1]
        proc = self._bench(N_FAILOVER, ["--retries=4"])

        # Kill once a third of the run is answered, counted on the servers.
        # The victim's last scrape is taken right before the kill.
        victim_last = before[1]

        def third_done():
            nonlocal victim_last
            if proc.poll() is not None:
                raise AssertionError("bench finished before the kill; "
                                     "raise N_FAILOVER")
            counts = [s.predict_ok() for s in self.servers]
            victim_last = counts[1]
            return sum(counts) - sum(before) >= N_FAILOVER // 3

        wait_for("a third of the failover run", third_done, self.deadline,
                 interval=0.02)
        # Scrape, kill, then parse: the window in which the victim could
        # still answer a call its last scrape does not count is kept short,
        # and bounded by the calls it had in flight at that scrape.
        text = victim.scrape()
        victim.kill()
        victim_last = predict_ok(text)
        victim_inflight = inflight(text)
        killed_at = sum(s.predict_ok() for s in self.servers if s is not victim) \
            + victim_last - sum(before)

        run = self._finish(proc)
        self.assertLess(killed_at, N_FAILOVER,
                        "the kill came after the run had finished")
        self.assertEqual(run["errors"], {}, run)
        self.assertEqual(run["ok"], N_FAILOVER, run)
        survivors = sum(s.predict_ok() - b for s, b in zip(self.servers, before)
                        if s is not victim)
        victim_moved = victim_last - before[1]
        self.assertGreater(victim_moved, 0, "the victim never served")
        # Calls the victim answered after its last scrape were not retried,
        # so they are in neither survivors nor victim_moved: those in flight
        # at the scrape, and any of the client's CONCURRENCY calls that
        # started and finished between the scrape and the kill (a window of
        # a few ms that a loaded 2-core CI machine can stretch). The client's
        # own count above (every call OK, no error) is the no-loss check;
        # this one checks the servers' counts agree with it within that.
        self.assertGreaterEqual(
            survivors + victim_moved + victim_inflight + CONCURRENCY, N_FAILOVER,
            f"servers answered {survivors} (survivors) + >= {victim_moved} "
            f"(killed, {victim_inflight} in flight) OK calls for "
            f"{N_FAILOVER} sent")
        print(f"failover: killed after {killed_at} answered; survivors "
              f"{survivors}, victim >= {victim_moved} with {victim_inflight} "
              f"in flight", file=sys.stderr)


def main():
    global ARGS
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--server", required=True)
    p.add_argument("--bench", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--proto_dir", required=True)
    p.add_argument("--timeout", type=float, default=100)
    ARGS, rest = p.parse_known_args()
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
