// TempDir: a fresh folder for a test, made with mkdtemp under /tmp (or
// $TMPDIR) and removed with everything in it when the object goes.
//
// Why one helper: tests wrote their files under fixed names in
// ::testing::TempDir() (two trees' binaries run by one `ctest -j` shared
// /tmp/access_log_test.log) or in folders named by pid that nothing removed.
// A name from mkdtemp is unique across concurrent runs; the prefix stays
// short because a Unix socket's path must fit sockaddr_un (104 bytes on
// macOS, 108 on Linux).
//
// Thread-safety: const methods are; construction and destruction are the
// owning test's.
#ifndef METALSERVE_TESTS_TESTING_TEMP_DIR_H_
#define METALSERVE_TESTS_TESTING_TEMP_DIR_H_

#include <string>
#include <string_view>

namespace metalserve::testing {

class TempDir {
 public:
  // `prefix`: the folder name's start, e.g. "metalserve-uds-". A folder that
  // cannot be made fails the current test (ADD_FAILURE) and path() is "".
  explicit TempDir(std::string_view prefix);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path() + "/" + name.
  std::string File(std::string_view name) const;

 private:
  std::string path_;
};

}  // namespace metalserve::testing

#endif  // METALSERVE_TESTS_TESTING_TEMP_DIR_H_
