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

void CachePolicy::BetweenBatches(bool idle) {
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
    trigger = Decide(idle, over);
  }
  if (trigger != kNone) Clear(trigger);
}

CachePolicy::Trigger CachePolicy::Decide(bool idle, bool over_watermark) {
  ++batches_since_every_n_;
  if (over_watermark) watermark_pending_ = true;
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

}  // namespace metalserve
