#include "client/http_transport.h"

#include <curl/curl.h>

#include <algorithm>
#include <deque>
#include <set>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"

namespace metalserve::client {
namespace {

constexpr char kLengthHeader[] = "inference-header-content-length:";

void InitCurlOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// The bytes and headers of one answer, and the easy handle that fetches it.
struct Exchange {
  CURL* easy = nullptr;
  std::string body;
  int64_t header_length = -1;
  char error[CURL_ERROR_SIZE] = {};
  CallDone done;
};

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  static_cast<Exchange*>(user)->body.append(data, size * n);
  return size * n;
}

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  absl::string_view line(data, size * n);
  if (absl::StartsWithIgnoreCase(line, kLengthHeader)) {
    int64_t v = -1;
    line.remove_prefix(sizeof(kLengthHeader) - 1);
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &v)) {
      static_cast<Exchange*>(user)->header_length = v;
    }
  }
  return size * n;
}

// Options every exchange of `options` shares: callbacks, TLS, no signals.
void SetCommon(CURL* easy, Exchange* x, const HttpOptions& options) {
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, x);
  curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(easy, CURLOPT_HEADERDATA, x);
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, x->error);
  curl_easy_setopt(easy, CURLOPT_PRIVATE, x);
  if (!options.tls_ca.empty()) curl_easy_setopt(easy, CURLOPT_CAINFO, options.tls_ca.c_str());
  if (!options.tls_cert.empty()) {
    curl_easy_setopt(easy, CURLOPT_SSLCERT, options.tls_cert.c_str());
  }
  if (!options.tls_key.empty()) curl_easy_setopt(easy, CURLOPT_SSLKEY, options.tls_key.c_str());
}

// The outcome of a transfer libcurl ended with `code`.
CallResult ResultOf(CURL* easy, CURLcode code, const Exchange& x, absl::string_view what) {
  if (code != CURLE_OK) {
    CallResult r;
    r.code = code == CURLE_OPERATION_TIMEDOUT ? grpc::StatusCode::DEADLINE_EXCEEDED
                                              : grpc::StatusCode::UNAVAILABLE;
    r.message = absl::StrCat(what, ": ", curl_easy_strerror(code),
                             x.error[0] != '\0' ? absl::StrCat(" (", x.error, ")") : "");
    return r;
  }
  long status = 0;
  curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
  return DecodeInferAnswer(status, x.body, x.header_length);
}

class HttpTransport : public CallTransport {
 public:
  HttpTransport(const HttpOptions& options, std::vector<std::string> urls,
                HttpInferBody body, int64_t rows)
      : options_(options), urls_(std::move(urls)), body_(std::move(body)), rows_(rows) {
    multi_ = curl_multi_init();
    curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, 10000L);
    headers_ = curl_slist_append(headers_, "Expect:");  // no 100-continue round trip
    headers_ = curl_slist_append(
        headers_, body_.header_length >= 0 ? "Content-Type: application/octet-stream"
                                           : "Content-Type: application/json");
    if (body_.header_length >= 0) {
      headers_ = curl_slist_append(
          headers_,
          absl::StrCat("Inference-Header-Content-Length: ", body_.header_length).c_str());
    }
    thread_ = std::thread([this] { Loop(); });
  }

  ~HttpTransport() override {
    {
      absl::MutexLock l(&mu_);
      stop_ = true;
    }
    curl_multi_wakeup(multi_);
    thread_.join();
    for (Exchange* x : idle_) {
      curl_easy_cleanup(x->easy);
      delete x;
    }
    curl_multi_cleanup(multi_);
    curl_slist_free_all(headers_);
  }

  size_t lanes() const override { return urls_.size(); }
  int64_t rows_per_request() const override { return rows_; }

  void Start(size_t lane, absl::Duration deadline, CallDone done) override {
    {
      absl::MutexLock l(&mu_);
      pending_.push_back({lane % urls_.size(), deadline, std::move(done)});
    }
    curl_multi_wakeup(multi_);
  }

 private:
  struct Pending {
    size_t lane;
    absl::Duration deadline;
    CallDone done;
  };

  Exchange* NewExchange() {
    auto* x = new Exchange;
    x->easy = curl_easy_init();
    SetCommon(x->easy, x, options_);
    curl_easy_setopt(x->easy, CURLOPT_POST, 1L);
    curl_easy_setopt(x->easy, CURLOPT_POSTFIELDS, body_.body.data());
    curl_easy_setopt(x->easy, CURLOPT_POSTFIELDSIZE_LARGE,
                     static_cast<curl_off_t>(body_.body.size()));
    curl_easy_setopt(x->easy, CURLOPT_HTTPHEADER, headers_);
    return x;
  }

  // Loop thread: adds one call's transfer to the multi handle.
  void Begin(Pending p) {
    Exchange* x;
    if (idle_.empty()) {
      x = NewExchange();
    } else {
      x = idle_.back();
      idle_.pop_back();
    }
    x->body.clear();
    x->header_length = -1;
    x->error[0] = '\0';
    x->done = std::move(p.done);
    curl_easy_setopt(x->easy, CURLOPT_URL, urls_[p.lane].c_str());
    long timeout_ms = 0;  // none
    if (p.deadline != absl::InfiniteDuration()) {
      timeout_ms = std::max(1L, static_cast<long>(absl::ToInt64Milliseconds(p.deadline)));
    }
    curl_easy_setopt(x->easy, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_multi_add_handle(multi_, x->easy);
    busy_.insert(x);
  }

  // Loop thread: reports one finished transfer and keeps its handle.
  void Finish(CURL* easy, CURLcode code) {
    Exchange* x = nullptr;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, &x);
    curl_multi_remove_handle(multi_, easy);
    busy_.erase(x);
    const char* url = nullptr;
    curl_easy_getinfo(easy, CURLINFO_EFFECTIVE_URL, &url);
    CallResult r = ResultOf(easy, code, *x, absl::StrCat("POST ", url ? url : ""));
    CallDone done = std::move(x->done);
    idle_.push_back(x);
    done(std::move(r));
  }

  void Loop() {
    for (;;) {
      std::deque<Pending> batch;
      bool stop;
      {
        absl::MutexLock l(&mu_);
        batch.swap(pending_);
        stop = stop_;
      }
      if (stop) break;
      for (Pending& p : batch) Begin(std::move(p));
      int still = 0;
      curl_multi_perform(multi_, &still);
      int left = 0;
      while (CURLMsg* m = curl_multi_info_read(multi_, &left)) {
        if (m->msg == CURLMSG_DONE) Finish(m->easy_handle, m->data.result);
      }
      curl_multi_poll(multi_, nullptr, 0, 100, nullptr);
    }
    CancelInFlight();
  }

  // Loop thread, on destruction: ends every transfer still running.
  void CancelInFlight() {
    for (Exchange* x : busy_) {
      curl_multi_remove_handle(multi_, x->easy);
      CallDone done = std::move(x->done);
      idle_.push_back(x);
      done(CallResult{grpc::StatusCode::CANCELLED, "transport closed"});
    }
    busy_.clear();
  }

  const HttpOptions options_;
  const std::vector<std::string> urls_;
  const HttpInferBody body_;
  const int64_t rows_;
  CURLM* multi_ = nullptr;
  curl_slist* headers_ = nullptr;
  std::vector<Exchange*> idle_;  // loop thread only (and the destructor after join)
  std::set<Exchange*> busy_;     // loop thread only: transfers running
  absl::Mutex mu_;
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace

absl::StatusOr<std::vector<std::string>> HttpBaseUrls(const HttpOptions& options) {
  if (options.model_name.empty()) {
    return absl::InvalidArgumentError(
        "--protocol=http needs --model_name: the REST path names the model "
        "(/v2/models/{name}/infer)");
  }
  if (options.targets.empty()) return absl::InvalidArgumentError("no --target given");
  const bool tls = !options.tls_ca.empty();
  std::vector<std::string> urls;
  for (const std::string& t : options.targets) {
    if (absl::StartsWith(t, "unix:")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--target='", t, "': --protocol=http takes host:port or http(s)://host:port"));
    }
    if (absl::StartsWith(t, "http://") || absl::StartsWith(t, "https://")) {
      urls.push_back(std::string(absl::StripSuffix(t, "/")));
    } else {
      urls.push_back(absl::StrCat(tls ? "https://" : "http://", t));
    }
  }
  return urls;
}

absl::StatusOr<inference::ModelMetadataResponse> FetchHttpMetadata(
    const HttpOptions& options) {
  auto bases = HttpBaseUrls(options);
  if (!bases.ok()) return bases.status();
  InitCurlOnce();
  const std::string url = absl::StrCat(bases->front(), "/v2/models/", options.model_name);
  Exchange x;
  x.easy = curl_easy_init();
  SetCommon(x.easy, &x, options);
  curl_easy_setopt(x.easy, CURLOPT_URL, url.c_str());
  curl_easy_setopt(x.easy, CURLOPT_TIMEOUT_MS, 10000L);
  const CallResult r = ResultOf(x.easy, curl_easy_perform(x.easy), x, "GET " + url);
  curl_easy_cleanup(x.easy);
  if (r.code != grpc::StatusCode::OK) {
    // libcurl's failures name the URL already; an HTTP status does not.
    std::string message = absl::StrContains(r.message, url)
                              ? r.message
                              : absl::StrCat("GET ", url, ": ", r.message);
    return absl::Status(static_cast<absl::StatusCode>(r.code), message);
  }
  return ParseModelMetadata(x.body);
}

absl::StatusOr<std::unique_ptr<CallTransport>> NewHttpTransport(
    const HttpOptions& options, const inference::ModelInferRequest& request) {
  auto bases = HttpBaseUrls(options);
  if (!bases.ok()) return bases.status();
  auto body = EncodeInferBody(request, options.format);
  if (!body.ok()) return body.status();
  InitCurlOnce();
  std::vector<std::string> urls;
  for (const std::string& b : *bases) {
    urls.push_back(absl::StrCat(b, "/v2/models/", options.model_name, "/infer"));
  }
  const int64_t rows = request.inputs_size() > 0 && request.inputs(0).shape_size() > 0
                           ? request.inputs(0).shape(0)
                           : 1;
  return std::unique_ptr<CallTransport>(
      new HttpTransport(options, std::move(urls), *std::move(body), rows));
}

}  // namespace metalserve::client
