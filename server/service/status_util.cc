#include "server/service/status_util.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace metalserve {

std::string Truncated(absl::string_view text, size_t limit) {
  if (text.size() <= limit) return std::string(text);
  size_t cut = limit;
  // Back up over UTF-8 continuation bytes (10xxxxxx) so that no character is
  // split; at most 3 of them precede a character's first byte.
  for (int i = 0; i < 3 && cut > 0 &&
                  (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80;
       ++i) {
    --cut;
  }
  return absl::StrCat(text.substr(0, cut), "...(truncated, ", text.size(),
                      " bytes)");
}

std::string ClientText(absl::string_view text) {
  return Truncated(text, kMaxClientTextBytes);
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl and gRPC share the canonical code numbering.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      Truncated(status.message(), kMaxStatusMessageBytes));
}

absl::StatusCode FromGrpcCode(grpc::StatusCode code) {
  return static_cast<absl::StatusCode>(code);
}

}  // namespace metalserve
