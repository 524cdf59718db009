// The measurement behind docs/rest.md's choice of HTTP server library: the
// same endpoint on libmicrohttpd, civetweb and cpp-httplib, each answering
// after a simulated batch of `wait_us` computed on one other thread (as the
// batcher's executor would), with `threads` server threads. libmicrohttpd
// suspends the connection and the executor resumes it; civetweb and
// cpp-httplib have no such hook, so their handler thread waits.
//
//   g++ -O2 -std=c++20 bench/http_libs/compare.cc -o /tmp/http_compare \
//       -lmicrohttpd -lcivetweb -lcpp-httplib -lpthread
//   /tmp/http_compare LIB PORT THREADS WAIT_US   # LIB: mhd | civetweb | httplib
//   wrk -t2 -c64 -d5s http://127.0.0.1:PORT/
//   curl -w '%{time_total}' http://127.0.0.1:PORT/health   # meanwhile: a probe
// /health answers without the executor: how long a new connection waits
// while the others wait on batches. Not built by CMake: a one-off
// measurement, kept to be re-run.
#include <civetweb.h>
#include <httplib.h>
#include <microhttpd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace {

const char kBody[] = "{\"outputs\":[{\"name\":\"y\",\"data\":[1,2,3,4]}]}";
int g_wait_us = 0;

// One "executor" thread: runs each job after wait_us, in arrival order.
class Executor {
 public:
  Executor() : thread_([this] { Loop(); }) {}
  void Post(std::function<void()> f) {
    std::lock_guard<std::mutex> l(mu_);
    jobs_.push_back(std::move(f));
    cv_.notify_one();
  }

 private:
  void Loop() {
    for (;;) {
      std::function<void()> f;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [this] { return !jobs_.empty(); });
        f = std::move(jobs_.front());
        jobs_.pop_front();
      }
      if (g_wait_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(g_wait_us));
      f();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::thread thread_;
};
Executor* g_executor;

// Blocks the calling thread until the executor has run the job.
void WaitForBatch() {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  g_executor->Post([&] {
    std::lock_guard<std::mutex> l(mu);
    done = true;
    cv.notify_one();
  });
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return done; });
}

MHD_Result MhdHandler(void*, MHD_Connection* c, const char* url, const char*, const char*,
                      const char*, size_t*, void** state) {
  if (*state == nullptr && std::strcmp(url, "/health") != 0) {  // first call: hand to the executor, suspend
    *state = reinterpret_cast<void*>(1);
    MHD_suspend_connection(c);
    g_executor->Post([c] { MHD_resume_connection(c); });
    return MHD_YES;
  }
  MHD_Response* r = MHD_create_response_from_buffer(strlen(kBody), (void*)kBody,
                                                    MHD_RESPMEM_PERSISTENT);
  MHD_Result q = MHD_queue_response(c, 200, r);
  MHD_destroy_response(r);
  return q;
}

int CivetHandler(mg_connection* c, void*) {
  if (std::strcmp(mg_get_request_info(c)->local_uri, "/health") != 0) WaitForBatch();
  mg_printf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
               "Content-Length: %zu\r\n\r\n%s", strlen(kBody), kBody);
  return 200;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s mhd|civetweb|httplib PORT THREADS WAIT_US\n", argv[0]);
    return 2;
  }
  const std::string lib = argv[1];
  const int port = std::atoi(argv[2]), threads = std::atoi(argv[3]);
  g_wait_us = std::atoi(argv[4]);
  g_executor = new Executor();
  if (lib == "mhd") {
    MHD_Daemon* d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME,
        static_cast<uint16_t>(port), nullptr, nullptr, &MhdHandler, nullptr,
        MHD_OPTION_THREAD_POOL_SIZE, static_cast<unsigned>(threads),
        MHD_OPTION_CONNECTION_LIMIT, 1024u, MHD_OPTION_END);
    if (d == nullptr) return 1;
  } else if (lib == "civetweb") {
    const std::string p = std::to_string(port), t = std::to_string(threads);
    const char* opts[] = {"listening_ports", p.c_str(), "num_threads", t.c_str(),
                          "enable_keep_alive", "yes", nullptr};
    mg_callbacks cb{};
    mg_context* ctx = mg_start(&cb, nullptr, opts);
    if (ctx == nullptr) return 1;
    mg_set_request_handler(ctx, "/", CivetHandler, nullptr);
  } else {
    auto* s = new httplib::Server();
    s->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    s->Get(".*", [](const httplib::Request& req, httplib::Response& res) {
      if (req.path != "/health") WaitForBatch();
      res.set_content(kBody, "application/json");
    });
    std::thread([s, port] { s->listen("127.0.0.1", port); }).detach();
  }
  std::fprintf(stderr, "%s on %d, %d threads, batch wait %d us\n", lib.c_str(), port,
               threads, g_wait_us);
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}
