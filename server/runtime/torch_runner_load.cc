// TorchRunner::Create and the load phases, each logged as it starts and with
// its duration: load, signature binding and check (signature_binding.h),
// precision, optimization with verification (graph_verification.h); the
// warm-up is in torch_runner_warmup.cc. Every forward here goes through the forward path that serves
// (forward_path.h). See torch_runner.h.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/script.h>
#include <torch/version.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"
#include "common/status_macros.h"
#include "server/runtime/intra_op_threads.h"
#include "server/runtime/model_signature.h"
#include "server/runtime/signature_binding.h"
#include "server/runtime/torch_runner_internal.h"
#include "server/runtime/verification_cache.h"

namespace metalserve::torch_internal {
namespace {

absl::Status ValidateOptions(const RuntimeOptions& options) {
  if (options.model_path.empty()) {
    return absl::InvalidArgumentError("model_path is empty");
  }
  if (options.threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("threads = ", options.threads, " is negative"));
  }
  if (options.warmup_batch_sizes.empty()) {
    return absl::InvalidArgumentError("warmup_batch_sizes is empty");
  }
  for (int64_t b : options.warmup_batch_sizes) {
    if (b <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("warm-up batch size ", b, " is not positive"));
    }
  }
  if (!(options.verify_tolerance >= 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "verify_tolerance = ", options.verify_tolerance, " is negative"));
  }
  if (!options.signature_codec.read || !options.signature_codec.to_json) {
    return absl::InvalidArgumentError(
        "signature_codec is not set (pass ModelConfigSignatureCodec(), "
        "server/model_config/model_config.h)");
  }
  return absl::OkStatus();
}

// The declared signature, or nullopt when there is none to read: no
// signature_path was given and no file sits at the default path.
absl::StatusOr<std::optional<ModelSignature>> ReadDeclaredSignature(
    const RuntimeOptions& options, const std::string& path) {
  absl::StatusOr<ModelSignature> sig = options.signature_codec.read(path);
  if (sig.ok()) return std::optional<ModelSignature>(*std::move(sig));
  if (!options.signature_path.empty() || sig.status().code() != absl::StatusCode::kNotFound) {
    return sig.status();
  }
  return std::optional<ModelSignature>();
}

CachePolicyOptions CacheOptions(const RuntimeOptions& options, const std::string& device) {
  CachePolicyOptions cache;
  cache.empty_cache_every = options.empty_cache_every;
  cache.empty_cache_interval = options.empty_cache_interval;
  cache.memory_watermark = options.memory_watermark;
  cache.on_cache_clear = options.on_cache_clear;
  cache.clock = options.clock;
  cache.device_name = device;
  return cache;
}

void ReportPhase(const RuntimeOptions& options, const std::string& phase, absl::Duration took) {
  if (options.on_load_phase) options.on_load_phase(phase, took);
}

// Everything besides the model, LibTorch, device, precision, level and sizes
// that changes the verdict: the comparison's settings and the inputs probed.
std::string ComparisonKey(const RuntimeOptions& options, const std::vector<TensorSpec>& inputs) {
  std::vector<std::string> in;
  for (const TensorSpec& s : inputs) {
    in.push_back(absl::StrCat(s.name, ":", DTypeName(s.dtype), ":", ShapeToString(s.shape)));
  }
  return absl::StrFormat(
      "tolerance=%.17g batch_invariance=%d channels_last=%d cudnn_benchmark=%d inputs=%s",
      options.verify_tolerance, options.verify_batch_invariance, options.channels_last,
      options.cudnn_benchmark, absl::StrJoin(in, ";"));
}

Level LevelNamed(const std::string& name) {
  if (name == "full") return Level::kFull;
  if (name == "freeze") return Level::kFreeze;
  return Level::kNone;
}

}  // namespace

// Verified at each distinct warm-up size once: a repeated size proves
// nothing new. Not at fewer distinct sizes: oneDNN and cuDNN choose their
// kernels by shape, and the known fault (optimize_for_inference on
// mobilenet_v3_small, LibTorch 1.13) depended on the batch, so a size not
// compared is not proven. Rows in a batch are compared with the same rows
// forwarded alone (batch 1), which the batch-1 comparison already covers.
// What saves the time on a restart is the verification cache.
VerifyOptions WarmupVerifyOptions(const RuntimeOptions& options, const std::string& precision) {
  VerifyOptions verify;
  verify.batch_sizes = options.warmup_batch_sizes;
  std::sort(verify.batch_sizes.begin(), verify.batch_sizes.end());
  verify.batch_sizes.erase(std::unique(verify.batch_sizes.begin(), verify.batch_sizes.end()),
                           verify.batch_sizes.end());
  verify.tolerance = options.verify_tolerance;
  verify.batch_invariance = options.verify_batch_invariance;
  verify.precision = precision;
  verify.cudnn_benchmark = options.cudnn_benchmark;
  return verify;
}

absl::StatusOr<std::unique_ptr<Runner>> TorchRunner::Create(
    const RuntimeOptions& options) {
  Clock* clock = options.clock != nullptr ? options.clock : Clock::RealClock();
  const absl::Time start = clock->TimeNow();
  RETURN_IF_ERROR(ValidateOptions(options));
  if (IsPackagePath(options.model_path)) return CreateFromPackage(options);
  auto runner = std::unique_ptr<TorchRunner>(new TorchRunner());
  runner->clock_ = clock;
  RETURN_IF_ERROR(runner->SetUp(options));
  const int64_t reserved_before = runner->ReservedBytes();
  ASSIGN_OR_RETURN(const Level level, ParseLevel(options.optimize, *runner->device_));
  const std::string sig_path = options.signature_path.empty()
                                   ? DefaultSignaturePath(options.model_path)
                                   : options.signature_path;
  ASSIGN_OR_RETURN(const std::optional<ModelSignature> declared,
                   ReadDeclaredSignature(options, sig_path));

  absl::Status status;
  RETURN_IF_ERROR(
      runner->OnDevice([&] { status = runner->Load(options, level, declared, sig_path); }));
  RETURN_IF_ERROR(status);
  runner->info_.load_time = clock->TimeNow() - start;
  const absl::Time warm = clock->TimeNow();
  RETURN_IF_ERROR(
      runner->OnDevice([&] { status = runner->WarmUp(options.warmup_batch_sizes); }));
  RETURN_IF_ERROR(status);
  runner->info_.warmup_time = clock->TimeNow() - warm;
  ReportPhase(options, "warmup", runner->info_.warmup_time);
  runner->RecordLoadMemory(reserved_before);
  runner->LogReady();
  return std::unique_ptr<Runner>(std::move(runner));
}

// Precision, device, device thread, forward path and cache policy.
absl::Status TorchRunner::SetUp(const RuntimeOptions& options) {
  ASSIGN_OR_RETURN(compute_dtype_, ParsePrecision(options.precision));
  ASSIGN_OR_RETURN(DeviceChoice choice,
                   ChooseDevice(options.device, options.device_platform.get()));
  info_.device = choice.name;
  info_.device_choice.skipped = choice.skipped;  // CreateTorchRunner adds the rest
  info_.torch_version = TORCH_VERSION;
  info_.precision = options.precision;
  const char* fallback = std::getenv("PYTORCH_ENABLE_MPS_FALLBACK");
  LOG(INFO) << "runtime: device " << info_.device << " (requested " << options.device
            << "), LibTorch " << TORCH_VERSION << ", PYTORCH_ENABLE_MPS_FALLBACK="
            << (fallback != nullptr ? fallback : "<unset>");
  ApplyIntraOpThreads(options.threads);
  LOG(INFO) << "runtime: intra-op threads " << at::get_num_threads();

  // All device work (load and warm-up included, on every device) runs on
  // the device's one thread (device_thread.h says why). On CPU, a forward
  // from another thread than the one that loaded and warmed up ran 1.4x
  // slower (mobilenet_v3_small, LibTorch 1.13: 15.2 ms against 10.9 ms at
  // batch 1; 11.3 ms on the owner thread); on CUDA, ResNet-50 batches of 32
  // took 470 ms instead of 16 ms from threads that had not warmed up (H200).
  std::shared_ptr<DeviceThread> thread = options.device_thread;
  if (thread == nullptr && options.device_thread_for) {
    thread = options.device_thread_for(choice.name);
  }
  if (thread == nullptr) {
    thread = DeviceThread::Create(
        choice.name,
        DeviceThread::ForDevice(choice.name, options.device_order, options.accelerator_spin));
  }
  device_key_ = options.device_key;
  // Confirmed at the end of warm-up, once the intra-op threads of every
  // size are known (WarmUp).
  cpu_forward_on_caller_ =
      options.cpu_forward_on_caller && !options.warmup_batch_sizes.empty();
  batched_ = !options.warmup_batch_sizes.empty() &&
             *std::max_element(options.warmup_batch_sizes.begin(),
                               options.warmup_batch_sizes.end()) > 1;
  ASSIGN_OR_RETURN(device_, TorchDevice::Create(std::move(choice), std::move(thread)));
  // OpenMP's thread count is per calling thread: set it where forwards run.
  if (options.threads > 0) {
    RETURN_IF_ERROR(OnDevice([&] { ApplyIntraOpThreads(options.threads); }));
  }
  path_ = std::make_unique<ForwardPath>(device_, options.channels_last,
                                        options.forward_observer);
  // Batch host buffers: pinned on CUDA, so that the copy to the device is a
  // DMA with no staging copy of its own (forward_path.cc).
  const bool pinned = device_->device().is_cuda();
  staging_ = std::make_unique<StagingPool>(options.staging_buffers, [pinned](int64_t bytes) {
    at::Tensor t = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(pinned));
    void* data = t.data_ptr();
    return StagingPool::Block(data, [t](void*) mutable { t.reset(); });
  });
  // The device's one cache policy, shared with every runner on it
  // (cache_policy.h); without a registry, a policy of this runner's own.
  CachePolicies own;
  CachePolicies* policies = options.cache_policies != nullptr ? options.cache_policies : &own;
  ASSIGN_OR_RETURN(std::shared_ptr<CachePolicy> policy,
                   policies->For(info_.device, CacheOptions(options, info_.device), device_));
  cache_policy_ = std::make_unique<CacheUser>(std::move(policy));
  return absl::OkStatus();
}

void TorchRunner::LogReady() const {
  LOG(INFO) << "runtime: model " << info_.name << " ready on " << info_.device
            << ", precision " << info_.precision << ", optimization " << info_.optimization
            << " (" << info_.optimization_reason
            << "), load_ms=" << absl::ToInt64Milliseconds(info_.load_time)
            << " warmup_ms=" << absl::ToInt64Milliseconds(info_.warmup_time);
}

int64_t TorchRunner::ReservedBytes() const { return device_->Stats().reserved_bytes; }

void TorchRunner::RecordLoadMemory(int64_t before) {
  const int64_t after = ReservedBytes();
  info_.load_reserved_bytes = before >= 0 && after >= 0 ? std::max<int64_t>(after - before, 0) : -1;
}

// Loads on CPU, moves to the device, binds the signature, optimizes and
// verifies (graph_verification.h).
absl::Status TorchRunner::Load(const RuntimeOptions& options, Level level,
                               const std::optional<ModelSignature>& declared,
                               const std::string& signature_path) {
  absl::Time start = clock_->TimeNow();
  ASSIGN_OR_RETURN(torch::jit::Module plain32, LoadModule(options.model_path));
  ReportPhase(options, "read", clock_->TimeNow() - start);
  start = clock_->TimeNow();
  RETURN_IF_ERROR(BindSignature(plain32, options, declared, signature_path));
  ReportPhase(options, "signature", clock_->TimeNow() - start);
  VerifyOptions verify = WarmupVerifyOptions(options, options.precision);
  GraphVerifier verifier(*path_, std::move(verify), clock_);
  ASSIGN_OR_RETURN(VerifiedGraph graph, OptimizeOrReuse(options, level, plain32, verifier));
  ReportPhase(options, "optimize", graph.optimize_time);
  ReportPhase(options, "verify", graph.verify_time);
  info_.optimization = graph.level;
  info_.optimization_reason = std::move(graph.reason);
  module_ = std::move(graph.module);
  return absl::OkStatus();
}

absl::StatusOr<VerifiedGraph> TorchRunner::OptimizeOrReuse(const RuntimeOptions& options,
                                                           Level level,
                                                           torch::jit::Module& plain32,
                                                           GraphVerifier& verifier) {
  const VerificationCache cache = VerificationCache::Open(options.cache_dir);
  std::optional<VerificationKey> key;
  if (cache.enabled()) {
    const absl::Time start = clock_->TimeNow();
    absl::StatusOr<std::string> sha = FileSha256(options.model_path);
    LOG_IF(WARNING, !sha.ok()) << "runtime: verification cache off: " << sha.status();
    if (sha.ok()) {
      key = VerificationKey{*sha, TORCH_VERSION, info_.device, options.precision,
                            kLevelNames[static_cast<int>(level)],
                            absl::StrJoin(options.warmup_batch_sizes, ","),
                            ComparisonKey(options, info_.inputs)};
      LOG(INFO) << "runtime: model SHA-256 " << *sha << " in " << ElapsedMs(clock_, start)
                << " ms";
    }
  }
  if (key.has_value()) {
    if (std::optional<VerificationRecord> hit = cache.Lookup(*key)) {
      absl::StatusOr<VerifiedGraph> graph =
          verifier.Rebuild(plain32, LevelNamed(hit->level), compute_dtype_,
                           absl::StrCat(hit->reason, " (cached in ", cache.PathFor(*key), ")"));
      if (graph.ok()) return graph;
      LOG(WARNING) << "runtime: cached level " << hit->level << " ignored: " << graph.status()
                   << "; verifying";
    }
  }
  ASSIGN_OR_RETURN(VerifiedGraph graph, verifier.Optimize(plain32, level, compute_dtype_));
  if (key.has_value()) cache.Store(*key, VerificationRecord{graph.level, graph.reason});
  return graph;
}

absl::StatusOr<torch::jit::Module> TorchRunner::LoadModule(const std::string& path) {
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot read model file ", path));
  const absl::Time start = clock_->TimeNow();
  LOG(INFO) << "runtime: loading model " << path << " ("
            << absl::StrFormat("%.1f", static_cast<double>(file.tellg()) / 1e6) << " MB) onto "
            << info_.device;
  try {
    torch::jit::Module m = torch::jit::load(path, torch::kCPU);
    m.eval();
    m.to(device_->device());
    LOG(INFO) << "runtime: loaded " << path << " in " << ElapsedMs(clock_, start) << " ms";
    return m;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("cannot load TorchScript model ", path,
                                                   ": ", ModelMessage(e.what())));
  }
}

// Probe inputs of `batch` rows through `m` in fp32, by the forward path, the
// result as the model gives it (the outputs are what is being checked or
// learnt). A model that refuses them is INVALID_ARGUMENT naming the inputs.
absl::StatusOr<c10::IValue> TorchRunner::ProbeForward(torch::jit::Module& m, int64_t batch) {
  absl::StatusOr<c10::IValue> out =
      path_->ForwardRaw(m, ProbeInputs(*path_, batch, 99), at::kFloat, ForwardPurpose::kProbe);
  if (out.ok()) return out;
  std::vector<std::string> in;
  for (const TensorSpec& s : info_.inputs) {
    in.push_back(absl::StrCat(s.name, " ", DTypeName(s.dtype), " ", ShapeToString(s.shape)));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "inputs: a probe forward at batch ", batch, " with the signature's inputs (",
      absl::StrJoin(in, "; "), ") fails: ", out.status().message()));
}

absl::Status TorchRunner::SetInputs(const std::vector<TensorSpec>& inputs) {
  info_.inputs = inputs;
  std::vector<at::ScalarType> types;
  for (const TensorSpec& spec : inputs) {
    ASSIGN_OR_RETURN(at::ScalarType t, ToScalarType(spec.dtype));
    types.push_back(t);
  }
  path_->SetInputs(inputs, std::move(types));
  return absl::OkStatus();
}

absl::Status TorchRunner::BindSignature(torch::jit::Module& plain32,
                                        const RuntimeOptions& options,
                                        const std::optional<ModelSignature>& declared,
                                        const std::string& signature_path) {
  constexpr int64_t kProbeBatch = 2;  // tells the batch dimension from a 1
  const absl::Time start = clock_->TimeNow();
  ASSIGN_OR_RETURN(const ForwardArgs args, ReadForwardArgs(plain32));
  ModelSignature sig;
  if (declared.has_value()) {
    sig = *declared;
    LOG_IF(WARNING, !options.input_shapes.empty() || !options.input_dtypes.empty())
        << "runtime: input shapes/dtypes given, ignored: " << signature_path << " exists";
    RETURN_IF_ERROR(BindInputsByName(args, &sig.inputs));
  } else {
    ASSIGN_OR_RETURN(sig.inputs, InputsFromHints(args, options.input_shapes,
                                                 options.input_dtypes, signature_path));
  }
  RETURN_IF_ERROR(SetInputs(sig.inputs));
  ASSIGN_OR_RETURN(const c10::IValue result, ProbeForward(plain32, kProbeBatch));
  if (declared.has_value()) {
    RETURN_IF_ERROR(CheckOutputs(result, sig.outputs, kProbeBatch));
  } else {
    ASSIGN_OR_RETURN(sig.outputs, OutputsFromProbe(result, kProbeBatch));
    const std::string stem = std::filesystem::path(options.model_path).stem().string();
    sig.name = stem;
    sig.version = "1";
  }
  info_.outputs = sig.outputs;
  path_->SetOutputs(sig.outputs);
  info_.name = sig.name;
  info_.version = sig.version.empty() ? "1" : sig.version;
  std::vector<std::string> bound;
  for (const TensorSpec& s : sig.inputs) bound.push_back(s.name);
  LOG(INFO) << "runtime: signature " << (declared.has_value() ? "checked" : "inferred")
            << " by a probe forward at batch " << kProbeBatch << " in "
            << ElapsedMs(clock_, start) << " ms: forward" << args.ToString()
            << " takes inputs (" << absl::StrJoin(bound, ", ") << "), "
            << sig.outputs.size() << " output(s)";
  if (!declared.has_value()) {
    KeepInferredSignature(sig, signature_path, options.signature_codec,
                          options.write_inferred_signature);
  }
  return absl::OkStatus();
}

void TorchRunner::KeepInferredSignature(const ModelSignature& sig, const std::string& path,
                                        const SignatureCodec& codec, bool write) const {
  const absl::StatusOr<std::string> printed = codec.to_json(sig);
  if (!printed.ok()) {
    LOG(WARNING) << "runtime: cannot print the inferred signature: " << printed.status();
    return;
  }
  const std::string& json = *printed;
  LOG(INFO) << "runtime: inferred signature (no " << path << "):\n" << json;
  if (!write) return;
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::trunc);
  out << json;
  out.close();
  if (out && std::rename(tmp.c_str(), path.c_str()) == 0) {
    LOG(INFO) << "runtime: wrote the inferred signature to " << path
              << "; keep it (rename inputs or outputs there if you like), it is "
                 "checked against the model at every start";
    return;
  }
  std::remove(tmp.c_str());
  LOG(WARNING) << "runtime: cannot write " << path << " (" << std::strerror(errno)
               << "); save the JSON above there to keep the signature";
}

}  // namespace metalserve::torch_internal
