// The KServe system shared-memory extension on inference.GRPCInferenceService:
// SystemSharedMemoryStatus, Register and Unregister (Triton's messages), over
// the server's SharedMemoryRegions (shared_memory.h).
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "server/service/kserve_service.h"
#include "server/service/status_util.h"

namespace metalserve {

absl::StatusOr<SharedMemoryRegions*> KServeService::SharedMemoryFor(
    const grpc::ServerContextBase& context) const {
  if (shared_memory_access_ == SharedMemoryAccess::kOff || shared_memory_ == nullptr) {
    return absl::PermissionDeniedError(
        "this server does not accept shared memory (--shared_memory=off)");
  }
  const std::string peer = context.peer();
  if (!PeerMayUseSharedMemory(shared_memory_access_, peer)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "shared memory is accepted only from ",
        shared_memory_access_ == SharedMemoryAccess::kUnix ? "a Unix socket"
                                                          : "a Unix socket or loopback",
        " (--shared_memory=", SharedMemoryAccessName(shared_memory_access_),
        "); this call came from ", ClientText(peer)));
  }
  return shared_memory_;
}

void KServeService::RecordSharedMemory(const SharedMemoryRegions& regions) {
  if (metrics_ == nullptr) return;
  // One at a time: the last to run read the registry after every change
  // before it, so concurrent calls cannot leave an older figure last.
  absl::MutexLock lock(&shared_memory_metrics_mu_);
  metrics_->SetSharedMemoryRegions(regions.size(), regions.byte_size());
}

grpc::ServerUnaryReactor* KServeService::SystemSharedMemoryStatus(
    grpc::CallbackServerContext* context,
    const inference::SystemSharedMemoryStatusRequest* request,
    inference::SystemSharedMemoryStatusResponse* response) {
  return Answer(context, "SystemSharedMemoryStatus", [&]() -> absl::Status {
    absl::StatusOr<SharedMemoryRegions*> regions = SharedMemoryFor(*context);
    if (!regions.ok()) return regions.status();
    auto status = (*regions)->Status(request->name());
    if (!status.ok()) return status.status();
    for (const SharedMemoryRegions::RegionStatus& r : *status) {
      auto& out = (*response->mutable_regions())[r.name];
      out.set_name(r.name);
      out.set_key(r.key);
      out.set_offset(r.offset);
      out.set_byte_size(r.byte_size);
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* KServeService::SystemSharedMemoryRegister(
    grpc::CallbackServerContext* context,
    const inference::SystemSharedMemoryRegisterRequest* request,
    inference::SystemSharedMemoryRegisterResponse*) {
  return Answer(context, "SystemSharedMemoryRegister", [&]() -> absl::Status {
    absl::StatusOr<SharedMemoryRegions*> regions = SharedMemoryFor(*context);
    if (!regions.ok()) return regions.status();
    const absl::Status s = (*regions)->Register(request->name(), request->key(),
                                                request->offset(), request->byte_size());
    if (s.ok()) RecordSharedMemory(**regions);
    int64_t suppressed = 0;
    if (s.ok() && shared_memory_log_.Allow(&suppressed)) {
      // Escaped: a name or key is the client's text, and a log line is one line.
      LOG(INFO) << "shared memory: region '" << absl::CHexEscape(ClientText(request->name()))
                << "' registered (" << absl::CHexEscape(ClientText(request->key()))
                << ", offset " << request->offset() << ", " << request->byte_size()
                << " bytes) by " << ClientText(context->peer()) << "; " << (*regions)->size()
                << " registered (" << suppressed << " similar lines suppressed)";
    }
    return s;
  });
}

grpc::ServerUnaryReactor* KServeService::SystemSharedMemoryUnregister(
    grpc::CallbackServerContext* context,
    const inference::SystemSharedMemoryUnregisterRequest* request,
    inference::SystemSharedMemoryUnregisterResponse*) {
  return Answer(context, "SystemSharedMemoryUnregister", [&]() -> absl::Status {
    absl::StatusOr<SharedMemoryRegions*> regions = SharedMemoryFor(*context);
    if (!regions.ok()) return regions.status();
    const absl::Status s = (*regions)->Unregister(request->name());
    RecordSharedMemory(**regions);
    return s;
  });
}

}  // namespace metalserve
