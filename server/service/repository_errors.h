// The model-repository extension's refusals, worded once for both front
// ends: KServe gRPC (kserve_repository.cc, repository_worker.cc) and REST
// (rest_repository.cc), so a client reads the same text over either.
//
// Thread-safety: free functions.
#ifndef METALSERVE_SERVER_SERVICE_REPOSITORY_ERRORS_H_
#define METALSERVE_SERVER_SERVICE_REPOSITORY_ERRORS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace metalserve {

// OK for no names; otherwise INVALID_ARGUMENT naming every parameter a load
// or unload request sets (sorted, each through ClientText): Triton's
// "config" and "file:..." overrides are not supported.
//   "RepositoryModelLoad parameters [config, file:1/model.pt] are not
//    supported: the model's folder and config.json are its only source"
absl::Status RefuseRepositoryParameters(absl::string_view rpc, std::vector<std::string> names);

// FAILED_PRECONDITION for a load or unload on a server started with --model.
absl::Status NoRepositoryError(absl::string_view rpc);

// UNAVAILABLE for a load or unload of `model` while another one runs.
absl::Status RepositoryBusyError(absl::string_view rpc, absl::string_view model);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_REPOSITORY_ERRORS_H_
