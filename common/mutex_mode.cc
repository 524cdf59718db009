#include "common/mutex_mode.h"

#include <cstdlib>
#include <cstring>

#include "absl/synchronization/mutex.h"

namespace metalserve {

bool ApplyMutexDeadlockDetectionSetting() {
  const char* value = std::getenv(kDeadlockDetectionEnv);
  if (value != nullptr && std::strcmp(value, "1") == 0) return false;
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return true;
}

}  // namespace metalserve
