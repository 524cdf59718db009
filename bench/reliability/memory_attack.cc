// memory_attack: the hostile-client scenarios of issue 17 against a running
// metalserve, for bench/reliability/memory_attack.py (which starts the
// server and samples its RSS). Prints one line per scenario with the
// status codes the calls got.
//
//   bomb        one call whose body is --bytes zeros (an unknown protobuf
//               field), sent gzip-compressed: about --bytes/1000 on the wire
//   parallel    --calls concurrent uncompressed calls of --bytes each
//   gzip_predict  --calls valid Predict calls at once, gzip-compressed
//   never_read  --calls valid Predict calls whose answers are not read
//               for --hold_s (HTTP/2 BDP probing off, so the client's
//               receive window stays at 64 KiB); then read, so that calls
//               the server cut off meanwhile show its status
//
// Run:
//   build/bench/reliability/memory_attack --target=127.0.0.1:8500 --scenario=bomb --bytes=1073741824
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "metalserve/v1/inference.grpc.pb.h"

ABSL_FLAG(std::string, target, "127.0.0.1:8500", "server host:port");
ABSL_FLAG(std::string, scenario, "bomb", "bomb, parallel, never_read or gzip_predict");
ABSL_FLAG(int64_t, bytes, 1 << 30, "body bytes (bomb, parallel)");
ABSL_FLAG(int, calls, 4, "concurrent calls (parallel, never_read)");
ABSL_FLAG(double, hold_s, 5, "seconds never_read holds its calls open");
ABSL_FLAG(double, deadline_s, 60, "deadline of each call, seconds");

namespace {

constexpr char kPredict[] = "/metalserve.v1.Inference/Predict";

// A protobuf body: field 15, length-delimited, `n` zero bytes. Any message
// parses it (an unknown field); the server refuses it by size or content.
std::string ZeroBody(int64_t n) {
  std::string body = "\x7a";
  for (uint64_t v = static_cast<uint64_t>(n); ; v >>= 7) {
    body.push_back(static_cast<char>((v & 0x7f) | (v > 0x7f ? 0x80 : 0)));
    if (v <= 0x7f) break;
  }
  body.append(static_cast<size_t>(n), '\0');
  return body;
}

// Sends `calls` copies of `body` at once; returns the count of each outcome.
std::map<std::string, int> SendAll(const std::shared_ptr<grpc::Channel>& ch,
                                   const std::string& body, int calls, bool gzip) {
  grpc::GenericStub stub(ch);
  grpc::Slice slice(body);
  absl::Mutex mu;
  std::map<std::string, int> outcomes;
  int done = 0;
  std::vector<std::unique_ptr<grpc::ClientContext>> ctxs;
  std::vector<grpc::ByteBuffer> reqs(calls), resps(calls);
  for (int i = 0; i < calls; ++i) {
    ctxs.push_back(std::make_unique<grpc::ClientContext>());
    ctxs.back()->set_deadline(absl::ToChronoTime(
        absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_deadline_s))));
    if (gzip) ctxs.back()->set_compression_algorithm(GRPC_COMPRESS_GZIP);
    reqs[i] = grpc::ByteBuffer(&slice, 1);
    stub.UnaryCall(ctxs.back().get(), kPredict, grpc::StubOptions(), &reqs[i], &resps[i],
                   [&](grpc::Status s) {
                     absl::MutexLock l(&mu);
                     ++outcomes[absl::StrCat(s.error_code(), " ",
                                             s.error_message().substr(0, 80))];
                     ++done;
                   });
  }
  absl::MutexLock l(&mu);
  auto all = [&] { return done == calls; };
  mu.Await(absl::Condition(&all));
  return outcomes;
}

// A valid one-row request of zeros for the served model's first input.
metalserve::v1::PredictRequest ValidRequest(const std::shared_ptr<grpc::Channel>& ch) {
  auto stub = metalserve::v1::Inference::NewStub(ch);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  metalserve::v1::GetModelMetadataRequest mreq;
  metalserve::v1::GetModelMetadataResponse meta;
  metalserve::v1::PredictRequest req;
  if (!stub->GetModelMetadata(&ctx, mreq, &meta).ok() || meta.inputs_size() == 0) return req;
  const auto& spec = meta.inputs(0);
  auto* t = req.add_inputs();
  t->set_name(spec.name());
  t->set_dtype(spec.dtype());
  int64_t elems = 1;
  for (int d = 0; d < spec.shape_size(); ++d) {
    const int64_t dim = d == 0 || spec.shape(d) < 0 ? 1 : spec.shape(d);
    t->add_shape(dim);
    elems *= dim;
  }
  t->set_data(std::string(static_cast<size_t>(elems * 4), '\0'));  // 4-byte dtypes
  return req;
}

// Starts `calls` Predict calls and asks for none of their answers for
// `hold_s`; then reads them all and returns the count of each outcome (a
// call the server cut off meanwhile ends with the server's status).
std::map<std::string, int> NeverRead(const std::shared_ptr<grpc::Channel>& ch, int calls,
                                     double hold_s) {
  auto stub = metalserve::v1::Inference::NewStub(ch);
  const metalserve::v1::PredictRequest req = ValidRequest(ch);
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<grpc::ClientContext>> ctxs;
  std::vector<std::unique_ptr<grpc::ClientAsyncResponseReader<
      metalserve::v1::PredictResponse>>> readers;
  for (int i = 0; i < calls; ++i) {
    ctxs.push_back(std::make_unique<grpc::ClientContext>());
    ctxs.back()->set_deadline(absl::ToChronoTime(
        absl::Now() + absl::Seconds(hold_s + absl::GetFlag(FLAGS_deadline_s))));
    readers.push_back(stub->PrepareAsyncPredict(ctxs.back().get(), req, &cq));
    readers.back()->StartCall();
  }
  std::printf("never_read: %d calls of %zu bytes started, holding %.1f s\n", calls,
              req.ByteSizeLong(), hold_s);
  std::fflush(stdout);
  absl::SleepFor(absl::Seconds(hold_s));
  std::vector<metalserve::v1::PredictResponse> resps(calls);
  std::vector<grpc::Status> statuses(calls);
  for (int i = 0; i < calls; ++i) {
    readers[i]->Finish(&resps[i], &statuses[i], reinterpret_cast<void*>(intptr_t{i}));
  }
  std::map<std::string, int> outcomes;
  void* tag;
  bool ok;
  for (int done = 0; done < calls && cq.Next(&tag, &ok); ++done) {
    const grpc::Status& s = statuses[reinterpret_cast<intptr_t>(tag)];
    ++outcomes[absl::StrCat(s.error_code(), " ", s.error_message().substr(0, 80))];
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return outcomes;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);
  args.SetMaxReceiveMessageSize(-1);
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  auto ch = grpc::CreateCustomChannel(absl::GetFlag(FLAGS_target),
                                      grpc::InsecureChannelCredentials(), args);
  const std::string scenario = absl::GetFlag(FLAGS_scenario);
  const absl::Time start = absl::Now();
  if (scenario != "bomb" && scenario != "parallel" && scenario != "never_read" &&
      scenario != "gzip_predict") {
    std::fprintf(stderr, "--scenario: bomb, parallel, never_read or gzip_predict, not '%s'\n",
                 scenario.c_str());
    return 2;
  }
  const bool bomb = scenario == "bomb";
  std::map<std::string, int> outcomes;
  if (scenario == "never_read") {
    outcomes = NeverRead(ch, absl::GetFlag(FLAGS_calls), absl::GetFlag(FLAGS_hold_s));
  } else if (scenario == "gzip_predict") {
    outcomes = SendAll(ch, ValidRequest(ch).SerializeAsString(), absl::GetFlag(FLAGS_calls),
                       /*gzip=*/true);
  } else {
    outcomes = SendAll(ch, ZeroBody(absl::GetFlag(FLAGS_bytes)),
                       bomb ? 1 : absl::GetFlag(FLAGS_calls), bomb);
  }
  for (const auto& [what, n] : outcomes) {
    std::printf("%s: %d x code %s\n", scenario.c_str(), n, what.c_str());
  }
  std::printf("%s: done in %.2f s\n", scenario.c_str(),
              absl::ToDoubleSeconds(absl::Now() - start));
  return 0;
}
