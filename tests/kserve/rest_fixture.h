// The fixture of the REST tests: an InferenceServer with the fake runner
// (float32 [rows, 4] -> 2x) serving gRPC and REST on free loopback ports,
// and helpers that build bodies and send requests.
#ifndef METALSERVE_TESTS_KSERVE_REST_FIXTURE_H_
#define METALSERVE_TESTS_KSERVE_REST_FIXTURE_H_

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/kserve/http_client.h"
#include "tests/testing/fake_runner_server.h"

namespace metalserve::testing {

using Json = nlohmann::json;

inline constexpr char kInfer[] = "/v2/models/fake/infer";

inline std::string FloatBytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

inline Json JsonInput(int64_t rows, const Json& data, const std::string& datatype = "FP32") {
  return {{"inputs", {{{"name", "input"}, {"shape", {rows, 4}}, {"datatype", datatype},
                       {"data", data}}}}};
}

class RestTest : public FakeRunnerServerTest {
 protected:
  void SetUp() override { Start(LoopbackServerOptions()); }

  // One polling thread by default: a request that held it would stall all.
  void Start(ServerOptions so) {
    so.http.address = "127.0.0.1:0";
    so.http.threads = 1;
    const absl::Status started = StartFakeServer(so);
    ASSERT_TRUE(started.ok()) << started;
    port_ = server_->http_port();
    ASSERT_GT(port_, 0);
  }

  HttpResponse Get(const std::string& path) { return HttpCall(port_, "GET", path); }
  HttpResponse Post(const std::string& path, const std::string& body,
                    const std::string& headers = "") {
    return HttpCall(port_, "POST", path, body, headers);
  }
  static std::string Error(const HttpResponse& r) {
    Json j = Json::parse(r.body, nullptr, false);
    return j.is_object() && j.contains("error") ? j["error"].get<std::string>() : r.body;
  }

  int port_ = 0;
};

}  // namespace metalserve::testing

#endif  // METALSERVE_TESTS_KSERVE_REST_FIXTURE_H_
