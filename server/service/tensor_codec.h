// Conversion between the native proto tensors and the project's tensor
// types, and validation of a request against the model's signature.
//
// Free functions with no state: thread-safe. Ownership: RawInput and
// InputView hold string_views into the request message, which the caller
// keeps alive (the RPC's request outlives its task); nothing here copies
// tensor bytes.
#ifndef METALSERVE_SERVER_SERVICE_TENSOR_CODEC_H_
#define METALSERVE_SERVER_SERVICE_TENSOR_CODEC_H_

#include <vector>

#include "absl/status/statusor.h"
#include "metalserve/v1/inference.pb.h"
#include "common/tensor.h"
#include "server/service/infer_task.h"
#include "server/service/sliced_request.h"

namespace metalserve {

// A decoded, not yet validated input.
struct RawInput {
  std::string name;
  DType dtype = DType::kInvalid;
  std::string dtype_label;  // as the request spelled it, for messages
  std::vector<int64_t> shape;
  absl::string_view data;
  // When not empty: the bytes in order, in several pieces (data is then
  // empty); a request read from gRPC's slices (sliced_request.h).
  std::vector<absl::string_view> pieces;

  size_t ByteSize() const {
    size_t n = data.size();
    for (absl::string_view p : pieces) n += p.size();
    return n;
  }
};

// Checks `inputs` against `specs` and returns them in the model's input
// order. INVALID_ARGUMENT, naming the field and the offending value, for: no
// inputs, unknown or duplicate names, missing inputs, wrong dtype, wrong rank
// or dimension, batch dimension < 1 or differing between inputs, negative
// dimensions, an element count that overflows, and a byte length other than
// product(shape) x item size. `field` prefixes field names ("inputs"). The
// inputs' shapes and pieces move into the views.
absl::StatusOr<std::vector<InputView>> ValidateInputs(
    std::vector<RawInput> inputs, const std::vector<TensorSpec>& specs,
    absl::string_view field = "inputs");

// Decodes a native PredictRequest's inputs (views into `request`).
std::vector<RawInput> DecodeInputs(const metalserve::v1::PredictRequest& request);
// The same for a request read from slices: each input's bytes are views into
// the slices (or into the skeleton when it was parsed the ordinary way).
std::vector<RawInput> DecodeInputs(const SlicedPredictRequest& request);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_TENSOR_CODEC_H_
