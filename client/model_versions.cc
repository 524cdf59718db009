#include "client/model_versions.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"

namespace metalserve::client {

std::optional<int64_t> VersionNumber(absl::string_view version) {
  if (version.empty() ||
      !std::all_of(version.begin(), version.end(), absl::ascii_isdigit)) {
    return std::nullopt;
  }
  int64_t n = 0;
  if (!absl::SimpleAtoi(version, &n)) return std::nullopt;  // overflow
  return n;
}

bool VersionOrder::operator()(const std::string& a, const std::string& b) const {
  const std::optional<int64_t> na = VersionNumber(a);
  const std::optional<int64_t> nb = VersionNumber(b);
  if (na && nb) return *na != *nb ? *na < *nb : a < b;  // "7" before "07"
  if (na || nb) return na.has_value();
  return a < b;
}

ModelVersionWatch::ModelVersionWatch(size_t workers)
    : size_(std::max<size_t>(workers, 1)), workers_(new Worker[size_]) {}

int64_t ModelVersionWatch::NewestSeen(size_t worker) const {
  Worker& w = At(worker);
  absl::MutexLock l(&w.mu);
  return w.newest;
}

bool ModelVersionWatch::Record(size_t worker, int64_t newest_at_send,
                               absl::string_view version) {
  const std::optional<int64_t> number = VersionNumber(version);
  const bool regression = number.has_value() && *number < newest_at_send;
  Worker& w = At(worker);
  absl::MutexLock l(&w.mu);
  ++w.responses[std::string(version)];
  if (regression) ++w.regressions;
  if (number.has_value()) w.newest = std::max(w.newest, *number);
  return regression;
}

ModelVersionStats ModelVersionWatch::Stats() const {
  ModelVersionStats stats;
  for (size_t i = 0; i < size_; ++i) {
    Worker& w = workers_[i];
    absl::MutexLock l(&w.mu);
    stats.regressions += w.regressions;
    for (const auto& [version, n] : w.responses) stats.responses[version] += n;
  }
  return stats;
}

}  // namespace metalserve::client
