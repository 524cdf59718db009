// ApplyMutexDeadlockDetectionSetting, observed in child processes: Abseil's
// detection (on where Abseil is built without NDEBUG, as Debian's is) kills
// a process that takes two mutexes in both orders; turned off, it does not.
#include "common/mutex_mode.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace metalserve {
namespace {

// Takes a then b, then b then a: a cycle in the lock-order graph.
void InvertLockOrder() {
  absl::Mutex a, b;
  a.Lock();
  b.Lock();
  b.Unlock();
  a.Unlock();
  b.Lock();
  a.Lock();
  a.Unlock();
  b.Unlock();
}

// Runs `body` in a child process and returns its wait status; the child
// exits 0 when `body` returns.
int InChild(const std::function<void()>& body) {
  const pid_t pid = fork();
  if (pid == 0) {
    body();
    _exit(0);
  }
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  return status;
}

// Sets the variable (nullptr: unsets it) in the calling process.
void SetDetectionEnv(const char* value) {
  if (value == nullptr) {
    unsetenv(kDeadlockDetectionEnv);
  } else {
    setenv(kDeadlockDetectionEnv, value, 1);
  }
}

TEST(MutexModeTest, UnsetOrAnythingButOneTurnsDetectionOff) {
  for (const char* value : {static_cast<const char*>(nullptr), "0", "", "off", "true"}) {
    SCOPED_TRACE(value == nullptr ? "(unset)" : value);
    const int status = InChild([value] {
      SetDetectionEnv(value);
      if (!ApplyMutexDeadlockDetectionSetting()) _exit(3);
      InvertLockOrder();
    });
    ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
}

TEST(MutexModeTest, OneKeepsAbseilsOwnSetting) {
  // Whatever this Abseil does with an inverted order by default (abort
  // where built without NDEBUG), it does the same with the variable at 1.
  const int untouched = InChild([] { InvertLockOrder(); });
  const int kept = InChild([] {
    SetDetectionEnv("1");
    if (ApplyMutexDeadlockDetectionSetting()) _exit(3);
    InvertLockOrder();
  });
  EXPECT_EQ(kept, untouched);
}

}  // namespace
}  // namespace metalserve
