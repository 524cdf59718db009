// AccessLog: one line per finished inference request, written by a
// background thread so that the request path never waits on the disk.
//
//   2026-11-30T21:20:00.123456Z peer=ipv4:127.0.0.1:52814 method=Predict
//   model=resnet18 version=1 rows=1 code=OK queue_us=812 compute_us=4113
//   total_us=5080
//
// (one line; fields separated by one space, values never contain spaces:
// any whitespace or control byte in a value is written as '_'). The time is
// RFC 3339 in UTC with microseconds, taken when the call finished; `rows` is
// the request's batch dimension (0 when the request was refused before its
// inputs were read); `code` the canonical gRPC code name; the durations are
// the server's queue wait, its share of the batch's compute and the total
// from arrival to answer, in whole microseconds.
//
// Sampling: `sample` = f keeps exactly floor(n * f) of the first n requests,
// evenly spread (f = 0.25 keeps every 4th): deterministic, no random draw.
//
// Never blocking: Log() samples, formats and appends to a bounded queue
// under a mutex held for a push; it never does I/O. When `max_queued_lines`
// lines are waiting (the disk or the terminal is slower than the traffic),
// the line is dropped, counted in dropped() and reported to `on_dropped`.
// The writer thread takes every waiting line at once, writes them and
// flushes, so a line reaches the file within one write of its request.
//
// Ownership: owns the file (not stdout), the queue and the writer thread.
// Thread-safety: Log(), dropped() and written() may be called from any
// thread. The destructor stops taking lines, writes every line already
// queued, flushes, closes the file and joins the writer; no Log() may run
// during or after it.
#ifndef METALSERVE_SERVER_SERVICE_ACCESS_LOG_H_
#define METALSERVE_SERVER_SERVICE_ACCESS_LOG_H_

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace metalserve {

struct AccessLogOptions {
  // File to append to, created when missing; "-" for standard output.
  // Ignored when `sink` is set.
  std::string path;
  // Fraction of requests logged, in [0, 1]. Default 1 (every request).
  double sample = 1.0;
  // Lines waiting for the writer beyond which new lines are dropped, >= 1.
  // Default 8192 (about 1.5 MiB of lines).
  int64_t max_queued_lines = 8192;
  // Called on the request's thread with 1 for each dropped line (e.g. to
  // count it in a metric); must not block. Empty: nothing is called.
  std::function<void(int64_t)> on_dropped;
  // Test seam: receives each batch of lines (newline-terminated) on the
  // writer thread instead of a file. Empty: write to `path`.
  std::function<void(absl::string_view)> sink;
};

// One finished request, as the service saw it.
struct AccessLogEntry {
  absl::Time time;         // when the call finished
  std::string peer;        // gRPC's peer string, e.g. "ipv4:127.0.0.1:52814"
  absl::string_view method;  // "Predict", "ModelInfer"
  std::string model;
  std::string version;
  int64_t rows = 0;
  absl::StatusCode code = absl::StatusCode::kOk;
  absl::Duration queue;
  absl::Duration compute;
  absl::Duration total;
};

class AccessLog {
 public:
  // InvalidArgument for a sample outside [0, 1], max_queued_lines < 1 or an
  // empty path without a sink; the open error (naming the path) when the
  // file cannot be opened for appending.
  static absl::StatusOr<std::unique_ptr<AccessLog>> Create(
      AccessLogOptions options);
  ~AccessLog();

  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  // Queues the entry's line if it is sampled and the queue has room.
  void Log(const AccessLogEntry& entry);

  // Lines dropped because the queue was full; lines handed to the file.
  int64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  int64_t written() const { return written_.load(std::memory_order_relaxed); }

  // The line for `entry`, without the newline.
  static std::string FormatLine(const AccessLogEntry& entry);

 private:
  AccessLog(AccessLogOptions options, std::FILE* file);
  bool Sampled();
  void WriterLoop();
  void Write(absl::string_view lines);

  const AccessLogOptions options_;
  std::FILE* const file_;  // null with a sink; stdout is not closed
  std::atomic<uint64_t> seen_{0};
  std::atomic<int64_t> dropped_{0};
  std::atomic<int64_t> written_{0};

  absl::Mutex mu_;
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread writer_;  // last: starts once the members above exist
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_ACCESS_LOG_H_
