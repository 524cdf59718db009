// The LibTorch runner's request path: input checks, the host-side copy of a
// batch (on the caller's thread), and the forward on the device thread
// through the one forward path (forward_path.h). Load and verification are
// in torch_runner_load.cc, warm-up in torch_runner_warmup.cc; the class is
// in torch_runner_internal.h.
#include "server/runtime/torch_runner.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include <torch/script.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "server/runtime/intra_op_threads.h"
#include "server/runtime/torch_runner_internal.h"

namespace metalserve {
namespace torch_internal {

TorchRunner::~TorchRunner() {
  if (device_ == nullptr) return;
  // The module and its tensors are released where device work runs; on a
  // device thread already shut down, here (no device work can race it).
  // The freed weights and cached activations then go back to the device:
  // the caching allocator keeps freed blocks for reuse, so without emptying
  // it an unloaded version's memory stayed reserved (measured on CUDA:
  // nvidia-smi's figure did not move at an unload). Emptying is
  // device-global: other models on the device allocate their next batch's
  // blocks afresh, once.
  auto release = [this] {
    module_.reset();
    package_.reset();
    if (device_->SupportsEmptyCache()) device_->EmptyCache();
  };
  if (!OnDevice(release).ok()) release();
}

absl::Status TorchRunner::CheckInput(size_t i, DType dtype,
                                     const std::vector<int64_t>& shape,
                                     int64_t bytes, int64_t rows) const {
  const TensorSpec& spec = info_.inputs[i];
  if (dtype != spec.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", spec.name, "' has dtype ", DTypeName(dtype), ", want ",
        DTypeName(spec.dtype)));
  }
  if (shape.size() != spec.shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", spec.name, "' has rank ", shape.size(), " (shape ",
        ShapeToString(shape), "), want ", ShapeToString(spec.shape)));
  }
  if (shape[0] != rows || rows <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", spec.name, "' has ", shape[0], " rows; want ", rows,
        " (>0, the same for every input)"));
  }
  ASSIGN_OR_RETURN(const int64_t n, NumElements(shape, spec.name));
  if (bytes != n * ItemSize(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", spec.name, "' has ", bytes, " bytes, shape ",
        ShapeToString(shape), " needs ", n * ItemSize(dtype)));
  }
  return absl::OkStatus();
}

absl::Status TorchRunner::CheckInputCount(size_t count) const {
  if (count == info_.inputs.size()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("model ", info_.name, " takes ",
                                                 info_.inputs.size(), " input(s), got ", count));
}

absl::Status TorchRunner::CheckInputs(const std::vector<Tensor>& inputs) const {
  RETURN_IF_ERROR(CheckInputCount(inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    RETURN_IF_ERROR(CheckInput(i, t.dtype, t.shape, static_cast<int64_t>(t.data.size()),
                               inputs[0].rows()));
  }
  return absl::OkStatus();
}

namespace {

// Counts a Run or RunBatch in progress for its scope.
class Running {
 public:
  explicit Running(std::atomic<int>& count) : count_(count) {
    count_.fetch_add(1, std::memory_order_relaxed);
  }
  ~Running() { count_.fetch_sub(1, std::memory_order_relaxed); }
  Running(const Running&) = delete;
  Running& operator=(const Running&) = delete;

 private:
  std::atomic<int>& count_;
};

}  // namespace

absl::StatusOr<std::vector<Tensor>> TorchRunner::Run(
    const std::vector<Tensor>& inputs) {
  const Running running(batches_running_);
  RETURN_IF_ERROR(CheckInputs(inputs));
  return RunHost(HostViews(inputs));
}

absl::Status TorchRunner::CheckBatchedInputs(const std::vector<BatchedInput>& inputs) const {
  RETURN_IF_ERROR(CheckInputCount(inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const BatchedInput& in = inputs[i];
    int64_t bytes = 0;
    for (absl::string_view p : in.pieces) bytes += static_cast<int64_t>(p.size());
    const int64_t row_bytes = in.RowBytes();
    if (in.shape.empty() || row_bytes <= 0 || bytes % row_bytes != 0 ||
        bytes > row_bytes * in.shape[0]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", info_.inputs[i].name, "': ", bytes,
          " bytes of pieces are not whole rows of ", ShapeToString(in.shape)));
    }
    // Padding makes up the difference; check the padded tensor's shape.
    RETURN_IF_ERROR(CheckInput(i, in.dtype, in.shape, row_bytes * in.shape[0],
                               inputs[0].shape.empty() ? 0 : inputs[0].shape[0]));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> TorchRunner::RunBatch(
    const std::vector<BatchedInput>& inputs) {
  return RunBatchStaged(inputs, nullptr);
}

absl::StatusOr<std::vector<Tensor>> TorchRunner::RunBatchStaged(
    const std::vector<BatchedInput>& inputs, ComputeStages* stages) {
  const Running running(batches_running_);
  RETURN_IF_ERROR(CheckBatchedInputs(inputs));
  Clock* const steady = Clock::SteadyClock();  // durations, never dates
  const absl::Time start = stages != nullptr ? steady->TimeNow() : absl::InfinitePast();
  std::vector<at::Tensor> host;
  StagingPool::Lease lease;
  BatchStaging how = BatchStaging::kUnknown;
  try {
    host = HostCopies(inputs, &lease, &how);
  } catch (const std::exception& e) {
    staging_->Give(std::move(lease));  // taken before the throw, if at all
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot allocate the batch's host buffer: ", ModelMessage(e.what())));
  }
  const absl::Time assembled = stages != nullptr ? steady->TimeNow() : absl::InfinitePast();
  ComputeStages s{.assemble = assembled - start, .staging = how};
  absl::StatusOr<std::vector<Tensor>> result = RunHost(host, stages != nullptr ? &s : nullptr);
  host.clear();  // the buffer's tensors go before the buffer goes back
  // A successful batch's outputs came back to the host on the stream that
  // copied its inputs in, so no device copy reads the buffer any more; a
  // failed one may have stopped with that copy still queued: wait for it.
  // A device that cannot even synchronize (a device-side assert leaves CUDA
  // failed) keeps the buffer from reuse: it is dropped, not given back.
  bool settled = true;
  if (!result.ok() && !device_->device().is_cpu()) {
    const absl::Status synced = OnDevice([&] {
      try {
        device_->Synchronize();
      } catch (const std::exception&) {
        settled = false;
      }
    });
    settled = settled && synced.ok();
  }
  if (settled) staging_->Give(std::move(lease));
  if (stages == nullptr) return result;
  // What the device thread did not spend on the batch, from the hand-off
  // to it until this thread has the outcome back: both hand-offs, and the
  // work queued there ahead of the batch.
  s.wait = steady->TimeNow() - assembled - s.device - s.outputs;
  s.timed = true;
  *stages = s;
  return result;
}

std::vector<at::Tensor> TorchRunner::HostViews(const std::vector<Tensor>& inputs) const {
  std::vector<at::Tensor> host;
  host.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    host.push_back(torch::from_blob(const_cast<char*>(t.data.data()), t.shape,
                                    at::TensorOptions().dtype(path_->input_types()[i])));
  }
  return host;
}

namespace {

// Offsets of the inputs in one buffer: each starts on a 64-byte boundary.
constexpr int64_t kInputAlignment = 64;

int64_t AlignedBytes(int64_t bytes) {
  return (bytes + kInputAlignment - 1) / kInputAlignment * kInputAlignment;
}

}  // namespace

std::vector<at::Tensor> TorchRunner::HostCopies(const std::vector<BatchedInput>& inputs,
                                                StagingPool::Lease* lease, BatchStaging* how) {
  std::vector<at::Tensor> host;
  host.reserve(inputs.size());
  int64_t total = 0;
  for (const BatchedInput& in : inputs) total += AlignedBytes(in.RowBytes() * in.shape[0]);
  *lease = staging_->Take(std::max<int64_t>(total, 1));
  *how = lease->reused ? BatchStaging::kReused : BatchStaging::kAllocated;
  char* base = lease->data();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const BatchedInput& in = inputs[i];
    const int64_t bytes = in.RowBytes() * in.shape[0];
    char* dst = base;
    for (absl::string_view p : in.pieces) {
      std::memcpy(dst, p.data(), p.size());
      dst += p.size();
    }
    std::memset(dst, 0, static_cast<size_t>(base + bytes - dst));  // padding rows
    // The tensor shares the buffer's block: a model that keeps it keeps the
    // buffer from being lent again (StagingPool::Give).
    host.push_back(torch::from_blob(
        base, in.shape, [block = lease->block](void*) {},
        at::TensorOptions().dtype(path_->input_types()[i])));
    base += AlignedBytes(bytes);
  }
  return host;
}

absl::StatusOr<std::vector<Tensor>> TorchRunner::RunHost(
    const std::vector<at::Tensor>& host, ComputeStages* stages) {
  absl::StatusOr<std::vector<Tensor>> result;
  // Busy for the device's cache policy from here: another model's idle
  // moment must not clear the cache under this batch.
  cache_policy_->WorkStarted();
  const int64_t rows = host.empty() || host[0].dim() == 0 ? 1 : host[0].size(0);
  const absl::Status posted = ServeOnDevice(rows, [&] { result = Serve(host, stages); });
  cache_policy_->WorkEnded();
  if (!posted.ok()) return posted;
  if (result.status().code() == absl::StatusCode::kResourceExhausted) {
    cache_policy_->OnOutOfMemory();
  }
  return result;
}

absl::StatusOr<std::vector<at::Tensor>> TorchRunner::ForwardModel(
    const std::vector<at::Tensor>& host, ForwardPurpose purpose) {
  if (package_.has_value()) return ForwardPackage(host, purpose);
  return path_->Forward(*module_, host, compute_dtype_, purpose);
}

int TorchRunner::ServeThreads(int64_t rows) const {
  const WarmupTiming* holds = nullptr;    // the smallest size >= rows
  const WarmupTiming* largest = nullptr;
  for (const WarmupTiming& w : info_.warmup_timings) {
    if (w.batch_size >= rows && (holds == nullptr || w.batch_size < holds->batch_size)) holds = &w;
    if (largest == nullptr || w.batch_size > largest->batch_size) largest = &w;
  }
  const WarmupTiming* pick = holds != nullptr ? holds : largest;
  return pick == nullptr ? 0 : pick->intra_op_threads;
}

// On the device thread: the forward path (on the intra-op threads chosen for
// its size at warm-up; intra_op_threads.h), then the outputs as project
// tensors. Set on every batch: runners sharing the device thread may differ.
absl::StatusOr<std::vector<Tensor>> TorchRunner::Serve(const std::vector<at::Tensor>& host,
                                                       ComputeStages* stages) {
  Clock* const steady = Clock::SteadyClock();
  const absl::Time start = stages != nullptr ? steady->TimeNow() : absl::InfinitePast();
  if (!host.empty()) SetIntraOpThreads(ServeThreads(host[0].size(0)));
  absl::StatusOr<std::vector<at::Tensor>> out = ForwardModel(host, ForwardPurpose::kServe);
  const absl::Time forwarded = stages != nullptr ? steady->TimeNow() : absl::InfinitePast();
  if (stages != nullptr) stages->device = forwarded - start;
  if (!out.ok()) {
    if (out.status().code() != absl::StatusCode::kInternal) return out.status();
    return absl::InternalError(
        absl::StrCat("model ", info_.name, " failed: ", out.status().message()));
  }
  std::vector<Tensor> result;
  result.reserve(out->size());
  for (size_t i = 0; i < out->size(); ++i) {
    const at::Tensor& host_out = (*out)[i];
    Tensor t;
    t.name = info_.outputs[i].name;
    t.dtype = info_.outputs[i].dtype;
    t.shape.assign(host_out.sizes().begin(), host_out.sizes().end());
    t.data.assign(static_cast<const char*>(host_out.data_ptr()), host_out.nbytes());
    result.push_back(std::move(t));
  }
  if (stages != nullptr) stages->outputs = steady->TimeNow() - forwarded;
  return result;
}

}  // namespace torch_internal

}  // namespace metalserve
