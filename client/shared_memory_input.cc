#include "client/shared_memory_input.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "inference/grpc_service.grpc.pb.h"

namespace metalserve::client {
namespace {

constexpr int64_t kAlign = 64;

absl::Status Errno(absl::string_view what, const std::string& key) {
  return absl::InternalError(absl::StrCat(what, " ", key, ": ", std::strerror(errno)));
}

grpc::ClientContext* WithDeadline(grpc::ClientContext* context) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  return context;
}

}  // namespace

absl::Status CheckSharedMemoryFlag(absl::string_view value, absl::string_view protocol,
                                   absl::string_view target) {
  if (value == "none") return absl::OkStatus();
  if (value == "system" && protocol == "kserve" && !absl::StrContains(target, ",") &&
      !absl::StartsWith(target, "dns:")) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--shared_memory='", value, "': want none, or system with --protocol=kserve and one "
      "server (--target one address: the region is registered with that server)"));
}

absl::StatusOr<std::unique_ptr<SharedMemoryInput>> SharedMemoryInput::Create(
    std::shared_ptr<grpc::Channel> channel, inference::ModelInferRequest* request) {
  if (request->raw_input_contents_size() != request->inputs_size()) {
    return absl::InvalidArgumentError("--shared_memory needs raw_input_contents for every input");
  }
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (const std::string& bytes : request->raw_input_contents()) {
    offsets.push_back(total);
    total += (static_cast<int64_t>(bytes.size()) + kAlign - 1) / kAlign * kAlign;
  }
  const std::string region = absl::StrCat("metalserve-bench-", getpid());
  const std::string key = "/" + region;
  const int fd = shm_open(key.c_str(), O_CREAT | O_EXCL | O_RDWR, 0644);
  if (fd < 0) return Errno("shm_open", key);
  std::unique_ptr<SharedMemoryInput> input(new SharedMemoryInput(std::move(channel), key, region));
  // Readable by every local user whatever the umask (it holds generated or
  // given test inputs): a server running as another user (the systemd
  // unit's DynamicUser) can map it, and --shared_memory=local maps only such
  // objects.
  const size_t size = static_cast<size_t>(std::max<int64_t>(total, 1));
#ifdef __linux__
  const bool moded = fchmod(fd, 0644) == 0;  // past the umask (macOS applies none)
#else
  const bool moded = true;  // macOS: no fchmod on these, and no umask applied
#endif
  if (!moded || ftruncate(fd, static_cast<off_t>(size)) != 0) {
    close(fd);
    return Errno("fchmod/ftruncate", key);
  }
  // Written through a mapping: macOS has no write() on shared-memory objects.
  void* map = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return Errno("mmap", key);
  for (int i = 0; i < request->inputs_size(); ++i) {
    const std::string& bytes = request->raw_input_contents(i);
    std::memcpy(static_cast<char*>(map) + offsets[i], bytes.data(), bytes.size());
  }
  munmap(map, size);
  inference::SystemSharedMemoryRegisterRequest q;
  q.set_name(region);
  q.set_key(key);
  q.set_offset(0);
  q.set_byte_size(static_cast<uint64_t>(std::max<int64_t>(total, 1)));
  inference::SystemSharedMemoryRegisterResponse r;
  grpc::ClientContext context;
  const grpc::Status s = inference::GRPCInferenceService::NewStub(input->channel_)
                             ->SystemSharedMemoryRegister(WithDeadline(&context), q, &r);
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        absl::StrCat("SystemSharedMemoryRegister: ", s.error_message()));
  }
  input->registered_ = true;
  for (int i = 0; i < request->inputs_size(); ++i) {
    auto& params = *request->mutable_inputs(i)->mutable_parameters();
    params["shared_memory_region"].set_string_param(region);
    params["shared_memory_offset"].set_int64_param(offsets[i]);
    params["shared_memory_byte_size"].set_int64_param(
        static_cast<int64_t>(request->raw_input_contents(i).size()));
  }
  request->clear_raw_input_contents();
  return input;
}

SharedMemoryInput::~SharedMemoryInput() {
  if (registered_) {
    inference::SystemSharedMemoryUnregisterRequest q;
    q.set_name(region_);
    inference::SystemSharedMemoryUnregisterResponse r;
    grpc::ClientContext context;
    inference::GRPCInferenceService::NewStub(channel_)->SystemSharedMemoryUnregister(
        WithDeadline(&context), q, &r);
  }
  shm_unlink(key_.c_str());
}

}  // namespace metalserve::client
