// Fuzz target: bytes -> a REST infer body (server/service/rest_codec.h) ->
// DecodeKServeInputs -> ValidateInputs and SelectKServeOutputs against a
// fixed two-input signature, then the response encoder. The first byte picks
// the framing: odd means the next two bytes (little-endian) are the
// Inference-Header-Content-Length and the rest is JSON plus binary data;
// even means the rest is all JSON. Must never crash, hang, or read outside
// the body; every refusal is INVALID_ARGUMENT; an accepted input's bytes
// match product(shape) x item size.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "server/service/kserve_codec.h"
#include "server/service/rest_codec.h"
#include "server/service/tensor_codec.h"

namespace {

const std::vector<metalserve::TensorSpec>& Inputs() {
  static const auto* specs = new std::vector<metalserve::TensorSpec>{
      {"input", metalserve::DType::kFloat32, {-1, 3, 4}},
      {"mask", metalserve::DType::kInt64, {-1, -1}},
  };
  return *specs;
}

const std::vector<metalserve::TensorSpec>& Outputs() {
  static const auto* specs = new std::vector<metalserve::TensorSpec>{
      {"y", metalserve::DType::kFloat32, {-1, 3, 4}},
      {"z", metalserve::DType::kInt64, {-1, -1}},
  };
  return *specs;
}

void Check(bool ok) {
  if (!ok) std::abort();
}

void CheckRefusal(const absl::Status& s) {
  Check(s.code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::optional<size_t> header_length;
  size_t skip = 1;
  if ((data[0] & 1) != 0) {
    if (size < 3) return 0;
    header_length = static_cast<size_t>(data[1]) | (static_cast<size_t>(data[2]) << 8);
    skip = 3;
  }
  const std::string body(reinterpret_cast<const char*>(data) + skip, size - skip);
  auto decoded = metalserve::DecodeRestInferRequest(body, header_length, "m", "");
  if (!decoded.ok()) {
    CheckRefusal(decoded.status());
    return 0;
  }
  const inference::ModelInferRequest& r = decoded->request;
  Check(r.raw_input_contents_size() == r.inputs_size());
  Check(decoded->output_binary.size() == static_cast<size_t>(r.outputs_size()));
  std::vector<std::string> storage;
  auto raw = metalserve::DecodeKServeInputs(r, &storage);
  if (!raw.ok()) {
    CheckRefusal(raw.status());
    return 0;
  }
  auto valid = metalserve::ValidateInputs(*raw, Inputs());
  if (!valid.ok()) {
    CheckRefusal(valid.status());
    return 0;
  }
  auto selected = metalserve::SelectKServeOutputs(r, Outputs());
  if (!selected.ok()) {
    CheckRefusal(selected.status());
    return 0;
  }
  // Echo the inputs back as the outputs and encode them both ways.
  std::vector<metalserve::Tensor> outputs;
  for (size_t i = 0; i < valid->size(); ++i) {
    const metalserve::InputView& v = (*valid)[i];
    int64_t elements = 1;
    for (int64_t d : v.shape) elements *= d;  // validated: cannot overflow
    Check(static_cast<int64_t>(v.data.size()) == elements * metalserve::ItemSize(v.dtype));
    outputs.push_back({Outputs()[i].name, v.dtype, v.shape, std::string(v.data)});
  }
  std::vector<bool> binary(selected->size());
  for (size_t i = 0; i < binary.size(); ++i) binary[i] = (i % 2) == 0;
  const metalserve::ResponseFields fields{.model_name = "m", .id = r.id()};
  const metalserve::RestBody out =
      metalserve::EncodeRestInferResponse(fields, outputs, *selected, binary);
  Check(out.json_length <= out.body.size());
  return 0;
}
