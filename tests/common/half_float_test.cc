#include "common/half_float.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace metalserve {
namespace {

TEST(HalfFloatTest, ExactValuesRoundTrip) {
  for (float f : {0.0f, 1.0f, -2.5f, 0.099975586f, 65504.0f, -65504.0f}) {
    EXPECT_EQ(HalfToFloat(FloatToHalf(f)), f) << f;
  }
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
}

TEST(HalfFloatTest, SubnormalsOverflowAndNan) {
  const float smallest = std::ldexp(1.0f, -24);  // the smallest FP16 subnormal
  EXPECT_EQ(FloatToHalf(smallest), 0x0001);
  EXPECT_EQ(HalfToFloat(0x0001), smallest);
  EXPECT_EQ(HalfToFloat(0x8001), -smallest);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -26)), 0x0000);  // below half of it: zero
  EXPECT_EQ(FloatToHalf(1e6f), 0x7c00);                  // overflow: infinity
  EXPECT_TRUE(std::isinf(HalfToFloat(0xfc00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(HalfFloatTest, RoundsToNearestEven) {
  // 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: even (1) wins.
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3 x 2^-11 lies halfway between 1 + 2^-10 and 1 + 2^-9: even (0x3c02).
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
}

TEST(HalfFloatTest, BFloat16KeepsTheFloatsTopBits) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(BFloat16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(-3.5f)), -3.5f);
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::nanf("")))));
}

}  // namespace
}  // namespace metalserve
