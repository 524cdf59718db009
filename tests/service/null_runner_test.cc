// NullRunner: zeros of the declared outputs for any batch, never reading the
// inputs; signatures it cannot answer are refused at Create.
#include "server/service/null_runner.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace metalserve {
namespace {

using ::testing::HasSubstr;

ModelSignature ImageSignature() {
  ModelSignature sig;
  sig.name = "resnet18";
  sig.inputs = {{"input", DType::kFloat32, {-1, 3, 224, 224}}};
  sig.outputs = {{"logits", DType::kFloat32, {-1, 1000}},
                 {"ids", DType::kInt64, {-1, 2}}};
  return sig;
}

TEST(NullRunnerTest, AnswersZerosOfEachDeclaredOutputForTheBatchRows) {
  auto runner = NullRunner::Create(ImageSignature());
  ASSERT_TRUE(runner.ok()) << runner.status();
  EXPECT_EQ((*runner)->info().name, "resnet18");
  EXPECT_EQ((*runner)->info().device, "none");
  const std::string row(3 * 224 * 224 * 4, '\x7f');
  BatchedInput in{DType::kFloat32, {3, 3, 224, 224}, {row, row}};  // 2 rows + 1 pad
  auto out = (*runner)->RunBatch({in});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[0].name, "logits");
  EXPECT_EQ((*out)[0].shape, (std::vector<int64_t>{3, 1000}));
  EXPECT_EQ((*out)[0].data, std::string(3 * 1000 * 4, '\0'));
  EXPECT_EQ((*out)[1].dtype, DType::kInt64);
  EXPECT_EQ((*out)[1].shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ((*out)[1].data.size(), 3u * 2 * 8);
}

// True once `r`'s device is idle, within `bound`: a batch's caller may
// return before the device thread has ended the item it ran.
bool IdleWithin(NullRunner& r, absl::Duration bound) {
  const absl::Time end = absl::Now() + bound;
  while (!r.DeviceIdle()) {
    if (absl::Now() >= end) return false;
    std::this_thread::yield();
  }
  return true;
}

// A simulated accelerator: the device is named so that the service treats
// the model as on CUDA, and it is busy (DeviceIdle false) while a batch
// waits there, idle again after. The bounded waits are for the batch to
// reach the device and leave it; the 300 ms device time only keeps it
// there meanwhile.
TEST(NullRunnerTest, ASimulatedDeviceIsBusyWhileABatchWaitsOnIt) {
  auto runner = NullRunner::Create(ImageSignature(), {.device_time = absl::Milliseconds(300)});
  ASSERT_TRUE(runner.ok()) << runner.status();
  NullRunner& r = **runner;
  EXPECT_EQ(r.info().device, "simulated-cuda");
  EXPECT_TRUE(r.DeviceIdle());
  const std::string row(3 * 224 * 224 * 4, '\0');
  absl::StatusOr<std::vector<Tensor>> out;
  std::thread caller([&] { out = r.RunBatch({BatchedInput{DType::kFloat32, {1, 3, 224, 224}, {row}}}); });
  const absl::Time end = absl::Now() + absl::Seconds(30);
  bool busy = false;
  while (!busy && absl::Now() < end) busy = !r.DeviceIdle();
  caller.join();
  EXPECT_TRUE(busy);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].shape, (std::vector<int64_t>{1, 1000}));
  EXPECT_TRUE(IdleWithin(r, absl::Seconds(30)));
  // Run (whole tensors) waits on the device too.
  busy = false;
  std::thread run_caller([&] {
    out = r.Run({Tensor{"input", DType::kFloat32, {1, 3, 224, 224}, row}});
  });
  const absl::Time run_end = absl::Now() + absl::Seconds(30);
  while (!busy && absl::Now() < run_end) busy = !r.DeviceIdle();
  run_caller.join();
  EXPECT_TRUE(busy);
  ASSERT_TRUE(out.ok()) << out.status();
  // Without a device time: no device, never busy.
  EXPECT_EQ((*NullRunner::Create(ImageSignature()))->info().device, "none");
}

TEST(NullRunnerTest, RefusesAnOutputWhoseRowSizeIsNotFixed) {
  ModelSignature sig = ImageSignature();
  sig.outputs[0].shape = {-1, -1};
  auto runner = NullRunner::Create(sig);
  EXPECT_EQ(runner.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(runner.status().message(), HasSubstr("'logits' has shape [-1,-1]"));
}

TEST(NullRunnerTest, RefusesASignatureWithoutOutputs) {
  ModelSignature sig = ImageSignature();
  sig.outputs.clear();
  auto runner = NullRunner::Create(sig);
  EXPECT_EQ(runner.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(runner.status().message(), HasSubstr("1 and 0"));
}

}  // namespace
}  // namespace metalserve
