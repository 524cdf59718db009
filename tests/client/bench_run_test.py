#!/usr/bin/python3
"""bench/run.py's ratio warnings: a run too short or noisy to give a
meaningful ratio is flagged next to it; a sound run is not. Pure functions,
no server: the figures below are the shapes metalserve-bench writes."""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "bench"))
import run  # noqa: E402  bench/run.py
import policies  # noqa: E402  bench/policies.py
import transport  # noqa: E402  bench/transport.py


def level(ok, elapsed_s, concurrency=1, error_rate=0.0):
    return {"ok": ok, "elapsed_s": elapsed_s, "concurrency": concurrency,
            "error_rate": error_rate}


def summary(served_over_raw=0.8, gain=2.0, p50=0.3, p99=0.9):
    return {"served_over_raw_best": served_over_raw, "batching_gain": gain,
            "p50_overhead_ms": p50, "p99_overhead_ms": p99}


SOUND = level(5000, 5.0, 16)


class RatioWarningsTest(unittest.TestCase):
    def test_sound_run_has_no_warnings(self):
        self.assertEqual(run.ratio_warnings(summary(), SOUND, SOUND, SOUND), {})
        self.assertEqual(run.warned({"warnings": {}}, "batching_gain"), "")

    def test_one_second_run_flags_every_ratio_it_feeds(self):
        # The case: a 1 s run with negative overhead and a 0.28x gain.
        short = level(150, 1.0, 4)
        w = run.ratio_warnings(summary(gain=0.28, p50=-0.05, p99=-0.01),
                               short, short, short)
        self.assertIn("only 150 requests (< 200)", " ".join(w["batching_gain"]))
        self.assertIn("measured 1.0 s (< 3 s)", " ".join(w["served_over_raw_best"]))
        self.assertIn("gain below 1 from too few requests", " ".join(w["batching_gain"]))
        for key in ("p50_overhead_ms", "p99_overhead_ms"):
            self.assertIn("cannot beat the raw forward", " ".join(w[key]))

    def test_negative_overhead_is_flagged_even_in_a_long_run(self):
        w = run.ratio_warnings(summary(p50=-0.2), SOUND, SOUND, SOUND)
        self.assertEqual(list(w), ["p50_overhead_ms"])

    def test_gain_below_one_from_enough_requests_is_a_finding_not_noise(self):
        self.assertEqual(run.ratio_warnings(summary(gain=0.9), SOUND, SOUND, SOUND), {})

    def test_served_above_raw_and_errors_are_flagged(self):
        noisy = level(5000, 5.0, 16, error_rate=0.01)
        w = run.ratio_warnings(summary(served_over_raw=1.3), noisy, SOUND, SOUND)
        text = " ".join(w["served_over_raw_best"])
        self.assertIn("served above raw", text)
        self.assertIn("batched c=16: error rate 0.0100", text)

    def test_warning_is_printed_beside_the_ratio(self):
        s = summary(p99=-1.0)
        s["warnings"] = run.ratio_warnings(s, SOUND, SOUND, SOUND)
        self.assertTrue(run.warned(s, "p99_overhead_ms").startswith("   WARNING: "))


def trow(server, transport, concurrency, p50_ms):
    return {"server": server, "transport": transport, "concurrency": concurrency,
            "p50_ms": p50_ms}


class FloorOverheadTest(unittest.TestCase):
    def test_c1_overhead_is_read_against_the_echo_tcp_p50_at_concurrency_1(self):
        rows = [trow("echo", "tcp", 512, 9.0), trow("echo", "uds", 1, 0.2),
                trow("echo", "tcp", 1, 0.4), trow("null", "tcp", 1, 0.5),
                trow("model", "tcp", 512, 30.0)]
        got = run.floor_overhead(summary(p50=0.65), rows)
        self.assertAlmostEqual(got["c1_floor_p50_ms"], 0.4)
        self.assertAlmostEqual(got["p50_overhead_over_floor_ms"], 0.25)
        self.assertAlmostEqual(got["c1_null_p50_ms"], 0.5)

    def test_no_c1_echo_row_gives_nothing(self):
        self.assertEqual(run.floor_overhead(summary(), None), {})
        self.assertEqual(run.floor_overhead(summary(), [trow("echo", "tcp", 64, 1.0)]), {})


def point(c, rps, p50_us):
    return {"concurrency": c, "requests_per_s": rps,
            "latency_us": {"p50": p50_us, "p99": p50_us}}


class TransportArgsTest(unittest.TestCase):
    def test_every_transport_option_is_set_and_the_runs_own_win(self):
        # --transport once built its own option list and missed --cq_threads
        # (added to bench/transport.py later): payload_rows then failed on the
        # GPU host after the whole sweep had run.
        import argparse
        a = argparse.Namespace(build="b", model_path="m.pt", duration=3.0, input="random",
                               max_queue_delay="2ms", threads=8, device="cuda",
                               precision="fp16", optimize="auto", channels_last=True,
                               server_cpus="0", client_cpus="1")
        t = run.transport_args(a, 64)
        for name in vars(transport.parser().parse_args([])):
            self.assertTrue(hasattr(t, name), name)
        self.assertEqual((t.build, t.model, t.concurrency, t.max_batch_size, t.threads),
                         ("b", "m.pt", 64, 1, 8))
        self.assertEqual(t.server_args, ["--device=cuda", "--precision=fp16",
                                         "--optimize=auto", "--channels_last"])
        self.assertEqual(t.cq_threads, 2)
        # The floor runs pinned as the sweep does.
        self.assertEqual((t.server_cpus, t.client_cpus), ("0", "1"))


@unittest.skipUnless(hasattr(os, "sched_setaffinity"), "pinning is Linux-only")
class TransportPinningTest(unittest.TestCase):
    def test_a_server_started_with_cpus_runs_on_them_only(self):
        import tempfile
        cpu = sorted(os.sched_getaffinity(0))[-1]
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "log")
            code = ("import os, sys, time; print('ready', sorted(os.sched_getaffinity(0)));"
                    " sys.stdout.flush(); time.sleep(60)")
            p = transport.Proc([sys.executable, "-c", code], log, "ready", timeout=30,
                               cpus=[cpu])
            p.stop()
            self.assertIn(f"ready [{cpu}]", open(log).read())
            unpinned = transport.Proc([sys.executable, "-c", code], log, "ready", timeout=30)
            unpinned.stop()
            self.assertIn(f"ready {sorted(os.sched_getaffinity(0))}", open(log).read())

    def test_cpus_not_here_are_refused_naming_the_flag(self):
        with self.assertRaisesRegex(SystemExit, "--client_cpus=4096: not all"):
            run.check_cpus("--client_cpus", [4096])
        run.check_cpus("--client_cpus", None)


class RawForwardTest(unittest.TestCase):
    def test_gap_run_asks_runtime_bench_for_it_and_reads_manual_time_names(self):
        import argparse
        import json
        seen = []

        def fake_run(cmd, cpus=None, **kw):
            seen.append(cmd)
            return json.dumps({"benchmarks": [{
                "name": "Forward/m/full/1/manual_time", "real_time": 2.5,
                "items_per_second": 400.0, "label": "active=full device=cuda"}]})

        a = argparse.Namespace(build="b", device="cuda", threads=8, model="m", batches="1,64",
                               precision="fp32", channels_last=False, raw_min_time=1)
        saved, run.run = run.run, fake_run
        try:
            rows = run.raw_forward(a, "full", "1", 1000)
        finally:
            run.run = saved
        self.assertEqual(rows[1]["batch_ms"], 2.5)
        self.assertIn("--gap_us=1000", seen[0])
        self.assertIn("--batches=1", seen[0])


class PoliciesTest(unittest.TestCase):
    def test_spec_becomes_server_flags(self):
        got = policies.parse("unbatched,fixed:2ms,adaptive:5ms")
        self.assertEqual(got[0], ("unbatched", ["--batching=fixed"], 1, None))
        self.assertEqual(got[1], ("fixed:2ms", ["--batching=fixed", "--max_queue_delay=2ms"],
                                  None, None))
        self.assertEqual(got[2][1], ["--batching=adaptive", "--max_queue_delay=5ms"])

    def test_a_policy_may_name_another_binary(self):
        got = policies.parse("adaptive:2ms@/tmp/before/metalserve,adaptive:2ms")
        self.assertEqual(got[0], ("adaptive:2ms@/tmp/before/metalserve",
                                  ["--batching=adaptive", "--max_queue_delay=2ms"], None,
                                  "/tmp/before/metalserve"))
        self.assertIsNone(got[1][3])
        with self.assertRaisesRegex(SystemExit, "needs a metalserve binary"):
            policies.parse("fixed:1ms@")

    def test_policy_without_delay_or_unknown_is_refused(self):
        with self.assertRaisesRegex(SystemExit, "needs a delay"):
            policies.parse("fixed")
        with self.assertRaisesRegex(SystemExit, "'greedy'"):
            policies.parse("greedy")

    def test_goals_compare_against_unbatched_and_the_best_fixed_delay(self):
        table = {"unbatched": [point(1, 100, 1000), point(64, 500, 9000)],
                 "fixed:1ms": [point(1, 50, 2000), point(64, 900, 5000)],
                 "fixed:5ms": [point(1, 20, 6000), point(64, 1000, 6000)],
                 "adaptive:5ms": [point(1, 98, 1020), point(64, 950, 5000)]}
        g = policies.goals(table, [1, 64])["adaptive:5ms"]
        self.assertEqual(g[0], "c=1 p50 1.020x unbatched (goal <= 1.05)")
        self.assertEqual(g[1], "c=64 0.950x best fixed (fixed:5ms) (goal >= 1)")

    def test_goals_with_rounds_add_the_round_by_round_ratio(self):
        adaptive, fixed = point(64, 900, 5000), point(64, 950, 5000)
        adaptive["rounds_requests_per_s"] = [900, 1200, 800, 1000]
        fixed["rounds_requests_per_s"] = [1000, 1000, 1000, 950]
        table = {"fixed:1ms": [fixed], "adaptive:5ms": [adaptive]}
        g = policies.goals(table, [64])["adaptive:5ms"]
        # Ratios 0.8, 0.9, 1.0526, 1.2: median of the middle two.
        self.assertEqual(g, ["c=64 0.947x best fixed (fixed:1ms); round by round "
                             "0.976x, 2/4 rounds >= 1, range 0.800-1.200; "
                             "best round 1.200x (fixed:1ms's) (goal >= 1)"])
        # One round: no paired figure.
        del adaptive["rounds_requests_per_s"]
        self.assertEqual(policies.goals(table, [64])["adaptive:5ms"],
                         ["c=64 0.947x best fixed (fixed:1ms) (goal >= 1)"])

    def test_rounds_report_each_levels_median_round(self):
        rounds = [[point(64, 900, 5000), point(256, 1000, 9000)],
                  [point(64, 500, 9000), point(256, 3000, 3000)],
                  [point(64, 700, 7000), point(256, 2000, 4000)]]
        got = policies.median_rounds(rounds)
        self.assertEqual([r["requests_per_s"] for r in got], [700, 2000])
        self.assertEqual(got[0]["latency_us"]["p50"], 7000)
        self.assertEqual(got[1]["rounds_requests_per_s"], [1000, 3000, 2000])
        self.assertEqual(got[1]["rounds_p99_ms"], [9.0, 3.0, 4.0])

    def test_best_round_is_taken_over_every_fixed_delay(self):
        adaptive = point(256, 900, 5000)
        adaptive["rounds_requests_per_s"] = [700, 900, 1040]
        f0, f5 = point(256, 1000, 5000), point(256, 950, 5000)
        f0["rounds_requests_per_s"] = [1000, 990, 600]
        f5["rounds_requests_per_s"] = [500, 950, 1300]  # the best round is not the best median
        got = policies.best_rounds(adaptive, {"fixed:0ms": f0, "fixed:5ms": f5})
        self.assertEqual(got, "best round 0.800x (fixed:5ms's)")
        del adaptive["rounds_requests_per_s"]
        self.assertEqual(policies.best_rounds(adaptive, {"fixed:0ms": f0}), "")

    def test_goals_add_the_servers_cpu_per_request_round_by_round(self):
        adaptive, fixed = point(256, 1000, 5000), point(256, 1000, 5000)
        adaptive["rounds_requests_per_s"] = [1000, 1000, 1000]
        fixed["rounds_requests_per_s"] = [1000, 1000, 1000]
        adaptive["rounds_server_cpu_us_per_request"] = [27.0, 30.0, 24.0]
        fixed["rounds_server_cpu_us_per_request"] = [30.0, 30.0, 30.0]
        table = {"fixed:5ms": [fixed], "adaptive:5ms": [adaptive]}
        g = policies.goals(table, [256])["adaptive:5ms"][0]
        self.assertTrue(g.endswith("; server CPU per request round by round 0.900x, "
                                   "1/3 rounds >= 1, range 0.800-1.000"), g)
        # A round without the figure (no /proc): none given.
        adaptive["rounds_server_cpu_us_per_request"][1] = None
        g = policies.goals(table, [256])["adaptive:5ms"][0]
        self.assertNotIn("server CPU", g)

    def test_cpu_per_request_counts_the_ok_answers_between_scrapes(self):
        ok = 'metalserve_requests_total{code="OK",method="Predict",model="m",version="1"}'
        bad = 'metalserve_requests_total{code="INTERNAL",method="Predict",model="m",version="1"}'
        kserve = 'metalserve_requests_total{code="OK",method="ModelInfer",model="m",version="1"}'
        m0 = {ok: 100.0, bad: 5.0, kserve: 0.0}
        m1 = {ok: 1100.0, bad: 500.0, kserve: 1000.0}
        self.assertAlmostEqual(run.cpu_per_request_us(1.0, 1.05, m0, m1), 25.0)
        self.assertIsNone(run.cpu_per_request_us(None, 1.05, m0, m1))
        self.assertIsNone(run.cpu_per_request_us(1.0, 1.05, m0, m0))

    def test_cpu_lists(self):
        self.assertIsNone(run.parse_cpus(""))
        self.assertEqual(run.parse_cpus("1"), [1])
        self.assertEqual(run.parse_cpus("0,2-3, 2"), [0, 2, 3])
        for bad in ("x", "3-1", "-1", "1,"):
            with self.assertRaises(SystemExit, msg=bad):
                run.parse_cpus(bad)


if __name__ == "__main__":
    unittest.main()
