// Process-wide helpers of main: the metrics dump file and glibc's heap
// thresholds. Part of the metalserve executable.
#include "server/process_setup.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "absl/time/time.h"
#include "glog/logging.h"

namespace metalserve {

void DumpMetrics(const Metrics& metrics, const std::string& path) {
  if (path.empty()) return;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << metrics.Scrape();
    if (!f) {
      LOG(ERROR) << "--metrics_dump: cannot write " << tmp;
      return;
    }
  }
  std::rename(tmp.c_str(), path.c_str());
}

// Keeps large freed blocks in the heap for the next request. glibc serves
// blocks over 128 KiB with mmap and gives them back with munmap, so each
// request's large buffers (a 602 KB image's bytes, parsed out of gRPC's
// slices) were fresh pages that the kernel faulted in and zeroed: page
// faults were the largest item of the server's profile (issue 20). With the
// thresholds raised, blocks up to 32 MiB come from the heap and are reused;
// the cost is that up to 256 MiB freed at the heap's top stays resident. An
// operator's MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ wins.
void KeepLargeBlocksInHeap() {
#ifdef __GLIBC__
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") == nullptr) mallopt(M_MMAP_THRESHOLD, 32 << 20);
  if (std::getenv("MALLOC_TRIM_THRESHOLD_") == nullptr) mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
}

void LogModel(const ModelInfo& info) {
  LOG(INFO) << "model " << info.name << " v" << info.version << " on " << info.device
            << " (torch " << info.torch_version << ", " << info.precision
            << ", optimize=" << info.optimization << ": " << info.optimization_reason
            << "), loaded in " << absl::FormatDuration(info.load_time)
            << ", warmed up in " << absl::FormatDuration(info.warmup_time);
}

}  // namespace metalserve
