#include "server/service/repository_errors.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/service/status_util.h"

namespace metalserve {

absl::Status RefuseRepositoryParameters(absl::string_view rpc, std::vector<std::string> names) {
  if (names.empty()) return absl::OkStatus();
  for (std::string& name : names) name = ClientText(name);
  std::sort(names.begin(), names.end());
  return absl::InvalidArgumentError(absl::StrCat(
      rpc, " parameters [", absl::StrJoin(names, ", "),
      "] are not supported: the model's folder and config.json are its only source"));
}

absl::Status NoRepositoryError(absl::string_view rpc) {
  return absl::FailedPreconditionError(absl::StrCat(
      rpc, ": the server was started with --model (one model); start it with "
           "--model_repository=DIR and --model_control=explicit to load and unload models"));
}

absl::Status RepositoryBusyError(absl::string_view rpc, absl::string_view model) {
  return absl::UnavailableError(absl::StrCat(
      rpc, " of \"", ClientText(model),
      "\": another load or unload is running; retry when it is done"));
}

}  // namespace metalserve
