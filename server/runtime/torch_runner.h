// The LibTorch implementation of Runner: one TorchScript model resident on
// MPS, CUDA or CPU. This header is torch-free; LibTorch is seen only by
// torch_runner.cc, torch_runner_load.cc and their internal headers.
//
// What CreateTorchRunner does before it returns (the server is not ready
// until it has); each phase is logged as it starts and with its duration
// when it ends, so that a slow load shows where the time goes:
//   1. reads the signature sidecar through options.signature_codec, if there
//      is one;
//   2. chooses the device (auto: mps -> cuda -> cpu; a requested device that
//      is missing is FAILED_PRECONDITION naming it) and logs it, with whether
//      PYTORCH_ENABLE_MPS_FALLBACK is set;
//   3. loads the model on CPU and moves it (jit::load to MPS fails before
//      LibTorch 2.1);
//   3b. binds the signature to forward's arguments BY NAME and checks it
//      against a probe forward at batch 2 in fp32: output count, dict keys,
//      dtypes, rank and non-batch dims (signature_binding.h). A mismatch is
//      INVALID_ARGUMENT naming the field, declared and actual value, e.g.
//      "outputs[0].shape[1]: declared 10, model gives 3". Without a sidecar
//      the signature is inferred: input names from forward's schema, shapes
//      and dtypes from `input_shapes` / `input_dtypes`, outputs from the
//      probe; it is logged as JSON and written to the default sidecar path
//      when `write_inferred_signature` and the folder is writable. Then the
//      model is cast to the precision;
//   4. optimizes the graph (none | freeze | full = freeze +
//      optimize_for_inference, plus the cuDNN autotuner on CUDA) and VERIFIES
//      the result against the plain model on seeded probe inputs for every
//      warm-up batch size: every row within `verify_tolerance` of the output
//      scale, the same arg-max, and each row independent of its position in
//      the batch. A level that fails falls back to the next safer one; the
//      active level and the reason are in ModelInfo::optimization(_reason).
//      fp16/bf16 are compared with fp32 and the deviation is reported in the
//      reason (no fallback for precision);
//   5. warms up every warm-up batch size (ModelInfo::warmup_time).
//
// Run: inputs are checked defensively (count, dtype, rank, rows, bytes:
// INVALID_ARGUMENT), cast on the device, forwarded under InferenceMode, and
// outputs come back in the signature's dtype (fp32 for fp16/bf16 models).
// A device out-of-memory empties the cache (trigger "oom") and returns
// RESOURCE_EXHAUSTED; the caller splits the batch. A model exception is
// INTERNAL carrying the model's message; the runner stays usable.
//
// Threading: one dedicated thread, owned by the runner, does all device work,
// load and warm-up included (Run posts to it and waits): MPS is not safe from
// several threads, cuDNN's autotuner cache is per thread, and on CPU a
// forward from another thread than the warmed-up one measured 1.4x slower.
// On CUDA that thread uses one pooled stream with pinned, non-blocking input
// copies; on CPU it uses `threads` intra-op threads. Callers (the executor
// threads) assemble the next batch while it computes. Run, Memory and
// BetweenBatches are thread-safe.
// Destruction joins the device thread; no Run may be in flight.
#ifndef METALSERVE_SERVER_RUNTIME_TORCH_RUNNER_H_
#define METALSERVE_SERVER_RUNTIME_TORCH_RUNNER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/runtime/cache_policy.h"
#include "server/runtime/model_signature.h"
#include "server/runtime/runner.h"

namespace metalserve {

struct RuntimeOptions {
  // TorchScript file. Required.
  std::string model_path;
  // Signature sidecar; empty means model_path with its extension replaced by
  // ".json", and then a missing file means "infer the signature" (below). A
  // path given here must exist (NOT_FOUND otherwise).
  std::string signature_path;
  // Reads the sidecar and prints an inferred signature. Required: main
  // passes ModelConfigSignatureCodec() (server/model_config/model_config.h),
  // which keeps Protobuf's JSON out of this target.
  SignatureCodec signature_codec;
  // For a model without a sidecar: the shape after the batch dimension of
  // each input, by forward's argument name (e.g. {"x", {3, 224, 224}}), and
  // dtypes by name (float32 when absent). Ignored when a sidecar exists.
  std::map<std::string, std::vector<int64_t>> input_shapes;
  std::map<std::string, DType> input_dtypes;
  // Write an inferred signature to the default sidecar path.
  bool write_inferred_signature = true;
  // "auto" (mps -> cuda -> cpu), "mps", "cuda", "cuda:N" or "cpu".
  std::string device = "auto";
  // CPU intra-op threads (at::set_num_threads); 0 leaves LibTorch's default
  // (Debian's LibTorch starts with one).
  int threads = 0;
  // "fp32", "fp16" or "bf16": the compute precision on the device. Inputs
  // are cast on the device; outputs are returned in the signature's dtype.
  std::string precision = "fp32";
  // Feed 4-D float inputs in channels-last memory format.
  bool channels_last = false;
  // "none", "freeze", "full" or "auto" (per device: cpu and cuda try full,
  // mps freeze; always verified, falling back as needed).
  std::string optimize = "auto";
  // Batch sizes to verify and warm up before returning; each > 0.
  std::vector<int64_t> warmup_batch_sizes = {1};
  // Largest relative deviation (max |optimized - plain| / max |plain|) an
  // optimized graph may show and still be used. Default 1e-3.
  double verify_tolerance = 1e-3;
  // Also check that a row's output does not depend on its batch position.
  bool verify_batch_invariance = true;

  // Cache hygiene (see cache_policy.h). 0 / zero duration turns each off.
  int64_t empty_cache_every = 0;           // batches
  absl::Duration empty_cache_interval = absl::ZeroDuration();  // while idle
  double memory_watermark = 0.0;           // fraction of the device limit
  CacheClearCallback on_cache_clear;       // trigger, time taken

  // Not owned; nullptr means Clock::RealClock(). Used for load/warm-up
  // timing and the cache policy.
  Clock* clock = nullptr;
};

// Loads, optimizes, verifies and warms up the model; see the file comment.
// INVALID_ARGUMENT: bad options or a model/signature that cannot be used;
// NOT_FOUND: missing model or signature file; FAILED_PRECONDITION: the
// requested device is not available.
absl::StatusOr<std::unique_ptr<Runner>> CreateTorchRunner(
    const RuntimeOptions& options);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_RUNTIME_TORCH_RUNNER_H_
