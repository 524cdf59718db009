// inference.GRPCInferenceService over real gRPC on 127.0.0.1, with a fake
// runner (output = 2 * input, float32 [-1, 4]).
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "metalserve/v1/inference.grpc.pb.h"
#include "server/metrics/metrics.h"
#include "server/service/server.h"
#include "tests/testing/fake_runner.h"
#include "tests/testing/fake_runner_server.h"
#include "tests/testing/metric_sample.h"

namespace metalserve {
namespace {

using inference::ModelInferRequest;
using inference::ModelInferResponse;
using ::metalserve::testing::FakeRunnerServerTest;
using ::metalserve::testing::Floats;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kW = FakeRunner::kWidth;

std::vector<float> Values(int64_t rows, float first) {
  std::vector<float> v(rows * kW);
  for (size_t i = 0; i < v.size(); ++i) v[i] = first + static_cast<float>(i);
  return v;
}

ModelInferRequest RawRequest(int64_t rows, float first) {
  ModelInferRequest req;
  req.set_model_name("fake");
  req.set_id("req-1");
  auto* t = req.add_inputs();
  t->set_name("input");
  t->set_datatype("FP32");
  t->add_shape(rows);
  t->add_shape(kW);
  const std::vector<float> v = Values(rows, first);
  req.add_raw_input_contents(
      std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
  return req;
}

ModelInferRequest TypedRequest(int64_t rows, float first) {
  ModelInferRequest req = RawRequest(rows, first);
  req.clear_raw_input_contents();
  for (float f : Values(rows, first)) {
    req.mutable_inputs(0)->mutable_contents()->add_fp32_contents(f);
  }
  return req;
}

class KServeTest : public FakeRunnerServerTest {
 protected:
  void SetUp() override {
    ServerOptions so = testing::LoopbackServerOptions();
    so.version = "9.8.7";
    const absl::Status started = StartFakeServer(so);
    ASSERT_TRUE(started.ok()) << started;
    channel_ = grpc::CreateChannel(ServerTarget(), grpc::InsecureChannelCredentials());
    stub_ = inference::GRPCInferenceService::NewStub(channel_);
  }

  std::unique_ptr<grpc::ClientContext> Ctx() {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    return ctx;
  }
  grpc::Status Infer(const ModelInferRequest& req, ModelInferResponse* resp) {
    return stub_->ModelInfer(Ctx().get(), req, resp);
  }
  bool ServerReady() {
    inference::ServerReadyResponse r;
    EXPECT_TRUE(stub_->ServerReady(Ctx().get(), {}, &r).ok());
    return r.ready();
  }
  bool ModelReady() {
    inference::ModelReadyRequest q;
    q.set_name("fake");
    inference::ModelReadyResponse r;
    EXPECT_TRUE(stub_->ModelReady(Ctx().get(), q, &r).ok());
    return r.ready();
  }
  inference::ModelStatistics Statistics() {
    inference::ModelStatisticsRequest q;
    q.set_name("fake");
    inference::ModelStatisticsResponse r;
    EXPECT_TRUE(stub_->ModelStatistics(Ctx().get(), q, &r).ok());
    EXPECT_EQ(r.model_stats_size(), 1);
    return r.model_stats_size() > 0 ? r.model_stats(0) : inference::ModelStatistics{};
  }

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
};

TEST_F(KServeTest, ServerIsLiveAndReadyOnceStarted) {
  inference::ServerLiveResponse live;
  ASSERT_TRUE(stub_->ServerLive(Ctx().get(), {}, &live).ok());
  EXPECT_TRUE(live.live());
  EXPECT_TRUE(ServerReady());
  EXPECT_TRUE(ModelReady());
}

TEST_F(KServeTest, ReadinessFollowsSetServingAndAgreesWithHealth) {
  auto health = grpc::health::v1::Health::NewStub(channel_);
  auto health_of = [&](const std::string& service) {
    grpc::health::v1::HealthCheckRequest q;
    q.set_service(service);
    grpc::health::v1::HealthCheckResponse r;
    EXPECT_TRUE(health->Check(Ctx().get(), q, &r).ok());
    return r.status();
  };
  using grpc::health::v1::HealthCheckResponse;
  EXPECT_EQ(health_of("inference.GRPCInferenceService"), HealthCheckResponse::SERVING);

  server_->SetServing(false);
  EXPECT_FALSE(ServerReady());
  EXPECT_FALSE(ModelReady());
  EXPECT_EQ(health_of(""), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(health_of("inference.GRPCInferenceService"), HealthCheckResponse::NOT_SERVING);
  inference::ServerLiveResponse live;
  ASSERT_TRUE(stub_->ServerLive(Ctx().get(), {}, &live).ok());
  EXPECT_TRUE(live.live());

  server_->SetServing(true);
  EXPECT_TRUE(ServerReady());
  EXPECT_TRUE(ModelReady());
  EXPECT_EQ(health_of(""), HealthCheckResponse::SERVING);
}

TEST_F(KServeTest, ModelReadyOfAnotherModelIsNotFound) {
  inference::ModelReadyRequest q;
  q.set_name("resnet");
  inference::ModelReadyResponse r;
  grpc::Status s = stub_->ModelReady(Ctx().get(), q, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("'resnet'"));
}

TEST_F(KServeTest, ServerMetadataListsExtensions) {
  inference::ServerMetadataResponse r;
  ASSERT_TRUE(stub_->ServerMetadata(Ctx().get(), {}, &r).ok());
  EXPECT_EQ(r.name(), "metalserve");
  EXPECT_EQ(r.version(), "9.8.7");
  EXPECT_THAT(r.extensions(),
              ElementsAre("model_configuration", "statistics", "model_repository"));
}

TEST_F(KServeTest, ModelMetadataDescribesTheSignature) {
  inference::ModelMetadataRequest q;
  q.set_name("fake");
  inference::ModelMetadataResponse r;
  ASSERT_TRUE(stub_->ModelMetadata(Ctx().get(), q, &r).ok());
  EXPECT_EQ(r.name(), "fake");
  EXPECT_THAT(r.versions(), ElementsAre("1"));
  EXPECT_EQ(r.platform(), "pytorch_libtorch");
  ASSERT_EQ(r.inputs_size(), 1);
  EXPECT_EQ(r.inputs(0).name(), "input");
  EXPECT_EQ(r.inputs(0).datatype(), "FP32");
  EXPECT_THAT(r.inputs(0).shape(), ElementsAre(-1, kW));
  ASSERT_EQ(r.outputs_size(), 1);
  EXPECT_EQ(r.outputs(0).name(), "output");

  q.set_version("2");
  grpc::Status s = stub_->ModelMetadata(Ctx().get(), q, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("version '2'"));
}

TEST_F(KServeTest, ModelConfigGivesMaxBatchSizeAndTensors) {
  inference::ModelConfigRequest q;
  q.set_name("fake");
  inference::ModelConfigResponse r;
  ASSERT_TRUE(stub_->ModelConfig(Ctx().get(), q, &r).ok());
  EXPECT_EQ(r.config().name(), "fake");
  EXPECT_EQ(r.config().platform(), "pytorch_libtorch");
  EXPECT_EQ(r.config().max_batch_size(), 8);
  ASSERT_EQ(r.config().input_size(), 1);
  EXPECT_EQ(r.config().input(0).data_type(), inference::TYPE_FP32);
  EXPECT_THAT(r.config().input(0).dims(), ElementsAre(kW));
  ASSERT_EQ(r.config().output_size(), 1);
  EXPECT_EQ(r.config().output(0).name(), "output");
}

TEST_F(KServeTest, ModelInferWithRawContentsAnswersNamedRawOutputs) {
  ModelInferResponse r;
  grpc::Status s = Infer(RawRequest(2, 1), &r);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(r.model_name(), "fake");
  EXPECT_EQ(r.model_version(), "1");
  EXPECT_EQ(r.id(), "req-1");
  ASSERT_EQ(r.outputs_size(), 1);
  EXPECT_EQ(r.outputs(0).name(), "output");
  EXPECT_EQ(r.outputs(0).datatype(), "FP32");
  EXPECT_THAT(r.outputs(0).shape(), ElementsAre(2, kW));
  ASSERT_EQ(r.raw_output_contents_size(), 1);
  EXPECT_THAT(Floats(r.raw_output_contents(0)),
              ElementsAre(2, 4, 6, 8, 10, 12, 14, 16));
  EXPECT_EQ(r.parameters().at("batch_rows").int64_param(), 2);
}

TEST_F(KServeTest, ModelInferOfMoreRowsThanABatchIsSplitAndReassembledInOrder) {
  // Batches hold 8 rows: 20 rows run as 8 + 8 + 4 and come back as one.
  ModelInferResponse r;
  grpc::Status s = Infer(RawRequest(20, 0), &r);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_THAT(r.outputs(0).shape(), ElementsAre(20, kW));
  const std::vector<float> out = Floats(r.raw_output_contents(0));
  ASSERT_EQ(out.size(), 20u * kW);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], 2.0f * i) << "value " << i;
  EXPECT_THAT(runner_.batch_rows(), ElementsAre(8, 8, 4));
}

TEST_F(KServeTest, TypedAndRawInputsGiveTheSameOutputs) {
  ModelInferResponse raw, typed;
  ASSERT_TRUE(Infer(RawRequest(3, -5.5f), &raw).ok());
  grpc::Status s = Infer(TypedRequest(3, -5.5f), &typed);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(typed.raw_output_contents_size(), 1);
  EXPECT_EQ(typed.raw_output_contents(0), raw.raw_output_contents(0));
  EXPECT_THAT(typed.outputs(0).shape(), ElementsAre(3, kW));
}

TEST_F(KServeTest, RequestedOutputsAreRespected) {
  ModelInferRequest req = RawRequest(1, 0);
  req.add_outputs()->set_name("output");
  ModelInferResponse r;
  ASSERT_TRUE(Infer(req, &r).ok());
  EXPECT_EQ(r.outputs_size(), 1);

  req.mutable_outputs(0)->set_name("logits");
  grpc::Status s = Infer(req, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("outputs[0].name 'logits'"));
}

// Each bad request gets INVALID_ARGUMENT (or NOT_FOUND) naming the field.
TEST_F(KServeTest, BadInputsNameTheField) {
  struct Case {
    std::string what;
    ModelInferRequest req;
    grpc::StatusCode code;
    std::string message;
  };
  std::vector<Case> cases;
  {
    ModelInferRequest r = RawRequest(1, 0);
    r.mutable_inputs(0)->set_datatype("FP99");
    cases.push_back({"unknown datatype", r, grpc::StatusCode::INVALID_ARGUMENT,
                     "inputs[0] ('input').datatype 'FP99'"});
  }
  {
    ModelInferRequest r = RawRequest(1, 0);
    r.mutable_inputs(0)->set_datatype("INT64");
    cases.push_back({"wrong datatype", r, grpc::StatusCode::INVALID_ARGUMENT,
                     "inputs[0] ('input').dtype is int64"});
  }
  {
    ModelInferRequest r = RawRequest(1, 0);
    r.add_raw_input_contents("x");
    cases.push_back({"raw count", r, grpc::StatusCode::INVALID_ARGUMENT,
                     "raw_input_contents has 2 entries but inputs has 1"});
  }
  {
    ModelInferRequest r = RawRequest(1, 0);
    r.mutable_raw_input_contents(0)->resize(12);
    cases.push_back({"raw bytes", r, grpc::StatusCode::INVALID_ARGUMENT,
                     "has 12 bytes"});
  }
  {
    ModelInferRequest r = TypedRequest(1, 0);
    r.mutable_inputs(0)->mutable_contents()->clear_fp32_contents();
    r.mutable_inputs(0)->mutable_contents()->add_int64_contents(1);
    cases.push_back({"wrong contents field", r, grpc::StatusCode::INVALID_ARGUMENT,
                     "inputs[0] ('input').contents.int64_contents is set; datatype "
                     "FP32 takes fp32_contents"});
  }
  {
    ModelInferRequest r = RawRequest(1, 0);
    r.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1);
    cases.push_back({"raw and typed", r, grpc::StatusCode::INVALID_ARGUMENT,
                     "set together with raw_input_contents"});
  }
  {
    ModelInferRequest r = TypedRequest(1, 0);
    r.mutable_inputs(0)->set_datatype("FP16");
    cases.push_back({"fp16 typed", r, grpc::StatusCode::INVALID_ARGUMENT,
                     "datatype FP16 has no typed contents field"});
  }
  {
    ModelInferRequest r = RawRequest(1, 0);
    r.mutable_inputs(0)->set_name("image");
    cases.push_back({"unknown input", r, grpc::StatusCode::INVALID_ARGUMENT,
                     "inputs[0].name 'image' is not an input"});
  }
  {
    ModelInferRequest r = RawRequest(1, 0);
    r.mutable_inputs(0)->set_shape(1, 5);
    cases.push_back({"wrong dimension", r, grpc::StatusCode::INVALID_ARGUMENT,
                     "inputs[0] ('input').shape[1] = 5"});
  }
  {
    // Above max_request_rows (max_queue_size, 1024); 9 rows would be split.
    ModelInferRequest r = RawRequest(1025, 0);
    cases.push_back({"too many rows", r, grpc::StatusCode::INVALID_ARGUMENT,
                     "1025 rows (batch dimension), more than max_request_rows 1024"});
  }
  {
    ModelInferRequest r = RawRequest(1, 0);
    r.set_model_name("other");
    cases.push_back({"other model", r, grpc::StatusCode::NOT_FOUND,
                     "model_name 'other'"});
  }
  for (const Case& c : cases) {
    ModelInferResponse r;
    grpc::Status s = Infer(c.req, &r);
    EXPECT_EQ(s.error_code(), c.code) << c.what << ": " << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(c.message)) << c.what;
  }
}

TEST_F(KServeTest, StatisticsCountSuccessesFailuresAndTimes) {
  ModelInferResponse r;
  ASSERT_TRUE(Infer(RawRequest(2, 1), &r).ok());
  ModelInferRequest poison = RawRequest(1, FakeRunner::kPoison);
  EXPECT_EQ(Infer(poison, &r).error_code(), grpc::StatusCode::INTERNAL);
  ModelInferRequest bad = RawRequest(1, 0);
  bad.mutable_inputs(0)->set_datatype("FP99");
  EXPECT_EQ(Infer(bad, &r).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // A request held in the model for a measurable time: compute time must
  // include it.
  runner_.CloseGate();
  absl::Notification done;
  ModelInferResponse held;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  const ModelInferRequest held_req = RawRequest(1, 3);
  grpc::Status held_status;
  stub_->async()->ModelInfer(&ctx, &held_req, &held, [&](grpc::Status s) {
    held_status = s;
    done.Notify();
  });
  runner_.AwaitRunning(1);
  const absl::Duration hold = absl::Milliseconds(30);
  absl::SleepFor(hold);
  runner_.OpenGate();
  done.WaitForNotification();
  ASSERT_TRUE(held_status.ok()) << held_status.error_message();

  const inference::ModelStatistics m = Statistics();
  EXPECT_EQ(m.name(), "fake");
  EXPECT_EQ(m.version(), "1");
  EXPECT_EQ(m.execution_count(), 2u);
  EXPECT_EQ(m.inference_count(), 3u);
  EXPECT_GT(m.last_inference(), 0u);
  const inference::InferStatistics& st = m.inference_stats();
  EXPECT_EQ(st.success().count(), 2u);
  EXPECT_EQ(st.fail().count(), 2u);
  EXPECT_EQ(st.queue().count(), 2u);
  EXPECT_GT(st.queue().ns(), 0u);
  EXPECT_EQ(st.compute_infer().count(), 2u);
  EXPECT_GE(st.compute_infer().ns(), static_cast<uint64_t>(absl::ToInt64Nanoseconds(hold)));
  EXPECT_GE(st.success().ns(), st.compute_infer().ns());
}

TEST_F(KServeTest, MetricsCountKServeMethods) {
  ModelInferResponse r;
  ASSERT_TRUE(Infer(RawRequest(1, 0), &r).ok());
  inference::ServerLiveResponse live;
  ASSERT_TRUE(stub_->ServerLive(Ctx().get(), {}, &live).ok());
  const std::string text = metrics_->Scrape();
  EXPECT_THAT(testing::Sample(text, testing::RequestsSeries("ModelInfer", "OK")),
              ::testing::Optional(1.0));
  EXPECT_THAT(testing::Sample(text, testing::RequestsSeries("ServerLive", "OK")),
              ::testing::Optional(1.0));
}

// The calls answered in their handler, of both APIs, go through one finish:
// each is counted once under its code, none is left in flight, and a refused
// ModelInfer counts as a failure in the KServe statistics.
TEST_F(KServeTest, CallsAnsweredInTheirHandlerAreCountedOnceAndNoneStayInFlight) {
  ModelInferRequest other = RawRequest(1, 0);
  other.set_model_name("other");
  ModelInferResponse r;
  EXPECT_EQ(Infer(other, &r).error_code(), grpc::StatusCode::NOT_FOUND);
  inference::ModelMetadataRequest mq;
  mq.set_name("other");
  inference::ModelMetadataResponse mr;
  EXPECT_EQ(stub_->ModelMetadata(Ctx().get(), mq, &mr).error_code(),
            grpc::StatusCode::NOT_FOUND);
  auto native = v1::Inference::NewStub(channel_);
  v1::PredictRequest pq;
  pq.set_model_name("other");
  v1::PredictResponse pr;
  EXPECT_EQ(native->Predict(Ctx().get(), pq, &pr).error_code(), grpc::StatusCode::NOT_FOUND);
  v1::GetModelMetadataRequest gq;
  gq.set_model_name("other");
  v1::GetModelMetadataResponse gr;
  EXPECT_EQ(native->GetModelMetadata(Ctx().get(), gq, &gr).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Statistics().inference_stats().fail().count(), 1u);

  const std::string text = metrics_->Scrape();
  for (const char* method : {"ModelInfer", "ModelMetadata", "Predict", "GetModelMetadata"}) {
    EXPECT_THAT(testing::Sample(text, testing::RequestsSeries(method, "NOT_FOUND")),
                ::testing::Optional(1.0))
        << method;
  }
  // Every call above was recorded before its answer was sent.
  EXPECT_THAT(testing::Sample(text, "metalserve_inflight_requests"),
              ::testing::Optional(0.0));
}

}  // namespace
}  // namespace metalserve
