#include "tests/testing/subprocess.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>

namespace metalserve::testing {

CommandOutcome RunCommand(const std::string& command) {
  const std::string cmd = command + " 2>&1";
  CommandOutcome o;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return o;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) o.out.append(buf.data(), n);
  const int status = pclose(pipe);
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return o;
}

}  // namespace metalserve::testing
