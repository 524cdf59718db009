// Load generator against an in-process fake server on 127.0.0.1.
//
// Every test whose outcome depends on time drives a SimulatedClock shared by
// the generator and the fake server, so its figures are exact: no tolerance
// bands, nothing that a loaded machine or a sanitizer can push out of
// bounds. The others are bounded by a request count and depend on counts
// only. Real time is used only as a safety bound on waits (kSafetyTimeout)
// and for gRPC's own per-call deadlines.
#include "client/load_generator.h"

#include <algorithm>
#include <set>
#include <string>
#include <map>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "client/call_transport.h"
#include "client/channel_factory.h"
#include "client/report.h"
#include "grpcpp/client_context.h"
#include "metalserve/v1/inference.grpc.pb.h"
#include "client/request_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/fake_inference_server.h"
#include "tests/testing/simulated_clock.h"
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

// Bounds every real-time wait, so a broken generator fails the test instead
// of hanging it; nothing is proved by it.
constexpr absl::Duration kSafetyTimeout = absl::Seconds(20);

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

// A simulated clock shared by the generator and the fake server: a call's
// delay is over only when the test moves time, and the test moves it only
// once every call due by then has reached the server (AwaitReceived) and
// every answer given has been recorded (AwaitFinishedCalls), so counts,
// latencies and elapsed times follow exactly from the schedule.
struct SimulatedRig {
  explicit SimulatedRig(FakeServerOptions options, int64_t rows = 1) {
    options.clock = &clock;
    server = FakeInferenceServer::Start(options);
    auto created = LoadGenerator::Create({server->NewChannel()},
                                         SmallRequest(rows), &clock);
    EXPECT_TRUE(created.ok()) << created.status();
    gen = *std::move(created);
  }
  SimulatedClock clock;
  std::unique_ptr<FakeInferenceServer> server;
  std::unique_ptr<LoadGenerator> gen;
};

// Runs gen.Run(spec) on its own thread while the test thread moves time.
class AsyncRun {
 public:
  AsyncRun(SimulatedRig& rig, const LoadSpec& spec,
           ProgressFn progress = nullptr)
      : rig_(rig), thread_([this, spec, progress] {
          result_ = rig_.gen->Run(spec, progress);
          done_.Notify();
        }) {}
  // On a failed assertion the test leaves early: stop the run and move
  // time on until it ends, so the test fails instead of hanging.
  ~AsyncRun() {
    if (!thread_.joinable()) return;
    rig_.gen->Stop();
    while (!done_.WaitForNotificationWithTimeout(absl::Milliseconds(10))) {
      rig_.clock.AdvanceTime(absl::Hours(1));
    }
    thread_.join();
  }
  // Waits (bounded, in real time) for the run to end and returns its result.
  // The join, not the notification, hands result_ over (visible to TSan).
  absl::StatusOr<RunStats> Result() {
    if (!done_.WaitForNotificationWithTimeout(kSafetyTimeout)) {
      return absl::DeadlineExceededError("run did not end");
    }
    thread_.join();
    return result_;
  }

 private:
  SimulatedRig& rig_;
  absl::Notification done_;
  absl::StatusOr<RunStats> result_;
  std::thread thread_;
};

TEST(LoadGeneratorTest, ClosedLoopThroughputIsConcurrencyOverDelay) {
  // 4 calls of exactly 20 ms kept outstanding for 1 s after a 40 ms warmup:
  // 52 steps of 4 calls, 200 of them measured, 200 calls/s, every latency
  // 20 ms.
  constexpr absl::Duration kDelay = absl::Milliseconds(20);
  constexpr int kConcurrency = 4;
  SimulatedRig rig({.delay = kDelay}, /*rows=*/3);
  LoadSpec spec;
  spec.concurrency = kConcurrency;
  spec.duration = absl::Seconds(1);
  spec.warmup = 2 * kDelay;
  AsyncRun run(rig, spec);
  for (int step = 0; step < 52; ++step) {
    ASSERT_TRUE(rig.server->AwaitReceived(kConcurrency * (step + 1))) << step;
    EXPECT_EQ(rig.server->in_flight(), kConcurrency) << step;
    rig.clock.AdvanceTime(kDelay);
  }
  auto stats = run.Result();
  ASSERT_TRUE(stats.ok()) << stats.status();

  EXPECT_EQ(stats->ok, 200);
  EXPECT_EQ(stats->elapsed, absl::Seconds(1));
  EXPECT_DOUBLE_EQ(stats->RequestsPerSecond(), 200);
  EXPECT_DOUBLE_EQ(stats->RowsPerSecond(), 600);
  EXPECT_TRUE(stats->errors.empty());
  EXPECT_EQ(stats->latency.Min(), kDelay);
  EXPECT_EQ(stats->latency.Max(), kDelay);
  EXPECT_DOUBLE_EQ(stats->MeanServerQueueUs(), FakeInferenceServer::kQueueTimeUs);
  EXPECT_DOUBLE_EQ(stats->MeanServerComputeUs(), absl::ToInt64Microseconds(kDelay));
  EXPECT_DOUBLE_EQ(stats->MeanBatchRows(), 3);
  EXPECT_EQ(rig.server->received(), 208);  // 8 warmup calls
}

// --concurrency N keeps exactly N calls outstanding. No call finishes before
// the test moves time, so every call of a step waits in the server at once:
// the server holds exactly N (fewer only in the last, partial step) and its
// peak is N; one connection fewer (or more) shows there.
TEST(LoadGeneratorTest, ConcurrencyIsTheNumberOfCallsInFlightAtTheServer) {
  for (const int concurrency : {1, 3, 6}) {
    SCOPED_TRACE(concurrency);
    SimulatedRig rig({.delay = absl::Milliseconds(5)});
    LoadSpec spec;
    spec.concurrency = concurrency;
    spec.max_requests = 5 + 2 * concurrency;
    AsyncRun run(rig, spec);
    for (int64_t sent = 0; sent < spec.max_requests; sent += concurrency) {
      const int64_t step = std::min<int64_t>(concurrency, spec.max_requests - sent);
      ASSERT_TRUE(rig.server->AwaitReceived(sent + step)) << sent;
      EXPECT_EQ(rig.server->in_flight(), step) << sent;
      rig.clock.AdvanceTime(absl::Milliseconds(5));
    }
    auto stats = run.Result();
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->ok, spec.max_requests);
    EXPECT_EQ(rig.server->received(), spec.max_requests);
    EXPECT_EQ(rig.server->peak_in_flight(), concurrency);
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

TEST(LoadGeneratorTest, CountsAnswersPerModelVersionAndVersionsThatGoBack) {
  // One slot answered by versions 1 2 2 1 3 3 (in arrival order): version 1
  // after 2 is the one regression.
  FakeServerOptions options{.delay = absl::ZeroDuration()};
  options.versions = {"1", "2", "2", "1", "3", "3"};
  auto server = FakeInferenceServer::Start(options);
  auto gen = MakeGenerator(*server);
  LoadSpec spec;
  spec.concurrency = 1;
  spec.max_requests = 6;
  auto stats = gen->Run(spec);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_THAT(stats->versions, ElementsAre(Pair("1", 2), Pair("2", 2), Pair("3", 2)));
  EXPECT_EQ(stats->model_version_regressions, 1);
}

TEST(LoadGeneratorTest, VersionsAreOrderedAsNumbersAndEachRunStartsAfresh) {
  // 2 then 10 moves forward (as numbers; as strings "10" < "2"). The next
  // run's version 1 is no regression: its slots have seen nothing yet.
  FakeServerOptions options{.delay = absl::ZeroDuration()};
  options.versions = {"2", "10", "1", "1"};
  auto server = FakeInferenceServer::Start(options);
  auto gen = MakeGenerator(*server);
  LoadSpec spec;
  spec.concurrency = 1;
  spec.max_requests = 2;
  auto stats = gen->Run(spec);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_THAT(stats->versions, ElementsAre(Pair("2", 1), Pair("10", 1)));
  EXPECT_EQ(stats->model_version_regressions, 0);
  stats = gen->Run(spec);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_THAT(stats->versions, ElementsAre(Pair("1", 2)));
  EXPECT_EQ(stats->model_version_regressions, 0);
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
  // The server's 300 ms never pass (simulated time stands still), so every
  // call ends by its real gRPC deadline while the server still holds it: the
  // run did not wait for the server. The channel is connected before the run
  // and the deadline is long (500 ms), so every call reaches the server
  // before it expires even on a loaded machine under TSan: with 20 ms and a
  // lazily connected channel, calls sometimes expired while connecting or
  // before the server had seen them. The server's count is awaited, since a
  // call's arrival there and the run's end are not ordered.
  SimulatedClock clock;
  auto server = FakeInferenceServer::Start(
      {.delay = absl::Milliseconds(300), .clock = &clock});
  std::shared_ptr<grpc::Channel> channel = server->NewChannel();
  ASSERT_TRUE(channel->WaitForConnected(absl::ToChronoTime(absl::Now() + kSafetyTimeout)));
  auto gen = LoadGenerator::Create({channel}, SmallRequest(1), &clock);
  ASSERT_TRUE(gen.ok()) << gen.status();
  LoadSpec spec;
  spec.concurrency = 2;
  spec.max_requests = 4;
  spec.deadline = absl::Milliseconds(500);
  auto stats = (*gen)->Run(spec);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->ok, 0);
  EXPECT_THAT(stats->errors, ElementsAre(Pair("DEADLINE_EXCEEDED", 4)));
  EXPECT_EQ(stats->elapsed, absl::ZeroDuration());
  ASSERT_TRUE(server->AwaitReceived(4));
  EXPECT_EQ(server->received(), 4);
  EXPECT_EQ(server->in_flight(), 4);
}

// The number of arrivals strictly inside the server's stall window.
int64_t ArrivalsInStall(const FakeInferenceServer& server) {
  const auto window = server.stall_window();
  if (!window.has_value()) return -1;
  const std::vector<absl::Time> arrivals = server.arrivals();
  return std::count_if(arrivals.begin(), arrivals.end(), [&](absl::Time t) {
    return t > window->first && t < window->second;
  });
}

TEST(LoadGeneratorTest, OpenLoopKeepsScheduleWhileServerStalls) {
  // 200 req/s for 1 s: call i is due at 5i ms and answered 5 ms later,
  // except that call 39 (the 40th, at 195 ms) opens a 200 ms stall: calls
  // 39..78 are all answered at 395 ms. A closed loop would stop sending
  // during the stall; the open loop sends calls 40..78 inside it (39), and
  // their waiting shows in the latencies (call 39: 200 ms).
  constexpr absl::Duration kGap = absl::Milliseconds(5);
  SimulatedRig rig({.delay = kGap,
                    .stall_at_request = 40,
                    .stall = absl::Milliseconds(200)});
  LoadSpec spec;
  spec.rate = 200;
  spec.duration = absl::Seconds(1);
  AsyncRun run(rig, spec);
  for (int64_t k = 0; k <= 200; ++k) {  // simulated time is k * 5 ms
    const int64_t answered = k >= 79 ? k : std::min<int64_t>(k, 39);
    ASSERT_TRUE(rig.server->AwaitReceived(std::min<int64_t>(k + 1, 200))) << k;
    ASSERT_TRUE(rig.gen->AwaitFinishedCalls(answered, kSafetyTimeout)) << k;
    rig.clock.AdvanceTime(kGap);
  }
  auto stats = run.Result();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->ok, 200);
  EXPECT_TRUE(stats->errors.empty());
  EXPECT_EQ(ArrivalsInStall(*rig.server), 39);
  LatencyHistogram expected;  // the schedule's latencies, for percentiles
  for (int64_t j = 0; j < 200; ++j) {
    expected.Record(j >= 39 && j <= 78 ? absl::Milliseconds(395 - 5 * j) : kGap);
  }
  EXPECT_EQ(stats->latency.Count(), 200);
  EXPECT_EQ(stats->latency.Max(), absl::Milliseconds(200));
  EXPECT_EQ(stats->latency.Min(), kGap);
  for (double p : {50.0, 80.0, 90.0, 95.0, 99.0}) {
    EXPECT_EQ(stats->latency.Percentile(p), expected.Percentile(p)) << "p" << p;
  }
  EXPECT_EQ(stats->elapsed, absl::Seconds(1));
}

TEST(LoadGeneratorTest, ClosedLoopStopsSendingWhileServerStalls) {
  // The contrast to the open loop: with one call outstanding, calls take
  // 1 ms each except the 20th, held for the 200 ms stall; the next call
  // goes out only when it is answered, at the window's end, so nothing
  // arrives inside the window.
  SimulatedRig rig({.delay = absl::Milliseconds(1),
                    .stall_at_request = 20,
                    .stall = absl::Milliseconds(200)});
  LoadSpec spec;
  spec.concurrency = 1;
  spec.max_requests = 60;
  AsyncRun run(rig, spec);
  for (int64_t call = 0; call < 60; ++call) {
    ASSERT_TRUE(rig.server->AwaitReceived(call + 1)) << call;
    rig.clock.AdvanceTime(call == 19 ? absl::Milliseconds(200)
                                     : absl::Milliseconds(1));
  }
  auto stats = run.Result();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->ok, 60);
  EXPECT_EQ(ArrivalsInStall(*rig.server), 0);
  EXPECT_EQ(stats->elapsed, absl::Milliseconds(59 + 200));
  EXPECT_EQ(stats->latency.Max(), absl::Milliseconds(200));
}

TEST(LoadGeneratorTest, OpenLoopCountsOverflowInsteadOfDelaying) {
  // 100 req/s for 0.5 s = 50 due calls; each takes 1 s and at most 2 may be
  // in flight, so calls 0 and 1 are sent and the other 48 overflow on
  // schedule. Before each 10 ms step the test waits until the due call was
  // sent or dropped, so each was decided at its own time.
  SimulatedRig rig({.delay = absl::Seconds(1)});
  LoadSpec spec;
  spec.rate = 100;
  spec.max_outstanding = 2;
  spec.duration = absl::Milliseconds(500);
  AsyncRun run(rig, spec);
  for (int64_t i = 0; i < 50; ++i) {
    ASSERT_TRUE(rig.server->AwaitReceived(std::min<int64_t>(i + 1, 2))) << i;
    const int64_t dropped = std::max<int64_t>(i - 1, 0);
    ASSERT_TRUE(rig.gen->AwaitFinishedCalls(dropped, kSafetyTimeout)) << i;
    rig.clock.AdvanceTime(absl::Milliseconds(10));
  }
  rig.clock.AdvanceTime(absl::Milliseconds(500));  // call 0 is answered
  ASSERT_TRUE(rig.gen->AwaitFinishedCalls(48 + 1, kSafetyTimeout));
  rig.clock.AdvanceTime(absl::Milliseconds(10));  // call 1 is answered
  auto stats = run.Result();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->ok, 2);
  EXPECT_THAT(stats->errors, ElementsAre(Pair(kOverflowError, 48)));
  EXPECT_EQ(rig.server->received(), 2);
  EXPECT_EQ(stats->latency.Min(), absl::Seconds(1));
  EXPECT_EQ(stats->elapsed, absl::Milliseconds(1010));
}

// A transport that answers every call at once, on the thread that started
// it, and records which thread started it, when (on the simulated clock)
// and on which lane: what the open loop's senders did, without a network.
class RecordingTransport : public CallTransport {
 public:
  struct Sent {
    std::thread::id thread;
    absl::Time at;
    size_t lane;
  };
  RecordingTransport(Clock* clock, size_t lanes) : clock_(clock), lanes_(lanes) {}
  size_t lanes() const override { return lanes_; }
  int64_t rows_per_request() const override { return 1; }
  void Start(size_t lane, absl::Duration, CallDone done) override {
    {
      absl::MutexLock l(&mu_);
      sent_.push_back({std::this_thread::get_id(), clock_->TimeNow(), lane});
    }
    done(CallResult{});
  }
  bool AwaitSent(size_t n) {
    absl::MutexLock l(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return sent_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), kSafetyTimeout);
  }
  std::vector<Sent> sent() {
    absl::MutexLock l(&mu_);
    return sent_;
  }

 private:
  Clock* const clock_;
  const size_t lanes_;
  absl::Mutex mu_;
  std::vector<Sent> sent_ ABSL_GUARDED_BY(mu_);
};

struct RecordingRig {
  explicit RecordingRig(size_t lanes) {
    auto owned = std::make_unique<RecordingTransport>(&clock, lanes);
    transport = owned.get();
    auto created = LoadGenerator::Create(std::move(owned), &clock);
    EXPECT_TRUE(created.ok()) << created.status();
    gen = *std::move(created);
  }
  SimulatedClock clock;
  RecordingTransport* transport = nullptr;  // owned by gen
  std::unique_ptr<LoadGenerator> gen;
};

// Constant arrivals with four senders: call i is due at i / rate whatever
// the sender, sender i mod 4 sends it, and lanes still take turns. With one
// sender (before open_loop_threads) one thread sent every call.
TEST(LoadGeneratorTest, OpenLoopSendersShareOneConstantSchedule) {
  RecordingRig rig(/*lanes=*/3);
  const absl::Time start = rig.clock.TimeNow();
  LoadSpec spec;
  spec.rate = 100;
  spec.duration = absl::Milliseconds(400);  // calls at 0, 10, ..., 390 ms
  spec.open_loop_threads = 4;
  absl::StatusOr<RunStats> stats;
  std::thread run([&] { stats = rig.gen->Run(spec); });
  ASSERT_TRUE(rig.transport->AwaitSent(1));
  for (int k = 1; k < 40; ++k) {
    rig.clock.AdvanceTime(absl::Milliseconds(10));
    ASSERT_TRUE(rig.transport->AwaitSent(static_cast<size_t>(k) + 1)) << k;
  }
  rig.clock.AdvanceTime(absl::Milliseconds(10));  // the run's end
  run.join();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->ok, 40);
  const std::vector<RecordingTransport::Sent> sent = rig.transport->sent();
  ASSERT_EQ(sent.size(), 40u);
  std::map<std::thread::id, std::set<int64_t>> due_by_thread;
  for (size_t i = 0; i < sent.size(); ++i) {
    // AwaitSent before each step: call i went out at its due time.
    EXPECT_EQ(sent[i].at, start + absl::Milliseconds(10 * static_cast<int64_t>(i))) << i;
    EXPECT_EQ(sent[i].lane, i % 3) << i;
    due_by_thread[sent[i].thread].insert(static_cast<int64_t>(i));
  }
  ASSERT_EQ(due_by_thread.size(), 4u);
  for (const auto& [thread, calls] : due_by_thread) {
    const int64_t residue = *calls.begin() % 4;
    EXPECT_EQ(calls.size(), 10u);
    for (int64_t i : calls) EXPECT_EQ(i % 4, residue) << i;
  }
}

// Poisson arrivals with four senders: four streams of rate / 4 together
// carry the whole rate (20 s at 1,000/s: 20,000 calls expected, standard
// deviation 141; the seeds fix the draw, so the count is the same every
// run), each sender about a quarter. The clock jumps past the end at once:
// every call is then due, and the count does not depend on when each went.
TEST(LoadGeneratorTest, OpenLoopPoissonSendersTogetherKeepTheWholeRate) {
  RecordingRig rig(/*lanes=*/1);
  LoadSpec spec;
  spec.rate = 1000;
  spec.arrival = Arrival::kPoisson;
  spec.duration = absl::Seconds(20);
  spec.open_loop_threads = 4;
  spec.max_outstanding = 1'000'000;
  absl::StatusOr<RunStats> stats;
  std::thread run([&] { stats = rig.gen->Run(spec); });
  ASSERT_TRUE(rig.transport->AwaitSent(1));
  rig.clock.AdvanceTime(absl::Seconds(21));
  run.join();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_GT(stats->ok, 20'000 - 5 * 141);
  EXPECT_LT(stats->ok, 20'000 + 5 * 141);
  std::map<std::thread::id, int64_t> per_thread;
  for (const auto& s : rig.transport->sent()) ++per_thread[s.thread];
  ASSERT_EQ(per_thread.size(), 4u);
  for (const auto& [thread, n] : per_thread) {
    EXPECT_GT(n, 5'000 - 5 * 71);
    EXPECT_LT(n, 5'000 + 5 * 71);
  }
}

TEST(LoadGeneratorTest, OpenLoopThreadsOutOfRangeAreRefused) {
  RecordingRig rig(/*lanes=*/1);
  LoadSpec spec;
  spec.rate = 100;
  spec.duration = absl::Milliseconds(10);
  spec.open_loop_threads = 0;
  EXPECT_THAT(rig.gen->Run(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("open_loop_threads 0")));
  spec.open_loop_threads = 65;
  EXPECT_THAT(rig.gen->Run(spec), StatusIs(absl::StatusCode::kInvalidArgument));
}

// Sends single calls over `channel` until both servers have one, so both of
// round_robin's connections are ready; false after kSafetyTimeout.
bool ConnectBoth(const std::shared_ptr<grpc::Channel>& channel,
                 const FakeInferenceServer& a, const FakeInferenceServer& b) {
  auto stub = v1::Inference::NewStub(channel);
  const absl::Time give_up = absl::Now() + kSafetyTimeout;
  while (a.received() == 0 || b.received() == 0) {
    if (absl::Now() > give_up) return false;
    grpc::ClientContext ctx;
    v1::PredictResponse response;
    stub->Predict(&ctx, SmallRequest(1), &response);
  }
  return true;
}

TEST(LoadGeneratorTest, SeveralTargetsAreSpreadRoundRobin) {
  // Once both connections are ready, round_robin alternates per call, so
  // 400 calls split exactly 200 / 200. (Before that, everything goes to the
  // connection that is ready first, which is why the test connects first.)
  auto a = FakeInferenceServer::Start({.delay = absl::Milliseconds(2)});
  auto b = FakeInferenceServer::Start({.delay = absl::Milliseconds(2)});
  ChannelOptions copts;
  copts.targets = {a->address(), b->address()};
  auto channels = CreateChannels(copts);
  ASSERT_TRUE(channels.ok()) << channels.status();
  ASSERT_TRUE(ConnectBoth(channels->front(), *a, *b));
  const int64_t a0 = a->received(), b0 = b->received();
  auto gen = LoadGenerator::Create(*channels, SmallRequest(1));
  ASSERT_TRUE(gen.ok());
  LoadSpec spec;
  spec.concurrency = 4;
  spec.max_requests = 400;
  auto stats = (*gen)->Run(spec);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->ok, 400);
  EXPECT_EQ(a->received() - a0, 200);
  EXPECT_EQ(b->received() - b0, 200);
}

TEST(LoadGeneratorTest, StopEndsRunAndRefusesTheNext) {
  // Progress is offered after each simulated second; the callback stops the
  // run during warmup. Calls take 1.5 s, so the two outstanding ones end at
  // 1.5 s, before the next progress (2 s), and none follows them.
  SimulatedRig rig({.delay = absl::Milliseconds(1500)});
  LoadSpec spec;
  spec.concurrency = 2;
  spec.duration = absl::Seconds(60);
  spec.warmup = absl::Seconds(60);
  int calls = 0;
  absl::Notification stopped;
  AsyncRun run(rig, spec, [&](const Progress& p) {
    ++calls;
    EXPECT_TRUE(p.warmup);
    EXPECT_EQ(p.elapsed, absl::Seconds(1));
    EXPECT_EQ(p.outstanding, 2);
    rig.gen->Stop();
    stopped.Notify();
  });
  ASSERT_TRUE(rig.server->AwaitReceived(2));
  // Both waiting at the current time: the fake server's timer for the two
  // answers and the run for its first progress. Moved any earlier, the
  // run's first deadline would be taken after the move, a second late (a
  // loaded CI machine: the progress never came and the safety timeout hit).
  rig.clock.BlockUntilWaiters(2);
  rig.clock.AdvanceTime(absl::Seconds(1));
  ASSERT_TRUE(stopped.WaitForNotificationWithTimeout(kSafetyTimeout));
  rig.clock.AdvanceTime(absl::Milliseconds(500));
  EXPECT_THAT(run.Result(), StatusIs(absl::StatusCode::kCancelled));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(rig.server->received(), 2);
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
