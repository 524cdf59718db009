// The verification cache on disk; see verification_cache.h.
#include "server/runtime/verification_cache.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include <openssl/evp.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "glog/logging.h"

namespace metalserve {
namespace {

constexpr char kHeader[] = "metalserve verification cache v1";
constexpr char kSeparator[] = "---";

std::string Hex(const unsigned char* bytes, unsigned int n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (unsigned int i = 0; i < n; ++i) {
    out.push_back(kDigits[bytes[i] >> 4]);
    out.push_back(kDigits[bytes[i] & 15]);
  }
  return out;
}

// SHA-256 of the bytes `feed` passes to its update callback, as hex; false
// when OpenSSL or the feed fails.
template <typename Feed>
bool Sha256(Feed feed, std::string* hex) {
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (ctx == nullptr || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) return false;
  if (!feed([&](const void* p, size_t n) { return EVP_DigestUpdate(ctx.get(), p, n) == 1; })) {
    return false;
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx.get(), digest, &len) != 1) return false;
  *hex = Hex(digest, len);
  return true;
}

std::string OneLine(const std::string& s) {
  return absl::StrReplaceAll(s, {{"\n", " "}, {"\r", " "}});
}

// The record in `text`, or nullopt with *why set when it is not one.
std::optional<VerificationRecord> Parse(const std::string& text, const std::string& key,
                                        bool* key_matches, std::string* why) {
  const std::string head = absl::StrCat(kHeader, "\n");
  const std::string body_start = absl::StrCat(kSeparator, "\n");
  if (!absl::StartsWith(text, head)) {
    *why = "no header line";
    return std::nullopt;
  }
  const size_t sep = text.find(absl::StrCat("\n", body_start), head.size() - 1);
  if (sep == std::string::npos) {
    *why = "no separator line";
    return std::nullopt;
  }
  *key_matches = text.substr(head.size(), sep + 1 - head.size()) == key;
  std::vector<std::string> lines =
      absl::StrSplit(text.substr(sep + 1 + body_start.size()), '\n', absl::SkipEmpty());
  if (lines.size() != 2 || !absl::StartsWith(lines[0], "level=") ||
      !absl::StartsWith(lines[1], "reason=")) {
    *why = "the record is not a level= and a reason= line";
    return std::nullopt;
  }
  VerificationRecord r{lines[0].substr(6), lines[1].substr(7)};
  if (r.level != "none" && r.level != "freeze" && r.level != "full") {
    *why = absl::StrCat("unknown level '", r.level, "'");
    return std::nullopt;
  }
  return r;
}

}  // namespace

std::string VerificationKey::ToString() const {
  return absl::StrCat("model_sha256=", model_sha256, "\ntorch_version=", torch_version,
                      "\ndevice=", device, "\nprecision=", precision, "\noptimize=", optimize,
                      "\nbatch_sizes=", batch_sizes, "\ncomparison=", OneLine(comparison),
                      "\n");
}

absl::StatusOr<std::string> FileSha256(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::string hex;
  const bool ok = Sha256(
      [&](auto update) {
        std::vector<char> buf(1 << 20);
        while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0) {
          if (!update(buf.data(), static_cast<size_t>(in.gcount()))) return false;
        }
        return in.eof();
      },
      &hex);
  if (!ok) return absl::InternalError(absl::StrCat("cannot hash ", path));
  return hex;
}

std::string DefaultVerificationCacheDir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return absl::StrCat(xdg, "/metalserve");
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] != '\0') return absl::StrCat(home, "/.cache/metalserve");
  return "";
}

VerificationCache VerificationCache::Open(const std::string& dir) {
  if (dir.empty()) return VerificationCache("");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  // A file written and removed proves the folder usable (access(2) says yes
  // to root on a folder it cannot write to, e.g. on a read-only mount).
  const std::string probe = absl::StrCat(dir, "/.probe.", getpid());
  std::FILE* f = ec ? nullptr : std::fopen(probe.c_str(), "w");
  if (f == nullptr) {
    LOG(WARNING) << "runtime: verification cache off: cannot use folder " << dir << " ("
                 << (ec ? ec.message() : std::strerror(errno)) << ")";
    return VerificationCache("");
  }
  std::fclose(f);
  std::remove(probe.c_str());
  return VerificationCache(dir);
}

std::string VerificationCache::PathFor(const VerificationKey& key) const {
  std::string hex;
  const std::string text = key.ToString();
  Sha256([&](auto update) { return update(text.data(), text.size()); }, &hex);
  return absl::StrCat(dir_, "/", hex, ".verification");
}

std::optional<VerificationRecord> VerificationCache::Lookup(const VerificationKey& key) const {
  if (!enabled()) return std::nullopt;
  const std::string path = PathFor(key);
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  bool key_matches = false;
  std::string why;
  std::optional<VerificationRecord> r = Parse(text.str(), key.ToString(), &key_matches, &why);
  if (!r.has_value()) {
    LOG(WARNING) << "runtime: verification cache file " << path << " ignored (corrupt: " << why
                 << "); verifying";
    return std::nullopt;
  }
  if (!key_matches) return std::nullopt;  // another key with the same file name
  return r;
}

void VerificationCache::Store(const VerificationKey& key,
                              const VerificationRecord& record) const {
  if (!enabled()) return;
  const std::string path = PathFor(key);
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  out << kHeader << "\n"
      << key.ToString() << kSeparator << "\nlevel=" << record.level
      << "\nreason=" << OneLine(record.reason) << "\n";
  out.close();
  if (out && std::rename(tmp.c_str(), path.c_str()) == 0) {
    LOG(INFO) << "runtime: verification result cached in " << path;
    return;
  }
  LOG(WARNING) << "runtime: cannot write the verification cache file " << path << " ("
               << std::strerror(errno) << ")";
  std::remove(tmp.c_str());
}

}  // namespace metalserve
