// metalservectl's commands: one KServe gRPC call each
// (inference.GRPCInferenceService: RepositoryIndex, RepositoryModelLoad,
// RepositoryModelUnload, ModelReady, ModelMetadata), with its answer written
// as text for an operator.
//
// Each command takes a connected stub and a per-call timeout, writes its
// result to `out` and returns OK, or the call's gRPC code and message as an
// absl::Status (the code name is part of what metalservectl prints).
//
// Thread-safety: free functions; call them from one thread per `out`.
#ifndef METALSERVE_CLIENT_CTL_COMMANDS_H_
#define METALSERVE_CLIENT_CTL_COMMANDS_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "inference/grpc_service.grpc.pb.h"

namespace metalserve::ctl {

using Stub = inference::GRPCInferenceService::StubInterface;

// A command line after the flags: the command and its arguments.
struct Command {
  std::string name;  // index, load, unload, ready, metadata
  std::string model; // empty for index
};

// The commands and what they take, for --help.
extern const char kCommandsUsage[];

// InvalidArgument naming the problem for an unknown command, a missing or
// extra argument.
absl::StatusOr<Command> ParseCommand(const std::vector<std::string>& args);

// RepositoryIndex: a table MODEL VERSION STATE REASON, one row per entry
// (a model with no version loaded shows "-" as its version).
absl::Status Index(Stub& stub, absl::Duration timeout, std::ostream& out);
// RepositoryModelLoad / RepositoryModelUnload: "loaded MODEL" / "unloaded
// MODEL" (an unloaded version drains: requests admitted before finish).
absl::Status Load(Stub& stub, absl::Duration timeout, const std::string& model,
                  std::ostream& out);
absl::Status Unload(Stub& stub, absl::Duration timeout, const std::string& model,
                    std::ostream& out);
// ModelReady: "MODEL [version V] ready" or "... not ready"; *ready says
// which (metalservectl exits 3 when not ready).
absl::Status Ready(Stub& stub, absl::Duration timeout, const std::string& model,
                   const std::string& version, bool* ready, std::ostream& out);
// ModelMetadata: name, versions, platform, then each input and output as
// "NAME DATATYPE [d0,d1,...]" (-1 is the batch dimension).
absl::Status Metadata(Stub& stub, absl::Duration timeout, const std::string& model,
                      const std::string& version, std::ostream& out);

}  // namespace metalserve::ctl

#endif  // METALSERVE_CLIENT_CTL_COMMANDS_H_
