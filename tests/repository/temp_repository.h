// A model repository in a fresh temporary folder for one test, removed at
// the end. Writes config.json files and empty model.pt placeholders (the
// scan never opens a model file).
#ifndef METALSERVE_TESTS_REPOSITORY_TEMP_REPOSITORY_H_
#define METALSERVE_TESTS_REPOSITORY_TEMP_REPOSITORY_H_

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace metalserve::testing {

class TempRepository {
 public:
  TempRepository() {
    static std::atomic<int> counter{0};
    root_ = std::filesystem::path(::testing::TempDir()) /
            absl::StrCat("metalserve_repo_", getpid(), "_", counter++);
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
  }
  ~TempRepository() { std::filesystem::remove_all(root_); }
  TempRepository(const TempRepository&) = delete;
  TempRepository& operator=(const TempRepository&) = delete;

  std::string root() const { return root_.string(); }
  std::string Path(const std::string& rel) const { return (root_ / rel).string(); }

  // Writes `text` to root/rel, creating folders.
  void Write(const std::string& rel, const std::string& text) const {
    const std::filesystem::path path = root_ / rel;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }
  void Mkdir(const std::string& rel) const { std::filesystem::create_directories(root_ / rel); }
  // root/<model>/config.json with a one-input signature and `extra` keys.
  void WriteConfig(const std::string& model, const std::string& extra = "") const {
    Write(model + "/config.json",
          absl::StrCat(R"({"inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 4]}],)",
                       R"("outputs": [{"name": "y", "dtype": "float32", "shape": [-1, 4]}])",
                       extra.empty() ? "" : ", ", extra, "}"));
  }
  void WriteVersion(const std::string& model, int64_t version) const {
    Write(absl::StrCat(model, "/", version, "/model.pt"), "placeholder");
  }

 private:
  std::filesystem::path root_;
};

}  // namespace metalserve::testing

#endif  // METALSERVE_TESTS_REPOSITORY_TEMP_REPOSITORY_H_
