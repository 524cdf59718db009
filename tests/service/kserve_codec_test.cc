// The KServe codec and statistics alone, without gRPC: the pieces
// kserve_service.cc hands requests to.
#include "server/service/kserve_codec.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/service/kserve_statistics.h"
#include "tests/testing/status_matchers.h"

namespace metalserve {
namespace {

using inference::ModelInferRequest;
using ::metalserve::testing::IsOk;
using ::metalserve::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::vector<TensorSpec> kOutputs = {
    {"logits", DType::kFloat32, {-1, 4}},
    {"index", DType::kInt64, {-1}},
};

ModelInferRequest::InferInputTensor* AddInput(ModelInferRequest* r, const char* name,
                                             const char* datatype, int64_t rows) {
  auto* t = r->add_inputs();
  t->set_name(name);
  t->set_datatype(datatype);
  t->add_shape(rows);
  return t;
}

TEST(DecodeKServeInputsTest, ConvertsTypedContentsToLittleEndianBytesInStorage) {
  ModelInferRequest r;
  auto* t = AddInput(&r, "ids", "INT32", 2);
  t->mutable_contents()->add_int_contents(7);
  t->mutable_contents()->add_int_contents(-3);
  std::vector<std::string> storage;
  auto in = DecodeKServeInputs(r, &storage);
  ASSERT_THAT(in, IsOk());
  ASSERT_EQ(in->size(), 1u);
  EXPECT_EQ((*in)[0].dtype, DType::kInt32);
  EXPECT_THAT((*in)[0].shape, ElementsAre(2));
  ASSERT_EQ((*in)[0].data.size(), 8u);
  EXPECT_EQ((*in)[0].data.data(), storage[0].data());  // a view, not a copy
  int32_t values[2];
  std::memcpy(values, (*in)[0].data.data(), sizeof(values));
  EXPECT_EQ(values[0], 7);
  EXPECT_EQ(values[1], -3);
}

TEST(DecodeKServeInputsTest, RawContentsAreViewedInPlace) {
  ModelInferRequest r;
  AddInput(&r, "x", "FP32", 1);
  r.add_raw_input_contents(std::string(4, '\1'));
  std::vector<std::string> storage;
  auto in = DecodeKServeInputs(r, &storage);
  ASSERT_THAT(in, IsOk());
  EXPECT_EQ((*in)[0].data.data(), r.raw_input_contents(0).data());
  EXPECT_TRUE(storage.empty());
}

TEST(DecodeKServeInputsTest, RefusesBadInputsNamingTheFieldAndValue) {
  std::vector<std::string> storage;
  ModelInferRequest range;
  AddInput(&range, "x", "INT8", 1)->mutable_contents()->add_int_contents(300);
  EXPECT_THAT(DecodeKServeInputs(range, &storage),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("inputs[0] ('x').contents.int_contents[0] = 300")));
  ModelInferRequest type;
  AddInput(&type, "x", "FP8", 1);
  EXPECT_THAT(DecodeKServeInputs(type, &storage),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'FP8'"), HasSubstr("FP32, FP16"))));
  ModelInferRequest wrong;
  AddInput(&wrong, "x", "FP32", 1)->mutable_contents()->add_int_contents(1);
  EXPECT_THAT(DecodeKServeInputs(wrong, &storage),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("int_contents is set; datatype FP32 takes fp32_contents")));
  ModelInferRequest mixed;
  AddInput(&mixed, "x", "FP32", 1)->mutable_contents()->add_fp32_contents(1);
  mixed.add_raw_input_contents(std::string(4, '\0'));
  EXPECT_THAT(DecodeKServeInputs(mixed, &storage),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("together with raw_input_contents")));
}

TEST(SelectKServeOutputsTest, AllInModelOrderWhenNoneNamedElseTheNamedInRequestOrder) {
  ModelInferRequest all;
  auto every = SelectKServeOutputs(all, kOutputs);
  ASSERT_THAT(every, IsOk());
  EXPECT_THAT(*every, ElementsAre(0, 1));
  ModelInferRequest named;
  named.add_outputs()->set_name("index");
  named.add_outputs()->set_name("logits");
  auto picked = SelectKServeOutputs(named, kOutputs);
  ASSERT_THAT(picked, IsOk());
  EXPECT_THAT(*picked, ElementsAre(1, 0));
  named.add_outputs()->set_name("index");
  EXPECT_THAT(SelectKServeOutputs(named, kOutputs),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("outputs[2].name 'index' appears more than once")));
  ModelInferRequest unknown;
  unknown.add_outputs()->set_name("probs");
  EXPECT_THAT(SelectKServeOutputs(unknown, kOutputs),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'probs' is not an output of the model; expected "
                                 "'logits', 'index'")));
}

TEST(KServeStatisticsTest, AddToReportsCountsAndCumulativeTimes) {
  KServeStatistics stats;
  stats.RecordSuccess(3, absl::Milliseconds(5), absl::Milliseconds(1),
                      absl::Milliseconds(2), absl::FromUnixMillis(1234));
  stats.RecordSuccess(1, absl::Milliseconds(3), absl::Milliseconds(1),
                      absl::Milliseconds(1), absl::FromUnixMillis(2000));
  stats.RecordFailure(absl::Milliseconds(4));
  inference::ModelStatisticsResponse r;
  stats.AddTo({.name = "m", .version = "2"}, &r);
  ASSERT_EQ(r.model_stats_size(), 1);
  const inference::ModelStatistics& m = r.model_stats(0);
  EXPECT_EQ(m.name(), "m");
  EXPECT_EQ(m.version(), "2");
  EXPECT_EQ(m.last_inference(), 2000u);
  EXPECT_EQ(m.inference_count(), 4u);
  EXPECT_EQ(m.execution_count(), 2u);
  EXPECT_EQ(m.inference_stats().success().count(), 2u);
  EXPECT_EQ(m.inference_stats().success().ns(), 8'000'000u);
  EXPECT_EQ(m.inference_stats().fail().count(), 1u);
  EXPECT_EQ(m.inference_stats().fail().ns(), 4'000'000u);
  EXPECT_EQ(m.inference_stats().queue().ns(), 2'000'000u);
  EXPECT_EQ(m.inference_stats().compute_infer().ns(), 3'000'000u);
}

}  // namespace
}  // namespace metalserve
