// metalserve-bench over the Open Inference Protocol: the load generator and
// the binary against an in-process server (fake runner, output = 2 * input)
// on 127.0.0.1, bounded by request counts and deadlines.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/kserve_codec.h"
#include "client/load_generator.h"
#include "client/request_builder.h"
#include "client/shared_memory_input.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "server/metrics/metrics.h"
#include "server/service/server.h"
#include "tests/testing/fake_runner.h"
#include "tests/testing/fake_runner_server.h"
#include "tests/testing/subprocess.h"

namespace metalserve {
namespace {

using ::metalserve::testing::FakeRunnerServerTest;
using ::testing::HasSubstr;

using Outcome = ::metalserve::testing::CommandOutcome;

Outcome RunBench(const std::string& args) {
  return ::metalserve::testing::RunCommand(
      absl::StrCat(METALSERVE_BENCH_BINARY, " ", args, " --progress=off"));
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/kserve_bench_", getpid(), "_", name);
}

class KServeBenchTest : public FakeRunnerServerTest {
 protected:
  void SetUp() override {
    const absl::Status started = StartFakeServer(testing::LoopbackServerOptions());
    ASSERT_TRUE(started.ok()) << started;
    target_ = ServerTarget();
  }

  int64_t KServeSuccesses() {
    auto stub = inference::GRPCInferenceService::NewStub(
        grpc::CreateChannel(target_, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    inference::ModelStatisticsResponse r;
    EXPECT_TRUE(stub->ModelStatistics(&ctx, {}, &r).ok());
    return r.model_stats_size() == 1
               ? static_cast<int64_t>(r.model_stats(0).inference_stats().success().count())
               : -1;
  }

  std::string target_;
};

TEST_F(KServeBenchTest, LoadGeneratorDrivesModelInferAndReadsServerFigures) {
  client::InputSpec spec{"input", v1::DATA_TYPE_FLOAT32, {2, FakeRunner::kWidth}};
  client::InputSource source;
  source.kind = client::InputKind::kRandom;
  auto predict = client::BuildPredictRequest({spec}, source, "fake");
  ASSERT_TRUE(predict.ok()) << predict.status();
  auto gen = client::LoadGenerator::Create(
      {grpc::CreateChannel(target_, grpc::InsecureChannelCredentials())},
      client::ToModelInferRequest(*predict));
  ASSERT_TRUE(gen.ok()) << gen.status();
  client::LoadSpec load;
  load.concurrency = 4;
  load.max_requests = 30;
  load.deadline = absl::Seconds(10);
  auto stats = (*gen)->Run(load);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->ok, 30);
  EXPECT_EQ(stats->ErrorCount(), 0);
  EXPECT_EQ(stats->rows, 60);
  // batch_rows came back in the response parameters: at least this request's.
  EXPECT_GE(stats->MeanBatchRows(), 2.0);
  EXPECT_EQ(KServeSuccesses(), 30);
}

TEST_F(KServeBenchTest, BinaryLoadTestsOverKServeWithMetadataFromModelMetadata) {
  const Outcome o = RunBench(absl::StrCat(
      "--protocol=kserve --target=", target_,
      " --requests=20 --concurrency=2 --batch=3 --input=random --output=json"
      " --deadline=5s"));
  EXPECT_EQ(o.exit_code, 0) << o.out;
  EXPECT_THAT(o.out, HasSubstr("\"ok\":20,\"errors\":{}"));
  EXPECT_THAT(o.out, HasSubstr("\"batch_rows_mean\":"));
  EXPECT_EQ(KServeSuccesses(), 20);
}

TEST_F(KServeBenchTest, DumpOutputsIsTheSameOverBothProtocols) {
  const std::string row = TempPath("row.bin");
  {
    const std::vector<float> v = {0.5f, -1.25f, 3.0f, 1e-3f};
    std::ofstream f(row, std::ios::binary);
    f.write(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  }
  const std::string native = TempPath("native.json");
  const std::string kserve = TempPath("kserve.json");
  const std::string common = absl::StrCat(
      "--target=", target_, " --requests=1 --deadline=5s --input=@", row);
  const Outcome a = RunBench(common + " --protocol=native --dump_outputs=" + native);
  ASSERT_EQ(a.exit_code, 0) << a.out;
  const Outcome b = RunBench(common + " --protocol=kserve --dump_outputs=" + kserve);
  ASSERT_EQ(b.exit_code, 0) << b.out;
  EXPECT_EQ(ReadFile(native),
            "{\"outputs\":[{\"name\":\"output\",\"datatype\":\"FP32\",\"shape\":[1,4],"
            "\"data\":[1,-2.5,6,0.00200000009]}]}\n");
  EXPECT_EQ(ReadFile(kserve), ReadFile(native));
  std::remove(row.c_str());
  std::remove(native.c_str());
  std::remove(kserve.c_str());
}

TEST_F(KServeBenchTest, SharedMemoryAgainstAServerThatHasItOffFailsNamingTheFlag) {
  const Outcome o = RunBench(absl::StrCat("--protocol=kserve --shared_memory=system --target=",
                                          target_, " --requests=5 --deadline=5s"));
  EXPECT_NE(o.exit_code, 0);
  EXPECT_THAT(o.out, HasSubstr("SystemSharedMemoryRegister: this server does not accept "
                               "shared memory (--shared_memory=off)"));
  EXPECT_EQ(KServeSuccesses(), 0);
}

TEST_F(KServeBenchTest, SharedMemoryNeedsTheKServeProtocolAndOneServer) {
  const Outcome o = RunBench("--protocol=native --shared_memory=system --target=" + target_);
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_THAT(o.out, HasSubstr("--shared_memory='system': want none, or system with "
                               "--protocol=kserve and one server"));
  const Outcome two = RunBench(absl::StrCat("--protocol=kserve --shared_memory=system --target=",
                                            target_, ",", target_));
  EXPECT_EQ(two.exit_code, 1);
  EXPECT_THAT(two.out, HasSubstr("and one server"));
}

// A server that admits loopback peers: the bench registers its region, every
// call names it, and the region is unregistered when the bench exits.
class KServeBenchSharedMemoryTest : public KServeBenchTest {
 protected:
  void SetUp() override {
    ServerOptions so = testing::LoopbackServerOptions();
    so.shared_memory = SharedMemoryAccess::kLocal;
    const absl::Status started = StartFakeServer(so);
    ASSERT_TRUE(started.ok()) << started;
    target_ = ServerTarget();
  }
};

// The request the bench sends: no tensor bytes, each input naming the
// registered region; the server answers it from the region's bytes.
TEST_F(KServeBenchSharedMemoryTest, RequestsNameTheRegionInsteadOfCarryingBytes) {
  const std::vector<float> v = {1.5f, -2, 3, 4};
  inference::ModelInferRequest req;
  req.set_model_name("fake");
  auto* t = req.add_inputs();
  t->set_name("input");
  t->set_datatype("FP32");
  t->add_shape(1);
  t->add_shape(FakeRunner::kWidth);
  req.add_raw_input_contents(std::string(reinterpret_cast<const char*>(v.data()), 16));
  auto channel = grpc::CreateChannel(target_, grpc::InsecureChannelCredentials());
  auto stub = inference::GRPCInferenceService::NewStub(channel);
  auto status = [&] {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    inference::SystemSharedMemoryStatusResponse r;
    EXPECT_TRUE(stub->SystemSharedMemoryStatus(&ctx, {}, &r).ok());
    return r;
  };
  {
    auto input = client::SharedMemoryInput::Create(channel, &req);
    ASSERT_TRUE(input.ok()) << input.status();
    EXPECT_EQ(req.raw_input_contents_size(), 0);
    EXPECT_EQ(req.inputs(0).parameters().at("shared_memory_region").string_param(),
              (*input)->region());
    EXPECT_EQ(req.inputs(0).parameters().at("shared_memory_byte_size").int64_param(), 16);
    EXPECT_EQ(status().regions().count((*input)->region()), 1u);
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    inference::ModelInferResponse resp;
    const grpc::Status s = stub->ModelInfer(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_THAT(testing::Floats(resp.raw_output_contents(0)),
                ::testing::ElementsAre(3.0f, -4.0f, 6.0f, 8.0f));
  }
  EXPECT_EQ(status().regions_size(), 0);  // unregistered when destroyed
}

TEST_F(KServeBenchSharedMemoryTest, BinaryLoadTestsThroughASharedMemoryRegion) {
  const Outcome o = RunBench(absl::StrCat(
      "--protocol=kserve --shared_memory=system --target=", target_,
      " --requests=20 --concurrency=2 --batch=3 --input=random --output=json --deadline=5s"));
  EXPECT_EQ(o.exit_code, 0) << o.out;
  EXPECT_THAT(o.out, HasSubstr("\"ok\":20,\"errors\":{}"));
  EXPECT_EQ(KServeSuccesses(), 20);
  auto stub = inference::GRPCInferenceService::NewStub(
      grpc::CreateChannel(target_, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  inference::SystemSharedMemoryStatusResponse status;
  ASSERT_TRUE(stub->SystemSharedMemoryStatus(&ctx, {}, &status).ok());
  EXPECT_EQ(status.regions_size(), 0);  // the bench unregistered it
  EXPECT_EQ(ServerCount("SystemSharedMemoryRegister", "OK"), 1);
  EXPECT_EQ(ServerCount("SystemSharedMemoryUnregister", "OK"), 1);
}

TEST_F(KServeBenchTest, UnknownProtocolIsAUsageError) {
  const Outcome o = RunBench("--protocol=soap --target=" + target_);
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_THAT(o.out, HasSubstr("--protocol='soap' is not supported; want native"));
}

}  // namespace
}  // namespace metalserve
