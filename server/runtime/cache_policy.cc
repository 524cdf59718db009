#include "server/runtime/cache_policy.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace metalserve {
namespace {

constexpr absl::string_view kTriggerNames[] = {
    CachePolicy::kEveryN, CachePolicy::kInterval, CachePolicy::kWatermark,
    CachePolicy::kOom};

}  // namespace

absl::StatusOr<std::unique_ptr<CachePolicy>> CachePolicy::Create(
    CachePolicyOptions options, DeviceMemoryOps* ops) {
  if (ops == nullptr) return absl::InvalidArgumentError("DeviceMemoryOps is null");
  if (options.empty_cache_every < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "empty_cache_every = ", options.empty_cache_every, " is negative"));
  }
  if (options.empty_cache_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("empty_cache_interval = ",
                     absl::FormatDuration(options.empty_cache_interval),
                     " is negative"));
  }
  if (!(options.memory_watermark >= 0.0 && options.memory_watermark <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory_watermark = ", options.memory_watermark, " is not in [0, 1]"));
  }
  return std::unique_ptr<CachePolicy>(new CachePolicy(std::move(options), ops));
}

CachePolicy::CachePolicy(CachePolicyOptions options, DeviceMemoryOps* ops)
    : options_(std::move(options)),
      ops_(ops),
      clock_(options_.clock != nullptr ? options_.clock : Clock::RealClock()) {
  absl::MutexLock lock(&mu_);
  last_clear_ = clock_->TimeNow();
}

bool CachePolicy::Supported() {
  if (ops_->SupportsEmptyCache()) return true;
  const bool any_configured = options_.empty_cache_every > 0 ||
                              options_.empty_cache_interval > absl::ZeroDuration() ||
                              options_.memory_watermark > 0.0;
  if (any_configured && !logged_unsupported_.exchange(true)) {
    LOG(INFO) << "cache clearing is a no-op on " << options_.device_name
              << ": it has no allocator cache";
  }
  return false;
}

int64_t CachePolicy::Join() {
  absl::MutexLock lock(&mu_);
  const int64_t id = next_user_++;
  users_[id] = UserState{};
  return id;
}

void CachePolicy::Leave(int64_t user) {
  absl::MutexLock lock(&mu_);
  users_.erase(user);
}

int CachePolicy::users() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(users_.size());
}

void CachePolicy::WorkStarted(int64_t user) {
  absl::MutexLock lock(&mu_);
  auto it = users_.find(user);
  if (it != users_.end()) ++it->second.in_flight;
}

void CachePolicy::WorkEnded(int64_t user) {
  absl::MutexLock lock(&mu_);
  auto it = users_.find(user);
  if (it != users_.end() && it->second.in_flight > 0) --it->second.in_flight;
}

void CachePolicy::BetweenBatches(int64_t user, bool idle) {
  {
    absl::MutexLock lock(&mu_);
    auto it = users_.find(user);
    if (it != users_.end()) it->second.reported_busy = !idle;
  }
  Report(idle);
}

void CachePolicy::BetweenBatches(bool idle) { Report(idle); }

bool CachePolicy::DeviceIdle() const {
  for (const auto& [id, u] : users_) {
    if (u.reported_busy || u.in_flight > 0) return false;
  }
  return true;
}

void CachePolicy::Report(bool idle) {
  if (!Supported()) return;
  bool over = false;
  if (options_.memory_watermark > 0.0) {
    const MemoryStats s = ops_->Stats();
    over = s.allocated_bytes >= 0 && s.limit_bytes > 0 &&
           static_cast<double>(s.allocated_bytes) >
               options_.memory_watermark * static_cast<double>(s.limit_bytes);
  }
  Trigger trigger;
  {
    absl::MutexLock lock(&mu_);
    trigger = Decide(idle && DeviceIdle(), over);
    if (trigger != kNone) clearing_ = true;
  }
  if (trigger != kNone) Clear(trigger);
}

CachePolicy::Trigger CachePolicy::Decide(bool idle, bool over_watermark) {
  ++batches_since_every_n_;
  if (over_watermark) watermark_pending_ = true;
  if (clearing_) return kNone;  // another caller is clearing right now
  if (options_.empty_cache_every > 0 &&
      batches_since_every_n_ >= options_.empty_cache_every) {
    return kTEveryN;
  }
  if (!idle) return kNone;
  if (watermark_pending_) return kTWatermark;
  if (options_.empty_cache_interval > absl::ZeroDuration() &&
      clock_->TimeNow() - last_clear_ >= options_.empty_cache_interval) {
    return kTInterval;
  }
  return kNone;
}

void CachePolicy::OnOutOfMemory() {
  if (!Supported()) return;
  {
    absl::MutexLock lock(&mu_);
    if (clearing_) return;  // folds into the clearing under way
    clearing_ = true;
  }
  Clear(kTOom);
}

void CachePolicy::Clear(Trigger trigger) {
  const absl::Time start = clock_->TimeNow();
  ops_->EmptyCache();
  const absl::Time end = clock_->TimeNow();
  {
    absl::MutexLock lock(&mu_);
    ++counts_[trigger];
    if (trigger == kTEveryN) batches_since_every_n_ = 0;
    watermark_pending_ = false;
    last_clear_ = end;
    clearing_ = false;
  }
  VLOG(1) << "emptied " << options_.device_name << " cache (trigger "
          << kTriggerNames[trigger] << ") in "
          << absl::ToDoubleMilliseconds(end - start) << " ms";
  if (options_.on_cache_clear) options_.on_cache_clear(kTriggerNames[trigger], end - start);
}

int64_t CachePolicy::clears(absl::string_view trigger) const {
  absl::MutexLock lock(&mu_);
  int64_t total = 0;
  for (int i = 0; i < kNumTriggers; ++i) {
    if (trigger.empty() || trigger == kTriggerNames[i]) total += counts_[i];
  }
  return total;
}

absl::StatusOr<std::shared_ptr<CachePolicy>> CachePolicies::For(
    const std::string& device, CachePolicyOptions options,
    std::shared_ptr<DeviceMemoryOps> ops) {
  absl::MutexLock lock(&mu_);
  std::weak_ptr<CachePolicy>& slot = policies_[device];
  if (std::shared_ptr<CachePolicy> live = slot.lock()) return live;
  // The policy and the ops it uses, freed together with the last user.
  struct Owned {
    std::shared_ptr<DeviceMemoryOps> ops;
    std::unique_ptr<CachePolicy> policy;
  };
  auto owned = std::make_shared<Owned>();
  owned->ops = std::move(ops);
  absl::StatusOr<std::unique_ptr<CachePolicy>> made =
      CachePolicy::Create(std::move(options), owned->ops.get());
  if (!made.ok()) {
    policies_.erase(device);
    return made.status();
  }
  owned->policy = std::move(made).value();
  std::shared_ptr<CachePolicy> policy(owned, owned->policy.get());
  slot = policy;
  return policy;
}

int CachePolicies::size() const {
  absl::MutexLock lock(&mu_);
  int live = 0;
  for (const auto& [device, p] : policies_) live += p.expired() ? 0 : 1;
  return live;
}

}  // namespace metalserve
