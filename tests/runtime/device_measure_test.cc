// How CreateTorchRunner chooses and reports the device (device_measure.cc)
// with real LibTorch on the CPU and injected platforms for the devices this
// machine lacks: first_available's probe failures, shared device threads
// (the repository's), and the small LSTM of the write-up.
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/model_config/model_config.h"
#include "server/runtime/device_thread.h"
#include "server/runtime/torch_runner.h"
#include "tests/testing/status_matchers.h"

namespace metalserve {
namespace {

using ::metalserve::testing::IsOk;
using ::testing::ElementsAre;

RuntimeOptions Options(const std::string& model) {
  RuntimeOptions o;
  o.model_path = absl::StrCat(METALSERVE_MODELS_DIR, "/", model, ".pt");
  o.signature_codec = ModelConfigSignatureCodec();
  o.device = "cpu";
  o.threads = 2;
  o.warmup_batch_sizes = {1, 2};
  return o;
}

std::unique_ptr<Runner> MustCreate(const RuntimeOptions& o) {
  auto runner = CreateTorchRunner(o);
  EXPECT_THAT(runner, IsOk());
  return runner.ok() ? std::move(runner).value() : nullptr;
}

Tensor Floats(std::vector<int64_t> shape, const std::vector<float>& values) {
  Tensor t;
  t.name = "input";
  t.dtype = DType::kFloat32;
  t.shape = std::move(shape);
  t.data.assign(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  return t;
}

std::vector<float> Values(const Tensor& t) {
  std::vector<float> v(t.data.size() / sizeof(float));
  std::memcpy(v.data(), t.data.data(), t.data.size());
  return v;
}

std::vector<float> Ramp(int64_t n, float offset) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 37 + 11) % 101) / 101.0f + offset;
  return v;
}

// A machine that claims MPS and records the thread each probe ran on; the
// probe fails (as inside Apple's Virtualization Framework), so nothing is
// loaded there.
class FailingMpsPlatform final : public DevicePlatform {
 public:
  bool Available(const std::string& device, std::string* why) const override {
    *why = "not here";
    return device == "mps";
  }
  absl::Status Probe(const std::string& device) const override {
    absl::MutexLock l(&mu_);
    probed_on_[device] = std::this_thread::get_id();
    return absl::InternalError("MPS backend out of memory (MPS allocated: 0 bytes)");
  }
  std::map<std::string, std::thread::id> probed_on() const {
    absl::MutexLock l(&mu_);
    return probed_on_;
  }

 private:
  mutable absl::Mutex mu_;
  mutable std::map<std::string, std::thread::id> probed_on_ ABSL_GUARDED_BY(mu_);
};

constexpr char kSkippedMps[] =
    "mps: probe failed: MPS backend out of memory (MPS allocated: 0 bytes)";

TEST(DeviceMeasureTest, FirstAvailableReportsTheAcceleratorItSkippedForFailingItsProbe) {
  RuntimeOptions o = Options("identity");
  o.device = "first_available";
  o.device_platform = std::make_shared<FailingMpsPlatform>();
  auto runner = MustCreate(o);
  ASSERT_NE(runner, nullptr);
  EXPECT_EQ(runner->info().device, "cpu");
  const DeviceChoiceInfo& choice = runner->info().device_choice;
  EXPECT_EQ(choice.reason, "first_available");
  EXPECT_TRUE(choice.timings.empty());
  EXPECT_THAT(choice.skipped, ElementsAre(kSkippedMps));
}

// Shared device threads by resolved name (the repository's DeviceThreads):
// auto is measured on them, not given the fixed order, and a device's probe
// runs on that device's thread, where its other work runs.
TEST(DeviceMeasureTest, AutoWithSharedThreadsProbesAndMeasuresEachDeviceOnItsThread) {
  auto platform = std::make_shared<FailingMpsPlatform>();
  std::map<std::string, std::shared_ptr<DeviceThread>> threads;
  RuntimeOptions o = Options("identity");
  o.device = "auto";
  o.device_platform = platform;
  o.device_thread_for = [&threads](const std::string& device) {
    std::shared_ptr<DeviceThread>& t = threads[device];
    if (t == nullptr) t = DeviceThread::Create(device);
    return t;
  };
  auto runner = MustCreate(o);
  ASSERT_NE(runner, nullptr);
  const DeviceChoiceInfo& choice = runner->info().device_choice;
  EXPECT_EQ(choice.reason, "no_accelerator");
  EXPECT_EQ(choice.timings.size(), 2u);  // cpu at 1 and 2
  EXPECT_THAT(choice.skipped, ElementsAre(kSkippedMps));
  ASSERT_EQ(threads.count("cpu"), 1u);
  EXPECT_GT(threads["cpu"].use_count(), 1);  // the runner holds the thread given
  ASSERT_EQ(threads.count("mps"), 1u);
  std::thread::id mps_thread;
  ASSERT_THAT(threads["mps"]->RunSync([&] { mps_thread = std::this_thread::get_id(); }), IsOk());
  ASSERT_EQ(platform->probed_on().count("mps"), 1u);
  EXPECT_EQ(platform->probed_on().at("mps"), mps_thread);
}

// The write-up's kind of small LSTM (models/export.py lstm_small): auto
// measures it like any model, and a row's answer does not depend on the
// batch it rides in.
TEST(DeviceMeasureTest, SmallLstmIsMeasuredByAutoAndAnswersEachRowAlone) {
  RuntimeOptions o = Options("lstm_small");
  o.device = "auto";
  auto runner = MustCreate(o);
  ASSERT_NE(runner, nullptr);
  EXPECT_EQ(runner->info().inputs[0].shape, (std::vector<int64_t>{-1, 32, 16}));
  EXPECT_GE(runner->info().device_choice.timings.size(), 2u);  // each device at 1 and 2
  std::vector<float> rows = Ramp(512, 0);
  const std::vector<float> second = Ramp(512, 0.5f);
  Tensor one = Floats({1, 32, 16}, rows);
  rows.insert(rows.end(), second.begin(), second.end());
  Tensor two = Floats({2, 32, 16}, rows);
  one.name = two.name = "sequence";
  auto alone = runner->Run({one});
  auto batched = runner->Run({two});
  ASSERT_THAT(alone, IsOk());
  ASSERT_THAT(batched, IsOk());
  ASSERT_EQ((*batched)[0].shape, (std::vector<int64_t>{2, 4}));
  const std::vector<float> a = Values((*alone)[0]), b = Values((*batched)[0]);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(b[i], a[i], 1e-4f) << i;
}

}  // namespace
}  // namespace metalserve
