// TorchRunner::Create and the load phases, each logged as it starts and with
// its duration: load, signature binding and check (signature_binding.h),
// precision, optimization with verification, warm-up. See torch_runner.h.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/script.h>
#include <torch/version.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"
#include "server/common/status_macros.h"
#include "server/runtime/model_signature.h"
#include "server/runtime/signature_binding.h"
#include "server/runtime/torch_runner_internal.h"

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

int64_t ElapsedMs(Clock* clock, absl::Time since) {
  return absl::ToInt64Milliseconds(clock->TimeNow() - since);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Runner>> TorchRunner::Create(
    const RuntimeOptions& options) {
  Clock* clock = options.clock != nullptr ? options.clock : Clock::RealClock();
  const absl::Time start = clock->TimeNow();
  RETURN_IF_ERROR(ValidateOptions(options));
  auto runner = std::unique_ptr<TorchRunner>(new TorchRunner());
  runner->clock_ = clock;
  ASSIGN_OR_RETURN(runner->compute_dtype_, ParsePrecision(options.precision));
  ASSIGN_OR_RETURN(runner->device_, ChooseDevice(options.device));
  ASSIGN_OR_RETURN(const Level level, ParseLevel(options.optimize, runner->device_));
  runner->channels_last_ = options.channels_last;

  const std::string sig_path = options.signature_path.empty()
                                   ? DefaultSignaturePath(options.model_path)
                                   : options.signature_path;
  ASSIGN_OR_RETURN(const std::optional<ModelSignature> declared,
                   ReadDeclaredSignature(options, sig_path));
  ModelInfo& info = runner->info_;
  info.device = runner->device_.name;
  info.torch_version = TORCH_VERSION;
  info.precision = options.precision;

  const char* fallback = std::getenv("PYTORCH_ENABLE_MPS_FALLBACK");
  LOG(INFO) << "runtime: device " << info.device << " (requested "
            << options.device << "), LibTorch " << TORCH_VERSION
            << ", PYTORCH_ENABLE_MPS_FALLBACK="
            << (fallback != nullptr ? fallback : "<unset>");
  if (options.threads > 0) at::set_num_threads(options.threads);
  LOG(INFO) << "runtime: intra-op threads " << at::get_num_threads();

  // One thread owns all device work, load and warm-up included, on every
  // device. On MPS two threads doing MPS work can crash inside Metal. On
  // CUDA, cuDNN's autotuner cache and handles are per thread: a forward from
  // a thread that did not warm up re-tunes every convolution for every batch
  // size (measured on an H200: ResNet-50 batches of 32 took 470 ms instead of
  // 16 ms from the executor threads). On CPU, a forward from another thread
  // than the one that loaded and warmed up ran 1.4x slower (mobilenet_v3_small,
  // LibTorch 1.13: 15.2 ms against 10.9 ms at batch 1; 11.3 ms on the owner
  // thread).
  runner->device_thread_ = std::make_unique<DeviceThread>();
  // OpenMP's thread count is per calling thread: set it where forwards run.
  if (options.threads > 0) {
    runner->OnDevice([&] { at::set_num_threads(options.threads); });
  }
  ASSIGN_OR_RETURN(runner->memory_ops_,
                   MemoryOpsFor(runner->device_, runner->device_thread_.get()));
  ASSIGN_OR_RETURN(runner->cache_policy_,
                   CachePolicy::Create(CacheOptions(options, runner->device_.name),
                                       runner->memory_ops_.get()));

  absl::Status status;
  runner->OnDevice([&] { status = runner->Load(options, level, declared, sig_path); });
  RETURN_IF_ERROR(status);
  info.load_time = clock->TimeNow() - start;
  const absl::Time warm = clock->TimeNow();
  runner->OnDevice([&] { status = runner->WarmUp(options.warmup_batch_sizes); });
  RETURN_IF_ERROR(status);
  info.warmup_time = clock->TimeNow() - warm;
  LOG(INFO) << "runtime: model " << info.name << " ready on " << info.device
            << ", precision " << info.precision << ", optimization "
            << info.optimization << " (" << info.optimization_reason
            << "), load_ms=" << absl::ToInt64Milliseconds(info.load_time)
            << " warmup_ms=" << absl::ToInt64Milliseconds(info.warmup_time);
  return std::unique_ptr<Runner>(std::move(runner));
}

// Warm-up: twice per size, because TorchScript's profiling executor
// optimizes the graph on the runs after the first.
absl::Status TorchRunner::WarmUp(const std::vector<int64_t>& batch_sizes) {
  LOG(INFO) << "runtime: warming up batch sizes [" << absl::StrJoin(batch_sizes, ",")
            << "], 2 forwards each";
  for (int64_t b : batch_sizes) {
    const absl::Time start = clock_->TimeNow();
    for (int i = 0; i < 2; ++i) {
      auto probe = Probe(b, 7);
      const absl::Time forward_start = clock_->TimeNow();
      const auto out = Forward(*module_, probe, compute_dtype_);
      if (i == 1) info_.warmup_timings.push_back({b, clock_->TimeNow() - forward_start});
      if (!out.ok()) {
        return absl::Status(out.status().code(), absl::StrCat("warm-up at batch ", b, ": ",
                                                              out.status().message()));
      }
    }
    LOG(INFO) << "runtime: warmed up batch size " << b << " in " << ElapsedMs(clock_, start)
              << " ms";
  }
  return absl::OkStatus();
}

absl::StatusOr<torch::jit::Module> TorchRunner::LoadModule(const std::string& path) {
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot read model file ", path));
  const absl::Time start = clock_->TimeNow();
  LOG(INFO) << "runtime: loading model " << path << " ("
            << absl::StrFormat("%.1f", static_cast<double>(file.tellg()) / 1e6) << " MB) onto "
            << device_.name;
  try {
    torch::jit::Module m = torch::jit::load(path, torch::kCPU);
    m.eval();
    m.to(device_.device);
    LOG(INFO) << "runtime: loaded " << path << " in " << ElapsedMs(clock_, start) << " ms";
    return m;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("cannot load TorchScript model ", path,
                                                   ": ", ModelMessage(e.what())));
  }
}

// Probe inputs of `batch` rows through `m` in fp32, the result as the model
// gives it. A model that refuses them is INVALID_ARGUMENT naming the inputs.
absl::StatusOr<c10::IValue> TorchRunner::ProbeForward(torch::jit::Module& m, int64_t batch) {
  std::vector<c10::IValue> args;
  for (const at::Tensor& t : Probe(batch, 99)) args.emplace_back(t.to(device_.device));
  try {
    c10::InferenceMode guard;
    return m.forward(std::move(args));
  } catch (const std::exception& e) {
    std::vector<std::string> in;
    for (const TensorSpec& s : info_.inputs) {
      in.push_back(absl::StrCat(s.name, " ", DTypeName(s.dtype), " ", ShapeToString(s.shape)));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "inputs: a probe forward at batch ", batch, " with the signature's inputs (",
        absl::StrJoin(in, "; "), ") fails: ", ModelMessage(e.what())));
  }
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
  info_.inputs = sig.inputs;
  input_types_.clear();
  for (const TensorSpec& spec : sig.inputs) {
    ASSIGN_OR_RETURN(at::ScalarType t, ToScalarType(spec.dtype));
    input_types_.push_back(t);
  }
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

// Loads on CPU, moves to the device, binds the signature, optimizes and
// verifies.
absl::Status TorchRunner::Load(const RuntimeOptions& options, Level level,
                               const std::optional<ModelSignature>& declared,
                               const std::string& signature_path) {
  ASSIGN_OR_RETURN(torch::jit::Module plain32, LoadModule(options.model_path));
  RETURN_IF_ERROR(BindSignature(plain32, options, declared, signature_path));
  return Optimize(plain32, options, level);
}

// Builds `level` from `plain` and verifies it; nullopt (with the reason
// appended) when it fails to build, to run, or to match.
std::optional<torch::jit::Module> TorchRunner::TryLevel(torch::jit::Module& plain,
                                                        const RuntimeOptions& options,
                                                        Level level,
                                                        std::vector<std::string>* reasons) {
  const char* name = kLevelNames[static_cast<int>(level)];
  absl::Time start = clock_->TimeNow();
  LOG(INFO) << "runtime: optimizing at level " << name
            << (level == Level::kFull ? " (freeze + optimize_for_inference)" : " (freeze)");
  std::optional<torch::jit::Module> candidate;
  try {
    torch::jit::Module m = torch::jit::freeze(plain);
    if (level == Level::kFull) m = torch::jit::optimize_for_inference(m);
    candidate = std::move(m);
  } catch (const std::exception& e) {
    reasons->push_back(absl::StrCat(name, " failed to build: ", ModelMessage(e.what())));
    LOG(WARNING) << "runtime: " << reasons->back() << "; falling back";
    return std::nullopt;
  }
  LOG(INFO) << "runtime: built " << name << " in " << ElapsedMs(clock_, start)
            << " ms; verifying it against the plain model at batch sizes ["
            << absl::StrJoin(options.warmup_batch_sizes, ",") << "]";
  start = clock_->TimeNow();
  double worst = 0;
  absl::StatusOr<std::string> diff = Compare(plain, compute_dtype_, *candidate, compute_dtype_,
                                             options, options.verify_batch_invariance, &worst);
  if (diff.ok() && diff->empty()) {
    reasons->push_back(absl::StrFormat(
        "%s verified against plain at batch sizes [%s]: max relative deviation %.3g <= %.3g",
        name, absl::StrJoin(options.warmup_batch_sizes, ","), worst, options.verify_tolerance));
    LOG(INFO) << "runtime: " << reasons->back() << " in " << ElapsedMs(clock_, start) << " ms";
    return candidate;
  }
  reasons->push_back(diff.ok() ? absl::StrCat(name, " rejected: ", *diff)
                               : absl::StrCat(name, " failed to run: ", diff.status().message()));
  LOG(WARNING) << "runtime: optimization " << reasons->back() << "; falling back";
  return std::nullopt;
}

absl::Status TorchRunner::Optimize(torch::jit::Module& plain32, const RuntimeOptions& options,
                                   Level level) {
  std::vector<std::string> reasons;
  torch::jit::Module plain = plain32;
  if (compute_dtype_ != at::kFloat) {
    const absl::Time start = clock_->TimeNow();
    LOG(INFO) << "runtime: casting to " << options.precision << " and comparing with fp32";
    plain = plain32.clone();
    plain.to(compute_dtype_);
    double worst = 0;
    ASSIGN_OR_RETURN(std::string diff,
                     Compare(plain32, at::kFloat, plain, compute_dtype_, options,
                             /*check_invariance=*/false, &worst));
    reasons.push_back(absl::StrFormat("%s vs fp32: max relative deviation %.3g%s",
                                      options.precision, worst,
                                      diff.empty() ? "" : absl::StrCat(" (", diff, ")")));
    LOG(INFO) << "runtime: " << reasons.back() << " (" << ElapsedMs(clock_, start) << " ms)";
  }
#ifdef METALSERVE_TORCH_CUDA
  if (level == Level::kFull && device_.device.is_cuda()) {
    at::globalContext().setBenchmarkCuDNN(true);
  }
#endif
  int chosen = static_cast<int>(level);
  std::optional<torch::jit::Module> candidate;
  for (; chosen > 0 && !candidate.has_value(); --chosen) {
    candidate = TryLevel(plain, options, static_cast<Level>(chosen), &reasons);
    if (candidate.has_value()) break;
  }
  if (chosen == 0) {
    candidate = plain;
    if (level == Level::kNone) reasons.push_back("none requested");
    LOG(INFO) << "runtime: serving the plain graph (optimization none)";
  }
  info_.optimization = kLevelNames[chosen];
  info_.optimization_reason = absl::StrJoin(reasons, "; ");
  module_ = std::move(candidate);
  return absl::OkStatus();
}

// Seeded probe inputs of `batch` rows; every row differs from the others.
std::vector<at::Tensor> TorchRunner::Probe(int64_t batch, uint64_t seed) const {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < info_.inputs.size(); ++i) {
    std::vector<int64_t> shape = info_.inputs[i].shape;
    shape[0] = batch;
    for (int64_t& d : shape) d = std::max<int64_t>(d, 1);
    const at::ScalarType t = input_types_[i];
    at::Tensor x;
    if (at::isFloatingType(t)) {
      x = at::rand(shape, gen, at::TensorOptions().dtype(at::kFloat)).to(t);
    } else if (t == at::kBool) {
      x = at::randint(0, 2, shape, gen, at::TensorOptions().dtype(at::kLong)).to(t);
    } else {
      x = at::randint(0, 10, shape, gen, at::TensorOptions().dtype(at::kLong)).to(t);
    }
    out.push_back(x);
  }
  return out;
}

absl::StatusOr<std::vector<at::Tensor>> TorchRunner::Forward(
    torch::jit::Module& m, const std::vector<at::Tensor>& in,
    at::ScalarType compute) const {
  try {
    c10::InferenceMode guard;
    std::vector<c10::IValue> args;
    for (const at::Tensor& t : in) {
      at::Tensor x = t.to(device_.device);
      if (at::isFloatingType(x.scalar_type())) x = x.to(compute);
      if (channels_last_ && x.dim() == 4) x = x.contiguous(at::MemoryFormat::ChannelsLast);
      args.emplace_back(std::move(x));
    }
    c10::IValue out = m.forward(std::move(args));
    absl::StatusOr<std::vector<at::Tensor>> tensors = OutputTensors(out, info_.outputs);
    if (!tensors.ok()) return absl::InternalError(tensors.status().message());
    std::vector<at::Tensor> result = *std::move(tensors);
    for (at::Tensor& t : result) {
      t = t.to(at::kCPU);
      if (at::isFloatingType(t.scalar_type())) t = t.to(at::kFloat);
    }
    return result;
  } catch (const std::exception& e) {
    return absl::InternalError(ModelMessage(e.what()));
  }
}

// Compares `candidate` with `reference` on seeded probes at every warm-up
// batch size. Returns "" when within tolerance, else what differed; *worst is
// the largest relative deviation seen.
absl::StatusOr<std::string> TorchRunner::Compare(
    torch::jit::Module& reference, at::ScalarType reference_dtype,
    torch::jit::Module& candidate, at::ScalarType candidate_dtype,
    const RuntimeOptions& options, bool check_invariance, double* worst) const {
  // A low-precision graph cannot be held closer than its own rounding:
  // allow two units in the last place of the compared dtype (bf16 2^-7,
  // fp16 2^-10) when that is looser than the stated tolerance.
  double tol = options.verify_tolerance;
  if (reference_dtype == candidate_dtype && candidate_dtype == at::kBFloat16) {
    tol = std::max(tol, 2.0 * std::ldexp(1.0, -7));
  } else if (reference_dtype == candidate_dtype && candidate_dtype == at::kHalf) {
    tol = std::max(tol, 2.0 * std::ldexp(1.0, -10));
  }
  std::vector<std::string> problems;
  auto rel = [](const at::Tensor& a, const at::Tensor& ref) {
    const double scale = std::max(ref.abs().max().item<double>(), 1e-12);
    return (a - ref).abs().max().item<double>() / scale;
  };
  for (int64_t b : options.warmup_batch_sizes) {
    const std::vector<at::Tensor> probe = Probe(b, 1000 + b);
    ASSIGN_OR_RETURN(std::vector<at::Tensor> want, Forward(reference, probe, reference_dtype));
    // Twice: the profiling executor may change the graph on the second run.
    ASSIGN_OR_RETURN(std::vector<at::Tensor> got, Forward(candidate, probe, candidate_dtype));
    ASSIGN_OR_RETURN(got, Forward(candidate, probe, candidate_dtype));
    if (got.size() != want.size()) {
      return absl::InternalError("plain and optimized models differ in output count");
    }
    for (size_t o = 0; o < want.size(); ++o) {
      if (!got[o].sizes().equals(want[o].sizes())) {
        problems.push_back(absl::StrCat("batch ", b, " output ", o, " shape differs"));
        continue;
      }
      const double r = rel(got[o], want[o]);
      *worst = std::max(*worst, r);
      if (r > tol) {
        problems.push_back(absl::StrFormat(
            "batch %d output %d: max relative deviation %.3g > %.3g", b, o, r, tol));
      }
      if (want[o].dim() == 2 && want[o].size(1) > 1) {
        // Arg-max must agree on rows whose top two are not within tolerance.
        const auto top = want[o].topk(2, 1);
        const double scale = std::max(want[o].abs().max().item<double>(), 1e-12);
        const at::Tensor clear =
            (std::get<0>(top).select(1, 0) - std::get<0>(top).select(1, 1)) > tol * scale;
        const at::Tensor differ = (want[o].argmax(1) != got[o].argmax(1)) & clear;
        const int64_t n = differ.sum().item<int64_t>();
        if (n > 0) {
          problems.push_back(absl::StrCat("batch ", b, " output ", o, ": arg-max differs on ",
                                          n, " of ", b, " rows"));
        }
      }
    }
    if (!check_invariance || b == 1) continue;
    // A row's output must not depend on its position in the batch.
    std::vector<int64_t> rows = {0, 1, b / 2, b - 1};
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    for (int64_t row : rows) {
      std::vector<at::Tensor> alone;
      for (const at::Tensor& t : probe) alone.push_back(t.narrow(0, row, 1));
      ASSIGN_OR_RETURN(std::vector<at::Tensor> single, Forward(candidate, alone, candidate_dtype));
      for (size_t o = 0; o < single.size() && o < got.size(); ++o) {
        const at::Tensor in_batch = got[o].narrow(0, row, 1);
        if (!in_batch.sizes().equals(single[o].sizes())) continue;
        const double r = rel(in_batch, single[o]);
        *worst = std::max(*worst, r);
        if (r > tol) {
          problems.push_back(absl::StrFormat(
              "row %d of batch %d differs from the same row alone by %.3g (output %d)",
              row, b, r, o));
        }
      }
    }
  }
  return absl::StrJoin(problems, ", ");
}

}  // namespace metalserve::torch_internal
