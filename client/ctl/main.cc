// metalservectl: lists, loads and unloads the models of a metalserve server
// started with --model_repository (docs/repository.md), over the KServe gRPC
// model-repository extension, and asks whether a model is ready.
//
//   metalservectl index
//   metalservectl --server=10.0.0.5:8500 load resnet18
//   metalservectl --server=unix:///run/metalserve.sock unload resnet18
//   metalservectl ready resnet18 --version=2
//   metalservectl metadata resnet18
//
// Exit status: 0 success; 1 the server answered an error or could not be
// reached (the gRPC code and message are printed on stderr); 2 a usage
// error; 3 `ready` answered not ready.
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/channel_factory.h"
#include "client/ctl/commands.h"
#include "common/flags_help.h"

ABSL_FLAG(std::string, server, "127.0.0.1:8500",
          "The server's gRPC address: host:port, or any gRPC target URI such "
          "as unix:///path/to.sock or dns:///name:port. Default 127.0.0.1:8500.");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(10),
          "Deadline of index, ready and metadata calls. Default 10s.");
ABSL_FLAG(absl::Duration, load_timeout, absl::Minutes(5),
          "Deadline of load and unload calls (a load reads, verifies and warms "
          "up the model: a ResNet-50 on CUDA took 29 s). A load that outlives "
          "it goes on in the server; `index` shows how it ended. Default 5m.");
ABSL_FLAG(std::string, version, "",
          "ready, metadata: the model version; empty = the newest ready one.");
ABSL_FLAG(std::string, tls_ca, "", "PEM root certificates; enables TLS.");
ABSL_FLAG(std::string, tls_cert, "", "PEM client certificate chain (mutual TLS).");
ABSL_FLAG(std::string, tls_key, "", "PEM client private key (mutual TLS).");
ABSL_FLAG(std::string, tls_server_name, "",
          "Name checked against the server certificate; enables TLS.");

namespace metalserve::ctl {
namespace {

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNotReady = 3;

int Fail(int code, const absl::Status& status) {
  std::cerr << "metalservectl: " << absl::StatusCodeToString(status.code()) << ": "
            << status.message() << "\n";
  return code;
}

absl::StatusOr<std::unique_ptr<Stub>> Connect() {
  client::ChannelOptions o;
  o.targets = {absl::GetFlag(FLAGS_server)};
  o.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  o.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  o.tls_key = absl::GetFlag(FLAGS_tls_key);
  o.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  auto channels = client::CreateChannels(o);
  if (!channels.ok()) return channels.status();
  return inference::GRPCInferenceService::NewStub(channels->front());
}

absl::Status Run(const Command& c, Stub& stub, bool* ready) {
  const absl::Duration timeout = absl::GetFlag(FLAGS_timeout);
  const absl::Duration load_timeout = absl::GetFlag(FLAGS_load_timeout);
  const std::string version = absl::GetFlag(FLAGS_version);
  if (c.name == "index") return Index(stub, timeout, std::cout);
  if (c.name == "load") return Load(stub, load_timeout, c.model, std::cout);
  if (c.name == "unload") return Unload(stub, load_timeout, c.model, std::cout);
  if (c.name == "ready") return Ready(stub, timeout, c.model, version, ready, std::cout);
  return Metadata(stub, timeout, c.model, version, std::cout);
}

int Main(const std::vector<std::string>& args) {
  auto command = ParseCommand(args);
  if (!command.ok()) {
    std::cerr << "metalservectl: " << command.status().message() << "\n"
              << kCommandsUsage << "(metalservectl --help lists the flags)\n";
    return kExitUsage;
  }
  if (absl::GetFlag(FLAGS_timeout) <= absl::ZeroDuration() ||
      absl::GetFlag(FLAGS_load_timeout) <= absl::ZeroDuration()) {
    std::cerr << "metalservectl: --timeout and --load_timeout must be positive\n";
    return kExitUsage;
  }
  auto stub = Connect();
  if (!stub.ok()) return Fail(kExitUsage, stub.status());
  bool ready = true;
  const absl::Status done = Run(*command, **stub, &ready);
  if (!done.ok()) return Fail(kExitError, done);
  return ready ? 0 : kExitNotReady;
}

}  // namespace
}  // namespace metalserve::ctl

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(absl::StrCat(
      "Lists, loads and unloads the models of a metalserve server "
      "(--model_repository, --model_control=explicit):\n"
      "  metalservectl [--server=host:port|unix:///path] [--timeout=10s] COMMAND\n",
      metalserve::ctl::kCommandsUsage));
  metalserve::ConfigureFlagsHelp(argc, argv, __FILE__, "client/ctl/main.cc");
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  return metalserve::ctl::Main({positional.begin() + 1, positional.end()});
}
