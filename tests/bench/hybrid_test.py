#!/usr/bin/python3
"""bench/hybrid.py: the hybrid's shutdown line is read per device in order,
the committed H200 results file is what --from_log makes of the committed
log (so its figures are the log's), and, given --build, a tiny end-to-end
run with the CPU stand-in (--accel=cpu: --devices=first_available,cpu, two
CPU runners) writes a result whose hybrid level counts every batch on one
of its two devices, and a table and plot from it.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import unittest

ARGS = None
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import hybrid  # noqa: E402

H200_LOG = "bench/results/h200-2026-12-01-hybrid-log.txt"
H200_JSON = "bench/results/h200-2026-12-01-hybrid.json"


class ParseTest(unittest.TestCase):

    def test_split_keeps_the_devices_in_order_even_when_named_alike(self):
        log = "I1202 x.cc:236] hybrid: batches run per device: cpu=7 cpu=0\n"
        self.assertEqual(hybrid.parse_split(log), [("cpu", 7), ("cpu", 0)])
        self.assertEqual(hybrid.split_fields(hybrid.parse_split(
            "hybrid: batches run per device: cuda:0=3 cpu=5"))["batches_cpu"], 5)
        self.assertEqual(hybrid.parse_split("no such line"), [])

    def test_committed_h200_result_is_the_conversion_of_its_log(self):
        with open(os.path.join(ROOT, H200_JSON)) as f:
            committed = json.load(f)
        converted = hybrid.from_log(os.path.join(ROOT, H200_LOG))
        self.assertEqual(converted["source_log"], H200_LOG)
        for key, value in converted.items():
            with self.subTest(key=key):
                self.assertEqual(committed[key], value)
        self.assertEqual(committed["models"]["resnet50"]["modes"]["hybrid"]["batches_cpu"], 0)


class DeviceMetricsTest(unittest.TestCase):

    def test_device_counters_are_summed_per_device_over_models(self):
        text = "\n".join([
            "# TYPE metalserve_device_batches_total counter",
            'metalserve_device_batches_total{device="cuda:0",model="m",version="1"} 7',
            'metalserve_device_batches_total{device="cpu",model="m",version="1"} 3',
            'metalserve_device_batches_total{device="cpu",model="n",version="2"} 2',
            'metalserve_device_batch_rows_total{device="cuda:0",model="m",version="1"} 224',
            'metalserve_device_busy_seconds_total{device="cpu",model="m",version="1"} 0.5',
            'metalserve_batches_total{model="m",reason="full",version="1"} 10',
        ])
        self.assertEqual(hybrid.parse_device_metrics(text), {
            "cuda:0": {"batches": 7, "rows": 224, "busy_s": 0.0},
            "cpu": {"batches": 5, "rows": 0, "busy_s": 0.5}})
        self.assertEqual(hybrid.parse_device_metrics(""), {})


class StandInTest(unittest.TestCase):

    def setUp(self):
        if not ARGS.build:
            self.skipTest("no --build: no server to run")

    def test_tiny_run_counts_every_batch_on_one_of_two_cpu_runners(self):
        with tempfile.TemporaryDirectory() as tmp:
            # TMPDIR: the server logs' folder, removed with tmp.
            p = subprocess.run(
                [sys.executable, os.path.join(ROOT, "bench", "hybrid.py"),
                 f"--build={ARGS.build}", "--models=tiny_cnn", "--accel=cpu",
                 "--levels=1,4", "--duration=0.3", "--warmup=0.1", "--threads=1",
                 "--connections=1", "--host_label=test", f"--out={tmp}",
                 "--server_args=--cache_dir=none"],
                timeout=120, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                universal_newlines=True, env=dict(os.environ, TMPDIR=tmp))
            self.assertEqual(p.returncode, 0, p.stdout[-4000:])
            path = next(os.path.join(tmp, n) for n in os.listdir(tmp) if n.endswith(".json"))
            with open(path) as f:
                r = json.load(f)
            self.assertTrue(r["command"].startswith("bench/hybrid.py "))
            modes = r["models"]["tiny_cnn"]["modes"]
            self.assertEqual(sorted(modes), ["cpu", "hybrid"])  # accel would repeat cpu
            self.assertEqual(modes["hybrid"]["device"], "cpu+cpu")
            for level in modes["hybrid"]["levels"]:
                self.assertEqual(level["error_rate"], 0)
                devices = [d["device"] for d in level["batches_per_device"]]
                self.assertEqual(devices, ["cpu", "cpu"])
                self.assertGreater(level["batches_accel"] + level["batches_cpu"], 0)
                # The server's per-device counters cover the same batches as
                # its shutdown line (both "cpu" here: the series is shared).
                self.assertEqual(level["device_metrics"]["cpu"]["batches"],
                                 level["batches_accel"] + level["batches_cpu"])
                self.assertGreater(level["device_metrics"]["cpu"]["busy_s"], 0)
            self.assertEqual([s["concurrency"] for s in r["summary"]["tiny_cnn"]], [1, 4])
            self.assertTrue(r.get("torch_version"))


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="", help="build folder with metalserve and models/")
    ARGS, rest = p.parse_known_args()
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()
