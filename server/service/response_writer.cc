#include "server/service/response_writer.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "glog/logging.h"
#include "grpcpp/support/slice.h"
#include "proto/dtype/dtype_map.h"

namespace metalserve {
namespace {

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
// values take ten bytes). A singular proto3 field is left out when zero
// (`always` is for a oneof member, written whenever it is set).
size_t IntFieldSize(int field, int64_t v, bool always = false) {
  if (v == 0 && !always) return 0;
  return VarintSize(Tag(field, kVarint)) + VarintSize(static_cast<uint64_t>(v));
}

char* PutIntField(int field, int64_t v, char* p, bool always = false) {
  if (v == 0 && !always) return p;
  p = PutVarint(Tag(field, kVarint), p);
  return PutVarint(static_cast<uint64_t>(v), p);
}

// A length-delimited field of `length` bytes. A singular string or bytes
// field is left out when empty; `always` is for an embedded message, a map
// entry and an element of a repeated field, written even when empty.
size_t DelimitedFieldSize(int field, size_t length, bool always = false) {
  if (length == 0 && !always) return 0;
  return VarintSize(Tag(field, kLengthDelimited)) + VarintSize(length) + length;
}

char* PutDelimitedHeader(int field, size_t length, char* p) {
  p = PutVarint(Tag(field, kLengthDelimited), p);
  return PutVarint(length, p);
}

char* PutBytesField(int field, absl::string_view bytes, char* p, bool always = false) {
  if (bytes.empty() && !always) return p;
  p = PutDelimitedHeader(field, bytes.size(), p);
  std::memcpy(p, bytes.data(), bytes.size());
  return p + bytes.size();
}

size_t PackedShapeBytes(const std::vector<int64_t>& shape) {
  size_t n = 0;
  for (int64_t d : shape) n += VarintSize(static_cast<uint64_t>(d));
  return n;
}

char* PutPackedShape(int field, const std::vector<int64_t>& shape, char* p) {
  if (shape.empty()) return p;
  p = PutDelimitedHeader(field, PackedShapeBytes(shape), p);
  for (int64_t d : shape) p = PutVarint(static_cast<uint64_t>(d), p);
  return p;
}

// One slice of `total` bytes that `write` fills; `out` holds it after.
template <typename Write>
absl::Status WriteSlice(absl::string_view message, size_t total, Write write,
                        grpc::ByteBuffer* out) {
  if (total > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InternalError(absl::StrCat("cannot serialise the ", message, ": ", total,
                                            " bytes is over protobuf's 2 GiB limit"));
  }
  // One slice of the whole size, as gRPC's own serialisation takes for a
  // message up to 1 MiB (above that it writes blocks of up to 1 MiB; one
  // block here means a response over process_setup.cc's 32 MiB mmap
  // threshold gets fresh pages, which no model of this project's sizes
  // reaches). A fresh slice of our own, inline in `slice` when small:
  // nothing else reads it until the ByteBuffer below takes it.
  grpc::Slice slice(total);
  char* const begin = reinterpret_cast<char*>(const_cast<uint8_t*>(slice.begin()));
  const char* const end = write(begin);
  // The sizes and the writes come from the same helpers; a difference is a
  // bug that has already written past the slice, so it stops the process.
  CHECK_EQ(static_cast<size_t>(end - begin), total) << "the " << message << " writer";
  grpc::ByteBuffer written(&slice, 1);
  out->Swap(&written);
  return absl::OkStatus();
}

// metalserve.v1.PredictResponse and its Tensor (inference.proto).
namespace predict {

constexpr int kModelName = 1, kModelVersion = 2, kDevice = 3, kOutputs = 4, kQueueTime = 5,
              kComputeTime = 6, kBatchRows = 7;
constexpr int kTensorName = 1, kTensorDtype = 2, kTensorShape = 3, kTensorData = 4;

size_t TensorBytes(const Tensor& t) {
  return DelimitedFieldSize(kTensorName, t.name.size()) +
         IntFieldSize(kTensorDtype, ProtoDataType(t.dtype)) +
         DelimitedFieldSize(kTensorShape, PackedShapeBytes(t.shape)) +
         DelimitedFieldSize(kTensorData, t.data.size());
}

char* PutTensor(const Tensor& t, char* p) {
  p = PutDelimitedHeader(kOutputs, TensorBytes(t), p);
  p = PutBytesField(kTensorName, t.name, p);
  p = PutIntField(kTensorDtype, ProtoDataType(t.dtype), p);
  p = PutPackedShape(kTensorShape, t.shape, p);
  return PutBytesField(kTensorData, t.data, p);
}

}  // namespace predict

// inference.ModelInferResponse, its InferOutputTensor and the InferParameter
// values of its parameters map (grpc_service.proto).
namespace kserve {

constexpr int kModelName = 1, kModelVersion = 2, kId = 3, kParameters = 4, kOutputs = 5,
              kRawOutputContents = 6;
constexpr int kOutputName = 1, kOutputDatatype = 2, kOutputShape = 3;
constexpr int kMapKey = 1, kMapValue = 2;
constexpr int kInt64Param = 2;

// The parameters, in key order (protobuf's deterministic order).
struct Parameter {
  absl::string_view key;
  int64_t value;
};

size_t ParameterValueBytes(int64_t v) { return IntFieldSize(kInt64Param, v, /*always=*/true); }

size_t ParameterEntryBytes(const Parameter& p) {
  return DelimitedFieldSize(kMapKey, p.key.size(), true) +
         DelimitedFieldSize(kMapValue, ParameterValueBytes(p.value), true);
}

char* PutParameter(const Parameter& p, char* ptr) {
  ptr = PutDelimitedHeader(kParameters, ParameterEntryBytes(p), ptr);
  ptr = PutBytesField(kMapKey, p.key, ptr, true);
  ptr = PutDelimitedHeader(kMapValue, ParameterValueBytes(p.value), ptr);
  return PutIntField(kInt64Param, p.value, ptr, true);
}

size_t OutputBytes(const Tensor& t) {
  return DelimitedFieldSize(kOutputName, t.name.size()) +
         DelimitedFieldSize(kOutputDatatype, KServeDatatype(t.dtype).size()) +
         DelimitedFieldSize(kOutputShape, PackedShapeBytes(t.shape));
}

char* PutOutput(const Tensor& t, char* p) {
  p = PutDelimitedHeader(kOutputs, OutputBytes(t), p);
  p = PutBytesField(kOutputName, t.name, p);
  p = PutBytesField(kOutputDatatype, KServeDatatype(t.dtype), p);
  return PutPackedShape(kOutputShape, t.shape, p);
}

}  // namespace kserve

}  // namespace

ResponseFields ServedResponseFields(const ModelInfo& info, const RunStats& stats) {
  return {.model_name = info.name,
          .model_version = info.version,
          .device = info.device,
          .queue_time_us = absl::ToInt64Microseconds(stats.queue_time),
          .compute_time_us = absl::ToInt64Microseconds(stats.compute_time),
          .batch_rows = stats.batch_rows};
}

absl::Status WritePredictResponse(const ResponseFields& f, const std::vector<Tensor>& outputs,
                                  grpc::ByteBuffer* out) {
  using namespace predict;  // NOLINT: the field numbers
  size_t total = DelimitedFieldSize(kModelName, f.model_name.size()) +
                 DelimitedFieldSize(kModelVersion, f.model_version.size()) +
                 DelimitedFieldSize(kDevice, f.device.size()) +
                 IntFieldSize(kQueueTime, f.queue_time_us) +
                 IntFieldSize(kComputeTime, f.compute_time_us) +
                 IntFieldSize(kBatchRows, f.batch_rows);
  // A response has a handful of outputs: each one's size is computed again
  // for its length prefix rather than stored.
  for (const Tensor& t : outputs) total += DelimitedFieldSize(kOutputs, TensorBytes(t), true);
  return WriteSlice("metalserve.v1.PredictResponse", total, [&](char* p) {
    p = PutBytesField(kModelName, f.model_name, p);
    p = PutBytesField(kModelVersion, f.model_version, p);
    p = PutBytesField(kDevice, f.device, p);
    for (const Tensor& t : outputs) p = PutTensor(t, p);
    p = PutIntField(kQueueTime, f.queue_time_us, p);
    p = PutIntField(kComputeTime, f.compute_time_us, p);
    return PutIntField(kBatchRows, f.batch_rows, p);
  }, out);
}

absl::Status WriteModelInferResponse(const ResponseFields& f,
                                     const std::vector<Tensor>& outputs,
                                     const std::vector<size_t>& selected,
                                     grpc::ByteBuffer* out) {
  using namespace kserve;  // NOLINT: the field numbers
  const Parameter parameters[] = {{"batch_rows", f.batch_rows},
                                  {"compute_time_us", f.compute_time_us},
                                  {"queue_time_us", f.queue_time_us}};
  size_t total = DelimitedFieldSize(kModelName, f.model_name.size()) +
                 DelimitedFieldSize(kModelVersion, f.model_version.size()) +
                 DelimitedFieldSize(kId, f.id.size());
  for (const Parameter& p : parameters) {
    total += DelimitedFieldSize(kParameters, ParameterEntryBytes(p), true);
  }
  for (size_t s : selected) {
    total += DelimitedFieldSize(kOutputs, OutputBytes(outputs[s]), true) +
             DelimitedFieldSize(kRawOutputContents, outputs[s].data.size(), true);
  }
  return WriteSlice("inference.ModelInferResponse", total, [&](char* p) {
    p = PutBytesField(kModelName, f.model_name, p);
    p = PutBytesField(kModelVersion, f.model_version, p);
    p = PutBytesField(kId, f.id, p);
    for (const Parameter& param : parameters) p = PutParameter(param, p);
    for (size_t s : selected) p = PutOutput(outputs[s], p);
    for (size_t s : selected) {
      p = PutBytesField(kRawOutputContents, outputs[s].data, p, /*always=*/true);
    }
    return p;
  }, out);
}

}  // namespace metalserve
