#include "server/service/raw_call.h"

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/support/proto_buffer_reader.h"

namespace metalserve {

absl::Status CheckQueueRoom(const Batcher& batcher) {
  const int64_t queued = batcher.queued_rows();
  const int64_t capacity = batcher.options().max_queue_size;
  if (queued < capacity) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "queue is full: ", queued, " of ", capacity,
      " rows wait; refused before reading the request; retry with backoff"));
}

absl::Status ParseRequestBody(grpc::ByteBuffer* body, google::protobuf::Message* out) {
  const size_t size = body->Length();
  bool parsed = false;
  {
    grpc::ProtoBufferReader reader(body);
    parsed = out->ParseFromZeroCopyStream(&reader);
  }
  body->Clear();
  if (parsed) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "request body (", size, " bytes) is not a valid ",
      out->GetDescriptor()->full_name(), " message"));
}

int MethodIndex(absl::string_view service, absl::string_view method) {
  const google::protobuf::ServiceDescriptor* s =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          std::string(service));
  const google::protobuf::MethodDescriptor* m =
      s != nullptr ? s->FindMethodByName(std::string(method)) : nullptr;
  CHECK(m != nullptr) << "no method " << method << " in service " << service;
  return m->index();
}

}  // namespace metalserve
