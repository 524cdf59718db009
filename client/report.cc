#include "client/report.h"

#include <cmath>
#include <utility>

#include "nlohmann/json.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace metalserve::client {
namespace {

double Us(absl::Duration d) { return absl::ToDoubleMicroseconds(d); }

struct Quantile {
  const char* name;
  double p;
};
constexpr Quantile kQuantiles[] = {{"p50", 50},   {"p90", 90},  {"p95", 95},
                                   {"p99", 99},   {"p99_9", 99.9}};

std::string ModeLabel(const LoadSpec& s) {
  if (s.open_loop()) {
    return absl::StrFormat("open loop %.6g req/s (%s)", s.rate,
                           s.arrival == Arrival::kPoisson ? "poisson" : "constant");
  }
  return absl::StrCat("closed loop, concurrency ", s.concurrency);
}

std::string ErrorsInline(const RunStats& st, absl::string_view kv,
                         absl::string_view sep) {
  return absl::StrJoin(st.errors, sep, [&](std::string* out, const auto& e) {
    absl::StrAppend(out, e.first, kv, e.second);
  });
}

// "1: 950, 2: 1020" (answers per model version, oldest first); a server
// that does not say which version answered shows as "(none)".
std::string VersionsInline(const VersionCounts& versions) {
  return absl::StrJoin(versions, ", ", [](std::string* out, const auto& v) {
    absl::StrAppend(out, v.first.empty() ? "(none)" : v.first, ": ", v.second);
  });
}

// The server's own p50/p90/p99 of a field, and its mean.
std::string ServerLine(const LatencyHistogram& h, double mean_us) {
  return absl::StrFormat("p50 %.0f  p90 %.0f  p99 %.0f  mean %.0f",
                         Us(h.Percentile(50)), Us(h.Percentile(90)),
                         Us(h.Percentile(99)), mean_us);
}

std::string Text(const RunReport& r) {
  const RunStats& st = r.stats;
  const LatencyHistogram& h = st.latency;
  std::string out = absl::StrCat("== ", ModeLabel(r.spec), "\n");
  absl::StrAppendFormat(&out,
                        "requests   %d ok, %d errors (%.3f%%) in %.3f s\n",
                        st.ok, st.ErrorCount(), 100 * st.ErrorRate(),
                        absl::ToDoubleSeconds(st.elapsed));
  absl::StrAppendFormat(&out, "throughput %.1f req/s, %.1f rows/s\n",
                        st.RequestsPerSecond(), st.RowsPerSecond());
  absl::StrAppendFormat(&out, "latency us p50 %.0f  p90 %.0f  p95 %.0f  p99 %.0f  "
                              "p99.9 %.0f  max %.0f\n",
                        Us(h.Percentile(50)), Us(h.Percentile(90)),
                        Us(h.Percentile(95)), Us(h.Percentile(99)),
                        Us(h.Percentile(99.9)), Us(h.Max()));
  absl::StrAppendFormat(&out, "           mean %.0f  stddev %.0f  min %.0f\n",
                        Us(h.Mean()), Us(h.StdDev()), Us(h.Min()));
  absl::StrAppendFormat(&out, "server     queue us   %s\n",
                        ServerLine(st.server_queue, st.MeanServerQueueUs()));
  absl::StrAppendFormat(&out, "           compute us %s\n",
                        ServerLine(st.server_compute, st.MeanServerComputeUs()));
  absl::StrAppendFormat(&out, "           batch %.2f rows (mean)\n", st.MeanBatchRows());
  if (!st.versions.empty()) {
    absl::StrAppend(&out, "versions   ", VersionsInline(st.versions),
                    "; regressions ", st.model_version_regressions, "\n");
  }
  if (!st.errors.empty()) {
    absl::StrAppend(&out, "errors     ", ErrorsInline(st, " ", ", "), "\n");
  }
  for (const auto& [code, messages] : st.error_messages) {
    for (const std::string& m : messages) {
      absl::StrAppend(&out, "           ", code, ": ", m, "\n");
    }
  }
  return out;
}

// A value rounded to `decimals` places, so the JSON carries the precision
// the text and CSV reports show (the printer writes the shortest form that
// reads back as the same double).
double Rounded(double v, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::round(v * scale) / scale;
}

// {"p50":..,"p90":..,"p99":..} of a server-reported field, microseconds.
nlohmann::ordered_json JsonServerPercentiles(const LatencyHistogram& h) {
  nlohmann::ordered_json j;
  for (const Quantile& q : {Quantile{"p50", 50}, Quantile{"p90", 90}, Quantile{"p99", 99}}) {
    j[q.name] = Rounded(Us(h.Percentile(q.p)), 1);
  }
  return j;
}

nlohmann::ordered_json JsonLatency(const LatencyHistogram& h) {
  nlohmann::ordered_json j;
  for (const Quantile& q : kQuantiles) j[q.name] = Rounded(Us(h.Percentile(q.p)), 1);
  j["max"] = Rounded(Us(h.Max()), 1);
  j["min"] = Rounded(Us(h.Min()), 1);
  j["mean"] = Rounded(Us(h.Mean()), 1);
  j["stddev"] = Rounded(Us(h.StdDev()), 1);
  return j;
}

nlohmann::ordered_json JsonServer(const RunStats& st) {
  nlohmann::ordered_json j;
  j["queue_us_mean"] = Rounded(st.MeanServerQueueUs(), 1);
  j["compute_us_mean"] = Rounded(st.MeanServerComputeUs(), 1);
  j["batch_rows_mean"] = Rounded(st.MeanBatchRows(), 3);
  j["queue_us"] = JsonServerPercentiles(st.server_queue);
  j["compute_us"] = JsonServerPercentiles(st.server_compute);
  return j;
}

nlohmann::ordered_json Json(const RunReport& r) {
  const RunStats& st = r.stats;
  nlohmann::ordered_json j;
  j["mode"] = r.spec.open_loop() ? "open" : "closed";
  j["concurrency"] = r.spec.open_loop() ? 0 : r.spec.concurrency;
  j["rate"] = r.spec.rate;
  j["ok"] = st.ok;
  j["errors"] = nlohmann::ordered_json::object();
  for (const auto& [code, n] : st.errors) j["errors"][code] = n;
  j["error_messages"] = nlohmann::ordered_json::object();
  for (const auto& [code, messages] : st.error_messages) j["error_messages"][code] = messages;
  j["error_rate"] = Rounded(st.ErrorRate(), 6);
  j["elapsed_s"] = Rounded(absl::ToDoubleSeconds(st.elapsed), 6);
  j["requests_per_s"] = Rounded(st.RequestsPerSecond(), 3);
  j["rows_per_s"] = Rounded(st.RowsPerSecond(), 3);
  j["latency_us"] = JsonLatency(st.latency);
  j["server"] = JsonServer(st);
  j["versions"] = nlohmann::ordered_json::object();
  for (const auto& [version, n] : st.versions) j["versions"][version] = n;
  j["model_version_regressions"] = st.model_version_regressions;
  return j;
}

constexpr char kCsvHeader[] =
    "mode,concurrency,rate,ok,errors,error_rate,elapsed_s,requests_per_s,"
    "rows_per_s,p50_us,p90_us,p95_us,p99_us,p99_9_us,max_us,mean_us,stddev_us,"
    "server_queue_us_mean,server_compute_us_mean,batch_rows_mean,"
    "server_queue_us_p50,server_queue_us_p90,server_queue_us_p99,"
    "server_compute_us_p50,server_compute_us_p90,server_compute_us_p99,"
    "errors_by_code\n";

std::string Csv(const RunReport& r) {
  const RunStats& st = r.stats;
  const LatencyHistogram& h = st.latency;
  std::string out = absl::StrFormat(
      "%s,%d,%.6g,%d,%d,%.6g,%.6f,%.3f,%.3f", r.spec.open_loop() ? "open" : "closed",
      r.spec.open_loop() ? 0 : r.spec.concurrency, r.spec.rate, st.ok, st.ErrorCount(),
      st.ErrorRate(), absl::ToDoubleSeconds(st.elapsed), st.RequestsPerSecond(),
      st.RowsPerSecond());
  for (const Quantile& q : kQuantiles) {
    absl::StrAppendFormat(&out, ",%.1f", Us(h.Percentile(q.p)));
  }
  absl::StrAppendFormat(&out, ",%.1f,%.1f,%.1f,%.1f,%.1f,%.3f", Us(h.Max()),
                        Us(h.Mean()), Us(h.StdDev()), st.MeanServerQueueUs(),
                        st.MeanServerComputeUs(), st.MeanBatchRows());
  for (const LatencyHistogram* server : {&st.server_queue, &st.server_compute}) {
    for (double p : {50.0, 90.0, 99.0}) {
      absl::StrAppendFormat(&out, ",%.1f", Us(server->Percentile(p)));
    }
  }
  absl::StrAppend(&out, ",", ErrorsInline(st, "=", ";"), "\n");
  return out;
}

}  // namespace

absl::StatusOr<OutputFormat> ParseOutputFormat(absl::string_view text) {
  if (text == "text") return OutputFormat::kText;
  if (text == "json") return OutputFormat::kJson;
  if (text == "csv") return OutputFormat::kCsv;
  return absl::InvalidArgumentError(
      absl::StrCat("--output='", text, "': want text, json or csv"));
}

std::string FormatReports(const std::vector<RunReport>& reports,
                          OutputFormat format) {
  std::string out;
  switch (format) {
    case OutputFormat::kText:
      for (const RunReport& r : reports) absl::StrAppend(&out, Text(r));
      break;
    case OutputFormat::kJson: {
      nlohmann::ordered_json runs = nlohmann::ordered_json::array();
      for (const RunReport& r : reports) runs.push_back(Json(r));
      nlohmann::ordered_json doc;
      doc["runs"] = std::move(runs);
      // error_messages come from servers: replace invalid UTF-8 rather than
      // throw.
      out = doc.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
      break;
    }
    case OutputFormat::kCsv:
      out = kCsvHeader;
      for (const RunReport& r : reports) absl::StrAppend(&out, Csv(r));
      break;
  }
  return out;
}

std::string FormatProgress(const Progress& p) {
  const double s = absl::ToDoubleSeconds(p.elapsed);
  return absl::StrFormat("%s%5.1fs  ok %d  errors %d  in flight %d  %.0f req/s",
                         p.warmup ? "[warmup] " : "", s, p.ok, p.errors,
                         p.outstanding, s > 0 ? p.ok / s : 0.0);
}

int ExitCodeFor(const std::vector<RunReport>& reports, double max_error_rate) {
  for (const RunReport& r : reports) {
    if (r.stats.ErrorRate() > max_error_rate) return kExitErrorRateExceeded;
  }
  return 0;
}

}  // namespace metalserve::client
