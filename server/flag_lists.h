// List-valued flags (comma-separated) read into numbers and durations. A
// value that does not parse logs an error naming the flag and the value and
// exits the process with status 2, as every flag error of metalserve does:
// only main's flag reading calls these.
#ifndef METALSERVE_SERVER_FLAG_LISTS_H_
#define METALSERVE_SERVER_FLAG_LISTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace metalserve {

// Integers; empty items are skipped.
std::vector<int64_t> ParseSizes(const std::vector<std::string>& items,
                                absl::string_view flag = "--allowed_batch_sizes");

// Durations ("50ms", "1s"; a bare "0" is zero).
std::vector<absl::Duration> ParseDurations(const std::vector<std::string>& items,
                                           absl::string_view flag);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_FLAG_LISTS_H_
