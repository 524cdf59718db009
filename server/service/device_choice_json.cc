// ModelInfo::device_choice as JSON; see device_choice_json.h.
#include "server/service/device_choice_json.h"

#include <cmath>

namespace metalserve {

nlohmann::json DeviceChoiceJson(const ModelInfo& info) {
  const DeviceChoiceInfo& choice = info.device_choice;
  if (choice.reason.empty()) return nullptr;
  nlohmann::json timings = nlohmann::json::array();
  for (const DeviceChoiceInfo::Timing& t : choice.timings) {
    timings.push_back({{"device", t.device},
                       {"batch_size", t.batch_size},
                       {"forward_us", std::llround(absl::ToDoubleMicroseconds(t.forward))}});
  }
  return {{"requested", choice.requested},
          {"device", info.device},
          {"reason", choice.reason},
          {"timings", std::move(timings)},
          {"skipped", choice.skipped}};
}

std::string DeviceChoiceText(const ModelInfo& info) {
  const nlohmann::json j = DeviceChoiceJson(info);
  return j.is_null() ? std::string() : j.dump();
}

}  // namespace metalserve
