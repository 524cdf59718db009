#include "server/service/kserve_codec.h"

#include <cstdint>
#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "proto/dtype/dtype_map.h"
#include "server/service/device_choice_json.h"
#include "server/service/status_util.h"

namespace metalserve {

using inference::InferTensorContents;
using inference::ModelInferRequest;

namespace {

// Appends `values` to `out` as `T`, refusing any outside T's range.
template <typename T, typename Values>
absl::Status AppendAs(const Values& values, const std::string& field,
                      std::string* out) {
  out->reserve(out->size() + values.size() * sizeof(T));
  for (int i = 0; i < values.size(); ++i) {
    const auto v = values.Get(i);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max()) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, "[", i, "] = ", v, " is out of range for the datatype"));
      }
    }
    const T t = static_cast<T>(v);
    out->append(reinterpret_cast<const char*>(&t), sizeof(T));
  }
  return absl::OkStatus();
}

// Number of values set in `c`, and the name of the first field holding any.
int CountSetFields(const InferTensorContents& c, std::string* which) {
  int n = 0;
  auto note = [&](int size, const char* name) {
    if (size > 0) {
      if (n++ == 0) *which = name;
    }
  };
  note(c.bool_contents_size(), "bool_contents");
  note(c.int_contents_size(), "int_contents");
  note(c.int64_contents_size(), "int64_contents");
  note(c.uint_contents_size(), "uint_contents");
  note(c.uint64_contents_size(), "uint64_contents");
  note(c.fp32_contents_size(), "fp32_contents");
  note(c.fp64_contents_size(), "fp64_contents");
  note(c.bytes_contents_size(), "bytes_contents");
  return n;
}

// Typed contents of input `i` as little-endian bytes of `dtype`.
absl::Status ContentsToBytes(const ModelInferRequest::InferInputTensor& in,
                             DType dtype, int i, std::string* out) {
  const std::string f =
      absl::StrCat("inputs[", i, "] ('", ClientText(in.name()), "').contents");
  const InferTensorContents& c = in.contents();
  std::string which;
  const int set = CountSetFields(c, &which);
  const char* want = nullptr;
  absl::Status s;
  switch (dtype) {
    case DType::kFloat32: want = "fp32_contents"; s = AppendAs<float>(c.fp32_contents(), f + ".fp32_contents", out); break;
    case DType::kFloat64: want = "fp64_contents"; s = AppendAs<double>(c.fp64_contents(), f + ".fp64_contents", out); break;
    case DType::kInt64: want = "int64_contents"; s = AppendAs<int64_t>(c.int64_contents(), f + ".int64_contents", out); break;
    case DType::kInt32: want = "int_contents"; s = AppendAs<int32_t>(c.int_contents(), f + ".int_contents", out); break;
    case DType::kInt8: want = "int_contents"; s = AppendAs<int8_t>(c.int_contents(), f + ".int_contents", out); break;
    case DType::kUInt8: want = "uint_contents"; s = AppendAs<uint8_t>(c.uint_contents(), f + ".uint_contents", out); break;
    case DType::kBool: want = "bool_contents"; s = AppendAs<bool>(c.bool_contents(), f + ".bool_contents", out); break;
    case DType::kFloat16:
    case DType::kBFloat16:
      return absl::InvalidArgumentError(absl::StrCat(
          "inputs[", i, "] ('", ClientText(in.name()), "').datatype ",
          ClientText(in.datatype()),
          " has no typed contents field; send it in raw_input_contents"));
    case DType::kInvalid:
      break;
  }
  if (set > 1 || (set == 1 && which != want)) {
    return absl::InvalidArgumentError(absl::StrCat(
        f, ".", which, " is set; datatype ", ClientText(in.datatype()), " takes ", want,
        set > 1 ? " only (several contents fields are set)" : ""));
  }
  return s;
}

constexpr char kRegionParameter[] = "shared_memory_region";

const std::string kRegionKey = kRegionParameter;
const std::string kByteSizeKey = "shared_memory_byte_size";
const std::string kOffsetKey = "shared_memory_offset";

std::string ParametersField(const ModelInferRequest::InferInputTensor& t, int i) {
  return absl::StrCat("inputs[", i, "] ('", ClientText(t.name()), "').parameters");
}

// Parameter `key` of input i as a non-negative int64 (-1 when absent).
absl::StatusOr<int64_t> SizeParameter(const ModelInferRequest::InferInputTensor& t, int i,
                                      const std::string& key) {
  const auto it = t.parameters().find(key);
  if (it == t.parameters().end()) return -1;
  const inference::InferParameter& p = it->second;
  if (p.parameter_choice_case() == inference::InferParameter::kInt64Param &&
      p.int64_param() >= 0) {
    return p.int64_param();
  }
  if (p.parameter_choice_case() == inference::InferParameter::kUint64Param &&
      p.uint64_param() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return static_cast<int64_t>(p.uint64_param());
  }
  std::string given = "another type";
  if (p.parameter_choice_case() == inference::InferParameter::kInt64Param) {
    given = absl::StrCat(p.int64_param());
  } else if (p.parameter_choice_case() == inference::InferParameter::kUint64Param) {
    given = absl::StrCat(p.uint64_param());
  }
  return absl::InvalidArgumentError(absl::StrCat(
      ParametersField(t, i), "['", key, "'] = ", given,
      " must be a non-negative int64_param or uint64_param within int64's range"));
}

// Input i's bytes from the region its parameters name; nullopt when they
// name none.
absl::StatusOr<std::optional<absl::string_view>> SharedMemoryInput(
    const ModelInferRequest::InferInputTensor& t, int i, SharedMemoryInputs* shm) {
  const auto& params = t.parameters();
  if (params.empty()) return std::nullopt;
  const auto region = params.find(kRegionKey);
  ASSIGN_OR_RETURN(const int64_t size, SizeParameter(t, i, kByteSizeKey));
  ASSIGN_OR_RETURN(const int64_t offset, SizeParameter(t, i, kOffsetKey));
  if (region == params.end()) {
    if (size < 0 && offset < 0) return std::nullopt;
    return absl::InvalidArgumentError(absl::StrCat(
        ParametersField(t, i), "['", size >= 0 ? kByteSizeKey : kOffsetKey,
        "'] is set without ['shared_memory_region']"));
  }
  if (region->second.parameter_choice_case() != inference::InferParameter::kStringParam) {
    return absl::InvalidArgumentError(absl::StrCat(
        ParametersField(t, i), "['shared_memory_region'] must be a string_param"));
  }
  if (size < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        ParametersField(t, i),
        "['shared_memory_region'] is set without ['shared_memory_byte_size']"));
  }
  std::string which;
  if (t.has_contents() && CountSetFields(t.contents(), &which) > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inputs[", i, "] ('", ClientText(t.name()), "').contents.", which,
        " is set together with a shared-memory region; use one or the other"));
  }
  if (shm == nullptr || shm->regions == nullptr) {
    const absl::Status refusal =
        shm != nullptr && !shm->refusal.ok()
            ? shm->refusal
            : absl::InvalidArgumentError("shared-memory inputs are not accepted here");
    return absl::Status(refusal.code(), absl::StrCat(ParametersField(t, i),
                                                     "['shared_memory_region']: ",
                                                     refusal.message()));
  }
  ASSIGN_OR_RETURN(SharedMemoryRegions::Bytes bytes,
                   shm->regions->View(region->second.string_param(), std::max<int64_t>(offset, 0),
                                      size, ParametersField(t, i)));
  shm->views.push_back(std::move(bytes));
  return shm->views.back().data;
}

}  // namespace

// Decodes the request's inputs; `storage` receives bytes converted from
// typed contents (views point into it or into `request`).
absl::StatusOr<std::vector<RawInput>> DecodeKServeInputs(
    const ModelInferRequest& request, std::vector<std::string>* storage,
    const std::vector<std::vector<absl::string_view>>* raw_pieces, SharedMemoryInputs* shm) {
  // Inputs read from shared memory take no raw_input_contents entry.
  // `shared` stays empty (no allocation) for a request that names no region.
  std::vector<std::optional<absl::string_view>> shared;
  int shared_count = 0;
  for (int i = 0; i < request.inputs_size(); ++i) {
    ASSIGN_OR_RETURN(const std::optional<absl::string_view> bytes,
                     SharedMemoryInput(request.inputs(i), i, shm));
    if (!bytes) continue;
    if (shared.empty()) shared.resize(request.inputs_size());
    shared[i] = bytes;
    ++shared_count;
  }
  const int raw_count = raw_pieces != nullptr ? static_cast<int>(raw_pieces->size())
                                              : request.raw_input_contents_size();
  const bool raw = raw_count > 0;
  if (raw && raw_count != request.inputs_size() - shared_count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "raw_input_contents has ", raw_count, " entries but inputs has ",
        request.inputs_size(),
        shared_count > 0 ? absl::StrCat(", ", shared_count, " of them in shared memory") : "",
        "; give one entry per input", shared_count > 0 ? " not in shared memory" : "",
        ", in the order of inputs"));
  }
  storage->resize(raw ? 0 : request.inputs_size());
  int raw_index = 0;
  std::vector<RawInput> out;
  out.reserve(request.inputs_size());
  for (int i = 0; i < request.inputs_size(); ++i) {
    const auto& t = request.inputs(i);
    RawInput in;
    in.name = t.name();
    in.dtype = DTypeFromKServe(t.datatype()).value_or(DType::kInvalid);
    in.dtype_label = t.datatype();
    if (in.dtype == DType::kInvalid) {
      return absl::InvalidArgumentError(absl::StrCat(
          "inputs[", i, "] ('", ClientText(t.name()), "').datatype '",
          ClientText(t.datatype()),
          "' is not supported; use one of ", KServeDatatypeList()));
    }
    in.shape.assign(t.shape().begin(), t.shape().end());
    if (!shared.empty() && shared[i]) {
      in.data = *shared[i];
    } else if (raw) {
      std::string which;
      if (t.has_contents() && CountSetFields(t.contents(), &which) > 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "inputs[", i, "] ('", ClientText(t.name()), "').contents.", which,
            " is set together with raw_input_contents; use one or the other"));
      }
      const int r = raw_index++;
      if (raw_pieces != nullptr) {
        const std::vector<absl::string_view>& views = (*raw_pieces)[r];
        if (views.size() == 1) {
          in.data = views[0];
        } else if (views.size() > 1) {
          in.pieces = views;
        }
      } else {
        in.data = request.raw_input_contents(r);
      }
    } else {
      std::string& bytes = (*storage)[i];
      absl::Status s = ContentsToBytes(t, in.dtype, i, &bytes);
      if (!s.ok()) return s;
      in.data = bytes;
    }
    out.push_back(std::move(in));
  }
  return out;
}

bool NamesSharedMemory(const ModelInferRequest& request) {
  for (const auto& t : request.inputs()) {
    if (!t.parameters().empty() && t.parameters().contains(kRegionKey)) return true;
  }
  return false;
}

// Indices into the model's outputs of the outputs the request asks for
// (all of them when it names none).
absl::StatusOr<std::vector<size_t>> SelectKServeOutputs(
    const ModelInferRequest& request, const std::vector<TensorSpec>& specs) {
  std::vector<size_t> picked;
  if (request.outputs_size() == 0) {
    for (size_t s = 0; s < specs.size(); ++s) picked.push_back(s);
    return picked;
  }
  for (int i = 0; i < request.outputs_size(); ++i) {
    const std::string& name = request.outputs(i).name();
    if (request.outputs(i).parameters().contains(kRegionKey)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "outputs[", i, "] ('", ClientText(name),
          "').parameters['shared_memory_region']: outputs are returned in the response; "
          "shared-memory outputs are not supported"));
    }
    size_t s = 0;
    while (s < specs.size() && specs[s].name != name) ++s;
    if (s == specs.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "outputs[", i, "].name '", ClientText(name),
          "' is not an output of the model; expected ",
          absl::StrJoin(specs, ", ", [](std::string* o, const TensorSpec& t) {
            absl::StrAppend(o, "'", t.name, "'");
          })));
    }
    for (size_t p : picked) {
      if (p == s) {
        return absl::InvalidArgumentError(absl::StrCat(
            "outputs[", i, "].name '", ClientText(name), "' appears more than once"));
      }
    }
    picked.push_back(s);
  }
  return picked;
}

inference::ModelConfig KServeModelConfig(const ModelInfo& info, int64_t max_batch_size) {
  inference::ModelConfig c;
  c.set_name(info.name);
  c.set_platform(kKServePlatform);
  c.set_max_batch_size(static_cast<int32_t>(max_batch_size));
  for (const auto& spec : info.inputs) {
    auto* in = c.add_input();
    in->set_name(spec.name);
    in->set_data_type(KServeConfigType(spec.dtype));
    for (size_t d = 1; d < spec.shape.size(); ++d) in->add_dims(spec.shape[d]);
  }
  for (const auto& spec : info.outputs) {
    auto* out = c.add_output();
    out->set_name(spec.name);
    out->set_data_type(KServeConfigType(spec.dtype));
    for (size_t d = 1; d < spec.shape.size(); ++d) out->add_dims(spec.shape[d]);
  }
  if (std::string choice = DeviceChoiceText(info); !choice.empty()) {
    (*c.mutable_parameters())[kDeviceChoiceParameter].set_string_value(std::move(choice));
  }
  return c;
}

absl::StatusOr<int> KServePriority(const inference::ModelInferRequest& request) {
  const auto it = request.parameters().find("priority");
  if (it == request.parameters().end()) return 0;
  const inference::InferParameter& p = it->second;
  int64_t value = 0;
  if (p.parameter_choice_case() == inference::InferParameter::kInt64Param) {
    value = p.int64_param();
  } else if (p.parameter_choice_case() == inference::InferParameter::kUint64Param) {
    value = p.uint64_param() > static_cast<uint64_t>(INT32_MAX)
                ? INT64_MAX : static_cast<int64_t>(p.uint64_param());
  } else {
    return absl::InvalidArgumentError(
        "parameters[\"priority\"] must be an int64_param or uint64_param");
  }
  if (value < INT32_MIN || value > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameters[\"priority\"] = ", value, " is out of range"));
  }
  return static_cast<int>(value);
}

}  // namespace metalserve
