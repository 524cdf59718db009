// common/tensor: zeros of a signature's spec, as the null runner answers and
// device measurement feeds the model.
#include "common/tensor.h"

#include <string>

#include "gtest/gtest.h"

namespace metalserve {
namespace {

TEST(ZerosOfTest, TakesTheRowsAndCountsOtherFreeDimensionsAsOne) {
  const TensorSpec spec{.name = "x", .dtype = DType::kFloat32, .shape = {-1, 3, -1}};
  const Tensor t = ZerosOf(spec, 5);
  EXPECT_EQ(t.name, "x");
  EXPECT_EQ(t.dtype, DType::kFloat32);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{5, 3, 1}));
  EXPECT_EQ(t.data, std::string(5 * 3 * 1 * 4, '\0'));
  EXPECT_EQ(t.RowBytes() * 5, static_cast<int64_t>(t.data.size()));
}

}  // namespace
}  // namespace metalserve
