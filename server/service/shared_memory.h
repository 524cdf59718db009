// System shared memory for co-located clients: the regions of the KServe
// shared-memory extension (Triton's SystemSharedMemoryRegister, Status and
// Unregister). A client on the same host writes an input's bytes into a
// POSIX shared-memory object of its own, registers a region of it once, and
// then names the region in each request instead of sending the bytes
// through gRPC, whose per-byte cost is the floor of a large request's server
// CPU (docs/performance.md). The server maps a region read-only when it is
// registered and hands out views into the mapping: the request's bytes are
// copied once, from the client's pages into the batch's staging buffer.
//
// Who may use it (SharedMemoryAccess, --shared_memory): off by default, as
// a registered key makes the server read a shared-memory object with its
// own permissions; "unix" admits calls over a Unix socket only (the
// socket's file permissions say who), "local" also loopback TCP. A call from
// any other peer is refused PERMISSION_DENIED, both to register and to name
// a region in a request.
//
// A truncated object: a client that shrinks its object under a mapped
// region would make the server's next read of it fault (SIGBUS). The
// server installs a SIGBUS handler that, for an address inside a mapped
// region, maps a zero page there and notes the fault, so the read finishes
// (the request saw zeros) and the process keeps serving; the request is
// answered INVALID_ARGUMENT (see Bytes::Truncated) and the region refuses
// every later read until it is registered again. A fault outside every
// region goes to the handler that was installed before (or the default
// action), as if this one were not there.
//
// Bounds: at most `max_regions` regions at once (RESOURCE_EXHAUSTED
// beyond); a region's mapping costs the server address space only, its
// pages are the client's. Region names are one namespace for all clients.
//
// Thread-safety: SharedMemoryRegions is thread-safe. Lifetime: a view's
// `hold` keeps its mapping alive after the region is unregistered or the
// registry is destroyed; the mapping is unmapped when the last holder goes.
#ifndef METALSERVE_SERVER_SERVICE_SHARED_MEMORY_H_
#define METALSERVE_SERVER_SERVICE_SHARED_MEMORY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace metalserve {

enum class SharedMemoryAccess { kOff, kUnix, kLocal };

// "off", "unix" or "local"; INVALID_ARGUMENT naming the value otherwise.
absl::StatusOr<SharedMemoryAccess> ParseSharedMemoryAccess(absl::string_view text);
absl::string_view SharedMemoryAccessName(SharedMemoryAccess access);

// Whether a call from `peer` (grpc::ServerContext::peer(): "unix:...",
// "ipv4:127.0.0.1:port", "ipv6:[::1]:port") may use shared memory under
// `access`. Loopback is 127.0.0.0/8, ::1 and ::ffff:127.0.0.0/104.
bool PeerMayUseSharedMemory(SharedMemoryAccess access, absl::string_view peer);

class SharedMemoryRegions {
 public:
  static constexpr int kDefaultMaxRegions = 256;

  struct RegionStatus {
    std::string name;
    std::string key;
    uint64_t offset = 0;
    uint64_t byte_size = 0;
  };

  class Mapping;  // one region's read-only mapping (shared_memory.cc)

  // A view into a region, and the hold that keeps it mapped.
  struct Bytes {
    absl::string_view data;
    std::shared_ptr<const Mapping> hold;
    std::string region;  // its name
    // Whether a read of the region faulted (its object was truncated) since
    // this view was taken: the bytes read through it were partly zeros.
    bool Truncated() const;
    int faults_seen = 0;  // the region's fault count when the view was taken
  };

  explicit SharedMemoryRegions(int max_regions = kDefaultMaxRegions);
  ~SharedMemoryRegions();
  SharedMemoryRegions(const SharedMemoryRegions&) = delete;
  SharedMemoryRegions& operator=(const SharedMemoryRegions&) = delete;

  // Maps [offset, offset + byte_size) of the POSIX shared-memory object
  // `key` ("/name": one leading slash, no other) read-only. INVALID_ARGUMENT
  // naming the field for an empty name, a malformed key, a zero byte_size or
  // a range past the object's size; NOT_FOUND for a key no object has;
  // ALREADY_EXISTS for a registered name; RESOURCE_EXHAUSTED past
  // max_regions; PERMISSION_DENIED when the object cannot be opened for
  // reading.
  absl::Status Register(const std::string& name, const std::string& key, uint64_t offset,
                        uint64_t byte_size);
  // Forgets region `name` (every region when empty); NOT_FOUND for a name
  // not registered. Views already taken keep their bytes mapped.
  absl::Status Unregister(const std::string& name);
  // Every region (name empty) or the one named; NOT_FOUND for a name not
  // registered.
  absl::StatusOr<std::vector<RegionStatus>> Status(const std::string& name) const;
  // [offset, offset + size) of region `name`. INVALID_ARGUMENT, with
  // `field` (e.g. "inputs[0] ('x').parameters") in the message, for a name
  // not registered, a range past the region, or a region whose object was
  // truncated.
  absl::StatusOr<Bytes> View(absl::string_view name, int64_t offset, int64_t size,
                             absl::string_view field) const;
  int size() const;

 private:
  const int max_regions_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const Mapping>> regions_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_SHARED_MEMORY_H_
