#include "server/service/tensor_codec.h"

#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace metalserve {
namespace {

using ::metalserve::testing::IsOk;
using ::metalserve::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

const std::vector<TensorSpec> kSpecs = {
    {"image", DType::kFloat32, {-1, 3, 2, 2}},
    {"scale", DType::kFloat32, {-1, 1}},
};

std::string Bytes(int64_t n) { return std::string(static_cast<size_t>(n), '\0'); }

RawInput Image(int64_t rows, std::string* storage) {
  *storage = Bytes(rows * 12 * 4);
  return {"image", DType::kFloat32, "DATA_TYPE_FLOAT32", {rows, 3, 2, 2}, *storage};
}
RawInput Scale(int64_t rows, std::string* storage) {
  *storage = Bytes(rows * 4);
  return {"scale", DType::kFloat32, "DATA_TYPE_FLOAT32", {rows, 1}, *storage};
}

TEST(ValidateInputsTest, AcceptsInputsInAnyOrderAndReturnsModelOrder) {
  std::string a, b;
  auto v = ValidateInputs({Scale(2, &b), Image(2, &a)}, kSpecs);
  ASSERT_THAT(v, IsOk());
  EXPECT_EQ((*v)[0].shape.size(), 4u);
  EXPECT_EQ((*v)[1].shape.size(), 2u);
}

TEST(ValidateInputsTest, RefusesEmptyRequest) {
  EXPECT_THAT(ValidateInputs({}, kSpecs),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("inputs is empty"), HasSubstr("'image'"))));
}

TEST(ValidateInputsTest, RefusesUnknownName) {
  std::string a, b;
  RawInput bad = Image(1, &a);
  bad.name = "pixels";
  EXPECT_THAT(ValidateInputs({bad, Scale(1, &b)}, kSpecs),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("inputs[0].name 'pixels' is not an input")));
}

TEST(ValidateInputsTest, RefusesMissingAndDuplicateInputs) {
  std::string a, b;
  EXPECT_THAT(ValidateInputs({Image(1, &a)}, kSpecs),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lacks 'scale'")));
  EXPECT_THAT(ValidateInputs({Image(1, &a), Image(1, &b)}, kSpecs),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'image' appears more than once")));
}

TEST(ValidateInputsTest, RefusesWrongDtypeNamingBoth) {
  std::string a, b;
  RawInput bad = Image(1, &a);
  bad.dtype = DType::kFloat16;
  EXPECT_THAT(ValidateInputs({bad, Scale(1, &b)}, kSpecs),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("dtype is float16"), HasSubstr("expects float32"))));
}

TEST(ValidateInputsTest, RefusesWrongRankAndDimension) {
  std::string a, b;
  RawInput rank = Image(1, &a);
  rank.shape = {1, 12};
  EXPECT_THAT(ValidateInputs({rank, Scale(1, &b)}, kSpecs),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("has rank 2")));
  RawInput dim = Image(1, &a);
  dim.shape = {1, 4, 2, 2};
  EXPECT_THAT(ValidateInputs({dim, Scale(1, &b)}, kSpecs),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("shape[1] = 4; the model expects 3")));
}

TEST(ValidateInputsTest, RefusesByteLengthMismatch) {
  std::string a, b;
  RawInput bad = Image(1, &a);
  a.pop_back();
  bad.data = a;
  EXPECT_THAT(ValidateInputs({bad, Scale(1, &b)}, kSpecs),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("data has 47 bytes; shape [1,3,2,2] of float32 needs 48")));
}

TEST(ValidateInputsTest, RefusesNegativeZeroAndOverflowingShapes) {
  std::string a, b;
  RawInput neg = Image(1, &a);
  neg.shape = {-1, 3, 2, 2};
  EXPECT_THAT(ValidateInputs({neg, Scale(1, &b)}, kSpecs),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("= -1 is negative")));
  RawInput zero = Image(1, &a);
  zero.shape = {0, 3, 2, 2};
  EXPECT_THAT(ValidateInputs({zero, Scale(1, &b)}, kSpecs),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("batch dimension must be >= 1")));
  const std::vector<TensorSpec> open = {{"x", DType::kFloat32, {-1, -1, -1}}};
  const int64_t big = std::numeric_limits<int64_t>::max() / 2;
  RawInput huge{"x", DType::kFloat32, "", {big, big, 4}, a};
  EXPECT_THAT(ValidateInputs({huge}, open),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overflows int64")));
  RawInput bytes_overflow{"x", DType::kFloat32, "", {1, big, 1}, a};
  EXPECT_THAT(ValidateInputs({bytes_overflow}, open),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overflows int64")));
}

TEST(ValidateInputsTest, RefusesInputsWithDifferentRows) {
  std::string a, b;
  EXPECT_THAT(ValidateInputs({Image(2, &a), Scale(3, &b)}, kSpecs),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("same batch dimension")));
}

}  // namespace
}  // namespace metalserve
