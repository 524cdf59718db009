#include "client/ctl/commands.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/client_context.h"

namespace metalserve::ctl {
namespace {

std::unique_ptr<grpc::ClientContext> ContextWith(absl::Duration timeout) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
  return ctx;
}

absl::Status FromGrpc(const grpc::Status& s, absl::string_view rpc) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(rpc, ": ", s.error_message()));
}

// Pads each column to its widest cell; the last column is not padded.
void PrintTable(const std::vector<std::vector<std::string>>& rows, std::ostream& out) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()), 0);
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    out << line.substr(0, line.find_last_not_of(' ') + 1) << "\n";
  }
}

void PrintTensors(absl::string_view kind,
                  const google::protobuf::RepeatedPtrField<
                      inference::ModelMetadataResponse::TensorMetadata>& tensors,
                  std::ostream& out) {
  for (const auto& t : tensors) {
    out << kind << " " << t.name() << " " << t.datatype() << " ["
        << absl::StrJoin(t.shape(), ",") << "]\n";
  }
}

}  // namespace

const char kCommandsUsage[] =
    "commands:\n"
    "  index                          the repository: model, version, state, reason\n"
    "  load MODEL                     load MODEL from its folder (or reload it)\n"
    "  unload MODEL                   stop serving MODEL (admitted requests finish)\n"
    "  ready MODEL [--version=V]      exit 0 when ready, 3 when not\n"
    "  metadata MODEL [--version=V]   versions, platform, inputs and outputs\n"
    "exit status: 0 success; 1 the server answered an error or could not be\n"
    "reached (its gRPC code and message are printed); 2 usage; 3 not ready\n";

absl::StatusOr<Command> ParseCommand(const std::vector<std::string>& args) {
  if (args.empty()) return absl::InvalidArgumentError("no command given");
  Command c{args[0], ""};
  const bool takes_model = c.name == "load" || c.name == "unload" || c.name == "ready" ||
                           c.name == "metadata";
  if (c.name != "index" && !takes_model) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown command '", c.name, "'; want index, load, unload, ready or metadata"));
  }
  const size_t want = takes_model ? 2 : 1;
  if (args.size() < want) {
    return absl::InvalidArgumentError(absl::StrCat(c.name, " needs a MODEL argument"));
  }
  if (args.size() > want) {
    return absl::InvalidArgumentError(absl::StrCat(
        c.name, " takes ", want - 1, " argument(s); unexpected '", args[want], "'"));
  }
  if (takes_model) c.model = args[1];
  return c;
}

absl::Status Index(Stub& stub, absl::Duration timeout, std::ostream& out) {
  inference::RepositoryIndexRequest req;
  inference::RepositoryIndexResponse resp;
  const grpc::Status s = stub.RepositoryIndex(ContextWith(timeout).get(), req, &resp);
  if (!s.ok()) return FromGrpc(s, "RepositoryIndex");
  std::vector<std::vector<std::string>> rows = {{"MODEL", "VERSION", "STATE", "REASON"}};
  for (const auto& m : resp.models()) {
    rows.push_back({m.name(), m.version().empty() ? "-" : m.version(), m.state(), m.reason()});
  }
  PrintTable(rows, out);
  return absl::OkStatus();
}

absl::Status Load(Stub& stub, absl::Duration timeout, const std::string& model,
                  std::ostream& out) {
  inference::RepositoryModelLoadRequest req;
  req.set_model_name(model);
  inference::RepositoryModelLoadResponse resp;
  const grpc::Status s = stub.RepositoryModelLoad(ContextWith(timeout).get(), req, &resp);
  if (!s.ok()) return FromGrpc(s, "RepositoryModelLoad");
  out << "loaded " << model << "\n";
  return absl::OkStatus();
}

absl::Status Unload(Stub& stub, absl::Duration timeout, const std::string& model,
                    std::ostream& out) {
  inference::RepositoryModelUnloadRequest req;
  req.set_model_name(model);
  inference::RepositoryModelUnloadResponse resp;
  const grpc::Status s = stub.RepositoryModelUnload(ContextWith(timeout).get(), req, &resp);
  if (!s.ok()) return FromGrpc(s, "RepositoryModelUnload");
  out << "unloaded " << model << "\n";
  return absl::OkStatus();
}

absl::Status Ready(Stub& stub, absl::Duration timeout, const std::string& model,
                   const std::string& version, bool* ready, std::ostream& out) {
  inference::ModelReadyRequest req;
  req.set_name(model);
  req.set_version(version);
  inference::ModelReadyResponse resp;
  const grpc::Status s = stub.ModelReady(ContextWith(timeout).get(), req, &resp);
  if (!s.ok()) return FromGrpc(s, "ModelReady");
  *ready = resp.ready();
  out << model << (version.empty() ? "" : absl::StrCat(" version ", version))
      << (resp.ready() ? " ready" : " not ready") << "\n";
  return absl::OkStatus();
}

absl::Status Metadata(Stub& stub, absl::Duration timeout, const std::string& model,
                      const std::string& version, std::ostream& out) {
  inference::ModelMetadataRequest req;
  req.set_name(model);
  req.set_version(version);
  inference::ModelMetadataResponse resp;
  const grpc::Status s = stub.ModelMetadata(ContextWith(timeout).get(), req, &resp);
  if (!s.ok()) return FromGrpc(s, "ModelMetadata");
  out << "name " << resp.name() << "\n"
      << "versions " << absl::StrJoin(resp.versions(), ",") << "\n"
      << "platform " << resp.platform() << "\n";
  PrintTensors("input", resp.inputs(), out);
  PrintTensors("output", resp.outputs(), out);
  return absl::OkStatus();
}

}  // namespace metalserve::ctl
