// The verification cache (server/runtime/verification_cache.h): on its own
// (keys, files, folders) and through CreateTorchRunner with the real
// tiny_cnn model, where a hit shows as a load without verification forwards.
#include "server/runtime/verification_cache.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/model_config/model_config.h"
#include "server/runtime/torch_runner.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace metalserve {
namespace {

namespace fs = std::filesystem;
using ::metalserve::testing::IsOk;
using ::testing::HasSubstr;

// Collects the WARNING lines glog writes while it is alive.
class WarningSink final : public google::LogSink {
 public:
  WarningSink() { google::AddLogSink(this); }
  ~WarningSink() override { google::RemoveLogSink(this); }
  void send(google::LogSeverity severity, const char*, const char*, int, const struct ::tm*,
            const char* message, size_t len) override {
    if (severity != google::GLOG_WARNING) return;
    absl::MutexLock l(&mu_);
    lines_.emplace_back(message, len);
  }
  std::vector<std::string> Matching(const std::string& part) {
    absl::MutexLock l(&mu_);
    std::vector<std::string> out;
    for (const std::string& line : lines_) {
      if (absl::StrContains(line, part)) out.push_back(line);
    }
    return out;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> lines_;
};

// A fresh folder, removed when the test binary exits.
std::string TempDir() {
  static std::vector<std::unique_ptr<testing::TempDir>> dirs;
  dirs.push_back(std::make_unique<testing::TempDir>("verification_cache_"));
  return dirs.back()->path();
}

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

VerificationKey Key() {
  return VerificationKey{"ab12", "1.13.0", "cpu", "fp32", "full", "1,4", "tolerance=0.001"};
}

TEST(VerificationCacheTest, StoredRecordIsFoundUnderTheSameKey) {
  const VerificationCache cache = VerificationCache::Open(TempDir());
  ASSERT_TRUE(cache.enabled());
  cache.Store(Key(), {"freeze", "full rejected: batch 4 differs"});
  const auto hit = cache.Lookup(Key());
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->level, "freeze");
  EXPECT_EQ(hit->reason, "full rejected: batch 4 differs");
}

TEST(VerificationCacheTest, ChangingAnyKeyFieldMisses) {
  const VerificationCache cache = VerificationCache::Open(TempDir());
  cache.Store(Key(), {"full", "verified"});
  const std::vector<std::function<void(VerificationKey&)>> changes = {
      [](VerificationKey& k) { k.model_sha256 = "ab13"; },
      [](VerificationKey& k) { k.torch_version = "2.6.0"; },
      [](VerificationKey& k) { k.device = "mps"; },
      [](VerificationKey& k) { k.precision = "fp16"; },
      [](VerificationKey& k) { k.optimize = "freeze"; },
      [](VerificationKey& k) { k.batch_sizes = "1,4,8"; },
      [](VerificationKey& k) { k.comparison = "tolerance=0.01"; },
  };
  for (size_t i = 0; i < changes.size(); ++i) {
    VerificationKey k = Key();
    changes[i](k);
    EXPECT_FALSE(cache.Lookup(k).has_value()) << "change " << i;
  }
  EXPECT_TRUE(cache.Lookup(Key()).has_value());
}

TEST(VerificationCacheTest, ModelHashIsOfTheBytesNotThePath) {
  const std::string dir = TempDir();
  Write(dir + "/a.pt", "same bytes");
  Write(dir + "/b.pt", "same bytes");
  Write(dir + "/c.pt", "other bytes");
  // SHA-256("same bytes"), as sha256sum prints it.
  const absl::StatusOr<std::string> a = FileSha256(dir + "/a.pt");
  ASSERT_THAT(a, IsOk());
  EXPECT_EQ(*a, "58100dc8fc06562ce3e578231dc948e083520ee49c4b4ee5a5a28bb4b4003feb");
  EXPECT_EQ(*FileSha256(dir + "/a.pt"), *FileSha256(dir + "/b.pt"));
  EXPECT_NE(*FileSha256(dir + "/a.pt"), *FileSha256(dir + "/c.pt"));
  EXPECT_FALSE(FileSha256(dir + "/missing.pt").ok());
}

TEST(VerificationCacheTest, CorruptFileIsIgnoredWithOneLogLine) {
  const VerificationCache cache = VerificationCache::Open(TempDir());
  cache.Store(Key(), {"full", "verified"});
  Write(cache.PathFor(Key()), "metalserve verification cache v1\ngarbage\n");
  WarningSink sink;
  EXPECT_FALSE(cache.Lookup(Key()).has_value());
  EXPECT_THAT(sink.Matching("ignored (corrupt"), ::testing::SizeIs(1));
}

TEST(VerificationCacheTest, FolderThatCannotBeCreatedDisablesTheCacheWithOneLogLine) {
  const std::string dir = TempDir();
  Write(dir + "/file", "a file, not a folder");
  WarningSink sink;
  const VerificationCache cache = VerificationCache::Open(dir + "/file/cache");
  EXPECT_FALSE(cache.enabled());
  cache.Store(Key(), {"full", "verified"});
  EXPECT_FALSE(cache.Lookup(Key()).has_value());
  EXPECT_THAT(sink.Matching("verification cache off"), ::testing::SizeIs(1));
}

TEST(VerificationCacheTest, DefaultFolderFollowsXdgCacheHomeThenHome) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const std::string saved = xdg != nullptr ? xdg : "";
  setenv("XDG_CACHE_HOME", "/x/cache", 1);
  EXPECT_EQ(DefaultVerificationCacheDir(), "/x/cache/metalserve");
  unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(DefaultVerificationCacheDir(),
            absl::StrCat(std::getenv("HOME"), "/.cache/metalserve"));
  if (xdg != nullptr) setenv("XDG_CACHE_HOME", saved.c_str(), 1);
}

// --- through the runtime, with the real tiny_cnn -----------------------------

struct Load {
  int verify_forwards = 0;
  std::map<std::string, double> phases;
  std::unique_ptr<Runner> runner;
};

RuntimeOptions TinyCnn(const std::string& cache_dir) {
  RuntimeOptions o;
  o.model_path = absl::StrCat(METALSERVE_MODELS_DIR, "/tiny_cnn.pt");
  o.signature_codec = ModelConfigSignatureCodec();
  o.device = "cpu";
  o.threads = 2;
  o.optimize = "full";
  o.warmup_batch_sizes = {1, 4};
  o.cache_dir = cache_dir;
  return o;
}

Load LoadCounting(RuntimeOptions o) {
  Load load;
  auto verify = std::make_shared<std::atomic<int>>(0);
  o.forward_observer = [verify](ForwardPurpose p, int64_t) {
    if (p == ForwardPurpose::kVerify) ++*verify;
  };
  o.on_load_phase = [&load](const std::string& phase, absl::Duration took) {
    load.phases[phase] = absl::ToDoubleSeconds(took);
  };
  auto runner = CreateTorchRunner(o);
  EXPECT_THAT(runner, IsOk());
  if (runner.ok()) load.runner = *std::move(runner);
  load.verify_forwards = *verify;
  return load;
}

TEST(VerificationCacheRuntimeTest, SecondLoadReusesTheVerdictWithoutVerifying) {
  const std::string dir = TempDir();
  const Load first = LoadCounting(TinyCnn(dir));
  ASSERT_NE(first.runner, nullptr);
  EXPECT_GT(first.verify_forwards, 0);
  const Load second = LoadCounting(TinyCnn(dir));
  ASSERT_NE(second.runner, nullptr);
  EXPECT_EQ(second.verify_forwards, 0);
  EXPECT_EQ(second.runner->info().optimization, first.runner->info().optimization);
  EXPECT_THAT(second.runner->info().optimization_reason,
              HasSubstr(absl::StrCat("(cached in ", dir)));
  for (const char* phase : {"read", "signature", "optimize", "verify", "warmup"}) {
    EXPECT_TRUE(second.phases.count(phase)) << phase;
  }
  EXPECT_EQ(second.phases.at("verify"), 0.0);
  EXPECT_GT(first.phases.at("verify"), 0.0);
}

TEST(VerificationCacheRuntimeTest, ACopyOfTheModelElsewhereHitsByContent) {
  const std::string dir = TempDir();
  const std::string models = TempDir();
  const fs::path src = fs::path(METALSERVE_MODELS_DIR);
  fs::copy_file(src / "tiny_cnn.pt", fs::path(models) / "copy.pt");
  fs::copy_file(src / "tiny_cnn.json", fs::path(models) / "copy.json");
  ASSERT_GT(LoadCounting(TinyCnn(dir)).verify_forwards, 0);
  RuntimeOptions copy = TinyCnn(dir);
  copy.model_path = models + "/copy.pt";
  EXPECT_EQ(LoadCounting(copy).verify_forwards, 0);
}

TEST(VerificationCacheRuntimeTest, ChangedSettingsMissAndVerifyAgain) {
  const std::string dir = TempDir();
  ASSERT_GT(LoadCounting(TinyCnn(dir)).verify_forwards, 0);
  std::vector<RuntimeOptions> changed(5, TinyCnn(dir));
  changed[0].warmup_batch_sizes = {1, 2};
  changed[1].precision = "bf16";
  changed[2].optimize = "freeze";
  changed[3].verify_tolerance = 1e-2;
  changed[4].cudnn_benchmark = false;  // cuDNN's choice of kernels differs
  for (size_t i = 0; i < changed.size(); ++i) {
    EXPECT_GT(LoadCounting(changed[i]).verify_forwards, 0) << "change " << i;
  }
}

TEST(VerificationCacheRuntimeTest, CorruptCacheFileIsIgnoredAndReplaced) {
  const std::string dir = TempDir();
  ASSERT_GT(LoadCounting(TinyCnn(dir)).verify_forwards, 0);
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path().string());
  ASSERT_EQ(files.size(), 1u);
  Write(files[0], "\x01\x02 not a cache file");
  {
    WarningSink sink;
    EXPECT_GT(LoadCounting(TinyCnn(dir)).verify_forwards, 0);
    EXPECT_THAT(sink.Matching("ignored (corrupt"), ::testing::SizeIs(1));
  }
  EXPECT_EQ(LoadCounting(TinyCnn(dir)).verify_forwards, 0);  // rewritten
}

TEST(VerificationCacheRuntimeTest, UnusableFolderOnlyDisablesTheCache) {
  const std::string dir = TempDir();
  Write(dir + "/file", "a file, not a folder");
  WarningSink sink;
  const Load load = LoadCounting(TinyCnn(dir + "/file/cache"));
  ASSERT_NE(load.runner, nullptr);
  EXPECT_GT(load.verify_forwards, 0);
  EXPECT_THAT(sink.Matching("verification cache off"), ::testing::SizeIs(1));
}

}  // namespace
}  // namespace metalserve
