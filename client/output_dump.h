// Writes a response's output tensors as JSON, for comparing clients:
//
//   {"outputs":[{"name":"output","datatype":"FP32","shape":[1,10],
//                "data":[0.123456789, ...]}]}
//
// Values are decoded from the raw little-endian bytes (FP16/BF16 widened to
// float); floats are printed with enough digits to round-trip (9 for
// float32, FP16 and BF16, the shortest round-trip form for FP64; whole
// values without ".0"), NaN and
// the infinities as the strings "NaN", "Infinity", "-Infinity". Written with
// nlohmann-json, so names are escaped as JSON requires.
//
// Thread-safety: free functions over values.
#ifndef METALSERVE_CLIENT_OUTPUT_DUMP_H_
#define METALSERVE_CLIENT_OUTPUT_DUMP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace metalserve::client {

struct DumpedTensor {
  std::string name;
  std::string datatype;  // KServe spelling: "FP32", "INT64", ...
  std::vector<int64_t> shape;
  std::string data;  // raw little-endian bytes
};

// InvalidArgument naming the tensor when its byte count does not fit its
// datatype, or the datatype is unknown.
absl::Status OutputsJson(const std::vector<DumpedTensor>& outputs, std::string* json);
// OutputsJson written to `path`; Unavailable naming the path when it cannot
// be written.
absl::Status WriteOutputsJson(const std::vector<DumpedTensor>& outputs,
                              const std::string& path);

}  // namespace metalserve::client

#endif  // METALSERVE_CLIENT_OUTPUT_DUMP_H_
