// Client CPU per request of the load generator (target: <= 25 us of client
// CPU per small request).
//
// The trivial server (delay 0, one float32 row of 4) runs in a forked child
// process so that getrusage(RUSAGE_SELF) in this process counts the client
// alone: request serialisation, gRPC client stack, callbacks, recording.
// The child exits when this process closes the pipe to it.
//
// Run: build/bench/client/client_bench
// Counters: client_cpu_us_per_req (user + system), req_per_s.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "benchmark/benchmark.h"
#include "client/channel_factory.h"
#include "client/load_generator.h"
#include "tests/client/fake_inference_server.h"

namespace metalserve::client {
namespace {

constexpr int64_t kRequestsPerIteration = 5000;
std::string g_target;

double CpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto sec = [](const timeval& tv) { return tv.tv_sec + tv.tv_usec / 1e6; };
  return sec(ru.ru_utime) + sec(ru.ru_stime);
}

v1::PredictRequest SmallRequest() {
  v1::PredictRequest req;
  v1::Tensor* t = req.add_inputs();
  t->set_name("input");
  t->set_dtype(v1::DATA_TYPE_FLOAT32);
  t->add_shape(1);
  t->add_shape(4);
  t->mutable_data()->assign(16, '\0');
  return req;
}

void BM_ClosedLoopClientCpu(benchmark::State& state) {
  ChannelOptions copts;
  copts.targets = {g_target};
  auto channels = CreateChannels(copts);
  auto gen = LoadGenerator::Create(*channels, SmallRequest());
  if (!channels.ok() || !gen.ok()) {
    state.SkipWithError("cannot create the load generator");
    return;
  }
  LoadSpec spec;
  spec.concurrency = static_cast<int>(state.range(0));
  spec.max_requests = kRequestsPerIteration;
  (void)(*gen)->Run(spec);  // connect and warm up outside the measurement
  int64_t requests = 0;
  double cpu = 0;
  absl::Duration elapsed;
  for (auto _ : state) {
    const double before = CpuSeconds();
    auto stats = (*gen)->Run(spec);
    cpu += CpuSeconds() - before;
    if (!stats.ok() || stats->ok != kRequestsPerIteration) {
      state.SkipWithError("run failed");
      return;
    }
    requests += stats->ok;
    elapsed += stats->elapsed;
  }
  state.counters["client_cpu_us_per_req"] = 1e6 * cpu / requests;
  state.counters["req_per_s"] = requests / absl::ToDoubleSeconds(elapsed);
}
BENCHMARK(BM_ClosedLoopClientCpu)
    ->Arg(1)->Arg(16)->Arg(128)
    ->Iterations(3)->Unit(benchmark::kMillisecond)->UseRealTime();

// Forks the trivial server; returns its target. The child serves until the
// parent's end of `pipe` closes.
std::string ForkServer() {
  int to_child[2], from_child[2];
  if (pipe(to_child) != 0 || pipe(from_child) != 0) std::abort();
  const pid_t pid = fork();
  if (pid < 0) std::abort();
  if (pid == 0) {
    close(to_child[1]);
    close(from_child[0]);
    auto server = metalserve::testing::FakeInferenceServer::Start(
        {.delay = absl::ZeroDuration()});
    const std::string addr = server->address();
    if (write(from_child[1], addr.data(), addr.size()) < 0) std::_Exit(1);
    close(from_child[1]);
    char c;
    while (read(to_child[0], &c, 1) > 0) {
    }
    std::_Exit(0);  // skip server teardown; the process is going away
  }
  close(to_child[0]);
  close(from_child[1]);
  char buf[64] = {};
  const ssize_t n = read(from_child[0], buf, sizeof(buf) - 1);
  close(from_child[0]);
  if (n <= 0) std::abort();
  // to_child[1] stays open for the parent's life; its close ends the child.
  return std::string(buf, static_cast<size_t>(n));
}

}  // namespace
}  // namespace metalserve::client

int main(int argc, char** argv) {
  // Fork before anything starts gRPC threads in this process.
  metalserve::client::g_target = metalserve::client::ForkServer();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
