#include "common/usable_cores.h"

#ifdef __linux__
#include <sched.h>
#endif

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace metalserve {

int CoresUnderCpuMax(absl::string_view cpu_max, int cores) {
  std::vector<absl::string_view> parts =
      absl::StrSplit(absl::StripAsciiWhitespace(cpu_max), ' ', absl::SkipEmpty());
  int64_t quota = 0;
  int64_t period = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &quota) ||
      !absl::SimpleAtoi(parts[1], &period) || quota <= 0 || period <= 0) {
    return cores;  // "max ...": no limit
  }
  const int64_t limit = (quota + period - 1) / period;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(cores, limit)));
}

namespace {

std::string FirstLineOf(const char* path) {
  std::ifstream in(path);
  std::string text;
  std::getline(in, text);
  return text;
}

}  // namespace

int UsableCores() {
  int cores = static_cast<int>(std::thread::hardware_concurrency());
#ifdef __linux__
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cores = CPU_COUNT(&set);
  cores = CoresUnderCpuMax(FirstLineOf("/sys/fs/cgroup/cpu.max"), cores);
  const std::string quota = FirstLineOf("/sys/fs/cgroup/cpu/cpu.cfs_quota_us");
  const std::string period = FirstLineOf("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
  if (!quota.empty() && !period.empty()) {
    cores = CoresUnderCpuMax(absl::StrCat(quota, " ", period), cores);
  }
#endif
  return std::max(1, cores);
}

}  // namespace metalserve
