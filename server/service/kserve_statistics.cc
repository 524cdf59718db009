#include "server/service/kserve_statistics.h"

namespace metalserve {

void KServeStatistics::RecordSuccess(int64_t rows, absl::Duration total,
                                     absl::Duration queue, absl::Duration compute,
                                     absl::Time now) {
  absl::MutexLock l(&mu_);
  ++s_.success_count;
  s_.success_ns += absl::ToInt64Nanoseconds(total);
  s_.queue_ns += absl::ToInt64Nanoseconds(queue);
  s_.compute_ns += absl::ToInt64Nanoseconds(compute);
  s_.rows += rows;
  s_.last_success_ms = absl::ToUnixMillis(now);
}

void KServeStatistics::RecordFailure(absl::Duration total) {
  absl::MutexLock l(&mu_);
  ++s_.fail_count;
  s_.fail_ns += absl::ToInt64Nanoseconds(total);
}

KServeStatistics::Snapshot KServeStatistics::Get() const {
  absl::MutexLock l(&mu_);
  return s_;
}

void KServeStatistics::AddTo(const ModelInfo& model,
                             inference::ModelStatisticsResponse* response) const {
  const Snapshot snap = Get();
  inference::ModelStatistics* m = response->add_model_stats();
  m->set_name(model.name);
  m->set_version(model.version);
  m->set_last_inference(static_cast<uint64_t>(snap.last_success_ms));
  m->set_inference_count(static_cast<uint64_t>(snap.rows));
  m->set_execution_count(static_cast<uint64_t>(snap.success_count));
  auto set = [](inference::StatisticDuration* d, int64_t count, int64_t ns) {
    d->set_count(static_cast<uint64_t>(count));
    d->set_ns(static_cast<uint64_t>(ns));
  };
  inference::InferStatistics* st = m->mutable_inference_stats();
  set(st->mutable_success(), snap.success_count, snap.success_ns);
  set(st->mutable_fail(), snap.fail_count, snap.fail_ns);
  set(st->mutable_queue(), snap.success_count, snap.queue_ns);
  set(st->mutable_compute_infer(), snap.success_count, snap.compute_ns);
}

}  // namespace metalserve
