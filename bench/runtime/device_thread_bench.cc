// What a hand-off to a device thread costs at light load, with and without
// polling (DeviceThread::Options::spin): the pattern of one client at a time
// on an accelerator. Each iteration is one RunSync of an item that keeps its
// core busy for --work (the forward, as the device thread sees it), timed
// from the call to its return; between iterations the caller is busy for
// the gap (receiving the next request), so without polling the device
// thread has gone to sleep by the next call. Reported per iteration: the
// RunSync's wall time less the item's work ("handoff_us", both thread
// switches), the whole process's CPU time ("process_cpu_us": the gap's and
// the item's busy work, the hand-offs and any polling), and how many times
// the device thread slept and how many calls caught their end while
// polling.
//
//   build/bench/runtime/device_thread_bench
//
// Torch-free; busy-waits instead of sleeping so that only the hand-offs wake
// threads. Each spin/gap pair runs in the same process, side by side.
#include <time.h>

#include <chrono>
#include <cstdint>
#include <memory>

#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "server/runtime/device_thread.h"

namespace metalserve {
namespace {

void BusyFor(std::chrono::nanoseconds d) {
  const auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
  }
}

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Args: spin (us), gap between calls (us), work per item (us).
void BM_RunSyncAtLightLoad(benchmark::State& state) {
  const absl::Duration spin = absl::Microseconds(state.range(0));
  const std::chrono::microseconds gap(state.range(1));
  const std::chrono::microseconds work(state.range(2));
  std::shared_ptr<DeviceThread> dt = DeviceThread::Create("cuda:0", {.spin = spin});
  double handoff_s = 0;
  const double cpu_start = ProcessCpuSeconds();
  for (auto _ : state) {
    BusyFor(gap);
    const auto start = std::chrono::steady_clock::now();
    (void)dt->RunSync("m:1", [work] { BusyFor(work); });
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    state.SetIterationTime(took.count());
    handoff_s += took.count() - std::chrono::duration<double>(work).count();
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["process_cpu_us"] = 1e6 * (ProcessCpuSeconds() - cpu_start) / n;
  state.counters["handoff_us"] = 1e6 * handoff_s / n;
  state.counters["sleeps_per_call"] = static_cast<double>(dt->sleeps()) / n;
  state.counters["caught_polling_per_call"] = static_cast<double>(dt->caught_polling()) / n;
}
BENCHMARK(BM_RunSyncAtLightLoad)
    ->ArgNames({"spin_us", "gap_us", "work_us"})
    ->Args({0, 300, 200})
    ->Args({1000, 300, 200})
    ->Args({0, 300, 1400})  // a ResNet-50 forward's length on an H100
    ->Args({1000, 300, 1400})
    ->Args({0, 2000, 200})
    ->Args({1000, 2000, 200})
    ->Args({0, 2000, 1400})  // sparse calls: the device thread sleeps between them
    ->Args({1000, 2000, 1400})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace metalserve

BENCHMARK_MAIN();
