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
// own permissions; "unix" admits calls over a Unix socket with a path (the
// socket file's permissions say who; an abstract socket has none, so the
// server refuses that pairing at start-up), and any object the server can
// read; "local" also admits loopback TCP, so any local user, and then only
// objects every local user may read (mode o+r), so that no caller reads
// through the server what it could not read itself. A call from any other
// peer is refused PERMISSION_DENIED, both to register and to name a region
// in a request. Region names are one namespace for every admitted client,
// as in Triton: a client can unregister another's region.
//
// A truncated object: a client that shrinks its object under a mapped
// region would make the server's next read of it fault (SIGBUS). The
// server installs a SIGBUS handler (at the first registration) that, for a
// fault inside a mapped region, maps zeros from the faulting page to the
// region's end and notes the fault, so the read finishes (the request saw
// zeros) and the process keeps serving; the request is answered
// INVALID_ARGUMENT (see Bytes::Truncated) and the region refuses every
// later read until it is unregistered and registered again. A fault
// outside every region, or a SIGBUS sent by kill(), goes to the handler
// installed before (or the default action), as if this one were not there.
// On macOS an object's size is fixed once set, so this never happens there.
//
// Bounds: at most `max_regions` regions at once (RESOURCE_EXHAUSTED
// beyond), names of at most kMaxNameBytes; a region's mapping costs the
// server address space only, its pages are the client's (but stay
// allocated while registered, even after the client removes the object).
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
  static constexpr size_t kMaxNameBytes = 256;

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
    // Whether a read of the region faulted (its object was truncated) since
    // this view was taken: the bytes read through it were partly zeros.
    bool Truncated() const;
    // The region's name.
    const std::string& region() const;
  };

  // `access` kLocal: only objects every local user may read are registered.
  explicit SharedMemoryRegions(SharedMemoryAccess access = SharedMemoryAccess::kUnix,
                               int max_regions = kDefaultMaxRegions);
  ~SharedMemoryRegions();
  SharedMemoryRegions(const SharedMemoryRegions&) = delete;
  SharedMemoryRegions& operator=(const SharedMemoryRegions&) = delete;

  // Maps [offset, offset + byte_size) of the POSIX shared-memory object
  // `key` ("/name": one leading slash, no other) read-only. INVALID_ARGUMENT
  // naming the field for an empty or too long name, a malformed key, a zero
  // byte_size, a range past the object's size or something not an object (a
  // FIFO, a directory; refused without blocking); NOT_FOUND for a key no
  // object has; ALREADY_EXISTS for a registered name; RESOURCE_EXHAUSTED
  // past max_regions or out of descriptors or address space;
  // PERMISSION_DENIED when the object cannot be opened for reading, or under
  // kLocal is not readable by every local user.
  absl::Status Register(const std::string& name, const std::string& key, uint64_t offset,
                        uint64_t byte_size);
  // Forgets region `name` (every region when empty); a name not registered
  // is no error (as Triton answers it). Views already taken keep their
  // bytes mapped.
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
  // The registered regions' bytes in all.
  int64_t byte_size() const;

 private:
  absl::Status CheckRoom(const std::string& name) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const bool world_readable_only_;
  const int max_regions_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const Mapping>> regions_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SERVICE_SHARED_MEMORY_H_
