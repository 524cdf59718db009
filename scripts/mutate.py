#!/usr/bin/env python3
"""Mutation check: applies known bugs one at a time to a copy of the tree,
builds the torch-free tests there and reports which bugs the tests catch.

    scripts/mutate.py                      # every mutation
    scripts/mutate.py cancel-ignored ...   # only these
    scripts/mutate.py --list               # names, files, catching tests

Run it before changing the batching policy, the executor's failure handling,
the service's cancellation/deadline paths, the load generator or the
metrics, and after adding a test meant to catch one of these bugs. Not run
in CI: every mutation rebuilds a few targets (minutes on 2 cores).
docs/testing.md lists the mutations and the test that catches each.

The copy lives in build/mutate-tree (--dir to change it): the working tree's
tracked and untracked, not ignored files, copied afresh each run; the
source tree is never modified. Exit status: 0 when every mutation was
caught, 1 when one was missed, 2 when the unmutated tests fail or a
mutation no longer applies (its text is gone from the source: update it).
"""

import argparse
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Test binaries (build targets) run against every mutation, with the
# gtest filter that keeps the run short.
TESTS = ["batcher_test", "service_test", "reliability_test", "tls_test",
         "kserve_test", "metrics_test", "model_metrics_test", "client_loadgen_test"]
EXTRA_TARGETS = ["metalserve-bench"]  # reliability_test runs it

# (name, file, original text, mutated text, the test expected to catch it)
MUTATIONS = [
    ("delay-from-newest", "server/batcher/batch_queue.cc",
     "tasks_.front()->enqueue_time + options_.max_queue_delay",
     "tasks_.back()->enqueue_time + options_.max_queue_delay",
     "batcher_test: delay counted from the oldest request"),
    ("full-one-row-early", "server/batcher/batch_queue.cc",
     "if (rows == options_.max_batch_size) {",
     "if (rows + 1 >= options_.max_batch_size) {",
     "service_test PredictReturnsEachRequestItsOwnRows (batch_rows 8)"),
    ("wake-ignores-deadlines", "server/batcher/batch_queue.cc",
     "result.wake_at = std::min(result.wake_at, t->deadline());",
     "(void)t;",
     "batcher_test: deadline expiry while waiting for the delay"),
    ("internal-not-isolated", "server/service/batch_executor.cc",
     "out.status().code() == absl::StatusCode::kInternal)",
     "false)",
     "service_test PoisonedRequestFailsAloneAndItsBatchMatesSucceed"),
    ("oom-not-split", "server/service/batch_executor.cc",
     "(out.status().code() == absl::StatusCode::kResourceExhausted ||",
     "(false ||",
     "service_test OutOfMemorySplitsBatchAndOnlyTooLargeRequestFails"),
    ("cancel-ignored", "server/service/rpc_task.h",
     "bool IsCancelled() const override { return call_.context->IsCancelled(); }",
     "bool IsCancelled() const override { return false; }",
     "reliability_test ClientCancelWhileQueuedNeverRunsAndServerKeepsServing"),
    ("deadline-answered-cancelled", "server/batcher/batcher.cc",
     "absl::DeadlineExceededError(\n                   \"deadline passed",
     "absl::CancelledError(\n                   \"deadline passed",
     "service_test DeadlinePassedInQueueIsDeadlineExceededAndNeverRuns"),
    ("one-connection-fewer", "client/load_generator.cc",
     "for (int slot = 0; slot < spec_.concurrency; ++slot) {",
     "for (int slot = 0; slot < std::max(1, spec_.concurrency - 1); ++slot) {",
     "client_loadgen_test ConcurrencyIsTheNumberOfCallsInFlightAtTheServer"),
    ("request-not-counted", "server/metrics/metrics.cc",
     "series.requests[CodeIndex(code)]->Increment();",
     "(void)series.requests[CodeIndex(code)];",
     "metrics_test EmptyListenAddressStartsNoListenerButScrapes (count 1)"),
    ("model-request-not-counted", "server/metrics/metrics.cc",
     "m->requests[CodeIndex(code)]->Increment();",
     "(void)m->requests[CodeIndex(code)];",
     "model_metrics_test RecordsRequestsAndBatchesUnderTheirVersionOnly"),
    ("model-series-kept", "server/metrics/model_series.cc",
     "  Remove(*it->second.series);",
     "  (void)it->second.series;",
     "model_metrics_test DestroyingTheHandleRemovesEveryOneOfItsSeries"),
]


def log(msg):
    print(f"mutate: {msg}", flush=True)


def copy_tree(dest):
    """Copies the working tree's tracked and untracked, not ignored files."""
    files = subprocess.run(
        ["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others",
         "--exclude-standard"], check=True, capture_output=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = os.path.join(ROOT, rel)
        if not os.path.isfile(src):
            continue  # deleted in the working tree
        dst = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if not os.path.exists(dst) or open(src, "rb").read() != open(dst, "rb").read():
            shutil.copy2(src, dst)  # unchanged files keep their times


def configure(tree, jobs):
    build = os.path.join(tree, "build")
    args = ["cmake", "-S", tree, "-B", build, "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
            "-DMETALSERVE_WITH_TORCH=OFF", "-DMETALSERVE_BUILD_BENCH=OFF"]
    if shutil.which("ccache"):
        args.append("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    return build


def build_and_test(build, jobs, timeout_s):
    """True when every test binary passed; prints the failing tests."""
    made = subprocess.run(["cmake", "--build", build, "-j", str(jobs), "--target",
                           *TESTS, *EXTRA_TARGETS], capture_output=True, text=True)
    if made.returncode != 0:
        print(made.stdout[-3000:] + made.stderr[-3000:])
        return None  # did not build: neither caught nor missed
    ok = True
    for name in TESTS:
        binary = next((os.path.join(d, name) for d, _, fs in os.walk(build)
                       if name in fs and "CMakeFiles" not in d), None)
        if binary is None:
            print(f"  {name}: not built")
            return None
        try:
            run = subprocess.run([binary, "--gtest_brief=1"], capture_output=True,
                                 text=True, timeout=timeout_s, cwd=os.path.dirname(binary))
            failed = [line for line in run.stdout.splitlines()
                      if line.startswith("[  FAILED  ]") and "," not in line]
            if run.returncode != 0:
                ok = False
                print(f"  {name}: exit {run.returncode}; " +
                      (", ".join(f.split()[3] for f in failed if len(f.split()) > 3)
                       or "no gtest failure line"))
        except subprocess.TimeoutExpired:
            ok = False
            print(f"  {name}: timed out after {timeout_s} s")
    return ok


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="*", help="mutations to apply (default: all)")
    p.add_argument("--dir", default=os.path.join(ROOT, "build", "mutate-tree"))
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    p.add_argument("--timeout", type=int, default=120,
                   help="per test binary, s (a mutation may make a test hang)")
    p.add_argument("--list", action="store_true")
    args = p.parse_args()
    chosen = [m for m in MUTATIONS if not args.names or m[0] in args.names]
    if args.list:
        for name, path, _, _, catcher in MUTATIONS:
            print(f"{name:28} {path:36} {catcher}")
        return 0
    unknown = set(args.names) - {m[0] for m in MUTATIONS}
    if unknown:
        p.error(f"unknown mutations: {sorted(unknown)}")

    os.makedirs(args.dir, exist_ok=True)
    copy_tree(args.dir)
    build = configure(args.dir, args.jobs)
    for _, path, old, _, _ in chosen:
        if old not in open(os.path.join(args.dir, path)).read():
            log(f"stale mutation: {path} no longer holds {old!r}")
            return 2
    start = time.monotonic()
    log("baseline (no mutation): building and running the torch-free tests")
    if not build_and_test(build, args.jobs, args.timeout):
        log("the unmutated tests do not pass here; fix that first")
        return 2
    results = []
    for name, path, old, new, catcher in chosen:
        target = os.path.join(args.dir, path)
        original = open(target).read()
        log(f"{name}: {path}")
        with open(target, "w") as f:
            f.write(original.replace(old, new, 1))
        try:
            passed = build_and_test(build, args.jobs, args.timeout)
        finally:
            with open(target, "w") as f:
                f.write(original)
        verdict = {True: "MISSED", False: "caught", None: "did not build"}[passed]
        results.append((name, verdict, catcher))
        log(f"{name}: {verdict}")
    print(f"\nmutation results ({time.monotonic() - start:.0f} s):")
    for name, verdict, catcher in results:
        print(f"  {verdict:14} {name:28} expected catcher: {catcher}")
    missed = [r for r in results if r[1] != "caught"]
    print(f"{len(results) - len(missed)} of {len(results)} caught")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
