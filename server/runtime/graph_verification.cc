// Graph optimization, verified against the plain graph; see
// graph_verification.h.
#include "server/runtime/graph_verification.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include <ATen/CPUGeneratorImpl.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"
#include "common/status_macros.h"

namespace metalserve::torch_internal {
int64_t ElapsedMs(Clock* clock, absl::Time since) {
  return absl::ToInt64Milliseconds(clock->TimeNow() - since);
}

namespace {

// max |a - ref| / max |ref|.
double Relative(const at::Tensor& a, const at::Tensor& ref) {
  const double scale = std::max(ref.abs().max().item<double>(), 1e-12);
  return (a - ref).abs().max().item<double>() / scale;
}

}  // namespace

absl::StatusOr<Level> ParseLevel(const std::string& optimize, const TorchDevice& device) {
  if (optimize == "none") return Level::kNone;
  if (optimize == "freeze") return Level::kFreeze;
  if (optimize == "full") return Level::kFull;
  if (optimize == "auto") return device.device().is_mps() ? Level::kFreeze : Level::kFull;
  return absl::InvalidArgumentError(absl::StrCat(
      "optimize '", optimize, "' is not one of none, freeze, full, auto"));
}

std::vector<at::Tensor> ProbeInputs(const ForwardPath& path, int64_t batch, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < path.inputs().size(); ++i) {
    std::vector<int64_t> shape = path.inputs()[i].shape;
    shape[0] = batch;
    for (int64_t& d : shape) d = std::max<int64_t>(d, 1);
    const at::ScalarType t = path.input_types()[i];
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

absl::StatusOr<VerifiedGraph> GraphVerifier::Optimize(torch::jit::Module& plain32, Level level,
                                                      at::ScalarType compute) {
  std::vector<std::string> reasons;
  torch::jit::Module plain = plain32;
  if (compute != at::kFloat) {
    plain = plain32.clone();
    plain.to(compute);
    RETURN_IF_ERROR(ComparePrecision(plain32, plain, compute, &reasons));
  }
#ifdef METALSERVE_TORCH_CUDA
  if (level == Level::kFull && path_.device().device().is_cuda() && options_.cudnn_benchmark) {
    at::globalContext().setBenchmarkCuDNN(true);
  }
#endif
  int chosen = static_cast<int>(level);
  std::optional<torch::jit::Module> candidate;
  for (; chosen > 0; --chosen) {
    candidate = TryLevel(plain, static_cast<Level>(chosen), compute, &reasons);
    if (candidate.has_value()) break;
  }
  if (chosen == 0) {
    candidate = plain;
    if (level == Level::kNone) reasons.push_back("none requested");
    LOG(INFO) << "runtime: serving the plain graph (optimization none)";
  }
  return VerifiedGraph{*std::move(candidate), kLevelNames[chosen], absl::StrJoin(reasons, "; "),
                       optimize_time_, verify_time_};
}

absl::StatusOr<VerifiedGraph> GraphVerifier::Rebuild(torch::jit::Module& plain32, Level level,
                                                     at::ScalarType compute,
                                                     std::string reason) {
  const absl::Time start = clock_->TimeNow();
  torch::jit::Module m = plain32;
  const char* name = kLevelNames[static_cast<int>(level)];
  try {
    if (compute != at::kFloat) {
      m = plain32.clone();
      m.to(compute);
    }
#ifdef METALSERVE_TORCH_CUDA
    if (level == Level::kFull && path_.device().device().is_cuda() && options_.cudnn_benchmark) {
      at::globalContext().setBenchmarkCuDNN(true);
    }
#endif
    if (level != Level::kNone) m = torch::jit::freeze(m);
    if (level == Level::kFull) m = torch::jit::optimize_for_inference(m);
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat(name, " failed to build: ", ModelMessage(e.what())));
  }
  const absl::Duration took = clock_->TimeNow() - start;
  LOG(INFO) << "runtime: built " << name << " in " << absl::ToInt64Milliseconds(took)
            << " ms; verification skipped, its result cached: " << reason;
  return VerifiedGraph{std::move(m), name, std::move(reason), took, absl::ZeroDuration()};
}

absl::Status GraphVerifier::ComparePrecision(torch::jit::Module& plain32,
                                             torch::jit::Module& plain, at::ScalarType compute,
                                             std::vector<std::string>* reasons) {
  const absl::Time start = clock_->TimeNow();
  LOG(INFO) << "runtime: casting to " << options_.precision << " and comparing with fp32";
  double worst = 0;
  ASSIGN_OR_RETURN(std::string diff, Compare(plain32, at::kFloat, plain, compute,
                                             /*check_invariance=*/false, &worst));
  reasons->push_back(absl::StrFormat("%s vs fp32: max relative deviation %.3g%s",
                                     options_.precision, worst,
                                     diff.empty() ? "" : absl::StrCat(" (", diff, ")")));
  LOG(INFO) << "runtime: " << reasons->back() << " (" << ElapsedMs(clock_, start) << " ms)";
  verify_time_ += clock_->TimeNow() - start;
  return absl::OkStatus();
}

// Builds `level` from `plain` and verifies it; nullopt (with the reason
// appended) when it fails to build, to run, or to match.
std::optional<torch::jit::Module> GraphVerifier::TryLevel(torch::jit::Module& plain, Level level,
                                                          at::ScalarType compute,
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
  const std::string sizes = absl::StrJoin(options_.batch_sizes, ",");
  optimize_time_ += clock_->TimeNow() - start;
  LOG(INFO) << "runtime: built " << name << " in " << ElapsedMs(clock_, start)
            << " ms; verifying it against the plain model at batch sizes [" << sizes << "]";
  start = clock_->TimeNow();
  double worst = 0;
  absl::StatusOr<std::string> diff =
      Compare(plain, compute, *candidate, compute, options_.batch_invariance, &worst);
  verify_time_ += clock_->TimeNow() - start;
  if (diff.ok() && diff->empty()) {
    reasons->push_back(absl::StrFormat(
        "%s verified against plain at batch sizes [%s]: max relative deviation %.3g <= %.3g",
        name, sizes, worst, options_.tolerance));
    LOG(INFO) << "runtime: " << reasons->back() << " in " << ElapsedMs(clock_, start) << " ms";
    return candidate;
  }
  reasons->push_back(diff.ok() ? absl::StrCat(name, " rejected: ", *diff)
                               : absl::StrCat(name, " failed to run: ", diff.status().message()));
  LOG(WARNING) << "runtime: optimization " << reasons->back() << "; falling back";
  return std::nullopt;
}

absl::StatusOr<std::vector<at::Tensor>> GraphVerifier::Outputs(
    torch::jit::Module& m, const std::vector<at::Tensor>& in, at::ScalarType compute) const {
  ASSIGN_OR_RETURN(std::vector<at::Tensor> out,
                   path_.Forward(m, in, compute, ForwardPurpose::kVerify));
  for (at::Tensor& t : out) {
    if (at::isFloatingType(t.scalar_type())) t = t.to(at::kFloat);
  }
  return out;
}

absl::StatusOr<std::string> GraphVerifier::Compare(
    torch::jit::Module& reference, at::ScalarType reference_dtype,
    torch::jit::Module& candidate, at::ScalarType candidate_dtype,
    bool check_invariance, double* worst) const {
  // A low-precision graph cannot be held closer than its own rounding:
  // allow two units in the last place of the compared dtype (bf16 2^-7,
  // fp16 2^-10) when that is looser than the stated tolerance.
  double tol = options_.tolerance;
  if (reference_dtype == candidate_dtype && candidate_dtype == at::kBFloat16) {
    tol = std::max(tol, 2.0 * std::ldexp(1.0, -7));
  } else if (reference_dtype == candidate_dtype && candidate_dtype == at::kHalf) {
    tol = std::max(tol, 2.0 * std::ldexp(1.0, -10));
  }
  const CompareForward want = [&](const std::vector<at::Tensor>& in) {
    return Outputs(reference, in, reference_dtype);
  };
  const CompareForward got = [&](const std::vector<at::Tensor>& in) {
    return Outputs(candidate, in, candidate_dtype);
  };
  return CompareForwards(want, got, tol, check_invariance, worst);
}

absl::StatusOr<std::string> GraphVerifier::CompareForwards(const CompareForward& reference,
                                                           const CompareForward& candidate,
                                                           double tol, bool check_invariance,
                                                           double* worst) const {
  std::vector<std::string> problems;
  for (int64_t b : options_.batch_sizes) {
    const std::vector<at::Tensor> probe = ProbeInputs(path_, b, 1000 + b);
    ASSIGN_OR_RETURN(std::vector<at::Tensor> want, reference(probe));
    // Twice: the profiling executor may change the graph on the second run.
    ASSIGN_OR_RETURN(std::vector<at::Tensor> got, candidate(probe));
    ASSIGN_OR_RETURN(got, candidate(probe));
    if (got.size() != want.size()) {
      return absl::InternalError("reference and candidate differ in output count");
    }
    CompareOutputs(want, got, b, tol, worst, &problems);
    if (!check_invariance || b == 1) continue;
    RETURN_IF_ERROR(CompareRowsAlone(candidate, probe, got, b, tol, worst, &problems));
  }
  return absl::StrJoin(problems, ", ");
}

void GraphVerifier::CompareOutputs(const std::vector<at::Tensor>& want,
                                   const std::vector<at::Tensor>& got, int64_t b, double tol,
                                   double* worst, std::vector<std::string>* problems) const {
  for (size_t o = 0; o < want.size(); ++o) {
    if (!got[o].sizes().equals(want[o].sizes())) {
      problems->push_back(absl::StrCat("batch ", b, " output ", o, " shape differs"));
      continue;
    }
    const double r = Relative(got[o], want[o]);
    *worst = std::max(*worst, r);
    if (r > tol) {
      problems->push_back(absl::StrFormat(
          "batch %d output %d: max relative deviation %.3g > %.3g", b, o, r, tol));
    }
    if (want[o].dim() != 2 || want[o].size(1) <= 1) continue;
    // Arg-max must agree on rows whose top two are not within tolerance.
    const auto top = want[o].topk(2, 1);
    const double scale = std::max(want[o].abs().max().item<double>(), 1e-12);
    const at::Tensor clear =
        (std::get<0>(top).select(1, 0) - std::get<0>(top).select(1, 1)) > tol * scale;
    const at::Tensor differ = (want[o].argmax(1) != got[o].argmax(1)) & clear;
    const int64_t n = differ.sum().item<int64_t>();
    if (n > 0) {
      problems->push_back(
          absl::StrCat("batch ", b, " output ", o, ": arg-max differs on ", n, " of ", b, " rows"));
    }
  }
}

// A row's output must not depend on its position in the batch.
absl::Status GraphVerifier::CompareRowsAlone(const CompareForward& candidate,
                                             const std::vector<at::Tensor>& probe,
                                             const std::vector<at::Tensor>& got, int64_t b,
                                             double tol, double* worst,
                                             std::vector<std::string>* problems) const {
  std::vector<int64_t> rows = {0, 1, b / 2, b - 1};
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  for (int64_t row : rows) {
    std::vector<at::Tensor> alone;
    for (const at::Tensor& t : probe) alone.push_back(t.narrow(0, row, 1));
    ASSIGN_OR_RETURN(std::vector<at::Tensor> single, candidate(alone));
    for (size_t o = 0; o < single.size() && o < got.size(); ++o) {
      const at::Tensor in_batch = got[o].narrow(0, row, 1);
      if (!in_batch.sizes().equals(single[o].sizes())) continue;
      const double r = Relative(in_batch, single[o]);
      *worst = std::max(*worst, r);
      if (r > tol) {
        problems->push_back(absl::StrFormat(
            "row %d of batch %d differs from the same row alone by %.3g (output %d)", row, b,
            r, o));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace metalserve::torch_internal
