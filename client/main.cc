// metalserve-bench: load-tests a metalserve server over its native gRPC API,
// or any Open Inference Protocol (KServe v2) server over gRPC or REST.
//
//   metalserve-bench --target=127.0.0.1:8500 --concurrency=1:64:x2 --duration=10s
//   metalserve-bench --target=10.0.0.1:8500,10.0.0.2:8500 --rate=500 --arrival=poisson
//   metalserve-bench --protocol=kserve --model_name=resnet18 --target=host:8001
//   metalserve-bench --protocol=http --model_name=resnet18 --target=host:8000
//
// Reads flags, fetches the model's input spec with GetModelMetadata, or
// ModelMetadata over KServe (GET /v2/models/{name} over REST) (unless
// --input_name, --dtype and --shape give it), runs one measurement per
// sweep level and prints the report on stdout. A live one-line progress goes
// to stderr when it is a terminal. Exit status: 0; 1 on a usage or setup
// error; 2 when a run's error rate exceeds --max_error_rate.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "client/channel_factory.h"
#include "client/grpc_transport.h"
#include "client/http_transport.h"
#include "client/kserve_codec.h"
#include "client/load_generator.h"
#include "client/output_dump.h"
#include "client/report.h"
#include "client/request_builder.h"
#include "client/shared_memory_input.h"
#include "grpcpp/client_context.h"
#include "inference/grpc_service.grpc.pb.h"
#include "metalserve/v1/inference.grpc.pb.h"
#include "common/clock.h"
#include "common/flags_help.h"
#include "common/unix_socket_buffers.h"
#include "common/mutex_mode.h"
#include "common/status_macros.h"

ABSL_FLAG(std::string, target, "",
          "Server address host:port, or several comma-separated (IPv4 or IPv6 "
          "literals) spread with round_robin, or one gRPC URI such as "
          "dns:///name:port or unix:///path/to.sock (a Unix domain socket). "
          "With --protocol=http: host:port or http(s)://host:port entries, "
          "used in turn. Default 127.0.0.1:8500 (gRPC), 127.0.0.1:8000 (http).");
ABSL_FLAG(std::string, protocol, "native",
          "Wire protocol: native (metalserve.v1.Inference/Predict), kserve "
          "(inference.GRPCInferenceService/ModelInfer with raw_input_contents, "
          "the Open Inference Protocol; metadata from ModelMetadata), or http "
          "(the same protocol's REST form: POST /v2/models/{name}/infer over "
          "HTTP/1.1 keep-alive connections, one per call in flight; needs "
          "--model_name; tensors as --http_format says).");
ABSL_FLAG(std::string, http_format, "binary",
          "With --protocol=http: binary (Triton's binary tensor extension, "
          "what tritonclient.http sends) or json (tensors as JSON data). "
          "Default binary.");
ABSL_FLAG(std::string, dump_outputs, "",
          "Before the load runs, send one request and write its output "
          "tensors to this file as JSON (name, datatype, shape, values). "
          "Default: none.");
ABSL_FLAG(std::string, model_name, "",
          "Model name sent in requests; empty lets the server use its model.");
ABSL_FLAG(std::string, concurrency, "1",
          "Closed loop: calls kept outstanding. A sweep runs one measurement "
          "per level: 1,4,16 or 1:64:x2 or 4:32:+4. Ignored with --rate.");
ABSL_FLAG(std::string, rate, "0",
          "Open loop when > 0: requests per second, latency measured from the "
          "intended send time; a list 50,100,200 runs one measurement per "
          "rate. Default 0 (closed loop).");
ABSL_FLAG(std::string, arrival, "constant",
          "Open loop spacing: constant or poisson.");
ABSL_FLAG(int, open_loop_threads, 4,
          "Open loop: threads that send the calls, each its share of the schedule "
          "(constant: every n-th call; poisson: n independent streams of rate/n, "
          "together one Poisson stream of the whole rate). One thread serialises and "
          "writes every request itself, which capped 602 KB requests near 5,000/s on a "
          "16-core host; 1 reproduces that single sender's schedule exactly.");
ABSL_FLAG(int64_t, max_outstanding, 10000,
          "Open loop: calls in flight beyond this are not sent and count as "
          "CLIENT_OVERFLOW errors.");
ABSL_FLAG(absl::Duration, duration, absl::ZeroDuration(),
          "Measurement length per level, e.g. 30s. Default 0, which means 10s, "
          "or no time limit when --requests is set.");
ABSL_FLAG(int64_t, requests, 0,
          "Requests per level; 0 means limited by --duration only.");
ABSL_FLAG(absl::Duration, warmup, absl::ZeroDuration(),
          "Load before each level's measurement, results dropped. Default 0s.");
ABSL_FLAG(int64_t, batch, 1, "Rows per request (the batch dimension). Default 1.");
ABSL_FLAG(std::string, input, "zeros",
          "Input data: zeros, random (seeded by --seed: floats in [0, 1), "
          "int64/int32 in [0, 100), uint8/int8 any byte, bool 0/1), or @path "
          "(raw little-endian bytes of one row or of all --batch rows).");
ABSL_FLAG(std::string, shape, "",
          "Per-row input shape without the batch dimension, e.g. 3,224,224. "
          "Default: from GetModelMetadata.");
ABSL_FLAG(std::string, dtype, "",
          "Input dtype (float32, float16, bfloat16, int64, ...). Default: from "
          "GetModelMetadata.");
ABSL_FLAG(std::string, input_name, "",
          "Input tensor name. Default: from GetModelMetadata.");
ABSL_FLAG(int32_t, priority, 0,
          "Priority level of every request, 1 = highest (native field priority, KServe "
          "parameters[\"priority\"]); 0 = the server's default. Default 0.");
ABSL_FLAG(absl::Duration, deadline, absl::Seconds(30),
          "Per-request deadline; 0 for none (with --protocol=http also sent "
          "as parameters.timeout, which the server enforces). Default 30s.");
ABSL_FLAG(int32_t, retries, 0,
          "Retries per call on UNAVAILABLE, and on CANCELLED from a server's "
          "shutdown (gRPC retry policy; a call may move to another target). "
          "Default 0; at most 4.");
ABSL_FLAG(int32_t, connections, 1,
          "Independent channels (HTTP/2 connections per address). Default 1.");
ABSL_FLAG(int64_t, unix_socket_buffer_bytes, metalserve::kDefaultUnixSocketBufferBytes,
          "SO_SNDBUF and SO_RCVBUF of each connection to a unix: target (TCP keeps the "
          "kernel's tuning); 0 = the kernel's default");
ABSL_FLAG(std::string, shared_memory, "none",
          "none, or system (--protocol=kserve, a server on this host started with "
          "--shared_memory): inputs written once into a POSIX shared-memory region that "
          "every call names instead of carrying the bytes");
ABSL_FLAG(std::string, tls_ca, "", "PEM root certificates; enables TLS.");
ABSL_FLAG(std::string, tls_cert, "", "PEM client certificate chain (mutual TLS).");
ABSL_FLAG(std::string, tls_key, "", "PEM client private key (mutual TLS).");
ABSL_FLAG(std::string, tls_server_name, "",
          "Name checked against the server certificate; enables TLS.");
ABSL_FLAG(std::string, output, "text", "Report format: text, json or csv.");
ABSL_FLAG(double, max_error_rate, 1.0,
          "Exit with status 2 when a level's error fraction exceeds this "
          "(0..1). Default 1 (never).");
ABSL_FLAG(uint64_t, seed, 1, "Seed for random inputs and Poisson arrivals.");
ABSL_FLAG(std::string, progress, "auto",
          "Live progress line on stderr: auto (when a terminal), on, off.");

namespace metalserve::client {
namespace {

std::atomic<LoadGenerator*> g_generator{nullptr};

void OnSignal(int) {
  LoadGenerator* gen = g_generator.load();
  if (gen != nullptr) gen->Stop();
}

// --target, or the protocol's default port on this host.
std::string TargetFlag() {
  const std::string target = absl::GetFlag(FLAGS_target);
  if (!target.empty()) return target;
  return absl::GetFlag(FLAGS_protocol) == "http" ? "127.0.0.1:8000" : "127.0.0.1:8500";
}

int Fail(const absl::Status& status) {
  std::cerr << "metalserve-bench: " << status << "\n";
  return 1;
}

absl::Status FromGrpc(const grpc::Status& s, absl::string_view rpc) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(rpc, " from ", TargetFlag(),
                                   ": ", s.error_message()));
}

std::unique_ptr<grpc::ClientContext> ShortContext() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return ctx;
}

absl::StatusOr<v1::GetModelMetadataResponse> FetchKServeMetadata(
    const std::shared_ptr<grpc::Channel>& channel) {
  auto stub = inference::GRPCInferenceService::NewStub(channel);
  inference::ModelMetadataRequest req;
  req.set_name(absl::GetFlag(FLAGS_model_name));
  inference::ModelMetadataResponse resp;
  const grpc::Status s = stub->ModelMetadata(ShortContext().get(), req, &resp);
  if (!s.ok()) return FromGrpc(s, "ModelMetadata");
  return MetadataFromKServe(resp);
}

// Sends `request` once and writes its outputs to --dump_outputs.
absl::Status DumpOutputs(const std::shared_ptr<grpc::Channel>& channel,
                         const v1::PredictRequest& request, bool kserve) {
  std::vector<DumpedTensor> outputs;
  if (kserve) {
    auto stub = inference::GRPCInferenceService::NewStub(channel);
    inference::ModelInferResponse resp;
    const grpc::Status s =
        stub->ModelInfer(ShortContext().get(), ToModelInferRequest(request), &resp);
    if (!s.ok()) return FromGrpc(s, "ModelInfer");
    if (resp.raw_output_contents_size() != resp.outputs_size()) {
      return absl::UnimplementedError(absl::StrCat(
          "ModelInfer answered ", resp.outputs_size(), " outputs with ",
          resp.raw_output_contents_size(),
          " raw_output_contents; --dump_outputs reads raw outputs only"));
    }
    for (int i = 0; i < resp.outputs_size(); ++i) {
      const auto& o = resp.outputs(i);
      outputs.push_back({o.name(), o.datatype(),
                         {o.shape().begin(), o.shape().end()},
                         resp.raw_output_contents(i)});
    }
  } else {
    auto stub = v1::Inference::NewStub(channel);
    v1::PredictResponse resp;
    const grpc::Status s = stub->Predict(ShortContext().get(), request, &resp);
    if (!s.ok()) return FromGrpc(s, "Predict");
    for (const auto& o : resp.outputs()) {
      outputs.push_back({o.name(), std::string(KServeDatatypeOf(o.dtype())),
                         {o.shape().begin(), o.shape().end()}, o.data()});
    }
  }
  return WriteOutputsJson(outputs, absl::GetFlag(FLAGS_dump_outputs));
}

absl::StatusOr<v1::GetModelMetadataResponse> FetchMetadata(
    const std::shared_ptr<grpc::Channel>& channel) {
  auto stub = v1::Inference::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::GetModelMetadataRequest req;
  req.set_model_name(absl::GetFlag(FLAGS_model_name));
  v1::GetModelMetadataResponse resp;
  const grpc::Status s = stub->GetModelMetadata(&ctx, req, &resp);
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        absl::StrCat("GetModelMetadata from ",
                                     TargetFlag(), ": ",
                                     s.error_message()));
  }
  return resp;
}

absl::StatusOr<InputOverrides> OverridesFromFlags() {
  InputOverrides o;
  if (!absl::GetFlag(FLAGS_input_name).empty()) o.name = absl::GetFlag(FLAGS_input_name);
  if (!absl::GetFlag(FLAGS_dtype).empty()) {
    auto d = ParseDataType(absl::GetFlag(FLAGS_dtype));
    if (!d.ok()) return d.status();
    o.dtype = *d;
  }
  if (!absl::GetFlag(FLAGS_shape).empty()) {
    auto s = ParseShape(absl::GetFlag(FLAGS_shape));
    if (!s.ok()) return s.status();
    o.shape = *s;
  }
  return o;
}

absl::StatusOr<LoadSpec> BaseSpecFromFlags() {
  LoadSpec spec;
  const std::string arrival = absl::GetFlag(FLAGS_arrival);
  if (arrival == "poisson") {
    spec.arrival = Arrival::kPoisson;
  } else if (arrival != "constant") {
    return absl::InvalidArgumentError(
        absl::StrCat("--arrival='", arrival, "': want constant or poisson"));
  }
  spec.max_outstanding = absl::GetFlag(FLAGS_max_outstanding);
  spec.open_loop_threads = absl::GetFlag(FLAGS_open_loop_threads);
  spec.max_requests = absl::GetFlag(FLAGS_requests) > 0 ? absl::GetFlag(FLAGS_requests) : -1;
  const absl::Duration duration = absl::GetFlag(FLAGS_duration);
  if (duration > absl::ZeroDuration()) {
    spec.duration = duration;
  } else if (spec.max_requests < 0) {
    spec.duration = absl::Seconds(10);
  }
  spec.warmup = absl::GetFlag(FLAGS_warmup);
  const absl::Duration deadline = absl::GetFlag(FLAGS_deadline);
  spec.deadline = deadline > absl::ZeroDuration() ? deadline : absl::InfiniteDuration();
  spec.seed = absl::GetFlag(FLAGS_seed);
  return spec;
}

// One spec per sweep level: the rates (open loop) when any, else the
// concurrency levels.
std::vector<LoadSpec> SweepSpecs(const LoadSpec& base, const std::vector<int>& levels,
                                 const std::vector<double>& rates) {
  std::vector<LoadSpec> specs;
  for (double rate : rates) specs.emplace_back(base).rate = rate;
  if (rates.empty()) {
    for (int level : levels) specs.emplace_back(base).concurrency = level;
  }
  return specs;
}

bool ProgressWanted() {
  const std::string p = absl::GetFlag(FLAGS_progress);
  if (p == "on") return true;
  if (p == "off") return false;
  return isatty(STDERR_FILENO) == 1;
}

// Everything the flags ask for, checked; read once by Main.
struct BenchConfig {
  bool kserve = false;  // KServe messages, over gRPC or (http) REST
  bool http = false;
  OutputFormat format = OutputFormat::kText;
  double max_error_rate = 0;
  LoadSpec base;
  std::vector<int> levels;
  std::vector<double> rates;
  InputSource source;
  InputOverrides overrides;
  ChannelOptions channels;
  HttpOptions http_options;  // http only
};

absl::StatusOr<HttpOptions> HttpOptionsFromFlags() {
  HttpOptions o;
  o.targets = absl::StrSplit(TargetFlag(), ',', absl::SkipEmpty());
  o.model_name = absl::GetFlag(FLAGS_model_name);
  const std::string format = absl::GetFlag(FLAGS_http_format);
  if (format != "binary" && format != "json") {
    return absl::InvalidArgumentError(
        absl::StrCat("--http_format='", format, "': want binary or json"));
  }
  o.format = format == "json" ? HttpTensorFormat::kJson : HttpTensorFormat::kBinary;
  o.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  o.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  o.tls_key = absl::GetFlag(FLAGS_tls_key);
  return o;
}

absl::StatusOr<BenchConfig> ConfigFromFlags() {
  BenchConfig c;
  const std::string protocol = absl::GetFlag(FLAGS_protocol);
  if (protocol != "native" && protocol != "kserve" && protocol != "http") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--protocol='", protocol, "' is not supported; want native "
        "(metalserve.v1), kserve (Open Inference Protocol v2 over gRPC) or "
        "http (the same over REST)"));
  }
  c.http = protocol == "http";
  c.kserve = protocol == "kserve" || c.http;
  RETURN_IF_ERROR(
      CheckSharedMemoryFlag(absl::GetFlag(FLAGS_shared_memory), protocol, TargetFlag()));
  ASSIGN_OR_RETURN(c.http_options, HttpOptionsFromFlags());
  if (c.http && (!absl::GetFlag(FLAGS_dump_outputs).empty() ||
                 !absl::GetFlag(FLAGS_tls_server_name).empty())) {
    return absl::InvalidArgumentError(
        "--dump_outputs and --tls_server_name are not supported with "
        "--protocol=http; use --protocol=kserve on the gRPC port");
  }
  ASSIGN_OR_RETURN(c.format, ParseOutputFormat(absl::GetFlag(FLAGS_output)));
  c.max_error_rate = absl::GetFlag(FLAGS_max_error_rate);
  if (!(c.max_error_rate >= 0 && c.max_error_rate <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_error_rate=", c.max_error_rate, " is not in [0, 1]"));
  }
  ASSIGN_OR_RETURN(c.base, BaseSpecFromFlags());
  ASSIGN_OR_RETURN(c.levels, ParseConcurrencySweep(absl::GetFlag(FLAGS_concurrency)));
  ASSIGN_OR_RETURN(c.rates, ParseRateSweep(absl::GetFlag(FLAGS_rate)));
  ASSIGN_OR_RETURN(c.source, ParseInputSource(absl::GetFlag(FLAGS_input)));
  c.source.seed = absl::GetFlag(FLAGS_seed);
  ASSIGN_OR_RETURN(c.overrides, OverridesFromFlags());
  c.channels.targets =
      absl::StrSplit(TargetFlag(), ',', absl::SkipEmpty());
  c.channels.connections = absl::GetFlag(FLAGS_connections);
  c.channels.unix_socket_buffer_bytes = absl::GetFlag(FLAGS_unix_socket_buffer_bytes);
  c.channels.max_attempts = 1 + absl::GetFlag(FLAGS_retries);
  c.channels.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  c.channels.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  c.channels.tls_key = absl::GetFlag(FLAGS_tls_key);
  c.channels.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  return c;
}

// The request every call sends: inputs from `metadata` unless the flags
// name, type and shape them.
absl::StatusOr<v1::PredictRequest> BuildRequest(
    const BenchConfig& c, const std::optional<v1::GetModelMetadataResponse>& metadata) {
  ASSIGN_OR_RETURN(const std::vector<InputSpec> inputs,
                   ResolveInputs(metadata ? &*metadata : nullptr, c.overrides,
                                 absl::GetFlag(FLAGS_batch)));
  ASSIGN_OR_RETURN(v1::PredictRequest request,
                   BuildPredictRequest(inputs, c.source, absl::GetFlag(FLAGS_model_name)));
  request.set_priority(absl::GetFlag(FLAGS_priority));
  return request;
}

bool NeedsMetadata(const BenchConfig& c) {
  return !c.overrides.name || !c.overrides.dtype || !c.overrides.shape;
}

// --protocol=http: metadata from GET /v2/models/{name}, calls over REST.
absl::StatusOr<std::unique_ptr<LoadGenerator>> PrepareHttpGenerator(const BenchConfig& c) {
  std::optional<v1::GetModelMetadataResponse> metadata;
  if (NeedsMetadata(c)) {
    ASSIGN_OR_RETURN(const auto kserve, FetchHttpMetadata(c.http_options));
    ASSIGN_OR_RETURN(metadata, MetadataFromKServe(kserve));
  }
  ASSIGN_OR_RETURN(const v1::PredictRequest request, BuildRequest(c, metadata));
  inference::ModelInferRequest kserve = ToModelInferRequest(request);
  // The client's deadline travels to the server as gRPC's does: Triton's
  // parameters.timeout, in microseconds.
  if (c.base.deadline != absl::InfiniteDuration()) {
    (*kserve.mutable_parameters())["timeout"].set_int64_param(
        absl::ToInt64Microseconds(c.base.deadline));
  }
  ASSIGN_OR_RETURN(auto transport, NewHttpTransport(c.http_options, kserve));
  return LoadGenerator::Create(std::move(transport), Clock::SteadyClock());
}

// Connects, resolves the inputs (from the server's metadata unless the
// flags name, type and shape them), builds the request, writes
// --dump_outputs, and returns the generator that will send it; with
// --shared_memory=system, `shm` receives the registered region.
absl::StatusOr<std::unique_ptr<LoadGenerator>> PrepareGenerator(
    const BenchConfig& c, std::unique_ptr<SharedMemoryInput>* shm) {
  if (c.http) return PrepareHttpGenerator(c);
  ASSIGN_OR_RETURN(auto channels, CreateChannels(c.channels));
  std::optional<v1::GetModelMetadataResponse> metadata;
  if (NeedsMetadata(c)) {
    ASSIGN_OR_RETURN(metadata, c.kserve ? FetchKServeMetadata(channels.front())
                                        : FetchMetadata(channels.front()));
  }
  ASSIGN_OR_RETURN(v1::PredictRequest request, BuildRequest(c, metadata));
  if (!absl::GetFlag(FLAGS_dump_outputs).empty()) {
    RETURN_IF_ERROR(DumpOutputs(channels.front(), request, c.kserve));
  }
  // The monotonic clock, as every duration is measured on it: tests inject a
  // simulated one, the tool never does.
  Clock* const clock = Clock::SteadyClock();
  if (c.kserve) {
    inference::ModelInferRequest kserve = ToModelInferRequest(request);
    if (absl::GetFlag(FLAGS_shared_memory) == "system") {
      ASSIGN_OR_RETURN(*shm, SharedMemoryInput::Create(channels.front(), &kserve));
    }
    return LoadGenerator::Create(std::move(channels), std::move(kserve), clock);
  }
  return LoadGenerator::Create(std::move(channels), std::move(request), clock);
}

// Runs every level of the sweep, printing text reports as they finish; a
// signal (Stop) ends the sweep early with the reports so far.
int RunSweep(LoadGenerator& gen, const BenchConfig& c) {
  g_generator.store(&gen);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  const bool show_progress = ProgressWanted();
  ProgressFn progress;
  if (show_progress) {
    progress = [](const Progress& p) {
      std::cerr << "\r\033[K" << FormatProgress(p) << std::flush;
    };
  }
  std::vector<RunReport> reports;
  for (const LoadSpec& spec : SweepSpecs(c.base, c.levels, c.rates)) {
    auto stats = gen.Run(spec, progress);
    if (show_progress) std::cerr << "\r\033[K" << std::flush;
    if (absl::IsCancelled(stats.status())) break;
    if (!stats.ok()) {
      g_generator.store(nullptr);
      return Fail(stats.status());
    }
    reports.push_back({spec, *std::move(stats)});
    if (c.format == OutputFormat::kText) {
      std::cout << FormatReports({reports.back()}, c.format) << std::flush;
    }
  }
  if (c.format != OutputFormat::kText) std::cout << FormatReports(reports, c.format);
  std::cout << std::flush;
  g_generator.store(nullptr);
  return ExitCodeFor(reports, c.max_error_rate);
}

int Main() {
  auto config = ConfigFromFlags();
  if (!config.ok()) return Fail(config.status());
  std::unique_ptr<SharedMemoryInput> shm;  // unregistered after the sweep
  auto gen = PrepareGenerator(*config, &shm);
  if (!gen.ok()) return Fail(gen.status());
  return RunSweep(**gen, *config);
}

}  // namespace
}  // namespace metalserve::client

int main(int argc, char** argv) {
  // Off unless METALSERVE_MUTEX_DEADLOCK_DETECTION=1 (common/mutex_mode.h).
  metalserve::ApplyMutexDeadlockDetectionSetting();
  absl::SetProgramUsageMessage(
      "Load-tests a metalserve server: metalserve-bench --target=host:port "
      "[--concurrency=1:64:x2 | --rate=R] [--duration=10s | --requests=N]");
  metalserve::ConfigureFlagsHelp(argc, argv, __FILE__, "client/main.cc");
  absl::ParseCommandLine(argc, argv);
  return metalserve::client::Main();
}
