// Fuzz target: bytes -> metalserve.v1.PredictRequest -> DecodeInputs ->
// ValidateInputs against a fixed two-input signature. Must never crash, hang,
// or read outside the request; an accepted input's views must lie inside the
// request's bytes and match product(shape) x item size.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "metalserve/v1/inference.pb.h"
#include "server/service/tensor_codec.h"

namespace {

const std::vector<metalserve::TensorSpec>& Signature() {
  static const auto* specs = new std::vector<metalserve::TensorSpec>{
      {"input", metalserve::DType::kFloat32, {-1, 3, 4}},
      {"mask", metalserve::DType::kInt64, {-1, -1}},
  };
  return *specs;
}

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  metalserve::v1::PredictRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  const std::vector<metalserve::RawInput> raw = metalserve::DecodeInputs(request);
  Check(raw.size() == static_cast<size_t>(request.inputs_size()));
  auto valid = metalserve::ValidateInputs(raw, Signature());
  if (!valid.ok()) {
    Check(valid.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  Check(valid->size() == Signature().size());
  int64_t rows = -1;
  for (const metalserve::InputView& v : *valid) {
    Check(!v.shape.empty() && v.shape[0] >= 1);
    if (rows >= 0) Check(v.shape[0] == rows);
    rows = v.shape[0];
    int64_t elements = 1;
    for (int64_t d : v.shape) {
      Check(d >= 0);
      elements *= d;  // validated: cannot overflow
    }
    Check(static_cast<int64_t>(v.data.size()) ==
          elements * metalserve::ItemSize(v.dtype));
    // Touch every byte, so ASan sees any view outside the request.
    volatile unsigned char sink = 0;
    for (unsigned char c : v.data) sink = sink ^ c;
    (void)sink;
  }
  return 0;
}
