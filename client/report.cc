#include "client/report.h"

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

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", static_cast<int>(c));
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
  return out;
}

// {"p50":..,"p90":..,"p99":..} of a server-reported field, microseconds.
std::string JsonServerPercentiles(const LatencyHistogram& h) {
  return absl::StrFormat("{\"p50\":%.1f,\"p90\":%.1f,\"p99\":%.1f}",
                         Us(h.Percentile(50)), Us(h.Percentile(90)),
                         Us(h.Percentile(99)));
}

std::string JsonErrorMessages(const RunStats& st) {
  return absl::StrCat(
      "{", absl::StrJoin(st.error_messages, ",", [](std::string* o, const auto& e) {
        absl::StrAppend(o, JsonString(e.first), ":[",
                        absl::StrJoin(e.second, ",", [](std::string* o2, const auto& m) {
                          absl::StrAppend(o2, JsonString(m));
                        }),
                        "]");
      }),
      "}");
}

std::string Json(const RunReport& r) {
  const RunStats& st = r.stats;
  const LatencyHistogram& h = st.latency;
  std::string out = "{";
  absl::StrAppend(&out, "\"mode\":", JsonString(r.spec.open_loop() ? "open" : "closed"));
  absl::StrAppend(&out, ",\"concurrency\":", r.spec.open_loop() ? 0 : r.spec.concurrency);
  absl::StrAppendFormat(&out, ",\"rate\":%.6g", r.spec.rate);
  absl::StrAppend(&out, ",\"ok\":", st.ok, ",\"errors\":{");
  absl::StrAppend(&out, absl::StrJoin(st.errors, ",", [](std::string* o, const auto& e) {
                    absl::StrAppend(o, JsonString(e.first), ":", e.second);
                  }));
  absl::StrAppend(&out, "},\"error_messages\":", JsonErrorMessages(st));
  absl::StrAppendFormat(&out, ",\"error_rate\":%.6g,\"elapsed_s\":%.6f", st.ErrorRate(),
                        absl::ToDoubleSeconds(st.elapsed));
  absl::StrAppendFormat(&out, ",\"requests_per_s\":%.3f,\"rows_per_s\":%.3f",
                        st.RequestsPerSecond(), st.RowsPerSecond());
  absl::StrAppend(&out, ",\"latency_us\":{");
  for (const Quantile& q : kQuantiles) {
    absl::StrAppendFormat(&out, "\"%s\":%.1f,", q.name, Us(h.Percentile(q.p)));
  }
  absl::StrAppendFormat(&out, "\"max\":%.1f,\"min\":%.1f,\"mean\":%.1f,\"stddev\":%.1f}",
                        Us(h.Max()), Us(h.Min()), Us(h.Mean()), Us(h.StdDev()));
  absl::StrAppendFormat(&out,
                        ",\"server\":{\"queue_us_mean\":%.1f,\"compute_us_mean\":%.1f,"
                        "\"batch_rows_mean\":%.3f,",
                        st.MeanServerQueueUs(), st.MeanServerComputeUs(),
                        st.MeanBatchRows());
  absl::StrAppend(&out, "\"queue_us\":", JsonServerPercentiles(st.server_queue),
                  ",\"compute_us\":", JsonServerPercentiles(st.server_compute), "}}");
  return out;
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
    case OutputFormat::kJson:
      out = absl::StrCat("{\"runs\":[",
                         absl::StrJoin(reports, ",", [](std::string* o, const RunReport& r) {
                           absl::StrAppend(o, Json(r));
                         }),
                         "]}\n");
      break;
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
