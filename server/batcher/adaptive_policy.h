// AdaptivePolicy: when a forming batch should close, decided from an online
// estimate of the arrival rate and of the cost of a batch per size, so that
// the batcher waits only while waiting is expected to pay.
//
// Why: a fixed max_queue_delay is a tax at light load (a lone request waits
// the whole delay although nothing else can arrive: the identity model at
// one client answered at p50 2.6 ms against 0.14 ms unbatched) and is needed
// at heavy load (at 256 clients batches are what keeps throughput up). No
// fixed value is right for both.
//
// The rule (one-step lookahead, evaluated at every Poll while the batch is
// neither full nor past max_queue_delay). Let, at `now`:
//   n    rows of the batch that would close now,
//   k    rows the next request is expected to bring: the running mean of
//        rows per request, capped by the room left (max_batch_size - n),
//   tau  expected time until that request arrives: the running mean of the
//        gaps between requests, or the time since the last arrival when that
//        is already longer (so a rate that drops is seen before the next
//        arrival); infinite before two requests have been seen,
//   F    time until the device is free: max(0, device_free_at - now), where
//        device_free_at is the estimated end of the forwards already handed
//        to the device, each at its device time (the batcher tells it; 0 when
//        nothing runs). Deliberately the device alone, not the executors'
//        occupancy: a variant that also waited while another executor was
//        busy answering (F from the occupancy) made the two executors take
//        turns, and measured here (identity, c=64 and 256, interleaved with
//        the same build's fixed delays) it lost to fixed 0 ms, which runs
//        both side by side; batches grew no larger,
//   c(m) estimated cost of a batch of m rows (after padding) as the server
//        pays it: the larger of the device time of one batch (timed at
//        warm-up for each warm-up size and refined from every batch's run)
//        and the executor's whole occupancy by the batch, measured end to end
//        for every batch (hand-off to the runner, gathering inputs, forward,
//        scattering outputs, answering each request) and fitted with a line
//        across sizes (LinearCostFit).
//        The occupancy carries the server's own per-batch overhead (a fixed
//        part, paid once per batch, and a part per row): on a model whose
//        forward costs microseconds it is most of the cost, and a curve of
//        the forward alone never let a batch wait for it (batches of ~18
//        rows where a fixed 5 ms delay filled 31). On the identity model
//        at 64-256 clients batches still come out at 15-25 rows: there the
//        executors are seldom what is busy (the shared CPU is), and whether
//        the remaining throughput gap to a fixed delay is real is below
//        this machine's noise (README, policies).
// Summing the completion times, counted from now, of the n waiting rows and
// the k expected rows:
//   close now:  A = n * (F + c(n)) + k * (max(tau, F + c(n)) + c(k))
//               (the next request runs alone once it has come and the
//               device has finished this batch);
//   wait for it: B = (n + k) * (max(tau, F) + c(n + k)).
// Wait while B < A and the request is expected before max_queue_delay ends;
// otherwise close (reason kNoGain). Consequences:
//  * Light load (tau large against c): B - A ~ n * tau > 0, close at once; a
//    lone request with nothing expected (tau infinite) never waits.
//  * Device busy (F >= tau): waiting costs nothing the rows would not wait
//    anyway, and a subadditive cost curve makes B < A: the batch grows until
//    the device is free (the device never sits idle for the sake of a batch).
//  * Heavy load, device idle, c(m) = c0 + r * m: wait while
//    (n + k) * tau + k * (r * n - c0) < 0, i.e. until n ~ (c0 - tau) / (tau + r)
//    for k = 1: the batch grows while the fixed cost it saves exceeds the
//    latency its rows pay for the wait. c0 holds the per-batch overhead: a
//    model whose forward costs 20 us but whose batch occupies its executor
//    400 us waits for ~12 rows at 50,000 requests/s, where the forward alone
//    (c0 < tau) sent every request on its own.
//  * max_queue_delay stays the bound: the queue closes at the oldest row's
//    delay expiry whatever the policy says.
// With no cost figures (c = 0) the rule never waits: it degrades to
// max_queue_delay = 0 until measured batches refine the curve.
//
// Thread-safety: none; the owner (BatchQueue, under the Batcher's lock)
// serialises access. Free of clocks: every call takes `now`.
#ifndef METALSERVE_SERVER_BATCHER_ADAPTIVE_POLICY_H_
#define METALSERVE_SERVER_BATCHER_ADAPTIVE_POLICY_H_

#include <cstdint>
#include <vector>

#include "absl/time/time.h"

namespace metalserve {

// The measured cost of one batch of `rows` rows (e.g. from the runtime's
// warm-up). A plain struct so that the batcher needs nothing of the runtime.
struct BatchCostPoint {
  int64_t rows = 0;
  absl::Duration cost;
};

// Running estimate of the gap between requests and of their rows.
class ArrivalEstimator {
 public:
  // Weight of the newest gap in the running mean. 1/8: after a change of
  // rate, 20 arrivals bring the estimate within 7 % of the new gap.
  static constexpr double kAlpha = 0.125;

  void OnArrival(absl::Time now, int64_t rows);
  // Expected time from `now` until the next request: the mean gap, or the
  // time since the last arrival when longer. Infinite before two arrivals.
  absl::Duration ExpectedGap(absl::Time now) const;
  double mean_rows() const { return mean_rows_; }
  absl::Duration mean_gap() const { return absl::Seconds(mean_gap_s_); }

 private:
  int64_t arrivals_ = 0;
  absl::Time last_ = absl::InfinitePast();
  double mean_gap_s_ = 0;
  double mean_rows_ = 1;
};

// Cost of a batch per size: seeded with measured points (warm-up), refined
// from every batch that runs. Between measured sizes the cost is linear;
// below the smallest it is the smallest's; above the largest it extends the
// slope of the two largest (flat with one point). Empty: every cost is 0.
class BatchCostModel {
 public:
  // Weight of a new observation at its size.
  static constexpr double kAlpha = 0.25;
  // An observation counts as at most this multiple of the current figure, so
  // one batch stalled by a busy CPU (measured: 10-40x the usual occupancy on
  // a shared 2-core machine) raises the figure by at most 75 %, while a
  // lasting change is still followed within a few batches.
  static constexpr double kMaxStep = 4.0;

  explicit BatchCostModel(int64_t max_rows = 0);
  void Seed(const std::vector<BatchCostPoint>& points);
  void Observe(int64_t rows, absl::Duration cost);
  absl::Duration Cost(int64_t rows) const;

 private:
  std::vector<double> cost_s_;  // by rows; < 0: not measured
};

// The executor's occupancy per batch as a line, c(m) = a + b * m (a, b >= 0),
// fitted by least squares to every batch, a newer batch weighing more (each
// observation's weight falls by a factor 1 - kAlpha with every later one).
//
// Why a line and not a figure per size (BatchCostModel): the occupancy is
// measured under whatever else the CPU is doing, so single figures scatter
// by 4x, and under load the batches come in a few sizes while the rule
// asks for all of them. Per size, the table held whichever batch of that
// size ran last: measured on the identity model at 256 clients, c(2) stood
// at 202 us beside c(1) = 25 us (so a second row looked eight times dearer
// than the first and batches closed at one row), and c(5) = 451 us above
// c(32) = 427 us. Fitted to all sizes, one size seen rarely or in a stall
// moves the line by its weight only, and the curve is monotone by
// construction, as the occupancy is (more rows never cost less).
class LinearCostFit {
 public:
  // Weight of the newest batch: the fit reflects about the last 32.
  static constexpr double kAlpha = 1.0 / 32;

  void Observe(int64_t rows, absl::Duration cost);
  // 0 before any batch; flat (the mean) while one size only has been seen.
  absl::Duration Cost(int64_t rows) const;

 private:
  // Weighted sums of 1, m, c, m^2 and m * c over the batches seen.
  double w_ = 0, m_ = 0, c_ = 0, mm_ = 0, mc_ = 0;
  int64_t largest_ = 0;  // the most rows seen in one batch
};

// When the device is expected to be free: the batches handed to it run one
// after another, each for its estimated cost. A batch that comes back takes
// its estimate with it, so the figure never drifts ahead of the work still
// in flight (before this, a device kept busy by two executors never
// reached "nothing in flight", its free time ran away into the future, and
// the policy waited the whole delay while the latency target refused
// everything).
class DeviceLoad {
 public:
  // A batch estimated at `cost` was handed to the device at `now`.
  absl::Time Started(absl::Time now, absl::Duration cost);
  // A batch estimated at `cost` came back at `end`.
  absl::Time Done(absl::Time end, absl::Duration cost);
  absl::Time free_at() const { return free_at_; }

 private:
  int in_flight_ = 0;
  absl::Duration in_flight_cost_;
  absl::Time free_at_ = absl::InfinitePast();
};

class AdaptivePolicy {
 public:
  struct Decision {
    bool close = true;
    // When to decide again if nothing arrives (only when !close).
    absl::Time reconsider_at = absl::InfiniteFuture();
  };

  // `padded_rows(m)`: rows a batch of m runs at; costs are looked up there.
  AdaptivePolicy(int64_t max_batch_size, std::vector<int64_t> allowed_batch_sizes,
                 const std::vector<BatchCostPoint>& seed);

  void OnArrival(absl::Time now, int64_t rows) { arrivals_.OnArrival(now, rows); }
  // The device time of a batch that ran at `padded_rows` (the runner's).
  void ObserveBatch(int64_t padded_rows, absl::Duration cost) {
    costs_.Observe(padded_rows, cost);
  }
  // How long a batch of `padded_rows` occupied its executor, end to end
  // (from the hand-off until its last request was answered).
  void ObserveOccupancy(int64_t padded_rows, absl::Duration took) {
    occupancy_.Observe(padded_rows, took);
  }
  void SetDeviceFreeAt(absl::Time t) { device_free_at_ = t; }
  absl::Time device_free_at() const { return device_free_at_; }

  // Whether a batch of `rows` should close at `now`; `delay_expiry` is when
  // its oldest row's max_queue_delay ends (the bound). See the file comment.
  Decision Decide(int64_t rows, absl::Time now, absl::Time delay_expiry) const;

  // Estimated cost c(m) of a batch of `rows` (padded): the larger of its
  // device time and its executor occupancy (see the file comment).
  absl::Duration CostOf(int64_t rows) const;
  // Its device time alone (the forward, padded).
  absl::Duration DeviceCostOf(int64_t rows) const;
  const ArrivalEstimator& arrivals() const { return arrivals_; }

 private:
  int64_t Padded(int64_t rows) const;

  const int64_t max_batch_size_;
  const std::vector<int64_t> allowed_;
  ArrivalEstimator arrivals_;
  BatchCostModel costs_;      // device time per batch
  LinearCostFit occupancy_;   // executor occupancy per batch, end to end
  absl::Time device_free_at_ = absl::InfinitePast();
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_BATCHER_ADAPTIVE_POLICY_H_
