// The one table between the wire's datatypes and the project's DType: the
// native metalserve.v1.DataType enum, the KServe v2 (Open Inference
// Protocol) datatype strings ("FP32", "BF16", ...) and KServe's model
// configuration enum (inference.DataType). The service (native and KServe
// handlers) and the client (request builder, KServe codec) both map through
// here, so a dtype added to DType is added in one row, and nothing relies on
// two enums sharing their numbering.
//
// Why a library of its own: it includes the generated protos, so it cannot
// live in common/ (torch-free *and* protobuf-free: the runtime links common
// and must never see protobuf headers), nor in server/service (the client
// would then link the server). It sits one layer above both proto and common
// and below service and client.
//
// Thread-safety: free functions over a constant table; no state.
#ifndef METALSERVE_PROTO_DTYPE_DTYPE_MAP_H_
#define METALSERVE_PROTO_DTYPE_DTYPE_MAP_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tensor.h"
#include "inference/grpc_service.pb.h"
#include "metalserve/v1/inference.pb.h"

namespace metalserve {

// The DType of a native datatype. InvalidArgument naming the value for
// DATA_TYPE_UNSPECIFIED and for a number the enum does not define (a newer
// client, or a raw wire value).
absl::StatusOr<DType> DTypeFromProto(v1::DataType dtype);
// The native datatype of `dtype`; DATA_TYPE_UNSPECIFIED for kInvalid.
v1::DataType ProtoDataType(DType dtype);

// The DType of a KServe datatype string. The names are upper case, as the
// specification spells them; InvalidArgument naming the string otherwise,
// and for a datatype this project does not serve (e.g. "BYTES", "FP8").
absl::StatusOr<DType> DTypeFromKServe(absl::string_view datatype);
// The KServe datatype string of `dtype` ("FP32", ...); empty for kInvalid.
absl::string_view KServeDatatype(DType dtype);
// KServe's model configuration enum for `dtype`; TYPE_INVALID for kInvalid.
inference::DataType KServeConfigType(DType dtype);
// Every KServe datatype string served, in table order: "FP32, FP16, ...".
std::string KServeDatatypeList();

}  // namespace metalserve

#endif  // METALSERVE_PROTO_DTYPE_DTYPE_MAP_H_
