// How the serving device was chosen (ModelInfo::device_choice), as the JSON
// object the KServe front ends carry: an extension field `device_choice` in
// REST `GET /v2/models/{name}[/versions/{v}]`, and, as that object's text,
// ModelConfig's `parameters["device_choice"].string_value` (gRPC ModelConfig
// and REST `/config`), where Triton's clients read a model's parameters.
// KServe's ModelMetadataResponse has no field for it; clients that do not
// know the field ignore it.
//
//   {"requested": "auto", "device": "cpu", "reason": "measured",
//    "timings": [{"device": "cpu", "batch_size": 1, "forward_us": 67}, ...],
//    "skipped": ["mps: probe failed: ..."]}
//
// `device` is the device serving; `forward_us` the median forward time in
// whole microseconds (rounded); the other fields as in runner.h.
// Thread-safety: pure functions.
#ifndef METALSERVE_SERVER_SERVICE_DEVICE_CHOICE_JSON_H_
#define METALSERVE_SERVER_SERVICE_DEVICE_CHOICE_JSON_H_

#include <string>

#include "nlohmann/json.hpp"
#include "server/runtime/runner.h"

namespace metalserve {

// The key of ModelConfig's parameters map that carries the object's text.
inline constexpr char kDeviceChoiceParameter[] = "device_choice";

// The object above; null when the runner did not record a choice (a runner
// other than the torch runtime's: reason empty).
nlohmann::json DeviceChoiceJson(const ModelInfo& info);

// DeviceChoiceJson(info) as compact text; "" when it is null.
std::string DeviceChoiceText(const ModelInfo& info);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_DEVICE_CHOICE_JSON_H_
