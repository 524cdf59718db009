#include "server/repository/memory_budget.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace metalserve {
namespace {

using ::metalserve::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int64_t kMiB = 1 << 20;

std::unique_ptr<MemoryBudget> BudgetOf(int64_t bytes) {
  return *MemoryBudget::Create({.budget_bytes = bytes});
}

TEST(MemoryBudgetTest, RefusesALoadThatWouldPassTheBudgetNamingTheFigures) {
  auto budget = BudgetOf(10 * kMiB);
  ASSERT_TRUE(budget->Reserve({"a", 1}, "cpu", 6 * kMiB).ok());
  const auto refused = budget->Reserve({"resnet50", 2}, "cpu", 5 * kMiB);
  EXPECT_THAT(refused.status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("loading resnet50 version 2 needs about 5.00 MiB; device cpu "
                                 "has 4.00 MiB of its 10.00 MiB budget free (loaded: a version "
                                 "1 6.00 MiB)")));
  EXPECT_EQ(budget->Used("cpu"), 6 * kMiB);
}

TEST(MemoryBudgetTest, AdmitsALoadThatFitsExactly) {
  auto budget = BudgetOf(10 * kMiB);
  ASSERT_TRUE(budget->Reserve({"a", 1}, "cpu", 6 * kMiB).ok());
  EXPECT_TRUE(budget->Reserve({"b", 1}, "cpu", 4 * kMiB).ok());
  EXPECT_EQ(budget->Used("cpu"), 10 * kMiB);
}

TEST(MemoryBudgetTest, EachDeviceHasItsOwnBudget) {
  auto budget = BudgetOf(10 * kMiB);
  ASSERT_TRUE(budget->Reserve({"a", 1}, "cpu", 8 * kMiB).ok());
  EXPECT_TRUE(budget->Reserve({"b", 1}, "cuda:0", 8 * kMiB).ok());
  EXPECT_EQ(budget->Used("cpu"), 8 * kMiB);
  EXPECT_EQ(budget->Used("cuda:0"), 8 * kMiB);
}

TEST(MemoryBudgetTest, ReleaseGivesTheFigureBackSoTheNextLoadFits) {
  auto budget = BudgetOf(10 * kMiB);
  const uint64_t first = *budget->Reserve({"a", 1}, "cpu", 8 * kMiB);
  EXPECT_FALSE(budget->Reserve({"b", 1}, "cpu", 8 * kMiB).ok());
  budget->Release(first);
  EXPECT_EQ(budget->Used("cpu"), 0);
  EXPECT_TRUE(budget->Reserve({"b", 1}, "cpu", 8 * kMiB).ok());
}

TEST(MemoryBudgetTest, CorrectReplacesTheEstimateWithTheMeasuredFigure) {
  auto budget = BudgetOf(10 * kMiB);
  const uint64_t first = *budget->Reserve({"a", 1}, "cpu", 2 * kMiB);
  budget->Correct(first, 7 * kMiB);
  EXPECT_EQ(budget->Used("cpu"), 7 * kMiB);
  EXPECT_THAT(budget->Reserve({"b", 1}, "cpu", 4 * kMiB).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("a version 1 7.00 MiB")));
  budget->Release(first);
  budget->Correct(first, kMiB);  // a released ticket stays released
  EXPECT_EQ(budget->Used("cpu"), 0);
}

TEST(MemoryBudgetTest, RemembersAModelsLastMeasuredFigurePerDeviceAfterItsRelease) {
  auto budget = BudgetOf(0);
  EXPECT_EQ(budget->LastFigure("m", "cpu"), 0);
  const uint64_t ticket = *budget->Reserve({"m", 1}, "cpu", 2 * kMiB);
  EXPECT_EQ(budget->LastFigure("m", "cpu"), 0);  // an estimate is not remembered
  budget->Correct(ticket, 9 * kMiB);
  budget->Release(ticket);
  EXPECT_EQ(budget->LastFigure("m", "cpu"), 9 * kMiB);
  EXPECT_EQ(budget->LastFigure("m", "cuda:0"), 0);
  EXPECT_EQ(budget->LastFigure("other", "cpu"), 0);
  budget->Correct(*budget->Reserve({"m", 2}, "cpu", 9 * kMiB), 7 * kMiB);
  EXPECT_EQ(budget->LastFigure("m", "cpu"), 7 * kMiB);
}

TEST(MemoryBudgetTest, ZeroBudgetAdmitsEverythingButKeepsTheFigures) {
  auto budget = BudgetOf(0);
  EXPECT_TRUE(budget->Reserve({"a", 1}, "cpu", int64_t{1} << 50).ok());
  EXPECT_EQ(budget->Used("cpu"), int64_t{1} << 50);
}

TEST(MemoryBudgetTest, NegativeBudgetIsRejectedNamingTheValue) {
  EXPECT_THAT(MemoryBudget::Create({.budget_bytes = -1}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("-1")));
}

TEST(MemoryBudgetTest, ConcurrentReservationsNeverPassTheBudget) {
  auto budget = BudgetOf(100);
  std::vector<std::thread> threads;
  std::atomic<int> admitted{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        if (budget->Reserve({"m", t * 100 + i}, "cpu", 3).ok()) ++admitted;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(admitted.load(), 33);
  EXPECT_EQ(budget->Used("cpu"), 99);
}

TEST(EstimateLoadBytesTest, WeightsTimesPrecisionAndOverheadPlusBatchBuffers) {
  const std::vector<TensorSpec> in = {{"input", DType::kFloat32, {-1, 3, 8, 8}}};
  const std::vector<TensorSpec> out = {{"logits", DType::kFloat32, {-1, 10}}};
  const int64_t buffers = 2 * 8 * (3 * 8 * 8 * 4 + 10 * 4);
  EXPECT_EQ(EstimateLoadBytes(1000, "fp32", in, out, 8),
            static_cast<int64_t>(1000 * kMemoryOverheadFactor) + buffers);
  EXPECT_EQ(EstimateLoadBytes(1000, "fp16", in, out, 8),
            static_cast<int64_t>(500 * kMemoryOverheadFactor) + buffers);
  EXPECT_EQ(WeightBytes(1000, "bf16"), 500);
}

TEST(ResidentBytesTest, ReadsThisProcessesResidentSet) {
#ifdef __linux__
  EXPECT_GT(ResidentBytes(), 0);
#else
  GTEST_SKIP() << "/proc/self/statm is Linux only";
#endif
}

}  // namespace
}  // namespace metalserve
