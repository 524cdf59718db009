// metalserve-bench --shared_memory=system (with --protocol=kserve): the
// request's input bytes go into a POSIX shared-memory object of the client's
// once, registered with the server as one region (the KServe system
// shared-memory extension, SystemSharedMemoryRegister); every call then names
// the region and its range in each input's parameters instead of carrying
// the bytes in raw_input_contents. What a co-located client saves is the
// bytes' trip through gRPC, on both sides (docs/performance.md).
//
// Ownership and lifetime: owns the object; the destructor unregisters the
// region (best effort, 5 s) and unlinks the object. The channel must stay
// usable until then. Not thread-safe; made and destroyed by main.
#ifndef METALSERVE_CLIENT_SHARED_MEMORY_INPUT_H_
#define METALSERVE_CLIENT_SHARED_MEMORY_INPUT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"
#include "inference/grpc_service.pb.h"

namespace metalserve::client {

// --shared_memory's value against --protocol and --target: none, or
// system with kserve and one server (the region is registered with one).
// INVALID_ARGUMENT naming the flag otherwise.
absl::Status CheckSharedMemoryFlag(absl::string_view value, absl::string_view protocol,
                                   absl::string_view target);

class SharedMemoryInput {
 public:
  // Creates the object "/metalserve-bench-<pid>" (mode 0644) sized for `request`'s
  // raw_input_contents (each input 64-byte aligned), writes them there,
  // registers it as region "metalserve-bench-<pid>" over `channel`, and
  // rewrites `request` to name it. A server that refuses (shared memory off,
  // a peer it does not admit) fails with its status and message.
  static absl::StatusOr<std::unique_ptr<SharedMemoryInput>> Create(
      std::shared_ptr<grpc::Channel> channel, inference::ModelInferRequest* request);
  ~SharedMemoryInput();
  SharedMemoryInput(const SharedMemoryInput&) = delete;
  SharedMemoryInput& operator=(const SharedMemoryInput&) = delete;

  const std::string& region() const { return region_; }

 private:
  SharedMemoryInput(std::shared_ptr<grpc::Channel> channel, std::string key, std::string region)
      : channel_(std::move(channel)), key_(std::move(key)), region_(std::move(region)) {}

  std::shared_ptr<grpc::Channel> channel_;
  std::string key_;
  std::string region_;
  bool registered_ = false;
};

}  // namespace metalserve::client

#endif  // METALSERVE_CLIENT_SHARED_MEMORY_INPUT_H_
