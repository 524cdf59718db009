#include "tests/testing/temp_dir.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <vector>

#include "gtest/gtest.h"

namespace metalserve::testing {

TempDir::TempDir(std::string_view prefix) {
  const char* env = std::getenv("TMPDIR");
  std::string base = env != nullptr && *env != '\0' ? env : "/tmp";
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  const std::string tmpl = base + "/" + std::string(prefix) + "XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp(" << tmpl << "): " << std::strerror(errno);
    return;
  }
  path_ = buf.data();
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string TempDir::File(std::string_view name) const {
  return path_ + "/" + std::string(name);
}

}  // namespace metalserve::testing
