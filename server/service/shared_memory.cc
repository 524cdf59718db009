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
#include <mutex>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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

void OnSigbus(int signal, siginfo_t* info, void* context) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(info->si_addr);
  for (FaultSlot& slot : g_slots) {
    const uintptr_t begin = slot.begin.load(std::memory_order_acquire);
    if (begin == 0 || at < begin || at >= slot.end.load(std::memory_order_acquire)) continue;
    // A zero page over the vanished one: the faulting read runs again and
    // finishes. mmap is a plain system call here, as in other servers that
    // map their clients' memory and survive its truncation.
    void* page = reinterpret_cast<void*>(at & ~(g_page_bytes - 1));
    if (mmap(page, g_page_bytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) !=
        MAP_FAILED) {
      slot.faults.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    break;
  }
  // Not a region's: whoever handled SIGBUS before, else the default action
  // (restored here; the access faults again on return).
  if ((g_previous_sigbus.sa_flags & SA_SIGINFO) != 0 && g_previous_sigbus.sa_sigaction != nullptr) {
    g_previous_sigbus.sa_sigaction(signal, info, context);
    return;
  }
  if ((g_previous_sigbus.sa_flags & SA_SIGINFO) == 0 && g_previous_sigbus.sa_handler != SIG_DFL &&
      g_previous_sigbus.sa_handler != SIG_IGN) {
    g_previous_sigbus.sa_handler(signal);
    return;
  }
  ::signal(SIGBUS, SIG_DFL);
}

void InstallGuardOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_page_bytes = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    struct sigaction action {};
    action.sa_sigaction = OnSigbus;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
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
        "' is not a POSIX shared-memory name: want '/' and 1 to 254 characters, no other '/'"));
  }
  return absl::OkStatus();
}

absl::Status OpenError(const std::string& key, int error) {
  const std::string what = absl::StrCat("key '", ClientText(key), "': ", std::strerror(error));
  switch (error) {
    case ENOENT: return absl::NotFoundError(absl::StrCat(what, " (no such shared-memory object)"));
    case EACCES: return absl::PermissionDeniedError(what);
    default: return absl::InvalidArgumentError(what);
  }
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
  if (absl::StartsWith(peer, "unix:") || absl::StartsWith(peer, "unix-abstract:")) return true;
  if (access == SharedMemoryAccess::kUnix) return false;
  return absl::StartsWith(peer, "ipv4:127.") || absl::StartsWith(peer, "ipv6:[::1]:") ||
         absl::StartsWith(peer, "ipv6:[::ffff:127.");
}

bool SharedMemoryRegions::Bytes::Truncated() const {
  return hold != nullptr && hold->faults() != faults_seen;
}

SharedMemoryRegions::SharedMemoryRegions(int max_regions) : max_regions_(max_regions) {}
SharedMemoryRegions::~SharedMemoryRegions() = default;

absl::Status SharedMemoryRegions::Register(const std::string& name, const std::string& key,
                                           uint64_t offset, uint64_t byte_size) {
  if (name.empty()) return absl::InvalidArgumentError("name is empty");
  if (absl::Status s = CheckKey(key); !s.ok()) return s;
  if (byte_size == 0) return absl::InvalidArgumentError("byte_size is 0");
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<off_t>::max());
  if (offset > kMax || byte_size > kMax - offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("offset ", offset, " + byte_size ", byte_size, " is out of range"));
  }
  {
    absl::MutexLock lock(&mu_);
    if (regions_.contains(name)) {
      return absl::AlreadyExistsError(
          absl::StrCat("region '", ClientText(name), "' is already registered"));
    }
    if (static_cast<int>(regions_.size()) >= max_regions_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          max_regions_, " shared-memory regions are registered, the most this server keeps; "
          "unregister one first"));
    }
  }
  InstallGuardOnce();
  int flags = O_RDONLY;
#ifdef __linux__
  flags |= O_NONBLOCK;  // a FIFO named like an object must not block the call
#endif
  const int fd = shm_open(key.c_str(), flags, 0);
  if (fd < 0) return OpenError(key, errno);
  struct stat st {};
  const int stat_result = fstat(fd, &st);
  const int stat_errno = errno;
  if (stat_result != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return stat_result != 0 ? OpenError(key, stat_errno)
                            : absl::InvalidArgumentError(absl::StrCat(
                                  "key '", ClientText(key), "' is not a shared-memory object"));
  }
  if (static_cast<uint64_t>(st.st_size) < offset + byte_size) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        "key '", ClientText(key), "' holds ", st.st_size, " bytes; offset ", offset,
        " + byte_size ", byte_size, " = ", offset + byte_size, " is past its end"));
  }
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
  if (static_cast<int>(regions_.size()) >= max_regions_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        max_regions_, " shared-memory regions are registered, the most this server keeps"));
  }
  if (!regions_.emplace(name, std::move(mapping)).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("region '", ClientText(name), "' is already registered"));
  }
  return absl::OkStatus();
}

absl::Status SharedMemoryRegions::Unregister(const std::string& name) {
  std::vector<std::shared_ptr<const Mapping>> gone;  // unmapped after the lock
  absl::MutexLock lock(&mu_);
  if (name.empty()) {
    for (auto& [n, m] : regions_) gone.push_back(std::move(m));
    regions_.clear();
    return absl::OkStatus();
  }
  auto it = regions_.find(name);
  if (it == regions_.end()) {
    return absl::NotFoundError(absl::StrCat("region '", ClientText(name), "' is not registered"));
  }
  gone.push_back(std::move(it->second));
  regions_.erase(it);
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
  const int faults = mapping->faults();
  if (faults > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, "['shared_memory_region'] = '", ClientText(name),
        "': its object was truncated after it was registered; register it again"));
  }
  const int64_t region_bytes = static_cast<int64_t>(mapping->status.byte_size);
  if (offset < 0 || size < 0 || offset > region_bytes || size > region_bytes - offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, "['shared_memory_offset'] = ", offset, " + ['shared_memory_byte_size'] = ", size,
        " is past the end of region '", ClientText(name), "' (", region_bytes, " bytes)"));
  }
  absl::string_view data = mapping->bytes().substr(static_cast<size_t>(offset),
                                                   static_cast<size_t>(size));
  return Bytes{.data = data, .hold = std::move(mapping), .region = std::string(name),
               .faults_seen = faults};
}

int SharedMemoryRegions::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(regions_.size());
}

}  // namespace metalserve
