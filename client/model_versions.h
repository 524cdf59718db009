// Which model version answered a load run's calls, and whether a worker ever
// saw the version go back: the reload check of a zero-downtime reload (a new
// version takes traffic at one point; a worker that got version N must not
// be answered by an older one afterwards).
//
// A "worker" is a closed-loop slot (one call outstanding at a time, the next
// sent from the previous one's completion) or, open loop, a lane (calls
// overlap). So that overlapping calls are judged fairly, a call is compared
// with the newest version its worker had seen answer *when it was sent*
// (NewestSeen, read at send, handed back to Record): an answer older than
// that is a regression; two calls in flight across a switch are not.
//
// Versions are the responses' strings (KServe ModelInferResponse.model_version,
// the native PredictResponse.model_version, REST "model_version"). They are
// ordered as decimal integers ("9" < "10"); a version that is not one (empty
// when a server does not say, or a --model's free-form string) is counted
// but never ordered, so it cannot be a regression.
//
// Ownership: a plain object owned by one load-generator phase. Thread-safety:
// every method is thread-safe; one mutex per worker, so completions of
// different workers do not contend.
#ifndef METALSERVE_CLIENT_MODEL_VERSIONS_H_
#define METALSERVE_CLIENT_MODEL_VERSIONS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace metalserve::client {

// The number of a version string: a decimal integer >= 0 without sign or
// spaces ("7", "0012"); nullopt otherwise ("", "v2", "-1", too large).
std::optional<int64_t> VersionNumber(absl::string_view version);

// Numbered versions first, by number ("2" < "10"), then the others by
// string; so a report lists versions in the order they were loaded.
struct VersionOrder {
  bool operator()(const std::string& a, const std::string& b) const;
};

// Successful responses per version string, in VersionOrder.
using VersionCounts = std::map<std::string, int64_t, VersionOrder>;

struct ModelVersionStats {
  VersionCounts responses;
  // Answers older than a version their worker had already seen.
  int64_t regressions = 0;
};

class ModelVersionWatch {
 public:
  // NewestSeen before a worker has seen a numbered version.
  static constexpr int64_t kNoneSeen = -1;

  // `workers` >= 1; worker indices are taken modulo it.
  explicit ModelVersionWatch(size_t workers);

  // The newest numbered version `worker` has seen answer; read when a call
  // is sent and handed back to Record with its answer.
  int64_t NewestSeen(size_t worker) const;

  // A successful answer to a call of `worker` sent when NewestSeen was
  // `newest_at_send`: counts it under `version`, a regression when its
  // number is below `newest_at_send`, and raises the worker's newest.
  // Returns true for a regression.
  bool Record(size_t worker, int64_t newest_at_send, absl::string_view version);

  // The counts so far, merged over workers.
  ModelVersionStats Stats() const;

 private:
  struct Worker {
    mutable absl::Mutex mu;
    int64_t newest ABSL_GUARDED_BY(mu) = kNoneSeen;
    int64_t regressions ABSL_GUARDED_BY(mu) = 0;
    VersionCounts responses ABSL_GUARDED_BY(mu);
  };
  Worker& At(size_t worker) const { return workers_[worker % size_]; }

  const size_t size_;
  const std::unique_ptr<Worker[]> workers_;
};

}  // namespace metalserve::client

#endif  // METALSERVE_CLIENT_MODEL_VERSIONS_H_
