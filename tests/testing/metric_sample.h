// Reading one sample out of a Prometheus text-format scrape, for tests that
// assert the server's own counters (what the server did, not what the
// client saw).
#ifndef METALSERVE_TESTS_TESTING_METRIC_SAMPLE_H_
#define METALSERVE_TESTS_TESTING_METRIC_SAMPLE_H_

#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace metalserve::testing {

// Value of the sample named exactly `series` (name plus labels, as the text
// format writes them: labels in name order) in `scrape`; nullopt when the
// series is absent.
inline std::optional<double> Sample(const std::string& scrape, absl::string_view series) {
  const std::string prefix = absl::StrCat(series, " ");
  for (absl::string_view line : absl::StrSplit(scrape, '\n')) {
    if (!absl::StartsWith(line, prefix)) continue;
    double value;
    if (absl::SimpleAtod(line.substr(prefix.size()), &value)) return value;
  }
  return std::nullopt;
}

// The series of metalserve_requests_total for `method` and gRPC `code`
// (a name such as "DEADLINE_EXCEEDED").
inline std::string RequestsSeries(absl::string_view method, absl::string_view code) {
  return absl::StrCat("metalserve_requests_total{code=\"", code, "\",method=\"", method,
                      "\"}");
}

}  // namespace metalserve::testing

#endif  // METALSERVE_TESTS_TESTING_METRIC_SAMPLE_H_
