// ServerOptions::Validate: every check that can be made before binding, so
// that an operator's mistake is reported as itself rather than as "cannot
// listen" (gRPC reports bad TLS files and bad addresses alike at
// BuildAndStart) or not at all (a port above 65535 used to pick a random
// port; an address without one bound 443).
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/service/listen_address.h"
#include "server/service/server.h"

namespace metalserve {
namespace {

absl::Status BadAddress(absl::string_view address, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("address '", address, "' ", why,
                   "; write host:port, [ipv6]:port or unix:/path (port 0 picks a free one)"));
}

absl::Status ValidateAddress(absl::string_view address) {
  if (absl::StartsWith(address, "unix:") || absl::StartsWith(address, "unix-abstract:")) {
    const std::optional<std::string> path = UnixSocketPath(address);
    if (address.substr(address.find(':') + 1).empty() || (path && path->empty())) {
      return BadAddress(address, "has no socket path");
    }
    return path ? ValidateUnixSocketPath(address, *path) : absl::OkStatus();
  }
  absl::string_view host = address;
  absl::string_view port;
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    if (close == absl::string_view::npos) return BadAddress(address, "has no closing ']'");
    host = address.substr(1, close - 1);
    absl::string_view rest = address.substr(close + 1);
    if (!absl::StartsWith(rest, ":")) return BadAddress(address, "has no port");
    port = rest.substr(1);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == absl::string_view::npos) return BadAddress(address, "has no port");
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
    if (absl::StrContains(host, ":")) {
      return BadAddress(address, "has an IPv6 host outside brackets");
    }
  }
  if (port.empty()) return BadAddress(address, "has no port");
  int64_t p = -1;
  const bool digits = port.size() <= 6 &&
      std::all_of(port.begin(), port.end(), [](char c) { return absl::ascii_isdigit(c); });
  if (!digits || !absl::SimpleAtoi(port, &p) || p > 65535) {
    return BadAddress(address, absl::StrCat("has port '", port, "', not in [0, 65535]"));
  }
  return absl::OkStatus();
}


struct BioDeleter { void operator()(BIO* b) const { BIO_free(b); } };
struct X509Deleter { void operator()(X509* x) const { X509_free(x); } };
struct KeyDeleter { void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); } };
using Bio = std::unique_ptr<BIO, BioDeleter>;

Bio MemBio(const std::string& pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// Refuses to prompt for a passphrase: an encrypted key fails to parse.
int NoPassphrase(char*, int, int, void*) { return 0; }

// The first certificate in `path`, or INVALID_ARGUMENT.
absl::StatusOr<std::unique_ptr<X509, X509Deleter>> ParseCert(
    const std::string& path, absl::string_view flag) {
  ASSIGN_OR_RETURN(const std::string pem, ReadTlsFile(path, flag));
  Bio bio = MemBio(pem);
  std::unique_ptr<X509, X509Deleter> cert(
      PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr));
  ERR_clear_error();
  if (cert == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot parse certificate ", path, " (", flag, "): no PEM certificate in it"));
  }
  return cert;
}

absl::Status ValidateTls(const ServerOptions& o) {
  if (o.tls_cert_path.empty() && o.tls_key_path.empty()) {
    if (!o.tls_client_ca_path.empty()) {
      return absl::InvalidArgumentError("tls_client_ca needs tls_cert and tls_key as well");
    }
    return absl::OkStatus();
  }
  if (o.tls_cert_path.empty() || o.tls_key_path.empty()) {
    return absl::InvalidArgumentError("tls_cert and tls_key must be given together");
  }
  ASSIGN_OR_RETURN(auto cert, ParseCert(o.tls_cert_path, "tls_cert"));
  ASSIGN_OR_RETURN(const std::string key_pem, ReadTlsFile(o.tls_key_path, "tls_key"));
  Bio bio = MemBio(key_pem);
  std::unique_ptr<EVP_PKEY, KeyDeleter> key(
      PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr));
  ERR_clear_error();
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot parse private key ", o.tls_key_path,
        " (tls_key): no unencrypted PEM private key in it"));
  }
  const bool match = X509_check_private_key(cert.get(), key.get()) == 1;
  ERR_clear_error();
  if (!match) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TLS key does not match certificate: tls_key ", o.tls_key_path,
        " is not the key of tls_cert ", o.tls_cert_path));
  }
  if (!o.tls_client_ca_path.empty()) {
    RETURN_IF_ERROR(ParseCert(o.tls_client_ca_path, "tls_client_ca").status());
  }
  return absl::OkStatus();
}

// Each entry of the comma-separated list valid, and none given twice.
absl::Status ValidateAddresses(absl::string_view list) {
  const std::vector<std::string> all = SplitAddresses(list);
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "address list '", list, "' has an empty entry; separate addresses with one comma"));
    }
    RETURN_IF_ERROR(ValidateAddress(all[i]));
    if (std::find(all.begin(), all.begin() + i, all[i]) != all.begin() + i) {
      return absl::InvalidArgumentError(
          absl::StrCat("address '", all[i], "' is given twice in '", list, "'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ServerOptions::Validate() const {
  RETURN_IF_ERROR(ValidateAddresses(address));
  // An abstract socket has no file permissions: under --shared_memory=unix
  // it would admit every local user.
  for (const std::string& entry : SplitAddresses(address)) {
    if (shared_memory == SharedMemoryAccess::kUnix && absl::StartsWith(entry, "unix-abstract:")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--shared_memory=unix admits callers by the socket file's permissions, and address '",
          entry, "' is an abstract socket, which has none; use a unix:/path socket, or "
          "--shared_memory=local"));
    }
  }
  if (max_message_bytes <= 0 || max_message_bytes > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_message_bytes must be in [1, 2147483647], got ", max_message_bytes));
  }
  if (device_concurrency < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device_concurrency must be at least 1, got ", device_concurrency));
  }
  if (memory_quota_bytes < 0 ||
      (memory_quota_bytes > 0 && memory_quota_bytes < max_message_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory_quota_bytes must be 0 (sized from max_message_bytes) or at least "
        "max_message_bytes (", max_message_bytes, "), got ", memory_quota_bytes));
  }
  if (unix_socket_buffer_bytes < 0 || unix_socket_buffer_bytes > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unix_socket_buffer_bytes must be in [0, 1073741824] (0: the kernel's default), got ",
        unix_socket_buffer_bytes));
  }
  if (max_unread_response_bytes_per_connection < 0 || max_unread_response_bytes < 0 ||
      max_concurrent_streams < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_unread_response_bytes_per_connection (", max_unread_response_bytes_per_connection,
        "), max_unread_response_bytes (", max_unread_response_bytes,
        ") and max_concurrent_streams (", max_concurrent_streams, ") must be >= 0"));
  }
  if (grpc_cq_threads < 0 || grpc_cq_threads > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grpc_cq_threads must be in [0, 64] (0: the default), got ", grpc_cq_threads));
  }
  RETURN_IF_ERROR(UnreadResponses::Create(UnreadLimits(), Clock::SteadyClock()).status());
  RETURN_IF_ERROR(batching.Validate());
  return ValidateTls(*this);
}

int64_t ServerOptions::MemoryQuotaBytes() const {
  if (memory_quota_bytes > 0) return memory_quota_bytes;
  return std::max<int64_t>(int64_t{256} << 20, 4 * max_message_bytes);
}

UnreadResponsesOptions ServerOptions::UnreadLimits() const {
  UnreadResponsesOptions u;
  u.max_bytes_per_connection = max_unread_response_bytes_per_connection > 0
                                   ? max_unread_response_bytes_per_connection
                                   : 2 * max_message_bytes;
  u.max_bytes = max_unread_response_bytes > 0
                    ? max_unread_response_bytes
                    : std::max(u.max_bytes_per_connection, MemoryQuotaBytes());
  u.max_age = unread_response_timeout;
  return u;
}

absl::StatusOr<std::string> ReadTlsFile(const std::string& path, absl::string_view flag) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " file '", path, "' cannot be read"));
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace metalserve
