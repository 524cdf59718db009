// The one forward path (see forward_path.h) and the conversions it uses.
#include "server/runtime/forward_path.h"

#include <optional>
#include <utility>

#include <torch/version.h>
#ifdef METALSERVE_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "server/runtime/signature_binding.h"

namespace metalserve::torch_internal {
namespace {

bool IsOutOfMemory(const std::string& what) {
  return absl::StrContains(what, "out of memory") ||
         absl::StrContains(what, "Out of memory") ||
         absl::StrContains(what, "OutOfMemory");
}

// Runs `fn` as device work: on CUDA with this thread's pooled stream current
// (kept for the thread's life: the current stream is per thread), under
// InferenceMode, with LibTorch's exceptions turned into a Status.
template <typename T, typename Fn>
absl::StatusOr<T> AsDeviceWork(const TorchDevice& device, Fn fn) {
  try {
#ifdef METALSERVE_TORCH_CUDA
    std::optional<c10::cuda::CUDAStreamGuard> stream_guard;
    if (device.device().is_cuda()) {
      thread_local std::optional<c10::cuda::CUDAStream> stream;
      if (!stream.has_value() || stream->device_index() != device.device().index()) {
        stream = c10::cuda::getStreamFromPool(false, device.device().index());
      }
      stream_guard.emplace(*stream);
    }
#endif
    c10::InferenceMode guard;
    return fn();
  } catch (const c10::OutOfMemoryError& e) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "device ", device.name(), " out of memory: ", ModelMessage(e.what())));
  } catch (const std::exception& e) {
    const std::string what = e.what();
    if (IsOutOfMemory(what)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "device ", device.name(), " out of memory: ", ModelMessage(what)));
    }
    return absl::InternalError(ModelMessage(what));
  }
}

}  // namespace

absl::StatusOr<at::ScalarType> ToScalarType(DType d) {
  switch (d) {
    case DType::kFloat32: return at::kFloat;
    case DType::kFloat16: return at::kHalf;
    case DType::kBFloat16: return at::kBFloat16;
    case DType::kFloat64: return at::kDouble;
    case DType::kInt64: return at::kLong;
    case DType::kInt32: return at::kInt;
    case DType::kUInt8: return at::kByte;
    case DType::kInt8: return at::kChar;
    case DType::kBool: return at::kBool;
    case DType::kInvalid: break;
  }
  return absl::InvalidArgumentError(absl::StrCat("dtype ", DTypeName(d),
                                                 " has no torch equivalent"));
}

absl::StatusOr<at::ScalarType> ParsePrecision(const std::string& p) {
  if (p == "fp32") return at::kFloat;
  if (p == "fp16") return at::kHalf;
  if (p == "bf16") return at::kBFloat16;
  return absl::InvalidArgumentError(
      absl::StrCat("precision '", p, "' is not one of fp32, fp16, bf16"));
}

std::string ModelMessage(const std::string& what) {
  std::vector<absl::string_view> lines =
      absl::StrSplit(what, '\n', absl::SkipWhitespace());
  if (lines.empty()) return "model raised an exception without a message";
  absl::string_view pick = lines.front();
  if (absl::StartsWith(pick, "The following operation failed")) pick = lines.back();
  absl::ConsumePrefix(&pick, "builtins.");
  return std::string(pick);
}

std::vector<c10::IValue> ForwardPath::ToDevice(const std::vector<at::Tensor>& host,
                                               at::ScalarType compute) const {
  const c10::Device& dev = device_->device();
  std::vector<c10::IValue> args;
  // One slot more than the inputs: Method::operator() puts the module in
  // front of them, which otherwise reallocates the vector every forward.
  args.reserve(host.size() + 1);
  for (const at::Tensor& h : host) {
    at::Tensor x;
    if (dev.is_cuda()) {
      if (h.is_pinned()) {
        x = h.to(dev, /*non_blocking=*/true);
      } else {
        // Pinned staging buffer so the copy can overlap on this thread's stream.
        at::Tensor pinned = at::empty(h.sizes(), h.options().pinned_memory(true));
        pinned.copy_(h);
        x = pinned.to(dev, /*non_blocking=*/true);
      }
    } else if (dev.is_cpu()) {
      x = h;  // the host buffer outlives the forward
    } else {
      x = h.to(dev);
    }
    if (at::isFloatingType(x.scalar_type()) && x.scalar_type() != compute) {
      x = x.to(compute);
    }
    if (channels_last_ && x.dim() == 4) x = x.contiguous(at::MemoryFormat::ChannelsLast);
    args.emplace_back(std::move(x));
  }
  return args;
}

absl::StatusOr<std::vector<at::Tensor>> ForwardPath::FromDevice(const c10::IValue& out) const {
  absl::StatusOr<std::vector<at::Tensor>> bound = OutputTensors(out, outputs_);
  if (!bound.ok()) return absl::InternalError(bound.status().message());
  std::vector<at::Tensor> tensors = *std::move(bound);
  if (tensors.size() != outputs_.size()) {
    return absl::InternalError(absl::StrCat("model returned ", tensors.size(),
                                            " output(s); signature has ", outputs_.size()));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    ASSIGN_OR_RETURN(const at::ScalarType want, ToScalarType(outputs_[i].dtype));
    // Cast where the tensor is, then copy: a cast on the host (fp16 compute,
    // fp32 signature) is a CPU op that wakes the intra-op thread team for
    // every batch, whose spin-wait then holds cores the transport needs.
    // On MPS float64 (none there) and bfloat16 (none before macOS 14) are
    // cast on the host. A channels-last output is made contiguous where it
    // is too.
    at::Tensor t = std::move(tensors[i]);
    if (t.is_cpu() && t.scalar_type() == want && t.is_contiguous()) {
      tensors[i] = std::move(t);  // already what the answer needs
      continue;
    }
    if (t.is_cuda() || (t.is_mps() && want != at::kDouble && want != at::kBFloat16)) {
      t = t.to(want).contiguous();
    }
    tensors[i] = t.to(at::kCPU).to(want).contiguous();
  }
  return tensors;
}

absl::StatusOr<c10::IValue> ForwardPath::ForwardRaw(torch::jit::Module& module,
                                                    const std::vector<at::Tensor>& host,
                                                    at::ScalarType compute,
                                                    ForwardPurpose purpose) const {
  if (observer_) observer_(purpose, host.empty() ? 0 : host[0].size(0));
  return AsDeviceWork<c10::IValue>(*device_, [&]() -> absl::StatusOr<c10::IValue> {
    return module.forward(ToDevice(host, compute));
  });
}

absl::StatusOr<std::vector<at::Tensor>> ForwardPath::Forward(
    torch::jit::Module& module, const std::vector<at::Tensor>& host,
    at::ScalarType compute, ForwardPurpose purpose) const {
  return Forward([&module](std::vector<c10::IValue> in) { return module.forward(std::move(in)); },
                 host, compute, purpose);
}

absl::StatusOr<std::vector<at::Tensor>> ForwardPath::Forward(
    const TensorForward& forward, const std::vector<at::Tensor>& host,
    at::ScalarType compute, ForwardPurpose purpose) const {
  if (observer_) observer_(purpose, host.empty() ? 0 : host[0].size(0));
  // One device-work scope for the forward and the copy back: on CUDA both
  // run on the same stream, so the copy waits for the forward.
  return AsDeviceWork<std::vector<at::Tensor>>(
      *device_, [&]() -> absl::StatusOr<std::vector<at::Tensor>> {
        c10::IValue out = forward(ToDevice(host, compute));
        return FromDevice(out);
      });
}

}  // namespace metalserve::torch_internal
