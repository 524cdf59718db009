// Process-wide helpers of main: the metrics dump file, glibc's heap
// thresholds and the start-up log lines. Part of the metalserve executable.
#include "server/process_setup.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/mutex_mode.h"
#include "common/unix_socket_buffers.h"
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

namespace {

// " unix_socket_buffer=ASKED (GRANTED granted)" where the server listens on
// a Unix socket: what a connection's send buffer becomes, read back from a
// socket pair, so a cap (Linux: net.core.wmem_max) shows in the log.
std::string UnixSocketBufferNote(const ServerOptions& so) {
  if (!absl::StrContains(so.address, "unix:")) return "";
  if (so.unix_socket_buffer_bytes <= 0) return " unix_socket_buffer=kernel default";
  const absl::StatusOr<int64_t> granted = UnixSocketBufferGranted(so.unix_socket_buffer_bytes);
  return absl::StrCat(" unix_socket_buffer=", so.unix_socket_buffer_bytes, " (",
                      granted.ok() ? absl::StrCat(*granted) : granted.status().ToString(),
                      " granted)");
}

}  // namespace

void LogStart(const std::string& version, const RuntimeOptions& ro, const ServerOptions& so,
              const MetricsOptions& mo, const std::string& access_log) {
  LOG(INFO) << "metalserve " << version << " starting: model=" << ro.model_path
            << " device=" << ro.device << " threads=" << ro.threads
            << " precision=" << ro.precision << " optimize=" << ro.optimize
            << " max_batch_size=" << so.batching.max_batch_size
            << " batching=" << BatchingPolicyName(so.batching.policy)
            << " max_queue_delay=" << absl::FormatDuration(so.batching.max_queue_delay)
            << " trim_padded_batches=" << so.batching.trim_padded_batches
            << " allowed_batch_sizes=[" << absl::StrJoin(so.batching.allowed_batch_sizes, ",")
            << "] max_queue_size=" << so.batching.max_queue_size
            << " max_request_rows=" << so.batching.MaxRequestRows()
            << " priority_levels=" << so.batching.priority_levels
            << " priority_lower_batch_cost="
            << absl::FormatDuration(so.batching.priority_lower_batch_cost)
            << " priority_fill_cost_ratio=" << so.batching.priority_fill_cost_ratio
            << " priority_active_window="
            << absl::FormatDuration(so.batching.priority_active_window)
            << " latency_target=" << absl::FormatDuration(so.batching.latency_target)
            << " inline_max_cost=" << absl::FormatDuration(so.batching.inline_max_cost)
            << (so.accelerator_inline_max_cost >= absl::ZeroDuration()
                    ? absl::StrCat(" (",
                                   absl::FormatDuration(so.accelerator_inline_max_cost),
                                   " on an accelerator)")
                    : "")
            << " executors=" << so.batching.num_executors
            << (so.cuda_slots > 0 ? absl::StrCat(" (", so.cuda_slots, " on CUDA)") : "")
            << " rows_per_slot=" << so.batching.rows_per_slot
            << " address=" << so.address << UnixSocketBufferNote(so)
            << " shared_memory=" << SharedMemoryAccessName(so.shared_memory)
            << " http_address=" << so.http.address
            << " metrics_address=" << mo.listen_address
            << " access_log=" << access_log;
}

void LogMutexDeadlockDetection(bool off) {
  LOG(INFO) << "Abseil mutex deadlock detection "
            << (off ? "off (" : "as Abseil sets it (") << kDeadlockDetectionEnv
            << (off ? "=1 keeps it)" : "=1)");
}

}  // namespace metalserve
