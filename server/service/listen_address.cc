#include "server/service/listen_address.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "glog/logging.h"

namespace metalserve {

std::vector<std::string> SplitAddresses(absl::string_view list) {
  std::vector<std::string> out;
  for (absl::string_view a : absl::StrSplit(list, ',')) {
    out.emplace_back(absl::StripAsciiWhitespace(a));
  }
  return out;
}

std::optional<std::string> UnixSocketPath(absl::string_view address) {
  if (!absl::ConsumePrefix(&address, "unix:")) return std::nullopt;
  // unix:///abs/path is the URI form of unix:/abs/path.
  if (absl::StartsWith(address, "//")) address.remove_prefix(2);
  return std::string(address);
}

absl::Status ValidateUnixSocketPath(absl::string_view address, const std::string& path) {
  if (path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "address '", address, "': the socket path has ", path.size(),
        " bytes; at most ", sizeof(sockaddr_un{}.sun_path) - 1, " fit"));
  }
  std::filesystem::path folder = std::filesystem::path(path).parent_path();
  if (folder.empty()) folder = ".";
  std::error_code ec;
  if (!std::filesystem::is_directory(folder, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "address '", address, "': the socket's folder '", folder.string(),
        "' does not exist"));
  }
  return absl::OkStatus();
}

namespace {

// True when a server accepts connections on the socket at `path`.
bool SomeoneListens(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  const bool connected =
      connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return connected;
}

}  // namespace

absl::Status PrepareUnixSocket(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return absl::OkStatus();  // nothing there
  if (!S_ISSOCK(st.st_mode)) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on unix socket '", path,
        "': the path exists and is not a socket; refusing to remove it"));
  }
  if (SomeoneListens(path)) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on unix socket '", path,
        "': a server already answers on it (another metalserve?)"));
  }
  if (unlink(path.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot remove the stale unix socket '", path, "': ", std::strerror(errno)));
  }
  LOG(WARNING) << "removed stale unix socket " << path
               << " (no server answered on it; a previous server did not stop cleanly?)";
  return absl::OkStatus();
}

void RemoveUnixSocket(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) unlink(path.c_str());
}

}  // namespace metalserve
