#include "client/load_generator.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <random>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/grpc_transport.h"

namespace metalserve::client {

namespace {

constexpr int kNumShards = 8;
constexpr int kNumCodes = 17;  // grpc::StatusCode 0..16
constexpr absl::Duration kProgressInterval = absl::Seconds(1);
// The open-loop scheduler waits at most this long at a time, to notice Stop().
constexpr absl::Duration kMaxSchedulerSleep = absl::Milliseconds(50);

// Per-thread slice of a phase's results; merged when the phase ends.
struct Shard {
  absl::Mutex mu;
  LatencyHistogram latency ABSL_GUARDED_BY(mu);
  int64_t ok ABSL_GUARDED_BY(mu) = 0;
  std::array<int64_t, kNumCodes> errors ABSL_GUARDED_BY(mu) = {};
  std::array<std::vector<std::string>, kNumCodes> messages ABSL_GUARDED_BY(mu);
  LatencyHistogram server_queue ABSL_GUARDED_BY(mu);
  LatencyHistogram server_compute ABSL_GUARDED_BY(mu);
  int64_t queue_us ABSL_GUARDED_BY(mu) = 0;
  int64_t compute_us ABSL_GUARDED_BY(mu) = 0;
  int64_t batch_rows ABSL_GUARDED_BY(mu) = 0;
  absl::Time last_done ABSL_GUARDED_BY(mu) = absl::InfinitePast();
};

// Completion threads pick shards round-robin on first use, so a few gRPC
// threads rarely contend.
int ThisThreadShard() {
  static std::atomic<int> next{0};
  thread_local const int shard = next.fetch_add(1) % kNumShards;
  return shard;
}

// Adds `message` to `kept` unless it is there or kept is full.
void KeepMessage(absl::string_view message, std::vector<std::string>& kept) {
  if (kept.size() >= static_cast<size_t>(kMaxMessagesPerCode)) return;
  std::string m = TruncateMessage(message);
  if (std::find(kept.begin(), kept.end(), m) == kept.end()) {
    kept.push_back(std::move(m));
  }
}

}  // namespace

// One warmup or measurement. Owned jointly (shared_ptr) by RunPhase and
// every call in flight, so a late callback never touches freed state.
class LoadGenerator::Phase : public std::enable_shared_from_this<Phase> {
 public:
  Phase(LoadGenerator& gen, const LoadSpec& spec, bool warmup)
      : gen_(gen), clock_(gen.clock_), spec_(spec), warmup_(warmup),
        versions_(Workers(gen, spec)) {}

  void Start() {
    start_ = clock_->TimeNow();
    end_ = start_ + (warmup_ ? spec_.warmup : spec_.duration);
    if (spec_.open_loop()) {
      {
        absl::MutexLock l(&mu_);
        schedulers_left_ = spec_.open_loop_threads;
      }
      for (int j = 0; j < spec_.open_loop_threads; ++j) {
        schedulers_.emplace_back([this, j] { Schedule(j); });
      }
      return;
    }
    for (int slot = 0; slot < spec_.concurrency; ++slot) {
      if (!TryClaim(start_)) break;
      {
        absl::MutexLock l(&mu_);
        ++outstanding_;
      }
      Issue(slot, clock_->TimeNow());
    }
    absl::MutexLock l(&mu_);
    scheduling_done_ = true;
  }

  // Blocks until every call has finished, offering progress once a second.
  void Wait(const ProgressFn& progress) {
    for (;;) {
      Progress p;
      {
        absl::MutexLock l(&mu_);
        auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return scheduling_done_ && outstanding_ == 0;
        };
        const absl::Time next = clock_->TimeNow() + kProgressInterval;
        if (clock_->AwaitWithDeadline(&mu_, absl::Condition(&idle), next)) {
          break;
        }
        p.outstanding = outstanding_;
      }
      p.warmup = warmup_;
      p.elapsed = clock_->TimeNow() - start_;
      p.ok = done_ok_.load(std::memory_order_relaxed);
      p.errors = done_err_.load(std::memory_order_relaxed);
      if (progress) progress(p);
    }
    for (std::thread& t : schedulers_) t.join();
  }

  RunStats Collect() {
    RunStats stats;
    absl::Time last = start_;
    for (Shard& s : shards_) {
      absl::MutexLock l(&s.mu);
      stats.latency.Merge(s.latency);
      stats.ok += s.ok;
      for (int c = 1; c < kNumCodes; ++c) {
        if (s.errors[c] == 0) continue;
        const std::string name = StatusCodeName(static_cast<grpc::StatusCode>(c));
        stats.errors[name] += s.errors[c];
        for (const std::string& m : s.messages[c]) {
          KeepMessage(m, stats.error_messages[name]);
        }
      }
      stats.server_queue.Merge(s.server_queue);
      stats.server_compute.Merge(s.server_compute);
      stats.server_queue_us_sum += s.queue_us;
      stats.server_compute_us_sum += s.compute_us;
      stats.server_batch_rows_sum += s.batch_rows;
      last = std::max(last, s.last_done);
    }
    const int64_t overflow = overflow_.load();
    if (overflow > 0) stats.errors[kOverflowError] = overflow;
    ModelVersionStats versions = versions_.Stats();
    stats.versions = std::move(versions.responses);
    stats.model_version_regressions = versions.regressions;
    stats.rows = stats.ok * gen_.transport_->rows_per_request();
    stats.elapsed = last - start_;
    return stats;
  }

 private:
  struct Call {
    absl::Time start;
    int slot = 0;
    // The newest version the slot had seen answer when this call was sent.
    int64_t newest_version = ModelVersionWatch::kNoneSeen;
  };

  // The workers whose answers must never go back to an older version: the
  // closed loop's slots (one call each at a time), or the open loop's lanes.
  static size_t Workers(const LoadGenerator& gen, const LoadSpec& spec) {
    return spec.open_loop() ? gen.transport_->lanes()
                            : static_cast<size_t>(std::max(spec.concurrency, 1));
  }

  // Claims the right to start one more call at `now`.
  bool TryClaim(absl::Time now) {
    if (gen_.stop_.load(std::memory_order_relaxed) || now >= end_) return false;
    if (!warmup_ && spec_.max_requests >= 0 &&
        issued_.fetch_add(1, std::memory_order_relaxed) >= spec_.max_requests) {
      return false;
    }
    return true;
  }

  // Starts one call timed from `start`; the caller counted it outstanding.
  void Issue(int slot, absl::Time start) {
    const Call call{start, slot, versions_.NewestSeen(static_cast<size_t>(slot))};
    gen_.transport_->Start(static_cast<size_t>(slot), spec_.deadline,
                           [self = shared_from_this(), call](CallResult r) {
                             self->OnDone(call, r);
                           });
  }

  void OnDone(const Call& call, const CallResult& result) {
    const absl::Time now = clock_->TimeNow();
    if (result.code == grpc::StatusCode::OK) {
      // Before the slot's next call is sent, which reads what this one saw.
      versions_.Record(static_cast<size_t>(call.slot), call.newest_version,
                       result.model_version);
    }
    Record(call, result, now);
    gen_.CountFinishedCall();
    if (!spec_.open_loop() && TryClaim(now)) {
      Issue(call.slot, now);  // the slot stays outstanding
      return;
    }
    absl::MutexLock l(&mu_);
    --outstanding_;
  }

  void Record(const Call& call, const CallResult& result, absl::Time now) {
    Shard& s = shards_[ThisThreadShard()];
    absl::MutexLock l(&s.mu);
    s.last_done = std::max(s.last_done, now);
    if (result.code == grpc::StatusCode::OK) {
      s.latency.Record(now - call.start);
      ++s.ok;
      RecordServer(s, result.queue_us, result.compute_us, result.batch_rows);
      done_ok_.fetch_add(1, std::memory_order_relaxed);
    } else {
      int code = static_cast<int>(result.code);
      if (code < 0 || code >= kNumCodes) code = 2;  // UNKNOWN
      ++s.errors[code];
      KeepMessage(result.message, s.messages[code]);
      done_err_.fetch_add(1, std::memory_order_relaxed);
    }
  }

  static void RecordServer(Shard& s, int64_t queue_us, int64_t compute_us,
                           int64_t batch_rows) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    s.queue_us += queue_us;
    s.compute_us += compute_us;
    s.batch_rows += batch_rows;
    s.server_queue.Record(absl::Microseconds(queue_us));
    s.server_compute.Record(absl::Microseconds(compute_us));
  }

  // Open loop: sender `j` of n = open_loop_threads issues its share of the
  // calls at their intended times, never waiting for completions. Constant
  // arrivals: call i is due at i / rate and sender i mod n sends it, so the
  // due times are those of one sender. Poisson: each sender draws its own
  // Poisson stream of rate / n (seed + j); the union of n independent
  // Poisson streams is one Poisson stream of the whole rate. Sender 0 sends
  // its first call at once, as the single sender did; the others start
  // with a drawn gap, so that n calls do not all go at the start. With
  // n = 1 both are the single sender's schedule of before, draw for draw.
  void Schedule(int j) {
    const int n = spec_.open_loop_threads;
    std::mt19937_64 rng(spec_.seed + static_cast<uint64_t>(j));
    std::exponential_distribution<double> gap(spec_.rate / n);
    double poisson_offset_s =
        spec_.arrival == Arrival::kPoisson && j > 0 ? gap(rng) : 0.0;
    const auto lanes = static_cast<int64_t>(gen_.transport_->lanes());
    for (int64_t k = 0;; ++k) {
      // The call's number in the whole schedule (exact for constant spacing).
      const int64_t i = k * n + j;
      // Constant spacing: call i is due at exactly i / rate, not at a sum
      // of rounded gaps, so a run of rate R for D seconds sends R * D calls.
      const double offset_s = spec_.arrival == Arrival::kPoisson
                                  ? poisson_offset_s
                                  : static_cast<double>(i) / spec_.rate;
      const absl::Time due = start_ + absl::Seconds(offset_s);
      if (!SleepUntil(due) || !TryClaim(due)) break;
      bool send = false;
      {
        absl::MutexLock l(&mu_);
        if (outstanding_ < spec_.max_outstanding) {
          ++outstanding_;
          send = true;
        }
      }
      if (send) {
        Issue(static_cast<int>(i % lanes), due);
      } else {
        overflow_.fetch_add(1);
        done_err_.fetch_add(1, std::memory_order_relaxed);
        gen_.CountFinishedCall();
      }
      if (spec_.arrival == Arrival::kPoisson) poisson_offset_s += gap(rng);
    }
    absl::MutexLock l(&mu_);
    if (--schedulers_left_ == 0) scheduling_done_ = true;
  }

  // Waits on the clock until `due`; false when the phase ends first.
  bool SleepUntil(absl::Time due) {
    if (due >= end_) return false;
    absl::MutexLock l(&mu_);
    auto stopped = [this] { return gen_.stop_.load(std::memory_order_relaxed); };
    for (;;) {
      if (stopped()) return false;
      const absl::Time now = clock_->TimeNow();
      if (now >= due) return true;
      clock_->AwaitWithDeadline(&mu_, absl::Condition(&stopped),
                                std::min(due, now + kMaxSchedulerSleep));
    }
  }

  LoadGenerator& gen_;
  Clock* const clock_;
  const LoadSpec spec_;
  const bool warmup_;
  absl::Time start_;
  absl::Time end_;
  std::vector<std::thread> schedulers_;

  absl::Mutex mu_;
  int64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  bool scheduling_done_ ABSL_GUARDED_BY(mu_) = false;
  // Open-loop senders still scheduling.
  int schedulers_left_ ABSL_GUARDED_BY(mu_) = 0;

  std::atomic<int64_t> issued_{0};
  std::atomic<int64_t> overflow_{0};
  std::atomic<int64_t> done_ok_{0};
  std::atomic<int64_t> done_err_{0};
  std::array<Shard, kNumShards> shards_;
  ModelVersionWatch versions_;
};

absl::StatusOr<std::unique_ptr<LoadGenerator>> LoadGenerator::Create(
    std::vector<std::shared_ptr<grpc::Channel>> channels,
    v1::PredictRequest request, Clock* clock) {
  if (channels.empty()) return absl::InvalidArgumentError("no channels");
  return Create(NewPredictTransport(std::move(channels), std::move(request)), clock);
}

absl::StatusOr<std::unique_ptr<LoadGenerator>> LoadGenerator::Create(
    std::vector<std::shared_ptr<grpc::Channel>> channels,
    inference::ModelInferRequest request, Clock* clock) {
  if (channels.empty()) return absl::InvalidArgumentError("no channels");
  return Create(NewModelInferTransport(std::move(channels), std::move(request)), clock);
}

absl::StatusOr<std::unique_ptr<LoadGenerator>> LoadGenerator::Create(
    std::unique_ptr<CallTransport> transport, Clock* clock) {
  if (transport == nullptr || transport->lanes() == 0) {
    return absl::InvalidArgumentError("no transport");
  }
  if (clock == nullptr) return absl::InvalidArgumentError("no clock");
  return std::unique_ptr<LoadGenerator>(new LoadGenerator(std::move(transport), clock));
}

absl::StatusOr<RunStats> LoadGenerator::Run(const LoadSpec& spec,
                                            const ProgressFn& progress) {
  if (spec.open_loop()) {
    if (spec.open_loop_threads < 1 || spec.open_loop_threads > 64) {
      return absl::InvalidArgumentError(absl::StrCat(
          "open_loop_threads ", spec.open_loop_threads, " is not in [1, 64]"));
    }
    if (spec.max_outstanding < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("max_outstanding ", spec.max_outstanding, " < 1"));
    }
  } else if (spec.concurrency < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("concurrency ", spec.concurrency, " < 1"));
  }
  if (spec.rate < 0) {
    return absl::InvalidArgumentError(absl::StrCat("rate ", spec.rate, " < 0"));
  }
  if (spec.duration == absl::InfiniteDuration() && spec.max_requests < 0) {
    return absl::InvalidArgumentError("give a duration or a request count");
  }
  if (spec.duration <= absl::ZeroDuration() || spec.max_requests == 0 ||
      spec.deadline <= absl::ZeroDuration() || spec.warmup < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "duration, request count and deadline must be positive, warmup >= 0");
  }
  if (spec.warmup > absl::ZeroDuration()) {
    auto warm = RunPhase(spec, /*warmup=*/true, progress);
    if (!warm.ok()) return warm.status();
  }
  if (stop_.load()) return absl::CancelledError("stopped before measuring");
  return RunPhase(spec, /*warmup=*/false, progress);
}

void LoadGenerator::CountFinishedCall() {
  absl::MutexLock l(&finished_mu_);
  ++finished_calls_;
}

bool LoadGenerator::AwaitFinishedCalls(int64_t n,
                                       absl::Duration timeout) const {
  absl::MutexLock l(&finished_mu_);
  auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(finished_mu_) {
    return finished_calls_ >= n;
  };
  return finished_mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
}

absl::StatusOr<RunStats> LoadGenerator::RunPhase(const LoadSpec& spec,
                                                 bool warmup,
                                                 const ProgressFn& progress) {
  auto phase = std::make_shared<Phase>(*this, spec, warmup);
  phase->Start();
  phase->Wait(progress);
  return phase->Collect();
}

}  // namespace metalserve::client
