// KServe v2 (Open Inference Protocol) tensors <-> the project's tensor types:
// ModelInferRequest inputs (raw_input_contents or typed
// `contents`) -> RawInput and the request's output selection (the response
// is written by response_writer.h). The datatype table is
// proto/dtype/dtype_map.h, shared with the client.
//
// Free functions with no state: thread-safe. Ownership: a decoded RawInput
// holds a string_view into the request (raw_input_contents) or into the
// caller's `storage` (bytes converted from typed contents); the caller keeps
// both alive as long as the inputs are used (the KServe task owns them until
// its RPC finishes). Nothing here keeps a pointer past the call.
#ifndef METALSERVE_SERVER_SERVICE_KSERVE_CODEC_H_
#define METALSERVE_SERVER_SERVICE_KSERVE_CODEC_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "inference/grpc_service.pb.h"
#include "common/tensor.h"
#include "server/runtime/runner.h"
#include "server/service/shared_memory.h"
#include "server/service/tensor_codec.h"

namespace metalserve {

// Decodes the request's inputs, not yet validated against the model.
// `storage` receives the bytes converted from typed contents (one entry per
// input; empty when the request uses raw_input_contents); the views point
// into it or into `request`. INVALID_ARGUMENT naming the field and value for
// an unknown datatype, a raw_input_contents count that does not match the
// inputs, raw and typed contents mixed, the wrong or several contents fields
// set, or a value out of its datatype's range.
// `raw_pieces`, when given, stands for the request's raw_input_contents,
// read in place from gRPC's slices (sliced_request.h; the request itself then
// has none): each input's bytes are its entry's pieces, and the checks and
// messages are those of raw_input_contents.
//
// An input whose parameters name a "shared_memory_region" (with
// "shared_memory_byte_size", and "shared_memory_offset" or 0; int64 or
// uint64 parameters, as Triton takes them) is read from that registered
// region (shared_memory.h) and has neither contents nor a raw_input_contents
// entry: raw_input_contents then holds one entry per other input, in order.
// With `shm` null, or its `regions` null, such an input is refused with
// `shm->refusal` (PERMISSION_DENIED for a peer not allowed), or when that is
// OK with INVALID_ARGUMENT "not accepted here"; otherwise each view taken is appended to `shm->views`, which the
// caller keeps as long as the inputs are used. INVALID_ARGUMENT naming the
// parameter for a wrong type, a byte size or offset without a region, a
// region without a byte size, contents set as well, or a range the region
// does not hold.
struct SharedMemoryInputs {
  const SharedMemoryRegions* regions = nullptr;
  absl::Status refusal;  // OK: the INVALID_ARGUMENT above (built only when used)
  std::vector<SharedMemoryRegions::Bytes> views;
};
absl::StatusOr<std::vector<RawInput>> DecodeKServeInputs(
    const inference::ModelInferRequest& request, std::vector<std::string>* storage,
    const std::vector<std::vector<absl::string_view>>* raw_pieces = nullptr,
    SharedMemoryInputs* shm = nullptr);
// Whether any input names a "shared_memory_region" (so that the caller
// resolves shared-memory access only for requests that use it).
bool NamesSharedMemory(const inference::ModelInferRequest& request);

// Indices into `specs` (the model's outputs) of the outputs the request asks
// for, in the request's order; all of them, in the model's order, when it
// names none. INVALID_ARGUMENT naming outputs[i].name for a name that is not
// an output of the model or one named twice, or one that asks for a
// shared-memory region (outputs are always returned in the response).
absl::StatusOr<std::vector<size_t>> SelectKServeOutputs(
    const inference::ModelInferRequest& request, const std::vector<TensorSpec>& specs);

// The platform ModelMetadata and ModelConfig report (Triton's name).
inline constexpr char kKServePlatform[] = "pytorch_libtorch";

// The served model's KServe ModelConfig, as the ModelConfig RPC and REST's
// GET /v2/models/{name}/config answer it: name, platform, max_batch_size,
// inputs and outputs with their config datatype and dims (batch dimension
// left out, as Triton's dims are), and parameters["device_choice"]: how the
// device was chosen, as JSON text (device_choice_json.h).
inference::ModelConfig KServeModelConfig(const ModelInfo& info, int64_t max_batch_size);

// The request's parameters["priority"] (an int64 or uint64 parameter, as
// Triton reads it), 0 when absent; INVALID_ARGUMENT for another type or a
// value beyond int range. The batcher checks the range.
absl::StatusOr<int> KServePriority(const inference::ModelInferRequest& request);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_KSERVE_CODEC_H_
