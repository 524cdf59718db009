#include "server/service/shared_memory.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#ifdef __linux__
#include <sys/syscall.h>
#endif

#include "absl/base/call_once.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "server/service/status_util.h"

namespace metalserve {
namespace {

// The truncation guard (see the header). Each mapped region has a slot the
// SIGBUS handler reads without locks: its address range and a fault count.
// A slot is filled before its mapping is used and cleared before it is
// unmapped, both while no request holds the mapping.
constexpr int kSlots = 1024;
struct FaultSlot {
  std::atomic<bool> used{false};
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};
  std::atomic<int> faults{0};
};
FaultSlot g_slots[kSlots];
uintptr_t g_page_bytes = 4096;
struct sigaction g_previous_sigbus;

// Zeros over [begin, end), read-only, replacing what was mapped there. The
// raw system call on Linux: a sanitizer's mmap interceptor is not meant to
// run inside a signal handler.
bool MapZeros(uintptr_t begin, uintptr_t end) {
  void* at = reinterpret_cast<void*>(begin);
  const size_t length = end - begin;
  constexpr int kFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED;
#if defined(__linux__) && (defined(__x86_64__) || defined(__aarch64__))
  const long r = syscall(SYS_mmap, at, length, static_cast<long>(PROT_READ),
                         static_cast<long>(kFlags), -1L, 0L);
  return r != -1;
#else
  return mmap(at, length, PROT_READ, kFlags, -1, 0) != MAP_FAILED;
#endif
}

// Whoever handled SIGBUS before this guard. Their handler when they had
// one; else their action is put back, so that a fault, which runs again on
// return, gets it, and a signal sent by kill() is raised again for it.
void ChainSigbus(int signal, siginfo_t* info, void* context) {
  const struct sigaction& p = g_previous_sigbus;
  if ((p.sa_flags & SA_SIGINFO) != 0) {
    if (p.sa_sigaction != nullptr &&
        reinterpret_cast<void*>(p.sa_sigaction) != reinterpret_cast<void*>(SIG_IGN) &&
        reinterpret_cast<void*>(p.sa_sigaction) != reinterpret_cast<void*>(SIG_DFL)) {
      p.sa_sigaction(signal, info, context);
      return;
    }
  } else if (p.sa_handler != SIG_DFL && p.sa_handler != SIG_IGN) {
    p.sa_handler(signal);
    return;
  }
  const bool sent = info == nullptr || info->si_code <= 0;  // by kill(), not a fault
  if (sent && p.sa_handler == SIG_IGN) return;  // ignored before: still ignored, guard kept
  sigaction(SIGBUS, &p, nullptr);
  if (sent) raise(SIGBUS);
}

void OnSigbus(int signal, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  // A fault (si_code > 0, si_addr meaningful), not a signal sent by kill().
  if (info != nullptr && info->si_code > 0) {
    const uintptr_t at = reinterpret_cast<uintptr_t>(info->si_addr);
    for (FaultSlot& slot : g_slots) {
      const uintptr_t begin = slot.begin.load(std::memory_order_acquire);
      const uintptr_t end = slot.end.load(std::memory_order_acquire);
      // begin read again: a slot given back and taken between the two loads
      // would pair one region's start with another's end.
      if (begin == 0 || at < begin || at >= end ||
          slot.begin.load(std::memory_order_acquire) != begin) {
        continue;
      }
      // Counted first: a reader that finds zeros mapped finds the count too.
      slot.faults.fetch_add(1);
      // Zeros from the faulting page to the region's end, in one call: the
      // rest of the read runs on without a signal per page.
      if (MapZeros(at & ~(g_page_bytes - 1), end)) {
        errno = saved_errno;
        return;
      }
      break;
    }
  }
  ChainSigbus(signal, info, context);
  errno = saved_errno;
}

void InstallGuardOnce() {
  static absl::once_flag once;
  absl::call_once(once, [] {
    g_page_bytes = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    struct sigaction action {};
    action.sa_sigaction = OnSigbus;
    action.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    PCHECK(sigaction(SIGBUS, &action, &g_previous_sigbus) == 0) << "sigaction(SIGBUS)";
  });
}

int TakeSlot(uintptr_t begin, uintptr_t end) {
  for (int i = 0; i < kSlots; ++i) {
    bool used = false;
    if (!g_slots[i].used.compare_exchange_strong(used, true)) continue;
    g_slots[i].faults.store(0);
    g_slots[i].end.store(end, std::memory_order_release);
    g_slots[i].begin.store(begin, std::memory_order_release);
    return i;
  }
  return -1;
}

void GiveSlot(int i) {
  g_slots[i].begin.store(0, std::memory_order_release);
  g_slots[i].end.store(0, std::memory_order_release);
  g_slots[i].used.store(false);
}

absl::Status CheckKey(const std::string& key) {
  if (key.size() < 2 || key[0] != '/' || key.find('/', 1) != std::string::npos ||
      key.size() > 255 || key == "/." || key == "/.." || key.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key '", ClientText(key),
        "' is not a POSIX shared-memory name: want '/' and 1 to 254 characters (macOS: 30), "
        "no other '/'"));
  }
  return absl::OkStatus();
}

absl::Status OpenError(const std::string& key, int error) {
  const std::string what = absl::StrCat("key '", ClientText(key), "': ", std::strerror(error));
  switch (error) {
    case ENOENT: return absl::NotFoundError(absl::StrCat(what, " (no such shared-memory object)"));
    case EACCES: return absl::PermissionDeniedError(what);
    case EMFILE:
    case ENFILE:
    case ENOMEM: return absl::ResourceExhaustedError(what);
    default: return absl::InvalidArgumentError(what);
  }
}

// Opens `key` for reading and checks what it is: an object (on Linux a
// regular file under /dev/shm; macOS reports no file type for one) holding
// at least `bytes`, readable by every local user when `world_readable`.
absl::StatusOr<int> OpenObject(const std::string& key, uint64_t offset, uint64_t byte_size,
                               bool world_readable) {
  int flags = O_RDONLY;
#ifdef __linux__
  flags |= O_NONBLOCK;  // a FIFO named like an object must not block the call
#endif
  const int fd = shm_open(key.c_str(), flags, 0);
  if (fd < 0) return OpenError(key, errno);
  struct stat st {};
  absl::Status s;
  if (fstat(fd, &st) != 0) {
    s = OpenError(key, errno);
#ifdef __linux__
  } else if (!S_ISREG(st.st_mode)) {
    s = absl::InvalidArgumentError(
        absl::StrCat("key '", ClientText(key), "' is not a shared-memory object"));
#endif
  } else if (world_readable && (st.st_mode & S_IROTH) == 0) {
    s = absl::PermissionDeniedError(absl::StrCat(
        "key '", ClientText(key), "' is not readable by every local user (mode ",
        absl::StrFormat("%04o", st.st_mode & 07777),
        "): --shared_memory=local maps only such objects; make it o+r, or serve the client "
        "over a Unix socket with --shared_memory=unix"));
  } else if (static_cast<uint64_t>(st.st_size) < offset + byte_size) {
    s = absl::InvalidArgumentError(absl::StrCat(
        "key '", ClientText(key), "' holds ", st.st_size, " bytes; offset ", offset,
        " + byte_size ", byte_size, " = ", offset + byte_size, " is past its end"));
  }
  if (!s.ok()) {
    close(fd);
    return s;
  }
  return fd;
}

}  // namespace

class SharedMemoryRegions::Mapping {
 public:
  Mapping(RegionStatus status, void* base, size_t length, size_t skip, int slot)
      : status(std::move(status)), base_(base), length_(length), skip_(skip), slot_(slot) {}
  ~Mapping() {
    GiveSlot(slot_);
    munmap(base_, length_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  absl::string_view bytes() const {
    return {static_cast<const char*>(base_) + skip_, static_cast<size_t>(status.byte_size)};
  }
  int faults() const { return g_slots[slot_].faults.load(); }

  const RegionStatus status;

 private:
  void* const base_;
  const size_t length_;
  const size_t skip_;
  const int slot_;
};

absl::StatusOr<SharedMemoryAccess> ParseSharedMemoryAccess(absl::string_view text) {
  if (text == "off") return SharedMemoryAccess::kOff;
  if (text == "unix") return SharedMemoryAccess::kUnix;
  if (text == "local") return SharedMemoryAccess::kLocal;
  return absl::InvalidArgumentError(
      absl::StrCat("--shared_memory='", text, "': want off, unix or local"));
}

absl::string_view SharedMemoryAccessName(SharedMemoryAccess access) {
  switch (access) {
    case SharedMemoryAccess::kOff: return "off";
    case SharedMemoryAccess::kUnix: return "unix";
    case SharedMemoryAccess::kLocal: return "local";
  }
  return "off";
}

bool PeerMayUseSharedMemory(SharedMemoryAccess access, absl::string_view peer) {
  if (access == SharedMemoryAccess::kOff) return false;
  if (absl::StartsWith(peer, "unix:")) return true;
  // An abstract socket has no file permissions to say who: local only.
  if (access == SharedMemoryAccess::kUnix) return false;
  if (absl::StartsWith(peer, "unix-abstract:")) return true;
  // gRPC writes an IPv6 peer's brackets percent-encoded (ipv6:%5B::1%5D:port)
  // in the releases packaged here; both spellings are taken.
  for (absl::string_view open : {"[", "%5B", "%5b"}) {
    const std::string v6 = absl::StrCat("ipv6:", open);
    if (absl::StartsWith(peer, v6 + "::1]") || absl::StartsWith(peer, v6 + "::1%5D") ||
        absl::StartsWith(peer, v6 + "::1%5d") || absl::StartsWith(peer, v6 + "::ffff:127.")) {
      return true;
    }
  }
  return absl::StartsWith(peer, "ipv4:127.");
}

bool SharedMemoryRegions::Bytes::Truncated() const {
  return hold != nullptr && hold->faults() != 0;
}

const std::string& SharedMemoryRegions::Bytes::region() const {
  static const std::string* const kNone = new std::string();
  return hold != nullptr ? hold->status.name : *kNone;
}

SharedMemoryRegions::SharedMemoryRegions(SharedMemoryAccess access, int max_regions)
    : world_readable_only_(access == SharedMemoryAccess::kLocal), max_regions_(max_regions) {}
SharedMemoryRegions::~SharedMemoryRegions() = default;

absl::Status SharedMemoryRegions::CheckRoom(const std::string& name) const {
  if (regions_.contains(name)) {
    return absl::AlreadyExistsError(
        absl::StrCat("region '", ClientText(name), "' is already registered"));
  }
  if (static_cast<int>(regions_.size()) >= max_regions_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        max_regions_, " shared-memory regions are registered, the most this server keeps; "
        "unregister one first"));
  }
  return absl::OkStatus();
}

absl::Status SharedMemoryRegions::Register(const std::string& name, const std::string& key,
                                           uint64_t offset, uint64_t byte_size) {
  if (name.empty() || name.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "name has ", name.size(), " bytes; want 1 to ", kMaxNameBytes));
  }
  RETURN_IF_ERROR(CheckKey(key));
  if (byte_size == 0) return absl::InvalidArgumentError("byte_size is 0");
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<off_t>::max());
  if (offset > kMax || byte_size > kMax - offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("offset ", offset, " + byte_size ", byte_size, " is out of range"));
  }
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(CheckRoom(name));
  }
  InstallGuardOnce();
  ASSIGN_OR_RETURN(const int fd, OpenObject(key, offset, byte_size, world_readable_only_));
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t start = offset - offset % page;
  const size_t length = static_cast<size_t>(offset - start + byte_size);
  void* base = mmap(nullptr, length, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(start));
  const int map_errno = errno;
  close(fd);
  if (base == MAP_FAILED) return OpenError(key, map_errno);
  const uintptr_t begin = reinterpret_cast<uintptr_t>(base);
  const int slot = TakeSlot(begin, begin + (length + page - 1) / page * page);
  if (slot < 0) {
    munmap(base, length);
    return absl::ResourceExhaustedError("every shared-memory slot of this process is taken");
  }
  auto mapping = std::make_shared<const Mapping>(
      RegionStatus{.name = name, .key = key, .offset = offset, .byte_size = byte_size}, base,
      length, static_cast<size_t>(offset - start), slot);
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckRoom(name));  // another call may have taken the name or the room
  regions_.emplace(name, std::move(mapping));
  return absl::OkStatus();
}

absl::Status SharedMemoryRegions::Unregister(const std::string& name) {
  std::vector<std::shared_ptr<const Mapping>> gone;  // unmapped after the lock
  absl::MutexLock lock(&mu_);
  if (name.empty()) {
    for (auto& [n, m] : regions_) gone.push_back(std::move(m));
    regions_.clear();
  } else if (auto it = regions_.find(name); it != regions_.end()) {
    gone.push_back(std::move(it->second));
    regions_.erase(it);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SharedMemoryRegions::RegionStatus>> SharedMemoryRegions::Status(
    const std::string& name) const {
  std::vector<RegionStatus> out;
  absl::MutexLock lock(&mu_);
  if (name.empty()) {
    for (const auto& [n, m] : regions_) out.push_back(m->status);
    return out;
  }
  auto it = regions_.find(name);
  if (it == regions_.end()) {
    return absl::NotFoundError(absl::StrCat("region '", ClientText(name), "' is not registered"));
  }
  out.push_back(it->second->status);
  return out;
}

absl::StatusOr<SharedMemoryRegions::Bytes> SharedMemoryRegions::View(
    absl::string_view name, int64_t offset, int64_t size, absl::string_view field) const {
  std::shared_ptr<const Mapping> mapping;
  {
    absl::MutexLock lock(&mu_);
    auto it = regions_.find(name);
    if (it != regions_.end()) mapping = it->second;
  }
  if (mapping == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, "['shared_memory_region'] = '", ClientText(name),
        "' is not a registered region (SystemSharedMemoryRegister)"));
  }
  if (mapping->faults() > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, "['shared_memory_region'] = '", ClientText(name),
        "': its object was truncated after it was registered; unregister it and register "
        "it again"));
  }
  const int64_t region_bytes = static_cast<int64_t>(mapping->status.byte_size);
  if (offset < 0 || size < 0 || offset > region_bytes || size > region_bytes - offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, "['shared_memory_offset'] = ", offset, " + ['shared_memory_byte_size'] = ", size,
        " is past the end of region '", ClientText(name), "' (", region_bytes, " bytes)"));
  }
  absl::string_view data = mapping->bytes().substr(static_cast<size_t>(offset),
                                                   static_cast<size_t>(size));
  return Bytes{.data = data, .hold = std::move(mapping)};
}

int SharedMemoryRegions::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(regions_.size());
}

int64_t SharedMemoryRegions::byte_size() const {
  absl::MutexLock lock(&mu_);
  int64_t bytes = 0;
  for (const auto& [name, mapping] : regions_) {
    bytes += static_cast<int64_t>(mapping->status.byte_size);
  }
  return bytes;
}

}  // namespace metalserve
