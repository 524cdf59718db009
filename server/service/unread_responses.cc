#include "server/service/unread_responses.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace metalserve {

absl::StatusOr<std::unique_ptr<UnreadResponses>> UnreadResponses::Create(
    UnreadResponsesOptions options, Clock* clock) {
  if (options.max_bytes_per_connection <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_unread_response_bytes_per_connection must be > 0, not ",
                     options.max_bytes_per_connection));
  }
  if (options.max_bytes < options.max_bytes_per_connection) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_unread_response_bytes (", options.max_bytes,
        ") must be >= max_unread_response_bytes_per_connection (",
        options.max_bytes_per_connection, ")"));
  }
  if (options.max_age <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unread_response_timeout must be > 0, not ", absl::FormatDuration(options.max_age)));
  }
  if (clock == nullptr) return absl::InvalidArgumentError("clock must not be null");
  return std::unique_ptr<UnreadResponses>(new UnreadResponses(options, clock));
}

std::vector<UnreadResponses::Cut> UnreadResponses::Add(uint64_t call, const std::string& peer,
                                                       int64_t bytes) {
  const absl::Time now = clock_->TimeNow();
  std::vector<Cut> cuts;
  absl::MutexLock l(&mu_);
  auto [it, added] = calls_.try_emplace(call);
  if (added) {
    it->second.peer = peer;
    it->second.since = now;
    it->second.seq = next_seq_++;
    by_age_.emplace(it->second.seq, call);
  }
  it->second.bytes += bytes;
  const int64_t peer_total = (peer_bytes_[it->second.peer] += bytes);
  total_bytes_ += bytes;
  if (peer_total > options_.max_bytes_per_connection) {
    const std::string p = it->second.peer;  // the entry may be cut below
    CutOldestLocked(&p, Reason::kConnectionBytes, now, &cuts);
  }
  if (total_bytes_ > options_.max_bytes) {
    CutOldestLocked(nullptr, Reason::kTotalBytes, now, &cuts);
  }
  return cuts;
}

void UnreadResponses::CutOldestLocked(const std::string* peer, Reason reason, absl::Time now,
                                      std::vector<Cut>* cuts) {
  auto over = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return peer != nullptr ? peer_bytes_[*peer] > options_.max_bytes_per_connection
                           : total_bytes_ > options_.max_bytes;
  };
  for (auto it = by_age_.begin(); it != by_age_.end() && over();) {
    const uint64_t call = it->second;
    ++it;  // TakeLocked erases the current element
    if (peer != nullptr && calls_.at(call).peer != *peer) continue;
    cuts->push_back(TakeLocked(call, reason, now));
  }
}

UnreadResponses::Cut UnreadResponses::TakeLocked(uint64_t call, Reason reason, absl::Time now) {
  auto it = calls_.find(call);
  Entry& e = it->second;
  Cut cut{call, e.peer, e.bytes, peer_bytes_[e.peer], now - e.since, reason};
  total_bytes_ -= e.bytes;
  auto p = peer_bytes_.find(e.peer);
  p->second -= e.bytes;
  if (p->second == 0) peer_bytes_.erase(p);
  by_age_.erase(e.seq);
  calls_.erase(it);
  return cut;
}

void UnreadResponses::Remove(uint64_t call) {
  absl::MutexLock l(&mu_);
  if (calls_.contains(call)) TakeLocked(call, Reason::kAge, absl::UnixEpoch());
}

std::vector<UnreadResponses::Cut> UnreadResponses::TakeExpired() {
  const absl::Time now = clock_->TimeNow();
  std::vector<Cut> cuts;
  absl::MutexLock l(&mu_);
  while (!by_age_.empty()) {
    const uint64_t call = by_age_.begin()->second;
    if (now - calls_.at(call).since <= options_.max_age) break;
    cuts.push_back(TakeLocked(call, Reason::kAge, now));
  }
  return cuts;
}

int64_t UnreadResponses::total_bytes() const {
  absl::MutexLock l(&mu_);
  return total_bytes_;
}

int64_t UnreadResponses::peer_bytes(const std::string& peer) const {
  absl::MutexLock l(&mu_);
  auto it = peer_bytes_.find(peer);
  return it == peer_bytes_.end() ? 0 : it->second;
}

}  // namespace metalserve
