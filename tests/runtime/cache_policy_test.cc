#include "server/runtime/cache_policy.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/simulated_clock.h"
#include "tests/testing/status_matchers.h"

namespace metalserve {
namespace {

using ::metalserve::testing::StatusIs;
using ::testing::ElementsAre;

// Counts EmptyCache calls; reports whatever allocation the test sets.
class FakeMemoryOps : public DeviceMemoryOps {
 public:
  explicit FakeMemoryOps(bool supports = true) : supports_(supports) {}
  bool SupportsEmptyCache() const override { return supports_; }
  void EmptyCache() override {
    ++empties;
    stats.allocated_bytes = 0;
  }
  MemoryStats Stats() override { return stats; }

  int empties = 0;
  MemoryStats stats{.allocated_bytes = 0, .reserved_bytes = 0, .limit_bytes = 1000};

 private:
  bool supports_;
};

class CachePolicyTest : public ::testing::Test {
 protected:
  std::unique_ptr<CachePolicy> Make(CachePolicyOptions options) {
    options.clock = &clock_;
    options.on_cache_clear = [this](absl::string_view trigger, absl::Duration) {
      triggers_.emplace_back(trigger);
    };
    auto policy = CachePolicy::Create(std::move(options), &ops_);
    EXPECT_TRUE(policy.ok()) << policy.status();
    return std::move(policy).value();
  }

  SimulatedClock clock_;
  FakeMemoryOps ops_;
  std::vector<std::string> triggers_;
};

TEST_F(CachePolicyTest, ClearsEveryNthBatchBusyOrIdle) {
  auto policy = Make({.empty_cache_every = 3});
  for (int i = 0; i < 7; ++i) policy->BetweenBatches(/*idle=*/i % 2 == 0);
  EXPECT_EQ(ops_.empties, 2);  // after batches 3 and 6
  EXPECT_EQ(policy->clears("every_n"), 2);
  EXPECT_EQ(policy->clears(), 2);
  EXPECT_THAT(triggers_, ElementsAre("every_n", "every_n"));
}

TEST_F(CachePolicyTest, IntervalClearsOnlyWhileIdle) {
  auto policy = Make({.empty_cache_interval = absl::Seconds(10)});
  clock_.AdvanceTime(absl::Seconds(11));
  policy->BetweenBatches(/*idle=*/false);
  policy->BetweenBatches(/*idle=*/false);
  EXPECT_EQ(ops_.empties, 0);
  policy->BetweenBatches(/*idle=*/true);
  EXPECT_THAT(triggers_, ElementsAre("interval"));
  // The interval restarts at the clearing.
  clock_.AdvanceTime(absl::Seconds(5));
  policy->BetweenBatches(/*idle=*/true);
  EXPECT_EQ(ops_.empties, 1);
  clock_.AdvanceTime(absl::Seconds(5));
  policy->BetweenBatches(/*idle=*/true);
  EXPECT_EQ(policy->clears("interval"), 2);
}

TEST_F(CachePolicyTest, WatermarkClearsAtNextIdleMoment) {
  auto policy = Make({.memory_watermark = 0.5});
  ops_.stats.allocated_bytes = 400;  // below 0.5 * 1000
  policy->BetweenBatches(/*idle=*/true);
  EXPECT_EQ(ops_.empties, 0);
  ops_.stats.allocated_bytes = 600;  // above, while busy: wait
  policy->BetweenBatches(/*idle=*/false);
  EXPECT_EQ(ops_.empties, 0);
  ops_.stats.allocated_bytes = 450;  // dropped below again; still pending
  policy->BetweenBatches(/*idle=*/true);
  EXPECT_THAT(triggers_, ElementsAre("watermark"));
  policy->BetweenBatches(/*idle=*/true);
  EXPECT_EQ(policy->clears("watermark"), 1);
}

TEST_F(CachePolicyTest, WatermarkIgnoredWhenDeviceReportsNoLimit) {
  auto policy = Make({.memory_watermark = 0.5});
  ops_.stats.limit_bytes = -1;
  ops_.stats.allocated_bytes = 1 << 30;
  policy->BetweenBatches(/*idle=*/true);
  EXPECT_EQ(ops_.empties, 0);
}

TEST_F(CachePolicyTest, OutOfMemoryClearsAtOnceAndIsCountedSeparately) {
  auto policy = Make({.empty_cache_every = 2});
  policy->OnOutOfMemory();
  policy->BetweenBatches(/*idle=*/false);
  policy->BetweenBatches(/*idle=*/false);
  EXPECT_THAT(triggers_, ElementsAre("oom", "every_n"));
  EXPECT_EQ(policy->clears("oom"), 1);
  EXPECT_EQ(policy->clears("every_n"), 1);
  EXPECT_EQ(policy->clears(), 2);
}

TEST_F(CachePolicyTest, ReportsTimeTakenFromClock) {
  // EmptyCache advances the simulated clock, as a slow device would.
  class SlowOps : public FakeMemoryOps {
   public:
    explicit SlowOps(SimulatedClock* c) : clock(c) {}
    void EmptyCache() override {
      clock->AdvanceTime(absl::Milliseconds(7));
      FakeMemoryOps::EmptyCache();
    }
    SimulatedClock* clock;
  } ops(&clock_);
  absl::Duration took;
  CachePolicyOptions options{.empty_cache_every = 1};
  options.clock = &clock_;
  options.on_cache_clear = [&](absl::string_view, absl::Duration d) { took = d; };
  auto policy = CachePolicy::Create(std::move(options), &ops);
  ASSERT_TRUE(policy.ok());
  (*policy)->BetweenBatches(false);
  EXPECT_EQ(took, absl::Milliseconds(7));
}

TEST_F(CachePolicyTest, NoOpOnDeviceWithoutCache) {
  FakeMemoryOps cpu(/*supports=*/false);
  CachePolicyOptions options{.empty_cache_every = 1,
                             .empty_cache_interval = absl::Seconds(1)};
  options.clock = &clock_;
  auto policy = CachePolicy::Create(std::move(options), &cpu);
  ASSERT_TRUE(policy.ok());
  clock_.AdvanceTime(absl::Seconds(5));
  (*policy)->BetweenBatches(true);
  (*policy)->OnOutOfMemory();
  EXPECT_EQ(cpu.empties, 0);
  EXPECT_EQ((*policy)->clears(), 0);
}

TEST_F(CachePolicyTest, DisabledByDefault) {
  auto policy = Make({});
  clock_.AdvanceTime(absl::Hours(1));
  ops_.stats.allocated_bytes = 999;
  for (int i = 0; i < 10; ++i) policy->BetweenBatches(true);
  EXPECT_EQ(ops_.empties, 0);
}

TEST(CachePolicyCreateTest, RejectsBadOptions) {
  FakeMemoryOps ops;
  EXPECT_THAT(CachePolicy::Create({.empty_cache_every = -1}, &ops),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(CachePolicy::Create({.empty_cache_interval = absl::Seconds(-1)}, &ops),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(CachePolicy::Create({.memory_watermark = 1.5}, &ops),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(CachePolicy::Create({}, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// One policy per device, shared by its runners (each a CacheUser). Each test
// below fails with a policy per runner: the per-model triggers clear twice,
// or clear on one model's idle moment while another is busy.
class SharedCachePolicyTest : public ::testing::Test {
 protected:
  SharedCachePolicyTest() : ops_(std::make_shared<FakeMemoryOps>()) {}

  std::shared_ptr<CachePolicy> For(const std::string& device, CachePolicyOptions options,
                                   std::shared_ptr<FakeMemoryOps> ops = nullptr) {
    options.clock = &clock_;
    options.on_cache_clear = [this, device](absl::string_view trigger, absl::Duration) {
      triggers_.push_back(absl::StrCat(device, " ", trigger));
    };
    auto policy = policies_.For(device, std::move(options), ops != nullptr ? ops : ops_);
    EXPECT_TRUE(policy.ok()) << policy.status();
    return policy.ok() ? *policy : nullptr;
  }

  SimulatedClock clock_;
  std::shared_ptr<FakeMemoryOps> ops_;
  CachePolicies policies_;
  std::vector<std::string> triggers_;
};

TEST_F(SharedCachePolicyTest, TwoRunnersOnADeviceClearOncePerInterval) {
  const CachePolicyOptions options{.empty_cache_interval = absl::Seconds(10)};
  CacheUser a(For("mps", options));
  CacheUser b(For("mps", options));
  EXPECT_EQ(&a.policy(), &b.policy());
  EXPECT_EQ(a.policy().users(), 2);
  for (int interval = 0; interval < 3; ++interval) {
    clock_.AdvanceTime(absl::Seconds(10));
    a.BetweenBatches(/*idle=*/true);
    b.BetweenBatches(/*idle=*/true);
    clock_.AdvanceTime(absl::Seconds(3));
    b.BetweenBatches(/*idle=*/true);
    a.BetweenBatches(/*idle=*/true);
  }
  EXPECT_EQ(ops_->empties, 3);  // one per interval, not one per model
  EXPECT_EQ(a.policy().clears("interval"), 3);
}

TEST_F(SharedCachePolicyTest, EveryNCountsTheDevicesBatches) {
  const CachePolicyOptions options{.empty_cache_every = 4};
  CacheUser a(For("cuda:0", options));
  CacheUser b(For("cuda:0", options));
  for (int i = 0; i < 3; ++i) {
    a.BetweenBatches(/*idle=*/false);
    b.BetweenBatches(/*idle=*/false);
  }
  EXPECT_EQ(ops_->empties, 1);  // after the device's 4th batch (each model's 2nd)
}

TEST_F(SharedCachePolicyTest, IdleClearWaitsForEveryRunnerIdle) {
  const CachePolicyOptions options{.empty_cache_interval = absl::Seconds(10)};
  CacheUser a(For("mps", options));
  CacheUser b(For("mps", options));
  clock_.AdvanceTime(absl::Seconds(11));
  b.BetweenBatches(/*idle=*/false);  // b has a batch waiting
  a.BetweenBatches(/*idle=*/true);
  a.BetweenBatches(/*idle=*/true);
  EXPECT_EQ(ops_->empties, 0);
  b.BetweenBatches(/*idle=*/true);
  EXPECT_THAT(triggers_, ElementsAre("mps interval"));
}

TEST_F(SharedCachePolicyTest, BatchInFlightBlocksAnotherRunnersIdleClear) {
  const CachePolicyOptions options{.memory_watermark = 0.5};
  CacheUser a(For("mps", options));
  CacheUser b(For("mps", options));
  ops_->stats.allocated_bytes = 900;
  b.WorkStarted();  // b's queue was idle, and a batch has started since
  a.BetweenBatches(/*idle=*/true);
  EXPECT_EQ(ops_->empties, 0);
  b.WorkEnded();
  b.BetweenBatches(/*idle=*/true);
  EXPECT_THAT(triggers_, ElementsAre("mps watermark"));
}

TEST_F(SharedCachePolicyTest, RunnerLeavingNoLongerBlocksIdle) {
  const CachePolicyOptions options{.empty_cache_interval = absl::Seconds(10)};
  CacheUser a(For("mps", options));
  {
    CacheUser b(For("mps", options));
    b.BetweenBatches(/*idle=*/false);
    clock_.AdvanceTime(absl::Seconds(11));
    a.BetweenBatches(/*idle=*/true);
    EXPECT_EQ(ops_->empties, 0);
    EXPECT_EQ(a.policy().users(), 2);
  }  // b's runner is freed while it had work
  EXPECT_EQ(a.policy().users(), 1);
  a.BetweenBatches(/*idle=*/true);
  EXPECT_EQ(ops_->empties, 1);
}

TEST_F(SharedCachePolicyTest, OutOfMemoryOfTwoRunnersAtOnceClearsOnce) {
  // b runs out of memory while a's out-of-memory clearing is under way.
  class ReentrantOps : public FakeMemoryOps {
   public:
    void EmptyCache() override {
      FakeMemoryOps::EmptyCache();
      if (during != nullptr) std::exchange(during, nullptr)->OnOutOfMemory();
    }
    CacheUser* during = nullptr;
  };
  auto ops = std::make_shared<ReentrantOps>();
  CacheUser a(For("cuda:0", {}, ops));
  CacheUser b(For("cuda:0", {}, ops));
  ops->during = &b;
  a.OnOutOfMemory();
  EXPECT_EQ(ops->empties, 1);
  EXPECT_THAT(triggers_, ElementsAre("cuda:0 oom"));
  b.OnOutOfMemory();  // a later one clears again
  EXPECT_EQ(a.policy().clears("oom"), 2);
}

TEST_F(SharedCachePolicyTest, SeparateDevicesKeepSeparatePolicies) {
  const CachePolicyOptions options{.empty_cache_interval = absl::Seconds(10)};
  auto cuda1_ops = std::make_shared<FakeMemoryOps>();
  CacheUser a(For("cuda:0", options));
  CacheUser a2(For("cuda:0", options));
  CacheUser b(For("cuda:1", options, cuda1_ops));
  EXPECT_EQ(&a.policy(), &a2.policy());
  EXPECT_NE(&a.policy(), &b.policy());
  EXPECT_EQ(policies_.size(), 2);
  a2.BetweenBatches(/*idle=*/false);  // busy: blocks cuda:0, not cuda:1
  clock_.AdvanceTime(absl::Seconds(11));
  a.BetweenBatches(/*idle=*/true);
  b.BetweenBatches(/*idle=*/true);
  EXPECT_THAT(triggers_, ElementsAre("cuda:1 interval"));
  a2.BetweenBatches(/*idle=*/true);
  EXPECT_THAT(triggers_, ElementsAre("cuda:1 interval", "cuda:0 interval"));
  EXPECT_EQ(ops_->empties, 1);
  EXPECT_EQ(cuda1_ops->empties, 1);
}

TEST_F(SharedCachePolicyTest, PolicyFreedWithItsLastRunner) {
  std::weak_ptr<FakeMemoryOps> ops = ops_;
  const CachePolicy* first = nullptr;
  {
    auto a = std::make_unique<CacheUser>(For("mps", {.empty_cache_every = 1}));
    first = &a->policy();
    ops_.reset();  // the policy keeps its ops alive
    CacheUser b(For("mps", {}));
    EXPECT_EQ(&b.policy(), first);
    a.reset();
    EXPECT_EQ(policies_.size(), 1);
    b.BetweenBatches(/*idle=*/false);  // a's ops still serve b
    EXPECT_THAT(triggers_, ElementsAre("mps every_n"));
  }
  EXPECT_EQ(policies_.size(), 0);
  EXPECT_TRUE(ops.expired());
  // The next runner on the device starts a fresh policy from its options.
  CacheUser c(For("mps", {}, std::make_shared<FakeMemoryOps>()));
  EXPECT_EQ(c.policy().users(), 1);
  EXPECT_EQ(c.policy().clears(), 0);
}

TEST(CachePoliciesTest, BadOptionsAreRejectedAndNothingIsKept) {
  CachePolicies policies;
  EXPECT_THAT(policies.For("mps", {.empty_cache_every = -1}, std::make_shared<FakeMemoryOps>()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(policies.size(), 0);
  auto ok = policies.For("mps", {}, std::make_shared<FakeMemoryOps>());
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(policies.size(), 1);
}

}  // namespace
}  // namespace metalserve
