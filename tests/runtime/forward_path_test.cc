// The runtime's one forward path and its shared device thread, seen through
// the torch-free face (Runner, RuntimeOptions::forward_observer,
// DeviceThread) on CPU with the models exported by models/export.py.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
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
using ::testing::Pair;

// Every forward through the path, in order, with the thread it ran on.
class ForwardLog {
 public:
  ForwardObserver Observer() {
    return [this](ForwardPurpose purpose, int64_t rows) {
      absl::MutexLock lock(&mu_);
      calls_.emplace_back(purpose, rows);
      threads_.push_back(std::this_thread::get_id());
    };
  }
  std::vector<std::pair<ForwardPurpose, int64_t>> calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  std::vector<std::pair<ForwardPurpose, int64_t>> Of(ForwardPurpose p) const {
    std::vector<std::pair<ForwardPurpose, int64_t>> out;
    for (const auto& c : calls()) {
      if (c.first == p) out.push_back(c);
    }
    return out;
  }
  std::vector<std::thread::id> threads() const {
    absl::MutexLock lock(&mu_);
    return threads_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::pair<ForwardPurpose, int64_t>> calls_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread::id> threads_ ABSL_GUARDED_BY(mu_);
};

RuntimeOptions Options(const std::string& model) {
  RuntimeOptions o;
  o.model_path = absl::StrCat(METALSERVE_MODELS_DIR, "/", model, ".pt");
  o.signature_codec = ModelConfigSignatureCodec();
  o.device = "cpu";
  o.threads = 2;
  return o;
}

Tensor Zeros(std::vector<int64_t> shape) {
  Tensor t;
  t.name = "input";
  t.dtype = DType::kFloat32;
  t.shape = std::move(shape);
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  t.data.assign(static_cast<size_t>(n) * sizeof(float), '\0');
  return t;
}

// Warm-up and verification must run the model through the same path that
// serves: if either called the module directly, its forwards would be
// missing from the log.
TEST(ForwardPathTest, ProbeVerificationWarmUpAndServingAllGoThroughTheOnePath) {
  ForwardLog log;
  RuntimeOptions o = Options("tiny_cnn");
  o.optimize = "freeze";  // one level to verify: the counts below are exact
  o.warmup_batch_sizes = {1, 4};
  o.forward_observer = log.Observer();
  auto created = CreateTorchRunner(o);
  ASSERT_THAT(created, IsOk());
  Runner& runner = **created;
  ASSERT_EQ(runner.info().optimization, "freeze") << runner.info().optimization_reason;

  EXPECT_THAT(log.Of(ForwardPurpose::kProbe), ElementsAre(Pair(ForwardPurpose::kProbe, 2)));
  // Per batch size: plain once, candidate twice; at 4 also rows 0, 1, 2, 3
  // alone for batch invariance.
  const auto verify = log.Of(ForwardPurpose::kVerify);
  EXPECT_EQ(verify.size(), 3u + 3u + 4u);
  // Per size, with 2 intra-op threads, three timed forwards on 2 and three
  // on 1 (intra_op_threads.h), each after an untimed one, except on 2 at the
  // second size: the plan was optimized at the first.
  const std::vector<std::pair<ForwardPurpose, int64_t>> at1(8, {ForwardPurpose::kWarmUp, 1});
  const std::vector<std::pair<ForwardPurpose, int64_t>> at4(7, {ForwardPurpose::kWarmUp, 4});
  std::vector<std::pair<ForwardPurpose, int64_t>> warmup = at1;
  warmup.insert(warmup.end(), at4.begin(), at4.end());
  EXPECT_EQ(log.Of(ForwardPurpose::kWarmUp), warmup);
  EXPECT_TRUE(log.Of(ForwardPurpose::kServe).empty());
  // Probe, then verification, then warm-up.
  const auto calls = log.calls();
  ASSERT_EQ(calls.size(), 1u + verify.size() + warmup.size());
  EXPECT_EQ(calls.front().first, ForwardPurpose::kProbe);
  EXPECT_EQ(calls[1].first, ForwardPurpose::kVerify);
  EXPECT_EQ(calls.back().first, ForwardPurpose::kWarmUp);

  ASSERT_THAT(runner.Run({Zeros({3, 3, 8, 8})}), IsOk());
  const Tensor row = Zeros({1, 3, 8, 8});
  BatchedInput padded;
  padded.dtype = DType::kFloat32;
  padded.shape = {2, 3, 8, 8};
  padded.pieces = {row.data};
  ASSERT_THAT(runner.RunBatch({padded}), IsOk());
  EXPECT_THAT(log.Of(ForwardPurpose::kServe),
              ElementsAre(Pair(ForwardPurpose::kServe, 3), Pair(ForwardPurpose::kServe, 2)));
  // All of it on one thread: the device thread, not the caller.
  for (const auto& id : log.threads()) EXPECT_EQ(id, log.threads().front());
  EXPECT_NE(log.threads().front(), std::this_thread::get_id());
}

// On the CPU with one timed forward per size: the first warm-up size pays
// two untimed forwards (the profiling executor's profiling run and the run
// that optimizes the plan, which then serves every size); a later size is
// timed from its first forward, and a short one (tiny_cnn's, under
// kWarmUpSettledForward) gets one more, the least counting. One intra-op thread:
// no comparison of thread counts.
TEST(ForwardPathTest, OnTheCpuOnlyTheFirstWarmUpSizeHasUntimedForwards) {
  ForwardLog log;
  RuntimeOptions o = Options("tiny_cnn");
  o.optimize = "freeze";
  o.threads = 1;
  o.warmup_batch_sizes = {8, 1, 4};
  o.forward_observer = log.Observer();
  auto created = CreateTorchRunner(o);
  ASSERT_THAT(created, IsOk());
  const auto w = [](int64_t b) { return Pair(ForwardPurpose::kWarmUp, b); };
  EXPECT_THAT(log.Of(ForwardPurpose::kWarmUp),
              ElementsAre(w(1), w(1), w(1), w(4), w(4), w(8), w(8)));
  const std::vector<WarmupTiming>& timings = (*created)->info().warmup_timings;
  ASSERT_EQ(timings.size(), 3u);
  for (const WarmupTiming& t : timings) {
    EXPECT_GT(t.forward, absl::ZeroDuration()) << "batch " << t.batch_size;
    EXPECT_LT(t.forward, absl::InfiniteDuration()) << "batch " << t.batch_size;
  }
}

// A later size whose first forward is long (resnet18's, tens of
// milliseconds on one thread) is timed by that forward alone.
TEST(ForwardPathTest, ALongForwardAtALaterWarmUpSizeIsTimedOnce) {
  ForwardLog log;
  RuntimeOptions o = Options("resnet18");
  o.optimize = "none";  // nothing to verify: the test is the warm-up
  o.threads = 1;
  o.warmup_batch_sizes = {1, 2};
  o.forward_observer = log.Observer();
  auto created = CreateTorchRunner(o);
  ASSERT_THAT(created, IsOk());
  const std::vector<WarmupTiming>& timings = (*created)->info().warmup_timings;
  ASSERT_EQ(timings.size(), 2u);
  if (timings[1].forward < kWarmUpSettledForward) {
    GTEST_SKIP() << "resnet18 at batch 2 took " << absl::FormatDuration(timings[1].forward)
                 << " here, under the " << absl::FormatDuration(kWarmUpSettledForward)
                 << " this test needs";
  }
  const auto w = [](int64_t b) { return Pair(ForwardPurpose::kWarmUp, b); };
  EXPECT_THAT(log.Of(ForwardPurpose::kWarmUp), ElementsAre(w(1), w(1), w(1), w(2)));
}

// A reduced precision is compared with fp32 through the path too (the fp32
// reference and the bf16 graph), before the optimized graph is verified.
TEST(ForwardPathTest, PrecisionComparisonGoesThroughThePath) {
  ForwardLog log;
  RuntimeOptions o = Options("tiny_cnn");
  o.optimize = "none";
  o.precision = "bf16";
  o.warmup_batch_sizes = {2};
  o.forward_observer = log.Observer();
  auto created = CreateTorchRunner(o);
  ASSERT_THAT(created, IsOk());
  // fp32 once, bf16 twice; no invariance check for the precision comparison.
  EXPECT_EQ(log.Of(ForwardPurpose::kVerify).size(), 3u);
  EXPECT_EQ(log.Of(ForwardPurpose::kWarmUp).size(), 8u);  // on 2 threads and on 1
}

// Two runners given one DeviceThread do all their work on it; the thread
// outlives the first runner and keeps serving the second.
TEST(ForwardPathTest, TwoRunnersShareOneDeviceThread) {
  std::shared_ptr<DeviceThread> thread = DeviceThread::Create("cpu");
  std::thread::id device_id;
  ASSERT_TRUE(thread->RunSync([&] { device_id = std::this_thread::get_id(); }).ok());
  ForwardLog log_a, log_b;
  RuntimeOptions a = Options("tiny_cnn");
  a.device_thread = thread;
  a.forward_observer = log_a.Observer();
  RuntimeOptions b = Options("identity");
  b.device_thread = thread;
  // Unbatched on the CPU, its one-row forwards could run on the caller while
  // the device is idle (torch_runner_test.cc,
  // AnUnbatchedCpuModelRunsOnTheCallerWhileTheDeviceIsIdle); here every
  // forward goes through the shared thread.
  b.cpu_forward_on_caller = false;
  b.forward_observer = log_b.Observer();
  const long owners = thread.use_count();  // this test and the two options
  auto runner_a = CreateTorchRunner(a);
  auto runner_b = CreateTorchRunner(b);
  ASSERT_THAT(runner_a, IsOk());
  ASSERT_THAT(runner_b, IsOk());
  EXPECT_EQ(thread.use_count(), owners + 2);

  ASSERT_THAT((*runner_a)->Run({Zeros({2, 3, 8, 8})}), IsOk());
  ASSERT_THAT((*runner_b)->Run({Zeros({2, 4})}), IsOk());
  runner_a->reset();
  EXPECT_EQ(thread.use_count(), owners + 1);
  EXPECT_TRUE(thread->accepting());
  ASSERT_THAT((*runner_b)->Run({Zeros({1, 4})}), IsOk());

  ASSERT_FALSE(log_a.threads().empty());
  ASSERT_FALSE(log_b.threads().empty());
  for (const auto& id : log_a.threads()) EXPECT_EQ(id, device_id);
  for (const auto& id : log_b.threads()) EXPECT_EQ(id, device_id);
}

// A runner whose device thread was shut down answers UNAVAILABLE instead of
// running on another thread.
TEST(ForwardPathTest, RunAfterTheDeviceThreadShutDownIsUnavailable) {
  std::shared_ptr<DeviceThread> thread = DeviceThread::Create("cpu");
  RuntimeOptions o = Options("identity");
  o.device_thread = thread;
  auto runner = CreateTorchRunner(o);
  ASSERT_THAT(runner, IsOk());
  thread->Shutdown();
  EXPECT_EQ((*runner)->Run({Zeros({1, 4})}).status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace metalserve
