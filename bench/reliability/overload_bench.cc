// Overload at 10x capacity, in process: the real server (service, batcher,
// executor) over 127.0.0.1 with a fake runner that takes a fixed time per
// batch, driven open loop at ten times what it can serve.
//
// Two cases: 1-row requests of 16 bytes, capacity 8 rows / 10 ms = 800
// req/s, offered 8,000 req/s for 3 s; and 1-row requests of one fp32
// 3x224x224 image (602,112 bytes), 8 rows / 250 ms = 32 req/s, offered 320
// req/s for 6 s (issue 17: refused large requests used to be parsed in full
// first, costing goodput and accepted p99). Reports
//   goodput_req_per_s                accepted answers per second
//   refused_p50_us / refused_p99_us  latency of UNAVAILABLE refusals (should
//                                    be far below one compute time: immediate)
//   accepted_p99_us                  latency of accepted requests, against
//   accepted_bound_us                max_queue_delay + (queue/batch + 1) x
//                                    compute, the longest an accepted request
//                                    can wait when the queue is full
//   rss_growth_kib                   VmRSS after the run minus before it
//   accepted, refused, other         counts (other must be 0)
//
// Run: build/bench/reliability/overload_bench
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "benchmark/benchmark.h"
#include "grpcpp/grpcpp.h"
#include "metalserve/v1/inference.grpc.pb.h"
#include "server/metrics/metrics.h"
#include "server/service/server.h"
#include "tests/testing/fake_runner.h"

namespace metalserve {
namespace {

// FakeRunner that takes `delay` per batch, whatever its size (a device that
// is latency-bound at these batch sizes), with an input `width` floats wide
// (4: the fake's own; 150,528: one 3x224x224 fp32 image, 602,112 bytes).
class DelayRunner final : public Runner {
 public:
  DelayRunner(absl::Duration delay, int64_t width) : delay_(delay) {
    info_ = fake_.info();
    info_.inputs[0].shape = {-1, width};
    info_.outputs[0].shape = {-1, width};
  }
  const ModelInfo& info() const override { return info_; }
  absl::StatusOr<std::vector<Tensor>> Run(const std::vector<Tensor>& in) override {
    absl::SleepFor(delay_);
    return fake_.Run(in);
  }
  MemoryStats Memory() override { return {}; }
  void BetweenBatches(bool idle) override { fake_.BetweenBatches(idle); }

 private:
  FakeRunner fake_;
  ModelInfo info_;
  const absl::Duration delay_;
};

int64_t RssKib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return -1;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p / 100 * v.size()))];
}

struct Call {
  grpc::ClientContext ctx;
  v1::PredictRequest req;
  v1::PredictResponse resp;
  absl::Time sent;
};

// Args: input width in floats, compute per batch in ms.
void BM_OverloadTenTimesCapacity(benchmark::State& state) {
  const int64_t width = state.range(0);
  const absl::Duration compute = absl::Milliseconds(state.range(1));
  ServerOptions so;
  so.address = "127.0.0.1:0";
  so.batching.max_batch_size = 8;
  so.batching.max_queue_size = 64;
  so.batching.max_queue_delay = absl::Milliseconds(2);
  so.batching.num_executors = 1;
  const double capacity = so.batching.max_batch_size / absl::ToDoubleSeconds(compute);
  const double rate = 10 * capacity;
  const absl::Duration run_for = absl::Seconds(width > 1000 ? 6 : 3);
  const absl::Duration bound =
      so.batching.max_queue_delay +
      (so.batching.max_queue_size / so.batching.max_batch_size + 1) * compute;

  DelayRunner runner(compute, width);
  MetricsOptions mo;
  mo.listen_address = "";
  auto metrics = *Metrics::Create(mo);
  auto server = *InferenceServer::Start(so, &runner, metrics.get());
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server->port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::Inference::NewStub(channel);

  v1::PredictRequest proto;
  auto* t = proto.add_inputs();
  t->set_name("input");
  t->set_dtype(v1::DATA_TYPE_FLOAT32);
  t->add_shape(1);
  t->add_shape(width);
  t->set_data(std::string(4 * width, '\0'));

  for (auto _ : state) {
    const int64_t rss_before = RssKib();
    absl::Mutex mu;
    std::vector<double> accepted_us, refused_us;
    int other = 0, done = 0;
    int sent = 0;
    const absl::Duration gap = absl::Seconds(1) / rate;
    const absl::Time start = absl::Now();
    for (absl::Time next = start; next < start + run_for; next += gap) {
      absl::SleepFor(next - absl::Now());
      Call* c = new Call;  // deleted by its callback: RSS measures the server
      ++sent;
      c->req = proto;
      c->ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
      c->sent = absl::Now();
      stub->async()->Predict(&c->ctx, &c->req, &c->resp, [&, c](grpc::Status s) {
        const double us = absl::ToDoubleMicroseconds(absl::Now() - c->sent);
        absl::MutexLock l(&mu);
        if (s.ok()) {
          accepted_us.push_back(us);
        } else if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
          refused_us.push_back(us);
        } else {
          ++other;
        }
        ++done;
        delete c;
      });
    }
    {
      absl::MutexLock l(&mu);
      const int total = sent;
      auto all_done = [&] { return done == total; };
      mu.Await(absl::Condition(&all_done));
    }
    const double elapsed_s = absl::ToDoubleSeconds(absl::Now() - start);
    const int64_t rss_after = RssKib();
    state.counters["offered_req_per_s"] = rate;
    state.counters["capacity_req_per_s"] = capacity;
    state.counters["accepted"] = static_cast<double>(accepted_us.size());
    // Accepted answers per second from the first send to the last answer.
    state.counters["goodput_req_per_s"] = accepted_us.size() / elapsed_s;
    state.counters["refused"] = static_cast<double>(refused_us.size());
    state.counters["other"] = other;
    state.counters["refused_p50_us"] = Percentile(refused_us, 50);
    state.counters["refused_p99_us"] = Percentile(refused_us, 99);
    state.counters["accepted_p50_us"] = Percentile(accepted_us, 50);
    state.counters["accepted_p99_us"] = Percentile(accepted_us, 99);
    state.counters["accepted_bound_us"] = absl::ToDoubleMicroseconds(bound);
    state.counters["rss_before_kib"] = static_cast<double>(rss_before);
    state.counters["rss_growth_kib"] = static_cast<double>(rss_after - rss_before);
  }
  server->Shutdown(absl::Seconds(10));
}
BENCHMARK(BM_OverloadTenTimesCapacity)
    ->Args({FakeRunner::kWidth, 10})  // 16-byte requests, 800 req/s capacity
    ->Args({150528, 250})             // 602,112-byte requests, 32 req/s capacity
    ->Iterations(1)->Repetitions(2)
    ->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace metalserve

BENCHMARK_MAIN();
