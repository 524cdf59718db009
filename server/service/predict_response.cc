#include "server/service/predict_response.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "grpc/slice.h"
#include "grpcpp/support/slice.h"
#include "proto/dtype/dtype_map.h"

namespace metalserve {
namespace {

// metalserve.v1.PredictResponse and Tensor field numbers (inference.proto).
constexpr int kModelName = 1, kModelVersion = 2, kDevice = 3, kOutputs = 4, kQueueTime = 5,
              kComputeTime = 6, kBatchRows = 7;
constexpr int kTensorName = 1, kTensorDtype = 2, kTensorShape = 3, kTensorData = 4;
constexpr uint32_t kVarint = 0, kLengthDelimited = 2;

constexpr uint64_t Tag(int field, uint32_t wire_type) {
  return static_cast<uint64_t>(field) << 3 | wire_type;
}

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

char* PutVarint(uint64_t v, char* p) {
  while (v >= 0x80) {
    *p++ = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}

// int64 and enum fields are varints of their two's complement (negative
// values take ten bytes), left out when zero.
size_t IntFieldSize(int field, int64_t v) {
  return v == 0 ? 0 : VarintSize(Tag(field, kVarint)) + VarintSize(static_cast<uint64_t>(v));
}

char* PutIntField(int field, int64_t v, char* p) {
  if (v == 0) return p;
  p = PutVarint(Tag(field, kVarint), p);
  return PutVarint(static_cast<uint64_t>(v), p);
}

// A length-delimited field of `length` bytes; `always` for an embedded
// message (written even when empty), else left out when empty.
size_t DelimitedFieldSize(int field, size_t length, bool always = false) {
  if (length == 0 && !always) return 0;
  return VarintSize(Tag(field, kLengthDelimited)) + VarintSize(length) + length;
}

char* PutDelimitedHeader(int field, size_t length, char* p) {
  p = PutVarint(Tag(field, kLengthDelimited), p);
  return PutVarint(length, p);
}

char* PutBytesField(int field, absl::string_view bytes, char* p) {
  if (bytes.empty()) return p;
  p = PutDelimitedHeader(field, bytes.size(), p);
  std::memcpy(p, bytes.data(), bytes.size());
  return p + bytes.size();
}

size_t PackedShapeBytes(const std::vector<int64_t>& shape) {
  size_t n = 0;
  for (int64_t d : shape) n += VarintSize(static_cast<uint64_t>(d));
  return n;
}

size_t TensorBytes(const Tensor& t) {
  return DelimitedFieldSize(kTensorName, t.name.size()) +
         IntFieldSize(kTensorDtype, ProtoDataType(t.dtype)) +
         DelimitedFieldSize(kTensorShape, PackedShapeBytes(t.shape)) +
         DelimitedFieldSize(kTensorData, t.data.size());
}

char* PutTensor(const Tensor& t, size_t bytes, char* p) {
  p = PutDelimitedHeader(kOutputs, bytes, p);
  p = PutBytesField(kTensorName, t.name, p);
  p = PutIntField(kTensorDtype, ProtoDataType(t.dtype), p);
  if (!t.shape.empty()) {
    p = PutDelimitedHeader(kTensorShape, PackedShapeBytes(t.shape), p);
    for (int64_t d : t.shape) p = PutVarint(static_cast<uint64_t>(d), p);
  }
  return PutBytesField(kTensorData, t.data, p);
}

}  // namespace

absl::Status WritePredictResponse(const PredictResponseFields& f,
                                  const std::vector<Tensor>& outputs, grpc::ByteBuffer* out) {
  size_t total = DelimitedFieldSize(kModelName, f.model_name.size()) +
                 DelimitedFieldSize(kModelVersion, f.model_version.size()) +
                 DelimitedFieldSize(kDevice, f.device.size()) +
                 IntFieldSize(kQueueTime, f.queue_time_us) +
                 IntFieldSize(kComputeTime, f.compute_time_us) +
                 IntFieldSize(kBatchRows, f.batch_rows);
  // Each output's size is needed twice (its length prefix, the total); a
  // response has a handful of outputs, so it is computed again, not stored.
  for (const Tensor& t : outputs) total += DelimitedFieldSize(kOutputs, TensorBytes(t), true);
  if (total > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InternalError(absl::StrCat(
        "cannot serialise the metalserve.v1.PredictResponse: ", total,
        " bytes is over protobuf's 2 GiB limit"));
  }
  grpc::Slice slice(total);
  char* p = reinterpret_cast<char*>(const_cast<uint8_t*>(slice.begin()));
  char* const begin = p;
  p = PutBytesField(kModelName, f.model_name, p);
  p = PutBytesField(kModelVersion, f.model_version, p);
  p = PutBytesField(kDevice, f.device, p);
  for (const Tensor& t : outputs) p = PutTensor(t, TensorBytes(t), p);
  p = PutIntField(kQueueTime, f.queue_time_us, p);
  p = PutIntField(kComputeTime, f.compute_time_us, p);
  p = PutIntField(kBatchRows, f.batch_rows, p);
  if (static_cast<size_t>(p - begin) != total) {
    return absl::InternalError(absl::StrCat("PredictResponse writer wrote ", p - begin,
                                            " bytes of the ", total, " it sized"));
  }
  grpc::ByteBuffer written(&slice, 1);
  out->Swap(&written);
  return absl::OkStatus();
}

}  // namespace metalserve
