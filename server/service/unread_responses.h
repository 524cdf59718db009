// UnreadResponses: the bytes of answers the server has handed to gRPC but
// whose sending has not completed, per connection and in all, and which of
// them to cut off.
//
// Why: gRPC 1.51 completes a server's send only once the message has passed
// the peer's HTTP/2 flow-control window (chttp2's on_flow_controlled_cbs).
// A client that never reads (window held at zero) keeps every answer it was
// sent, serialised, for as long as its connection lives, and the transport's
// memory quota does not count them. This object is fed by an interceptor
// (UnreadResponseGuard) with each answer when it is sent (Add) and when its
// sending completes or the call ends (Remove); it says which calls to cancel
// so that the bytes held stay under the bounds.
//
// Policy (pure; the caller cancels):
//   * Add() of an answer that takes its connection over
//     `max_bytes_per_connection` returns that connection's oldest answers,
//     oldest first, until the rest fit (the new one included, when it alone
//     is larger than the bound).
//   * Add() that takes the total over `max_bytes` returns the oldest answers
//     of any connection until the rest fit.
//   * TakeExpired() returns every answer older than `max_age`.
// A call returned is forgotten (its bytes no longer counted; a later Remove
// of it does nothing), so a call is returned at most once.
//
// Thread-safety: thread-safe. Does not own the clock, which must outlive it.
#ifndef METALSERVE_SERVER_SERVICE_UNREAD_RESPONSES_H_
#define METALSERVE_SERVER_SERVICE_UNREAD_RESPONSES_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace metalserve {

struct UnreadResponsesOptions {
  // Bytes of unsent answers one connection (gRPC peer) may hold. Must be
  // > 0. Default 128 MiB (main.cc derives it: 2 x --max_message_bytes).
  int64_t max_bytes_per_connection = int64_t{128} << 20;
  // Bytes of unsent answers all connections together may hold. Must be >=
  // max_bytes_per_connection. Default 256 MiB.
  int64_t max_bytes = int64_t{256} << 20;
  // An answer not sent within this is cut off. Must be > 0. Default 30 s.
  absl::Duration max_age = absl::Seconds(30);
};

class UnreadResponses {
 public:
  // Why a call is cut off.
  enum class Reason { kConnectionBytes, kTotalBytes, kAge };
  struct Cut {
    uint64_t call = 0;
    std::string peer;
    int64_t bytes = 0;         // this call's answer
    int64_t peer_bytes = 0;    // its connection's unsent bytes, before the cut
    absl::Duration age;        // since its answer was handed to gRPC
    Reason reason = Reason::kAge;
  };

  // INVALID_ARGUMENT naming the field and value when an option is out of
  // range. `clock` must not be null.
  static absl::StatusOr<std::unique_ptr<UnreadResponses>> Create(
      UnreadResponsesOptions options, Clock* clock);

  // An answer of `bytes` for `call` (a caller-chosen id, unique while the
  // call is counted) on connection `peer` is being sent. Adding a call that
  // is counted already adds to its bytes. Returns the calls to cut off.
  std::vector<Cut> Add(uint64_t call, const std::string& peer, int64_t bytes)
      ABSL_LOCKS_EXCLUDED(mu_);
  // `call`'s answer was sent, or the call ended. Unknown ids are ignored.
  void Remove(uint64_t call) ABSL_LOCKS_EXCLUDED(mu_);
  // The calls whose answers are older than max_age, oldest first.
  std::vector<Cut> TakeExpired() ABSL_LOCKS_EXCLUDED(mu_);

  int64_t total_bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t peer_bytes(const std::string& peer) const ABSL_LOCKS_EXCLUDED(mu_);
  const UnreadResponsesOptions& options() const { return options_; }

 private:
  struct Entry {
    std::string peer;
    int64_t bytes = 0;
    absl::Time since;
    uint64_t seq = 0;  // order of arrival: the key in by_age_
  };
  UnreadResponses(UnreadResponsesOptions options, Clock* clock)
      : options_(options), clock_(clock) {}
  // Forgets `call` and returns it as a Cut. Requires it to be counted.
  Cut TakeLocked(uint64_t call, Reason reason, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Cuts the oldest calls of `peer` (or of all, when null) while `over`.
  void CutOldestLocked(const std::string* peer, Reason reason, absl::Time now,
                       std::vector<Cut>* cuts) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const UnreadResponsesOptions options_;
  Clock* const clock_;
  mutable absl::Mutex mu_;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint64_t, Entry> calls_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, uint64_t> by_age_ ABSL_GUARDED_BY(mu_);  // seq -> call
  absl::flat_hash_map<std::string, int64_t> peer_bytes_ ABSL_GUARDED_BY(mu_);
  int64_t total_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_UNREAD_RESPONSES_H_
