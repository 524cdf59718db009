// client/kserve_codec: the native request a load run builds, as the KServe
// ModelInferRequest that --protocol=kserve sends.
#include "client/kserve_codec.h"

#include <string>

#include "gtest/gtest.h"

namespace metalserve::client {
namespace {

v1::PredictRequest OneInput() {
  v1::PredictRequest r;
  r.set_model_name("m");
  auto* t = r.add_inputs();
  t->set_name("x");
  t->set_dtype(v1::DATA_TYPE_FLOAT32);
  t->add_shape(1);
  t->add_shape(4);
  t->set_data(std::string(16, '\1'));
  return r;
}

TEST(KServeCodecTest, PriorityTravelsAsTheParameterTritonReads) {
  v1::PredictRequest r = OneInput();
  r.set_priority(2);
  const inference::ModelInferRequest k = ToModelInferRequest(r);
  ASSERT_EQ(k.parameters().count("priority"), 1u);
  EXPECT_EQ(k.parameters().at("priority").int64_param(), 2);
  EXPECT_EQ(k.model_name(), "m");
  ASSERT_EQ(k.inputs_size(), 1);
  EXPECT_EQ(k.inputs(0).datatype(), "FP32");
  EXPECT_EQ(k.raw_input_contents(0), std::string(16, '\1'));
}

TEST(KServeCodecTest, NoPriorityMeansNoParameter) {
  const inference::ModelInferRequest k = ToModelInferRequest(OneInput());
  EXPECT_EQ(k.parameters().count("priority"), 0u);
}

}  // namespace
}  // namespace metalserve::client
