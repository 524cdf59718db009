// Internal to the runtime target (includes LibTorch): graph optimization and
// its verification. Graph optimization can change results (on LibTorch 1.13,
// freeze + optimize_for_inference gave mobilenet_v3_small wrong rows while
// freeze alone stayed exact), so an optimized graph is served only after it
// matched the plain one:
//   - probe: seeded inputs of every warm-up batch size, every row distinct;
//   - compare: every output within `tolerance` of the plain output's scale
//     (two units in the last place for fp16/bf16 when looser), the same
//     arg-max on rows whose top two are clearly apart, and (when asked) each
//     row equal to the same row forwarded alone;
//   - fallback: a level that fails to build, run or match falls back to the
//     next safer one (full -> freeze -> none), with the reason recorded.
// A reduced precision is compared with fp32 and the deviation reported (no
// fallback for precision). Every forward here goes through the serving path
// (forward_path.h) with the precision and memory format that serve.
//
// Ownership: borrows the ForwardPath and the clock, which must outlive it.
// Thread-safety: not thread-safe; run it on the device thread.
// Destruction: nothing to release.
#ifndef METALSERVE_SERVER_RUNTIME_GRAPH_VERIFICATION_H_
#define METALSERVE_SERVER_RUNTIME_GRAPH_VERIFICATION_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <torch/script.h>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/runtime/forward_path.h"

namespace metalserve::torch_internal {

enum class Level { kNone = 0, kFreeze = 1, kFull = 2 };
inline constexpr const char* kLevelNames[] = {"none", "freeze", "full"};
// none | freeze | full | auto (per device: mps freeze, cpu and cuda full).
absl::StatusOr<Level> ParseLevel(const std::string& optimize, const TorchDevice& device);

// Whole milliseconds from `since` to now on `clock`, for the load phases'
// log lines (here, torch_runner_load.cc, torch_runner_warmup.cc).
int64_t ElapsedMs(Clock* clock, absl::Time since);

// Seeded inputs of `batch` rows for the path's bound inputs; rows differ.
std::vector<at::Tensor> ProbeInputs(const ForwardPath& path, int64_t batch, uint64_t seed);

struct VerifyOptions {
  std::vector<int64_t> batch_sizes;  // the warm-up batch sizes
  double tolerance = 1e-3;           // largest relative deviation accepted
  bool batch_invariance = true;      // also compare rows with rows alone
  std::string precision = "fp32";    // for the log and the reason
  // CUDA, level full: let cuDNN time its algorithms for each new input shape
  // (at::globalContext().setBenchmarkCuDNN). Faster kernels at large
  // batches; the first forward of each shape pays the timing (0.3-1.4 s per
  // size for ResNet-50 on an H200), in verification and warm-up.
  bool cudnn_benchmark = true;
};

// The graph to serve and why it was chosen.
struct VerifiedGraph {
  torch::jit::Module module;
  std::string level;   // "none", "freeze", "full"
  std::string reason;  // ModelInfo::optimization_reason
  absl::Duration optimize_time;  // building the optimized graph(s)
  absl::Duration verify_time;    // the comparison forwards
};

// A forward to compare: probe inputs on the host -> outputs on the host,
// floating outputs as fp32.
using CompareForward = std::function<absl::StatusOr<std::vector<at::Tensor>>(
    const std::vector<at::Tensor>& host)>;

class GraphVerifier {
 public:
  GraphVerifier(const ForwardPath& path, VerifyOptions options, Clock* clock)
      : path_(path), options_(std::move(options)), clock_(clock) {}

  // Casts `plain32` to `compute` (reporting the deviation from fp32), then
  // tries `level` and safer levels until one verifies. Errors: the cast
  // graph fails to run.
  absl::StatusOr<VerifiedGraph> Optimize(torch::jit::Module& plain32, Level level,
                                         at::ScalarType compute);
  // Casts `plain32` to `compute` and builds `level` without comparing: the
  // verdict of an earlier Optimize with the same key, read from the
  // verification cache (verification_cache.h). `reason` is that verdict's.
  // INTERNAL when the level fails to build (the caller then verifies).
  absl::StatusOr<VerifiedGraph> Rebuild(torch::jit::Module& plain32, Level level,
                                        at::ScalarType compute, std::string reason);
  // Compares `candidate` with `reference` on seeded probes at every batch
  // size (within `tolerance`, the same arg-max, and with `check_invariance`
  // each row equal to the same row alone). Returns "" when they match, else
  // what differed; *worst is the largest relative deviation seen. Used for
  // graphs (below) and for a compiled package against its TorchScript model
  // or recorded outputs (aoti_package.h).
  absl::StatusOr<std::string> CompareForwards(const CompareForward& reference,
                                              const CompareForward& candidate, double tolerance,
                                              bool check_invariance, double* worst) const;
  const VerifyOptions& options() const { return options_; }

 private:
  std::optional<torch::jit::Module> TryLevel(torch::jit::Module& plain, Level level,
                                             at::ScalarType compute,
                                             std::vector<std::string>* reasons);
  absl::Status ComparePrecision(torch::jit::Module& plain32, torch::jit::Module& plain,
                                at::ScalarType compute, std::vector<std::string>* reasons);
  // Compares `candidate` with `reference` at every batch size. Returns ""
  // when within tolerance, else what differed; *worst is the largest
  // relative deviation seen.
  absl::StatusOr<std::string> Compare(torch::jit::Module& reference,
                                      at::ScalarType reference_dtype,
                                      torch::jit::Module& candidate,
                                      at::ScalarType candidate_dtype,
                                      bool check_invariance, double* worst) const;
  // Outputs of `m` on the probe, floats as fp32 for the arithmetic.
  absl::StatusOr<std::vector<at::Tensor>> Outputs(torch::jit::Module& m,
                                                  const std::vector<at::Tensor>& in,
                                                  at::ScalarType compute) const;
  void CompareOutputs(const std::vector<at::Tensor>& want, const std::vector<at::Tensor>& got,
                      int64_t batch, double tol, double* worst,
                      std::vector<std::string>* problems) const;
  absl::Status CompareRowsAlone(const CompareForward& candidate,
                                const std::vector<at::Tensor>& probe,
                                const std::vector<at::Tensor>& got, int64_t batch, double tol,
                                double* worst, std::vector<std::string>* problems) const;

  const ForwardPath& path_;
  const VerifyOptions options_;
  Clock* const clock_;
  absl::Duration optimize_time_;  // summed over the levels tried
  absl::Duration verify_time_;
};

}  // namespace metalserve::torch_internal

#endif  // METALSERVE_SERVER_RUNTIME_GRAPH_VERIFICATION_H_
