// Writes the text exposition of a Metrics object that has seen one of every
// kind of event to the file named by argv[1], for `promtool check metrics`.
#include <fstream>
#include <iostream>

#include "server/metrics/metrics.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " OUTPUT_FILE\n";
    return 2;
  }
  metalserve::MetricsOptions options;
  options.listen_address = "";
  options.monitor_log_interval = absl::ZeroDuration();
  auto metrics = metalserve::Metrics::Create(options);
  if (!metrics.ok()) {
    std::cerr << metrics.status() << "\n";
    return 1;
  }
  metalserve::Metrics& m = **metrics;
  std::unique_ptr<metalserve::ModelMetrics> model = m.ForModel("tiny_cnn", "1", 64);
  m.RequestStarted("Predict");
  model->QueueWait(absl::Milliseconds(2));
  model->BatchCompleted(3, 1, "full", absl::Milliseconds(8));
  model->RequestFinished("Predict", absl::StatusCode::kOk, absl::Milliseconds(11));
  m.RequestFinished("Predict", absl::StatusCode::kNotFound, absl::Microseconds(90));
  model->RequestFinished("Predict", absl::StatusCode::kInvalidArgument,
                         absl::Microseconds(90));
  m.RequestFinished("ModelInfer", absl::StatusCode::kUnimplemented,
                    absl::Microseconds(50));
  model->SetQueueDepth(4);
  m.SetMemory({.allocated_bytes = 1 << 20,
               .reserved_bytes = 2 << 20,
               .limit_bytes = 8 << 20,
               .resident_bytes = 64 << 20,
               .device = "cuda:0"});
  m.CacheCleared("interval", absl::Milliseconds(3));
  m.SetModelTimes(absl::Milliseconds(900), absl::Milliseconds(120));
  m.SetBuildInfo("0.1.0", "1.13.0", "cpu", "tiny_cnn");
  m.SetReady(true);
  std::ofstream out(argv[1]);
  out << m.Scrape();
  return out.good() ? 0 : 1;
}
