// Reads a native PredictRequest, or a KServe ModelInferRequest's
// raw_input_contents, from the slices gRPC received, without copying its
// tensor bytes. gRPC hands a request over as a list of slices
// (8 to 64 KiB each for a large message); parsing it with protobuf copies
// every tensor's bytes into a std::string, which was the largest memmove in
// the server's profile (issue 20). Here the wire format is walked once: each
// inputs[i].data is kept as views into the slices (one view per slice it
// spans), everything else is copied into a small "skeleton" message and
// parsed by protobuf as before, so model_name, names, dtypes and shapes keep
// protobuf's checks.
//
// A ModelInferRequest is walked the same way at its top level: each
// raw_input_contents entry is kept as views, the rest (inputs, typed
// contents included, outputs, parameters) goes into the skeleton.
//
// Anything the walk does not take for a well-formed request (a
// truncated field, a group, a length past its message) returns false, and
// the caller parses the body the ordinary way (ParseRequestBody), so a
// malformed body gets the same answer as before.
//
// Held slices stay counted in gRPC's memory quota (--memory_quota_bytes)
// for as long as the request lives, where a parsed copy did not count; so the
// bytes held this way are bounded by a HeldBytesBudget (the server gives it
// half the quota), and a request beyond it is parsed the ordinary way. A
// deep queue of large requests therefore never leaves gRPC's transport
// without room to read.
//
// Thread-safety: HeldBytesBudget is thread-safe; the rest are values.
// Lifetime: the views point into `slices`, which hold references to gRPC's
// buffers; keep the SlicedPredictRequest alive as long as the views are used.
#ifndef METALSERVE_SERVER_SERVICE_SLICED_REQUEST_H_
#define METALSERVE_SERVER_SERVICE_SLICED_REQUEST_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "inference/grpc_service.pb.h"
#include "metalserve/v1/inference.pb.h"

namespace metalserve {

// The bytes of received requests held as slices at once, at most `limit`.
class HeldBytesBudget {
 public:
  explicit HeldBytesBudget(int64_t limit) : limit_(limit) {}
  // Takes `n` bytes; false (taking nothing) when they would pass the limit.
  bool TryTake(int64_t n) {
    int64_t held = held_.load();
    do {
      if (held + n > limit_) return false;
    } while (!held_.compare_exchange_weak(held, held + n));
    return true;
  }
  void Give(int64_t n) { held_.fetch_sub(n); }
  int64_t held() const { return held_.load(); }

 private:
  const int64_t limit_;
  std::atomic<int64_t> held_{0};
};

// Owns its slices and what it took from its budget (given back when it is
// destroyed). Not copyable.
struct HeldSlices {
  HeldSlices() = default;
  HeldSlices(const HeldSlices&) = delete;
  HeldSlices& operator=(const HeldSlices&) = delete;
  ~HeldSlices() {
    if (budget != nullptr) budget->Give(held_bytes);
  }

  HeldBytesBudget* budget = nullptr;
  int64_t held_bytes = 0;
  std::vector<grpc::Slice> slices;  // the received bytes, referenced, not copied
};

struct SlicedPredictRequest : HeldSlices {
  // The request with every inputs[i].data left empty.
  metalserve::v1::PredictRequest skeleton;
  // inputs[i].data as views into `slices`, in order; empty when the input
  // has no data field.
  std::vector<std::vector<absl::string_view>> data;
};

struct SlicedModelInferRequest : HeldSlices {
  // The request without raw_input_contents.
  inference::ModelInferRequest skeleton;
  // raw_input_contents as views into `slices`: one entry per occurrence of
  // the field, in order (an empty entry holds no views).
  std::vector<std::vector<absl::string_view>> raw_input_contents;
};

// Fills a fresh `out` from `body` (which stays intact); false when `budget`
// has no room for the body's bytes or the body is not a PredictRequest the
// walk takes (see the file comment).
bool ParseSlicedPredictRequest(const grpc::ByteBuffer& body, HeldBytesBudget* budget,
                               SlicedPredictRequest* out);
// The same for a KServe ModelInferRequest.
bool ParseSlicedModelInferRequest(const grpc::ByteBuffer& body, HeldBytesBudget* budget,
                                  SlicedModelInferRequest* out);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_SLICED_REQUEST_H_
