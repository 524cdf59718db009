#include "server/runtime/staging_pool.h"

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

void StagingPool::Give(Lease lease) {
  if (lease.block == nullptr) return;
  Lease dropped;  // freed outside the lock
  absl::MutexLock lock(&mu_);
  if (lease.block.use_count() != 1) {
    ++dropped_shared_;
    dropped = std::move(lease);
    return;
  }
  lease.reused = false;
  if (static_cast<int>(kept_.size()) < keep_) {
    kept_.push_back(std::move(lease));
    return;
  }
  if (kept_.empty()) {  // keep_ == 0
    dropped = std::move(lease);
    return;
  }
  size_t smallest = 0;
  for (size_t i = 1; i < kept_.size(); ++i) {
    if (kept_[i].capacity < kept_[smallest].capacity) smallest = i;
  }
  if (lease.capacity > kept_[smallest].capacity) std::swap(lease, kept_[smallest]);
  dropped = std::move(lease);
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
