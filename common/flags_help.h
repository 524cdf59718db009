// Command-line help shared by the programs (metalserve, metalserve-bench).
//
// Abseil's defaults suit Bazel builds: `--help` lists the flags of a file
// named after the program and, in the Abseil Debian ships, exits 1 even when
// it printed them; every listing names each flag's file by the absolute path
// it was compiled from. ConfigureFlagsHelp makes `--help` (and
// `--helpshort`) list the flags of the program's own main file, shows every
// file relative to the source tree, and makes a plain `--help` print and
// exit 0. `--helpfull`, `--help=substring` and the rest stay Abseil's.
//
// Thread-safety: call once from main() before absl::ParseCommandLine, while
// the process has one thread.
#ifndef METALSERVE_SERVER_COMMON_FLAGS_HELP_H_
#define METALSERVE_SERVER_COMMON_FLAGS_HELP_H_

#include <iosfwd>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace metalserve {

// `main_file`: the program's __FILE__ as the compiler saw it;
// `relative_main`: the same file's path in the repository
// ("server/main.cc"). Sets Abseil's usage configuration, then, when argv
// holds `--help` or `-help` (without `=`) before any `--`, prints the
// program usage message and the flags of `relative_main` to stdout and
// exits 0. Call after absl::SetProgramUsageMessage. `more_files` (paths in
// the repository, like relative_main) hold more of the program's own flags,
// listed after main's.
void ConfigureFlagsHelp(int argc, char** argv, absl::string_view main_file,
                        absl::string_view relative_main,
                        const std::vector<std::string>& more_files = {});

// The `--help` text: usage message, then each flag of `relative_main`
// (sorted by name) with its help text and default, then those of each of
// `more_files`. Exposed for tests.
std::string FlagsHelpText(absl::string_view relative_main,
                          const std::vector<std::string>& more_files = {});

// The file name as --helpfull shows it: `file` with the source tree prefix
// (`main_file` minus `relative_main`) removed, or with leading '/' removed
// when it lies elsewhere.
std::string NormalizeFlagFile(absl::string_view file,
                              absl::string_view main_file,
                              absl::string_view relative_main);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_COMMON_FLAGS_HELP_H_
