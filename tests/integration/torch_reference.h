// A direct LibTorch forward, for checking what the server returns. Its header
// is torch-free so that tests that speak gRPC can call it.
#ifndef METALSERVE_TESTS_INTEGRATION_TORCH_REFERENCE_H_
#define METALSERVE_TESTS_INTEGRATION_TORCH_REFERENCE_H_

#include <string>
#include <vector>

namespace metalserve::testing {

// Loads `model_path` on CPU and returns forward(input) as floats, where input
// is float32 of `shape`. Throws std::runtime_error on failure.
std::vector<float> ReferenceForward(const std::string& model_path,
                                    const std::vector<float>& input,
                                    const std::vector<int64_t>& shape);

}  // namespace metalserve::testing

#endif  // METALSERVE_TESTS_INTEGRATION_TORCH_REFERENCE_H_
