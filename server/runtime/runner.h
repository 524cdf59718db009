// The runtime's torch-free face: what the service and the batch executor see
// of a loaded model. `TorchRunner` (torch_runner.h) is the real
// implementation; tests use fakes (tests/testing/fake_runner.h).
//
// Thread-safety: implementations are thread-safe. `Run` may be called from
// several executor threads at once; an implementation serialises device work
// internally where the device needs it (the torch runtime does all device
// work, on every device, on one device thread).
// Ownership: the server owns its Runner (a std::unique_ptr from
// CreateTorchRunner) and hands raw pointers to the executor and services,
// which must not outlive it.
// Destruction: no Run may be in flight; the torch runtime releases the
// model on its device thread (torch_runner.h).
#ifndef METALSERVE_SERVER_RUNTIME_RUNNER_H_
#define METALSERVE_SERVER_RUNTIME_RUNNER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/tensor.h"

namespace metalserve {

// One input of a batch given as pieces: the byte ranges in `pieces` (whole
// rows in all, row-major, in batch order; views into the requests, where one
// row may span several pieces: gRPC's received slices) are concatenated and
// zero rows appended up to shape[0] (padding).
struct BatchedInput {
  DType dtype = DType::kInvalid;
  std::vector<int64_t> shape;  // padded rows first
  std::vector<absl::string_view> pieces;

  int64_t RowBytes() const {
    int64_t n = ItemSize(dtype);
    for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
    return n;
  }
  // The contiguous tensor the pieces describe (one copy).
  Tensor Assemble(std::string name) const {
    Tensor t;
    t.name = std::move(name);
    t.dtype = dtype;
    t.shape = shape;
    const size_t total = static_cast<size_t>(RowBytes() * shape[0]);
    t.data.reserve(total);
    for (absl::string_view p : pieces) t.data.append(p.data(), p.size());
    t.data.resize(total, '\0');
    return t;
  }
};

// How long one forward of a warm-up batch took (the last of its warm-up
// forwards, once the graph executor has optimised). The batcher's adaptive
// policy seeds its cost curve from these.
struct WarmupTiming {
  int64_t batch_size = 0;
  absl::Duration forward;  // at intra_op_threads
  // On the CPU: the intra-op threads that serve batches padded to this size,
  // chosen at warm-up (intra_op_threads.h); 0 on other devices.
  int intra_op_threads = 0;
};

// How the serving device was chosen (device_choice.h): what was asked for,
// why this device, and with --device=auto the measurement table.
struct DeviceChoiceInfo {
  // One cell of the table: the median forward time of `device` at a warm-up
  // batch size (host copies included).
  struct Timing {
    std::string device;
    int64_t batch_size = 0;
    absl::Duration forward;
  };
  std::string requested;  // --device as given: "auto", "first_available", "cpu", ...
  // "measured": auto timed each working device and took the least total;
  // "no_accelerator": auto found no working accelerator, so the CPU (still
  // timed, the table has its rows); "first_available": the fixed order;
  // "explicit": the device named; "package": an AOTInductor package runs on
  // the device it was compiled for; "shared_device_thread": auto given a
  // device thread keeps the fixed order.
  std::string reason;
  std::vector<Timing> timings;       // empty unless auto measured
  // Devices auto or first_available left out, each "<device>: <why>"
  // (failed its probe; under auto also failed to load or to run).
  std::vector<std::string> skipped;
};

struct ModelInfo {
  std::string name;           // e.g. "resnet18"
  std::string version;        // e.g. "1"
  std::string device;         // e.g. "cpu", "cuda:0", "mps"
  std::string torch_version;  // LibTorch version the server was built with
  std::string precision;      // "fp32", "fp16", "bf16"
  std::string optimization;   // active level: "none", "freeze", "full"
  std::string optimization_reason;  // why that level is active
  std::vector<TensorSpec> inputs;   // batch dimension is -1
  std::vector<TensorSpec> outputs;  // batch dimension is -1
  absl::Duration load_time;
  absl::Duration warmup_time;
  std::vector<WarmupTiming> warmup_timings;  // one per warm-up batch size
  DeviceChoiceInfo device_choice;            // set by CreateTorchRunner
  // How much the device's reserved memory (CUDA's caching allocator, MPS's
  // driver allocation) grew from before the load to after the warm-up:
  // weights, the verifier's copies and the largest warm-up batch's
  // activations still cached. -1 where the device reports none (CPU: the
  // caller measures the resident set instead). Device-global: a load on a
  // device that other models use at the same time counts their growth too.
  int64_t load_reserved_bytes = -1;
};

// Memory figures of the device and the process. Fields a device cannot report
// are -1.
struct MemoryStats {
  int64_t allocated_bytes = -1;  // allocator current (MPS current, CUDA allocated)
  int64_t reserved_bytes = -1;   // driver/reserved (MPS driver, CUDA reserved)
  int64_t limit_bytes = -1;      // recommended max (MPS) or total (CUDA)
  int64_t resident_bytes = -1;   // process RSS
};

// Where one batch's compute time went, for a runtime that can tell
// (RunBatchStaged; Triton's compute_input / compute_infer / compute_output
// split, one step finer). Durations on a monotonic clock:
//   assemble  the batch's rows copied into one host buffer (pinned on CUDA),
//             padding zeroed, on the caller's thread (an executor's, or the
//             gRPC thread of an inline batch);
//   wait      the rest of the time from there until the caller has the
//             outcome back: the hand-offs to the device thread and back,
//             and other batches or models queued there ahead of it (about
//             zero when the batch runs on the caller's thread);
//   device    on the device thread: inputs to the device, the forward and
//             the outputs back in host memory (on CUDA and MPS the wait for
//             the device is in here);
//   outputs   the outputs copied into the batch's output tensors (which the
//             executor then slices into each request's answer).
// The executor's compute time for the batch (RunStats::compute_time) is
// their sum plus the input checks before them.
//
// Which host buffer the rows were copied into (`staging`): kReused, one
// kept from an earlier batch (RuntimeOptions::staging_buffers); kAllocated,
// one allocated for this batch.
enum class BatchStaging { kUnknown, kReused, kAllocated };

struct ComputeStages {
  absl::Duration assemble;
  absl::Duration wait;
  absl::Duration device;
  absl::Duration outputs;
  BatchStaging staging = BatchStaging::kUnknown;
  bool timed = false;  // false: the runner does not time its stages
};

class Runner {
 public:
  virtual ~Runner() = default;

  virtual const ModelInfo& info() const = 0;

  // Runs one batch. `inputs` follow info().inputs in order and all have the
  // same number of rows; returns one tensor per info().outputs entry, each
  // with that many rows. Status codes: INVALID_ARGUMENT for inputs the model
  // refuses, RESOURCE_EXHAUSTED for device out-of-memory, INTERNAL for a
  // model that throws (the message carries the model's).
  virtual absl::StatusOr<std::vector<Tensor>> Run(
      const std::vector<Tensor>& inputs) = 0;

  // Runs a batch given as row pieces, with Run's contract. The default
  // assembles the pieces and calls Run; a runtime overrides it to copy the
  // pieces once, on the caller's thread, straight into memory the device can
  // read (pinned host memory on CUDA), so that the copy overlaps the
  // previous batch's compute instead of following it.
  virtual absl::StatusOr<std::vector<Tensor>> RunBatch(
      const std::vector<BatchedInput>& inputs) {
    std::vector<Tensor> tensors;
    tensors.reserve(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      tensors.push_back(inputs[i].Assemble(
          i < info().inputs.size() ? info().inputs[i].name : std::string()));
    }
    return Run(tensors);
  }

  // RunBatch that also says where the batch's time went: a runtime that
  // times its stages (TorchRunner, and a hybrid through the runner it
  // picks) fills *stages and sets stages->timed once the batch's host
  // buffer is filled, whatever the outcome after that (read them for a
  // successful batch: a failed one may have stopped at any stage). With
  // `stages` null it is RunBatch. The default runs RunBatch and leaves
  // *stages as it is.
  virtual absl::StatusOr<std::vector<Tensor>> RunBatchStaged(
      const std::vector<BatchedInput>& inputs, ComputeStages* stages) {
    (void)stages;
    return RunBatch(inputs);
  }

  virtual MemoryStats Memory() = 0;

  // The devices this runner runs batches on: info().device for a runner on
  // one device; a hybrid runner's each, in the order listed ("cuda:0",
  // "cpu"), while its info().device joins them ("cuda:0+cpu"). Memory
  // figures and batch counts are reported per device.
  virtual std::vector<std::string> Devices() const { return {info().device}; }
  // The memory figures of each of Devices(), in that order (one Memory()
  // call per device; each may wait for its device thread).
  virtual std::vector<MemoryStats> MemoryPerDevice() { return {Memory()}; }

  // A batch of `rows` rows (padding included) that `device` ran
  // successfully, its forward taking `took` of the device's time (overlap
  // with the device's previous batch left out).
  using DeviceBatchFn =
      std::function<void(const std::string& device, int64_t rows, absl::Duration took)>;
  // A runner that spreads batches over several devices calls `fn` after each
  // successful batch, from the thread that ran it, and returns true; one on
  // a single device returns false (the default): its caller attributes every
  // batch to info().device itself. Set before the first batch.
  virtual bool set_on_device_batch(DeviceBatchFn /*fn*/) { return false; }

  // Called by the executor between batches (never during one). `idle` is
  // true when no batch is waiting. Implementations apply their cache policy.
  virtual void BetweenBatches(bool idle) = 0;

  // Whether a batch handed to this runner now would start at once, waiting
  // for no other work on its device (nothing running or queued there): the
  // batcher runs a short unbatched call on the thread that received it only
  // then (BatcherOptions::inline_max_cost). A hint, read without holding
  // the device. Default false: never.
  virtual bool DeviceIdle() const { return false; }
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_RUNTIME_RUNNER_H_
