// Internal to the runtime target (includes LibTorch): the LibTorch runner's
// class. Its parts live in their own files:
//   device_thread.h       the one thread per device (torch-free);
//   torch_device.h        device choice, memory figures, cache, synchronize;
//   forward_path.h        the one forward path (serve, warm-up, verify, probe);
//   graph_verification.h  optimization verified against the plain graph;
//   torch_runner.cc       the request path (Run, RunBatch, input checks);
//   torch_runner_load.cc  Create and the load phases;
//   torch_runner_warmup.cc  the last of them, warm-up, and its figures;
//   verification_cache.h  verification verdicts on disk (torch-free);
//   device_choice.h       which device: probes, measurement (torch-free);
//   device_measure.cc     CreateTorchRunner: auto measures each device;
//   aoti_runner.cc        Create for an AOTInductor package (.pt2): the
//                         AotiRunner, this class serving a compiled package
//                         (aoti_package.h) instead of a TorchScript module.
#ifndef METALSERVE_SERVER_RUNTIME_TORCH_RUNNER_INTERNAL_H_
#define METALSERVE_SERVER_RUNTIME_TORCH_RUNNER_INTERNAL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/script.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/runtime/aoti_package.h"
#include "server/runtime/cache_policy.h"
#include "server/runtime/forward_path.h"
#include "server/runtime/graph_verification.h"
#include "server/runtime/model_signature.h"
#include "server/runtime/staging_pool.h"
#include "server/runtime/torch_device.h"
#include "server/runtime/torch_runner.h"

namespace metalserve::torch_internal {

// One TorchScript model or one AOTInductor package on one device; see
// torch_runner.h for the contract. Both share the request path, the device
// thread, the forward path, warm-up and the cache policy; they differ in how
// the model is loaded and verified (torch_runner_load.cc, aoti_runner.cc).
//
// Ownership: owns the module and the forward path; shares the TorchDevice
// (and through it the DeviceThread) and the device's cache policy (as one
// of its users, cache_policy.h) with every runner on the device.
// Thread-safety: Run, RunBatch, Memory and BetweenBatches are thread-safe;
// all device work is posted to the device thread and waited for.
// Destruction: releases the module on the device thread (no Run may be in
// flight), then drops its share of the device; the thread is drained and
// joined when its last owner goes.
class TorchRunner final : public Runner {
 public:
  static absl::StatusOr<std::unique_ptr<Runner>> Create(const RuntimeOptions& options);
  ~TorchRunner() override;

  const ModelInfo& info() const override { return info_; }
  // Records how the device was chosen (CreateTorchRunner, before the runner
  // is shared with anyone).
  void SetDeviceChoice(DeviceChoiceInfo choice) { info_.device_choice = std::move(choice); }
  absl::StatusOr<std::vector<Tensor>> Run(const std::vector<Tensor>& inputs) override;
  absl::StatusOr<std::vector<Tensor>> RunBatch(
      const std::vector<BatchedInput>& inputs) override;
  absl::StatusOr<std::vector<Tensor>> RunBatchStaged(const std::vector<BatchedInput>& inputs,
                                                     ComputeStages* stages) override;
  MemoryStats Memory() override { return device_->Stats(); }
  void BetweenBatches(bool idle) override { cache_policy_->BetweenBatches(idle); }
  bool DeviceIdle() const override { return device_->thread().Idle(); }

 private:
  TorchRunner() = default;

  // Runs `fn` on the device thread and waits; UNAVAILABLE when the thread
  // has been shut down.
  absl::Status OnDevice(absl::FunctionRef<void()> fn) { return device_->thread().RunSync(fn); }
  // Runs a batch on the device thread under this model's key, so models
  // sharing the device get fair shares of it (fair_queue.h).
  // A one-row batch of a model that the CPU serves on one intra-op thread
  // at every size runs on the calling thread when the device is idle
  // (RuntimeOptions::cpu_forward_on_caller; decided at the end of WarmUp);
  // a batched model's only while it is the runner's one batch in flight.
  absl::Status ServeOnDevice(int64_t rows, absl::FunctionRef<void()> fn) {
    const std::string& key = device_key_.empty() ? info_.name : device_key_;
    if (cpu_forward_on_caller_ && rows == 1 &&
        (!batched_ || batches_running_.load(std::memory_order_relaxed) == 1)) {
      return device_->thread().RunHereIfIdle(key, fn);
    }
    return device_->thread().RunSync(key, fn);
  }
  absl::Status SetUp(const RuntimeOptions& options);
  void LogReady() const;
  // The device's reserved bytes now (-1 on the CPU), for
  // ModelInfo::load_reserved_bytes; and that field from `before`.
  int64_t ReservedBytes() const;
  void RecordLoadMemory(int64_t before);

  // Load phases, each logged with its duration as it happens; all run on the
  // device thread.
  absl::Status Load(const RuntimeOptions& options, Level level,
                    const std::optional<ModelSignature>& declared,
                    const std::string& signature_path);
  absl::StatusOr<torch::jit::Module> LoadModule(const std::string& path);
  // Verifies `level` (graph_verification.h), or reuses the verdict cached
  // for the same key (verification_cache.h); stores a new verdict.
  absl::StatusOr<VerifiedGraph> OptimizeOrReuse(const RuntimeOptions& options, Level level,
                                                torch::jit::Module& plain32,
                                                GraphVerifier& verifier);
  // Binds the declared signature to forward by name and checks it against a
  // probe forward, or infers one (signature_binding.h); sets info_.inputs,
  // info_.outputs and the forward path's signature.
  absl::Status BindSignature(torch::jit::Module& plain32, const RuntimeOptions& options,
                             const std::optional<ModelSignature>& declared,
                             const std::string& signature_path);
  absl::Status SetInputs(const std::vector<TensorSpec>& inputs);
  absl::StatusOr<c10::IValue> ProbeForward(torch::jit::Module& m, int64_t batch);
  void KeepInferredSignature(const ModelSignature& sig, const std::string& path,
                             const SignatureCodec& codec, bool write) const;
  absl::Status WarmUp(const std::vector<int64_t>& batch_sizes);
  // `untimed` forwards of `batch` rows, then `timed` timed ones, and one
  // more timed when the least is under `settled`: the least. One probe
  // input for all of them (a 3x224x224 one at batch 32 takes about 20 ms to
  // draw).
  absl::StatusOr<absl::Duration> TimeWarmUpForwards(int64_t batch, int untimed, int timed,
                                                    absl::Duration settled);
  // The intra-op threads chosen at warm-up for a batch of `rows` (by the
  // smallest warm-up size that holds it, else the largest); 0 off the CPU.
  int ServeThreads(int64_t rows) const;

  // The AotiRunner (aoti_runner.cc): load, signature check and verification
  // of a package, on the device thread.
  static absl::StatusOr<std::unique_ptr<Runner>> CreateFromPackage(const RuntimeOptions& options);
  absl::Status LoadPackageModel(const RuntimeOptions& options, const ModelSignature& declared);
  absl::Status CheckPackageOutputs(const ModelSignature& declared);
  absl::Status VerifyPackage(const RuntimeOptions& options);
  // The package on the eager outputs export.py recorded (<package>.expected):
  // "" when within `tolerance`, else what differed; *worst as in the verifier.
  absl::StatusOr<std::string> CompareWithExpected(const std::string& path, double tolerance,
                                                  double* worst);
  // The package's forward at a batch within its range: rows under its
  // minimum are padded with zeros and cut from the outputs; rows over its
  // maximum are INVALID_ARGUMENT.
  absl::StatusOr<std::vector<at::Tensor>> ForwardPackage(const std::vector<at::Tensor>& host,
                                                         ForwardPurpose purpose);
  // The serving model (module or package) through the forward path.
  absl::StatusOr<std::vector<at::Tensor>> ForwardModel(const std::vector<at::Tensor>& host,
                                                       ForwardPurpose purpose);

  // The request path.
  absl::Status CheckInputCount(size_t count) const;
  absl::Status CheckInputs(const std::vector<Tensor>& inputs) const;
  absl::Status CheckBatchedInputs(const std::vector<BatchedInput>& inputs) const;
  absl::Status CheckInput(size_t i, DType dtype, const std::vector<int64_t>& shape,
                          int64_t bytes, int64_t rows) const;
  // Host tensors for a batch: views of `inputs` (no copy), or the pieces
  // copied once, with zero padding, into one buffer of staging_ (on CUDA
  // pinned) that *lease holds until the batch is done; *how says whether
  // that buffer was kept from an earlier batch.
  std::vector<at::Tensor> HostViews(const std::vector<Tensor>& inputs) const;
  std::vector<at::Tensor> HostCopies(const std::vector<BatchedInput>& inputs,
                                     StagingPool::Lease* lease, BatchStaging* how);
  // The batch on the device (Serve there); sets the device and outputs
  // stages of *stages when not null.
  absl::StatusOr<std::vector<Tensor>> RunHost(const std::vector<at::Tensor>& host,
                                              ComputeStages* stages = nullptr);
  // On the device thread (or the caller's, when ServeOnDevice runs it
  // there): the forward, then the outputs as project tensors; sets the
  // device and outputs stages of *stages when not null.
  absl::StatusOr<std::vector<Tensor>> Serve(const std::vector<at::Tensor>& host,
                                            ComputeStages* stages);

  ModelInfo info_;
  Clock* clock_ = nullptr;
  std::shared_ptr<TorchDevice> device_;
  at::ScalarType compute_dtype_ = at::kFloat;
  std::unique_ptr<ForwardPath> path_;
  std::optional<torch::jit::Module> module_;
  std::optional<CompiledPackage> package_;  // set instead of module_ for a .pt2
  std::unique_ptr<CacheUser> cache_policy_;  // this runner in its device's policy
  std::string device_key_;  // RuntimeOptions::device_key
  // RuntimeOptions::cpu_forward_on_caller, and (after WarmUp) a CPU model
  // served on one intra-op thread at every warm-up size.
  bool cpu_forward_on_caller_ = true;
  bool batched_ = false;  // warmed up at a size above 1
  // Run and RunBatch calls in progress (ServeOnDevice's guard above).
  std::atomic<int> batches_running_{0};
  // Batch host buffers kept between batches (RuntimeOptions::staging_buffers).
  std::unique_ptr<StagingPool> staging_;
};

// The comparison settings for a load's verification: each distinct warm-up
// batch size once, ascending, with the options' tolerance and
// batch-invariance check, at `precision`.
VerifyOptions WarmupVerifyOptions(const RuntimeOptions& options, const std::string& precision);

}  // namespace metalserve::torch_internal

#endif  // METALSERVE_SERVER_RUNTIME_TORCH_RUNNER_INTERNAL_H_
