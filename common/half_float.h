// IEEE 754 half precision (FP16) and bfloat16 (BF16) to and from float, as
// the KServe codecs and the load-test client read and write them. Rounding
// to the nearest even; NaN stays NaN, overflow becomes infinity, halves
// below the smallest subnormal become signed zero.
//
// Thread-safety: pure functions.
#ifndef METALSERVE_COMMON_HALF_FLOAT_H_
#define METALSERVE_COMMON_HALF_FLOAT_H_

#include <cstdint>

namespace metalserve {

uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);
uint16_t FloatToBFloat16(float f);
float BFloat16ToFloat(uint16_t b);

}  // namespace metalserve

#endif  // METALSERVE_COMMON_HALF_FLOAT_H_
