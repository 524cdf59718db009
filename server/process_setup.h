// Process-wide helpers of main (process_setup.cc).
#ifndef METALSERVE_SERVER_PROCESS_SETUP_H_
#define METALSERVE_SERVER_PROCESS_SETUP_H_

#include <string>

#include "server/metrics/metrics.h"
#include "server/runtime/runner.h"
#include "server/runtime/torch_runner.h"
#include "server/service/server.h"

namespace metalserve {

// Writes the metrics text exposition to `path` (through a .tmp file and a
// rename); nothing when `path` is empty; an ERROR line when it cannot write.
void DumpMetrics(const Metrics& metrics, const std::string& path);

// Raises glibc's mmap and trim thresholds so that large freed blocks are
// reused from the heap (process_setup.cc says why); environment overrides win.
void KeepLargeBlocksInHeap();

// One INFO line: the loaded model, its device, precision, optimization and
// load and warm-up times.
void LogModel(const ModelInfo& info);

// The start-up banner: version and the effective configuration (the
// runtime's, the server's and the metrics' options, and --access_log).
void LogStart(const std::string& version, const RuntimeOptions& ro, const ServerOptions& so,
              const MetricsOptions& mo, const std::string& access_log);

// One INFO line: whether Abseil's mutex deadlock detection was turned off
// or kept (common/mutex_mode.h).
void LogMutexDeadlockDetection(bool off);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_PROCESS_SETUP_H_
