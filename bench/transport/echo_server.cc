// echo_server: gRPC's own floor for metalserve's Predict, measured by the
// same client (metalserve-bench). A minimal callback unary server that
// serves metalserve.v1.Inference with a raw Predict handler: it receives the
// request's bytes (gRPC reads the whole message) and answers with one
// PredictResponse serialised once at start-up, holding zeros of the
// signature's outputs for one row, so the response has the size metalserve's
// would have at batch 1. It never parses the request: what it costs is what
// gRPC costs to move the same bytes. GetModelMetadata answers from the
// signature so that metalserve-bench can build its requests.
//
// --api=async serves Predict through gRPC's asynchronous API instead: one
// completion queue per thread (--cq_threads), each polled by its own thread,
// which answers the call itself; what gRPC's callback API (metalserve's)
// costs above that is the difference of the two floors.
//
//   echo_server --signature=build/models/identity.json --address=127.0.0.1:0
//   echo_server --signature=build/models/identity.json --api=async --cq_threads=2
//
// --answer_after=D (callback API) answers each call D after it arrived, from
// a thread of its own, as metalserve answers from an executor once the
// device is done: the floor for a call whose server waits D (its threads
// asleep meanwhile, as while a GPU computes), read as p50 - D. At
// concurrency 1 a server waiting for a device pays the idle machine's
// wake-ups (cores sleeping between calls, the answer handed between
// threads) that a back-to-back echo never does.
//
//   echo_server --signature=build-gpu/models/resnet50.json --answer_after=1400us
//
// Prints "ready: gRPC on <address> port <port>" once it serves; stops on
// SIGTERM/SIGINT. Bench-only: not installed, no metrics, no TLS.
#include <algorithm>
#include <condition_variable>
#include <csignal>
#include <deque>
#include <utility>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <iostream>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/mutex_mode.h"
#include "common/unix_socket_buffers.h"
#include "grpcpp/grpcpp.h"
#include "metalserve/v1/inference.grpc.pb.h"
#include "server/model_config/model_config.h"
#include "proto/dtype/dtype_map.h"
#include "server/service/tensor_codec.h"

ABSL_FLAG(std::string, signature, "", "Signature .json of the model to imitate (required)");
ABSL_FLAG(std::string, address, "127.0.0.1:0",
          "Listen address host:port or unix:///path; port 0 picks one");
ABSL_FLAG(int64_t, max_message_bytes, 64 << 20, "Largest gRPC message in bytes");
ABSL_FLAG(std::string, api, "callback",
          "How Predict is served: callback (gRPC's callback API, as metalserve serves) or "
          "async (completion queues polled by --cq_threads threads of its own)");
ABSL_FLAG(std::vector<std::string>, channel_arg, {},
          "Extra integer channel arguments KEY=VALUE, comma-separated (e.g. "
          "grpc.http2.max_frame_size=1048576): transport settings measured on gRPC alone");
ABSL_FLAG(int, cq_threads, 2, "With --api=async: completion queues, one thread each");
ABSL_FLAG(absl::Duration, answer_after, absl::ZeroDuration(),
          "With --api=callback: answer each call this long after it arrived, from a "
          "thread of its own (0 = at once, on gRPC's thread)");
ABSL_FLAG(int64_t, unix_socket_buffer_bytes, metalserve::kDefaultUnixSocketBufferBytes,
          "As metalserve's: SO_SNDBUF and SO_RCVBUF of unix:// connections; 0 = the kernel's");

namespace metalserve {
namespace {

using v1::GetModelMetadataRequest;
using v1::GetModelMetadataResponse;

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

// The answers, built once from the signature: Predict's serialised
// response for one row and GetModelMetadata's.
class Canned {
 public:
  explicit Canned(const ModelSignature& sig) {
    v1::PredictResponse response;
    response.set_model_name(sig.name);
    response.set_device("none");
    for (const TensorSpec& s : sig.outputs) {
      Tensor t{.name = s.name, .dtype = s.dtype, .shape = s.shape};
      t.shape[0] = 1;
      auto* o = response.add_outputs();
      o->set_name(s.name);
      o->set_dtype(ProtoDataType(s.dtype));
      for (int64_t d : t.shape) o->add_shape(d);
      o->mutable_data()->assign(static_cast<size_t>(t.RowBytes()), '\0');
    }
    bool own = false;
    grpc::SerializationTraits<v1::PredictResponse>::Serialize(response, &response_, &own);
    metadata_.set_model_name(sig.name);
    metadata_.set_model_version(sig.version);
    metadata_.set_device("none");
    for (const TensorSpec& s : sig.inputs) Add(s, metadata_.add_inputs());
    for (const TensorSpec& s : sig.outputs) Add(s, metadata_.add_outputs());
  }

  const grpc::ByteBuffer& response() const { return response_; }

  grpc::ServerUnaryReactor* Metadata(grpc::CallbackServerContext* context,
                                     GetModelMetadataResponse* response) const {
    *response = metadata_;
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  static void Add(const TensorSpec& s, v1::TensorSpec* out) {
    out->set_name(s.name);
    out->set_dtype(ProtoDataType(s.dtype));
    for (int64_t d : s.shape) out->add_shape(d);
  }

  grpc::ByteBuffer response_;
  GetModelMetadataResponse metadata_;
};

// Answers calls at their due time, in arrival order, from its own thread
// (--answer_after).
class DelayedAnswers {
 public:
  explicit DelayedAnswers(absl::Duration after) : after_(after) {
    if (after_ > absl::ZeroDuration()) thread_ = std::thread([this] { Loop(); });
  }
  ~DelayedAnswers() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }
  bool on() const { return after_ > absl::ZeroDuration(); }
  void Add(grpc::ServerUnaryReactor* reactor) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      due_.push_back({absl::Now() + after_, reactor});
    }
    cv_.notify_one();
  }

 private:
  void Loop() {
#ifdef __linux__
    // Timers this thread sleeps on fire on time, not up to the default 50 us
    // of slack late: the delay is the one asked for plus the wake-up.
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
#endif
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [this] { return stopping_ || !due_.empty(); });
      if (due_.empty()) return;  // stopping, nothing left
      const auto [when, reactor] = due_.front();
      due_.pop_front();
      lock.unlock();
      absl::SleepFor(when - absl::Now());  // nothing when already due
      const absl::Duration late = absl::Now() - when;
      reactor->Finish(grpc::Status::OK);
      lock.lock();
      if (late_.size() < (1u << 20)) late_.push_back(late);
    }
  }

 public:
  // How late the answers were, at the median, past the time asked for (the
  // sleep's own overshoot and wake-up), over the calls answered so far.
  std::string Summary() {
    std::lock_guard<std::mutex> lock(mu_);
    if (late_.empty()) return "no call answered";
    std::vector<absl::Duration> sorted = late_;
    std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
    return absl::StrCat(late_.size(), " calls answered ", absl::FormatDuration(after_),
                        " after arrival, a median ",
                        absl::FormatDuration(sorted[sorted.size() / 2]), " later than that");
  }

 private:
  std::vector<absl::Duration> late_;  // guarded by mu_

  const absl::Duration after_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<absl::Time, grpc::ServerUnaryReactor*>> due_;
  bool stopping_ = false;
  std::thread thread_;
};

class EchoService final
    : public v1::Inference::WithRawCallbackMethod_Predict<
          v1::Inference::WithCallbackMethod_GetModelMetadata<v1::Inference::Service>> {
 public:
  EchoService(const Canned& canned, DelayedAnswers& delayed)
      : canned_(canned), delayed_(delayed) {}

  grpc::ServerUnaryReactor* Predict(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* /*request*/,
                                    grpc::ByteBuffer* response) override {
    *response = canned_.response();  // a reference to the same slices, no copy
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (delayed_.on()) {
      delayed_.Add(reactor);
    } else {
      reactor->Finish(grpc::Status::OK);
    }
    return reactor;
  }

  grpc::ServerUnaryReactor* GetModelMetadata(grpc::CallbackServerContext* context,
                                             const GetModelMetadataRequest*,
                                             GetModelMetadataResponse* response) override {
    return canned_.Metadata(context, response);
  }

 private:
  const Canned& canned_;
  DelayedAnswers& delayed_;
};

// Predict through the asynchronous API (GetModelMetadata stays a callback).
class AsyncEchoService final
    : public v1::Inference::WithRawMethod_Predict<
          v1::Inference::WithCallbackMethod_GetModelMetadata<v1::Inference::Service>> {
 public:
  explicit AsyncEchoService(const Canned& canned) : canned_(canned) {}

  grpc::ServerUnaryReactor* GetModelMetadata(grpc::CallbackServerContext* context,
                                             const GetModelMetadataRequest*,
                                             GetModelMetadataResponse* response) override {
    return canned_.Metadata(context, response);
  }

  // Serves `cq` until it is shut down and drained: every call is asked for,
  // answered and freed on this thread. Call once per queue, before Stop.
  void Poll(grpc::ServerCompletionQueue* cq) {
    Poller& poller = AddPoller();
    // Calls asked for at once on this queue, so that a burst of clients
    // finds one waiting.
    constexpr int kWaiting = 16;
    {
      std::lock_guard<std::mutex> lock(poller.mu);
      for (int i = 0; !poller.stopping && i < kWaiting; ++i) Ask(cq);
    }
    void* tag = nullptr;
    bool ok = false;
    while (cq->Next(&tag, &ok)) {
      auto* call = static_cast<Call*>(tag);
      std::lock_guard<std::mutex> lock(poller.mu);
      // Answered, refused by a server shutting down, or matched after Stop:
      // gRPC aborts on a call asked for or answered on a queue shut down.
      if (call->answered || !ok || poller.stopping) {
        delete call;
        continue;
      }
      Ask(cq);
      call->answered = true;
      call->writer.Finish(canned_.response(), grpc::Status::OK, call);
    }
  }

  // Before the server's Shutdown and the queues': when it returns no poller
  // is asking for or answering a call, and none will again.
  void Stop() {
    std::lock_guard<std::mutex> lock(pollers_mu_);
    stopped_ = true;
    for (Poller& p : pollers_) {
      std::lock_guard<std::mutex> poller_lock(p.mu);
      p.stopping = true;
    }
  }

 private:
  struct Call {
    grpc::ServerContext context;
    grpc::ByteBuffer request;
    grpc::ServerAsyncResponseWriter<grpc::ByteBuffer> writer{&context};
    bool answered = false;
  };
  // One per queue: its thread holds `mu` while it asks for or answers a
  // call (uncontended but for Stop).
  struct Poller {
    std::mutex mu;
    bool stopping = false;
  };

  Poller& AddPoller() {
    std::lock_guard<std::mutex> lock(pollers_mu_);
    Poller& p = pollers_.emplace_back();
    p.stopping = stopped_;  // a thread that started after Stop asks for nothing
    return p;
  }

  void Ask(grpc::ServerCompletionQueue* cq) {
    auto* call = new Call;
    RequestPredict(&call->context, &call->request, &call->writer, cq, cq, call);
  }

  const Canned& canned_;
  std::mutex pollers_mu_;
  std::list<Poller> pollers_;  // a list: a Poller's address stays put
  bool stopped_ = false;       // guarded by pollers_mu_
};

int Main() {
  auto sig = ReadModelSignature(absl::GetFlag(FLAGS_signature));
  if (!sig.ok()) {
    std::cerr << "echo_server: --signature: " << sig.status() << "\n";
    return 2;
  }
  const std::string api = absl::GetFlag(FLAGS_api);
  const int cq_threads = absl::GetFlag(FLAGS_cq_threads);
  if (api != "callback" && api != "async") {
    std::cerr << "echo_server: --api: '" << api << "' is neither callback nor async\n";
    return 2;
  }
  if (cq_threads < 1) {
    std::cerr << "echo_server: --cq_threads: " << cq_threads << " is below 1\n";
    return 2;
  }
  const absl::Duration answer_after = absl::GetFlag(FLAGS_answer_after);
  if (answer_after < absl::ZeroDuration() ||
      (answer_after > absl::ZeroDuration() && api != "callback")) {
    std::cerr << "echo_server: --answer_after: " << answer_after
              << " must be >= 0, and is for --api=callback only\n";
    return 2;
  }
  const Canned canned(*sig);
  // Declared before the server: destroyed after its Shutdown, which waits
  // for every call, so the thread answers every call it was given.
  DelayedAnswers delayed(answer_after);
  EchoService callback_service(canned, delayed);
  AsyncEchoService async_service(canned);
  grpc::ServerBuilder builder;
  int port = 0;
  const std::string address = absl::GetFlag(FLAGS_address);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port);
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> cqs;
  if (api == "async") {
    builder.RegisterService(&async_service);
    for (int i = 0; i < cq_threads; ++i) cqs.push_back(builder.AddCompletionQueue());
  } else {
    builder.RegisterService(&callback_service);
  }
  // The same socket buffers as metalserve (server/service/server.cc).
  if (const int64_t b = absl::GetFlag(FLAGS_unix_socket_buffer_bytes); b > 0) {
    builder.SetOption(metalserve::UnixSocketBufferOption(b));
  }
  builder.SetMaxReceiveMessageSize(static_cast<int>(absl::GetFlag(FLAGS_max_message_bytes)));
  builder.SetMaxSendMessageSize(static_cast<int>(absl::GetFlag(FLAGS_max_message_bytes)));
  for (const std::string& kv : absl::GetFlag(FLAGS_channel_arg)) {
    const std::vector<std::string> parts = absl::StrSplit(kv, absl::MaxSplits('=', 1));
    int value = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &value)) {
      std::cerr << "--channel_arg: '" << kv << "' is not KEY=INTEGER\n";
      return 2;
    }
    builder.AddChannelArgument(parts[0], value);
  }
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) {
    std::cerr << "echo_server: cannot listen on " << address << "\n";
    return 1;
  }
  std::vector<std::thread> pollers;
  for (auto& cq : cqs) {
    pollers.emplace_back([&async_service, q = cq.get()] { async_service.Poll(q); });
  }
  std::cout << "ready: gRPC on " << address << " port " << port << " api " << api
            << std::endl;
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  while (g_stop == 0) absl::SleepFor(absl::Milliseconds(20));
  async_service.Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  if (delayed.on()) std::cout << "answer_after: " << delayed.Summary() << std::endl;
  // After the server: the calls still asked for come back not ok, then Next
  // ends once the queue is shut down and drained.
  for (auto& cq : cqs) cq->Shutdown();
  for (std::thread& t : pollers) t.join();
  return 0;
}

}  // namespace
}  // namespace metalserve

int main(int argc, char** argv) {
  // As metalserve does (common/mutex_mode.h), so that the floor and the
  // server pay the same for gRPC's own mutexes.
  metalserve::ApplyMutexDeadlockDetectionSetting();
  absl::ParseCommandLine(argc, argv);
#ifdef __GLIBC__
  // The allocator settings metalserve uses (server/main.cc), so that the
  // floor and the server differ in their work, not in their page faults.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
  return metalserve::Main();
}
