// The AotiRunner: TorchRunner serving an AOTInductor package (.pt2,
// aoti_package.h) instead of a TorchScript module. Same device thread,
// request path, forward path, warm-up and cache policy; what differs is the
// load:
//   1. the device: the one asked for, or with "auto" the one the package's
//      name says (<model>.<device>[.<variant>].pt2, as export.py writes it),
//      else the first available; a package compiled for another device type
//      is FAILED_PRECONDITION;
//   2. the signature: the sidecar is required (<model>.json beside the
//      package, text before the file name's first '.'), checked against a
//      probe forward at batch 2 (output count, rank, non-batch dims);
//   3. verification at every warm-up batch size, with the graph verifier's
//      comparison (graph_verification.h): against the TorchScript model
//      (RuntimeOptions::reference_model_path, else <model>.pt beside the
//      package), else the eager outputs export.py recorded
//      (<package>.expected), else batch invariance alone (logged as such). An fp32
//      package that deviates beyond verify_tolerance is refused
//      (INVALID_ARGUMENT); a reduced-precision one has its deviation
//      reported, as TorchScript fp16/bf16 is;
//   4. warm-up at every warm-up batch size.
// Batches below the package's smallest exported batch are padded with zero
// rows (cut from the outputs); batches above its largest are refused.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <torch/version.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "glog/logging.h"
#include "common/status_macros.h"
#include "server/runtime/aoti_package.h"
#include "server/runtime/torch_runner_internal.h"

namespace metalserve::torch_internal {
namespace {

namespace fs = std::filesystem;

// "dir/resnet50.cuda.fp16.pt2" -> "dir/resnet50" (the model's stem).
std::string ModelStem(const std::string& path) {
  const fs::path p(path);
  const std::string name = p.filename().string();
  return (p.parent_path() / name.substr(0, name.find('.'))).string();
}

// The device named in the package's file name, or "first_available".
std::string DeviceFromName(const std::string& path) {
  const std::vector<std::string> parts =
      absl::StrSplit(fs::path(path).filename().string(), '.');
  for (size_t i = 1; i + 1 < parts.size(); ++i) {
    if (parts[i] == "cuda" || parts[i] == "cpu" || parts[i] == "mps") return parts[i];
  }
  return "first_available";
}

void ReportPhase(const RuntimeOptions& options, const std::string& phase, absl::Duration took) {
  if (options.on_load_phase) options.on_load_phase(phase, took);
}

std::vector<at::Tensor> AsFloat(std::vector<at::Tensor> out) {
  for (at::Tensor& t : out) {
    if (at::isFloatingType(t.scalar_type())) t = t.to(at::kFloat);
  }
  return out;
}

struct Expected {
  std::vector<at::Tensor> inputs;
  std::vector<at::Tensor> outputs;
};

// The TorchScript model to verify against: the one given, else <model>.pt
// beside the package; "" when there is none.
std::string ReferenceModel(const RuntimeOptions& options) {
  if (!options.reference_model_path.empty()) return options.reference_model_path;
  const std::string beside = ModelStem(options.model_path) + ".pt";
  return fs::exists(beside) ? beside : "";
}

// The items of a tuple or a list (what torch.save wrote).
std::vector<c10::IValue> Items(const c10::IValue& v) {
  if (v.isTuple()) return v.toTupleRef().elements().vec();
  return v.toListRef().vec();
}

// <package>.expected: a torch.save'd tuple of (inputs, outputs) (export.py).
absl::StatusOr<std::vector<Expected>> ReadExpected(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(file)),
                                std::istreambuf_iterator<char>());
  try {
    std::vector<Expected> records;
    for (const c10::IValue& record : Items(torch::jit::pickle_load(bytes))) {
      const std::vector<c10::IValue> pair = Items(record);
      Expected e;
      for (const c10::IValue& t : Items(pair.at(0))) e.inputs.push_back(t.toTensor());
      for (const c10::IValue& t : Items(pair.at(1))) e.outputs.push_back(t.toTensor());
      records.push_back(std::move(e));
    }
    return records;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read the recorded outputs ", path, ": ", ModelMessage(e.what())));
  }
}

PackageLoader& TestLoader() {
  static PackageLoader* loader = new PackageLoader();
  return *loader;
}

}  // namespace

void SetPackageLoaderForTest(PackageLoader loader) { TestLoader() = std::move(loader); }

bool IsPackagePath(absl::string_view path) { return absl::EndsWith(path, ".pt2"); }

absl::Status PackageUnsupported(absl::string_view path) {
  return absl::FailedPreconditionError(absl::StrCat(
      "model ", path, " is an AOTInductor package (.pt2), but this server's runtime was "
      "built against LibTorch ", TORCH_VERSION, ", which lacks AOTInductor "
      "(torch/csrc/inductor/aoti_package, LibTorch 2.6+): serve the TorchScript export (.pt) "
      "or rebuild against LibTorch 2.6 or newer (docs/aoti.md)"));
}

absl::StatusOr<std::unique_ptr<Runner>> TorchRunner::CreateFromPackage(
    const RuntimeOptions& options) {
  if (!HaveAotInductor() && !TestLoader()) return PackageUnsupported(options.model_path);
  if (!fs::exists(options.model_path)) {
    return absl::NotFoundError(absl::StrCat("cannot read model file ", options.model_path));
  }
  Clock* clock = options.clock != nullptr ? options.clock : Clock::RealClock();
  const absl::Time start = clock->TimeNow();
  RuntimeOptions o = options;
  if (o.device == "auto") o.device = DeviceFromName(o.model_path);
  // Layout and precision are compiled into the package (export.py
  // --channels_last, --precision); inputs go in as the signature says.
  LOG_IF(WARNING, o.channels_last) << "runtime: channels_last ignored for a package: its "
                                      "layout was fixed at export";
  o.channels_last = false;
  auto runner = std::unique_ptr<TorchRunner>(new TorchRunner());
  runner->clock_ = clock;
  RETURN_IF_ERROR(runner->SetUp(o));
  const int64_t reserved_before = runner->ReservedBytes();
  const std::string sig_path = o.signature_path.empty() ? ModelStem(o.model_path) + ".json"
                                                        : o.signature_path;
  absl::StatusOr<ModelSignature> declared = o.signature_codec.read(sig_path);
  if (!declared.ok()) {
    return absl::Status(declared.status().code(),
                        absl::StrCat("an AOTInductor package needs its signature sidecar ",
                                     sig_path, " (models/export.py writes it): ",
                                     declared.status().message()));
  }
  absl::Status status;
  RETURN_IF_ERROR(runner->OnDevice([&] { status = runner->LoadPackageModel(o, *declared); }));
  RETURN_IF_ERROR(status);
  runner->info_.load_time = clock->TimeNow() - start;
  const absl::Time warm = clock->TimeNow();
  RETURN_IF_ERROR(runner->OnDevice([&] { status = runner->WarmUp(o.warmup_batch_sizes); }));
  RETURN_IF_ERROR(status);
  runner->info_.warmup_time = clock->TimeNow() - warm;
  ReportPhase(o, "warmup", runner->info_.warmup_time);
  runner->RecordLoadMemory(reserved_before);
  runner->LogReady();
  return std::unique_ptr<Runner>(std::move(runner));
}

// On the device thread: read, signature, verify.
absl::Status TorchRunner::LoadPackageModel(const RuntimeOptions& options,
                                           const ModelSignature& declared) {
  absl::Time start = clock_->TimeNow();
  LOG(INFO) << "runtime: loading AOTInductor package " << options.model_path << " onto "
            << info_.device;
  ASSIGN_OR_RETURN(CompiledPackage package,
                   TestLoader() ? TestLoader()(options.model_path, device_->device())
                                : LoadPackage(options.model_path, device_->device()));
  package_ = std::move(package);
  LOG(INFO) << "runtime: loaded " << options.model_path << " in "
            << absl::ToInt64Milliseconds(clock_->TimeNow() - start) << " ms";
  ReportPhase(options, "read", clock_->TimeNow() - start);
  auto precision = package_->metadata.find(kPackagePrecision);
  info_.precision = precision != package_->metadata.end() ? precision->second : "fp32";
  LOG_IF(WARNING, options.precision != "fp32" && options.precision != info_.precision)
      << "runtime: precision " << options.precision << " ignored: the package was compiled in "
      << info_.precision;
  for (int64_t b : options.warmup_batch_sizes) {
    if (package_->max_batch > 0 && b > package_->max_batch) {
      return absl::InvalidArgumentError(absl::StrCat(
          "warm-up batch size ", b, " exceeds the largest batch of ", options.model_path, " (",
          package_->max_batch, "); export it with a larger --max_batch_size"));
    }
  }
  start = clock_->TimeNow();
  RETURN_IF_ERROR(CheckPackageOutputs(declared));
  ReportPhase(options, "signature", clock_->TimeNow() - start);
  return VerifyPackage(options);
}

// Binds the declared inputs (in order: a package takes them positionally)
// and checks the declared outputs against a probe forward at batch 2.
absl::Status TorchRunner::CheckPackageOutputs(const ModelSignature& declared) {
  constexpr int64_t kProbeBatch = 2;
  RETURN_IF_ERROR(SetInputs(declared.inputs));
  compute_dtype_ = at::kFloat;
  for (at::ScalarType t : path_->input_types()) {
    if (at::isFloatingType(t)) {
      compute_dtype_ = t;  // the package casts, if at all, inside itself
      break;
    }
  }
  path_->SetOutputs(declared.outputs);
  info_.outputs = declared.outputs;
  info_.name = declared.name;
  info_.version = declared.version.empty() ? "1" : declared.version;
  absl::StatusOr<std::vector<at::Tensor>> out =
      ForwardPackage(ProbeInputs(*path_, kProbeBatch, 99), ForwardPurpose::kProbe);
  if (!out.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inputs: a probe forward at batch ", kProbeBatch, " fails: ", out.status().message()));
  }
  for (size_t o = 0; o < out->size(); ++o) {
    const TensorSpec& spec = declared.outputs[o];
    const at::Tensor& t = (*out)[o];
    if (t.dim() != static_cast<int64_t>(spec.shape.size())) {
      return absl::InvalidArgumentError(absl::StrCat("outputs[", o, "].shape: declared ",
                                                     ShapeToString(spec.shape), ", package gives rank ", t.dim()));
    }
    for (size_t d = 1; d < spec.shape.size(); ++d) {
      if (spec.shape[d] >= 0 && spec.shape[d] != t.size(d)) {
        return absl::InvalidArgumentError(absl::StrCat("outputs[", o, "].shape[", d,
                                                       "]: declared ", spec.shape[d],
                                                       ", package gives ", t.size(d)));
      }
    }
  }
  return absl::OkStatus();
}

// Verifies the package against its TorchScript model, else its recorded
// outputs, and its batch invariance at every warm-up batch size; see the
// file comment.
absl::Status TorchRunner::VerifyPackage(const RuntimeOptions& options) {
  const absl::Time start = clock_->TimeNow();
  const VerifyOptions verify = WarmupVerifyOptions(options, info_.precision);
  const std::string sizes = absl::StrJoin(verify.batch_sizes, ",");
  GraphVerifier verifier(*path_, verify, clock_);
  const CompareForward package = [this](const std::vector<at::Tensor>& in)
      -> absl::StatusOr<std::vector<at::Tensor>> {
    ASSIGN_OR_RETURN(std::vector<at::Tensor> out, ForwardPackage(in, ForwardPurpose::kVerify));
    return AsFloat(std::move(out));
  };
  const std::string reference = ReferenceModel(options);
  std::optional<torch::jit::Module> module;
  if (!reference.empty()) {
    ASSIGN_OR_RETURN(module, LoadModule(reference));
  }
  const CompareForward torchscript = [&](const std::vector<at::Tensor>& in)
      -> absl::StatusOr<std::vector<at::Tensor>> {
    ASSIGN_OR_RETURN(std::vector<at::Tensor> out,
                     path_->Forward(*module, in, at::kFloat, ForwardPurpose::kVerify));
    return AsFloat(std::move(out));
  };
  const bool exact = info_.precision == "fp32";
  double worst = 0;
  ASSIGN_OR_RETURN(std::string diff,
                   verifier.CompareForwards(module ? torchscript : package, package,
                                            options.verify_tolerance,
                                            options.verify_batch_invariance, &worst));
  const std::string expected = options.model_path + ".expected";
  const bool recorded = !module && fs::exists(expected);
  if (recorded) {
    ASSIGN_OR_RETURN(const std::string more,
                     CompareWithExpected(expected, options.verify_tolerance, &worst));
    if (!more.empty()) diff = diff.empty() ? more : absl::StrCat(diff, ", ", more);
  }
  const std::string against =
      module     ? absl::StrCat("its TorchScript model ", reference)
      : recorded ? absl::StrCat("the eager outputs recorded at export (", expected, ")")
                 : "itself row by row (no TorchScript model or recorded outputs beside it: "
                   "batch invariance only)";
  info_.optimization = "aoti";
  info_.optimization_reason = absl::StrFormat(
      "AOTInductor package (%s) verified against %s at batch sizes [%s]: max relative "
      "deviation %.3g%s", info_.precision, against, sizes, worst,
      diff.empty() ? "" : absl::StrCat(" (", diff, ")"));
  ReportPhase(options, "verify", clock_->TimeNow() - start);
  LOG(INFO) << "runtime: " << info_.optimization_reason << " in "
            << absl::ToInt64Milliseconds(clock_->TimeNow() - start) << " ms";
  if (!diff.empty() && exact) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AOTInductor package ", options.model_path, " does not match ", against, ": ", diff,
        " (tolerance ", options.verify_tolerance, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> TorchRunner::CompareWithExpected(const std::string& path,
                                                             double tolerance, double* worst) {
  ASSIGN_OR_RETURN(const std::vector<Expected> records, ReadExpected(path));
  std::vector<std::string> problems;
  for (const Expected& e : records) {
    ASSIGN_OR_RETURN(std::vector<at::Tensor> got, ForwardPackage(e.inputs, ForwardPurpose::kVerify));
    got = AsFloat(std::move(got));
    const std::vector<at::Tensor> want = AsFloat(e.outputs);
    if (got.size() != want.size()) return absl::InternalError("recorded output count differs");
    const int64_t rows = e.inputs.empty() ? 0 : e.inputs[0].size(0);
    for (size_t o = 0; o < want.size(); ++o) {
      const double scale = std::max(want[o].abs().max().item<double>(), 1e-12);
      const double r = got[o].sizes().equals(want[o].sizes())
                           ? (got[o] - want[o]).abs().max().item<double>() / scale
                           : 1e9;
      *worst = std::max(*worst, r);
      if (r > tolerance) {
        problems.push_back(absl::StrFormat(
            "recorded batch %d output %d: max relative deviation %.3g > %.3g", rows, o, r,
            tolerance));
      }
    }
  }
  return absl::StrJoin(problems, ", ");
}

absl::StatusOr<std::vector<at::Tensor>> TorchRunner::ForwardPackage(
    const std::vector<at::Tensor>& host, ForwardPurpose purpose) {
  const int64_t rows = host.empty() ? 0 : host[0].size(0);
  if (package_->max_batch > 0 && rows > package_->max_batch) {
    return absl::InvalidArgumentError(absl::StrCat("a batch of ", rows,
                                                   " rows exceeds the package's largest batch ",
                                                   package_->max_batch));
  }
  if (rows >= package_->min_batch) {
    return path_->Forward(package_->forward, host, compute_dtype_, purpose);
  }
  std::vector<at::Tensor> padded;
  for (const at::Tensor& h : host) {
    std::vector<int64_t> shape(h.sizes().begin(), h.sizes().end());
    shape[0] = package_->min_batch - rows;
    padded.push_back(at::cat({h, at::zeros(shape, h.options().pinned_memory(false))}));
  }
  ASSIGN_OR_RETURN(std::vector<at::Tensor> out,
                   path_->Forward(package_->forward, padded, compute_dtype_, purpose));
  for (at::Tensor& t : out) t = t.narrow(0, 0, rows).contiguous();
  return out;
}

}  // namespace metalserve::torch_internal
