// Reading one sample out of a Prometheus text-format scrape, for tests that
// assert the server's own counters (what the server did, not what the
// client saw).
#ifndef METALSERVE_TESTS_TESTING_METRIC_SAMPLE_H_
#define METALSERVE_TESTS_TESTING_METRIC_SAMPLE_H_

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace metalserve::testing {

// The labels of `series` ("name" or `name{a="x",b="y"}` as the text format
// writes them) as `a="x"` strings, and its name in `name`.
inline std::vector<std::string> SeriesLabels(absl::string_view series, absl::string_view* name) {
  const size_t brace = series.find('{');
  *name = series.substr(0, brace);
  std::vector<std::string> labels;
  if (brace == absl::string_view::npos) return labels;
  absl::string_view inner = series.substr(brace + 1);
  if (absl::EndsWith(inner, "}")) inner.remove_suffix(1);
  // Label values here never hold '",': split between labels only.
  for (absl::string_view l : absl::StrSplit(inner, "\",")) {
    if (l.empty()) continue;
    labels.push_back(absl::EndsWith(l, "\"") ? std::string(l) : absl::StrCat(l, "\""));
  }
  return labels;
}

// Value of `series` (name plus labels, as the text format writes them) in
// `scrape`, summed over the labels it does not name, as PromQL's sum()
// would: `metalserve_queue_depth_rows` is the sum over every model version,
// `metalserve_requests_total{code="OK",method="Predict"}` counts Predict's
// OKs with or without model labels. nullopt when no series matches.
inline std::optional<double> Sample(const std::string& scrape, absl::string_view series) {
  absl::string_view name;
  const std::vector<std::string> want = SeriesLabels(series, &name);
  std::optional<double> sum;
  for (absl::string_view line : absl::StrSplit(scrape, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == absl::string_view::npos) continue;
    absl::string_view have_name;
    const std::vector<std::string> have = SeriesLabels(line.substr(0, space), &have_name);
    if (have_name != name) continue;
    bool match = true;
    for (const std::string& l : want) {
      match = match && std::find(have.begin(), have.end(), l) != have.end();
    }
    double value;
    if (match && absl::SimpleAtod(line.substr(space + 1), &value)) sum = sum.value_or(0) + value;
  }
  return sum;
}

// The series of metalserve_requests_total for `method` and gRPC `code`
// (a name such as "DEADLINE_EXCEEDED").
inline std::string RequestsSeries(absl::string_view method, absl::string_view code) {
  return absl::StrCat("metalserve_requests_total{code=\"", code, "\",method=\"", method,
                      "\"}");
}

}  // namespace metalserve::testing

#endif  // METALSERVE_TESTS_TESTING_METRIC_SAMPLE_H_
