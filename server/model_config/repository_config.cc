#include "server/model_config/repository_config.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "metalserve/v1/model_config.pb.h"
#include "common/status_macros.h"
#include "server/model_config/model_config_internal.h"

namespace metalserve {
namespace {

constexpr absl::string_view kPrefix = "config JSON: ";

absl::Status Error(absl::string_view what) { return internal::ConfigError(kPrefix, what); }

using JsonKind = google::protobuf::Value::KindCase;

absl::string_view KindName(JsonKind kind) {
  switch (kind) {
    case google::protobuf::Value::kNumberValue:
      return "a number";
    case google::protobuf::Value::kStringValue:
      return "a string";
    case google::protobuf::Value::kBoolValue:
      return "true or false";
    case google::protobuf::Value::kListValue:
      return "a list";
    case google::protobuf::Value::kStructValue:
      return "an object";
    default:
      return "null";
  }
}

absl::Status CheckKind(const google::protobuf::Value& value, JsonKind want,
                       absl::string_view key) {
  if (value.kind_case() == want) return absl::OkStatus();
  std::string got;
  (void)google::protobuf::util::MessageToJsonString(value, &got);
  return Error(absl::StrCat(key, ": ", got, " is ", KindName(value.kind_case()), "; expected ",
                            KindName(want)));
}

absl::Status CheckListOf(const google::protobuf::Value& list, JsonKind item,
                         absl::string_view key) {
  RETURN_IF_ERROR(CheckKind(list, google::protobuf::Value::kListValue, key));
  for (int i = 0; i < list.list_value().values_size(); ++i) {
    RETURN_IF_ERROR(CheckKind(list.list_value().values(i), item, absl::StrCat(key, "[", i, "]")));
  }
  return absl::OkStatus();
}

absl::Status CheckNumbers(const google::protobuf::Value& list, absl::string_view key) {
  return CheckListOf(list, google::protobuf::Value::kNumberValue, key);
}

// Protobuf's JSON parser is lenient where a config file should not be: it
// takes "8" for a number, "yes" for true and 8 for [8]. The settings' JSON
// types are checked here, on the document as a google.protobuf.Struct.
absl::Status CheckSettingTypes(absl::string_view json) {
  google::protobuf::Struct doc;
  if (!google::protobuf::util::JsonStringToMessage(
           google::protobuf::StringPiece(json.data(), json.size()), &doc).ok()) {
    return absl::OkStatus();  // the typed parse has reported it already
  }
  using V = google::protobuf::Value;
  static const std::pair<const char*, JsonKind> kKinds[] = {
      {"max_batch_size", V::kNumberValue}, {"max_queue_delay_us", V::kNumberValue},
      {"max_queue_size", V::kNumberValue}, {"precision", V::kStringValue},
      {"channels_last", V::kBoolValue},    {"optimize", V::kStringValue},
      {"device", V::kStringValue},         {"version_policy", V::kStructValue},
      {"latency_target_us", V::kNumberValue}, {"default_priority", V::kNumberValue},
      {"rows_per_slot", V::kNumberValue}};
  const auto& fields = doc.fields();
  for (const auto& [key, kind] : kKinds) {
    if (fields.contains(key)) RETURN_IF_ERROR(CheckKind(fields.at(key), kind, key));
  }
  if (fields.contains("allowed_batch_sizes")) {
    RETURN_IF_ERROR(CheckNumbers(fields.at("allowed_batch_sizes"), "allowed_batch_sizes"));
  }
  if (fields.contains("devices")) {
    RETURN_IF_ERROR(CheckListOf(fields.at("devices"), V::kStringValue, "devices"));
  }
  if (!fields.contains("version_policy")) return absl::OkStatus();
  const auto& policy = fields.at("version_policy").struct_value().fields();
  if (policy.contains("latest")) {
    const auto& latest = policy.at("latest").struct_value().fields();
    if (latest.contains("num_versions")) {
      RETURN_IF_ERROR(CheckKind(latest.at("num_versions"), V::kNumberValue,
                                "version_policy.latest.num_versions"));
    }
  }
  if (policy.contains("specific")) {
    const auto& specific = policy.at("specific").struct_value().fields();
    if (specific.contains("versions")) {
      RETURN_IF_ERROR(CheckNumbers(specific.at("versions"), "version_policy.specific.versions"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckOneOf(absl::string_view key, const std::string& value,
                        std::initializer_list<absl::string_view> accepted) {
  for (absl::string_view a : accepted) {
    if (value == a) return absl::OkStatus();
  }
  return Error(absl::StrCat(key, ": '", value, "' is not one of ", absl::StrJoin(accepted, ", ")));
}

absl::Status CheckDevice(const std::string& device) {
  if (device == "auto" || device == "cpu" || device == "mps" || device == "cuda") {
    return absl::OkStatus();
  }
  int index = 0;
  if (absl::StartsWith(device, "cuda:") &&
      absl::SimpleAtoi(absl::string_view(device).substr(5), &index) && index >= 0) {
    return absl::OkStatus();
  }
  return Error(absl::StrCat("device: '", device, "' is not one of auto, cpu, mps, cuda, cuda:N"));
}

absl::Status CheckAtLeast(absl::string_view key, int64_t value, int64_t least) {
  if (value >= least) return absl::OkStatus();
  return Error(absl::StrCat(key, ": ", value, " must be at least ", least));
}

absl::Status CheckBatchSizes(const ModelSettings& s) {
  const std::vector<int64_t>& sizes = s.allowed_batch_sizes;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::string key = absl::StrCat("allowed_batch_sizes[", i, "]");
    RETURN_IF_ERROR(CheckAtLeast(key, sizes[i], 1));
    if (i > 0 && sizes[i] <= sizes[i - 1]) {
      return Error(absl::StrCat(key, ": ", sizes[i], " is not above the size before it, ",
                                sizes[i - 1], " (the list is ascending)"));
    }
  }
  if (!sizes.empty() && s.max_batch_size && sizes.back() != *s.max_batch_size) {
    return Error(absl::StrCat("allowed_batch_sizes: the last size, ", sizes.back(),
                              ", must equal max_batch_size ", *s.max_batch_size));
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelSettings> ToSettings(const v1::ModelConfig& c) {
  ModelSettings s;
  if (c.has_max_batch_size()) {
    RETURN_IF_ERROR(CheckAtLeast("max_batch_size", c.max_batch_size(), 1));
    s.max_batch_size = c.max_batch_size();
  }
  if (c.has_max_queue_delay_us()) {
    RETURN_IF_ERROR(CheckAtLeast("max_queue_delay_us", c.max_queue_delay_us(), 0));
    s.max_queue_delay = absl::Microseconds(c.max_queue_delay_us());
  }
  s.allowed_batch_sizes.assign(c.allowed_batch_sizes().begin(), c.allowed_batch_sizes().end());
  RETURN_IF_ERROR(CheckBatchSizes(s));
  if (c.has_max_queue_size()) {
    RETURN_IF_ERROR(CheckAtLeast("max_queue_size", c.max_queue_size(), 1));
    s.max_queue_size = c.max_queue_size();
  }
  if (c.has_precision()) {
    RETURN_IF_ERROR(CheckOneOf("precision", c.precision(), {"fp32", "fp16", "bf16"}));
    s.precision = c.precision();
  }
  if (c.has_channels_last()) s.channels_last = c.channels_last();
  if (c.has_optimize()) {
    RETURN_IF_ERROR(CheckOneOf("optimize", c.optimize(), {"none", "freeze", "full", "auto"}));
    s.optimize = c.optimize();
  }
  if (c.has_device()) {
    RETURN_IF_ERROR(CheckDevice(c.device()));
    s.device = c.device();
  }
  if (c.devices_size() > 0) {
    if (c.has_device()) return Error("device and devices: set one (devices serves on several)");
    if (c.devices_size() < 2) {
      return Error(absl::StrCat("devices: hybrid serving needs two or more devices, got ",
                                c.devices_size()));
    }
    for (const std::string& d : c.devices()) {
      if (d == "auto") return Error("devices: 'auto' chooses one device; name each device");
      if (d != "first_available") RETURN_IF_ERROR(CheckDevice(d));
      if (std::find(s.devices.begin(), s.devices.end(), d) != s.devices.end()) {
        return Error(absl::StrCat("devices: '", d, "' is listed twice"));
      }
      s.devices.push_back(d);
    }
  }
  if (c.has_latency_target_us()) {
    RETURN_IF_ERROR(CheckAtLeast("latency_target_us", c.latency_target_us(), 0));
    s.latency_target = absl::Microseconds(c.latency_target_us());
  }
  if (c.has_default_priority()) {
    // Its upper bound, --priority_levels, is checked where it is applied.
    RETURN_IF_ERROR(CheckAtLeast("default_priority", c.default_priority(), 1));
    s.default_priority = c.default_priority();
  }
  if (c.has_rows_per_slot()) {
    RETURN_IF_ERROR(CheckAtLeast("rows_per_slot", c.rows_per_slot(), 0));
    s.rows_per_slot = c.rows_per_slot();
  }
  return s;
}

absl::StatusOr<VersionPolicy> ToPolicy(const v1::ModelVersionPolicy& p) {
  VersionPolicy policy;
  switch (p.policy_choice_case()) {
    case v1::ModelVersionPolicy::kLatest:
      RETURN_IF_ERROR(CheckAtLeast("version_policy.latest.num_versions",
                                   p.latest().num_versions(), 1));
      policy.latest = p.latest().num_versions();
      return policy;
    case v1::ModelVersionPolicy::kAll:
      policy.kind = VersionPolicy::Kind::kAll;
      return policy;
    case v1::ModelVersionPolicy::kSpecific:
      break;
    case v1::ModelVersionPolicy::POLICY_CHOICE_NOT_SET:
      return policy;  // "version_policy": {} is the default
  }
  policy.kind = VersionPolicy::Kind::kSpecific;
  const auto& versions = p.specific().versions();
  if (versions.empty()) return Error("version_policy.specific.versions must not be empty");
  for (int i = 0; i < versions.size(); ++i) {
    RETURN_IF_ERROR(CheckAtLeast(absl::StrCat("version_policy.specific.versions[", i, "]"),
                                 versions[i], 1));
    policy.specific.push_back(versions[i]);
  }
  std::sort(policy.specific.begin(), policy.specific.end());
  const auto dup = std::adjacent_find(policy.specific.begin(), policy.specific.end());
  if (dup != policy.specific.end()) {
    return Error(absl::StrCat("version_policy.specific.versions: ", *dup, " is listed twice"));
  }
  return policy;
}

}  // namespace

std::string VersionPolicy::ToString() const {
  switch (kind) {
    case Kind::kLatest:
      return absl::StrCat("latest ", latest);
    case Kind::kAll:
      return "all";
    case Kind::kSpecific:
      return absl::StrCat("specific [", absl::StrJoin(specific, ","), "]");
  }
  return "";
}

std::vector<int64_t> VersionPolicy::Select(const std::vector<int64_t>& available) const {
  switch (kind) {
    case Kind::kLatest: {
      const size_t keep = std::min<size_t>(available.size(), static_cast<size_t>(latest));
      return std::vector<int64_t>(available.end() - keep, available.end());
    }
    case Kind::kAll:
      return available;
    case Kind::kSpecific:
      break;
  }
  std::vector<int64_t> chosen;
  for (int64_t v : available) {
    if (std::binary_search(specific.begin(), specific.end(), v)) chosen.push_back(v);
  }
  return chosen;
}

std::vector<int64_t> VersionPolicy::MissingSpecific(const std::vector<int64_t>& available) const {
  std::vector<int64_t> missing;
  if (kind != Kind::kSpecific) return missing;
  for (int64_t v : specific) {
    if (!std::binary_search(available.begin(), available.end(), v)) missing.push_back(v);
  }
  return missing;
}

bool ModelSettings::empty() const {
  return !max_batch_size && !max_queue_delay && allowed_batch_sizes.empty() &&
         !max_queue_size && !precision && !channels_last && !optimize && !device &&
         devices.empty() && !latency_target && !default_priority && !rows_per_slot;
}

absl::StatusOr<RepositoryModelConfig> ParseRepositoryModelConfig(absl::string_view json) {
  ASSIGN_OR_RETURN(v1::ModelConfig c, internal::ParseConfigJson(json, kPrefix));
  RETURN_IF_ERROR(CheckSettingTypes(json));
  if (!c.version().empty()) {
    return Error(absl::StrCat("'version' (\"", c.version(), "\") is not a repository key: "
                              "a model's versions are its numbered folders"));
  }
  RepositoryModelConfig config;
  ASSIGN_OR_RETURN(config.signature, internal::ToSignature(c, kPrefix));
  ASSIGN_OR_RETURN(config.settings, ToSettings(c));
  ASSIGN_OR_RETURN(config.version_policy, ToPolicy(c.version_policy()));
  return config;
}

absl::StatusOr<RepositoryModelConfig> ReadRepositoryModelConfig(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buf;
  if (in) buf << in.rdbuf();
  if (!in || in.bad()) {
    return absl::NotFoundError(absl::StrCat("cannot read model config ", path));
  }
  absl::StatusOr<RepositoryModelConfig> config = ParseRepositoryModelConfig(buf.str());
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(path, ": ", config.status().message()));
  }
  return config;
}

}  // namespace metalserve
