#include "server/service/access_log.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace metalserve {
namespace {

// `value` with whitespace and control bytes replaced by '_', "-" when empty,
// so that every field stays one token.
std::string Token(absl::string_view value) {
  if (value.empty()) return "-";
  std::string out(value);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7F) c = '_';
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<AccessLog>> AccessLog::Create(
    AccessLogOptions options) {
  if (!(options.sample >= 0 && options.sample <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "access log sample ", options.sample, " is not in [0, 1]"));
  }
  if (options.max_queued_lines < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "access log max_queued_lines ", options.max_queued_lines, " < 1"));
  }
  std::FILE* file = nullptr;
  if (!options.sink) {
    if (options.path.empty()) {
      return absl::InvalidArgumentError("access log path is empty");
    }
    if (options.path == "-") {
      file = stdout;
    } else {
      file = std::fopen(options.path.c_str(), "a");
      if (file == nullptr) {
        const int err = errno;
        return absl::ErrnoToStatus(
            err, absl::StrCat("cannot open access log '", options.path,
                              "' for appending"));
      }
    }
  }
  return std::unique_ptr<AccessLog>(new AccessLog(std::move(options), file));
}

AccessLog::AccessLog(AccessLogOptions options, std::FILE* file)
    : options_(std::move(options)),
      file_(file),
      writer_([this] { WriterLoop(); }) {}

AccessLog::~AccessLog() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  writer_.join();
  if (file_ != nullptr && file_ != stdout) std::fclose(file_);
}

bool AccessLog::Sampled() {
  if (options_.sample >= 1) return true;
  // Request n (0-based) is kept when floor((n + 1) f) > floor(n f).
  const uint64_t n = seen_.fetch_add(1, std::memory_order_relaxed);
  const double f = options_.sample;
  return std::floor((n + 1) * f) > std::floor(n * f);
}

void AccessLog::Log(const AccessLogEntry& entry) {
  if (!Sampled()) return;
  std::string line = FormatLine(entry);
  line.push_back('\n');
  {
    absl::MutexLock l(&mu_);
    if (static_cast<int64_t>(queue_.size()) < options_.max_queued_lines) {
      queue_.push_back(std::move(line));
      return;
    }
  }
  dropped_.fetch_add(1, std::memory_order_relaxed);
  if (options_.on_dropped) options_.on_dropped(1);
}

void AccessLog::WriterLoop() {
  for (;;) {
    std::deque<std::string> lines;
    bool last;
    {
      absl::MutexLock l(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      lines.swap(queue_);
      last = stopping_;
    }
    if (!lines.empty()) {
      std::string text;
      for (const std::string& line : lines) text += line;
      Write(text);
      written_.fetch_add(static_cast<int64_t>(lines.size()),
                         std::memory_order_relaxed);
    }
    if (last) return;  // the queue was emptied under the same lock
  }
}

void AccessLog::Write(absl::string_view lines) {
  if (options_.sink) {
    options_.sink(lines);
    return;
  }
  std::fwrite(lines.data(), 1, lines.size(), file_);
  std::fflush(file_);
}

std::string AccessLog::FormatLine(const AccessLogEntry& e) {
  return absl::StrCat(
      absl::FormatTime("%Y-%m-%d%ET%H:%M:%E6SZ", e.time, absl::UTCTimeZone()),
      " peer=", Token(e.peer), " method=", Token(e.method),
      " model=", Token(e.model), " version=", Token(e.version),
      " rows=", e.rows, " code=", absl::StatusCodeToString(e.code),
      " queue_us=", absl::ToInt64Microseconds(e.queue),
      " compute_us=", absl::ToInt64Microseconds(e.compute),
      " total_us=", absl::ToInt64Microseconds(e.total));
}

}  // namespace metalserve
