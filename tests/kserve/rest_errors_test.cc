// The REST API's refusals: the gRPC path's bad-input battery repeated over
// HTTP (same message, the HTTP status of the gRPC code), bodies refused
// before they are read, slow clients, a full queue, model errors, and that
// no polling thread waits on a batch. Fake runner; torch-free.
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "absl/synchronization/mutex.h"
#include "server/service/access_log.h"
#include "server/service/rest_server.h"
#include "server/service/status_util.h"
#include "tests/kserve/rest_fixture.h"

namespace metalserve {
namespace {

using ::metalserve::testing::FloatBytes;
using ::metalserve::testing::HttpConnection;
using ::metalserve::testing::HttpResponse;
using ::metalserve::testing::JsonInput;
using ::metalserve::testing::kInfer;
using ::metalserve::testing::RawRequest;
using ::metalserve::testing::RestTest;
using ::testing::HasSubstr;
using Json = nlohmann::json;

// One bad request in both forms.
struct Case {
  std::string what;
  inference::ModelInferRequest grpc;
  Json json;
  std::string path = kInfer;
};

inference::ModelInferRequest GrpcRequest(int64_t rows, const std::string& datatype = "FP32") {
  inference::ModelInferRequest r;
  r.set_model_name("fake");
  auto* t = r.add_inputs();
  t->set_name("input");
  t->set_datatype(datatype);
  t->add_shape(rows);
  t->add_shape(4);
  r.add_raw_input_contents(FloatBytes(std::vector<float>(rows * 4, 1.0f)));
  return r;
}

std::vector<Case> BadCases() {
  std::vector<Case> c;
  c.push_back({"unknown datatype", GrpcRequest(1, "FP99"), JsonInput(1, {1, 1, 1, 1}, "FP99")});
  c.push_back({"bytes", GrpcRequest(1, "BYTES"), JsonInput(1, {"a", "b", "c", "d"}, "BYTES")});
  {
    auto g = GrpcRequest(1, "INT64");
    g.mutable_raw_input_contents(0)->resize(32);
    c.push_back({"wrong datatype", g, JsonInput(1, {1, 1, 1, 1}, "INT64")});
  }
  {
    auto g = GrpcRequest(1);
    g.mutable_inputs(0)->set_name("image");
    Json j = JsonInput(1, {1, 1, 1, 1});
    j["inputs"][0]["name"] = "image";
    c.push_back({"unknown input", g, j});
  }
  {
    auto g = GrpcRequest(1);
    g.mutable_inputs(0)->set_shape(1, 5);
    g.mutable_raw_input_contents(0)->resize(20);
    Json j = JsonInput(1, {1, 1, 1, 1, 1});
    j["inputs"][0]["shape"] = {1, 5};
    c.push_back({"wrong dimension", g, j});
  }
  // Above max_request_rows (max_queue_size, 1024); 9 rows would be split.
  c.push_back({"too many rows", GrpcRequest(1025),
               JsonInput(1025, std::vector<float>(1025 * 4, 1.0f))});
  {
    auto g = GrpcRequest(1);
    g.add_outputs()->set_name("nope");
    Json j = JsonInput(1, {1, 1, 1, 1});
    j["outputs"] = {{{"name", "nope"}}};
    c.push_back({"unknown output", g, j});
  }
  {
    auto g = GrpcRequest(1);
    g.set_model_version("7");
    c.push_back({"other version", g, JsonInput(1, {1, 1, 1, 1}),
                 "/v2/models/fake/versions/7/infer"});
  }
  {
    auto g = GrpcRequest(1);
    g.mutable_raw_input_contents(0)->assign(FloatBytes({-777.0f, 0, 0, 0}));
    c.push_back({"model error", g, JsonInput(1, {-777.0, 0, 0, 0})});
  }
  return c;
}

TEST_F(RestTest, BadInputBatteryMatchesTheGrpcPath) {
  auto channel = grpc::CreateChannel(ServerTarget(), grpc::InsecureChannelCredentials());
  auto stub = inference::GRPCInferenceService::NewStub(channel);
  for (const Case& c : BadCases()) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    inference::ModelInferResponse resp;
    const grpc::Status g = stub->ModelInfer(&ctx, c.grpc, &resp);
    ASSERT_FALSE(g.ok()) << c.what;
    const HttpResponse h = Post(c.path, c.json.dump());
    EXPECT_EQ(h.status, HttpStatusOf(FromGrpcCode(g.error_code())))
        << c.what << ": " << g.error_message() << " / " << h.body;
    EXPECT_EQ(Error(h), g.error_message()) << c.what;
  }
}

TEST_F(RestTest, StatusesFollowTheGrpcCodes) {
  EXPECT_EQ(Post(kInfer, JsonInput(1, {1, 1, 1, 1}, "FP99").dump()).status, 400);
  EXPECT_EQ(Post("/v2/models/other/infer", JsonInput(1, {1, 1, 1, 1}).dump()).status, 404);
  EXPECT_EQ(Post(kInfer, JsonInput(1, {-777.0, 0, 0, 0}).dump()).status, 500);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kDeadlineExceeded), 504);
}

TEST_F(RestTest, JsonSyntaxAndShapeErrorsNameTheField) {
  HttpResponse r = Post(kInfer, "{\"inputs\": [");
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(Error(r), HasSubstr("not valid JSON"));
  r = Post(kInfer, JsonInput(1, {1, 2, 3}).dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(Error(r), HasSubstr("inputs[0] ('input').data has 3 values; shape [1,4] needs 4"));
  r = Post(kInfer, JsonInput(1, {1, "x", 3, 4}).dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(Error(r), HasSubstr("inputs[0] ('input').data[1] = \"x\" is not a number"));
  r = Post(kInfer, JsonInput(1, {1, 2, 3, 4}).dump(), "Inference-Header-Content-Length: 999\r\n");
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(Error(r), HasSubstr("Inference-Header-Content-Length = 999 is beyond"));
}

TEST_F(RestTest, BodyOverTheLimitIsRefusedBeforeItIsSent) {
  server_.reset();
  ServerOptions so = testing::LoopbackServerOptions();
  so.max_message_bytes = 1000;
  Start(so);
  HttpConnection c(port_);
  // Only the headers: the answer must come without the body.
  ASSERT_TRUE(c.Send(absl::StrCat("POST ", kInfer, " HTTP/1.1\r\nHost: x\r\n",
                                  "Content-Length: 5000\r\n\r\n")));
  HttpResponse r = c.Read();
  EXPECT_EQ(r.status, 413);
  EXPECT_THAT(Error(r), HasSubstr("5000 bytes, more than the limit of 1000"));
}

TEST_F(RestTest, BodiesBeyondTheMemoryQuotaAreRefused503BeforeTheyAreRead) {
  server_.reset();
  ServerOptions so = testing::LoopbackServerOptions();
  so.max_message_bytes = 2000;
  so.memory_quota_bytes = 3000;
  Start(so);
  HttpConnection held(port_);  // announces 2000 bytes, sends 10 of them
  ASSERT_TRUE(held.Send(absl::StrCat("POST ", kInfer, " HTTP/1.1\r\nHost: x\r\n",
                                     "Content-Length: 2000\r\n\r\n0123456789")));
  // The held body is accounted once its headers are handled; poll for it.
  HttpResponse r;
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  do {
    HttpConnection second(port_);
    second.Send(absl::StrCat("POST ", kInfer, " HTTP/1.1\r\nHost: x\r\n",
                             "Content-Length: 1500\r\n\r\n"));
    r = second.Read();
  } while (r.status != 503 && absl::Now() < give_up);
  EXPECT_EQ(r.status, 503);
  EXPECT_THAT(Error(r), HasSubstr("more would pass its limit of 3000"));
  // Once the held request ends, its bytes are free again.
  ASSERT_TRUE(held.Send(std::string(1990, ' ')));
  EXPECT_EQ(held.Read().status, 400);  // not JSON, but received
  EXPECT_EQ(Post(kInfer, JsonInput(1, {1, 2, 3, 4}).dump()).status, 200);
}

TEST_F(RestTest, ChunkedBodiesAreRefused) {
  HttpConnection c(port_);
  ASSERT_TRUE(c.Send(absl::StrCat("POST ", kInfer, " HTTP/1.1\r\nHost: x\r\n",
                                  "Transfer-Encoding: chunked\r\n\r\n4\r\n{}{}\r\n0\r\n\r\n")));
  HttpResponse r = c.Read();
  EXPECT_EQ(r.status, 411);
  EXPECT_THAT(Error(r), HasSubstr("chunked"));
}

TEST_F(RestTest, SlowClientIsClosedAtTheReadTimeoutWhileOthersAreServed) {
  server_.reset();
  ServerOptions so = testing::LoopbackServerOptions();
  so.http.read_timeout = absl::Seconds(1);
  Start(so);
  HttpConnection slow(port_, absl::Seconds(20));
  ASSERT_TRUE(slow.Send(absl::StrCat("POST ", kInfer, " HTTP/1.1\r\nHost: x\r\n",
                                     "Content-Length: 100\r\n\r\n{\"inp")));
  // The one polling thread still serves others while the body is missing.
  HttpResponse r = Post(kInfer, JsonInput(1, {1, 2, 3, 4}).dump());
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(slow.AwaitClosed());  // within 20 s; the timeout is 1 s
}

TEST_F(RestTest, InferWaitingForItsBatchHoldsNoPollingThread) {
  runner_.CloseGate();
  std::vector<std::thread> waiting;
  std::vector<int> statuses(3, 0);
  for (int i = 0; i < 3; ++i) {  // three infers, one polling thread
    waiting.emplace_back([this, i, &statuses] {
      statuses[i] = Post(kInfer, JsonInput(1, {1, 2, 3, 4}).dump()).status;
    });
  }
  // All three in the batcher (at the closed gate or queued behind it).
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  // The runner's rows first, then the depth gauge: a request leaves the
  // gauge before its batch reaches the runner, so one moving between the two
  // reads is missed for a moment (the loop reads again), never counted twice
  // (gauge first, it was: 6 in a clean-clone run).
  auto admitted = [this] {
    int64_t rows = 0;
    for (int64_t r : runner_.batch_rows()) rows += r;
    return rows + QueueDepth();
  };
  int64_t seen = 0;
  while ((seen = admitted()) < 3 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(seen, 3);
  // Held batch and queued requests: the polling thread answers at once.
  EXPECT_EQ(Get("/v2/health/live").status, 200);
  runner_.OpenGate();
  for (std::thread& t : waiting) t.join();
  EXPECT_EQ(statuses, std::vector<int>({200, 200, 200}));
}

// Triton's parameters.timeout (microseconds) is the request's deadline, as
// gRPC's is: a request whose deadline passed while it waited behind a held
// batch is answered 504 when the executor next polls, and never runs.
TEST_F(RestTest, TimeoutParameterPassedInQueueIsAnswered504AndNeverRuns) {
  runner_.CloseGate();
  int held_status = 0;
  std::thread held([this, &held_status] {
    held_status = Post(kInfer, JsonInput(1, {1, 2, 3, 4}).dump()).status;
  });
  runner_.AwaitRunning(1);
  Json late = JsonInput(1, {5, 6, 7, 8});
  late["parameters"] = {{"timeout", 50000}};
  const absl::Time sent = absl::Now();
  HttpResponse r;
  std::thread waiting([&] { r = Post(kInfer, late.dump()); });
  EXPECT_TRUE(AwaitQueueDepth(1));
  // Let the 50 ms pass before freeing the executor, whose next poll must
  // then expire the request (as ServiceTest's gRPC twin does).
  absl::SleepFor(sent + absl::Milliseconds(60) - absl::Now());
  runner_.OpenGate();
  waiting.join();
  held.join();
  EXPECT_EQ(r.status, 504);
  EXPECT_THAT(Error(r), HasSubstr("deadline passed"));
  EXPECT_EQ(held_status, 200);
  EXPECT_EQ(runner_.batch_rows(), std::vector<int64_t>({1}));
}

TEST_F(RestTest, TimeoutAndPriorityParametersAreCheckedLikeGrpcs) {
  Json j = JsonInput(1, {1, 2, 3, 4});
  j["parameters"] = {{"timeout", -5}};
  HttpResponse r = Post(kInfer, j.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(Error(r), HasSubstr("parameters.timeout must be a non-negative integer"));
  j["parameters"] = {{"priority", 3}};
  r = Post(kInfer, j.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(Error(r), HasSubstr("priority 3 is out of range [1, 1]"));
  j["parameters"] = {{"timeout", 30000000}, {"priority", 1}, {"note", "x"}};
  EXPECT_EQ(Post(kInfer, j.dump()).status, 200);
  j["parameters"] = {{"timeout", {1}}};
  r = Post(kInfer, j.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(Error(r), HasSubstr("parameters.timeout must be a number, string or boolean"));
}

TEST_F(RestTest, FullQueueIsRefused503) {
  server_.reset();
  ServerOptions so = testing::LoopbackServerOptions();
  so.batching.max_queue_size = 1;
  so.batching.max_batch_size = 1;
  Start(so);
  runner_.CloseGate();
  std::thread running([this] { Post(kInfer, JsonInput(1, {1, 2, 3, 4}).dump()); });
  runner_.AwaitRunning(1);
  std::thread queued([this] { Post(kInfer, JsonInput(1, {1, 2, 3, 4}).dump()); });
  EXPECT_TRUE(AwaitQueueDepth(1));
  HttpResponse r = Post(kInfer, JsonInput(1, {1, 2, 3, 4}).dump());
  EXPECT_EQ(r.status, 503);
  EXPECT_THAT(Error(r), HasSubstr("queue is full"));
  runner_.OpenGate();
  running.join();
  queued.join();
}

TEST_F(RestTest, ShutdownAnswersInfersHandedToTheBatcher) {
  runner_.CloseGate();
  int status = 0;
  std::thread t([this, &status] { status = Post(kInfer, JsonInput(1, {1, 2, 3, 4}).dump()).status; });
  runner_.AwaitRunning(1);
  std::thread stop([this] { server_->Shutdown(absl::Seconds(5)); });
  runner_.OpenGate();
  stop.join();
  t.join();
  EXPECT_EQ(status, 200);
}

TEST_F(RestTest, MetricsCountRestMethodsApartFromGrpc) {
  ASSERT_EQ(Get("/v2/health/ready").status, 200);
  ASSERT_EQ(Post(kInfer, JsonInput(1, {1, 2, 3, 4}).dump()).status, 200);
  ASSERT_EQ(Post(kInfer, JsonInput(1, {1, 2, 3}).dump()).status, 400);
  EXPECT_EQ(ServerCount("http_ModelInfer", "OK"), 1);
  EXPECT_EQ(ServerCount("http_ModelInfer", "INVALID_ARGUMENT"), 1);
  EXPECT_EQ(ServerCount("http_ServerReady", "OK"), 1);
  EXPECT_LE(ServerCount("ModelInfer", "OK"), 0);
}

TEST_F(RestTest, AccessLogRecordsRestInfersWithThePeer) {
  server_.reset();
  std::string written;
  absl::Mutex mu;
  AccessLogOptions ao;
  ao.sink = [&](absl::string_view batch) {  // whole lines, newline-terminated
    absl::MutexLock l(&mu);
    written.append(batch.data(), batch.size());
  };
  auto log = AccessLog::Create(std::move(ao));
  ASSERT_TRUE(log.ok()) << log.status();
  ServerOptions so = testing::LoopbackServerOptions();
  so.access_log = log->get();
  Start(so);
  ASSERT_EQ(Post(kInfer, JsonInput(2, std::vector<float>(8, 1.0f)).dump()).status, 200);
  ASSERT_EQ(Post("/v2/models/other/infer", JsonInput(1, {1, 2, 3, 4}).dump()).status, 404);
  server_.reset();
  log->reset();  // flushes and joins the writer
  std::vector<std::string> lines = absl::StrSplit(written, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u) << written;
  EXPECT_THAT(lines[0], HasSubstr("peer=ipv4:127.0.0.1:"));
  EXPECT_THAT(lines[0], HasSubstr("method=http_ModelInfer model=fake version=1 rows=2 code=OK"));
  EXPECT_THAT(lines[1], HasSubstr("rows=0 code=NOT_FOUND"));
}

}  // namespace
}  // namespace metalserve
