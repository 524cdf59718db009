#include "server/service/tensor_codec.h"

#include <limits>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "proto/dtype/dtype_map.h"
#include "server/service/status_util.h"

namespace metalserve {

std::vector<RawInput> DecodeInputs(const metalserve::v1::PredictRequest& request) {
  std::vector<RawInput> out;
  out.reserve(request.inputs_size());
  for (const auto& t : request.inputs()) {
    RawInput in;
    in.name = t.name();
    in.dtype = DTypeFromProto(t.dtype()).value_or(DType::kInvalid);
    in.dtype_label = metalserve::v1::DataType_Name(t.dtype());
    if (in.dtype_label.empty()) in.dtype_label = absl::StrCat(static_cast<int>(t.dtype()));
    in.shape.assign(t.shape().begin(), t.shape().end());
    in.data = t.data();
    out.push_back(std::move(in));
  }
  return out;
}

std::vector<RawInput> DecodeInputs(const SlicedPredictRequest& request) {
  std::vector<RawInput> out = DecodeInputs(request.skeleton);
  for (size_t i = 0; i < out.size() && i < request.data.size(); ++i) {
    const std::vector<absl::string_view>& views = request.data[i];
    if (views.size() == 1) {
      out[i].data = views[0];
    } else if (views.size() > 1) {
      out[i].pieces = views;
    }
  }
  return out;
}

namespace {

std::string SpecList(const std::vector<TensorSpec>& specs) {
  return absl::StrJoin(specs, ", ", [](std::string* out, const TensorSpec& s) {
    absl::StrAppend(out, "'", s.name, "' ", DTypeName(s.dtype), " ",
                    ShapeToString(s.shape));
  });
}

// `field` names the input in a message; it is built only for one.
absl::Status CheckOne(const RawInput& in, const TensorSpec& spec,
                      absl::FunctionRef<std::string()> field) {
  if (in.dtype != spec.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        field(), ".dtype is ", in.dtype == DType::kInvalid ? ClientText(in.dtype_label)
                                                      : std::string(DTypeName(in.dtype)),
        "; the model expects ", DTypeName(spec.dtype)));
  }
  if (in.shape.size() != spec.shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field(), ".shape ", ShapeToString(in.shape), " has rank ", in.shape.size(),
        "; the model expects rank ", spec.shape.size(), " ",
        ShapeToString(spec.shape)));
  }
  absl::StatusOr<int64_t> counted = NumElements(in.shape, "shape");
  if (!counted.ok()) return NumElements(in.shape, field() + ".shape").status();
  const int64_t elements = *counted;
  if (in.shape[0] < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        field(), ".shape[0] = ", in.shape[0], ": the batch dimension must be >= 1"));
  }
  for (size_t d = 1; d < in.shape.size(); ++d) {
    if (spec.shape[d] >= 0 && in.shape[d] != spec.shape[d]) {
      return absl::InvalidArgumentError(absl::StrCat(
          field(), ".shape[", d, "] = ", in.shape[d], "; the model expects ",
          spec.shape[d], " (shape ", ShapeToString(spec.shape), ")"));
    }
  }
  const int64_t item = ItemSize(in.dtype);
  if (elements > std::numeric_limits<int64_t>::max() / item) {
    return absl::InvalidArgumentError(absl::StrCat(
        field(), ".shape ", ShapeToString(in.shape), ": byte size overflows int64"));
  }
  const int64_t want = elements * item;
  if (static_cast<int64_t>(in.ByteSize()) != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        field(), ".data has ", in.ByteSize(), " bytes; shape ",
        ShapeToString(in.shape), " of ", DTypeName(in.dtype), " needs ", want));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<InputView>> ValidateInputs(
    std::vector<RawInput> inputs, const std::vector<TensorSpec>& specs,
    absl::string_view field) {
  if (inputs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " is empty; the model expects ", SpecList(specs)));
  }
  std::vector<InputView> ordered(specs.size());
  std::vector<bool> seen(specs.size(), false);
  int64_t rows = -1;
  size_t rows_from = 0;  // the input whose batch dimension `rows` is
  // Names for messages, built only for one (every request passes here).
  auto name_of = [&](size_t i) {
    return absl::StrCat(field, "[", i, "] ('", ClientText(inputs[i].name), "')");
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    RawInput& in = inputs[i];
    auto f = [&] { return name_of(i); };
    size_t s = 0;
    while (s < specs.size() && specs[s].name != in.name) ++s;
    if (s == specs.size()) {
      // A single-input model accepts an unnamed input.
      if (in.name.empty() && specs.size() == 1) {
        s = 0;
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            field, "[", i, "].name '", ClientText(in.name),
            "' is not an input of the model; expected ", SpecList(specs)));
      }
    }
    if (seen[s]) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, "[", i, "].name '", ClientText(in.name), "' appears more than once"));
    }
    seen[s] = true;
    RETURN_IF_ERROR(CheckOne(in, specs[s], f));
    if (rows >= 0 && in.shape[0] != rows) {
      return absl::InvalidArgumentError(absl::StrCat(
          f(), ".shape[0] = ", in.shape[0], " but ", name_of(rows_from), " has ", rows,
          " rows; every input must have the same batch dimension"));
    }
    rows = in.shape[0];
    rows_from = i;
    ordered[s] = InputView{in.dtype, std::move(in.shape), in.data, std::move(in.pieces)};
  }
  for (size_t s = 0; s < specs.size(); ++s) {
    if (!seen[s]) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, " lacks '", specs[s].name, "' (", DTypeName(specs[s].dtype),
          " ", ShapeToString(specs[s].shape), ")"));
    }
  }
  return ordered;
}

}  // namespace metalserve
