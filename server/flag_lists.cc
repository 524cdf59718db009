#include "server/flag_lists.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "glog/logging.h"

namespace metalserve {

std::vector<int64_t> ParseSizes(const std::vector<std::string>& items,
                                absl::string_view flag) {
  std::vector<int64_t> out;
  for (const std::string& s : items) {
    if (s.empty()) continue;
    int64_t v;
    if (!absl::SimpleAtoi(s, &v)) {
      LOG(ERROR) << flag << ": '" << s << "' is not an integer";
      std::exit(2);
    }
    out.push_back(v);
  }
  return out;
}

std::vector<absl::Duration> ParseDurations(const std::vector<std::string>& items,
                                           absl::string_view flag) {
  std::vector<absl::Duration> out;
  for (const std::string& s : items) {
    absl::Duration d;
    if (s == "0") {
      d = absl::ZeroDuration();
    } else if (!absl::ParseDuration(s, &d)) {
      LOG(ERROR) << flag << ": '" << s << "' is not a duration (e.g. 50ms)";
      std::exit(2);
    }
    out.push_back(d);
  }
  return out;
}

}  // namespace metalserve
