#include "server/service/kserve_service.h"

#include <cstring>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/service/infer_task.h"
#include "server/service/inference_service.h"
#include "server/common/status_macros.h"
#include "server/service/raw_call.h"
#include "server/service/rpc_task.h"
#include "server/service/status_util.h"
#include "server/service/tensor_codec.h"

namespace metalserve {

using inference::InferTensorContents;
using inference::ModelInferRequest;
using inference::ModelInferResponse;

namespace {

constexpr absl::string_view kModelInfer = "ModelInfer";
constexpr absl::string_view kPlatform = "pytorch_libtorch";

struct DatatypeName {
  DType dtype;
  absl::string_view name;
};
constexpr DatatypeName kDatatypes[] = {
    {DType::kFloat32, "FP32"}, {DType::kFloat16, "FP16"},
    {DType::kBFloat16, "BF16"}, {DType::kFloat64, "FP64"},
    {DType::kInt64, "INT64"},  {DType::kInt32, "INT32"},
    {DType::kUInt8, "UINT8"},  {DType::kInt8, "INT8"},
    {DType::kBool, "BOOL"},
};

inference::DataType ConfigType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return inference::TYPE_FP32;
    case DType::kFloat16: return inference::TYPE_FP16;
    case DType::kBFloat16: return inference::TYPE_BF16;
    case DType::kFloat64: return inference::TYPE_FP64;
    case DType::kInt64: return inference::TYPE_INT64;
    case DType::kInt32: return inference::TYPE_INT32;
    case DType::kUInt8: return inference::TYPE_UINT8;
    case DType::kInt8: return inference::TYPE_INT8;
    case DType::kBool: return inference::TYPE_BOOL;
    case DType::kInvalid: break;
  }
  return inference::TYPE_INVALID;
}

std::string Datatypes() {
  return absl::StrJoin(kDatatypes, ", ", [](std::string* out, const DatatypeName& d) {
    out->append(d.name.data(), d.name.size());
  });
}

// Appends `values` to `out` as `T`, refusing any outside T's range.
template <typename T, typename Values>
absl::Status AppendAs(const Values& values, const std::string& field,
                      std::string* out) {
  out->reserve(out->size() + values.size() * sizeof(T));
  for (int i = 0; i < values.size(); ++i) {
    const auto v = values.Get(i);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max()) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, "[", i, "] = ", v, " is out of range for the datatype"));
      }
    }
    const T t = static_cast<T>(v);
    out->append(reinterpret_cast<const char*>(&t), sizeof(T));
  }
  return absl::OkStatus();
}

// Number of values set in `c`, and the name of the first field holding any.
int CountSetFields(const InferTensorContents& c, std::string* which) {
  int n = 0;
  auto note = [&](int size, const char* name) {
    if (size > 0) {
      if (n++ == 0) *which = name;
    }
  };
  note(c.bool_contents_size(), "bool_contents");
  note(c.int_contents_size(), "int_contents");
  note(c.int64_contents_size(), "int64_contents");
  note(c.uint_contents_size(), "uint_contents");
  note(c.uint64_contents_size(), "uint64_contents");
  note(c.fp32_contents_size(), "fp32_contents");
  note(c.fp64_contents_size(), "fp64_contents");
  note(c.bytes_contents_size(), "bytes_contents");
  return n;
}

// Typed contents of input `i` as little-endian bytes of `dtype`.
absl::Status ContentsToBytes(const ModelInferRequest::InferInputTensor& in,
                             DType dtype, int i, std::string* out) {
  const std::string f =
      absl::StrCat("inputs[", i, "] ('", ClientText(in.name()), "').contents");
  const InferTensorContents& c = in.contents();
  std::string which;
  const int set = CountSetFields(c, &which);
  const char* want = nullptr;
  absl::Status s;
  switch (dtype) {
    case DType::kFloat32: want = "fp32_contents"; s = AppendAs<float>(c.fp32_contents(), f + ".fp32_contents", out); break;
    case DType::kFloat64: want = "fp64_contents"; s = AppendAs<double>(c.fp64_contents(), f + ".fp64_contents", out); break;
    case DType::kInt64: want = "int64_contents"; s = AppendAs<int64_t>(c.int64_contents(), f + ".int64_contents", out); break;
    case DType::kInt32: want = "int_contents"; s = AppendAs<int32_t>(c.int_contents(), f + ".int_contents", out); break;
    case DType::kInt8: want = "int_contents"; s = AppendAs<int8_t>(c.int_contents(), f + ".int_contents", out); break;
    case DType::kUInt8: want = "uint_contents"; s = AppendAs<uint8_t>(c.uint_contents(), f + ".uint_contents", out); break;
    case DType::kBool: want = "bool_contents"; s = AppendAs<bool>(c.bool_contents(), f + ".bool_contents", out); break;
    case DType::kFloat16:
    case DType::kBFloat16:
      return absl::InvalidArgumentError(absl::StrCat(
          "inputs[", i, "] ('", ClientText(in.name()), "').datatype ",
          ClientText(in.datatype()),
          " has no typed contents field; send it in raw_input_contents"));
    case DType::kInvalid:
      break;
  }
  if (set > 1 || (set == 1 && which != want)) {
    return absl::InvalidArgumentError(absl::StrCat(
        f, ".", which, " is set; datatype ", ClientText(in.datatype()), " takes ", want,
        set > 1 ? " only (several contents fields are set)" : ""));
  }
  return s;
}

// Decodes the request's inputs; `storage` receives bytes converted from
// typed contents (views point into it or into `request`).
absl::StatusOr<std::vector<RawInput>> DecodeKServeInputs(
    const ModelInferRequest& request, std::vector<std::string>* storage) {
  const bool raw = request.raw_input_contents_size() > 0;
  if (raw && request.raw_input_contents_size() != request.inputs_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "raw_input_contents has ", request.raw_input_contents_size(),
        " entries but inputs has ", request.inputs_size(),
        "; give one entry per input, in the order of inputs"));
  }
  storage->resize(raw ? 0 : request.inputs_size());
  std::vector<RawInput> out;
  out.reserve(request.inputs_size());
  for (int i = 0; i < request.inputs_size(); ++i) {
    const auto& t = request.inputs(i);
    RawInput in;
    in.name = t.name();
    in.dtype = DTypeFromKServe(t.datatype());
    in.dtype_label = t.datatype();
    if (in.dtype == DType::kInvalid) {
      return absl::InvalidArgumentError(absl::StrCat(
          "inputs[", i, "] ('", ClientText(t.name()), "').datatype '",
          ClientText(t.datatype()),
          "' is not supported; use one of ", Datatypes()));
    }
    in.shape.assign(t.shape().begin(), t.shape().end());
    if (raw) {
      std::string which;
      if (t.has_contents() && CountSetFields(t.contents(), &which) > 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "inputs[", i, "] ('", ClientText(t.name()), "').contents.", which,
            " is set together with raw_input_contents; use one or the other"));
      }
      in.data = request.raw_input_contents(i);
    } else {
      std::string& bytes = (*storage)[i];
      absl::Status s = ContentsToBytes(t, in.dtype, i, &bytes);
      if (!s.ok()) return s;
      in.data = bytes;
    }
    out.push_back(std::move(in));
  }
  return out;
}

// Indices into the model's outputs of the outputs the request asks for
// (all of them when it names none).
absl::StatusOr<std::vector<size_t>> SelectOutputs(const ModelInferRequest& request,
                                                  const std::vector<TensorSpec>& specs) {
  std::vector<size_t> picked;
  if (request.outputs_size() == 0) {
    for (size_t s = 0; s < specs.size(); ++s) picked.push_back(s);
    return picked;
  }
  for (int i = 0; i < request.outputs_size(); ++i) {
    const std::string& name = request.outputs(i).name();
    size_t s = 0;
    while (s < specs.size() && specs[s].name != name) ++s;
    if (s == specs.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "outputs[", i, "].name '", ClientText(name),
          "' is not an output of the model; expected ",
          absl::StrJoin(specs, ", ", [](std::string* o, const TensorSpec& t) {
            absl::StrAppend(o, "'", t.name, "'");
          })));
    }
    for (size_t p : picked) {
      if (p == s) {
        return absl::InvalidArgumentError(absl::StrCat(
            "outputs[", i, "].name '", ClientText(name), "' appears more than once"));
      }
    }
    picked.push_back(s);
  }
  return picked;
}

void SetInt64Param(absl::string_view key, int64_t value, ModelInferResponse* r) {
  (*r->mutable_parameters())[std::string(key)].set_int64_param(value);
}

// A ModelInfer request in flight. Owned by the batcher, then the batch;
// finishes its RPC exactly once.
class KServeTask final : public RpcInferTask {
 public:
  // `storage` holds bytes converted from typed contents that `inputs` may
  // point into; moving the vector keeps its elements where they are.
  KServeTask(grpc::CallbackServerContext* context, grpc::ServerUnaryReactor* reactor,
             std::unique_ptr<ModelInferRequest> request, grpc::ByteBuffer* response,
             std::vector<std::string> storage, std::vector<InputView> inputs,
             std::vector<size_t> outputs, const Runner* runner, Metrics* metrics,
             KServeStatistics* stats, Clock* clock, absl::Time start,
             const std::atomic<bool>* cut_off)
      : RpcInferTask(context, reactor, std::move(inputs), kModelInfer, metrics,
                     clock, start, cut_off),
        request_(std::move(request)),
        response_bytes_(response),
        storage_(std::move(storage)),
        outputs_(std::move(outputs)),
        runner_(runner),
        stats_(stats) {}

  void Finish(absl::StatusOr<std::vector<Tensor>> outputs,
              const RunStats& stats) override {
    if (!outputs.ok()) {
      Complete(outputs.status(), stats);
      return;
    }
    const ModelInfo& info = runner_->info();
    response_.set_model_name(info.name);
    response_.set_model_version(info.version);
    response_.set_id(request_->id());
    SetInt64Param("queue_time_us", absl::ToInt64Microseconds(stats.queue_time), &response_);
    SetInt64Param("compute_time_us", absl::ToInt64Microseconds(stats.compute_time), &response_);
    SetInt64Param("batch_rows", stats.batch_rows, &response_);
    for (size_t s : outputs_) {
      Tensor& o = (*outputs)[s];
      auto* t = response_.add_outputs();
      t->set_name(o.name);
      t->set_datatype(std::string(KServeDatatype(o.dtype)));
      for (int64_t d : o.shape) t->add_shape(d);
      *response_.add_raw_output_contents() = std::move(o.data);
    }
    Complete(SerializeResponse(response_, response_bytes_), stats);
  }

 private:
  void OnComplete(const absl::Status& status, const RunStats& run, absl::Time now,
                  absl::Duration latency) override {
    if (status.ok()) {
      stats_->RecordSuccess(rows(), latency, run.queue_time, run.compute_time, now);
    } else {
      stats_->RecordFailure(latency);
    }
  }

  const std::unique_ptr<ModelInferRequest> request_;
  grpc::ByteBuffer* const response_bytes_;
  ModelInferResponse response_;  // serialised into response_bytes_ in Finish
  const std::vector<std::string> storage_;
  const std::vector<size_t> outputs_;
  const Runner* const runner_;
  KServeStatistics* const stats_;
};

}  // namespace

absl::string_view KServeDatatype(DType dtype) {
  for (const DatatypeName& d : kDatatypes) {
    if (d.dtype == dtype) return d.name;
  }
  return "";
}

DType DTypeFromKServe(absl::string_view datatype) {
  for (const DatatypeName& d : kDatatypes) {
    if (d.name == datatype) return d.dtype;
  }
  return DType::kInvalid;
}

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

KServeService::KServeService(Runner* runner, Batcher* batcher, Metrics* metrics,
                             Clock* clock, std::string server_version,
                             AccessLog* access_log)
    : runner_(runner),
      batcher_(batcher),
      metrics_(metrics),
      clock_(clock != nullptr ? clock : Clock::RealClock()),
      server_version_(std::move(server_version)),
      access_log_(access_log) {}

absl::Status KServeService::CheckModel(absl::string_view name_field,
                                       absl::string_view name,
                                       absl::string_view version) const {
  const ModelInfo& info = runner_->info();
  RETURN_IF_ERROR(CheckModelName(name_field, name, info));
  if (!version.empty() && version != info.version) {
    return absl::NotFoundError(absl::StrCat(
        "version '", ClientText(version), "' of model '", info.name,
        "' is not served here; this server serves version '", info.version, "'"));
  }
  return absl::OkStatus();
}

template <typename Fill>
grpc::ServerUnaryReactor* KServeService::Answer(grpc::CallbackServerContext* context,
                                                absl::string_view method, Fill fill) {
  const absl::Time start = clock_->TimeNow();
  if (metrics_ != nullptr) metrics_->RequestStarted(method);
  const absl::Status status = fill();
  if (metrics_ != nullptr) {
    metrics_->RequestFinished(method, status.code(), clock_->TimeNow() - start);
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* KServeService::ServerLive(
    grpc::CallbackServerContext* context, const inference::ServerLiveRequest*,
    inference::ServerLiveResponse* response) {
  return Answer(context, "ServerLive", [&] {
    response->set_live(true);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* KServeService::ServerReady(
    grpc::CallbackServerContext* context, const inference::ServerReadyRequest*,
    inference::ServerReadyResponse* response) {
  return Answer(context, "ServerReady", [&] {
    response->set_ready(ready());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* KServeService::ModelReady(
    grpc::CallbackServerContext* context, const inference::ModelReadyRequest* request,
    inference::ModelReadyResponse* response) {
  return Answer(context, "ModelReady", [&] {
    absl::Status s = CheckModel("name", request->name(), request->version());
    if (s.ok()) response->set_ready(ready());
    return s;
  });
}

grpc::ServerUnaryReactor* KServeService::ServerMetadata(
    grpc::CallbackServerContext* context, const inference::ServerMetadataRequest*,
    inference::ServerMetadataResponse* response) {
  return Answer(context, "ServerMetadata", [&] {
    response->set_name("metalserve");
    response->set_version(server_version_);
    response->add_extensions("model_configuration");
    response->add_extensions("statistics");
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* KServeService::ModelMetadata(
    grpc::CallbackServerContext* context, const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  return Answer(context, "ModelMetadata", [&] {
    absl::Status s = CheckModel("name", request->name(), request->version());
    if (!s.ok()) return s;
    const ModelInfo& info = runner_->info();
    response->set_name(info.name);
    response->add_versions(info.version);
    response->set_platform(std::string(kPlatform));
    auto add = [](const TensorSpec& spec,
                  inference::ModelMetadataResponse::TensorMetadata* t) {
      t->set_name(spec.name);
      t->set_datatype(std::string(KServeDatatype(spec.dtype)));
      for (int64_t d : spec.shape) t->add_shape(d);
    };
    for (const auto& spec : info.inputs) add(spec, response->add_inputs());
    for (const auto& spec : info.outputs) add(spec, response->add_outputs());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* KServeService::ModelConfig(
    grpc::CallbackServerContext* context, const inference::ModelConfigRequest* request,
    inference::ModelConfigResponse* response) {
  return Answer(context, "ModelConfig", [&] {
    absl::Status s = CheckModel("name", request->name(), request->version());
    if (!s.ok()) return s;
    const ModelInfo& info = runner_->info();
    inference::ModelConfig* c = response->mutable_config();
    c->set_name(info.name);
    c->set_platform(std::string(kPlatform));
    c->set_max_batch_size(static_cast<int32_t>(batcher_->options().max_batch_size));
    for (const auto& spec : info.inputs) {
      auto* in = c->add_input();
      in->set_name(spec.name);
      in->set_data_type(ConfigType(spec.dtype));
      for (size_t d = 1; d < spec.shape.size(); ++d) in->add_dims(spec.shape[d]);
    }
    for (const auto& spec : info.outputs) {
      auto* out = c->add_output();
      out->set_name(spec.name);
      out->set_data_type(ConfigType(spec.dtype));
      for (size_t d = 1; d < spec.shape.size(); ++d) out->add_dims(spec.shape[d]);
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* KServeService::ModelStatistics(
    grpc::CallbackServerContext* context,
    const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  return Answer(context, "ModelStatistics", [&] {
    absl::Status s = CheckModel("name", request->name(), request->version());
    if (!s.ok()) return s;
    const ModelInfo& info = runner_->info();
    const KServeStatistics::Snapshot snap = stats_.Get();
    inference::ModelStatistics* m = response->add_model_stats();
    m->set_name(info.name);
    m->set_version(info.version);
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
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* KServeService::ModelInfer(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* body,
    grpc::ByteBuffer* response) {
  const absl::Time start = clock_->TimeNow();
  if (metrics_ != nullptr) metrics_->RequestStarted(kModelInfer);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto fail = [&](const absl::Status& status) {
    const absl::Duration total = clock_->TimeNow() - start;
    stats_.RecordFailure(total);
    if (metrics_ != nullptr) metrics_->RequestFinished(kModelInfer, status.code(), total);
    if (access_log_ != nullptr) {
      LogAccess(*access_log_, *context, kModelInfer, runner_->info(), 0, status.code(), {},
                start + total, total);
    }
    reactor->Finish(ToGrpcStatus(status));
    return reactor;
  };
  // A full queue refuses before the body is parsed or its contents converted.
  if (absl::Status s = CheckQueueRoom(*batcher_); !s.ok()) return fail(s);
  auto request = std::make_unique<ModelInferRequest>();
  // gRPC never reads the body again; parsing empties it (see raw_call.h).
  grpc::ByteBuffer* bytes = const_cast<grpc::ByteBuffer*>(body);
  if (absl::Status s = ParseRequestBody(bytes, request.get()); !s.ok()) return fail(s);
  absl::Status model = CheckModel("model_name", request->model_name(),
                                  request->model_version());
  if (!model.ok()) return fail(model);
  const ModelInfo& info = runner_->info();
  std::vector<std::string> storage;
  absl::StatusOr<std::vector<RawInput>> raw = DecodeKServeInputs(*request, &storage);
  if (!raw.ok()) return fail(raw.status());
  absl::StatusOr<std::vector<InputView>> inputs = ValidateInputs(*raw, info.inputs);
  if (!inputs.ok()) return fail(inputs.status());
  absl::StatusOr<std::vector<size_t>> outputs = SelectOutputs(*request, info.outputs);
  if (!outputs.ok()) return fail(outputs.status());

  auto infer = std::make_unique<KServeTask>(
      context, reactor, std::move(request), response, std::move(storage), *std::move(inputs),
      *std::move(outputs), runner_, metrics_, &stats_, clock_, start, &cut_off_);
  infer->set_access_log(access_log_, &info);
  std::unique_ptr<BatchTask> task = std::move(infer);
  absl::Status admitted = batcher_->Submit(&task);
  if (!admitted.ok()) return fail(admitted);
  return reactor;
}

}  // namespace metalserve
