// early_refusal_bench: does refusing a call before its body is read help at
// 10x overload with large requests? (issue 17, item 7; docs/reliability.md)
//
// One in-process gRPC server on loopback with a callback generic handler
// (grpc::CallbackGenericService, the mechanism the generated
// WithGenericMethod_* markers hand a method to): the handler's reactor
// starts when the call's headers arrive, before any of its message is read.
//   --mode=late   reads the body first, then checks the queue (what a unary
//                 handler does: gRPC 1.51 runs it only once the message is in)
//   --mode=early  checks the queue first; a full queue is answered
//                 UNAVAILABLE without reading the body
// Accepted calls wait in a bounded queue (--queue) for a fake model that
// takes --batch calls every --batch_ms (capacity batch / batch_ms). The
// client offers --rate calls a second of --bytes each, open loop, for
// --seconds, and prints goodput, accepted latency p50/p99, refusal p50 and
// the server's CPU seconds.
//
// Run: build/bench/reliability/early_refusal_bench --mode=late
//      build/bench/reliability/early_refusal_bench --mode=early
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"

ABSL_FLAG(std::string, mode, "late", "late (read, then refuse) or early (refuse unread)");
ABSL_FLAG(int, bytes, 602112, "request body bytes (one fp32 3x224x224 image)");
ABSL_FLAG(int, rate, 320, "calls offered per second");
ABSL_FLAG(double, seconds, 6, "seconds of load");
ABSL_FLAG(int, batch, 8, "calls the fake model answers per batch");
ABSL_FLAG(int, batch_ms, 250, "milliseconds per batch");
ABSL_FLAG(int, queue, 64, "calls that may wait");
ABSL_FLAG(bool, small_window, false,
          "server: HTTP/2 BDP probing off, so a stream's window stays at 64 KiB "
          "until its message is read");

namespace {

class Reactor;

// The bounded queue and the fake model's thread.
class Model {
 public:
  Model() : thread_([this] { Loop(); }) {}
  ~Model() {
    {
      absl::MutexLock l(&mu_);
      stop_ = true;
    }
    thread_.join();
  }
  bool Full() {
    absl::MutexLock l(&mu_);
    return static_cast<int>(queue_.size()) >= absl::GetFlag(FLAGS_queue);
  }
  bool Admit(Reactor* r) {
    absl::MutexLock l(&mu_);
    if (static_cast<int>(queue_.size()) >= absl::GetFlag(FLAGS_queue)) return false;
    queue_.push_back(r);
    return true;
  }

 private:
  void Loop();
  absl::Mutex mu_;
  std::deque<Reactor*> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

class Reactor final : public grpc::ServerGenericBidiReactor {
 public:
  Reactor(Model* model, bool early) : model_(model), early_(early) {
    if (early_ && model_->Full()) {
      Refuse();
    } else {
      StartRead(&request_);
    }
  }
  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no message"));
      return;
    }
    request_.Clear();
    if (!model_->Admit(this)) Refuse();
  }
  void Answer() {
    grpc::Slice s(std::string(16, '\0'));
    response_ = grpc::ByteBuffer(&s, 1);
    StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
  }
  void OnDone() override { delete this; }

 private:
  void Refuse() { Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "queue is full")); }
  Model* const model_;
  const bool early_;
  grpc::ByteBuffer request_, response_;
};

void Model::Loop() {
  for (;;) {
    std::vector<Reactor*> batch;
    {
      absl::MutexLock l(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (stop_ && queue_.empty()) return;
      while (!queue_.empty() && static_cast<int>(batch.size()) < absl::GetFlag(FLAGS_batch)) {
        batch.push_back(queue_.front());
        queue_.pop_front();
      }
    }
    absl::SleepFor(absl::Milliseconds(absl::GetFlag(FLAGS_batch_ms)));
    for (Reactor* r : batch) r->Answer();
  }
}

class Service final : public grpc::CallbackGenericService {
 public:
  Service(Model* model, bool early) : model_(model), early_(early) {}
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext*) override {
    return new Reactor(model_, early_);
  }

 private:
  Model* const model_;
  const bool early_;
};

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

// The server on a free loopback port, written to `*port`.
std::unique_ptr<grpc::Server> StartServer(Service* service, int* port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), port);
  builder.RegisterCallbackGenericService(service);
  builder.SetMaxReceiveMessageSize(64 << 20);
  if (absl::GetFlag(FLAGS_small_window)) builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  return builder.BuildAndStart();
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const bool early = absl::GetFlag(FLAGS_mode) == "early";
  Model model;
  Service service(&model, early);
  int port = 0;
  std::unique_ptr<grpc::Server> server = StartServer(&service, &port);
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);
  auto channel = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port),
                                           grpc::InsecureChannelCredentials(), args);
  grpc::GenericStub stub(channel);
  grpc::Slice body(std::string(absl::GetFlag(FLAGS_bytes), '\0'));
  const int total = static_cast<int>(absl::GetFlag(FLAGS_rate) * absl::GetFlag(FLAGS_seconds));
  struct Call {
    grpc::ClientContext ctx;
    grpc::ByteBuffer req, resp;
    absl::Time start;
  };
  std::vector<std::unique_ptr<Call>> calls(total);
  absl::Mutex mu;
  std::vector<double> ok_s, refused_s;
  int done = 0, other = 0;
  const double cpu0 = CpuSeconds();
  const absl::Time t0 = absl::Now();
  for (int i = 0; i < total; ++i) {
    absl::SleepFor(t0 + absl::Seconds(i * 1.0 / absl::GetFlag(FLAGS_rate)) - absl::Now());
    calls[i] = std::make_unique<Call>();
    Call* c = calls[i].get();
    c->req = grpc::ByteBuffer(&body, 1);
    c->ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    c->start = absl::Now();
    stub.UnaryCall(&c->ctx, "/bench.Early/Predict", grpc::StubOptions(), &c->req, &c->resp,
                   [&, c](grpc::Status s) {
                     const double took = absl::ToDoubleSeconds(absl::Now() - c->start);
                     absl::MutexLock l(&mu);
                     if (s.ok()) ok_s.push_back(took);
                     else if (s.error_code() == grpc::StatusCode::UNAVAILABLE)
                       refused_s.push_back(took);
                     else ++other;
                     ++done;
                   });
  }
  {
    absl::MutexLock l(&mu);
    auto all = [&] { return done == total; };
    mu.Await(absl::Condition(&all));
    const double wall = absl::ToDoubleSeconds(absl::Now() - t0);
    std::printf("mode=%s%s offered=%d ok=%zu refused=%zu other=%d goodput=%.1f req/s "
                "accepted p50=%.3f s p99=%.3f s refusal p50=%.1f ms cpu=%.2f s "
                "(client and server)\n",
                early ? "early" : "late", absl::GetFlag(FLAGS_small_window) ? " small_window" : "",
                total, ok_s.size(), refused_s.size(), other,
                ok_s.size() / wall, Percentile(ok_s, 0.5), Percentile(ok_s, 0.99),
                1e3 * Percentile(refused_s, 0.5), CpuSeconds() - cpu0);
  }
  server->Shutdown();
  return 0;
}
