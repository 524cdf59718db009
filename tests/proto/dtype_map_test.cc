// The datatype table alone: every DType and every wire datatype both ways,
// and unknown wire values refused with an error that names them.
#include "proto/dtype/dtype_map.h"

#include <set>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace metalserve {
namespace {

using ::metalserve::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr DType kServed[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16,
                             DType::kFloat64, DType::kInt64,   DType::kInt32,
                             DType::kUInt8,   DType::kInt8,    DType::kBool};

TEST(DtypeMapTest, EveryDTypeRoundTripsThroughTheNativeEnum) {
  std::set<int> seen;
  for (DType d : kServed) {
    const v1::DataType native = ProtoDataType(d);
    EXPECT_NE(native, v1::DATA_TYPE_UNSPECIFIED) << DTypeName(d);
    EXPECT_TRUE(seen.insert(native).second) << DTypeName(d) << " shares its enum";
    auto back = DTypeFromProto(native);
    ASSERT_TRUE(back.ok()) << DTypeName(d) << ": " << back.status();
    EXPECT_EQ(*back, d) << DTypeName(d);
  }
  EXPECT_EQ(ProtoDataType(DType::kInvalid), v1::DATA_TYPE_UNSPECIFIED);
}

TEST(DtypeMapTest, EveryNativeEnumValueMapsToTheDTypeOfTheSameName) {
  const auto* desc = v1::DataType_descriptor();
  for (int i = 0; i < desc->value_count(); ++i) {
    const auto native = static_cast<v1::DataType>(desc->value(i)->number());
    if (native == v1::DATA_TYPE_UNSPECIFIED) continue;
    auto d = DTypeFromProto(native);
    ASSERT_TRUE(d.ok()) << desc->value(i)->name() << ": " << d.status();
    // DATA_TYPE_FLOAT32 <-> "float32": the names agree, not just the numbers.
    EXPECT_EQ(desc->value(i)->name(), "DATA_TYPE_" + absl::AsciiStrToUpper(DTypeName(*d)));
    EXPECT_EQ(ProtoDataType(*d), native);
  }
}

TEST(DtypeMapTest, UnspecifiedAndUnknownNativeValuesAreErrorsNamingTheValue) {
  EXPECT_THAT(DTypeFromProto(v1::DATA_TYPE_UNSPECIFIED),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("DATA_TYPE_UNSPECIFIED = 0")));
  EXPECT_THAT(DTypeFromProto(static_cast<v1::DataType>(42)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("metalserve.v1.DataType 42 has no dtype")));
}

TEST(DtypeMapTest, EveryDTypeRoundTripsThroughItsKServeDatatype) {
  std::set<std::string> seen;
  for (DType d : kServed) {
    const std::string name(KServeDatatype(d));
    EXPECT_FALSE(name.empty()) << DTypeName(d);
    EXPECT_TRUE(seen.insert(name).second) << name << " named twice";
    auto back = DTypeFromKServe(name);
    ASSERT_TRUE(back.ok()) << name << ": " << back.status();
    EXPECT_EQ(*back, d) << name;
    EXPECT_NE(KServeConfigType(d), inference::TYPE_INVALID) << name;
  }
  EXPECT_EQ(KServeDatatype(DType::kInvalid), "");
  EXPECT_EQ(KServeConfigType(DType::kInvalid), inference::TYPE_INVALID);
}

TEST(DtypeMapTest, KServeNamesAndConfigTypesFollowTheSpecification) {
  EXPECT_EQ(KServeDatatype(DType::kFloat32), "FP32");
  EXPECT_EQ(KServeDatatype(DType::kBFloat16), "BF16");
  EXPECT_EQ(KServeDatatype(DType::kUInt8), "UINT8");
  EXPECT_EQ(KServeConfigType(DType::kBFloat16), inference::TYPE_BF16);
  EXPECT_EQ(KServeConfigType(DType::kInt64), inference::TYPE_INT64);
  EXPECT_EQ(KServeDatatypeList(), "FP32, FP16, BF16, FP64, INT64, INT32, UINT8, INT8, BOOL");
}

TEST(DtypeMapTest, UnknownKServeDatatypesAreErrorsNamingTheValue) {
  for (const char* name : {"fp32", "BYTES", "FP8", ""}) {
    EXPECT_THAT(DTypeFromKServe(name),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr(absl::StrCat("'", name, "'")),
                               HasSubstr("use one of FP32,"))))
        << name;
  }
}

}  // namespace
}  // namespace metalserve
