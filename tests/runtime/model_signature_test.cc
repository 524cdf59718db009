#include "server/runtime/model_signature.h"

#include "server/model_config/model_config.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace metalserve {
namespace {

using ::metalserve::testing::StatusIs;
using ::testing::AllOf;
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

TEST(ModelSignatureTest, UnknownKeyIsAnErrorNamingTheKey) {
  EXPECT_THAT(ParseModelSignature(R"({"nmae": "tiny",
      "inputs": [{"name": "x", "dtype": "float32", "shape": [-1]}],
      "outputs": [{"name": "y", "dtype": "float32", "shape": [-1]}]})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nmae")));
  EXPECT_THAT(ParseModelSignature(R"({
      "inputs": [{"name": "x", "dtype": "float32", "shape": [-1], "shpae": [3]}],
      "outputs": [{"name": "y", "dtype": "float32", "shape": [-1]}]})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("inputs[0]"), HasSubstr("shpae"))));
}

TEST(ModelSignatureTest, WrongTypeIsAnErrorNamingTheKey) {
  EXPECT_THAT(ParseModelSignature(R"({"version": 3,
      "inputs": [{"name": "x", "dtype": "float32", "shape": [-1]}],
      "outputs": [{"name": "y", "dtype": "float32", "shape": [-1]}]})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("version")));
  EXPECT_THAT(ParseModelSignature(R"({
      "inputs": [{"name": "x", "dtype": "float32", "shape": [-1, "three"]}],
      "outputs": [{"name": "y", "dtype": "float32", "shape": [-1]}]})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("inputs[0].shape[1]"), HasSubstr("three"))));
}

TEST(ModelSignatureTest, TensorWithoutNameIsAnError) {
  EXPECT_THAT(ParseModelSignature(R"({"inputs": [{"dtype": "float32", "shape": [-1]}],
      "outputs": [{"name": "y", "dtype": "float32", "shape": [-1]}]})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("inputs[0] needs")));
}

TEST(ModelSignatureTest, AcceptsTheExportersTorchVersionKey) {
  auto sig = ParseModelSignature(R"({"name": "tiny", "version": "1",
      "torch_version": "1.13.1",
      "inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 3]}],
      "outputs": [{"name": "y", "dtype": "float32", "shape": [-1]}]})");
  EXPECT_TRUE(sig.ok()) << sig.status();
}

TEST(ModelSignatureTest, MissingFileIsNotFound) {
  EXPECT_THAT(ReadModelSignature("/nonexistent/model.json"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/model.json")));
}

TEST(ModelSignatureTest, DefaultPathReplacesExtension) {
  EXPECT_EQ(DefaultSignaturePath("/m/resnet18.pt"), "/m/resnet18.json");
  EXPECT_EQ(DefaultSignaturePath("/m.d/model"), "/m.d/model.json");
}

TEST(ModelSignatureTest, BadDtypeNamesTheFieldAndTheAcceptedNames) {
  EXPECT_THAT(ParseModelSignature(R"({"inputs": [{"name": "x", "dtype": "float32",
      "shape": [-1]}], "outputs": [{"name": "y", "dtype": "f32", "shape": [-1]}]})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("outputs[0].dtype"), HasSubstr("'f32'"),
                             HasSubstr("bfloat16 (bf16)"))));
}

TEST(ModelSignatureTest, JsonRoundTripsThroughTheParser) {
  ModelSignature sig;
  sig.name = "two \"in\"";
  sig.inputs = {{"image", DType::kUInt8, {-1, 3, 224, 224}}, {"count", DType::kInt64, {-1, 1}}};
  sig.outputs = {{"probs", DType::kFloat32, {-1, 10}}};
  auto json = SignatureToJson(sig);
  ASSERT_TRUE(json.ok()) << json.status();
  auto back = ParseModelSignature(*json);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << *json;
  EXPECT_EQ(back->name, sig.name);
  EXPECT_EQ(back->version, "1");
  ASSERT_EQ(back->inputs.size(), 2u);
  EXPECT_EQ(back->inputs[0].dtype, DType::kUInt8);
  EXPECT_THAT(back->inputs[0].shape, ElementsAre(-1, 3, 224, 224));
  EXPECT_EQ(back->inputs[1].name, "count");
  EXPECT_THAT(back->outputs[0].shape, ElementsAre(-1, 10));
}

TEST(ModelSignatureTest, InputShapesListStartsEachInputWithItsName) {
  auto shapes = ParseInputShapes("image=3,224,224, mask=224,224");
  ASSERT_TRUE(shapes.ok()) << shapes.status();
  EXPECT_THAT(shapes->at("image"), ElementsAre(3, 224, 224));
  EXPECT_THAT(shapes->at("mask"), ElementsAre(224, 224));
  EXPECT_THAT(ParseInputShapes("3,224,224"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no NAME=")));
  EXPECT_THAT(ParseInputShapes("x=3,-1"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'x'"), HasSubstr("'-1'"), HasSubstr("positive"))));
  EXPECT_THAT(ParseInputShapes("x=3,x=4"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("twice")));
  EXPECT_THAT(ParseInputShapes(""), StatusIs(absl::StatusCode::kOk));
}

TEST(ModelSignatureTest, InputDtypesAreParsedByName) {
  auto dtypes = ParseInputDtypes("image=uint8,count=int64");
  ASSERT_TRUE(dtypes.ok()) << dtypes.status();
  EXPECT_EQ(dtypes->at("image"), DType::kUInt8);
  EXPECT_EQ(dtypes->at("count"), DType::kInt64);
  EXPECT_THAT(ParseInputDtypes("image=complex64"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'image'"), HasSubstr("complex64"))));
}

}  // namespace
}  // namespace metalserve
