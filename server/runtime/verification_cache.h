// The verification cache: what graph verification (graph_verification.h)
// decided for a model, kept on disk so that a restart, a replica or a reload
// of the same model on the same software and device skips the verification
// forwards (ResNet-50 on CUDA spent most of its 27 s load verifying at 13
// batch sizes).
//
// Key: everything the verdict depends on, written out as text lines
// (VerificationKey::ToString) and stored in the file, so a file is used only
// when its whole key matches:
//   - the model file's content hash: SHA-256 of its bytes (OpenSSL), not its
//     path or modification time, so a replaced file misses and a copied one
//     hits;
//   - the LibTorch version, the device name, the precision, the optimization
//     level requested and the batch sizes verified;
//   - the rest of what changes the comparison: tolerance, batch-invariance
//     check, channels-last and the bound inputs (names, dtypes, shapes).
// File: <dir>/<SHA-256 of the key text>.verification, written to a temporary
// name and renamed (a crashed writer leaves no half file under the name).
//
// Failure handling: the cache only ever saves time. A folder that is missing
// and cannot be created, or is not writable, disables the cache with one log
// line; a file that cannot be parsed is ignored with one log line (and
// replaced after the verification it forces); a write that fails is logged.
//
// Thread-safety: immutable after Open; Lookup and Store may be called from
// any thread (concurrent writers of one key each rename a complete file).
// Ownership and destruction: holds only the folder name.
#ifndef METALSERVE_SERVER_RUNTIME_VERIFICATION_CACHE_H_
#define METALSERVE_SERVER_RUNTIME_VERIFICATION_CACHE_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace metalserve {

struct VerificationKey {
  std::string model_sha256;   // hex
  std::string torch_version;  // e.g. "1.13.0"
  std::string device;         // "cpu", "cuda:0", "mps"
  std::string precision;      // "fp32", "fp16", "bf16"
  std::string optimize;       // the level requested: "none", "freeze", "full"
  std::string batch_sizes;    // e.g. "1,4,8"
  std::string comparison;     // tolerance, invariance, channels-last, inputs

  // One "name=value" line per field, in a fixed order.
  std::string ToString() const;
};

// What verification chose and why (ModelInfo::optimization and _reason).
struct VerificationRecord {
  std::string level;   // "none", "freeze", "full"
  std::string reason;  // one line
};

// SHA-256 of the file's bytes as lower-case hex. NOT_FOUND when it cannot be
// read.
absl::StatusOr<std::string> FileSha256(const std::string& path);

// $XDG_CACHE_HOME/metalserve, else $HOME/.cache/metalserve, else "" (no
// cache).
std::string DefaultVerificationCacheDir();

class VerificationCache {
 public:
  // An empty `dir` is a disabled cache (no log line). Otherwise creates the
  // folder when missing and checks that it is writable; when it cannot,
  // logs one line and returns a disabled cache.
  static VerificationCache Open(const std::string& dir);

  bool enabled() const { return !dir_.empty(); }
  // The file that holds `key`'s record.
  std::string PathFor(const VerificationKey& key) const;

  // The record stored for `key`; nullopt when the cache is disabled, there is
  // none, or the file is corrupt (logged).
  std::optional<VerificationRecord> Lookup(const VerificationKey& key) const;
  // Stores `record` under `key`; a failure is logged, never returned.
  void Store(const VerificationKey& key, const VerificationRecord& record) const;

 private:
  explicit VerificationCache(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;  // "" when disabled
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_RUNTIME_VERIFICATION_CACHE_H_
