// Servables behind the real gRPC server: a ModelServableFactory making fake
// runners, a ModelManager, a ManagerLookup, and InferenceServer on loopback.
// What is checked is the lifetime promise: a request admitted before its
// model is unloaded finishes on it, later ones get NOT_FOUND listing what is
// loaded, and the version is freed only when its last request is done.
#include <future>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "metalserve/v1/inference.grpc.pb.h"
#include "server/repository/model_manager.h"
#include "server/runtime/hybrid_runner.h"
#include "server/service/model_lookup.h"
#include "server/service/model_servable.h"
#include "server/service/servable_factory.h"
#include "server/service/server.h"
#include "tests/testing/fake_runner.h"
#include "tests/testing/fake_runner_server.h"
#include "tests/testing/metric_sample.h"
#include "tests/testing/simulated_clock.h"

namespace metalserve {
namespace {

using ::metalserve::testing::Sample;
using ::testing::AllOf;
using ::testing::Eq;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Optional;
using ::testing::StartsWith;

// A FakeRunner the test can reach after the manager owns it; counts how many
// are alive.
class TrackedRunner final : public Runner {
 public:
  TrackedRunner(FakeRunner* fake, std::atomic<int>* alive, const std::atomic<int64_t>* reserved = nullptr)
      : fake_(fake), alive_(alive), reserved_(reserved) {
    alive_->fetch_add(1);
  }
  ~TrackedRunner() override { alive_->fetch_sub(1); }
  const ModelInfo& info() const override { return info_; }
  absl::StatusOr<std::vector<Tensor>> Run(const std::vector<Tensor>& in) override {
    return fake_->Run(in);
  }
  MemoryStats Memory() override {
    memory_reads.fetch_add(1);
    MemoryStats m;
    if (reserved_ != nullptr) m.reserved_bytes = reserved_->load();
    return m;
  }
  void BetweenBatches(bool) override {}
  ModelInfo info_;
  // Memory() calls by all runners: each reads /proc/self/statm in the real one.
  static inline std::atomic<int64_t> memory_reads{0};

 private:
  FakeRunner* const fake_;
  std::atomic<int>* const alive_;
  const std::atomic<int64_t>* const reserved_;  // the device figure Memory reports
};

class ModelServableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    metrics_ = testing::MetricsWithoutListener();
    ModelServableFactory::Options fo;
    fo.batching.max_batch_size = 4;
    fo.batching.max_queue_delay = absl::ZeroDuration();
    fo.metrics = metrics_.get();
    fo.make_runner = [this](const RunnerSpec& spec) -> absl::StatusOr<std::unique_ptr<Runner>> {
      auto r = std::make_unique<TrackedRunner>(&fake_, &alive_, &reserved_);
      r->info_ = fake_.info();
      r->info_.name = spec.signature.name;
      r->info_.version = spec.signature.version;
      return std::unique_ptr<Runner>(std::move(r));
    };
    factory_ = *ModelServableFactory::Create(fo);
    manager_ = *ModelManager::Create({.factory = factory_.get()});
    for (const char* model : {"a", "b"}) {
      ModelEntry e{.name = model};
      e.config.signature.inputs = fake_.info().inputs;
      e.config.signature.outputs = fake_.info().outputs;
      e.selected = {{.version = 1, .model_path = std::string("/repo/") + model + "/1/model.pt"}};
      ASSERT_TRUE(manager_->Load(e).ok());
    }
    lookup_ = std::make_unique<ManagerLookup>(manager_.get());
    ServerOptions so = testing::LoopbackServerOptions();
    server_ = *InferenceServer::Start(so, lookup_.get(), nullptr, metrics_.get());
    stub_ = v1::Inference::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(server_->port()), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    fake_.OpenGate();
    server_.reset();
    manager_.reset();
  }

  grpc::Status Predict(const std::string& model, float value, v1::PredictResponse* r) {
    v1::PredictRequest req;
    req.set_model_name(model);
    auto* t = req.add_inputs();
    t->set_name("input");
    t->set_dtype(v1::DATA_TYPE_FLOAT32);
    t->add_shape(1);
    t->add_shape(FakeRunner::kWidth);
    std::vector<float> row(FakeRunner::kWidth, value);
    t->set_data(std::string(reinterpret_cast<const char*>(row.data()), row.size() * 4));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return stub_->Predict(&ctx, req, r);
  }

  FakeRunner fake_;
  std::atomic<int> alive_{0};
  std::atomic<int64_t> reserved_{-1};  // what every runner reports as reserved
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<ModelServableFactory> factory_;
  std::unique_ptr<ModelManager> manager_;
  std::unique_ptr<ManagerLookup> lookup_;
  std::unique_ptr<InferenceServer> server_;
  std::unique_ptr<v1::Inference::Stub> stub_;
};

TEST_F(ModelServableTest, EachModelAnswersUnderItsOwnNameAndVersion) {
  for (const char* model : {"a", "b"}) {
    v1::PredictResponse r;
    ASSERT_TRUE(Predict(model, 3.0f, &r).ok());
    EXPECT_EQ(r.model_name(), model);
    EXPECT_EQ(r.model_version(), "1");
  }
  v1::PredictResponse r;
  grpc::Status s = Predict("", 3.0f, &r);  // two models: the name is needed
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("loaded: a [1], b [1]"));
}

// At light load the executor goes idle after every batch; the memory
// figures (a file read in the real runners) are still read at most once a
// second per model, not once per request.
TEST_F(ModelServableTest, MemoryFiguresAreReadAtMostOnceASecondAtLightLoad) {
  const int64_t reads_before = TrackedRunner::memory_reads.load();
  const absl::Time start = absl::Now();
  constexpr int kCalls = 30;
  for (int i = 0; i < kCalls; ++i) {  // one at a time: each batch ends idle
    v1::PredictResponse r;
    ASSERT_TRUE(Predict("b", 1.0f, &r).ok());
  }
  const int64_t seconds = absl::ToInt64Seconds(absl::Now() - start) + 1;
  const int64_t reads = TrackedRunner::memory_reads.load() - reads_before;
  // Two models, each due once a second (and once more at the window's edge).
  EXPECT_LE(reads, 2 * (seconds + 1)) << "over " << seconds << " s for " << kCalls << " calls";
}

// A model on one device: every batch is that device's, and its counters
// exist at zero from the load.
TEST_F(ModelServableTest, EveryBatchOfAOneDeviceModelIsCountedOnItsDevice) {
  const std::string batches = R"(metalserve_device_batches_total{device="cpu",model="b",version="1"})";
  EXPECT_THAT(Sample(metrics_->Scrape(), batches), Optional(Eq(0)));
  for (int i = 0; i < 2; ++i) {
    v1::PredictResponse r;
    ASSERT_TRUE(Predict("b", 1.0f, &r).ok());
  }
  const std::string s = metrics_->Scrape();
  EXPECT_THAT(Sample(s, batches), Optional(Eq(2)));
  EXPECT_THAT(Sample(s, R"(metalserve_device_batch_rows_total{device="cpu",model="b",version="1"})"),
              Optional(Eq(2)));
  EXPECT_THAT(Sample(s, R"(metalserve_device_batches_total{device="cpu",model="a",version="1"})"),
              Optional(Eq(0)));
}

TEST_F(ModelServableTest, WithOneModelLeftAnEmptyNameMeansItButAVersionStillCounts) {
  ASSERT_TRUE(manager_->Unload("b").ok());
  v1::GetModelMetadataRequest req;
  v1::GetModelMetadataResponse meta;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->GetModelMetadata(&ctx, req, &meta).ok());
    EXPECT_EQ(meta.model_name(), "a");
  }
  req.set_model_version("7");
  grpc::ClientContext ctx;
  const grpc::Status s = stub_->GetModelMetadata(&ctx, req, &meta);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("\"a\" has no ready version \"7\"; ready: [1]"));
}

TEST_F(ModelServableTest, ModelNotFoundNamesTheRequestFieldWhateverTheModelIsCalled) {
  // "no ready version" is in the manager's wording of a version miss; the
  // miss is still the model's.
  for (const std::string name : {"c", "no ready version", "version 2"}) {
    const absl::StatusOr<ServableHandle> h = LookUpModel(*lookup_, "model_name", name, "");
    EXPECT_EQ(h.status().code(), absl::StatusCode::kNotFound) << name;
    EXPECT_THAT(std::string(h.status().message()),
                StartsWith("model_name \"" + name + "\" is not loaded; loaded: a [1], b [1]"));
  }
  const absl::StatusOr<ServableHandle> h = LookUpModel(*lookup_, "model_name", "a", "9");
  EXPECT_EQ(h.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(h.status().message()),
              StartsWith("model \"a\" has no ready version \"9\""));
}

TEST_F(ModelServableTest, RequestAdmittedBeforeUnloadFinishesOnItsVersion) {
  fake_.CloseGate();
  v1::PredictResponse first;
  auto running = std::async(std::launch::async, [&] { return Predict("a", 5.0f, &first); });
  fake_.AwaitRunning(1);  // admitted, holding a's handle, inside Run
  ASSERT_TRUE(manager_->Unload("a").ok());

  v1::PredictResponse later;
  grpc::Status refused = Predict("a", 1.0f, &later);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(refused.error_message(),
              HasSubstr("model_name \"a\" is not loaded; loaded: b [1]"));
  EXPECT_EQ(alive_.load(), 2) << "a was freed under its running request";
  EXPECT_FALSE(manager_->WaitUntilReleased("a", absl::ZeroDuration()));

  fake_.OpenGate();
  grpc::Status s = running.get();
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(first.model_name(), "a");
  EXPECT_FLOAT_EQ(reinterpret_cast<const float*>(first.outputs(0).data().data())[0], 10.0f);
  EXPECT_TRUE(manager_->WaitUntilReleased("a", absl::Seconds(10)));
  EXPECT_EQ(alive_.load(), 1);
}

// The device's memory series come from the models on it (their idle loops)
// and go when the last version on it is freed: after an unload the figure a
// freed version reported is not left standing.
TEST_F(ModelServableTest, DeviceMemorySeriesGoWhenTheVersionsOnTheDeviceAreFreed) {
  constexpr char kSeries[] = R"(metalserve_device_memory_bytes{device="cpu",kind="reserved"} 123)";
  reserved_ = 123;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!absl::StrContains(metrics_->Scrape(), kSeries) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));  // an idle loop ticks every second
  }
  ASSERT_THAT(metrics_->Scrape(), HasSubstr(kSeries));
  // Still reporting 123 while they unload: without the release dropping the
  // series, the freed versions' last figure would stay.
  ASSERT_TRUE(manager_->Unload("a").ok());
  ASSERT_TRUE(manager_->Unload("b").ok());
  ASSERT_TRUE(manager_->WaitUntilReleased("a", absl::Seconds(10)));
  ASSERT_TRUE(manager_->WaitUntilReleased("b", absl::Seconds(10)));
  EXPECT_THAT(metrics_->Scrape(), Not(HasSubstr("metalserve_device_memory_bytes{device=\"cpu\"")));
}

// One version freed while another stays on the device: the freed one's
// figure goes, and the one still loaded reports the device's new figure
// (from its idle loop, or from its batches while its queue is never empty).
TEST_F(ModelServableTest, AVersionFreedBesideAnotherLeavesTheOthersNewFigure) {
  reserved_ = 123;
  const auto wait_for = [&](const std::string& series) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (!absl::StrContains(metrics_->Scrape(), series) && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    return absl::StrContains(metrics_->Scrape(), series);
  };
  ASSERT_TRUE(wait_for(R"(metalserve_device_memory_bytes{device="cpu",kind="reserved"} 123)"));
  reserved_ = 77;  // what the device holds once a is freed
  ASSERT_TRUE(manager_->Unload("a").ok());
  ASSERT_TRUE(manager_->WaitUntilReleased("a", absl::Seconds(10)));
  v1::PredictResponse r;
  ASSERT_TRUE(Predict("b", 1.0f, &r).ok());  // b is still served, and reports
  EXPECT_TRUE(wait_for(R"(metalserve_device_memory_bytes{device="cpu",kind="reserved"} 77)"))
      << metrics_->Scrape();
  EXPECT_THAT(metrics_->Scrape(), Not(HasSubstr("} 123")));
}

}  // namespace
}  // namespace metalserve

namespace metalserve {
namespace {

using ::testing::HasSubstr;

// Memory admission on an accelerator: the budget keeps what the runner
// measured on the device (its reserved memory's growth over load and
// warm-up), not the file-size estimate, and gives it back when the version
// is freed. Without the measurement (-1) the estimate stays.
TEST(MemoryBudgetFactoryTest, AcceleratorLoadCountsTheDeviceMemoryTheRunnerMeasured) {
  constexpr int64_t kMiB = 1 << 20;
  FakeRunner fake;
  std::atomic<int> alive{0};
  int64_t reported = 300 * kMiB;
  std::unique_ptr<MemoryBudget> budget = *MemoryBudget::Create({.budget_bytes = 1024 * kMiB});
  ModelServableFactory::Options fo;
  fo.batching.max_batch_size = 4;
  fo.batching.max_queue_delay = absl::ZeroDuration();
  fo.memory_budget = budget.get();
  fo.device = "cuda";
  fo.make_runner = [&](const RunnerSpec& spec) -> absl::StatusOr<std::unique_ptr<Runner>> {
    auto r = std::make_unique<TrackedRunner>(&fake, &alive);
    r->info_ = fake.info();
    r->info_.name = spec.signature.name;
    r->info_.version = spec.signature.version;
    r->info_.device = "cuda:0";
    r->info_.load_reserved_bytes = reported;
    return std::unique_ptr<Runner>(std::move(r));
  };
  std::unique_ptr<ModelServableFactory> factory = *ModelServableFactory::Create(fo);
  auto config = std::make_shared<RepositoryModelConfig>();
  config->signature.inputs = fake.info().inputs;
  config->signature.outputs = fake.info().outputs;
  const LoadSpec spec{.id = {"m", 1}, .model_path = "/repo/m/1/model.pt", .config = config};

  absl::StatusOr<std::unique_ptr<Servable>> measured = factory->Load(spec);
  ASSERT_TRUE(measured.ok()) << measured.status();
  EXPECT_EQ(budget->Used("cuda"), 300 * kMiB);
  measured->reset();
  EXPECT_EQ(budget->Used("cuda"), 0);

  // No device figure: the file-size estimate (far below 300 MiB for a file
  // that is not there) is what stays counted.
  reported = -1;
  budget = *MemoryBudget::Create({.budget_bytes = 1024 * kMiB});
  fo.memory_budget = budget.get();
  factory = *ModelServableFactory::Create(fo);
  absl::StatusOr<std::unique_ptr<Servable>> estimated = factory->Load(spec);
  ASSERT_TRUE(estimated.ok()) << estimated.status();
  EXPECT_GT(budget->Used("cuda"), 0);
  EXPECT_LT(budget->Used("cuda"), 300 * kMiB);
}

TEST(SlotsFollowTheDeviceTest, ACudaRunnerGetsTheCudaSlotsAndAnyOtherDeviceTheFlags) {
  for (const auto& [device, executors, slots] :
       std::vector<std::tuple<std::string, int, int>>{
           {"cuda:0", 4, 4}, {"cpu", 2, 2}, {"mps", 2, 2}, {"cpu+cuda:0", 4, 4}}) {
    auto runner = std::make_shared<FakeRunner>();
    runner->mutable_info().device = device;
    ModelServable::Options o;
    o.batching.num_executors = 2;
    o.device_concurrency = 2;
    o.cuda_slots = 4;
    auto s = ModelServable::Create(runner, o);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ((*s)->batcher().options().num_executors, executors) << device;
    EXPECT_EQ((*s)->device_slots(), slots) << device;
  }
  // Off (an explicit --executors): the flags on CUDA too.
  auto runner = std::make_shared<FakeRunner>();
  runner->mutable_info().device = "cuda:0";
  ModelServable::Options o;
  o.batching.num_executors = 2;
  o.device_concurrency = 2;
  auto s = *ModelServable::Create(runner, o);
  EXPECT_EQ(s->batcher().options().num_executors, 2);
  EXPECT_EQ(s->device_slots(), 2);
}

TEST(InlineFollowsTheDeviceTest, AnAcceleratorRunnerGetsTheAcceleratorBoundAndTheCpuTheFlags) {
  // An accelerator's inline call takes no follow-ons (with several
  // executors); a CPU leg keeps them. The null runner's simulated device is
  // served as CUDA.
  for (const auto& [device, bound, follow_ons] :
       std::vector<std::tuple<std::string, absl::Duration, bool>>{
           {"cuda:0", absl::Milliseconds(10), false},
           {"mps", absl::Milliseconds(10), false},
           {"simulated-cuda", absl::Milliseconds(10), false},
           {"cpu+cuda:0", absl::Microseconds(100), true},  // a CPU leg: the smaller
           {"cpu", absl::Microseconds(100), true}}) {
    auto runner = std::make_shared<FakeRunner>();
    runner->mutable_info().device = device;
    ModelServable::Options o;
    o.batching.max_batch_size = 1;
    o.batching.num_executors = 2;
    o.batching.inline_max_cost = absl::Microseconds(100);
    o.accelerator_inline_max_cost = absl::Milliseconds(10);
    auto s = ModelServable::Create(runner, o);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ((*s)->batcher().options().inline_max_cost, bound) << device;
    EXPECT_EQ((*s)->batcher().options().inline_follow_ons, follow_ons) << device;
  }
  // 0 on an accelerator: never inline there; negative (off): the flags'.
  for (const auto& [accelerator, bound] : std::vector<std::pair<absl::Duration, absl::Duration>>{
           {absl::ZeroDuration(), absl::ZeroDuration()},
           {absl::Milliseconds(-1), absl::Microseconds(100)}}) {
    auto runner = std::make_shared<FakeRunner>();
    runner->mutable_info().device = "cuda:0";
    ModelServable::Options o;
    o.batching.inline_max_cost = absl::Microseconds(100);
    o.accelerator_inline_max_cost = accelerator;
    o.batching.num_executors = 2;
    auto s = *ModelServable::Create(runner, o);
    EXPECT_EQ(s->batcher().options().inline_max_cost, bound);
    // Follow-ons change only with the accelerator's own bound.
    EXPECT_EQ(s->batcher().options().inline_follow_ons, accelerator < absl::ZeroDuration());
  }
  // One executor: it would be held while the inline call is in flight, so
  // the follow-ons stay.
  auto runner = std::make_shared<FakeRunner>();
  runner->mutable_info().device = "cuda:0";
  ModelServable::Options o;
  o.batching.num_executors = 1;
  o.accelerator_inline_max_cost = absl::Milliseconds(10);
  EXPECT_TRUE((*ModelServable::Create(runner, o))->batcher().options().inline_follow_ons);
}

TEST(BatchingForTest, ModelSettingsOverrideTheFlagsAndKeepTheRest) {
  BatcherOptions flags;
  flags.max_batch_size = 32;
  flags.allowed_batch_sizes = {1, 8, 32};
  flags.max_queue_delay = absl::Milliseconds(2);
  flags.max_queue_size = 1024;
  ModelSettings s;
  s.max_batch_size = 16;
  s.max_queue_delay = absl::Microseconds(500);
  absl::StatusOr<BatcherOptions> b = BatchingFor(flags, s, "/repo/m/config.json");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->max_batch_size, 16);
  // The flags' padding sizes above the model's largest batch are dropped.
  EXPECT_EQ(b->allowed_batch_sizes, (std::vector<int64_t>{1, 8, 16}));
  EXPECT_EQ(b->max_queue_delay, absl::Microseconds(500));
  EXPECT_EQ(b->max_queue_size, 1024);
}

TEST(BatchingForTest, SchedulingSettingsOverrideTheirFlags) {
  BatcherOptions flags;
  flags.max_batch_size = 32;
  flags.priority_levels = 3;
  flags.latency_target = absl::Milliseconds(100);
  flags.rows_per_slot = 32;
  ModelSettings s;
  s.latency_target = absl::ZeroDuration();  // off for this model
  s.default_priority = 2;
  s.rows_per_slot = 8;
  absl::StatusOr<BatcherOptions> b = BatchingFor(flags, s, "/repo/m/config.json");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->latency_target, absl::ZeroDuration());
  EXPECT_EQ(b->default_priority, 2);
  EXPECT_EQ(b->rows_per_slot, 8);
  EXPECT_EQ(b->priority_levels, 3);
  s = ModelSettings{};
  s.latency_target = absl::Milliseconds(20);
  b = BatchingFor(flags, s, "/repo/m/config.json");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->latency_target, absl::Milliseconds(20));
  EXPECT_EQ(b->default_priority, flags.default_priority);
  EXPECT_EQ(b->rows_per_slot, 32);
}

TEST(BatchingForTest, DefaultPriorityBeyondTheLevelsNamesTheConfigFileAndRange) {
  BatcherOptions flags;
  flags.priority_levels = 2;
  ModelSettings s;
  s.default_priority = 3;
  absl::StatusOr<BatcherOptions> b = BatchingFor(flags, s, "/repo/m/config.json");
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(b.status().message(),
              AllOf(HasSubstr("/repo/m/config.json"), HasSubstr("default_priority"),
                    HasSubstr("priority_levels = 2"), HasSubstr("got 3")));
}

// A model's own latency target is held against its own warm-up, as the
// flag's is at start-up: below the measured batch-1 cost the version does
// not load, and the error names that cost.
TEST(BatchingForTest, AModelsLatencyTargetBelowItsBatchOneCostFailsItsLoad) {
  BatcherOptions flags;
  flags.max_batch_size = 8;
  for (const auto& [target, loads] : std::vector<std::pair<absl::Duration, bool>>{
           {absl::Milliseconds(1), false}, {absl::Milliseconds(5), true}}) {
    auto runner = std::make_shared<FakeRunner>();
    runner->mutable_info().warmup_timings = {{.batch_size = 1, .forward = absl::Milliseconds(2)},
                                             {.batch_size = 8, .forward = absl::Milliseconds(4)}};
    ModelSettings s;
    s.latency_target = target;
    absl::StatusOr<BatcherOptions> b = BatchingFor(flags, s, "/repo/m/config.json");
    ASSERT_TRUE(b.ok()) << b.status();
    ModelServable::Options o;
    o.batching = *b;
    auto servable = ModelServable::Create(runner, o);
    if (loads) {
      ASSERT_TRUE(servable.ok()) << servable.status();
      EXPECT_EQ((*servable)->batcher().options().latency_target, target);
    } else {
      EXPECT_EQ(servable.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(servable.status().message(),
                  AllOf(HasSubstr("latency_target 1ms"), HasSubstr("batch of 1 (2ms)")));
    }
  }
}

TEST(BatchingForTest, SettingsThatDoNotFitTheFlagsNameTheConfigFile) {
  BatcherOptions flags;
  flags.max_batch_size = 32;
  flags.max_queue_size = 64;
  ModelSettings s;
  s.allowed_batch_sizes = {1, 4};  // the last is not max_batch_size 32
  absl::StatusOr<BatcherOptions> b = BatchingFor(flags, s, "/repo/m/config.json");
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(b.status().message(), HasSubstr("/repo/m/config.json"));
}

}  // namespace
}  // namespace metalserve

namespace metalserve {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// One device of a hybrid: the fake model (output = 2 x input) under a device
// name, with warm-up timings and a reserved-memory figure of its own.
class DeviceFake final : public Runner {
 public:
  DeviceFake(const std::string& device, std::vector<WarmupTiming> timings, int64_t reserved)
      : reserved_(reserved) {
    info_ = fake_.info();
    info_.device = device;
    info_.warmup_timings = std::move(timings);
  }
  const ModelInfo& info() const override { return info_; }
  absl::StatusOr<std::vector<Tensor>> Run(const std::vector<Tensor>& in) override {
    return fake_.Run(in);
  }
  MemoryStats Memory() override {
    MemoryStats m;
    m.reserved_bytes = reserved_;
    return m;
  }
  void BetweenBatches(bool) override {}
  ModelInfo info_;

 private:
  FakeRunner fake_;
  const int64_t reserved_;
};

// A model on two devices (the hybrid runner over two fakes: the "cpu" wins
// single rows, "cuda:0" batches of 4) behind the real server: each batch is
// counted on the device that ran it, each device reports its own memory,
// and every one of those series goes when the version is freed.
TEST(HybridServableTest, BatchesAndMemoryAreReportedPerDeviceAndGoWithTheVersion) {
  std::unique_ptr<Metrics> metrics = testing::MetricsWithoutListener();
  ModelServableFactory::Options fo;
  fo.batching.max_batch_size = 4;
  fo.batching.max_queue_delay = absl::ZeroDuration();
  fo.metrics = metrics.get();
  // The picker on a clock that does not move: every batch "takes" 0, so
  // what it learns never reorders the devices (single rows stay on the cpu).
  SimulatedClock clock;
  fo.make_runner = [&clock](const RunnerSpec& spec) -> absl::StatusOr<std::unique_ptr<Runner>> {
    HybridRunner::Maker make = [name = spec.signature.name](const std::string& d)
        -> absl::StatusOr<std::unique_ptr<Runner>> {
      const bool cpu = d == "cpu";
      auto r = std::make_unique<DeviceFake>(
          d,
          cpu ? std::vector<WarmupTiming>{{1, absl::Microseconds(100)}, {4, absl::Milliseconds(5)}}
              : std::vector<WarmupTiming>{{1, absl::Microseconds(500)}, {4, absl::Milliseconds(1)}},
          cpu ? 50 : 100);
      r->info_.name = name;
      return std::unique_ptr<Runner>(std::move(r));
    };
    absl::StatusOr<std::unique_ptr<HybridRunner>> h =
        HybridRunner::Create({"cuda:0", "cpu"}, make, {1, 4}, 1e-3, &clock);
    if (!h.ok()) return h.status();
    return std::unique_ptr<Runner>(*std::move(h));
  };
  std::unique_ptr<ModelServableFactory> factory = *ModelServableFactory::Create(fo);
  std::unique_ptr<ModelManager> manager = *ModelManager::Create({.factory = factory.get()});
  FakeRunner signature;
  ModelEntry e{.name = "a"};
  e.config.signature.inputs = signature.info().inputs;
  e.config.signature.outputs = signature.info().outputs;
  e.selected = {{.version = 1, .model_path = "/repo/a/1/model.pt"}};
  ASSERT_TRUE(manager->Load(e).ok());
  ManagerLookup lookup(manager.get());
  std::unique_ptr<InferenceServer> server =
      *InferenceServer::Start(testing::LoopbackServerOptions(), &lookup, nullptr, metrics.get());
  auto stub = v1::Inference::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(server->port()), grpc::InsecureChannelCredentials()));
  auto predict = [&](int64_t rows) {
    v1::PredictRequest req;
    req.set_model_name("a");
    auto* t = req.add_inputs();
    t->set_name("input");
    t->set_dtype(v1::DATA_TYPE_FLOAT32);
    t->add_shape(rows);
    t->add_shape(FakeRunner::kWidth);
    std::vector<float> data(static_cast<size_t>(rows * FakeRunner::kWidth), 1.0f);
    t->set_data(std::string(reinterpret_cast<const char*>(data.data()), data.size() * 4));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    v1::PredictResponse r;
    return stub->Predict(&ctx, req, &r);
  };
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(predict(1).ok());
  ASSERT_TRUE(predict(4).ok());

  const std::string scrape = metrics->Scrape();
  const auto series = [](const char* family, const char* device) {
    return absl::StrCat(family, R"({device=")", device, R"(",model="a",version="1"})");
  };
  EXPECT_THAT(Sample(scrape, series("metalserve_device_batches_total", "cpu")), Optional(Eq(3)));
  EXPECT_THAT(Sample(scrape, series("metalserve_device_batches_total", "cuda:0")),
              Optional(Eq(1)));
  EXPECT_THAT(Sample(scrape, series("metalserve_device_batch_rows_total", "cuda:0")),
              Optional(Eq(4)));
  EXPECT_THAT(Sample(scrape, series("metalserve_device_busy_seconds_total", "cpu")),
              Optional(Eq(0)));  // the clock did not move
  // The version's device table: both devices' warm-up figures.
  EXPECT_THAT(Sample(scrape, R"(metalserve_device_forward_seconds{batch_size="4",device="cpu",model="a",version="1"})"),
              Optional(Eq(0.005)));
  EXPECT_THAT(Sample(scrape, R"(metalserve_device_forward_seconds{batch_size="4",device="cuda:0",model="a",version="1"})"),
              Optional(Eq(0.001)));
  // Each device's own memory figure, reported by the first batch (before
  // its answers went out).
  EXPECT_THAT(Sample(scrape, R"(metalserve_device_memory_bytes{device="cuda:0",kind="reserved"})"),
              Optional(Eq(100)));
  EXPECT_THAT(Sample(scrape, R"(metalserve_device_memory_bytes{device="cpu",kind="reserved"})"),
              Optional(Eq(50)));

  ASSERT_TRUE(manager->Unload("a").ok());
  ASSERT_TRUE(manager->WaitUntilReleased("a", absl::Seconds(10)));
  const std::string after = metrics->Scrape();
  EXPECT_THAT(after, Not(HasSubstr("metalserve_device_batches_total{")));
  EXPECT_THAT(after, Not(HasSubstr("metalserve_device_forward_seconds{")));
  EXPECT_THAT(after, Not(HasSubstr("metalserve_device_memory_bytes{device=\"cpu\"")));
  EXPECT_THAT(after, Not(HasSubstr("metalserve_device_memory_bytes{device=\"cuda:0\"")));
  server.reset();
}

}  // namespace
}  // namespace metalserve
