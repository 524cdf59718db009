// Intra-op threads per batch size (intra_op_threads.h): the rule, and the
// runner serving a small model's batches on one thread when given two.
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/model_config/model_config.h"
#include "server/runtime/device_thread.h"
#include "server/runtime/intra_op_threads.h"
#include "server/runtime/torch_runner.h"
#include "tests/testing/status_matchers.h"

namespace metalserve {
namespace {

using ::metalserve::testing::IsOk;
using ::testing::ElementsAre;

TEST(IntraOpThreadsTest, AForwardBelowTheFloorRunsOnOneThreadHoweverFastItsParallelRun) {
  EXPECT_EQ(ChooseIntraOpThreads(absl::Microseconds(300), absl::Microseconds(100), 8), 1);
}

TEST(IntraOpThreadsTest, SeveralThreadsServeWhenClearlyFaster) {
  EXPECT_EQ(ChooseIntraOpThreads(absl::Milliseconds(10), absl::Milliseconds(6), 2), 2);
}

TEST(IntraOpThreadsTest, OneThreadServesWhenTheParallelGainIsSmall) {
  EXPECT_EQ(ChooseIntraOpThreads(absl::Milliseconds(10), absl::Milliseconds(9), 2), 1);
}

TEST(IntraOpThreadsTest, OneThreadConfiguredStaysOne) {
  EXPECT_EQ(ChooseIntraOpThreads(absl::Milliseconds(10), absl::Milliseconds(1), 1), 1);
}

// at::set_num_threads also sets process-wide state (the count LibTorch gives
// threads that start later, and its pthreadpool kernels'): a thread whose own
// count already matches applies it again when another thread has set a
// different one since (a forward on an executor, then another model's batch
// on the device thread). Seen from a fresh thread, which starts at the
// process's count.
TEST(IntraOpThreadsTest, AThreadReappliesItsCountAfterAnotherThreadSetADifferentOne) {
  const int before = CurrentIntraOpThreads();
  auto on_a_new_thread = [](auto fn) {
    std::thread t(fn);
    t.join();
  };
  SetIntraOpThreads(2);  // this thread: "the device thread"
  on_a_new_thread([] { SetIntraOpThreads(1); });  // "an executor"
  int fresh = 0;
  on_a_new_thread([&] { fresh = CurrentIntraOpThreads(); });
  EXPECT_EQ(fresh, 1);
  SetIntraOpThreads(2);  // its own count is still 2: set again all the same
  on_a_new_thread([&] { fresh = CurrentIntraOpThreads(); });
  EXPECT_EQ(fresh, 2);
  EXPECT_EQ(CurrentIntraOpThreads(), 2);
  SetIntraOpThreads(before);
}

// A count set directly (a model's --threads at load) goes through
// ApplyIntraOpThreads, so a thread whose own count already matches still
// sees that the process-wide one moved: here an executor that set 1 before a
// model was loaded with 2 sets 1 again on its next forward.
TEST(IntraOpThreadsTest, ACountAppliedAtLoadIsSeenByAThreadAlreadyAtItsCount) {
  const int before = CurrentIntraOpThreads();
  std::shared_ptr<DeviceThread> executor = DeviceThread::Create("executor");
  ASSERT_THAT(executor->RunSync([] { SetIntraOpThreads(1); }), IsOk());
  ApplyIntraOpThreads(2);  // this thread: a model's load with --threads=2
  ASSERT_THAT(executor->RunSync([] { SetIntraOpThreads(1); }), IsOk());
  int fresh = 0;
  std::thread([&] { fresh = CurrentIntraOpThreads(); }).join();
  EXPECT_EQ(fresh, 1);
  executor->Shutdown();
  SetIntraOpThreads(before);
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

// tiny_cnn's forward takes tens of microseconds on one thread, far below
// the floor: with --threads=2 its served batches must not enter OpenMP's
// parallel regions, whose barriers cost milliseconds on a shared machine
// (before this, every forward ran on the 2 threads configured).
TEST(IntraOpThreadsTest, TinyModelServesItsBatchesOnOneIntraOpThread) {
  absl::Mutex mu;
  std::vector<std::pair<int64_t, int>> served;  // rows, intra-op threads
  RuntimeOptions o;
  o.model_path = absl::StrCat(METALSERVE_MODELS_DIR, "/tiny_cnn.pt");
  o.signature_codec = ModelConfigSignatureCodec();
  o.device = "cpu";
  o.optimize = "freeze";
  o.threads = 2;
  o.warmup_batch_sizes = {1, 32};
  o.forward_observer = [&](ForwardPurpose purpose, int64_t rows) {
    if (purpose != ForwardPurpose::kServe) return;
    absl::MutexLock l(&mu);
    served.emplace_back(rows, CurrentIntraOpThreads());  // on the device thread
  };
  auto runner = CreateTorchRunner(o);
  ASSERT_THAT(runner, IsOk());
  const std::vector<WarmupTiming>& timings = (*runner)->info().warmup_timings;
  ASSERT_EQ(timings.size(), 2u);
  for (const WarmupTiming& w : timings) {
    EXPECT_EQ(w.intra_op_threads, 1) << "batch " << w.batch_size << ": " << w.forward;
  }
  ASSERT_THAT((*runner)->Run({Zeros({1, 3, 8, 8})}), IsOk());
  ASSERT_THAT((*runner)->Run({Zeros({20, 3, 8, 8})}), IsOk());
  absl::MutexLock l(&mu);
  EXPECT_THAT(served, ElementsAre(std::make_pair(int64_t{1}, 1), std::make_pair(int64_t{20}, 1)));
}

}  // namespace
}  // namespace metalserve
