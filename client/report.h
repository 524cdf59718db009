// Formats load-run results as text (people), JSON or CSV (machines), and
// decides the exit code.
//
// Latencies are reported in microseconds; throughput counts successful
// calls only. The server's own queue and compute times (from responses) are
// reported as p50/p90/p99 and mean; errors as counts by code plus the first
// kMaxMessagesPerCode distinct messages of each code (text and JSON); the
// successful answers per model version and the count of version regressions
// (model_versions.h) in text and JSON ("versions", "model_version_regressions";
// the CSV columns are unchanged). JSON
// is {"runs": [...]}, one object per sweep level, written with nlohmann-json
// (latencies rounded to 0.1 us, rates to 0.001/s); CSV is a header and one row
// per level, errors as "CODE=n;CODE=n".
//
// Thread-safety: free functions over values.
#ifndef METALSERVE_CLIENT_REPORT_H_
#define METALSERVE_CLIENT_REPORT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/load_generator.h"

namespace metalserve::client {

// Exit status when a run's error rate exceeds --max_error_rate.
inline constexpr int kExitErrorRateExceeded = 2;

struct RunReport {
  LoadSpec spec;
  RunStats stats;
};

enum class OutputFormat { kText, kJson, kCsv };
absl::StatusOr<OutputFormat> ParseOutputFormat(absl::string_view text);

std::string FormatReports(const std::vector<RunReport>& reports,
                          OutputFormat format);
// One line for a live terminal status, without a newline.
std::string FormatProgress(const Progress& p);

// 0, or kExitErrorRateExceeded when any run's error rate is above
// `max_error_rate` (a fraction in [0, 1]).
int ExitCodeFor(const std::vector<RunReport>& reports, double max_error_rate);

}  // namespace metalserve::client

#endif  // METALSERVE_CLIENT_REPORT_H_
