// echo_server: gRPC's own floor for metalserve's Predict, measured by the
// same client (metalserve-bench). A minimal callback unary server that
// serves metalserve.v1.Inference with a raw Predict handler: it receives the
// request's bytes (gRPC reads the whole message) and answers with one
// PredictResponse serialised once at start-up, holding zeros of the
// signature's outputs for one row, so the response has the size metalserve's
// would have at batch 1. It never parses the request: what it costs is what
// gRPC costs to move the same bytes. GetModelMetadata answers from the
// signature so that metalserve-bench can build its requests.
//
//   echo_server --signature=build/models/identity.json --address=127.0.0.1:0
//
// Prints "ready: gRPC on <address> port <port>" once it serves; stops on
// SIGTERM/SIGINT. Bench-only: not installed, no metrics, no TLS.
#include <csignal>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <iostream>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "common/mutex_mode.h"
#include "grpcpp/grpcpp.h"
#include "metalserve/v1/inference.grpc.pb.h"
#include "server/model_config/model_config.h"
#include "proto/dtype/dtype_map.h"
#include "server/service/tensor_codec.h"

ABSL_FLAG(std::string, signature, "", "Signature .json of the model to imitate (required)");
ABSL_FLAG(std::string, address, "127.0.0.1:0",
          "Listen address host:port or unix:///path; port 0 picks one");
ABSL_FLAG(int64_t, max_message_bytes, 64 << 20, "Largest gRPC message in bytes");

namespace metalserve {
namespace {

using v1::GetModelMetadataRequest;
using v1::GetModelMetadataResponse;

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

class EchoService final
    : public v1::Inference::WithRawCallbackMethod_Predict<
          v1::Inference::WithCallbackMethod_GetModelMetadata<v1::Inference::Service>> {
 public:
  explicit EchoService(const ModelSignature& sig) {
    v1::PredictResponse response;
    response.set_model_name(sig.name);
    response.set_device("none");
    for (const TensorSpec& s : sig.outputs) {
      Tensor t{.name = s.name, .dtype = s.dtype, .shape = s.shape};
      t.shape[0] = 1;
      auto* o = response.add_outputs();
      o->set_name(s.name);
      o->set_dtype(ProtoDataType(s.dtype));
      for (int64_t d : t.shape) o->add_shape(d);
      o->mutable_data()->assign(static_cast<size_t>(t.RowBytes()), '\0');
    }
    bool own = false;
    grpc::SerializationTraits<v1::PredictResponse>::Serialize(response, &response_, &own);
    metadata_.set_model_name(sig.name);
    metadata_.set_model_version(sig.version);
    metadata_.set_device("none");
    for (const TensorSpec& s : sig.inputs) Add(s, metadata_.add_inputs());
    for (const TensorSpec& s : sig.outputs) Add(s, metadata_.add_outputs());
  }

  grpc::ServerUnaryReactor* Predict(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* /*request*/,
                                    grpc::ByteBuffer* response) override {
    *response = response_;  // a reference to the same slices, no copy
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* GetModelMetadata(grpc::CallbackServerContext* context,
                                             const GetModelMetadataRequest*,
                                             GetModelMetadataResponse* response) override {
    *response = metadata_;
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  static void Add(const TensorSpec& s, v1::TensorSpec* out) {
    out->set_name(s.name);
    out->set_dtype(ProtoDataType(s.dtype));
    for (int64_t d : s.shape) out->add_shape(d);
  }

  grpc::ByteBuffer response_;
  GetModelMetadataResponse metadata_;
};

int Main() {
  auto sig = ReadModelSignature(absl::GetFlag(FLAGS_signature));
  if (!sig.ok()) {
    std::cerr << "echo_server: --signature: " << sig.status() << "\n";
    return 2;
  }
  EchoService service(*sig);
  grpc::ServerBuilder builder;
  int port = 0;
  const std::string address = absl::GetFlag(FLAGS_address);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(static_cast<int>(absl::GetFlag(FLAGS_max_message_bytes)));
  builder.SetMaxSendMessageSize(static_cast<int>(absl::GetFlag(FLAGS_max_message_bytes)));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) {
    std::cerr << "echo_server: cannot listen on " << address << "\n";
    return 1;
  }
  std::cout << "ready: gRPC on " << address << " port " << port << std::endl;
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  while (g_stop == 0) absl::SleepFor(absl::Milliseconds(20));
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return 0;
}

}  // namespace
}  // namespace metalserve

int main(int argc, char** argv) {
  // As metalserve does (common/mutex_mode.h), so that the floor and the
  // server pay the same for gRPC's own mutexes.
  metalserve::ApplyMutexDeadlockDetectionSetting();
  absl::ParseCommandLine(argc, argv);
#ifdef __GLIBC__
  // The allocator settings metalserve uses (server/main.cc), so that the
  // floor and the server differ in their work, not in their page faults.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
  return metalserve::Main();
}
