// RunCommand: runs a shell command line to completion and captures what it
// printed, for tests that drive a built binary (metalserve-bench) end to end.
//
// Thread-safety: thread-safe; each call has its own pipe and child process.
#ifndef METALSERVE_TESTS_TESTING_SUBPROCESS_H_
#define METALSERVE_TESTS_TESTING_SUBPROCESS_H_

#include <string>

namespace metalserve::testing {

struct CommandOutcome {
  // The command's exit status; -1 when it could not be started or did not
  // exit normally (killed by a signal).
  int exit_code = -1;
  std::string out;  // stdout and stderr
};

// Runs `command` through /bin/sh with stderr redirected into stdout, and
// returns once it has exited.
CommandOutcome RunCommand(const std::string& command);

}  // namespace metalserve::testing

#endif  // METALSERVE_TESTS_TESTING_SUBPROCESS_H_
