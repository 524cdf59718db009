#include "server/runtime/hybrid_runner.h"

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace metalserve {
namespace {

using ::metalserve::testing::IsOk;
using ::metalserve::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::Duration Ms(double ms) { return absl::Microseconds(ms * 1000); }

// The write-up's shape: the CPU wins at batch 1, the accelerator at batch 32.
std::vector<DevicePicker::Device> AcceleratorAndCpu() {
  return {{"cuda:0", {{1, Ms(0.5)}, {32, Ms(1.0)}}}, {"cpu", {{1, Ms(0.1)}, {32, Ms(5.0)}}}};
}

TEST(DevicePickerTest, IdleDevicesTakeEachBatchWhereItIsFastest) {
  auto p = DevicePicker::Create(AcceleratorAndCpu());
  ASSERT_THAT(p.status(), IsOk());
  EXPECT_EQ(p->Pick(1), 1);   // cpu 0.1 ms < cuda 0.5 ms
  EXPECT_EQ(p->Pick(32), 0);  // cuda 1 ms < cpu 5 ms
}

TEST(DevicePickerTest, CostIsInterpolatedBetweenMeasuredSizesAndScaledAbove) {
  auto p = DevicePicker::Create(AcceleratorAndCpu());
  ASSERT_THAT(p.status(), IsOk());
  EXPECT_EQ(p->Cost(1, 1), Ms(0.1));
  EXPECT_NEAR(absl::ToDoubleMilliseconds(p->Cost(1, 16)), 0.1 + 4.9 * 15 / 31, 1e-6);
  EXPECT_EQ(p->Cost(0, 64), Ms(2.0));  // twice the largest measured size
}

TEST(DevicePickerTest, WorkAheadOnTheAcceleratorSendsABatchToTheCpuWhenItFinishesFirst) {
  auto p = DevicePicker::Create(AcceleratorAndCpu());
  ASSERT_THAT(p.status(), IsOk());
  std::vector<absl::Duration> running;
  for (int i = 0; i < 3; ++i) running.push_back(p->Started(0, 32));  // 3 ms queued on cuda
  EXPECT_EQ(p->Pick(32), 0);  // cuda 3 + 1 = 4 ms < cpu 5 ms
  for (int i = 0; i < 2; ++i) running.push_back(p->Started(0, 32));  // 5 ms queued
  EXPECT_EQ(p->Pick(32), 1);  // cuda 6 ms > cpu 5 ms
  p->Started(1, 32);          // the cpu takes it: 5 ms queued there
  EXPECT_EQ(p->Pick(32), 0);  // cuda 6 ms < cpu 10 ms
  for (const absl::Duration d : running) p->Finished(0, 32, d, Ms(1.0));
  EXPECT_EQ(p->Outstanding(0), absl::ZeroDuration());
}

TEST(DevicePickerTest, ObservedBatchesRefineTheCostSoASlowedDeviceLosesItsShare) {
  auto p = DevicePicker::Create(AcceleratorAndCpu());
  ASSERT_THAT(p.status(), IsOk());
  ASSERT_EQ(p->Pick(1), 1);
  // The CPU now takes 2 ms at batch 1 (its cores busy with the server).
  for (int i = 0; i < 20; ++i) {
    const absl::Duration predicted = p->Started(1, 1);
    p->Finished(1, 1, predicted, Ms(2.0));
  }
  EXPECT_GT(p->Cost(1, 1), Ms(1.9));
  EXPECT_EQ(p->Pick(1), 0);
}

// Runs `n` batches of `rows` through the picker, each taking what `truth`
// says for the device it went to; returns the batches per device.
std::vector<int> RunBatches(DevicePicker& p, int n, int64_t rows,
                            const std::vector<absl::Duration>& truth) {
  std::vector<int> count(p.size(), 0);
  for (int i = 0; i < n; ++i) {
    const int d = p.Pick(rows);
    const absl::Duration predicted = p.Started(d, rows);
    p.Finished(d, rows, predicted, truth[d]);
    ++count[d];
  }
  return count;
}

TEST(DevicePickerTest, APassedOverDeviceWhoseFigureIsStaleIsRecheckedAndThenWins) {
  // Warm-up said cuda 1.0 ms, cpu 0.9 ms at batch 1; really cuda takes
  // 0.2 ms. Without a re-check the cpu would take every batch.
  auto p = DevicePicker::Create({{"cuda:0", {{1, Ms(1.0)}}}, {"cpu", {{1, Ms(0.9)}}}});
  ASSERT_THAT(p.status(), IsOk());
  const std::vector<absl::Duration> truth = {Ms(0.2), Ms(0.9)};
  EXPECT_THAT(RunBatches(*p, DevicePicker::kRecheckEvery, 1, truth),
              ElementsAre(0, DevicePicker::kRecheckEvery));
  EXPECT_EQ(p->Pick(1), 0);  // the re-check
  EXPECT_THAT(RunBatches(*p, 100, 1, truth), ElementsAre(100, 0));
  EXPECT_LT(p->Cost(0, 1), Ms(0.9));
}

TEST(DevicePickerTest, ADeviceFarSlowerOrBusyIsNotRechecked) {
  // cpu at 32 rows: 5 ms against cuda's 1 ms, beyond kRecheckMaxRatio.
  auto p = DevicePicker::Create(AcceleratorAndCpu());
  ASSERT_THAT(p.status(), IsOk());
  EXPECT_THAT(RunBatches(*p, 200, 32, {Ms(1.0), Ms(5.0)}), ElementsAre(200, 0));
  // Within the ratio but busy: no re-check while it runs something.
  auto q = DevicePicker::Create({{"cuda:0", {{1, Ms(1.0)}}}, {"cpu", {{1, Ms(0.9)}}}});
  ASSERT_THAT(q.status(), IsOk());
  RunBatches(*q, DevicePicker::kRecheckEvery, 1, {Ms(1.0), Ms(0.9)});
  const absl::Duration running = q->Started(0, 8);  // cuda busy with another size
  EXPECT_EQ(q->Pick(1), 1);
  q->Finished(0, 8, running, Ms(1.0));
  EXPECT_EQ(q->Pick(1), 0);
}

TEST(DevicePickerTest, NeedsTwoDevicesWithCosts) {
  EXPECT_THAT(DevicePicker::Create({{"cpu", {{1, Ms(1)}}}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("two or more")));
  EXPECT_THAT(DevicePicker::Create({{"cpu", {{1, Ms(1)}}}, {"cuda:0", {}}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cuda:0")));
}

// A runner that multiplies its float input by `scale`, with given warm-up
// timings, counting its batches.
class ScaleRunner : public Runner {
 public:
  ScaleRunner(std::string device, float scale, std::vector<WarmupTiming> timings,
              std::vector<int64_t> shape = {-1, 4})
      : scale_(scale) {
    info_.name = "m";
    info_.device = std::move(device);
    info_.inputs = {{"x", DType::kFloat32, shape}};
    info_.outputs = {{"y", DType::kFloat32, shape}};
    info_.warmup_timings = std::move(timings);
  }
  const ModelInfo& info() const override { return info_; }
  absl::StatusOr<std::vector<Tensor>> Run(const std::vector<Tensor>& inputs) override {
    ++runs;
    Tensor out = inputs[0];
    out.name = "y";
    for (size_t i = 0; i + 4 <= out.data.size(); i += 4) {
      float f;
      std::memcpy(&f, out.data.data() + i, 4);
      f *= scale_;
      std::memcpy(out.data.data() + i, &f, 4);
    }
    return std::vector<Tensor>{out};
  }
  MemoryStats Memory() override { return {}; }
  void BetweenBatches(bool) override { ++between; }
  int runs = 0;
  int between = 0;

 private:
  ModelInfo info_;
  float scale_;
};

struct Made {
  std::vector<ScaleRunner*> runners;
  HybridRunner::Maker maker(float cpu_scale) {
    return [this, cpu_scale](const std::string& d) -> absl::StatusOr<std::unique_ptr<Runner>> {
      const bool cpu = d == "cpu";
      auto r = std::make_unique<ScaleRunner>(
          d, cpu ? cpu_scale : 1.0f,
          cpu ? std::vector<WarmupTiming>{{1, Ms(0.1)}, {32, Ms(5)}}
              : std::vector<WarmupTiming>{{1, Ms(0.5)}, {32, Ms(1)}});
      runners.push_back(r.get());
      return r;
    };
  }
};

Tensor Rows(int64_t rows) {
  Tensor t;
  t.name = "x";
  t.dtype = DType::kFloat32;
  t.shape = {rows, 4};
  t.data.assign(static_cast<size_t>(rows * 16), '\0');
  const float one = 1.0f;
  for (int64_t i = 0; i < rows * 4; ++i) std::memcpy(t.data.data() + i * 4, &one, 4);
  return t;
}

TEST(HybridRunnerTest, SendsEachBatchToThePickedDeviceAndReportsBoth) {
  Made made;
  auto h = HybridRunner::Create({"cuda:0", "cpu"}, made.maker(1.0f), {1, 32}, 1e-3, nullptr);
  ASSERT_THAT(h.status(), IsOk());
  EXPECT_EQ((*h)->info().device, "cuda:0+cpu");
  EXPECT_THAT((*h)->Devices(), ElementsAre("cuda:0", "cpu"));
  EXPECT_EQ((*h)->MemoryPerDevice().size(), 2u);
  std::vector<std::pair<std::string, int64_t>> reported;
  EXPECT_TRUE((*h)->set_on_device_batch(
      [&](const std::string& device, int64_t rows, absl::Duration) {
        reported.emplace_back(device, rows);
      }));
  EXPECT_EQ((*h)->info().device_choice.reason, "hybrid");
  EXPECT_EQ((*h)->info().device_choice.timings.size(), 4u);
  const int cpu_before = made.runners[1]->runs, cuda_before = made.runners[0]->runs;
  ASSERT_THAT((*h)->Run({Rows(1)}).status(), IsOk());
  ASSERT_THAT((*h)->Run({Rows(32)}).status(), IsOk());
  EXPECT_EQ(made.runners[1]->runs - cpu_before, 1);   // batch 1 on the cpu
  EXPECT_EQ(made.runners[0]->runs - cuda_before, 1);  // batch 32 on cuda
  EXPECT_THAT((*h)->BatchesPerDevice(), ElementsAre(1, 1));
  EXPECT_THAT(reported, ElementsAre(std::make_pair(std::string("cpu"), int64_t{1}),
                                    std::make_pair(std::string("cuda:0"), int64_t{32})));
  (*h)->BetweenBatches(true);
  EXPECT_EQ(made.runners[0]->between, 1);
  EXPECT_EQ(made.runners[1]->between, 1);
}

TEST(HybridRunnerTest, DevicesThatDisagreeAreRefusedAtLoad) {
  Made made;
  auto h = HybridRunner::Create({"cuda:0", "cpu"}, made.maker(1.01f), {1, 32}, 1e-3, nullptr);
  EXPECT_THAT(h.status(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                   AllOf(HasSubstr("cuda:0 and cpu disagree at batch 1"),
                                         HasSubstr("max relative deviation"))));
}

TEST(HybridRunnerTest, ALoadFailureNamesItsDeviceAndADuplicateIsRefused) {
  HybridRunner::Maker failing = [](const std::string& d) -> absl::StatusOr<std::unique_ptr<Runner>> {
    if (d == "mps") return absl::FailedPreconditionError("MPS probe failed");
    return std::unique_ptr<Runner>(new ScaleRunner(d, 1, {{1, Ms(1)}}));
  };
  EXPECT_THAT(HybridRunner::Create({"mps", "cpu"}, failing, {1}, 1e-3, nullptr).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("hybrid device mps: MPS probe failed")));
  EXPECT_THAT(HybridRunner::Create({"cpu", "cpu"}, failing, {1}, 1e-3, nullptr).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("listed twice")));
}

TEST(HybridRunnerTest, AgreementProbeGivesOtherVariableDimensionsOneElement) {
  // A sequence model: [batch, steps, 4] with steps variable too.
  HybridRunner::Maker make = [](const std::string& d) -> absl::StatusOr<std::unique_ptr<Runner>> {
    return std::unique_ptr<Runner>(new ScaleRunner(d, 1, {{1, Ms(1)}}, {-1, -1, 4}));
  };
  EXPECT_THAT(HybridRunner::Create({"cuda:0", "cpu"}, make, {1, 8}, 1e-3, nullptr).status(),
              IsOk());
}

TEST(CompareOutputsTest, FloatsWithinToleranceOfTheScaleAgreeOthersMustBeEqual) {
  Tensor a = Rows(2), b = Rows(2);
  EXPECT_THAT(CompareOutputs({a}, {b}, 1e-3), IsOk());
  float f = 1.0005f;
  std::memcpy(b.data.data(), &f, 4);
  EXPECT_THAT(CompareOutputs({a}, {b}, 1e-3), IsOk());
  f = 1.01f;
  std::memcpy(b.data.data(), &f, 4);
  EXPECT_THAT(CompareOutputs({a}, {b}, 1e-3), StatusIs(absl::StatusCode::kFailedPrecondition));
  Tensor i = a, j = a;
  i.dtype = j.dtype = DType::kInt32;
  j.data[0] ^= 1;
  EXPECT_THAT(CompareOutputs({i}, {j}, 1.0), StatusIs(absl::StatusCode::kFailedPrecondition,
                                                      HasSubstr("values differ")));
}

}  // namespace
}  // namespace metalserve
