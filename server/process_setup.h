// Process-wide helpers of main (process_setup.cc).
#ifndef METALSERVE_SERVER_PROCESS_SETUP_H_
#define METALSERVE_SERVER_PROCESS_SETUP_H_

#include <string>

#include "server/metrics/metrics.h"
#include "server/runtime/runner.h"

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

}  // namespace metalserve

#endif  // METALSERVE_SERVER_PROCESS_SETUP_H_
