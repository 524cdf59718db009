// Reading a PredictRequest's tensor bytes, and a KServe ModelInferRequest's
// raw_input_contents, in place from gRPC's slices (sliced_request.h): the
// same request protobuf parses, for a body cut into slices at every kind of
// boundary; false (so the ordinary parse answers) for bodies the walk does
// not take; the held-bytes budget; and end to end over both APIs, a request
// large enough to arrive in many slices answered with its rows.
#include "server/service/sliced_request.h"

#include <string>
#include <vector>

#include "google/protobuf/util/message_differencer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/support/byte_buffer.h"
#include "inference/grpc_service.grpc.pb.h"
#include "server/service/kserve_codec.h"
#include "server/service/tensor_codec.h"
#include "tests/testing/fake_runner_server.h"

namespace metalserve {
namespace {

using ::metalserve::testing::ExpectDoubled;
using ::metalserve::testing::FakeRunnerServerTest;
using ::metalserve::testing::Floats;
using ::metalserve::testing::MakeRequest;
using ::metalserve::testing::NativeFakeServerTest;

v1::PredictRequest TwoInputs() {
  v1::PredictRequest req;
  req.set_model_name("m");
  for (const char* name : {"a", "b"}) {
    auto* t = req.add_inputs();
    t->set_name(name);
    t->set_dtype(v1::DATA_TYPE_UINT8);
    t->add_shape(1);
    t->add_shape(300);
    for (int i = 0; i < 300; ++i) t->mutable_data()->push_back(static_cast<char>(i * 7 + name[0]));
  }
  return req;
}

// `bytes` as a ByteBuffer of slices of `piece` bytes (the last shorter).
grpc::ByteBuffer Sliced(const std::string& bytes, size_t piece) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += piece) {
    slices.emplace_back(bytes.substr(at, piece));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Joined(const std::vector<absl::string_view>& views) {
  std::string out;
  for (absl::string_view v : views) out.append(v.data(), v.size());
  return out;
}

TEST(SlicedRequestTest, ReadsTheSameRequestAsProtobufWhereverTheSlicesAreCut) {
  const v1::PredictRequest want = TwoInputs();
  const std::string bytes = want.SerializeAsString();
  for (size_t piece : {1, 2, 3, 7, 64, 299, 301, 1000, 100000}) {
    SCOPED_TRACE(piece);
    HeldBytesBudget budget(1 << 20);
    SlicedPredictRequest got;
    ASSERT_TRUE(ParseSlicedPredictRequest(Sliced(bytes, piece), &budget, &got));
    EXPECT_EQ(budget.held(), static_cast<int64_t>(bytes.size()));
    ASSERT_EQ(got.skeleton.inputs_size(), 2);
    EXPECT_EQ(got.skeleton.model_name(), "m");
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(got.skeleton.inputs(i).name(), want.inputs(i).name());
      EXPECT_EQ(got.skeleton.inputs(i).shape(1), 300);
      EXPECT_TRUE(got.skeleton.inputs(i).data().empty());
      EXPECT_EQ(Joined(got.data[i]), want.inputs(i).data());
    }
    const std::vector<RawInput> raw = DecodeInputs(got);
    EXPECT_EQ(raw[1].ByteSize(), 300u);
  }
}

TEST(SlicedRequestTest, GivesBackItsBudgetWhenDestroyed) {
  const std::string bytes = TwoInputs().SerializeAsString();
  HeldBytesBudget budget(static_cast<int64_t>(bytes.size()));
  {
    SlicedPredictRequest first;
    ASSERT_TRUE(ParseSlicedPredictRequest(Sliced(bytes, 50), &budget, &first));
    SlicedPredictRequest second;
    EXPECT_FALSE(ParseSlicedPredictRequest(Sliced(bytes, 50), &budget, &second))
        << "a second request passed the budget";
  }
  EXPECT_EQ(budget.held(), 0);
  SlicedPredictRequest third;
  EXPECT_TRUE(ParseSlicedPredictRequest(Sliced(bytes, 50), &budget, &third));
}

TEST(SlicedRequestTest, LeavesMalformedBodiesToTheOrdinaryParse) {
  const std::string bytes = TwoInputs().SerializeAsString();
  const std::vector<std::string> bad = {
      bytes.substr(0, bytes.size() - 1),            // truncated data
      std::string("\x12\x05\x22\x10xyz", 7),        // data longer than its tensor
      std::string("\x13\x14", 2),                   // a group
      std::string("\x00\x01", 2),                   // field 0
      std::string("\x0a\x02\xff\xfe", 4),           // model_name not UTF-8
      std::string("\x12\x80", 2),                   // length varint never ends
  };
  for (const std::string& b : bad) {
    HeldBytesBudget budget(1 << 20);
    SlicedPredictRequest got;
    EXPECT_FALSE(ParseSlicedPredictRequest(Sliced(b, 3), &budget, &got)) << b.size();
  }
}

// Two raw inputs of 300 bytes each, with parameters, a requested output
// and an id around them (fields before and after raw_input_contents).
inference::ModelInferRequest TwoRawInputs() {
  inference::ModelInferRequest req;
  req.set_model_name("m");
  req.set_id("id-7");
  (*req.mutable_parameters())["priority"].set_int64_param(2);
  for (const char* name : {"a", "b"}) {
    auto* t = req.add_inputs();
    t->set_name(name);
    t->set_datatype("UINT8");
    t->add_shape(1);
    t->add_shape(300);
    std::string bytes;
    for (int i = 0; i < 300; ++i) bytes.push_back(static_cast<char>(i * 7 + name[0]));
    req.add_raw_input_contents(bytes);
  }
  req.add_outputs()->set_name("y");
  return req;
}

TEST(SlicedRequestTest, ReadsTheSameModelInferRequestAsProtobufWhereverTheSlicesAreCut) {
  const inference::ModelInferRequest want = TwoRawInputs();
  inference::ModelInferRequest want_skeleton = want;
  want_skeleton.clear_raw_input_contents();
  const std::string bytes = want.SerializeAsString();
  for (size_t piece : {1, 2, 3, 7, 64, 299, 301, 1000, 100000}) {
    SCOPED_TRACE(piece);
    HeldBytesBudget budget(1 << 20);
    SlicedModelInferRequest got;
    ASSERT_TRUE(ParseSlicedModelInferRequest(Sliced(bytes, piece), &budget, &got));
    EXPECT_EQ(budget.held(), static_cast<int64_t>(bytes.size()));
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(got.skeleton, want_skeleton))
        << got.skeleton.DebugString();
    ASSERT_EQ(got.raw_input_contents.size(), 2u);
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(Joined(got.raw_input_contents[i]), want.raw_input_contents(i));
    }
    // Decoded from the views, the inputs hold the same bytes as from the copy.
    std::vector<std::string> storage, copy_storage;
    auto in_place = DecodeKServeInputs(got.skeleton, &storage, &got.raw_input_contents);
    auto copied = DecodeKServeInputs(want, &copy_storage);
    ASSERT_TRUE(in_place.ok()) << in_place.status();
    ASSERT_TRUE(copied.ok()) << copied.status();
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(Joined((*in_place)[i].pieces) + std::string((*in_place)[i].data),
                std::string((*copied)[i].data));
      EXPECT_EQ((*in_place)[i].ByteSize(), 300u);
    }
  }
}

TEST(SlicedRequestTest, ModelInferInPlaceKeepsTheCopysErrors) {
  // One raw entry for two inputs, and raw contents beside typed ones: the
  // same INVALID_ARGUMENT messages whether the bytes were copied or viewed.
  inference::ModelInferRequest one_short = TwoRawInputs();
  one_short.mutable_raw_input_contents()->RemoveLast();
  inference::ModelInferRequest mixed = TwoRawInputs();
  mixed.mutable_inputs(1)->mutable_contents()->add_uint_contents(3);
  for (const inference::ModelInferRequest& req : {one_short, mixed}) {
    const std::string bytes = req.SerializeAsString();
    HeldBytesBudget budget(1 << 20);
    SlicedModelInferRequest got;
    ASSERT_TRUE(ParseSlicedModelInferRequest(Sliced(bytes, 5), &budget, &got));
    std::vector<std::string> storage;
    const auto in_place = DecodeKServeInputs(got.skeleton, &storage, &got.raw_input_contents);
    const auto copied = DecodeKServeInputs(req, &storage);
    ASSERT_FALSE(copied.ok());
    EXPECT_EQ(in_place.status(), copied.status());
  }
}

TEST(SlicedRequestTest, LeavesMalformedModelInferBodiesToTheOrdinaryParse) {
  const std::string bytes = TwoRawInputs().SerializeAsString();
  const std::vector<std::string> bad = {
      bytes.substr(0, bytes.size() - 1),            // truncated
      std::string("\x3a\x05xyz", 5),               // raw contents longer than the body
      std::string("\x3b\x3c", 2),                   // a group
      std::string("\x00\x01", 2),                   // field 0
      std::string("\x0a\x02\xff\xfe", 4),           // model_name not UTF-8
      std::string("\x3a\x80", 2),                   // length varint never ends
  };
  for (const std::string& b : bad) {
    HeldBytesBudget budget(1 << 20);
    SlicedModelInferRequest got;
    EXPECT_FALSE(ParseSlicedModelInferRequest(Sliced(b, 3), &budget, &got)) << b.size();
  }
}

TEST(SlicedRequestTest, PredictAndModelInferShareOneBudget) {
  const std::string predict = TwoInputs().SerializeAsString();
  const std::string infer = TwoRawInputs().SerializeAsString();
  HeldBytesBudget budget(static_cast<int64_t>(std::max(predict.size(), infer.size())));
  SlicedPredictRequest first;
  ASSERT_TRUE(ParseSlicedPredictRequest(Sliced(predict, 50), &budget, &first));
  SlicedModelInferRequest second;
  EXPECT_FALSE(ParseSlicedModelInferRequest(Sliced(infer, 50), &budget, &second))
      << "the ModelInfer request passed the budget the Predict request holds";
}

class SlicedRequestServerTest : public NativeFakeServerTest {};

TEST_F(SlicedRequestServerTest, LargeRequestArrivingInManySlicesGetsItsRowsBack) {
  ServerOptions so = testing::LoopbackServerOptions();
  so.batching.max_batch_size = 8192;
  so.batching.max_queue_size = 8192;
  StartServerAndConnect(so);
  // 6000 rows x 4 floats: 96 KB, more than one of gRPC's read slices.
  const v1::PredictRequest req = MakeRequest(6000, 0.5f, 0.25f);
  v1::PredictResponse resp;
  const grpc::Status s = Call(req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  ExpectDoubled(req, resp);
}

class SlicedModelInferServerTest : public FakeRunnerServerTest {};

TEST_F(SlicedModelInferServerTest, LargeRawRequestArrivingInManySlicesGetsItsRowsBack) {
  ServerOptions so = testing::LoopbackServerOptions();
  so.batching.max_batch_size = 8192;
  so.batching.max_queue_size = 8192;
  const absl::Status started = StartFakeServer(so);
  ASSERT_TRUE(started.ok()) << started;
  auto stub = inference::GRPCInferenceService::NewStub(
      grpc::CreateChannel(ServerTarget(), grpc::InsecureChannelCredentials()));
  // 6000 rows x 4 floats: 96 KB, more than one of gRPC's read slices.
  constexpr int64_t kRows = 6000, kWidth = FakeRunner::kWidth;
  inference::ModelInferRequest req;
  req.set_model_name("fake");
  auto* t = req.add_inputs();
  t->set_name("input");
  t->set_datatype("FP32");
  t->add_shape(kRows);
  t->add_shape(kWidth);
  std::vector<float> values(kRows * kWidth);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.25f * static_cast<float>(i % 1000);
  req.add_raw_input_contents(
      std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
  inference::ModelInferResponse resp;
  const grpc::Status s = stub->ModelInfer(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  ASSERT_EQ(resp.raw_output_contents_size(), 1);
  const std::vector<float> out = Floats(resp.raw_output_contents(0));
  ASSERT_EQ(out.size(), values.size());
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], 2 * values[i]) << "value " << i;
}

}  // namespace
}  // namespace metalserve
