// Loads an AOTInductor package from C++, runs it at several batch sizes,
// compares with the eager outputs export_probe.py recorded, and times it.
//   aoti_probe PACKAGE DEVICE C H W REF_PREFIX B1[,B2...]
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>

namespace {
double Now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}
torch::Tensor ReadRaw(const std::string& path, int64_t rows) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const int64_t bytes = in.tellg();
  in.seekg(0);
  auto t = torch::empty({bytes / 4}, torch::kFloat32);
  in.read(static_cast<char*>(t.data_ptr()), bytes);
  return t.reshape({rows, -1});
}
void Sync(const torch::Device& d) {
  if (d.is_cuda()) torch::cuda::synchronize();
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 8) { std::cerr << "usage: see the file comment\n"; return 2; }
  const torch::Device dev(argv[2]);
  const int64_t c = std::stoll(argv[3]), h = std::stoll(argv[4]), w = std::stoll(argv[5]);
  c10::InferenceMode guard;
  double t0 = Now();
  torch::inductor::AOTIModelPackageLoader loader(argv[1]);
  std::cout << "loaded " << argv[1] << " in " << (Now() - t0) * 1e3 << " ms\n";
  for (const auto& [k, v] : loader.get_metadata()) std::cout << "  meta " << k << "=" << v << "\n";
  std::stringstream batches(argv[7]);
  for (std::string item; std::getline(batches, item, ',');) {
    const int64_t b = std::stoll(item);
    auto x = torch::linspace(-1, 1, b * c * h * w).reshape({b, c, h, w}).to(dev);
    auto y = loader.run({x})[0].to(torch::kFloat32).cpu();
    auto ref = ReadRaw(std::string(argv[6]) + "_b" + item + ".bin", b);
    const double diff = (y - ref).abs().max().item<double>();
    const double scale = ref.abs().max().item<double>();
    int iters = 0;
    Sync(dev);
    t0 = Now();
    while (Now() - t0 < 2.0) { loader.run({x}); Sync(dev); ++iters; }
    const double ms = (Now() - t0) * 1e3 / iters;
    std::cout << "batch " << b << " shape " << y.sizes() << " max|diff| " << diff
              << " max|ref| " << scale << " " << ms << " ms " << b * 1e3 / ms << " img/s\n";
  }
  return 0;
}
