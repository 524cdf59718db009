// metalserve: serves TorchScript models (--model, or a --model_repository) over
// gRPC and REST behind dynamic batchers. Only this file reads flags; modules
// take validated Options structs.
#include <cstdlib>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "glog/logging.h"
#include "common/flags_help.h"
#include "common/mutex_mode.h"
#include "server/flag_lists.h"
#include "server/metrics/metrics.h"
#include "server/model_loading.h"
#include "server/process_setup.h"
#include "server/scheduling_flags.h"
#include "server/transport_flags.h"
#include "server/model_config/model_config.h"
#include "server/runtime/cuda_sync.h"
#include "server/runtime/model_signature.h"
#include "server/runtime/torch_runner.h"
#include "server/runtime/verification_cache.h"
#include "server/service/access_log.h"
#include "server/service/null_runner.h"
#include "server/service/server.h"
#include "server/signals.h"

ABSL_FLAG(std::string, model, METALSERVE_DEFAULT_MODEL,
          "TorchScript model file; its signature is read from the .json beside it "
          "(without one, see --input_shape). null:<signature.json> serves zeros of "
          "the signature's outputs with no model work, to measure the transport "
          "floor (docs/performance.md)");
ABSL_FLAG(std::string, model_repository, "",
          "Model repository folder DIR/<model>/<version>/model.pt with DIR/<model>/config.json "
          "(docs/repository.md); when set, --model is not used. Default empty: serve --model");
ABSL_FLAG(int64_t, device_memory_budget, 0,
          "With --model_repository: bytes of memory each device may hold for loaded model "
          "versions; a load that would pass it is refused with RESOURCE_EXHAUSTED. 0 = off");
ABSL_FLAG(std::string, model_control, "none",
          "With --model_repository: none (SIGHUP rescans), explicit (also the KServe "
          "RepositoryModelLoad/Unload RPCs) or poll (rescan every --repository_poll_interval)");
ABSL_FLAG(absl::Duration, repository_poll_interval, absl::Seconds(15),
          "With --model_control=poll: time from one rescan's end to the next. Default 15s");
ABSL_FLAG(std::string, input_shape, "",
          "Only for a model without a signature .json: each input's shape after the "
          "batch dimension, by forward's argument name, all inputs in this one flag with "
          "NAME= starting each, e.g. x=3,224,224 or image=3,224,224,mask=224,224; the "
          "server then infers the outputs and writes the .json (docs/signature.md). "
          "Default: none");
ABSL_FLAG(std::string, input_dtype, "",
          "With --input_shape: dtypes by input name, e.g. mask=uint8,ids=int64 "
          "(names: docs/signature.md). Default: float32 for every input");
ABSL_FLAG(std::string, address, "127.0.0.1:8500",
          "gRPC listen address host:port (loopback by default; port 0 picks one, logged as "
          "\"gRPC on 127.0.0.1:0 bound port N\"), unix:///path/to.sock for a Unix domain "
          "socket, or several, comma-separated: 127.0.0.1:8500,unix:///run/metalserve.sock");
ABSL_FLAG(std::string, http_address, "127.0.0.1:8000",
          "KServe v2 REST listen address host:port (docs/rest.md; same model, batcher, "
          "TLS and --max_message_bytes as gRPC); empty turns it off");
ABSL_FLAG(int, http_threads, 2, "REST polling threads (they decode and enqueue; never wait "
          "on a batch). Default 2");
ABSL_FLAG(absl::Duration, http_read_timeout, absl::Seconds(30),
          "Close a REST connection silent this long (slow clients, short bodies); "
          "whole seconds. Default 30s");
ABSL_FLAG(std::string, metrics_address, "127.0.0.1:9464",
          "Prometheus /metrics listen address; empty turns the listener off "
          "(metrics are still recorded)");
ABSL_FLAG(std::string, device, "auto",
          "auto (the fastest working device, measured at the warm-up batch sizes), "
          "first_available (mps -> cuda -> cpu), mps, cuda, cuda:N or cpu; an accelerator "
          "is used only if it passes a probe against the CPU");
ABSL_FLAG(std::vector<std::string>, devices, {},
          "Hybrid serving: the model resident on each listed device (e.g. cuda,cpu "
          "or mps,cpu), each batch sent to the one expected to finish it first "
          "(server/runtime/hybrid_runner.h); overrides --device. With --model; a "
          "repository model lists \"devices\" in its config.json");
ABSL_FLAG(int, threads, 0, "CPU intra-op threads; 0 = number of cores");
ABSL_FLAG(std::string, precision, "fp32", "Compute precision: fp32, fp16 or bf16");
ABSL_FLAG(bool, channels_last, false, "Run 4-D inputs in channels-last memory format");
ABSL_FLAG(bool, cudnn_benchmark, true,
          "CUDA: let cuDNN time its algorithms for each batch size (faster large "
          "batches; each size's first forward, in load and warm-up, pays it)");
ABSL_FLAG(bool, cpu_forward_on_caller, true,
          "On the CPU, a one-row batch of a model whose forward runs on one intra-op "
          "thread at every warm-up size runs on the batcher's executor thread when the "
          "device thread is idle (a batched model's: when no other batch of it is in "
          "flight), sparing two thread switches (docs/performance.md); false: every "
          "batch on the device thread");
ABSL_FLAG(int, staging_buffers, 2,
          "Host buffers of finished batches each model version keeps for later batches "
          "(pinned on CUDA) instead of allocating one per batch; each holds at most one "
          "batch's inputs (the largest batches are kept) while the version is loaded. "
          "0 = allocate per batch (docs/performance.md)");
ABSL_FLAG(absl::Duration, null_device_time, absl::ZeroDuration(),
          "With --model=null:<signature.json>: each batch also waits this long on a "
          "simulated accelerator (device \"simulated-cuda\", served as a CUDA model: "
          "executors, --accelerator_inline_max_cost, --accelerator_spin), to benchmark "
          "the scheduling of a GPU model on a host without one (server/service/null_runner.h); "
          "0 (default) = no device");
ABSL_FLAG(std::string, cuda_sync, "auto",
          "How a thread waits for a CUDA device: auto (CUDA's choice: spin while the "
          "process has fewer contexts than cores), spin, yield, or block (sleep until "
          "the device signals; frees the cores a spin holds); server/runtime/cuda_sync.h");
ABSL_FLAG(std::string, optimize, "auto",
          "Graph optimization: none, freeze, full or auto; always verified at load");
ABSL_FLAG(std::string, cache_dir, "",
          "Verification cache folder; empty = $XDG_CACHE_HOME/metalserve or "
          "~/.cache/metalserve; none = no cache");
ABSL_FLAG(int64_t, max_batch_size, 32, "Most rows in one model batch");
ABSL_FLAG(absl::Duration, max_queue_delay, absl::Milliseconds(2),
          "Longest wait of the oldest queued request for its batch to fill (e.g. 2ms); "
          "with --batching=adaptive the upper bound of the wait");
ABSL_FLAG(std::vector<std::string>, allowed_batch_sizes, {},
          "Batch sizes batches are padded to, ascending, last = max_batch_size "
          "(e.g. 1,2,4,8,16,32); empty: no padding");
ABSL_FLAG(int64_t, max_queue_size, 1024, "Most rows waiting; beyond it requests get UNAVAILABLE");
ABSL_FLAG(int, executors, 0,
          "Executor threads forming batches; with 2, batch N+1 is prepared while N computes. "
          "0 (default): follow the device, 4 executors and 4 device slots for a model on "
          "CUDA (with --rows_per_slot: 1.21-1.23x 2 at 256 clients on an H200, 0.95-0.99x "
          "at 64), 2 elsewhere (docs/operations.md)");
ABSL_FLAG(int64_t, rows_per_slot, 32,
          "With more than 2 --executors, a further batch is formed only while the requests "
          "waiting and running give each batch in flight at least this many rows "
          "(0: off, every free executor forms a batch)");
ABSL_FLAG(int, device_concurrency, 2,
          "Batches handed to the runtime at once. The runtime serialises device work "
          "on its own thread; 2 lets the next batch's host copy overlap the current "
          "batch's compute. With --executors=0 a model on CUDA gets 4 whatever this says "
          "(set --executors to choose)");
ABSL_FLAG(int64_t, max_message_bytes, 64 << 20,
          "Largest gRPC message in bytes (default 64 MiB: about 100 fp32 3x224x224 images)");
ABSL_FLAG(bool, accept_compression, false,
          "Accept gzip/deflate-compressed requests (default off: compressed requests "
          "get UNIMPLEMENTED; see docs/reliability.md for the memory cost)");
ABSL_FLAG(int64_t, memory_quota_bytes, 0,
          "Bound in bytes on the memory gRPC's transport holds for all connections; "
          "0 = max(256 MiB, 4 x --max_message_bytes)");
ABSL_FLAG(int64_t, max_unread_response_bytes_per_connection, 0, "Bytes of answers one "
          "connection may leave unread before its oldest are cancelled; 0 = 2 x max_message_bytes");
ABSL_FLAG(int64_t, max_unread_response_bytes, 0, "Bound on unread answers over all "
          "connections, bytes; 0 = max(per-connection bound, memory quota)");
ABSL_FLAG(absl::Duration, unread_response_timeout, absl::Seconds(30),
          "An answer the client has not read within this is cancelled");
ABSL_FLAG(int, max_concurrent_streams, 0, "Calls one connection may have open at once; "
          "0 = gRPC's default (no limit)");
ABSL_FLAG(int64_t, unix_socket_buffer_bytes, metalserve::kDefaultUnixSocketBufferBytes,
          "SO_SNDBUF and SO_RCVBUF of each connection on a unix:// address (TCP keeps the "
          "kernel's tuning); 0 = the kernel's default");
ABSL_FLAG(std::string, grpc_api, "auto",
          "How Predict and ModelInfer are served: callback (gRPC's callback API), async "
          "(completion queues polled by --grpc_cq_threads threads of the server's) or auto "
          "(async with 8 or more usable cores, affinity and cgroup CPU limits counted, where "
          "it measured cheaper per request; "
          "docs/performance.md)");
ABSL_FLAG(int, grpc_cq_threads, 0, "With --grpc_api=async: completion queues, one thread "
          "each; 0 = 2 (the cheapest measured on a 16-core host)");
ABSL_FLAG(int64_t, empty_cache_every, 0, "Empty the device cache every N batches; 0 = off");
ABSL_FLAG(absl::Duration, empty_cache_interval, absl::ZeroDuration(),
          "Empty the device cache this often while idle; 0 = off");
ABSL_FLAG(double, memory_watermark, 0.0,
          "Empty the cache at the next idle moment when the allocator holds more than "
          "this fraction of the device's recommended/total memory; 0 = off");
ABSL_FLAG(int64_t, monitor_window, 100, "Rolling monitor window, in requests");
ABSL_FLAG(absl::Duration, monitor_max_age, absl::Seconds(60),
          "Requests older than this leave the rolling monitor window, so an idle "
          "server reads as no traffic (e.g. 60s)");
ABSL_FLAG(absl::Duration, monitor_log_interval, absl::Seconds(60),
          "How often the monitor logs p50/p95/mean latency and error rate; 0 = never");
ABSL_FLAG(absl::Duration, drain_grace, absl::ZeroDuration(),
          "After SIGTERM: report NOT_SERVING but keep serving this long, so load "
          "balancers notice, before refusing new requests; a second SIGTERM/SIGINT "
          "skips the rest of it");
ABSL_FLAG(absl::Duration, shutdown_timeout, absl::Seconds(30),
          "Longest wait for accepted requests to finish on shutdown");
ABSL_FLAG(std::string, metrics_dump, "",
          "On SIGUSR1 and at exit, write the metrics text exposition to this file "
          "(for hosts where no listener can bind; used by bench/run.py)");
ABSL_FLAG(std::string, access_log, "",
          "Write one line per Predict/ModelInfer (time, peer, method, model, "
          "version, rows, code, queue/compute/total us) to this file, or - for "
          "stdout. Default empty: off");
ABSL_FLAG(double, access_log_sample, 1.0,
          "Fraction of requests the access log records, 0..1. Default 1");
ABSL_FLAG(std::string, tls_cert, "", "PEM server certificate chain (enables TLS)");
ABSL_FLAG(std::string, tls_key, "", "PEM server private key");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA bundle; when set, clients must present a certificate signed by it");

namespace {

using metalserve::ParseDurations;
using metalserve::DumpMetrics;
using metalserve::KeepLargeBlocksInHeap;
using metalserve::LogModel;
using metalserve::ParseSizes;
using metalserve::SchedulingFromFlags;

// Loads the model on a helper thread while this one watches for signals. A
// load cannot be interrupted: on SIGTERM/SIGINT the process writes the
// metrics dump and exits 0 at once, leaving the load unfinished. A SIGUSR1
// meanwhile is ignored (the server has nothing to report yet).
std::unique_ptr<metalserve::Runner> LoadModelOrExit(
    const metalserve::RuntimeOptions& ro, const metalserve::Metrics& metrics,
    const std::string& dump_path) {
  absl::StatusOr<std::unique_ptr<metalserve::Runner>> runner;
  absl::Notification loaded;
  std::thread loader([&] {
    const std::vector<std::string> devices = absl::GetFlag(FLAGS_devices);
    runner = devices.empty() ? metalserve::CreateTorchRunner(ro)
                             : metalserve::CreateHybridTorchRunner(ro, devices);
    loaded.Notify();
  });
  while (!loaded.WaitForNotificationWithTimeout(metalserve::kSignalPoll)) {
    if (metalserve::TerminationSignal() != 0) {
      LOG(INFO) << "signal " << metalserve::TerminationSignal()
                << " during the model load: exiting without serving";
      DumpMetrics(metrics, dump_path);
      google::FlushLogFiles(google::GLOG_INFO);
      std::_Exit(0);  // the loader thread cannot be joined before it ends
    }
  }
  loader.join();
  if (metalserve::TakeDumpRequest()) {
    LOG(INFO) << "SIGUSR1 during the model load ignored";
  }
  if (!runner.ok()) {
    LOG(ERROR) << "model: " << runner.status();
    std::exit(1);
  }
  return *std::move(runner);
}

// The runner of --model: a NullRunner for null:<signature.json>, else the
// TorchScript model.
std::unique_ptr<metalserve::Runner> RunnerOrExit(const metalserve::RuntimeOptions& ro,
                                                 const metalserve::Metrics& metrics,
                                                 const std::string& dump_path) {
  const absl::string_view model = ro.model_path;
  const bool null = absl::StartsWith(model, metalserve::kNullModelPrefix);
  if (const absl::Duration d = absl::GetFlag(FLAGS_null_device_time);
      d < absl::ZeroDuration() || (!null && d != absl::ZeroDuration())) {
    LOG(ERROR) << "flags: --null_device_time=" << absl::FormatDuration(d)
               << " must be >= 0, with --model=null:<signature.json>";
    std::exit(2);
  }
  if (!null) return LoadModelOrExit(ro, metrics, dump_path);
  const std::string path(model.substr(metalserve::kNullModelPrefix.size()));
  auto sig = metalserve::ReadModelSignature(path);
  if (!sig.ok()) {
    LOG(ERROR) << "--model=" << model << ": " << sig.status();
    std::exit(1);
  }
  auto runner = metalserve::NullRunner::Create(
      *std::move(sig), {.device_time = absl::GetFlag(FLAGS_null_device_time),
                        .spin = ro.accelerator_spin});
  if (!runner.ok()) {
    LOG(ERROR) << "--model=" << model << ": " << runner.status();
    std::exit(1);
  }
  LOG(WARNING) << "null runner: answering zeros with no model work (benchmarks only)";
  return *std::move(runner);
}

template <typename T>
T OrDie(absl::StatusOr<T> v, absl::string_view what) {
  if (!v.ok()) {
    LOG(ERROR) << what << ": " << v.status();
    std::exit(1);
  }
  return *std::move(v);
}

metalserve::MetricsOptions MetricsOptionsFromFlags() {
  metalserve::MetricsOptions mo;
  mo.listen_address = absl::GetFlag(FLAGS_metrics_address);
  mo.monitor_window = absl::GetFlag(FLAGS_monitor_window);
  mo.monitor_max_age = absl::GetFlag(FLAGS_monitor_max_age);
  mo.monitor_log_interval = absl::GetFlag(FLAGS_monitor_log_interval);
  return mo;
}

// The access log of --access_log, or null when it is off.
std::unique_ptr<metalserve::AccessLog> AccessLogFromFlags(metalserve::Metrics* metrics) {
  if (absl::GetFlag(FLAGS_access_log).empty()) return nullptr;
  metalserve::AccessLogOptions ao;
  ao.path = absl::GetFlag(FLAGS_access_log);
  ao.sample = absl::GetFlag(FLAGS_access_log_sample);
  ao.on_dropped = [metrics](int64_t n) { metrics->AccessLogLinesDropped(n); };
  return OrDie(metalserve::AccessLog::Create(std::move(ao)), "--access_log");
}

// Exits 2, naming the flag, when the options are invalid.
metalserve::ServerOptions ServerOptionsFromFlags(metalserve::AccessLog* access_log,
                                                 const std::string& version) {
  metalserve::ServerOptions so;
  so.access_log = access_log;
  so.address = absl::GetFlag(FLAGS_address);
  so.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  so.accept_compression = absl::GetFlag(FLAGS_accept_compression);
  so.memory_quota_bytes = absl::GetFlag(FLAGS_memory_quota_bytes);
  so.max_unread_response_bytes_per_connection =
      absl::GetFlag(FLAGS_max_unread_response_bytes_per_connection);
  so.max_unread_response_bytes = absl::GetFlag(FLAGS_max_unread_response_bytes);
  so.unread_response_timeout = absl::GetFlag(FLAGS_unread_response_timeout);
  so.max_concurrent_streams = absl::GetFlag(FLAGS_max_concurrent_streams);
  so.unix_socket_buffer_bytes = absl::GetFlag(FLAGS_unix_socket_buffer_bytes);
  so.shared_memory = metalserve::SharedMemoryAccessFromFlags();
  const int cores = metalserve::UsableCores();
  if (auto api = metalserve::ParseGrpcApi(absl::GetFlag(FLAGS_grpc_api), cores); api.ok()) {
    so.grpc_api = *api;
    if (absl::GetFlag(FLAGS_grpc_api) == "auto") {
      LOG(INFO) << "--grpc_api=auto: " << metalserve::GrpcApiName(*api) << " on " << cores
                << " usable cores (async from " << metalserve::kAsyncMinCores << ")";
    }
  } else {
    LOG(ERROR) << "flags: " << api.status();
    std::exit(2);
  }
  so.grpc_cq_threads = absl::GetFlag(FLAGS_grpc_cq_threads);
  so.batching.max_batch_size = absl::GetFlag(FLAGS_max_batch_size);
  so.batching.max_queue_delay = absl::GetFlag(FLAGS_max_queue_delay);
  so.batching.allowed_batch_sizes = ParseSizes(absl::GetFlag(FLAGS_allowed_batch_sizes));
  so.batching.max_queue_size = absl::GetFlag(FLAGS_max_queue_size);
  SchedulingFromFlags(&so.batching);
  // --executors=0: the slot count follows the device (ServerOptions::cuda_slots).
  const int executors = absl::GetFlag(FLAGS_executors);
  so.batching.num_executors = executors == 0 ? 2 : executors;
  so.cuda_slots = executors == 0 ? 4 : 0;
  so.accelerator_inline_max_cost = metalserve::AcceleratorInlineMaxCostFromFlags();
  so.batching.rows_per_slot = absl::GetFlag(FLAGS_rows_per_slot);
  so.device_concurrency = absl::GetFlag(FLAGS_device_concurrency);
  so.version = version;
  so.tls_cert_path = absl::GetFlag(FLAGS_tls_cert);
  so.tls_key_path = absl::GetFlag(FLAGS_tls_key);
  so.tls_client_ca_path = absl::GetFlag(FLAGS_tls_client_ca);
  so.http.address = absl::GetFlag(FLAGS_http_address);
  so.http.threads = absl::GetFlag(FLAGS_http_threads);
  so.http.read_timeout = absl::GetFlag(FLAGS_http_read_timeout);
  if (absl::Status s = so.Validate(); !s.ok()) {
    LOG(ERROR) << "flags: " << s;
    std::exit(2);
  }
  return so;
}

metalserve::RuntimeOptions RuntimeOptionsFromFlags(const metalserve::BatcherOptions& batching,
                                                   metalserve::Metrics* metrics) {
  metalserve::RuntimeOptions ro;
  ro.model_path = absl::GetFlag(FLAGS_model);
  ro.signature_codec = metalserve::ModelConfigSignatureCodec();
  ro.device = absl::GetFlag(FLAGS_device);
  ro.threads = absl::GetFlag(FLAGS_threads);
  ro.device_order = metalserve::DeviceOrderFromFlags();
  if (ro.threads == 0) ro.threads = static_cast<int>(std::thread::hardware_concurrency());
  ro.precision = absl::GetFlag(FLAGS_precision);
  ro.input_shapes =
      OrDie(metalserve::ParseInputShapes(absl::GetFlag(FLAGS_input_shape)), "--input_shape");
  ro.input_dtypes =
      OrDie(metalserve::ParseInputDtypes(absl::GetFlag(FLAGS_input_dtype)), "--input_dtype");
  ro.channels_last = absl::GetFlag(FLAGS_channels_last);
  ro.optimize = absl::GetFlag(FLAGS_optimize);
  ro.cudnn_benchmark = absl::GetFlag(FLAGS_cudnn_benchmark);
  ro.cpu_forward_on_caller = absl::GetFlag(FLAGS_cpu_forward_on_caller);
  ro.accelerator_spin = metalserve::AcceleratorSpinFromFlags();
  ro.staging_buffers = absl::GetFlag(FLAGS_staging_buffers);
  if (ro.staging_buffers < 0 || ro.staging_buffers > 64) {
    LOG(ERROR) << "flags: --staging_buffers=" << ro.staging_buffers << " must be in [0, 64]";
    std::exit(2);
  }
  metalserve::SetCudaSync(
      OrDie(metalserve::ParseCudaSync(absl::GetFlag(FLAGS_cuda_sync)), "--cuda_sync"));
  ro.cache_dir = absl::GetFlag(FLAGS_cache_dir);
  if (ro.cache_dir.empty()) ro.cache_dir = metalserve::DefaultVerificationCacheDir();
  if (ro.cache_dir == "none") ro.cache_dir.clear();
  ro.on_load_phase = [metrics](const std::string& phase, absl::Duration took) {
    metrics->SetLoadPhase(phase, took);
  };
  // Warm up (and verify) at the sizes batches are padded to, or at 1 and the
  // largest batch.
  ro.warmup_batch_sizes = batching.allowed_batch_sizes;
  if (ro.warmup_batch_sizes.empty()) {
    ro.warmup_batch_sizes = {1};
    if (batching.max_batch_size > 1) ro.warmup_batch_sizes.push_back(batching.max_batch_size);
  }
  ro.empty_cache_every = absl::GetFlag(FLAGS_empty_cache_every);
  ro.empty_cache_interval = absl::GetFlag(FLAGS_empty_cache_interval);
  ro.memory_watermark = absl::GetFlag(FLAGS_memory_watermark);
  ro.on_cache_clear = [metrics](absl::string_view trigger, absl::Duration took) {
    metrics->CacheCleared(trigger, took);
  };
  return ro;
}

// --model_repository: every model of the folder loaded (exits 1 when the
// folder cannot be read; a model that fails is logged and the others serve).
std::unique_ptr<metalserve::RepositoryServing> RepositoryOrExit(
    const metalserve::ServerOptions& so, const metalserve::RuntimeOptions& ro,
    metalserve::Metrics* metrics) {
  metalserve::ModelRepository::Options o;
  o.root = absl::GetFlag(FLAGS_model_repository);
  o.control = OrDie(metalserve::ParseModelControl(absl::GetFlag(FLAGS_model_control)),
                    "--model_control");
  o.poll_interval = absl::GetFlag(FLAGS_repository_poll_interval);
  o.on_states = metalserve::ModelStatesToMetrics(metrics);
  o.on_unload = [metrics](const std::string& m, bool ok) { metrics->ModelUnloadFinished(m, ok); };
  metalserve::ModelServableFactory::Options f{.batching = so.batching,
                                              .device_concurrency = so.device_concurrency,
                                              .cuda_slots = so.cuda_slots,
                                              .accelerator_inline_max_cost =
                                                  so.accelerator_inline_max_cost,
                                              .metrics = metrics};
  auto r = OrDie(metalserve::StartRepository(o, std::move(f), ro,
                                             absl::GetFlag(FLAGS_device_memory_budget)),
                 "--model_repository");
  metrics->SetBuildInfo(METALSERVE_VERSION, "", ro.device, o.root);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  // Before any thread or mutex (common/mutex_mode.h).
  const bool detection_off = metalserve::ApplyMutexDeadlockDetectionSetting();
  absl::SetProgramUsageMessage(
      "Serves one TorchScript model over gRPC (metalserve.v1.Inference, health, "
      "reflection) behind a dynamic batcher, with Prometheus metrics.\n"
      "Usage: metalserve [--model=path.pt | --model_repository=DIR] "
      "[--address=127.0.0.1:8500] ...");
  metalserve::ConfigureFlagsHelp(argc, argv, __FILE__, "server/main.cc",
                                 {metalserve::kSchedulingFlagsFile,
                                  metalserve::kTransportFlagsFile});
  absl::ParseCommandLine(argc, argv);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  metalserve::InstallSignalHandlers();
  KeepLargeBlocksInHeap();
  metalserve::LogMutexDeadlockDetection(detection_off);
  const std::string dump_path = absl::GetFlag(FLAGS_metrics_dump);
  const std::string version = METALSERVE_VERSION;

  const metalserve::MetricsOptions mo = MetricsOptionsFromFlags();
  auto metrics = OrDie(metalserve::Metrics::Create(mo), "metrics");
  auto access_log = AccessLogFromFlags(metrics.get());  // outlives the server
  const metalserve::ServerOptions so = ServerOptionsFromFlags(access_log.get(), version);
  const metalserve::RuntimeOptions ro = RuntimeOptionsFromFlags(so.batching, metrics.get());
  metalserve::LogStart(version, ro, so, mo, absl::GetFlag(FLAGS_access_log));

  std::unique_ptr<metalserve::RepositoryServing> repository;
  std::unique_ptr<metalserve::Runner> runner;
  std::unique_ptr<metalserve::InferenceServer> server;
  if (!absl::GetFlag(FLAGS_model_repository).empty()) {
    if (!absl::GetFlag(FLAGS_devices).empty()) {
      LOG(ERROR) << "--devices serves --model only; a repository model lists \"devices\" in "
                    "its config.json (docs/repository.md)";
      return 1;
    }
    repository = RepositoryOrExit(so, ro, metrics.get());
    server = OrDie(metalserve::InferenceServer::Start(so, repository->lookup.get(),
                                                      repository->repository.get(),
                                                      metrics.get()),
                   "server");
  } else {
    runner = RunnerOrExit(ro, *metrics, dump_path);
    const metalserve::ModelInfo& info = runner->info();
    metrics->SetModelTimes(info.load_time, info.warmup_time);
    metrics->SetBuildInfo(version, info.torch_version, info.device, info.name);
    LogModel(info);
    server = OrDie(metalserve::InferenceServer::Start(so, runner.get(), metrics.get()), "server");
  }
  LOG(INFO) << "ready: gRPC on " << so.address << ", REST on "
            << (so.http.address.empty() ? "(off)" : so.http.address) << ", metrics on "
            << (metrics->port() > 0 ? absl::StrCat("port ", metrics->port()) : "(off)");

  metalserve::Rescanner* rescanner =
      repository != nullptr ? repository->rescanner.get() : nullptr;
  auto rescan = [rescanner] {
    if (rescanner == nullptr) {
      LOG(INFO) << "SIGHUP ignored: no --model_repository to rescan";
      return;
    }
    rescanner->Request();
  };
  metalserve::ServeUntilSignal([&] { DumpMetrics(*metrics, dump_path); }, rescan);
  LOG(INFO) << "signal " << metalserve::TerminationSignal() << ": health NOT_SERVING, draining";
  server->SetServing(false);
  metalserve::DrainGrace(absl::GetFlag(FLAGS_drain_grace));
  server->Shutdown(absl::GetFlag(FLAGS_shutdown_timeout));
  DumpMetrics(*metrics, dump_path);
  LOG(INFO) << "exit";
  return 0;
}
