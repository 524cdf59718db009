// Internal to the runtime target: the LibTorch runner's class and what its
// two translation units share. torch_runner.cc: device choice, memory, the
// request path (Run, RunBatch); torch_runner_load.cc: Create and the load
// phases (load, signature, optimization, verification, warm-up). Includes
// LibTorch: include it only from server/runtime/*.cc.
#ifndef METALSERVE_SERVER_RUNTIME_TORCH_RUNNER_INTERNAL_H_
#define METALSERVE_SERVER_RUNTIME_TORCH_RUNNER_INTERNAL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <torch/script.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "server/runtime/cache_policy.h"
#include "server/runtime/model_signature.h"
#include "server/runtime/torch_runner.h"

namespace metalserve::torch_internal {

absl::StatusOr<at::ScalarType> ToScalarType(DType d);
// The model's own words: TorchScript wraps a raised exception in a traceback
// whose last line is "builtins.RuntimeError: <message>".
std::string ModelMessage(const std::string& what);

// Runs closures on one thread that it owns: all MPS work goes through it,
// because two threads doing MPS work can crash inside Metal. The destructor
// finishes queued work and joins the thread.
class DeviceThread {
 public:
  DeviceThread() : thread_([this] { Loop(); }) {}
  ~DeviceThread() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    thread_.join();
  }
  // Runs `fn` on the device thread and waits for it.
  void RunSync(const std::function<void()>& fn) {
    if (std::this_thread::get_id() == thread_.get_id()) return fn();
    absl::Notification done;
    {
      absl::MutexLock lock(&mu_);
      queue_.push_back([&] {
        fn();
        done.Notify();
      });
    }
    done.WaitForNotification();
  }

 private:
  void Loop() {
    while (true) {
      std::function<void()> task;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](DeviceThread* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) {
              return t->stopping_ || !t->queue_.empty();
            },
            this));
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts after the members above exist
};

// ------------------------------------------------------------- options

struct Choice {
  c10::Device device = c10::Device(c10::kCPU);
  std::string name;  // "cpu", "cuda:0", "mps"
};

absl::StatusOr<Choice> ChooseDevice(const std::string& requested);
absl::StatusOr<at::ScalarType> ParsePrecision(const std::string& p);

enum class Level { kNone = 0, kFreeze = 1, kFull = 2 };
inline constexpr const char* kLevelNames[] = {"none", "freeze", "full"};
absl::StatusOr<Level> ParseLevel(const std::string& optimize, const Choice& device);

// The memory figures and cache clearing of `device`; MPS work goes through
// `thread`.
absl::StatusOr<std::unique_ptr<DeviceMemoryOps>> MemoryOpsFor(const Choice& device,
                                                              DeviceThread* thread);

// ------------------------------------------------------------ the runner

class TorchRunner final : public Runner {
 public:
  static absl::StatusOr<std::unique_ptr<Runner>> Create(
      const RuntimeOptions& options);

  ~TorchRunner() override {
    if (device_thread_ != nullptr) {
      // Module and tensors are released on the thread that owns MPS work.
      device_thread_->RunSync([this] {
        module_.reset();
      });
    }
  }

  const ModelInfo& info() const override { return info_; }
  absl::StatusOr<std::vector<Tensor>> Run(const std::vector<Tensor>& inputs) override;
  absl::StatusOr<std::vector<Tensor>> RunBatch(
      const std::vector<BatchedInput>& inputs) override;
  MemoryStats Memory() override { return memory_ops_->Stats(); }
  void BetweenBatches(bool idle) override { cache_policy_->BetweenBatches(idle); }

 private:
  TorchRunner() = default;

  // Runs `fn` where device work must run (the MPS thread, or here).
  void OnDevice(const std::function<void()>& fn) {
    if (device_thread_ != nullptr) {
      device_thread_->RunSync(fn);
    } else {
      fn();
    }
  }
  // Load phases, each logged with its duration as it happens; all run where
  // device work runs.
  absl::Status Load(const RuntimeOptions& options, Level level,
                    const std::optional<ModelSignature>& declared,
                    const std::string& signature_path);
  absl::StatusOr<torch::jit::Module> LoadModule(const std::string& path);
  // Binds the declared signature to forward by name and checks it against a
  // probe forward, or infers one (signature_binding.h); sets info_.inputs,
  // info_.outputs and input_types_.
  absl::Status BindSignature(torch::jit::Module& plain32, const RuntimeOptions& options,
                             const std::optional<ModelSignature>& declared,
                             const std::string& signature_path);
  absl::StatusOr<c10::IValue> ProbeForward(torch::jit::Module& m, int64_t batch);
  void KeepInferredSignature(const ModelSignature& sig, const std::string& path,
                             const SignatureCodec& codec, bool write) const;
  absl::Status Optimize(torch::jit::Module& plain32, const RuntimeOptions& options,
                        Level level);
  std::optional<torch::jit::Module> TryLevel(torch::jit::Module& plain,
                                             const RuntimeOptions& options, Level level,
                                             std::vector<std::string>* reasons);
  absl::Status WarmUp(const std::vector<int64_t>& batch_sizes);
  absl::Status CheckInputs(const std::vector<Tensor>& inputs) const;
  absl::Status CheckInput(size_t i, DType dtype, const std::vector<int64_t>& shape,
                          int64_t bytes, int64_t rows) const;
  // Host tensors for a batch: views of `inputs` (no copy), or the pieces
  // copied once into fresh (on CUDA pinned) memory with zero padding.
  std::vector<at::Tensor> HostViews(const std::vector<Tensor>& inputs) const;
  std::vector<at::Tensor> HostCopies(const std::vector<BatchedInput>& inputs) const;
  std::vector<c10::IValue> ToDevice(const std::vector<at::Tensor>& host) const;
  absl::StatusOr<std::vector<Tensor>> FromDevice(const c10::IValue& out) const;
  absl::StatusOr<std::vector<Tensor>> RunOnDeviceThread(
      const std::vector<at::Tensor>& host);
  absl::StatusOr<std::vector<Tensor>> RunHost(const std::vector<at::Tensor>& host);

  // Model work on this runner's device, for verification and warm-up.
  absl::StatusOr<std::vector<at::Tensor>> Forward(torch::jit::Module& m,
                                                  const std::vector<at::Tensor>& in,
                                                  at::ScalarType compute) const;
  std::vector<at::Tensor> Probe(int64_t batch, uint64_t seed) const;
  absl::StatusOr<std::string> Compare(torch::jit::Module& reference,
                                      at::ScalarType reference_dtype,
                                      torch::jit::Module& candidate,
                                      at::ScalarType candidate_dtype,
                                      const RuntimeOptions& options,
                                      bool check_invariance,
                                      double* worst) const;

  ModelInfo info_;
  Clock* clock_ = nullptr;
  Choice device_;
  at::ScalarType compute_dtype_ = at::kFloat;
  bool channels_last_ = false;
  std::vector<at::ScalarType> input_types_;
  std::unique_ptr<DeviceThread> device_thread_;  // does all device work
  std::optional<torch::jit::Module> module_;
  std::unique_ptr<DeviceMemoryOps> memory_ops_;
  std::unique_ptr<CachePolicy> cache_policy_;
};

}  // namespace metalserve::torch_internal

#endif  // METALSERVE_SERVER_RUNTIME_TORCH_RUNNER_INTERNAL_H_
