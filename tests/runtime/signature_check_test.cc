// The signature is checked against the model at load: real TorchScript
// models from models/export.py (two_in_two_out, dict_out, tiny_cnn), with
// signatures written by each test into its own folder. Torch-free: the test
// sees only Runner and project tensors.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/model_config/model_config.h"
#include "server/runtime/model_signature.h"
#include "server/runtime/torch_runner.h"
#include "tests/testing/status_matchers.h"

namespace metalserve {
namespace {

namespace fs = std::filesystem;
using ::metalserve::testing::IsOk;
using ::metalserve::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kTwoInputs[] = R"("inputs": [
    {"name": "image", "dtype": "float32", "shape": [-1, 3]},
    {"name": "count", "dtype": "int64", "shape": [-1, 1]}])";

// A fresh folder holding a copy of the exported `model` (and no sidecar).
std::string ModelCopy(const std::string& model) {
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path dir = fs::path(::testing::TempDir()) /
                       absl::StrCat("sigtest_", t->test_suite_name(), "_", t->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path pt = dir / (model + ".pt");
  fs::copy_file(fs::path(METALSERVE_MODELS_DIR) / (model + ".pt"), pt);
  return pt.string();
}

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

RuntimeOptions Options(const std::string& model_path) {
  RuntimeOptions o;
  o.model_path = model_path;
  o.signature_codec = ModelConfigSignatureCodec();
  o.device = "cpu";
  o.threads = 1;
  o.optimize = "none";
  o.warmup_batch_sizes = {1};
  return o;
}

// two_in_two_out copied with `signature` as its sidecar.
RuntimeOptions TwoInTwoOut(const std::string& signature) {
  const std::string pt = ModelCopy("two_in_two_out");
  Write(DefaultSignaturePath(pt), absl::StrCat("{", signature, "}"));
  return Options(pt);
}

template <typename T>
Tensor Make(const std::string& name, DType dtype, std::vector<int64_t> shape,
            const std::vector<T>& values) {
  Tensor t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data.assign(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
  return t;
}

template <typename T>
std::vector<T> Values(const Tensor& t) {
  std::vector<T> v(t.data.size() / sizeof(T));
  std::memcpy(v.data(), t.data.data(), t.data.size());
  return v;
}

TEST(SignatureCheckTest, SwappedInputsInJsonStillBindByName) {
  auto runner = CreateTorchRunner(TwoInTwoOut(R"("inputs": [
      {"name": "count", "dtype": "int64", "shape": [-1, 1]},
      {"name": "image", "dtype": "float32", "shape": [-1, 3]}],
    "outputs": [{"name": "scaled", "dtype": "float32", "shape": [-1, 3]},
                {"name": "next", "dtype": "int64", "shape": [-1, 1]}])"));
  ASSERT_THAT(runner, IsOk());
  const ModelInfo& info = (*runner)->info();
  ASSERT_EQ(info.inputs.size(), 2u);
  EXPECT_EQ(info.inputs[0].name, "image");  // forward's order
  EXPECT_EQ(info.inputs[1].name, "count");
  auto out = (*runner)->Run({Make<float>("image", DType::kFloat32, {1, 3}, {1.5f, 2.f, -3.f}),
                             Make<int64_t>("count", DType::kInt64, {1, 1}, {4})});
  ASSERT_THAT(out, IsOk());
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[0].name, "scaled");
  EXPECT_THAT(Values<float>((*out)[0]), ElementsAre(6.f, 8.f, -12.f));
  EXPECT_EQ((*out)[1].name, "next");
  EXPECT_THAT(Values<int64_t>((*out)[1]), ElementsAre(5));
}

TEST(SignatureCheckTest, OutputCountMismatchStopsTheLoad) {
  EXPECT_THAT(CreateTorchRunner(TwoInTwoOut(absl::StrCat(kTwoInputs, R"(,
                  "outputs": [{"name": "scaled", "dtype": "float32", "shape": [-1, 3]}])"))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("outputs: declared 1 output(s), model gives 2")));
}

TEST(SignatureCheckTest, OutputDimMismatchNamesFieldDeclaredAndActual) {
  EXPECT_THAT(CreateTorchRunner(TwoInTwoOut(absl::StrCat(kTwoInputs, R"(,
                  "outputs": [{"name": "scaled", "dtype": "float32", "shape": [-1, 10]},
                              {"name": "next", "dtype": "int64", "shape": [-1, 1]}])"))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("outputs[0].shape[1]: declared 10, model gives 3")));
}

TEST(SignatureCheckTest, OutputDtypeAndRankMismatchesStopTheLoad) {
  EXPECT_THAT(CreateTorchRunner(TwoInTwoOut(absl::StrCat(kTwoInputs, R"(,
                  "outputs": [{"name": "scaled", "dtype": "float32", "shape": [-1, 3]},
                              {"name": "next", "dtype": "float32", "shape": [-1, 1]}])"))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("outputs[1].dtype: declared float32, model gives int64")));
  EXPECT_THAT(CreateTorchRunner(TwoInTwoOut(absl::StrCat(kTwoInputs, R"(,
                  "outputs": [{"name": "scaled", "dtype": "float32", "shape": [-1, 3, 1]},
                              {"name": "next", "dtype": "int64", "shape": [-1, 1]}])"))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("outputs[0].shape: declared [-1,3,1] (rank 3)"),
                             HasSubstr("model gives [2,3] (rank 2)"))));
}

TEST(SignatureCheckTest, InputNameOrCountThatForwardLacksStopsTheLoad) {
  constexpr char kOutputs[] = R"(,
      "outputs": [{"name": "scaled", "dtype": "float32", "shape": [-1, 3]},
                  {"name": "next", "dtype": "int64", "shape": [-1, 1]}])";
  EXPECT_THAT(CreateTorchRunner(TwoInTwoOut(absl::StrCat(R"("inputs": [
                  {"name": "image", "dtype": "float32", "shape": [-1, 3]},
                  {"name": "counts", "dtype": "int64", "shape": [-1, 1]}])", kOutputs))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("inputs[1].name: declared \"counts\", model's forward "
                                 "takes (image, count)")));
  EXPECT_THAT(CreateTorchRunner(TwoInTwoOut(absl::StrCat(R"("inputs": [
                  {"name": "image", "dtype": "float32", "shape": [-1, 3]}])", kOutputs))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("inputs: declared 1 input(s), model's forward takes 2 "
                                 "(image, count)")));
}

TEST(SignatureCheckTest, InputShapeTheModelRefusesFailsAtTheProbe) {
  const std::string pt = ModelCopy("tiny_cnn");
  Write(DefaultSignaturePath(pt), R"({
      "inputs": [{"name": "input", "dtype": "float32", "shape": [-1, 3, 8]}],
      "outputs": [{"name": "logits", "dtype": "float32", "shape": [-1, 10]}]})");
  EXPECT_THAT(CreateTorchRunner(Options(pt)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("probe forward at batch 2"),
                             HasSubstr("input float32 [-1,3,8]"))));
}

TEST(SignatureCheckTest, DictOutputsAreBoundByKey) {
  const std::string pt = ModelCopy("dict_out");
  // Keys declared in the other order than the model builds its dict.
  Write(DefaultSignaturePath(pt), R"({
      "inputs": [{"name": "logits", "dtype": "float32", "shape": [-1, 4]}],
      "outputs": [{"name": "top", "dtype": "int64", "shape": [-1, 1]},
                  {"name": "probs", "dtype": "float32", "shape": [-1, 4]}]})");
  auto runner = CreateTorchRunner(Options(pt));
  ASSERT_THAT(runner, IsOk());
  auto out = (*runner)->Run({Make<float>("logits", DType::kFloat32, {1, 4}, {0, 3, 1, 0})});
  ASSERT_THAT(out, IsOk());
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[0].name, "top");
  EXPECT_THAT(Values<int64_t>((*out)[0]), ElementsAre(1));
  EXPECT_EQ((*out)[1].name, "probs");
  EXPECT_EQ((*out)[1].shape, (std::vector<int64_t>{1, 4}));

  Write(DefaultSignaturePath(pt), R"({
      "inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 4]}],
      "outputs": [{"name": "probs", "dtype": "float32", "shape": [-1, 4]},
                  {"name": "best", "dtype": "int64", "shape": [-1, 1]}]})");
  EXPECT_THAT(CreateTorchRunner(Options(pt)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("outputs[1].name: declared \"best\", model's dict has "
                                 "keys (probs, top)")));
}

TEST(SignatureCheckTest, MissingSignatureWithoutShapesSaysWhatToPass) {
  const std::string pt = ModelCopy("two_in_two_out");
  EXPECT_THAT(CreateTorchRunner(Options(pt)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(absl::StrCat("no signature file ",
                                                    DefaultSignaturePath(pt))),
                             HasSubstr("--input_shape=image=3,224,224,count=3,224,224"),
                             HasSubstr("docs/signature.md"))));
  RuntimeOptions o = Options(pt);
  o.input_shapes = {{"image", {3}}, {"mask", {1}}};
  EXPECT_THAT(CreateTorchRunner(o),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("mask"), HasSubstr("(image, count)"))));
}

TEST(SignatureCheckTest, OptionsWithoutASignatureCodecAreRejected) {
  RuntimeOptions o = Options(ModelCopy("two_in_two_out"));
  o.signature_codec = SignatureCodec();
  EXPECT_THAT(CreateTorchRunner(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("signature_codec is not set")));
}

TEST(SignatureCheckTest, InfersSignatureFromSchemaAndProbeAndWritesIt) {
  RuntimeOptions o = Options(ModelCopy("two_in_two_out"));
  o.input_shapes = {{"image", {3}}, {"count", {1}}};
  o.input_dtypes = {{"count", DType::kInt64}};
  auto runner = CreateTorchRunner(o);
  ASSERT_THAT(runner, IsOk());
  const ModelInfo& info = (*runner)->info();
  EXPECT_EQ(info.name, "two_in_two_out");
  ASSERT_EQ(info.outputs.size(), 2u);
  EXPECT_EQ(info.outputs[0].name, "output0");
  EXPECT_EQ(info.outputs[0].shape, (std::vector<int64_t>{-1, 3}));
  EXPECT_EQ(info.outputs[1].dtype, DType::kInt64);

  auto written = ReadModelSignature(DefaultSignaturePath(o.model_path));
  ASSERT_THAT(written, IsOk());
  ASSERT_EQ(written->inputs.size(), 2u);
  EXPECT_EQ(written->inputs[1].name, "count");
  EXPECT_EQ(written->inputs[1].dtype, DType::kInt64);
  EXPECT_EQ(written->inputs[0].shape, (std::vector<int64_t>{-1, 3}));
  EXPECT_EQ(written->outputs[1].shape, (std::vector<int64_t>{-1, 1}));
  // The written file is what the next start reads and checks.
  EXPECT_THAT(CreateTorchRunner(Options(o.model_path)), IsOk());
}

TEST(SignatureCheckTest, InfersDictOutputNamesFromKeysWithoutWriting) {
  RuntimeOptions o = Options(ModelCopy("dict_out"));
  o.input_shapes = {{"x", {4}}};
  o.write_inferred_signature = false;
  auto runner = CreateTorchRunner(o);
  ASSERT_THAT(runner, IsOk());
  const ModelInfo& info = (*runner)->info();
  ASSERT_EQ(info.outputs.size(), 2u);
  EXPECT_EQ(info.outputs[0].name, "probs");
  EXPECT_EQ(info.outputs[1].name, "top");
  EXPECT_FALSE(fs::exists(DefaultSignaturePath(o.model_path)));
}

}  // namespace
}  // namespace metalserve
