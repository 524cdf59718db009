// Flags of how requests reach the server beyond gRPC's own settings:
// --shared_memory (shared_memory.h). Only main calls this; a value that does
// not parse logs the flag and the value and exits 2.
#ifndef METALSERVE_SERVER_TRANSPORT_FLAGS_H_
#define METALSERVE_SERVER_TRANSPORT_FLAGS_H_

#include "server/service/shared_memory.h"

namespace metalserve {

// --shared_memory (ServerOptions::shared_memory).
SharedMemoryAccess SharedMemoryAccessFromFlags();

// This file's path in the repository, for --help.
inline constexpr char kTransportFlagsFile[] = "server/transport_flags.cc";

}  // namespace metalserve

#endif  // METALSERVE_SERVER_TRANSPORT_FLAGS_H_
