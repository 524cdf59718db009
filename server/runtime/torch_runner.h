// The LibTorch implementation of Runner: one TorchScript model resident on
// MPS, CUDA or CPU. This header is torch-free; LibTorch is seen only by the
// runtime target's own .cc files and internal headers (torch_runner_internal.h
// lists them).
//
// What CreateTorchRunner does before it returns (the server is not ready
// until it has); each phase is logged as it starts and with its duration
// when it ends, so that a slow load shows where the time goes:
//   1. chooses the device (auto: mps -> cuda -> cpu, an accelerator only
//      once a probe computation on it matches the CPU's; a requested device
//      that is missing or fails its probe is FAILED_PRECONDITION naming it
//      and the failure; device_choice.h) and logs it, with whether
//      PYTORCH_ENABLE_MPS_FALLBACK is set;
//   2. reads the signature sidecar through options.signature_codec, if there
//      is one;
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
//      With `cache_dir` set, the verdict is cached under a key of the model
//      file's SHA-256 and every setting it depends on; a later load with the
//      same key rebuilds the chosen level without the comparison forwards
//      (verification_cache.h);
//   5. warms up every warm-up batch size (ModelInfo::warmup_time).
// Each phase's duration goes to `on_load_phase` (read, signature, optimize,
// verify, warmup).
//
// Run: inputs are checked defensively (count, dtype, rank, rows, bytes:
// INVALID_ARGUMENT), cast on the device, forwarded under InferenceMode, and
// outputs come back in the signature's dtype (fp32 for fp16/bf16 models).
// A device out-of-memory empties the cache (trigger "oom") and returns
// RESOURCE_EXHAUSTED; the caller splits the batch. A model exception is
// INTERNAL carrying the model's message; the runner stays usable.
//
// Every forward (the probe of 3b, verification, warm-up and serving) goes
// through one forward path (forward_path.h): inputs to the device, cast to
// the precision, channels-last when asked, forward, outputs back in the
// signature's dtype. So what was verified and warmed up is what serves.
//
// Threading: all device work, load and warm-up included, runs on the
// device's one thread, a DeviceThread (device_thread.h says why). Pass one
// in RuntimeOptions::device_thread to share it between runners on the same
// device; without one the runner creates its own. Run posts to it and waits.
// One exception (cpu_forward_on_caller): on the CPU, a one-row batch of a
// model that the warm-up serves on one intra-op thread at every size runs
// on the calling executor thread while the device thread is idle, holding
// the device meanwhile (DeviceThread::RunHereIfIdle): the same
// one-at-a-time device and fair share, without the two thread switches of
// the hand-off. The executor waits for the forward either way. A batched
// model's only while no other batch of it is in flight: under load the
// hold made the device thread sleep and wake for the next batch
// (docs/performance.md).
// On CUDA that thread uses one pooled stream with pinned, non-blocking input
// copies; on CPU it uses `threads` intra-op threads. Callers (the executor
// threads) assemble the next batch while it computes. Run, Memory and
// BetweenBatches are thread-safe.
// Ownership: the runner owns its module; it shares the device thread.
// Destruction releases the module on the device thread (no Run may be in
// flight) and drops the runner's share of the thread; the last owner's
// release drains and joins it.
#ifndef METALSERVE_SERVER_RUNTIME_TORCH_RUNNER_H_
#define METALSERVE_SERVER_RUNTIME_TORCH_RUNNER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/runtime/cache_policy.h"
#include "server/runtime/device_choice.h"
#include "server/runtime/device_thread.h"
#include "server/runtime/model_signature.h"
#include "server/runtime/runner.h"

namespace metalserve {

// What a forward through the runtime's one forward path is for.
enum class ForwardPurpose {
  kProbe,   // the signature check at load (batch 2, fp32)
  kVerify,  // an optimized or reduced-precision graph against the plain one
  kWarmUp,  // warm-up of each warm-up batch size
  kServe,   // Run / RunBatch
};
// Called on the device thread before each forward through the forward path,
// with its purpose and its rows. For tracing and tests; must be cheap and
// must not call the runner.
using ForwardObserver = std::function<void(ForwardPurpose purpose, int64_t rows)>;
// Called once per load phase as it ends, with its duration. Phases: "read"
// (the file into a module on the device), "signature" (binding and the probe
// forward), "optimize" (building the optimized graphs), "verify" (comparing
// them with the plain graph; zero on a verification-cache hit), "warmup".
using LoadPhaseCallback = std::function<void(const std::string& phase, absl::Duration took)>;

// Warm-up on the CPU: a later warm-up size's first forward counts alone
// from this long (a new shape's set-up is then a few percent of it); a
// shorter one is followed by one more, the least counting
// (torch_runner_warmup.cc, TorchRunner::WarmUp).
inline constexpr absl::Duration kWarmUpSettledForward = absl::Milliseconds(10);

struct RuntimeOptions {
  // TorchScript file, or an AOTInductor package (a name ending in ".pt2";
  // aoti_runner.cc; refused with FAILED_PRECONDITION by a runtime built
  // without AOTInductor). Required.
  std::string model_path;
  // For a package: the TorchScript model it is verified against at load;
  // empty: <model>.pt beside the package when there is one.
  std::string reference_model_path;
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
  // "auto": the model is loaded on each working device (accelerators that
  // pass their probe, and the CPU), a forward timed at each warm-up batch
  // size, and the fastest over those sizes serves (the others are released;
  // device_choice.h). "first_available": mps -> cuda -> cpu, an accelerator
  // only when it passes its probe. "mps", "cuda", "cuda:N" or "cpu": that
  // device, never overridden; one that fails its probe is
  // FAILED_PRECONDITION.
  std::string device = "auto";
  // What the machine offers and the device probe; nullptr: LibTorch's (the
  // real probe). Tests pass fakes.
  std::shared_ptr<const DevicePlatform> device_platform;
  // CPU intra-op threads (at::set_num_threads); 0 leaves LibTorch's default
  // (Debian's LibTorch starts with one).
  int threads = 0;
  // On the CPU, for a model that the warm-up serves on one intra-op thread
  // at every warm-up size, a one-row batch runs on the calling executor
  // thread when the device thread is idle (DeviceThread::RunHereIfIdle),
  // sparing two thread switches (a batched model's only while it is the
  // runner's one batch in flight); larger batches, a model with a parallel
  // size, and every other device: on the device thread.
  bool cpu_forward_on_caller = true;
  // Host buffers of finished batches kept for later ones (staging_pool.h),
  // instead of one allocated per batch (pinned on CUDA); 0 keeps none. Each
  // kept buffer holds at most one batch's inputs (the largest batches win),
  // and stays allocated while the runner lives.
  int staging_buffers = 2;
  // How long the device thread of an accelerator (CUDA, MPS) this runner
  // creates, and RunSync callers waiting for it, poll before sleeping
  // (DeviceThread::Options::spin, set per device by DeviceThread::ForDevice;
  // the CPU's thread never polls). Zero: never. The server's flag
  // (--accelerator_spin) defaults to 1ms; this default stays zero for code
  // that builds the options itself (tests, benchmarks).
  absl::Duration accelerator_spin = absl::ZeroDuration();
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
  // CUDA: cuDNN's per-shape algorithm timing for the full level
  // (VerifyOptions::cudnn_benchmark). Off trades some large-batch speed for
  // a shorter load and warm-up; part of the verification cache's key.
  bool cudnn_benchmark = true;
  // Folder of the verification cache (verification_cache.h): a verdict
  // stored there for the same model bytes, LibTorch, device, precision,
  // level, batch sizes and comparison settings is reused instead of
  // verifying again. Empty: no cache. A folder that cannot be created or
  // written only disables the cache (one log line).
  std::string cache_dir;
  // Optional; see LoadPhaseCallback.
  LoadPhaseCallback on_load_phase;
  // Optional: with device "auto", each device's measured forward time per
  // warm-up batch size (device_choice.h), as measured.
  std::function<void(const std::string& device, int64_t batch_size, absl::Duration took)>
      on_device_forward;

  // Cache hygiene (see cache_policy.h). 0 / zero duration turns each off.
  int64_t empty_cache_every = 0;           // batches
  absl::Duration empty_cache_interval = absl::ZeroDuration();  // while idle
  double memory_watermark = 0.0;           // fraction of the device limit
  CacheClearCallback on_cache_clear;       // trigger, time taken

  // Not owned; nullptr means Clock::RealClock(). Used for load/warm-up
  // timing and the cache policy.
  Clock* clock = nullptr;

  // The thread that does all work on `device`, shared with other runners on
  // the same device; nullptr: the runner creates its own. Give one thread
  // only to runners on one device. With one given, "auto" keeps the fixed
  // order (reason "shared_device_thread"): the thread fixes the device.
  std::shared_ptr<DeviceThread> device_thread;
  // The key this runner's batches are queued under on the device thread
  // (fair_queue.h: the device's time is shared fairly between keys), e.g.
  // "<model>:<version>". Empty: the model's name. Load, verification,
  // warm-up and release run under FairQueue::kDeviceKey.
  std::string device_key;
  // Order across keys on a device thread this runner creates itself (none
  // given): kFair, or kFifo, the order before keys (--device_scheduling).
  FairQueue::Order device_order = FairQueue::Order::kFair;
  // Optional, used when device_thread is nullptr: the shared thread of a
  // device by the name the choice resolved it to ("cpu", "cuda:0", "mps"),
  // asked once the device is known. So a model asking "auto" and one asking
  // "cpu" that both land on the CPU share one thread, and "auto" loads and
  // times the model on each device on that device's thread; each device's
  // probe (device_choice.h) runs on its thread too. The repository passes
  // DeviceThreads::For (server/model_loading.h).
  std::function<std::shared_ptr<DeviceThread>(const std::string& device)> device_thread_for;
  // Optional, not owned: the devices' cache policies, so every runner on a
  // device shares the device's one policy (cache_policy.h), looked up by
  // the resolved device name; the first runner's cache options make it.
  // nullptr: the runner has a policy of its own. The repository passes
  // DeviceThreads::cache_policies() (server/model_loading.h).
  CachePolicies* cache_policies = nullptr;
  // Optional; see ForwardObserver.
  ForwardObserver forward_observer;
};

// The machine as LibTorch sees it, with the real device probe
// (device_choice.h; torch_device.h says what the probe computes). Probe also
// accepts "cpu" (the CPU against itself), which lets a CPU-only machine run
// the probe's code.
std::unique_ptr<DevicePlatform> CreateTorchPlatform();

// Loads, optimizes, verifies and warms up the model; see the file comment.
// INVALID_ARGUMENT: bad options or a model/signature that cannot be used;
// NOT_FOUND: missing model or signature file; FAILED_PRECONDITION: the
// requested device is not available.
absl::StatusOr<std::unique_ptr<Runner>> CreateTorchRunner(
    const RuntimeOptions& options);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_RUNTIME_TORCH_RUNNER_H_
