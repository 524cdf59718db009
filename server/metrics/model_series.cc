#include "server/metrics/model_series.h"

#include <string>

namespace metalserve {
namespace metrics_internal {

const MethodSeries* ModelSeries::Method(absl::string_view method) const {
  for (size_t i = 0; i < kInferenceMethods.size(); ++i) {
    if (method == kInferenceMethods[i]) return &methods[i];
  }
  return nullptr;
}

prometheus::Counter* ModelSeries::Reason(absl::string_view reason) const {
  for (size_t i = 0; i + 1 < kBatchReasons.size(); ++i) {
    if (reason == kBatchReasons[i]) return reasons[i];
  }
  return reasons.back();
}

const ModelSeries::DeviceSeries& ModelSeries::Device(absl::string_view device,
                                                     BatchFamilies* families) const {
  {
    absl::ReaderMutexLock lock(&devices_mu);
    auto it = devices.find(device);
    if (it != devices.end()) return it->second;
  }
  absl::MutexLock lock(&devices_mu);
  auto it = devices.find(device);
  if (it != devices.end()) return it->second;
  const prometheus::Labels labels = {
      {"model", model}, {"version", version}, {"device", std::string(device)}};
  DeviceSeries d{&families->device_batches.Add(labels), &families->device_rows.Add(labels),
                 &families->device_busy.Add(labels)};
  return devices.emplace(std::string(device), d).first->second;
}

void ModelSeries::SetDeviceForward(absl::string_view device, int64_t batch_size, double seconds,
                                   BatchFamilies* families) const {
  absl::MutexLock lock(&devices_mu);
  prometheus::Gauge*& g = forwards[{std::string(device), batch_size}];
  if (g == nullptr) {
    g = &families->device_forward.Add({{"model", model},
                                       {"version", version},
                                       {"device", std::string(device)},
                                       {"batch_size", std::to_string(batch_size)}});
  }
  g->Set(seconds);
}

std::unique_ptr<ModelSeries> ModelSeriesSet::Create(const Key& key) const {
  const prometheus::Labels labels = {{"model", key.first}, {"version", key.second}};
  auto with = [&labels](const char* name, const std::string& value) {
    prometheus::Labels l = labels;
    l.emplace(name, value);
    return l;
  };
  auto s = std::make_unique<ModelSeries>();
  s->model = key.first;
  s->version = key.second;
  for (size_t m = 0; m < kInferenceMethods.size(); ++m) {
    const prometheus::Labels method = with("method", kInferenceMethods[m]);
    for (int c = 0; c < kNumCodes; ++c) {
      prometheus::Labels l = method;
      l.emplace("code", absl::StatusCodeToString(static_cast<absl::StatusCode>(c)));
      s->methods[m].requests[c] = &requests_->requests.Add(l);
    }
    s->methods[m].duration = &requests_->duration.Add(method, LatencyBuckets());
  }
  s->queue_duration = &batches_->queue_duration.Add(labels, LatencyBuckets());
  s->compute_duration = &batches_->compute_duration.Add(labels, LatencyBuckets());
  s->rows = &batches_->rows.Add(labels, RowBuckets());
  s->padding_rows = &batches_->padding_rows.Add(labels);
  s->cut_batches = &batches_->cut_batches.Add(labels);
  s->cut_rows = &batches_->cut_rows.Add(labels);
  s->inline_batches = &batches_->inline_batches.Add(labels);
  for (size_t i = 0; i < kComputeStages.size(); ++i) {
    s->stage_seconds[i] = &batches_->stage_seconds.Add(with("stage", kComputeStages[i]));
  }
  s->stage_batches = &batches_->stage_batches.Add(labels);
  s->staging_reused = &batches_->staging_reused.Add(labels);
  for (size_t r = 0; r < kBatchReasons.size(); ++r) {
    s->reasons[r] = &batches_->batches.Add(with("reason", kBatchReasons[r]));
  }
  s->queue_depth = &batches_->queue_depth.Add(labels);
  return s;
}

void ModelSeriesSet::Remove(const ModelSeries& s) const {
  for (const MethodSeries& m : s.methods) {
    for (prometheus::Counter* c : m.requests) requests_->requests.Remove(c);
    requests_->duration.Remove(m.duration);
  }
  batches_->queue_duration.Remove(s.queue_duration);
  batches_->compute_duration.Remove(s.compute_duration);
  batches_->rows.Remove(s.rows);
  batches_->padding_rows.Remove(s.padding_rows);
  batches_->cut_batches.Remove(s.cut_batches);
  batches_->cut_rows.Remove(s.cut_rows);
  batches_->inline_batches.Remove(s.inline_batches);
  for (prometheus::Counter* c : s.stage_seconds) batches_->stage_seconds.Remove(c);
  batches_->stage_batches.Remove(s.stage_batches);
  batches_->staging_reused.Remove(s.staging_reused);
  for (prometheus::Counter* c : s.reasons) batches_->batches.Remove(c);
  batches_->queue_depth.Remove(s.queue_depth);
  if (s.queue_capacity != nullptr) batches_->queue_capacity.Remove(s.queue_capacity);
  absl::MutexLock lock(&s.devices_mu);
  for (const auto& [device, d] : s.devices) {
    batches_->device_batches.Remove(d.batches);
    batches_->device_rows.Remove(d.rows);
    batches_->device_busy.Remove(d.busy);
  }
  for (const auto& [cell, g] : s.forwards) batches_->device_forward.Remove(g);
}

const ModelSeries* ModelSeriesSet::Acquire(absl::string_view model, absl::string_view version,
                                           int64_t queue_capacity_rows) {
  absl::MutexLock lock(&mu_);
  const Key key{std::string(model), std::string(version)};
  Entry& e = entries_[key];
  if (e.series == nullptr) e.series = Create(key);
  ++e.holders;
  if (queue_capacity_rows > 0) {
    if (e.series->queue_capacity == nullptr) {
      e.series->queue_capacity =
          &batches_->queue_capacity.Add({{"model", key.first}, {"version", key.second}});
    }
    e.series->queue_capacity->Set(static_cast<double>(queue_capacity_rows));
  }
  return e.series.get();
}

void ModelSeriesSet::Release(absl::string_view model, absl::string_view version) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(Key{std::string(model), std::string(version)});
  if (it == entries_.end() || --it->second.holders > 0) return;
  Remove(*it->second.series);
  entries_.erase(it);
}

}  // namespace metrics_internal
}  // namespace metalserve
