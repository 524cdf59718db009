// ResponseFields: an inference answer's fields other than its outputs, as
// every protocol answers them (response_writer.h writes them for gRPC,
// rest_codec.h encodes them as REST's JSON header).
#ifndef METALSERVE_SERVER_SERVICE_RESPONSE_FIELDS_H_
#define METALSERVE_SERVER_SERVICE_RESPONSE_FIELDS_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace metalserve {

// `id` is KServe's (the request's id, echoed); Predict has none. The three
// times and rows are PredictResponse fields, and ModelInferResponse (and
// REST) int64 parameters of the same names. The views point into the
// serving model's info and the request, which outlive the answer's writing.
struct ResponseFields {
  absl::string_view model_name;
  absl::string_view model_version;
  absl::string_view device;  // Predict only
  absl::string_view id;      // ModelInfer and REST only
  int64_t queue_time_us = 0;
  int64_t compute_time_us = 0;
  int64_t batch_rows = 0;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_RESPONSE_FIELDS_H_
