#include "server/runtime/staging_pool.h"

#include <algorithm>
#include <utility>

namespace metalserve {

StagingPool::StagingPool(int keep, AllocateFn allocate)
    : keep_(keep < 0 ? 0 : keep), allocate_(std::move(allocate)) {
  absl::MutexLock lock(&mu_);
  kept_.reserve(static_cast<size_t>(keep_));  // Give never allocates
}

StagingPool::Lease StagingPool::Take(int64_t bytes) {
  {
    absl::MutexLock lock(&mu_);
    size_t best = kept_.size();
    for (size_t i = 0; i < kept_.size(); ++i) {
      if (kept_[i].capacity >= bytes &&
          (best == kept_.size() || kept_[i].capacity < kept_[best].capacity)) {
        best = i;
      }
    }
    if (best != kept_.size()) {
      Lease lease = std::move(kept_[best]);
      kept_.erase(kept_.begin() + static_cast<std::ptrdiff_t>(best));
      lease.reused = true;
      return lease;
    }
  }
  // Outside the lock: an allocation may take long (pinned memory) or throw.
  Lease lease;
  lease.block = allocate_(bytes);
  lease.capacity = bytes;
  return lease;
}

// What is not kept stays in `lease`, a parameter: it is freed after the
// function's locals, so outside the lock.
void StagingPool::Give(Lease lease) {
  if (lease.block == nullptr) return;
  absl::MutexLock lock(&mu_);
  if (lease.block.use_count() != 1) {
    ++dropped_shared_;
    return;
  }
  if (static_cast<int>(kept_.size()) < keep_) {
    kept_.push_back(std::move(lease));
    return;
  }
  // Full (none kept when keep_ is 0): a larger one replaces the smallest.
  auto smallest = std::min_element(
      kept_.begin(), kept_.end(),
      [](const Lease& a, const Lease& b) { return a.capacity < b.capacity; });
  if (smallest != kept_.end() && lease.capacity > smallest->capacity) {
    std::swap(lease, *smallest);
  }
}

int64_t StagingPool::kept_bytes() const {
  absl::MutexLock lock(&mu_);
  int64_t bytes = 0;
  for (const Lease& l : kept_) bytes += l.capacity;
  return bytes;
}

int64_t StagingPool::dropped_shared() const {
  absl::MutexLock lock(&mu_);
  return dropped_shared_;
}

}  // namespace metalserve
