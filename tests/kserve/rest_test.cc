// The KServe v2 REST API (server/service/rest_server.h) over real HTTP on
// loopback, beside the gRPC service of the same InferenceServer, with the
// fake runner (float32 [rows, 4] -> 2x). Torch-free.
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "server/service/rest_server.h"
#include "tests/kserve/http_client.h"
#include "tests/kserve/rest_fixture.h"
#include "tests/testing/fake_runner_server.h"

namespace metalserve {
namespace {

using ::metalserve::testing::FloatBytes;
using ::metalserve::testing::JsonInput;
using ::metalserve::testing::kInfer;
using ::metalserve::testing::RestTest;
using ::metalserve::testing::HttpCall;
using ::metalserve::testing::HttpConnection;
using ::metalserve::testing::HttpResponse;
using ::metalserve::testing::RawRequest;
using ::testing::HasSubstr;
using Json = nlohmann::json;

TEST_F(RestTest, HealthAndMetadataEndpointsAnswer) {
  EXPECT_EQ(Json::parse(Get("/v2/health/live").body), Json({{"live", true}}));
  HttpResponse ready = Get("/v2/health/ready");
  EXPECT_EQ(ready.status, 200);
  EXPECT_EQ(Json::parse(ready.body), Json({{"ready", true}}));
  Json server = Json::parse(Get("/v2").body);
  EXPECT_EQ(server["name"], "metalserve");
  EXPECT_THAT(server["extensions"].dump(), HasSubstr("binary_tensor_data"));
  for (const char* path : {"/v2/models/fake", "/v2/models/fake/versions/1"}) {
    HttpResponse meta = Get(path);
    ASSERT_EQ(meta.status, 200) << path;
    Json j = Json::parse(meta.body);
    EXPECT_EQ(j["inputs"][0]["datatype"], "FP32");
    EXPECT_EQ(j["outputs"][0]["name"], "output");
    EXPECT_EQ(j["versions"], Json({"1"}));
  }
  EXPECT_EQ(Get("/v2/models/fake/ready").status, 200);
  EXPECT_EQ(Get("/v2/models/fake/versions/1/ready").status, 200);
  HttpResponse other = Get("/v2/models/other");
  EXPECT_EQ(other.status, 404);
  EXPECT_THAT(Error(other), HasSubstr("'other' is not served here"));
  EXPECT_EQ(Get("/v2/models/fake/versions/2/ready").status, 404);
  EXPECT_EQ(Get("/v2/nothing").status, 404);
  EXPECT_EQ(Post("/v2/health/live", "").status, 405);
  EXPECT_EQ(Get(kInfer).status, 405);
}

// Triton's GET /v2/models/{name}/config: the gRPC ModelConfig, field by field.
TEST_F(RestTest, ModelConfigAnswersWhatTheGrpcServiceDoes) {
  auto channel = grpc::CreateChannel(ServerTarget(), grpc::InsecureChannelCredentials());
  auto stub = inference::GRPCInferenceService::NewStub(channel);
  grpc::ClientContext ctx;
  inference::ModelConfigRequest q;
  q.set_name("fake");
  inference::ModelConfigResponse g;
  ASSERT_TRUE(stub->ModelConfig(&ctx, q, &g).ok());
  for (const char* path : {"/v2/models/fake/config", "/v2/models/fake/versions/1/config"}) {
    HttpResponse r = Get(path);
    ASSERT_EQ(r.status, 200) << path << r.body;
    const Json j = Json::parse(r.body);
    EXPECT_EQ(j["name"], g.config().name());
    EXPECT_EQ(j["platform"], "pytorch_libtorch");
    EXPECT_EQ(j["max_batch_size"], g.config().max_batch_size());
    ASSERT_EQ(j["input"].size(), 1u);
    EXPECT_EQ(j["input"][0]["name"], g.config().input(0).name());
    EXPECT_EQ(j["input"][0]["data_type"], "TYPE_FP32");
    EXPECT_EQ(j["input"][0]["dims"], Json({4}));
    EXPECT_EQ(j["output"][0]["name"], g.config().output(0).name());
  }
  EXPECT_EQ(Get("/v2/models/other/config").status, 404);
  EXPECT_EQ(Get("/v2/models/fake/versions/2/config").status, 404);
  EXPECT_EQ(Post("/v2/models/fake/config", "").status, 405);
}

TEST_F(RestTest, ReadinessIs503FromTheMomentServingStops) {
  server_->SetServing(false);  // what main does when drain begins
  HttpResponse ready = Get("/v2/health/ready");
  EXPECT_EQ(ready.status, 503);
  EXPECT_EQ(Json::parse(ready.body), Json({{"ready", false}}));
  EXPECT_EQ(Get("/v2/models/fake/ready").status, 503);
  EXPECT_EQ(Get("/v2/health/live").status, 200);
  server_->SetServing(true);
  EXPECT_EQ(Get("/v2/health/ready").status, 200);
}

TEST_F(RestTest, JsonInferAcceptsFlatAndNestedData) {
  for (const Json& data : {Json({1, 2, 3, 4, 5, 6, 7, 8.5}),
                           Json({{1, 2, 3, 4}, {5, 6, 7, 8.5}})}) {
    Json body = JsonInput(2, data);
    body["id"] = "r1";
    HttpResponse r = Post(kInfer, body.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    Json j = Json::parse(r.body);
    EXPECT_EQ(j["id"], "r1");
    EXPECT_EQ(j["model_name"], "fake");
    EXPECT_EQ(j["outputs"][0]["shape"], Json({2, 4}));
    EXPECT_EQ(j["outputs"][0]["data"], Json({2, 4, 6, 8, 10, 12, 14, 17}));
    EXPECT_EQ(j["parameters"]["batch_rows"], 2);
  }
}

TEST_F(RestTest, BinaryExtensionCarriesInputsAndOutputs) {
  Json header = {{"inputs", {{{"name", "input"}, {"shape", {1, 4}}, {"datatype", "FP32"},
                              {"parameters", {{"binary_data_size", 16}}}}}},
                 {"outputs", {{{"name", "output"}, {"parameters", {{"binary_data", true}}}}}}};
  const std::string json = header.dump();
  HttpResponse r = Post(kInfer, json + FloatBytes({1, 2, 3, 4.5}),
                        absl::StrCat("Inference-Header-Content-Length: ", json.size(), "\r\n"));
  ASSERT_EQ(r.status, 200) << r.body;
  const size_t n = std::stoul(r.headers["inference-header-content-length"]);
  Json j = Json::parse(r.body.substr(0, n));
  EXPECT_EQ(j["outputs"][0]["parameters"]["binary_data_size"], 16);
  EXPECT_FALSE(j["outputs"][0].contains("data"));
  EXPECT_EQ(r.body.substr(n), FloatBytes({2, 4, 6, 9}));

  // Binary in, JSON out (no binary_data asked for).
  header.erase("outputs");
  const std::string json2 = header.dump();
  r = Post(kInfer, json2 + FloatBytes({1, 2, 3, 4}),
           absl::StrCat("Inference-Header-Content-Length: ", json2.size(), "\r\n"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Json::parse(r.body)["outputs"][0]["data"], Json({2, 4, 6, 8}));
  EXPECT_EQ(r.headers.count("inference-header-content-length"), 0u);
}

TEST_F(RestTest, BinaryDataOutputAppliesToEveryOutput) {
  Json body = JsonInput(1, {1, 2, 3, 4});
  body["parameters"] = {{"binary_data_output", true}};
  HttpResponse r = Post(kInfer, body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const size_t n = std::stoul(r.headers["inference-header-content-length"]);
  EXPECT_EQ(r.body.substr(n), FloatBytes({2, 4, 6, 8}));
}

TEST_F(RestTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  HttpConnection c(port_);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c.Send(RawRequest("POST", kInfer, JsonInput(1, {i, 0, 0, 0}).dump())));
    HttpResponse r = c.Read();
    ASSERT_EQ(r.status, 200) << i;
    EXPECT_EQ(Json::parse(r.body)["outputs"][0]["data"][0], 2 * i);
  }
}

// Under --model (no repository) the REST repository extension lists the one
// model and refuses load and unload, as the gRPC handlers do.
TEST_F(RestTest, RepositoryExtensionWithOneModelListsItAndRefusesLoadAndUnload) {
  HttpResponse index = Post("/v2/repository/index", R"({"ready": true})");
  ASSERT_EQ(index.status, 200) << index.body;
  EXPECT_EQ(Json::parse(index.body),
            Json::parse(R"([{"name":"fake","version":"1","state":"READY","reason":""}])"));
  for (const char* verb : {"load", "unload"}) {
    HttpResponse r = Post(absl::StrCat("/v2/repository/models/fake/", verb), "");
    EXPECT_EQ(r.status, 400) << verb;
    EXPECT_THAT(Error(r), HasSubstr("the server was started with --model (one model)"));
  }
  HttpResponse params =
      Post("/v2/repository/models/fake/load", R"({"parameters": {"config": "{}"}})");
  EXPECT_EQ(params.status, 400);
  EXPECT_THAT(Error(params), HasSubstr("RepositoryModelLoad parameters [config]"));
  EXPECT_EQ(Get("/v2/repository/index").status, 405);
  EXPECT_THAT(Json::parse(Get("/v2").body)["extensions"].dump(),
              HasSubstr("model_repository"));
}

// A runner that recorded how its device was chosen, as the torch runtime
// does under --device=auto: a measured table and a device auto left out.
class RestDeviceChoiceTest : public RestTest {
 protected:
  void SetUp() override {
    DeviceChoiceInfo& choice = runner_.mutable_info().device_choice;
    choice.requested = "auto";
    choice.reason = "measured";
    choice.timings = {{"cpu", 1, absl::Microseconds(67)}, {"cpu", 8, absl::Microseconds(106.4)}};
    choice.skipped = {"mps: probe failed: a 4 MB allocation filled with ones sums to 0"};
    RestTest::SetUp();
  }
  static Json Expected() {
    return Json::parse(R"({"requested": "auto", "device": "cpu", "reason": "measured",
        "timings": [{"device": "cpu", "batch_size": 1, "forward_us": 67},
                    {"device": "cpu", "batch_size": 8, "forward_us": 106}],
        "skipped": ["mps: probe failed: a 4 MB allocation filled with ones sums to 0"]})");
  }
};

// REST metadata carries the table as an extension field; KServe's
// ModelMetadataResponse has none, so the gRPC ModelConfig (and REST /config)
// carry the same object as Triton's parameters["device_choice"].string_value.
TEST_F(RestDeviceChoiceTest, MetadataAndConfigCarryTheDeviceChoice) {
  for (const char* path : {"/v2/models/fake", "/v2/models/fake/versions/1"}) {
    HttpResponse meta = Get(path);
    ASSERT_EQ(meta.status, 200) << path;
    EXPECT_EQ(Json::parse(meta.body)["device_choice"], Expected()) << path;
  }
  HttpResponse config = Get("/v2/models/fake/config");
  ASSERT_EQ(config.status, 200) << config.body;
  const Json parameters = Json::parse(config.body)["parameters"];
  ASSERT_TRUE(parameters.contains("device_choice")) << config.body;
  EXPECT_EQ(Json::parse(parameters["device_choice"]["string_value"].get<std::string>()),
            Expected());
  auto channel = grpc::CreateChannel(ServerTarget(), grpc::InsecureChannelCredentials());
  auto stub = inference::GRPCInferenceService::NewStub(channel);
  grpc::ClientContext ctx;
  inference::ModelConfigRequest q;
  q.set_name("fake");
  inference::ModelConfigResponse g;
  ASSERT_TRUE(stub->ModelConfig(&ctx, q, &g).ok());
  ASSERT_EQ(g.config().parameters().count("device_choice"), 1u);
  EXPECT_EQ(Json::parse(g.config().parameters().at("device_choice").string_value()),
            Expected());
}

// A runner that recorded no choice (not the torch runtime's) adds nothing.
TEST_F(RestTest, MetadataWithoutARecordedChoiceHasNoDeviceChoice) {
  EXPECT_FALSE(Json::parse(Get("/v2/models/fake").body).contains("device_choice"));
  EXPECT_FALSE(Json::parse(Get("/v2/models/fake/config").body).contains("parameters"));
}

}  // namespace
}  // namespace metalserve
