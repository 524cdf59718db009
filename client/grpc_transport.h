// The gRPC transports of the load generator: native metalserve.v1 Predict and
// KServe inference.GRPCInferenceService/ModelInfer, each spreading calls over
// its channels (one stub per channel). Over KServe the server-side figures
// come from the response's int64 parameters "queue_time_us",
// "compute_time_us" and "batch_rows" when present; the answering version
// from each response's model_version.
//
// Thread-safety and lifetime: as CallTransport (call_transport.h).
#ifndef METALSERVE_CLIENT_GRPC_TRANSPORT_H_
#define METALSERVE_CLIENT_GRPC_TRANSPORT_H_

#include <memory>
#include <vector>

#include "client/call_transport.h"
#include "grpcpp/channel.h"
#include "inference/grpc_service.pb.h"
#include "metalserve/v1/inference.pb.h"

namespace metalserve::client {

// `channels` must be non-empty.
std::unique_ptr<CallTransport> NewPredictTransport(
    std::vector<std::shared_ptr<grpc::Channel>> channels, v1::PredictRequest request);
std::unique_ptr<CallTransport> NewModelInferTransport(
    std::vector<std::shared_ptr<grpc::Channel>> channels,
    inference::ModelInferRequest request);

}  // namespace metalserve::client

#endif  // METALSERVE_CLIENT_GRPC_TRANSPORT_H_
