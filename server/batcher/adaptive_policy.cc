#include "server/batcher/adaptive_policy.h"

#include <algorithm>
#include <utility>

namespace metalserve {
namespace {

// The policy re-decides at least this far apart while it waits, so that a
// tiny expected gap does not make the executor spin.
constexpr absl::Duration kMinReconsider = absl::Microseconds(20);

}  // namespace

void ArrivalEstimator::OnArrival(absl::Time now, int64_t rows) {
  if (arrivals_ >= 1) {
    const double gap = absl::ToDoubleSeconds(std::max(now - last_, absl::ZeroDuration()));
    mean_gap_s_ = arrivals_ == 1 ? gap : mean_gap_s_ + kAlpha * (gap - mean_gap_s_);
    mean_rows_ += kAlpha * (static_cast<double>(rows) - mean_rows_);
  } else {
    mean_rows_ = static_cast<double>(rows);
  }
  last_ = std::max(last_, now);
  ++arrivals_;
}

absl::Duration ArrivalEstimator::ExpectedGap(absl::Time now) const {
  if (arrivals_ < 2) return absl::InfiniteDuration();
  return std::max(absl::Seconds(mean_gap_s_), now - last_);
}

BatchCostModel::BatchCostModel(int64_t max_rows)
    : cost_s_(static_cast<size_t>(std::max<int64_t>(max_rows, 0) + 1), -1.0) {}

void BatchCostModel::Seed(const std::vector<BatchCostPoint>& points) {
  for (const BatchCostPoint& p : points) {
    if (p.rows < 1 || p.rows >= static_cast<int64_t>(cost_s_.size())) continue;
    cost_s_[static_cast<size_t>(p.rows)] = absl::ToDoubleSeconds(p.cost);
  }
}

void BatchCostModel::Observe(int64_t rows, absl::Duration cost) {
  if (rows < 1 || rows >= static_cast<int64_t>(cost_s_.size())) return;
  double& c = cost_s_[static_cast<size_t>(rows)];
  double seen = absl::ToDoubleSeconds(std::max(cost, absl::ZeroDuration()));
  if (c > 0) seen = std::min(seen, kMaxStep * c);  // one stall is not a new cost
  c = c < 0 ? seen : c + kAlpha * (seen - c);
}

absl::Duration BatchCostModel::Cost(int64_t rows) const {
  const int64_t size = static_cast<int64_t>(cost_s_.size());
  int64_t below = -1, above = -1, top = -1, second = -1;
  for (int64_t m = 1; m < size; ++m) {
    if (cost_s_[m] < 0) continue;
    if (m <= rows) below = m;
    if (m >= rows && above < 0) above = m;
    second = top;
    top = m;
  }
  if (top < 0) return absl::ZeroDuration();
  if (below < 0) return absl::Seconds(cost_s_[above]);
  if (above < 0) {  // beyond the largest measured size
    const double slope = second < 0 ? 0.0
        : (cost_s_[top] - cost_s_[second]) / static_cast<double>(top - second);
    return absl::Seconds(cost_s_[top] + std::max(slope, 0.0) * (rows - top));
  }
  if (above == below) return absl::Seconds(cost_s_[below]);
  const double f = static_cast<double>(rows - below) / static_cast<double>(above - below);
  return absl::Seconds(cost_s_[below] + f * (cost_s_[above] - cost_s_[below]));
}

void LinearCostFit::Observe(int64_t rows, absl::Duration cost) {
  if (rows < 1) return;
  double seen = absl::ToDoubleSeconds(std::max(cost, absl::ZeroDuration()));
  // One stalled batch is not a new cost (as BatchCostModel::kMaxStep); a
  // size beyond the largest seen is taken as measured: the line's
  // extrapolation is no figure to bound it by.
  const double now = absl::ToDoubleSeconds(Cost(rows));
  if (now > 0 && rows <= largest_) seen = std::min(seen, BatchCostModel::kMaxStep * now);
  largest_ = std::max(largest_, rows);
  const double m = static_cast<double>(rows);
  const double keep = w_ > 0 ? 1 - kAlpha : 0;
  w_ = keep * w_ + 1;
  m_ = keep * m_ + m;
  c_ = keep * c_ + seen;
  mm_ = keep * mm_ + m * m;
  mc_ = keep * mc_ + m * seen;
}

absl::Duration LinearCostFit::Cost(int64_t rows) const {
  if (w_ <= 0) return absl::ZeroDuration();
  const double mean_m = m_ / w_, mean_c = c_ / w_;
  const double var = mm_ / w_ - mean_m * mean_m;
  // Sizes spread by less than a row's tenth: one size seen, no slope to fit.
  if (var < 0.01) return absl::Seconds(mean_c);
  double slope = std::max(0.0, (mc_ / w_ - mean_m * mean_c) / var);
  double fixed = mean_c - slope * mean_m;
  if (fixed < 0) {  // through the origin rather than below it
    fixed = 0;
    slope = mc_ / mm_;
  }
  return absl::Seconds(fixed + slope * static_cast<double>(std::max<int64_t>(rows, 0)));
}

absl::Time DeviceLoad::Started(absl::Time now, absl::Duration cost) {
  ++in_flight_;
  in_flight_cost_ += cost;
  free_at_ = std::max(free_at_, now) + cost;
  return free_at_;
}

absl::Time DeviceLoad::Done(absl::Time end, absl::Duration cost) {
  --in_flight_;
  in_flight_cost_ -= cost;
  if (in_flight_ <= 0) {
    in_flight_ = 0;
    in_flight_cost_ = absl::ZeroDuration();
    free_at_ = end;
  } else {
    // What is still in flight is done at the latest its whole cost from now.
    free_at_ = std::min(free_at_, end + in_flight_cost_);
  }
  return free_at_;
}

AdaptivePolicy::AdaptivePolicy(int64_t max_batch_size,
                               std::vector<int64_t> allowed_batch_sizes,
                               const std::vector<BatchCostPoint>& seed)
    : max_batch_size_(max_batch_size),
      allowed_(std::move(allowed_batch_sizes)),
      costs_(max_batch_size) {
  costs_.Seed(seed);
}

int64_t AdaptivePolicy::Padded(int64_t rows) const {
  for (int64_t size : allowed_) {
    if (size >= rows) return size;
  }
  return rows;
}

absl::Duration AdaptivePolicy::CostOf(int64_t rows) const {
  const int64_t padded = Padded(rows);
  return std::max(costs_.Cost(padded), occupancy_.Cost(padded));
}

absl::Duration AdaptivePolicy::DeviceCostOf(int64_t rows) const {
  return costs_.Cost(Padded(rows));
}

AdaptivePolicy::Decision AdaptivePolicy::Decide(int64_t rows, absl::Time now,
                                                absl::Time delay_expiry) const {
  Decision d;
  const int64_t room = max_batch_size_ - rows;
  const absl::Duration tau = arrivals_.ExpectedGap(now);
  if (room <= 0 || tau == absl::InfiniteDuration() || now + tau >= delay_expiry) {
    return d;  // full, nothing expected, or expected only after the bound
  }
  const double n = static_cast<double>(rows);
  const int64_t k_rows = std::clamp<int64_t>(
      static_cast<int64_t>(arrivals_.mean_rows() + 0.5), 1, room);
  const double k = static_cast<double>(k_rows);
  const double t = absl::ToDoubleSeconds(tau);
  const double f = std::max(0.0, absl::ToDoubleSeconds(device_free_at_ - now));
  const double cn = absl::ToDoubleSeconds(CostOf(rows));
  const double ck = absl::ToDoubleSeconds(CostOf(k_rows));
  // Measured costs are noisy: a larger batch is never taken as cheaper.
  const double cnk = std::max(absl::ToDoubleSeconds(CostOf(rows + k_rows)), cn);
  const double close_now = n * (f + cn) + k * (std::max(t, f + cn) + ck);
  const double wait = (n + k) * (std::max(t, f) + cnk);
  if (wait >= close_now) return d;
  d.close = false;
  absl::Duration next = std::max(tau, kMinReconsider);
  if (f > 0) next = std::min(next, std::max(absl::Seconds(f), kMinReconsider));
  d.reconsider_at = std::min(delay_expiry, now + next);
  return d;
}

}  // namespace metalserve
