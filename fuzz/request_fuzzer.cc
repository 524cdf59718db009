// Fuzz target: bytes -> metalserve.v1.PredictRequest -> DecodeInputs ->
// ValidateInputs against a fixed two-input signature. Must never crash, hang,
// or read outside the request; an accepted input's views must lie inside the
// request's bytes and match product(shape) x item size. The same bytes cut
// into 7-byte slices and read in place (sliced_request.h) must give, when
// that walk takes them, what protobuf parses.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "google/protobuf/util/message_differencer.h"
#include "inference/grpc_service.pb.h"
#include "metalserve/v1/inference.pb.h"
#include "grpcpp/support/byte_buffer.h"
#include "server/service/kserve_codec.h"
#include "server/service/sliced_request.h"
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

// When the in-place walk takes the bytes, protobuf takes them too and both
// read the same inputs.
grpc::ByteBuffer SevenByteSlices(const uint8_t* data, size_t size) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < size; at += 7) {
    slices.emplace_back(data + at, std::min<size_t>(7, size - at));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// The same for a ModelInferRequest: the skeleton is the request without
// raw_input_contents, the views join to its entries, and decoding from the
// views answers as decoding the parsed request does.
void CheckSlicedModelInferAgrees(const uint8_t* data, size_t size) {
  const grpc::ByteBuffer body = SevenByteSlices(data, size);
  metalserve::HeldBytesBudget budget(int64_t{1} << 30);
  metalserve::SlicedModelInferRequest sliced;
  if (!metalserve::ParseSlicedModelInferRequest(body, &budget, &sliced)) return;
  inference::ModelInferRequest request;
  Check(request.ParseFromArray(data, static_cast<int>(size)));
  Check(static_cast<int>(sliced.raw_input_contents.size()) == request.raw_input_contents_size());
  for (int i = 0; i < request.raw_input_contents_size(); ++i) {
    std::string bytes;
    for (absl::string_view p : sliced.raw_input_contents[i]) bytes.append(p.data(), p.size());
    Check(bytes == request.raw_input_contents(i));
  }
  inference::ModelInferRequest skeleton = request;
  skeleton.clear_raw_input_contents();
  Check(google::protobuf::util::MessageDifferencer::Equals(sliced.skeleton, skeleton));
  std::vector<std::string> storage, copy_storage;
  const auto in_place =
      metalserve::DecodeKServeInputs(sliced.skeleton, &storage, &sliced.raw_input_contents);
  const auto copied = metalserve::DecodeKServeInputs(request, &copy_storage);
  Check(in_place.ok() == copied.ok());
  if (!copied.ok()) {
    Check(in_place.status() == copied.status());
    return;
  }
  for (size_t i = 0; i < copied->size(); ++i) {
    std::string bytes((*in_place)[i].data);
    for (absl::string_view p : (*in_place)[i].pieces) bytes.append(p.data(), p.size());
    Check(bytes == std::string((*copied)[i].data));
  }
}

void CheckSlicedAgrees(const uint8_t* data, size_t size) {
  const grpc::ByteBuffer body = SevenByteSlices(data, size);
  metalserve::HeldBytesBudget budget(int64_t{1} << 30);
  metalserve::SlicedPredictRequest sliced;
  if (!metalserve::ParseSlicedPredictRequest(body, &budget, &sliced)) return;
  metalserve::v1::PredictRequest request;
  Check(request.ParseFromArray(data, static_cast<int>(size)));
  Check(sliced.skeleton.model_name() == request.model_name());
  Check(sliced.skeleton.inputs_size() == request.inputs_size());
  const std::vector<metalserve::RawInput> raw = metalserve::DecodeInputs(sliced);
  for (int i = 0; i < request.inputs_size(); ++i) {
    const metalserve::v1::Tensor& want = request.inputs(i);
    Check(raw[i].name == want.name() && raw[i].shape.size() == static_cast<size_t>(want.shape_size()));
    std::string bytes(raw[i].data);
    for (absl::string_view p : raw[i].pieces) bytes.append(p.data(), p.size());
    Check(bytes == want.data());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  CheckSlicedAgrees(data, size);
  CheckSlicedModelInferAgrees(data, size);
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
