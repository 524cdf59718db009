// The AotiRunner's load, verification and request path (aoti_runner.cc),
// where LibTorch has no AOTInductor: a package is stood in for by tiny_cnn's
// TorchScript module behind the package interface (SetPackageLoaderForTest),
// so what is tested is everything but AOTIModelPackageLoader itself:
// dispatch by extension, device and signature checks, verification against
// the TorchScript model beside the package, padding to the package's lowest
// batch, refusal above its largest. tests/runtime/aoti_serve_test.py covers
// the real loader on a LibTorch that has it.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <torch/script.h>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/model_config/model_config.h"
#include "server/runtime/aoti_package.h"
#include "server/runtime/torch_runner.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace metalserve {
namespace {

namespace fs = std::filesystem;
using ::metalserve::testing::StatusIs;
using ::testing::HasSubstr;
using torch_internal::CompiledPackage;

// A folder holding tiny_cnn.cpu.pt2 (a placeholder file), tiny_cnn.json and,
// unless `with_torchscript` is false, tiny_cnn.pt.
class PackageDir {
 public:
  explicit PackageDir(bool with_torchscript) {
    const std::string models = METALSERVE_MODELS_DIR;
    fs::copy_file(models + "/tiny_cnn.json", dir_.File("tiny_cnn.json"));
    if (with_torchscript) fs::copy_file(models + "/tiny_cnn.pt", dir_.File("tiny_cnn.pt"));
    std::ofstream(dir_.File("tiny_cnn.cpu.pt2")) << "placeholder";
  }
  std::string package() const { return dir_.File("tiny_cnn.cpu.pt2"); }

 private:
  testing::TempDir dir_{"aoti_runner_test_"};
};

struct FakePackage {
  double scale = 1.0;     // multiplies the outputs: != 1 makes it wrong
  int64_t min_batch = 1;
  int64_t max_batch = 0;
  std::shared_ptr<std::atomic<int64_t>> last_rows = std::make_shared<std::atomic<int64_t>>(0);
};

// Installs tiny_cnn's TorchScript forward as every package's forward.
void InstallFake(const FakePackage& fake) {
  torch_internal::SetPackageLoaderForTest(
      [fake](const std::string&, const c10::Device&) -> absl::StatusOr<CompiledPackage> {
        auto module = std::make_shared<torch::jit::Module>(
            torch::jit::load(absl::StrCat(METALSERVE_MODELS_DIR, "/tiny_cnn.pt")));
        CompiledPackage p;
        p.owner = module;
        p.device_type = "cpu";
        p.min_batch = fake.min_batch;
        p.max_batch = fake.max_batch;
        p.forward = [module, fake](std::vector<c10::IValue> in) -> c10::IValue {
          *fake.last_rows = in[0].toTensor().size(0);
          return module->forward(std::move(in)).toTensor() * fake.scale;
        };
        return p;
      });
}

// max |a - b| / max |b| over two float32 tensors of the same size.
double MaxRelative(const Tensor& a, const Tensor& b) {
  const auto* x = reinterpret_cast<const float*>(a.data.data());
  const auto* y = reinterpret_cast<const float*>(b.data.data());
  double diff = 0, scale = 1e-12;
  for (size_t i = 0; i < b.data.size() / sizeof(float); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(x[i] - y[i])));
    scale = std::max(scale, static_cast<double>(std::abs(y[i])));
  }
  return a.data.size() == b.data.size() ? diff / scale : 1e9;
}

// Writes <package>.expected as export.py does (a torch.save'd tuple of
// (inputs, outputs) per batch size), from tiny_cnn's TorchScript outputs
// times `scale`.
void WriteExpected(const std::string& package, double scale) {
  torch::jit::Module m = torch::jit::load(absl::StrCat(METALSERVE_MODELS_DIR, "/tiny_cnn.pt"));
  std::vector<c10::IValue> records;
  for (int64_t b : {1, 3}) {
    torch::manual_seed(b);
    const at::Tensor x = torch::rand({b, 3, 8, 8});
    const at::Tensor y = m.forward({x}).toTensor() * scale;
    records.push_back(c10::ivalue::Tuple::create(
        {c10::ivalue::Tuple::create({x}), c10::ivalue::Tuple::create({y})}));
  }
  const std::vector<char> bytes = torch::jit::pickle_save(c10::ivalue::Tuple::create(records));
  std::ofstream(package + ".expected", std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

class AotiRunnerTest : public ::testing::Test {
 protected:
  void TearDown() override { torch_internal::SetPackageLoaderForTest(nullptr); }

  static RuntimeOptions Options(const std::string& package) {
    RuntimeOptions o;
    o.model_path = package;
    o.signature_codec = ModelConfigSignatureCodec();
    o.threads = 2;
    o.warmup_batch_sizes = {1, 3};
    return o;
  }
  static RuntimeOptions TorchScriptOptions() {
    RuntimeOptions o = Options(absl::StrCat(METALSERVE_MODELS_DIR, "/tiny_cnn.pt"));
    o.device = "cpu";
    o.optimize = "none";
    return o;
  }
  static Tensor Rows(int64_t rows) {
    Tensor t;
    t.name = "input";
    t.dtype = DType::kFloat32;
    t.shape = {rows, 3, 8, 8};
    std::vector<float> v(static_cast<size_t>(rows * 3 * 8 * 8));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 17) / 17.0f - 0.5f;
    t.data.assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
    return t;
  }
};

TEST_F(AotiRunnerTest, PackageIsVerifiedAgainstItsTorchScriptModelAndServesItsOutputs) {
  PackageDir dir(/*with_torchscript=*/true);
  InstallFake(FakePackage{});
  auto package = CreateTorchRunner(Options(dir.package()));
  ASSERT_TRUE(package.ok()) << package.status();
  EXPECT_EQ((*package)->info().device, "cpu");  // from the file name, with device auto
  EXPECT_EQ((*package)->info().optimization, "aoti");
  EXPECT_THAT((*package)->info().optimization_reason,
              HasSubstr("verified against its TorchScript model"));
  auto torchscript = CreateTorchRunner(TorchScriptOptions());
  ASSERT_TRUE(torchscript.ok()) << torchscript.status();
  auto got = (*package)->Run({Rows(3)});
  auto want = (*torchscript)->Run({Rows(3)});
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ((*got)[0].shape, (*want)[0].shape);
  EXPECT_EQ((*got)[0].data, (*want)[0].data);
}

TEST_F(AotiRunnerTest, PackageThatDiffersFromItsTorchScriptModelIsRefused) {
  PackageDir dir(/*with_torchscript=*/true);
  InstallFake(FakePackage{.scale = 1.1});
  EXPECT_THAT(CreateTorchRunner(Options(dir.package())),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("does not match its TorchScript model")));
}

TEST_F(AotiRunnerTest, WithoutTorchScriptOnlyBatchInvarianceIsCheckedAndSaidSo) {
  PackageDir dir(/*with_torchscript=*/false);
  InstallFake(FakePackage{.scale = 1.1});  // no reference to tell it is wrong
  auto package = CreateTorchRunner(Options(dir.package()));
  ASSERT_TRUE(package.ok()) << package.status();
  EXPECT_THAT((*package)->info().optimization_reason, HasSubstr("batch invariance only"));
}

TEST_F(AotiRunnerTest, WithoutTorchScriptThePackageIsVerifiedAgainstRecordedOutputs) {
  PackageDir dir(/*with_torchscript=*/false);
  WriteExpected(dir.package(), 1.0);
  InstallFake(FakePackage{});
  auto package = CreateTorchRunner(Options(dir.package()));
  ASSERT_TRUE(package.ok()) << package.status();
  EXPECT_THAT((*package)->info().optimization_reason,
              HasSubstr("verified against the eager outputs recorded at export"));
}

TEST_F(AotiRunnerTest, PackageThatDiffersFromItsRecordedOutputsIsRefused) {
  PackageDir dir(/*with_torchscript=*/false);
  WriteExpected(dir.package(), 1.0);
  InstallFake(FakePackage{.scale = 1.1});
  EXPECT_THAT(CreateTorchRunner(Options(dir.package())),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("does not match the eager outputs recorded at export")));
}

TEST_F(AotiRunnerTest, BatchBelowThePackagesLowestIsPaddedAndCut) {
  PackageDir dir(/*with_torchscript=*/true);
  FakePackage fake{.min_batch = 2};
  InstallFake(fake);
  auto package = CreateTorchRunner(Options(dir.package()));
  ASSERT_TRUE(package.ok()) << package.status();
  auto torchscript = CreateTorchRunner(TorchScriptOptions());
  ASSERT_TRUE(torchscript.ok()) << torchscript.status();
  auto got = (*package)->Run({Rows(1)});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(fake.last_rows->load(), 2);  // the package saw a padded batch
  EXPECT_EQ((*got)[0].shape, (std::vector<int64_t>{1, 10}));
  // Not bit-equal: a batch of 2 may take another CPU kernel than a batch of 1.
  EXPECT_LE(MaxRelative((*got)[0], (*(*torchscript)->Run({Rows(1)}))[0]), 1e-5);
}

TEST_F(AotiRunnerTest, BatchAboveThePackagesLargestIsRefusedAtLoadAndRun) {
  PackageDir dir(/*with_torchscript=*/true);
  InstallFake(FakePackage{.max_batch = 4});
  RuntimeOptions o = Options(dir.package());
  o.warmup_batch_sizes = {1, 8};
  EXPECT_THAT(CreateTorchRunner(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("exceeds the largest batch")));
  auto package = CreateTorchRunner(Options(dir.package()));
  ASSERT_TRUE(package.ok()) << package.status();
  EXPECT_THAT((*package)->Run({Rows(5)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("exceeds the package's largest batch 4")));
}

TEST_F(AotiRunnerTest, PackageWithoutItsSignatureSidecarIsRefusedNamingIt) {
  PackageDir dir(/*with_torchscript=*/true);
  InstallFake(FakePackage{});
  fs::remove(fs::path(dir.package()).parent_path() / "tiny_cnn.json");
  EXPECT_THAT(CreateTorchRunner(Options(dir.package())),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("tiny_cnn.json")));
}

TEST_F(AotiRunnerTest, PackageIsRefusedNamingTheFileWhenTheRuntimeLacksAotInductor) {
  if (torch_internal::HaveAotInductor()) GTEST_SKIP() << "this runtime has AOTInductor";
  PackageDir dir(/*with_torchscript=*/true);
  EXPECT_THAT(CreateTorchRunner(Options(dir.package())),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       ::testing::AllOf(HasSubstr(dir.package()),
                                        HasSubstr("lacks AOTInductor"))));
}

}  // namespace
}  // namespace metalserve
