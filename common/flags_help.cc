#include "common/flags_help.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace metalserve {
namespace {

constexpr size_t kWidth = 80;

// Appends `text` to `out`, which ends `column` characters into a line,
// word-wrapped at kWidth; continuation lines are indented by `indent`.
void AppendWrapped(std::string& out, absl::string_view text, size_t column,
                   size_t indent) {
  bool first = true;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!first && column + 1 + word.size() > kWidth) {
      absl::StrAppend(&out, "\n", std::string(indent, ' '));
      column = indent;
    } else if (!first) {
      out += ' ';
      ++column;
    }
    absl::StrAppend(&out, word);
    column += word.size();
    first = false;
  }
}

// True when argv asks for plain --help (not --help=substring), before "--".
bool AsksForHelp(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) return false;
    if (std::strcmp(argv[i], "--help") == 0 ||
        std::strcmp(argv[i], "-help") == 0) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::string NormalizeFlagFile(absl::string_view file,
                              absl::string_view main_file,
                              absl::string_view relative_main) {
  absl::string_view root = main_file;
  if (absl::ConsumeSuffix(&root, relative_main) && !root.empty() &&
      absl::ConsumePrefix(&file, root)) {
    return std::string(file);
  }
  while (absl::ConsumePrefix(&file, "/")) {
  }
  return std::string(file);
}

std::string FlagsHelpText(absl::string_view relative_main,
                          const std::vector<std::string>& more_files) {
  std::string out(absl::ProgramUsageMessage());
  std::vector<std::string> files = {std::string(relative_main)};
  files.insert(files.end(), more_files.begin(), more_files.end());
  for (const std::string& file : files) {
    std::vector<const absl::CommandLineFlag*> flags;
    for (const auto& [name, flag] : absl::GetAllFlags()) {
      if (flag->Filename() == file) flags.push_back(flag);
    }
    std::sort(flags.begin(), flags.end(), [](const auto* a, const auto* b) {
      return a->Name() < b->Name();
    });
    absl::StrAppend(&out, "\n\n  Flags from ", file, ":\n");
    for (const absl::CommandLineFlag* flag : flags) {
      std::string value = flag->DefaultValue();
      if (flag->IsOfType<std::string>()) value = absl::StrCat("\"", value, "\"");
      out += "    ";
      AppendWrapped(out,
                    absl::StrCat("--", flag->Name(), " (", flag->Help(),
                                 "); default: ", value, ";"),
                    4, 6);
      out += '\n';
    }
  }
  absl::StrAppend(&out, "\nTry --helpfull for every flag, including "
                        "Abseil's (--flagfile, --fromenv, ...).\n");
  return out;
}

void ConfigureFlagsHelp(int argc, char** argv, absl::string_view main_file,
                        absl::string_view relative_main,
                        const std::vector<std::string>& more_files) {
  const std::string main(main_file), relative(relative_main);
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [relative, more_files](absl::string_view file) {
    return file == relative ||
           std::find(more_files.begin(), more_files.end(), file) != more_files.end();
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  config.normalize_filename = [main, relative](absl::string_view file) {
    return NormalizeFlagFile(file, main, relative);
  };
  absl::SetFlagsUsageConfig(config);
  if (AsksForHelp(argc, argv)) {
    std::cout << FlagsHelpText(relative_main, more_files) << std::flush;
    std::exit(0);
  }
}

}  // namespace metalserve
