#include "server/runtime/fair_queue.h"

#include <algorithm>
#include <utility>

namespace metalserve {

void FairQueue::Push(absl::string_view key, Work work) {
  auto it = keys_.find(key);
  if (it == keys_.end()) {
    it = keys_.emplace(std::string(key), KeyState{}).first;
    it->second.v = now_;
  } else if (it->second.queue.empty()) {
    it->second.v = std::max(it->second.v, now_);  // no credit for idle time
  }
  it->second.queue.push_back(Entry{next_seq_++, std::move(work)});
  ++size_;
}

// The backlogged key to serve: least (v, head seq) when fair, least head seq
// when FIFO. O(keys), and keys are the model versions on one device.
FairQueue::KeyMap::iterator FairQueue::Next() {
  auto best = keys_.end();
  for (auto it = keys_.begin(); it != keys_.end(); ++it) {
    if (it->second.queue.empty()) continue;
    if (best == keys_.end()) {
      best = it;
      continue;
    }
    const KeyState& a = it->second;
    const KeyState& b = best->second;
    const bool earlier = a.queue.front().seq < b.queue.front().seq;
    const bool better = order_ == Order::kFifo ? earlier : (a.v < b.v || (a.v == b.v && earlier));
    if (better) best = it;
  }
  return best;
}

FairQueue::Item FairQueue::Pop() {
  auto it = Next();
  // Requires !empty(): Next found a backlogged key.
  KeyState& s = it->second;
  now_ = std::max(now_, s.v);  // FIFO too: it lets idle keys be dropped
  Item item{it->first, std::move(s.queue.front().work)};
  s.queue.pop_front();
  --size_;
  DropIdleKeys();
  return item;
}

void FairQueue::Charge(absl::string_view key, absl::Duration cost) {
  if (cost < absl::ZeroDuration()) cost = absl::ZeroDuration();
  auto it = keys_.find(key);
  if (it == keys_.end()) {
    // Dropped at its Pop with v <= V: it had restarted at V.
    it = keys_.emplace(std::string(key), KeyState{}).first;
    it->second.v = now_;
  }
  it->second.v += cost;
}

void FairQueue::ChargeJoining(absl::string_view key, absl::Duration cost) {
  auto it = keys_.find(key);
  if (it == keys_.end()) {
    it = keys_.emplace(std::string(key), KeyState{}).first;
    it->second.v = now_;
  } else if (it->second.queue.empty()) {
    it->second.v = std::max(it->second.v, now_);
  }
  it->second.v += std::max(cost, absl::ZeroDuration());
}

void FairQueue::DropIdleKeys() {
  for (auto it = keys_.begin(); it != keys_.end();) {
    if (it->second.queue.empty() && it->second.v <= now_) {
      it = keys_.erase(it);
    } else {
      ++it;
    }
  }
}

absl::Duration FairQueue::virtual_time(absl::string_view key) const {
  auto it = keys_.find(key);
  return it == keys_.end() ? now_ : it->second.v;
}

absl::string_view FairQueue::OrderName(Order order) {
  return order == Order::kFifo ? "fifo" : "fair";
}

}  // namespace metalserve
