// Transport flags, defined here to keep main.cc short; main lists them in
// --help beside its own (ConfigureFlagsHelp's extra files).
#include "server/transport_flags.h"

#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
#include "glog/logging.h"

ABSL_FLAG(std::string, shared_memory, "off",
          "Who may register system shared-memory regions (KServe's extension, Triton's "
          "SystemSharedMemoryRegister) and name them in ModelInfer inputs instead of "
          "sending the bytes: off, unix (calls over a --address=unix:... socket; its file "
          "permissions decide who) or local (those and loopback TCP, any local user). The "
          "server reads a registered object with its own permissions "
          "(server/service/shared_memory.h, docs/operations.md)");

namespace metalserve {

SharedMemoryAccess SharedMemoryAccessFromFlags() {
  absl::StatusOr<SharedMemoryAccess> access =
      ParseSharedMemoryAccess(absl::GetFlag(FLAGS_shared_memory));
  if (!access.ok()) {
    LOG(ERROR) << "flags: " << access.status().message();
    std::exit(2);
  }
  return *access;
}

}  // namespace metalserve
