// The runtime's torch-free face: what the service and the batch executor see
// of a loaded model. `TorchRunner` (torch_runner.h) is the real
// implementation; tests use fakes (tests/testing/fake_runner.h).
//
// Thread-safety: implementations are thread-safe. `Run` may be called from
// several executor threads at once; an implementation that must serialise
// device work (MPS) does so internally.
#ifndef METALSERVE_SERVER_RUNTIME_RUNNER_H_
#define METALSERVE_SERVER_RUNTIME_RUNNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/common/tensor.h"

namespace metalserve {

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
};

// Memory figures of the device and the process. Fields a device cannot report
// are -1.
struct MemoryStats {
  int64_t allocated_bytes = -1;  // allocator current (MPS current, CUDA allocated)
  int64_t reserved_bytes = -1;   // driver/reserved (MPS driver, CUDA reserved)
  int64_t limit_bytes = -1;      // recommended max (MPS) or total (CUDA)
  int64_t resident_bytes = -1;   // process RSS
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

  virtual MemoryStats Memory() = 0;

  // Called by the executor between batches (never during one). `idle` is
  // true when no batch is waiting. Implementations apply their cache policy.
  virtual void BetweenBatches(bool idle) = 0;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_RUNTIME_RUNNER_H_
