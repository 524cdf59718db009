// TempDir (tests/testing/temp_dir.h): unique, made at once, removed with
// what was written in it.
#include "tests/testing/temp_dir.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace metalserve::testing {
namespace {

namespace fs = std::filesystem;

TEST(TempDirTest, TwoAreDistinctFoldersRemovedWithTheirContents) {
  std::string kept_a, kept_b;
  {
    const TempDir a("metalserve-tempdir-");
    const TempDir b("metalserve-tempdir-");
    ASSERT_TRUE(fs::is_directory(a.path())) << a.path();
    ASSERT_TRUE(fs::is_directory(b.path())) << b.path();
    EXPECT_NE(a.path(), b.path());
    EXPECT_EQ(fs::path(a.path()).filename().string().rfind("metalserve-tempdir-", 0), 0u);
    EXPECT_EQ(a.File("x.txt"), a.path() + "/x.txt");
    std::ofstream(a.File("x.txt")) << "x";
    fs::create_directories(a.File("sub/deeper"));
    std::ofstream(a.File("sub/deeper/y")) << "y";
    kept_a = a.path();
    kept_b = b.path();
  }
  EXPECT_FALSE(fs::exists(kept_a));
  EXPECT_FALSE(fs::exists(kept_b));
}

TEST(TempDirTest, FollowsTmpdir) {
  const TempDir parent("metalserve-tempdir-parent-");
  const char* old = getenv("TMPDIR");
  const std::string saved = old != nullptr ? old : "";
  setenv("TMPDIR", (parent.path() + "/").c_str(), 1);
  {
    const TempDir child("c-");
    EXPECT_EQ(fs::path(child.path()).parent_path().string(), parent.path());
  }
  if (old != nullptr) {
    setenv("TMPDIR", saved.c_str(), 1);
  } else {
    unsetenv("TMPDIR");
  }
}

}  // namespace
}  // namespace metalserve::testing
