// Load generator against an in-process fake server on 127.0.0.1.
//
// Timing tolerances are deliberately generous (stated per test) because CI
// has two shared cores running client and server in one process. Every run
// is bounded by a request count or a duration of at most about 1 s.
#include "client/load_generator.h"

#include <algorithm>
#include <set>
#include <string>

#include "client/channel_factory.h"
#include "client/report.h"
#include "client/request_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/fake_inference_server.h"
#include "tests/testing/status_matchers.h"

namespace metalserve::client {
namespace {

using ::metalserve::testing::FakeInferenceServer;
using ::metalserve::testing::FakeServerOptions;
using ::metalserve::testing::StatusIs;
using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::EndsWith;
using ::testing::Pair;
using ::testing::StartsWith;

v1::PredictRequest SmallRequest(int64_t rows, const std::string& model = "") {
  v1::PredictRequest req;
  req.set_model_name(model);
  v1::Tensor* t = req.add_inputs();
  t->set_name("input");
  t->set_dtype(v1::DATA_TYPE_FLOAT32);
  t->add_shape(rows);
  t->add_shape(4);
  t->mutable_data()->assign(static_cast<size_t>(rows * 16), '\0');
  return req;
}

std::unique_ptr<LoadGenerator> MakeGenerator(const FakeInferenceServer& server,
                                             int64_t rows = 1,
                                             const std::string& model = "") {
  auto gen = LoadGenerator::Create({server.NewChannel()}, SmallRequest(rows, model));
  EXPECT_TRUE(gen.ok()) << gen.status();
  return *std::move(gen);
}

TEST(LoadGeneratorTest, ClosedLoopThroughputIsConcurrencyOverDelay) {
  // Tolerance: throughput within 35% of concurrency / delay; latency
  // percentiles at least the delay and at most 1.5x delay + 5 ms. The delay
  // is long enough (20 ms) that scheduling noise on a loaded 2-core machine,
  // or under a sanitizer, stays inside the bounds.
  constexpr absl::Duration kDelay = absl::Milliseconds(20);
  constexpr int kConcurrency = 4;
  auto server = FakeInferenceServer::Start({.delay = kDelay});
  auto gen = MakeGenerator(*server, /*rows=*/3);
  LoadSpec spec;
  spec.concurrency = kConcurrency;
  spec.duration = absl::Seconds(1);
  spec.warmup = absl::Milliseconds(100);
  auto stats = gen->Run(spec);
  ASSERT_TRUE(stats.ok()) << stats.status();

  const double expected = kConcurrency / absl::ToDoubleSeconds(kDelay);  // 200/s
  EXPECT_NEAR(stats->RequestsPerSecond(), expected, 0.35 * expected);
  EXPECT_DOUBLE_EQ(stats->RowsPerSecond(), 3 * stats->RequestsPerSecond());
  EXPECT_TRUE(stats->errors.empty());
  for (double p : {50.0, 90.0}) {
    EXPECT_GE(stats->latency.Percentile(p), kDelay) << "p" << p;
    EXPECT_LE(stats->latency.Percentile(p), 1.5 * kDelay + absl::Milliseconds(5))
        << "p" << p;
  }
  EXPECT_DOUBLE_EQ(stats->MeanServerQueueUs(), FakeInferenceServer::kQueueTimeUs);
  EXPECT_DOUBLE_EQ(stats->MeanServerComputeUs(), absl::ToInt64Microseconds(kDelay));
  EXPECT_DOUBLE_EQ(stats->MeanBatchRows(), 3);
  EXPECT_GE(stats->elapsed, absl::Seconds(1));
}

// --concurrency N keeps exactly N calls outstanding. The server stalls for
// 300 ms at its 5th request: every connection's call then waits in the
// server at once, so the server's peak in-flight count is N; one connection
// fewer (or more) shows there, whatever the throughput tolerance above.
TEST(LoadGeneratorTest, ConcurrencyIsTheNumberOfCallsInFlightAtTheServer) {
  for (const int concurrency : {1, 3, 6}) {
    SCOPED_TRACE(concurrency);
    auto server = FakeInferenceServer::Start({.delay = absl::Milliseconds(5),
                                              .stall_at_request = 5,
                                              .stall = absl::Milliseconds(300)});
    auto gen = MakeGenerator(*server);
    LoadSpec spec;
    spec.concurrency = concurrency;
    spec.max_requests = 5 + 2 * concurrency;
    auto stats = gen->Run(spec);
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->ok, spec.max_requests);
    EXPECT_EQ(server->peak_in_flight(), concurrency);
  }
}

TEST(LoadGeneratorTest, RequestCountIsExactAndWarmupIsNotCounted) {
  auto server = FakeInferenceServer::Start({.delay = absl::ZeroDuration()});
  auto gen = MakeGenerator(*server);
  LoadSpec spec;
  spec.concurrency = 8;
  spec.max_requests = 100;
  spec.warmup = absl::Milliseconds(50);
  auto stats = gen->Run(spec);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->ok, 100);
  EXPECT_EQ(stats->latency.Count(), 100);
  EXPECT_GT(server->received(), 100);  // warmup calls reached the server too
}

TEST(LoadGeneratorTest, CountsErrorsPerCodeAndExitCodeFollowsMaxErrorRate) {
  auto server = FakeInferenceServer::Start(
      {.delay = absl::Milliseconds(1), .fail_every = 4});
  auto gen = MakeGenerator(*server);
  LoadSpec spec;
  spec.concurrency = 4;
  spec.max_requests = 200;
  auto stats = gen->Run(spec);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->ok, 150);
  EXPECT_THAT(stats->errors, ElementsAre(Pair("INVALID_ARGUMENT", 50)));
  EXPECT_DOUBLE_EQ(stats->ErrorRate(), 0.25);
  EXPECT_EQ(stats->latency.Count(), 150);  // only successes are timed

  const std::vector<RunReport> reports = {{spec, *stats}};
  EXPECT_EQ(ExitCodeFor(reports, 0.1), kExitErrorRateExceeded);
  EXPECT_EQ(ExitCodeFor(reports, 0.25), 0);
  EXPECT_EQ(ExitCodeFor(reports, 1.0), 0);
}

TEST(LoadGeneratorTest, KeepsTheFirstFewDistinctErrorMessagesPerCode) {
  // 20 requests, every 2nd fails with a message naming its request number:
  // 10 distinct messages, of which kMaxMessagesPerCode are kept.
  auto server = FakeInferenceServer::Start(
      {.delay = absl::ZeroDuration(), .fail_every = 2});
  auto gen = MakeGenerator(*server);
  LoadSpec spec;
  spec.concurrency = 2;
  spec.max_requests = 20;
  auto stats = gen->Run(spec);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_THAT(stats->errors, ElementsAre(Pair("INVALID_ARGUMENT", 10)));
  ASSERT_EQ(stats->error_messages.size(), 1u);
  const std::vector<std::string>& kept = stats->error_messages["INVALID_ARGUMENT"];
  EXPECT_EQ(kept.size(), static_cast<size_t>(kMaxMessagesPerCode));
  EXPECT_THAT(kept, Each(StartsWith("fake failure requested #")));
  EXPECT_EQ(std::set<std::string>(kept.begin(), kept.end()).size(), kept.size());
}

TEST(LoadGeneratorTest, LongErrorMessagesAreCut) {
  auto server = FakeInferenceServer::Start({.delay = absl::ZeroDuration(),
                                            .fail_every = 1,
                                            .fail_message = std::string(5000, 'e')});
  auto gen = MakeGenerator(*server);
  LoadSpec spec;
  spec.max_requests = 2;
  auto stats = gen->Run(spec);
  ASSERT_TRUE(stats.ok()) << stats.status();
  for (const std::string& m : stats->error_messages["INVALID_ARGUMENT"]) {
    EXPECT_EQ(m.size(), kMaxMessageBytes);
    EXPECT_THAT(m, EndsWith("..."));
  }
  // Both requests' messages are cut at the same place, so they are one.
  EXPECT_EQ(stats->error_messages["INVALID_ARGUMENT"].size(), 1u);
}

TEST(LoadGeneratorTest, ServerQueueTimesGiveRealPercentilesNotOnlyTheMean) {
  // Request n reports queue_time_us = 100 * ((n - 1) % 10 + 1): 100..1000,
  // ten of each over 100 requests, so p50 = 500, p90 = 900, p99 = 1000 and
  // the mean is 550 (percentiles within the histogram's 1%).
  auto server = FakeInferenceServer::Start(
      {.delay = absl::ZeroDuration(), .queue_time_cycle = 10});
  auto gen = MakeGenerator(*server);
  LoadSpec spec;
  spec.concurrency = 4;
  spec.max_requests = 100;
  auto stats = gen->Run(spec);
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->ok, 100);
  EXPECT_DOUBLE_EQ(stats->MeanServerQueueUs(), 550);
  EXPECT_EQ(stats->server_queue.Count(), 100);
  auto us = [](absl::Duration d) { return absl::ToDoubleMicroseconds(d); };
  EXPECT_NEAR(us(stats->server_queue.Percentile(50)), 500, 5);
  EXPECT_NEAR(us(stats->server_queue.Percentile(90)), 900, 9);
  EXPECT_NEAR(us(stats->server_queue.Percentile(99)), 1000, 10);
  EXPECT_EQ(stats->server_compute.Count(), 100);
  EXPECT_EQ(stats->server_compute.Max(), absl::ZeroDuration());
}

TEST(LoadGeneratorTest, DeadlineExpiryIsCountedAsDeadlineExceeded) {
  auto server = FakeInferenceServer::Start({.delay = absl::Milliseconds(300)});
  auto gen = MakeGenerator(*server);
  LoadSpec spec;
  spec.concurrency = 2;
  spec.max_requests = 4;
  spec.deadline = absl::Milliseconds(20);
  auto stats = gen->Run(spec);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->ok, 0);
  EXPECT_THAT(stats->errors, ElementsAre(Pair("DEADLINE_EXCEEDED", 4)));
  EXPECT_LT(stats->elapsed, absl::Milliseconds(290));  // did not wait for the server
}

TEST(LoadGeneratorTest, OpenLoopKeepsScheduleWhileServerStalls) {
  // 200 req/s for 1 s; the 40th request (t ~ 0.2 s) stalls the server for
  // 200 ms. A closed loop would stop sending during the stall; the open loop
  // must send ~40 requests inside the window (asserted >= 30) and their
  // waiting must show up in the tail (max >= 150 ms, p95 >= 50 ms).
  auto server = FakeInferenceServer::Start({.delay = absl::Milliseconds(1),
                                            .stall_at_request = 40,
                                            .stall = absl::Milliseconds(200)});
  auto gen = MakeGenerator(*server);
  LoadSpec spec;
  spec.rate = 200;
  spec.duration = absl::Seconds(1);
  auto stats = gen->Run(spec);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->ok, 200);
  EXPECT_TRUE(stats->errors.empty());

  const auto window = server->stall_window();
  ASSERT_TRUE(window.has_value());
  const auto arrivals = server->arrivals();
  const auto in_stall = std::count_if(arrivals.begin(), arrivals.end(), [&](auto t) {
    return t > window->first && t < window->second;
  });
  EXPECT_GE(in_stall, 30);
  EXPECT_GE(stats->latency.Max(), absl::Milliseconds(150));
  EXPECT_LE(stats->latency.Max(), absl::Milliseconds(400));
  EXPECT_GE(stats->latency.Percentile(95), absl::Milliseconds(50));
  EXPECT_LT(stats->latency.Percentile(50), absl::Milliseconds(20));
}

TEST(LoadGeneratorTest, ClosedLoopStopsSendingWhileServerStalls) {
  // The contrast to the open loop: one outstanding call means at most one
  // arrival inside the stall window (two allowed for edge timing).
  auto server = FakeInferenceServer::Start({.delay = absl::Milliseconds(1),
                                            .stall_at_request = 20,
                                            .stall = absl::Milliseconds(200)});
  auto gen = MakeGenerator(*server);
  LoadSpec spec;
  spec.concurrency = 1;
  spec.max_requests = 60;
  auto stats = gen->Run(spec);
  ASSERT_TRUE(stats.ok()) << stats.status();
  const auto window = server->stall_window();
  ASSERT_TRUE(window.has_value());
  const auto arrivals = server->arrivals();
  const auto in_stall = std::count_if(arrivals.begin(), arrivals.end(), [&](auto t) {
    return t > window->first && t < window->second;
  });
  EXPECT_LE(in_stall, 2);
}

TEST(LoadGeneratorTest, OpenLoopCountsOverflowInsteadOfDelaying) {
  // 100 req/s for 0.5 s = 50 due calls; each takes 100 ms and at most 2 may
  // be in flight, so most due calls overflow. Every due call is accounted
  // for, either sent or counted as CLIENT_OVERFLOW.
  auto server = FakeInferenceServer::Start({.delay = absl::Milliseconds(100)});
  auto gen = MakeGenerator(*server);
  LoadSpec spec;
  spec.rate = 100;
  spec.max_outstanding = 2;
  spec.duration = absl::Milliseconds(500);
  auto stats = gen->Run(spec);
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->errors.count(kOverflowError), 1u);
  EXPECT_EQ(stats->ok + stats->errors.at(kOverflowError), 50);
  EXPECT_GE(stats->errors.at(kOverflowError), 30);
  EXPECT_EQ(server->received(), stats->ok);
}

TEST(LoadGeneratorTest, SeveralTargetsAreSpreadRoundRobin) {
  // A 2 ms reply keeps the run (about 200 ms) long against the few
  // milliseconds one connection may be ready before the other, during which
  // round_robin sends everything to the ready one.
  auto a = FakeInferenceServer::Start({.delay = absl::Milliseconds(2)});
  auto b = FakeInferenceServer::Start({.delay = absl::Milliseconds(2)});
  ChannelOptions copts;
  copts.targets = {a->address(), b->address()};
  auto channels = CreateChannels(copts);
  ASSERT_TRUE(channels.ok()) << channels.status();
  auto gen = LoadGenerator::Create(*channels, SmallRequest(1));
  ASSERT_TRUE(gen.ok());
  LoadSpec spec;
  spec.concurrency = 4;
  spec.max_requests = 400;
  auto stats = (*gen)->Run(spec);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->ok, 400);
  EXPECT_EQ(a->received() + b->received(), 400);
  // round_robin alternates per call: each gets at least a quarter.
  EXPECT_GE(a->received(), 100);
  EXPECT_GE(b->received(), 100);
}

TEST(LoadGeneratorTest, StopEndsRunAndRefusesTheNext) {
  auto server = FakeInferenceServer::Start({.delay = absl::Milliseconds(1)});
  auto gen = MakeGenerator(*server);
  LoadSpec spec;
  spec.concurrency = 2;
  spec.duration = absl::Seconds(60);
  spec.warmup = absl::Seconds(60);
  int calls = 0;
  auto stats = gen->Run(spec, [&](const Progress& p) {
    ++calls;
    EXPECT_TRUE(p.warmup);
    gen->Stop();  // from the progress callback: after about one second
  });
  EXPECT_THAT(stats, StatusIs(absl::StatusCode::kCancelled));
  EXPECT_EQ(calls, 1);
}

TEST(LoadGeneratorTest, RejectsUnboundedOrInvalidSpecs) {
  auto server = FakeInferenceServer::Start({});
  auto gen = MakeGenerator(*server);
  LoadSpec unbounded;
  EXPECT_THAT(gen->Run(unbounded), StatusIs(absl::StatusCode::kInvalidArgument));
  LoadSpec zero_concurrency;
  zero_concurrency.concurrency = 0;
  zero_concurrency.max_requests = 1;
  EXPECT_THAT(gen->Run(zero_concurrency), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(server->received(), 0);
}

}  // namespace
}  // namespace metalserve::client
