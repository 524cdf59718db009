// Reading a PredictRequest's tensor bytes in place from gRPC's slices
// (sliced_request.h): the same request protobuf parses, for a body cut into
// slices at every kind of boundary; false (so the ordinary parse answers)
// for bodies the walk does not take; the held-bytes budget; and end to end,
// a request large enough to arrive in many slices answered with its rows.
#include "server/service/sliced_request.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "grpcpp/support/byte_buffer.h"
#include "server/service/tensor_codec.h"
#include "tests/testing/fake_runner_server.h"

namespace metalserve {
namespace {

using ::metalserve::testing::ExpectDoubled;
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

}  // namespace
}  // namespace metalserve
