#include "server/runtime/model_signature.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace metalserve {
namespace {

using ::metalserve::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ModelSignatureTest, ParsesExportedSidecar) {
  auto sig = ParseModelSignature(R"({"name": "tiny", "version": "3",
      "inputs": [{"name": "input", "dtype": "float32", "shape": [-1, 3, 8, 8]}],
      "outputs": [{"name": "logits", "dtype": "float32", "shape": [-1, 10]}]})");
  ASSERT_TRUE(sig.ok()) << sig.status();
  EXPECT_EQ(sig->name, "tiny");
  EXPECT_EQ(sig->version, "3");
  ASSERT_EQ(sig->inputs.size(), 1u);
  EXPECT_EQ(sig->inputs[0].name, "input");
  EXPECT_EQ(sig->inputs[0].dtype, DType::kFloat32);
  EXPECT_THAT(sig->inputs[0].shape, ElementsAre(-1, 3, 8, 8));
  EXPECT_THAT(sig->outputs[0].shape, ElementsAre(-1, 10));
}

TEST(ModelSignatureTest, RejectsShapeWithoutBatchDimension) {
  EXPECT_THAT(ParseModelSignature(R"({"inputs": [{"name": "x", "dtype": "float32",
      "shape": [4]}], "outputs": [{"name": "y", "dtype": "float32", "shape": [-1]}]})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batch dimension")));
}

TEST(ModelSignatureTest, RejectsUnknownDtypeAndBrokenJson) {
  EXPECT_THAT(ParseModelSignature(R"({"inputs": [{"name": "x", "dtype": "complex",
      "shape": [-1]}], "outputs": [{"name": "y", "dtype": "float32", "shape": [-1]}]})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("complex")));
  EXPECT_THAT(ParseModelSignature(R"({"inputs": [)"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseModelSignature(R"({"inputs": []})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("inputs")));
}

TEST(ModelSignatureTest, MissingFileIsNotFound) {
  EXPECT_THAT(ReadModelSignature("/nonexistent/model.json"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/model.json")));
}

TEST(ModelSignatureTest, DefaultPathReplacesExtension) {
  EXPECT_EQ(DefaultSignaturePath("/m/resnet18.pt"), "/m/resnet18.json");
  EXPECT_EQ(DefaultSignaturePath("/m.d/model"), "/m.d/model.json");
}

}  // namespace
}  // namespace metalserve
