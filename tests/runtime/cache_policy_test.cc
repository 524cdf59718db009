#include "server/runtime/cache_policy.h"

#include <string>
#include <utility>
#include <vector>

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

}  // namespace
}  // namespace metalserve
