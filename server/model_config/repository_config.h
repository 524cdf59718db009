// A model repository's per-model configuration, DIR/<model>/config.json: the
// signature (as in a model.json sidecar, docs/signature.md) plus optional
// settings that override the server's flags for this model and a version
// policy. Read with Protobuf's JSON mapping over metalserve.v1.ModelConfig
// (proto/metalserve/v1/model_config.proto); the format and every key:
// docs/repository.md. Example:
//   {"name": "resnet18",
//    "inputs":  [{"name": "input",  "dtype": "float32", "shape": [-1,3,224,224]}],
//    "outputs": [{"name": "logits", "dtype": "float32", "shape": [-1,1000]}],
//    "max_batch_size": 16, "max_queue_delay_us": 500,
//    "version_policy": {"latest": {"num_versions": 2}}}
// Like model_config.h, the header speaks project types only; protobuf stays
// PRIVATE to the target.
//
// Thread-safety: free functions over values; no shared state.
#ifndef METALSERVE_SERVER_MODEL_CONFIG_REPOSITORY_CONFIG_H_
#define METALSERVE_SERVER_MODEL_CONFIG_REPOSITORY_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/runtime/model_signature.h"

namespace metalserve {

// Which of a model's version folders are served (Triton's ModelVersionPolicy).
struct VersionPolicy {
  enum class Kind { kLatest, kAll, kSpecific };
  Kind kind = Kind::kLatest;
  // With kLatest: how many of the highest-numbered versions (>= 1).
  int64_t latest = 1;
  // With kSpecific: the versions, ascending, unique, each >= 1.
  std::vector<int64_t> specific;

  // "latest 1", "all", "specific [1,3]": for logs and errors.
  std::string ToString() const;
  // The versions of `available` (ascending) this policy serves, ascending.
  // kSpecific keeps only the listed versions that are available; the caller
  // reports the missing ones (MissingSpecific).
  std::vector<int64_t> Select(const std::vector<int64_t>& available) const;
  // With kSpecific: the listed versions `available` lacks; otherwise empty.
  std::vector<int64_t> MissingSpecific(const std::vector<int64_t>& available) const;
};

// Settings from config.json. An absent one (nullopt, or an empty list) keeps
// the server flag of the same name. Values are validated when read; whether
// they fit the device and the other flags is checked where they are applied.
struct ModelSettings {
  std::optional<int64_t> max_batch_size;       // >= 1
  std::optional<absl::Duration> max_queue_delay;  // >= 0 (JSON: max_queue_delay_us)
  std::vector<int64_t> allowed_batch_sizes;    // ascending, each >= 1
  std::optional<int64_t> max_queue_size;       // >= 1
  std::optional<std::string> precision;        // fp32, fp16, bf16
  std::optional<bool> channels_last;
  std::optional<std::string> optimize;         // none, freeze, full, auto
  std::optional<std::string> device;           // auto, cpu, mps, cuda, cuda:N
  // Hybrid serving (--devices for this model): two or more distinct
  // devices (cpu, mps, cuda, cuda:N, first_available), none with `device`.
  std::vector<std::string> devices;
  // JSON: latency_target_us; >= 0, 0 turns the flag's target off.
  std::optional<absl::Duration> latency_target;
  std::optional<int> default_priority;         // >= 1; <= --priority_levels
  std::optional<int64_t> rows_per_slot;        // >= 0, 0: no in-flight limit

  // True when no setting is given.
  bool empty() const;
};

struct RepositoryModelConfig {
  // The signature; its version is "" (a repository's versions are its
  // numbered folders) and its name is "" when the file names none.
  ModelSignature signature;
  ModelSettings settings;
  VersionPolicy version_policy;  // latest 1 when absent
};

// InvalidArgument naming the key for everything ParseModelSignature refuses,
// and for a "version" key (versions are folders), a setting out of range
// (max_batch_size 0, precision "fp8", allowed_batch_sizes not ascending or
// whose last is not max_batch_size, ...), latest.num_versions 0, or an empty
// or repeated specific list. The message starts "config JSON: ".
absl::StatusOr<RepositoryModelConfig> ParseRepositoryModelConfig(absl::string_view json);
// NotFound when the file cannot be read; otherwise as
// ParseRepositoryModelConfig, with the path in the message.
absl::StatusOr<RepositoryModelConfig> ReadRepositoryModelConfig(const std::string& path);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_MODEL_CONFIG_REPOSITORY_CONFIG_H_
