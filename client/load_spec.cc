#include "client/load_spec.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace metalserve::client {

int64_t RunStats::ErrorCount() const {
  int64_t n = 0;
  for (const auto& [name, count] : errors) n += count;
  return n;
}

double RunStats::ErrorRate() const {
  const int64_t total = Total();
  return total == 0 ? 0.0 : static_cast<double>(ErrorCount()) / total;
}

double RunStats::RequestsPerSecond() const {
  const double s = absl::ToDoubleSeconds(elapsed);
  return s > 0 ? ok / s : 0.0;
}

double RunStats::RowsPerSecond() const {
  const double s = absl::ToDoubleSeconds(elapsed);
  return s > 0 ? rows / s : 0.0;
}

double RunStats::MeanServerQueueUs() const {
  return ok > 0 ? static_cast<double>(server_queue_us_sum) / ok : 0.0;
}
double RunStats::MeanServerComputeUs() const {
  return ok > 0 ? static_cast<double>(server_compute_us_sum) / ok : 0.0;
}
double RunStats::MeanBatchRows() const {
  return ok > 0 ? static_cast<double>(server_batch_rows_sum) / ok : 0.0;
}

absl::StatusOr<std::vector<int>> ParseConcurrencySweep(absl::string_view text) {
  constexpr int kMaxLevels = 64;
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--concurrency='", text, "': ", why,
        " (want N, a,b,c, lo:hi:xK or lo:hi:+K)"));
  };
  std::vector<int> levels;
  const std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  if (parts.size() == 1) {
    for (absl::string_view p : absl::StrSplit(text, ',')) {
      int v;
      if (!absl::SimpleAtoi(p, &v) || v < 1) return bad("levels must be >= 1");
      levels.push_back(v);
    }
  } else if (parts.size() == 3) {
    int lo, hi, step;
    absl::string_view s = parts[2];
    const bool multiply = absl::ConsumePrefix(&s, "x");
    if (!multiply && !absl::ConsumePrefix(&s, "+")) return bad("step needs x or +");
    if (!absl::SimpleAtoi(parts[0], &lo) || !absl::SimpleAtoi(parts[1], &hi) ||
        !absl::SimpleAtoi(s, &step) || lo < 1 || hi < lo) {
      return bad("need 1 <= lo <= hi");
    }
    if ((multiply && step < 2) || (!multiply && step < 1)) {
      return bad("step must grow the level");
    }
    for (int64_t v = lo; v <= hi && levels.size() <= kMaxLevels;
         v = multiply ? v * step : v + step) {
      levels.push_back(static_cast<int>(v));
    }
  } else {
    return bad("malformed");
  }
  if (levels.empty() || levels.size() > kMaxLevels) return bad("1 to 64 levels");
  return levels;
}

absl::StatusOr<std::vector<double>> ParseRateSweep(absl::string_view text) {
  constexpr size_t kMaxLevels = 64;
  std::vector<double> rates;
  if (text.empty() || text == "0") return rates;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    double r;
    if (!absl::SimpleAtod(part, &r) || !(r > 0) || !std::isfinite(r)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--rate='", text, "': '", part,
          "' is not a rate > 0 (want R or a list R1,R2,... in requests/s)"));
    }
    rates.push_back(r);
  }
  if (rates.size() > kMaxLevels) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rate='", text, "': ", rates.size(), " rates; at most 64"));
  }
  return rates;
}

std::string TruncateMessage(absl::string_view message) {
  if (message.size() <= kMaxMessageBytes) return std::string(message);
  return absl::StrCat(message.substr(0, kMaxMessageBytes - 3), "...");
}

std::string StatusCodeName(grpc::StatusCode code) {
  // grpc::StatusCode and absl::StatusCode share their values.
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

}  // namespace metalserve::client
