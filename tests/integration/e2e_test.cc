// End to end: the real runtime with models exported by models/export.py,
// behind the real server, over real gRPC on 127.0.0.1.
#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "metalserve/v1/inference.grpc.pb.h"
#include "server/metrics/metrics.h"
#include "server/model_config/model_config.h"
#include "server/runtime/torch_runner.h"
#include "server/service/server.h"
#include "tests/integration/torch_reference.h"
#include "tests/testing/fake_runner_server.h"
#include "tests/testing/metric_sample.h"

namespace metalserve {
namespace {

using metalserve::v1::PredictRequest;
using metalserve::v1::PredictResponse;

// Outputs may differ from a direct forward only by float rounding of a
// different (but verified) graph: |served - direct| <= 1e-4 * max|direct|.
constexpr double kRelTol = 1e-4;

std::string Model(const std::string& name) {
  return absl::StrCat(METALSERVE_MODELS_DIR, "/", name, ".pt");
}

class E2eTest : public ::testing::Test {
 protected:
  void Start(const std::string& model, BatcherOptions batching) {
    RuntimeOptions ro;
    ro.model_path = Model(model);
    ro.signature_codec = ModelConfigSignatureCodec();
    ro.device = "cpu";
    ro.threads = 2;
    ro.warmup_batch_sizes = {1, batching.max_batch_size};
    auto runner = CreateTorchRunner(ro);
    ASSERT_TRUE(runner.ok()) << runner.status();
    runner_ = *std::move(runner);
    metrics_ = testing::MetricsWithoutListener();
    ServerOptions so = testing::LoopbackServerOptions();
    so.batching = batching;
    auto server = InferenceServer::Start(so, runner_.get(), metrics_.get());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = metalserve::v1::Inference::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", server_->port()), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_) server_->Shutdown(absl::Seconds(10));
  }

  static PredictRequest Request(const std::vector<float>& x, const std::vector<int64_t>& shape) {
    PredictRequest req;
    auto* t = req.add_inputs();
    t->set_name("input");
    t->set_dtype(metalserve::v1::DATA_TYPE_FLOAT32);
    for (int64_t d : shape) t->add_shape(d);
    t->set_data(std::string(reinterpret_cast<const char*>(x.data()), x.size() * 4));
    return req;
  }

  static std::vector<float> Random(size_t n, int seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist;
    std::vector<float> v(n);
    for (float& f : v) f = dist(rng);
    return v;
  }

  static void ExpectClose(const std::vector<float>& served, const std::vector<float>& direct) {
    ASSERT_EQ(served.size(), direct.size());
    double scale = 0;
    for (float f : direct) scale = std::max(scale, std::fabs(static_cast<double>(f)));
    for (size_t i = 0; i < served.size(); ++i) {
      ASSERT_LE(std::fabs(served[i] - direct[i]), kRelTol * scale + 1e-6) << "element " << i;
    }
  }

  // The server's own count of Predict calls answered with `code`.
  double ServerCount(absl::string_view code) {
    return testing::Sample(metrics_->Scrape(), testing::RequestsSeries("Predict", code))
        .value_or(-1);
  }
  // Waits (at most 30 s) until `rows` rows are queued; false if never.
  bool AwaitQueueDepth(int rows) {
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (absl::Now() < give_up) {
      const auto depth = testing::Sample(metrics_->Scrape(), "metalserve_queue_depth_rows");
      if (depth.value_or(-1) >= rows) return true;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return false;
  }

  std::unique_ptr<Runner> runner_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<InferenceServer> server_;
  std::unique_ptr<metalserve::v1::Inference::Stub> stub_;
};

TEST_F(E2eTest, ServedOutputEqualsDirectForwardAcrossConcurrentBatchedRequests) {
  BatcherOptions b;
  b.max_batch_size = 8;
  b.allowed_batch_sizes = {1, 2, 4, 8};
  b.max_queue_delay = absl::Milliseconds(20);
  Start("tiny_cnn", b);
  constexpr int kRequests = 6;
  std::vector<std::vector<float>> inputs;
  std::vector<PredictResponse> resps(kRequests);
  std::vector<grpc::Status> st(kRequests);
  for (int i = 0; i < kRequests; ++i) inputs.push_back(Random(3 * 8 * 8, i));
  std::vector<std::thread> threads;
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back([&, i] {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
      st[i] = stub_->Predict(&ctx, Request(inputs[i], {1, 3, 8, 8}), &resps[i]);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(st[i].ok()) << st[i].error_message();
    ASSERT_EQ(resps[i].outputs_size(), 1);
    EXPECT_THAT(resps[i].outputs(0).shape(), ::testing::ElementsAre(1, 10));
    const std::string& bytes = resps[i].outputs(0).data();
    std::vector<float> served(bytes.size() / 4);
    std::memcpy(served.data(), bytes.data(), bytes.size());
    ExpectClose(served, testing::ReferenceForward(Model("tiny_cnn"), inputs[i], {1, 3, 8, 8}));
    EXPECT_EQ(resps[i].device(), "cpu");
    EXPECT_EQ(resps[i].model_name(), "tiny_cnn");
  }
}

TEST_F(E2eTest, RequestOfThreeAndAHalfBatchesEqualsTheUnsplitForwardRowForRow) {
  BatcherOptions b;
  b.max_batch_size = 4;
  b.max_request_rows = 16;
  b.max_queue_delay = absl::Milliseconds(2);
  Start("tiny_cnn", b);
  const std::vector<float> x = Random(14 * 3 * 8 * 8, 7);
  PredictResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  const grpc::Status st = stub_->Predict(&ctx, Request(x, {14, 3, 8, 8}), &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(resp.outputs_size(), 1);
  EXPECT_THAT(resp.outputs(0).shape(), ::testing::ElementsAre(14, 10));
  std::vector<float> served(resp.outputs(0).data().size() / 4);
  std::memcpy(served.data(), resp.outputs(0).data().data(), served.size() * 4);
  ExpectClose(served, testing::ReferenceForward(Model("tiny_cnn"), x, {14, 3, 8, 8}));

  // Above max_request_rows: refused, naming the bound.
  const std::vector<float> y = Random(17 * 3 * 8 * 8, 8);
  grpc::ClientContext ctx2;
  const grpc::Status refused = stub_->Predict(&ctx2, Request(y, {17, 3, 8, 8}), &resp);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(), ::testing::HasSubstr("more than max_request_rows 16"));
}

TEST_F(E2eTest, DefaultClassifierReturnsLogitsOfShape1x1000) {
  BatcherOptions b;
  b.max_batch_size = 2;
  b.max_queue_delay = absl::Milliseconds(1);
  Start("resnet18", b);
  const std::vector<float> x = Random(3 * 224 * 224, 7);
  grpc::ClientContext ctx;
  PredictResponse resp;
  ASSERT_TRUE(stub_->Predict(&ctx, Request(x, {1, 3, 224, 224}), &resp).ok());
  EXPECT_THAT(resp.outputs(0).shape(), ::testing::ElementsAre(1, 1000));
  std::vector<float> served(1000);
  std::memcpy(served.data(), resp.outputs(0).data().data(), 4000);
  ExpectClose(served, testing::ReferenceForward(Model("resnet18"), x, {1, 3, 224, 224}));
}

// A request that makes the model raise, in one full batch with three batch
// mates: it alone fails with INTERNAL; the mates get their own rows, doubled.
TEST_F(E2eTest, ModelThatRaisesFailsOnlyThatRequestAndItsBatchMatesSucceed) {
  BatcherOptions b;
  b.max_batch_size = 4;
  b.max_queue_delay = absl::Seconds(5);  // the four close one full batch
  Start("poison", b);
  const std::vector<float> firsts = {1, -777, 3, 4};
  std::vector<grpc::Status> st(4);
  std::vector<PredictResponse> resps(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
      const std::vector<float> x = {firsts[i], 1, 2, 3};
      st[i] = stub_->Predict(&ctx, Request(x, {1, 4}), &resps[i]);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(st[1].error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_THAT(st[1].error_message(), ::testing::HasSubstr("poison"));
  for (int i : {0, 2, 3}) {
    ASSERT_TRUE(st[i].ok()) << i << ": " << st[i].error_message();
    EXPECT_THAT(testing::Floats(resps[i].outputs(0).data()),
                ::testing::ElementsAre(2 * firsts[i], 2, 4, 6)) << i;
  }
  // The four really were batch mates: one batch closed full (the isolating
  // re-runs that follow are not counted as formed batches). The executor
  // counts a batch after it has answered its requests, so the count may
  // trail the answers by a moment: wait for it, bounded.
  const char* kFull = R"(metalserve_batches_total{reason="full"})";
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (testing::Sample(metrics_->Scrape(), kFull) != std::optional<double>(1.0) &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_THAT(testing::Sample(metrics_->Scrape(), kFull), ::testing::Optional(1.0));
  EXPECT_EQ(ServerCount("INTERNAL"), 1);
  EXPECT_EQ(ServerCount("OK"), 3);
}

}  // namespace
}  // namespace metalserve

namespace metalserve {
namespace {

// Batch invariance as a property of the whole server: a request's output is
// the same whatever batch it lands in and at whatever position. Run with the
// most aggressive optimization requested; verification at load must have
// dropped any level that breaks the property.
class BatchInvarianceTest : public E2eTest,
                            public ::testing::WithParamInterface<const char*> {};

TEST_P(BatchInvarianceTest, RowOutputDoesNotDependOnBatchOrPosition) {
  const std::string model = GetParam();
  RuntimeOptions ro;
  ro.model_path = Model(model);
  ro.signature_codec = ModelConfigSignatureCodec();
  ro.device = "cpu";
  ro.threads = 2;
  ro.optimize = "full";
  ro.warmup_batch_sizes = {1, 4};
  auto runner = CreateTorchRunner(ro);
  ASSERT_TRUE(runner.ok()) << runner.status();
  runner_ = *std::move(runner);
  LOG(INFO) << model << ": optimization " << runner_->info().optimization << " ("
            << runner_->info().optimization_reason << ")";
  metrics_ = testing::MetricsWithoutListener();
  ServerOptions so = testing::LoopbackServerOptions();
  so.batching.max_batch_size = 4;
  so.batching.allowed_batch_sizes = {1, 2, 4};
  so.batching.max_queue_delay = absl::Seconds(5);  // four requests close a full batch
  auto server = InferenceServer::Start(so, runner_.get(), metrics_.get());
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = *std::move(server);
  stub_ = metalserve::v1::Inference::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", server_->port()), grpc::InsecureChannelCredentials()));

  const size_t n = 3 * 224 * 224;
  std::vector<std::vector<float>> rows;
  for (int i = 0; i < 4; ++i) rows.push_back(Random(n, 100 + i));
  auto predict = [&](const std::vector<float>& x, int64_t batch_rows_expected) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    PredictResponse resp;
    grpc::Status st = stub_->Predict(&ctx, Request(x, {1, 3, 224, 224}), &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.batch_rows(), batch_rows_expected);
    std::vector<float> out(resp.outputs(0).data().size() / 4);
    std::memcpy(out.data(), resp.outputs(0).data().data(), out.size() * 4);
    return out;
  };
  // Alone: batches of one row, sent one after another.
  std::vector<std::vector<float>> alone;
  for (const auto& r : rows) alone.push_back(predict(r, 1));
  // Together: four concurrent requests form one full batch of four, in
  // arrival order; repeat with the order reversed to move every row. Each
  // request is sent once the one before it is queued, so the order is the
  // one intended.
  for (bool reversed : {false, true}) {
    std::vector<std::vector<float>> together(4);
    std::vector<std::thread> threads;
    bool ordered = true;
    for (int i = 0; i < 4; ++i) {
      const int idx = reversed ? 3 - i : i;
      threads.emplace_back([&, idx] { together[idx] = predict(rows[idx], 4); });
      if (i < 3) ordered = ordered && AwaitQueueDepth(i + 1);
    }
    for (auto& t : threads) t.join();
    ASSERT_TRUE(ordered) << "a request was not queued before the next was sent";
    for (int i = 0; i < 4; ++i) {
      SCOPED_TRACE(absl::StrCat(model, " row ", i, reversed ? " (reversed)" : ""));
      ExpectClose(together[i], alone[i]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, BatchInvarianceTest,
                         ::testing::Values("mobilenet_v3_small", "mobilenet_v2"));

}  // namespace
}  // namespace metalserve
