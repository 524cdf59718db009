#include "server/runtime/signature_binding.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace metalserve {
namespace {

std::string Quote(const std::string& s) { return absl::StrCat("\"", s, "\""); }

std::string TorchDtypeName(at::ScalarType t) {
  const DType d = FromScalarType(t);
  return d == DType::kInvalid ? std::string(c10::toString(t)) : std::string(DTypeName(d));
}

// The tensors of a tuple or list result, or InvalidArgument naming the
// position of one that is not a tensor.
absl::StatusOr<std::vector<at::Tensor>> Elements(const std::vector<c10::IValue>& items) {
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].isTensor()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "outputs[", i, "]: model gives a ", items[i].tagKind(), ", not a tensor"));
    }
    out.push_back(items[i].toTensor());
  }
  return out;
}

std::vector<std::string> DictKeys(const c10::IValue& result) {
  std::vector<std::string> keys;
  for (const auto& kv : result.toGenericDict()) {
    keys.push_back(kv.key().isString() ? kv.key().toStringRef() : kv.key().tagKind());
  }
  return keys;
}

absl::Status CheckShape(size_t i, const TensorSpec& spec, const at::Tensor& t, int64_t batch) {
  const std::vector<int64_t> got(t.sizes().begin(), t.sizes().end());
  if (got.size() != spec.shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "outputs[", i, "].shape: declared ", ShapeToString(spec.shape), " (rank ",
        spec.shape.size(), "), model gives ", ShapeToString(got), " (rank ", got.size(),
        ") for a probe batch of ", batch));
  }
  if (got.empty() || got[0] != batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "outputs[", i, "].shape[0]: model gives ", got.empty() ? 0 : got[0],
        " for a probe batch of ", batch,
        "; the first dimension of every output must be the batch"));
  }
  for (size_t d = 1; d < got.size(); ++d) {
    if (spec.shape[d] != -1 && spec.shape[d] != got[d]) {
      return absl::InvalidArgumentError(absl::StrCat("outputs[", i, "].shape[", d,
                                                     "]: declared ", spec.shape[d],
                                                     ", model gives ", got[d]));
    }
  }
  return absl::OkStatus();
}

}  // namespace

DType FromScalarType(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return DType::kFloat32;
    case at::kHalf: return DType::kFloat16;
    case at::kBFloat16: return DType::kBFloat16;
    case at::kDouble: return DType::kFloat64;
    case at::kLong: return DType::kInt64;
    case at::kInt: return DType::kInt32;
    case at::kByte: return DType::kUInt8;
    case at::kChar: return DType::kInt8;
    case at::kBool: return DType::kBool;
    default: return DType::kInvalid;
  }
}

std::string ForwardArgs::ToString() const {
  return absl::StrCat("(", absl::StrJoin(names, ", "), ")");
}

absl::StatusOr<ForwardArgs> ReadForwardArgs(const torch::jit::Module& module) {
  try {
    const auto forward = module.find_method("forward");
    if (!forward.has_value()) {
      return absl::InvalidArgumentError("model has no forward method");
    }
    const std::vector<c10::Argument>& schema = forward->function().getSchema().arguments();
    ForwardArgs args;
    for (size_t i = 1; i < schema.size(); ++i) {  // 0 is self
      args.names.push_back(schema[i].name());
      if (!schema[i].default_value().has_value() && args.required == i - 1) ++args.required;
    }
    return args;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read the model's forward schema: ", e.what()));
  }
}

absl::Status BindInputsByName(const ForwardArgs& args, std::vector<TensorSpec>* inputs) {
  const size_t n = inputs->size();
  if (n < args.required || n > args.names.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inputs: declared ", n, " input(s), model's forward takes ", args.names.size(),
        " ", args.ToString(), args.required < args.names.size()
                                  ? absl::StrCat(", ", args.required, " without a default")
                                  : ""));
  }
  std::vector<TensorSpec> bound(n);
  std::vector<bool> filled(n, false);
  for (size_t i = 0; i < n; ++i) {
    const std::string& name = (*inputs)[i].name;
    const auto it = std::find(args.names.begin(), args.names.end(), name);
    size_t pos = static_cast<size_t>(it - args.names.begin());
    if (it == args.names.end()) {
      // One input: the API name may differ from the Python argument's.
      if (n == 1) pos = 0;
      else {
        return absl::InvalidArgumentError(absl::StrCat(
            "inputs[", i, "].name: declared ", Quote(name), ", model's forward takes ",
            args.ToString()));
      }
    }
    if (pos >= n || filled[pos]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "inputs[", i, "].name: declared ", Quote(name), " is forward's argument ", pos + 1,
          " of ", args.ToString(), "; declare the arguments before it too"));
    }
    bound[pos] = (*inputs)[i];
    filled[pos] = true;
  }
  *inputs = std::move(bound);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TensorSpec>> InputsFromHints(
    const ForwardArgs& args, const std::map<std::string, std::vector<int64_t>>& shapes,
    const std::map<std::string, DType>& dtypes, const std::string& signature_path) {
  std::vector<std::string> unknown;
  for (const auto& [name, dims] : shapes) {
    if (std::find(args.names.begin(), args.names.end(), name) == args.names.end()) {
      unknown.push_back(name);
    }
  }
  for (const auto& [name, dtype] : dtypes) {
    if (std::find(args.names.begin(), args.names.end(), name) == args.names.end()) {
      unknown.push_back(name);
    }
  }
  if (!unknown.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input_shape/input_dtype name input(s) ", absl::StrJoin(unknown, ", "),
        "; model's forward takes ", args.ToString()));
  }
  std::vector<TensorSpec> inputs;
  std::vector<std::string> missing;
  for (size_t i = 0; i < args.names.size(); ++i) {
    const std::string& name = args.names[i];
    const auto shape = shapes.find(name);
    if (shape == shapes.end()) {
      if (i >= args.required) break;  // optional arguments keep their defaults
      missing.push_back(name);
      continue;
    }
    TensorSpec spec;
    spec.name = name;
    const auto dtype = dtypes.find(name);
    spec.dtype = dtype == dtypes.end() ? DType::kFloat32 : dtype->second;
    spec.shape = {-1};
    spec.shape.insert(spec.shape.end(), shape->second.begin(), shape->second.end());
    inputs.push_back(std::move(spec));
  }
  if (missing.empty() && inputs.size() < shapes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input_shape gives ", shapes.size(), " input(s) but forward", args.ToString(),
        " takes them in order: give a shape for every argument before the last one "
        "you pass (", inputs.size(), " given in order)"));
  }
  if (!missing.empty()) {
    std::vector<std::string> example;
    for (const std::string& name : missing) example.push_back(absl::StrCat(name, "=3,224,224"));
    return absl::InvalidArgumentError(absl::StrCat(
        "no signature file ", signature_path, ", and the shape of input(s) ",
        absl::StrJoin(missing, ", "), " of forward", args.ToString(),
        " is not known: pass --input_shape with the dimensions after the batch "
        "dimension, e.g. --input_shape=", absl::StrJoin(example, ","),
        " (and --input_dtype=NAME=uint8 etc. for inputs that are not float32), or write ",
        signature_path, " (format: docs/signature.md)"));
  }
  return inputs;
}

absl::StatusOr<std::vector<at::Tensor>> OutputTensors(const c10::IValue& result,
                                                      const std::vector<TensorSpec>& outputs) {
  if (result.isTensor()) return std::vector<at::Tensor>{result.toTensor()};
  if (result.isTuple()) return Elements(result.toTupleRef().elements().vec());
  if (result.isList()) return Elements(result.toListRef().vec());
  if (!result.isGenericDict()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "outputs: model gives a ", result.tagKind(),
        ", not a tensor, a tuple or list of tensors, or a dict of str -> tensor"));
  }
  const c10::impl::GenericDict dict = result.toGenericDict();
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const auto it = dict.find(c10::IValue(outputs[i].name));
    if (it == dict.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "outputs[", i, "].name: declared ", Quote(outputs[i].name),
          ", model's dict has keys (", absl::StrJoin(DictKeys(result), ", "), ")"));
    }
    if (!it->value().isTensor()) {
      return absl::InvalidArgumentError(absl::StrCat("outputs[", i, "] (dict key ",
                                                     Quote(outputs[i].name),
                                                     "): model gives a non-tensor"));
    }
    out.push_back(it->value().toTensor());
  }
  return out;
}

absl::Status CheckOutputs(const c10::IValue& result, const std::vector<TensorSpec>& outputs,
                          int64_t batch) {
  const size_t count = result.isGenericDict() ? result.toGenericDict().size()
                       : result.isTuple()     ? result.toTupleRef().elements().size()
                       : result.isList()      ? result.toListRef().size()
                                              : 1;
  if (count != outputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "outputs: declared ", outputs.size(), " output(s), model gives ", count,
        result.isGenericDict()
            ? absl::StrCat(" (dict keys ", absl::StrJoin(DictKeys(result), ", "), ")")
            : ""));
  }
  ASSIGN_OR_RETURN(const std::vector<at::Tensor> got, OutputTensors(result, outputs));
  for (size_t i = 0; i < outputs.size(); ++i) {
    const DType dtype = FromScalarType(got[i].scalar_type());
    if (dtype != outputs[i].dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          "outputs[", i, "].dtype: declared ", DTypeName(outputs[i].dtype),
          ", model gives ", TorchDtypeName(got[i].scalar_type())));
    }
    RETURN_IF_ERROR(CheckShape(i, outputs[i], got[i], batch));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TensorSpec>> OutputsFromProbe(const c10::IValue& result,
                                                         int64_t batch) {
  std::vector<std::string> names;
  if (result.isGenericDict()) {
    names = DictKeys(result);
  } else if (result.isTuple() || result.isList()) {
    const size_t n = result.isTuple() ? result.toTupleRef().elements().size()
                                      : result.toListRef().size();
    for (size_t i = 0; i < n; ++i) names.push_back(absl::StrCat("output", i));
  } else {
    names = {"output"};
  }
  std::vector<TensorSpec> outputs(names.size());
  for (size_t i = 0; i < names.size(); ++i) outputs[i].name = names[i];
  ASSIGN_OR_RETURN(const std::vector<at::Tensor> got, OutputTensors(result, outputs));
  for (size_t i = 0; i < got.size(); ++i) {
    outputs[i].dtype = FromScalarType(got[i].scalar_type());
    if (outputs[i].dtype == DType::kInvalid) {
      return absl::InvalidArgumentError(absl::StrCat(
          "outputs[", i, "].dtype: model gives ", TorchDtypeName(got[i].scalar_type()),
          ", which metalserve cannot serve"));
    }
    outputs[i].shape.assign(got[i].sizes().begin(), got[i].sizes().end());
    if (outputs[i].shape.empty() || outputs[i].shape[0] != batch) {
      return absl::InvalidArgumentError(absl::StrCat(
          "outputs[", i, "].shape: model gives ", ShapeToString(outputs[i].shape),
          " for a probe batch of ", batch, "; the first dimension must be the batch"));
    }
    outputs[i].shape[0] = -1;
  }
  return outputs;
}

}  // namespace metalserve
