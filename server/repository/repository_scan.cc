#include "server/repository/repository_scan.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace metalserve {
namespace {

namespace fs = std::filesystem;

absl::Status Unreadable(const fs::path& path, const std::error_code& ec) {
  return absl::FailedPreconditionError(
      absl::StrCat("cannot read folder ", path.string(), ": ", ec.message()));
}

// The entries of a folder, sorted by name.
absl::StatusOr<std::vector<fs::directory_entry>> ListFolder(const fs::path& dir) {
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  if (status.type() == fs::file_type::not_found) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read folder ", dir.string(), ": no such folder"));
  }
  if (ec) return Unreadable(dir, ec);
  if (!fs::is_directory(status)) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read folder ", dir.string(), ": not a folder"));
  }
  std::vector<fs::directory_entry> entries;
  fs::directory_iterator it(dir, ec);
  if (ec) return Unreadable(dir, ec);
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    entries.push_back(*it);
  }
  if (ec) return Unreadable(dir, ec);
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.path() < b.path(); });
  return entries;
}

// A positive decimal integer without a sign or leading zeros.
bool ParseVersion(const std::string& name, int64_t* version) {
  if (name.empty() || name[0] == '0') return false;
  if (!std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  return absl::SimpleAtoi(name, version);
}

// The file a version folder serves: model.pt2 (a package) when there is
// one, else model.pt; empty when neither is a regular file.
fs::path ServedFile(const fs::path& version_dir) {
  std::error_code ec;
  for (const char* name : {kPackageFile, kModelFile}) {
    if (fs::is_regular_file(version_dir / name, ec)) return version_dir / name;
  }
  return {};
}

// Version folders holding model.pt or model.pt2 into entry->available; the
// rest noted.
absl::Status ListVersions(ModelEntry* entry) {
  absl::StatusOr<std::vector<fs::directory_entry>> listed = ListFolder(entry->dir);
  if (!listed.ok()) return listed.status();
  for (const fs::directory_entry& e : *listed) {
    const std::string name = e.path().filename().string();
    if (name == kModelConfigFile) continue;
    std::error_code ec;
    int64_t version = 0;
    if (!e.is_directory(ec) || !ParseVersion(name, &version)) {
      entry->notes.push_back(absl::StrCat(e.path().string(),
                                          ": not a version folder (a positive number "
                                          "without leading zeros); skipped"));
      continue;
    }
    if (ServedFile(e.path()).empty()) {
      entry->notes.push_back(absl::StrCat((e.path() / kModelFile).string(), " (or ",
                                          kPackageFile, "): no such file; version ",
                                          version, " skipped"));
      continue;
    }
    entry->available.push_back(version);
  }
  std::sort(entry->available.begin(), entry->available.end());
  return absl::OkStatus();
}

absl::Status ReadConfig(ModelEntry* entry) {
  std::error_code ec;
  const fs::file_status status = fs::status(entry->config_path, ec);
  if (status.type() == fs::file_type::not_found) {
    return absl::NotFoundError(absl::StrCat(
        entry->config_path, ": no such file; every model folder needs one "
        "(format: docs/repository.md)"));
  }
  if (!fs::is_regular_file(status)) {
    return absl::NotFoundError(absl::StrCat(
        "cannot read model config ", entry->config_path, ": ",
        ec ? ec.message() : std::string("not a regular file")));
  }
  absl::StatusOr<RepositoryModelConfig> config = ReadRepositoryModelConfig(entry->config_path);
  if (!config.ok()) return config.status();
  std::string& name = config->signature.name;
  if (!name.empty() && name != entry->name) {
    return absl::InvalidArgumentError(
        absl::StrCat(entry->config_path, ": name \"", name, "\" differs from the folder's name \"",
                     entry->name, "\" (leave it out or make them equal)"));
  }
  name = entry->name;
  entry->config = *std::move(config);
  return absl::OkStatus();
}

absl::Status SelectVersions(ModelEntry* entry) {
  const VersionPolicy& policy = entry->config.version_policy;
  for (int64_t missing : policy.MissingSpecific(entry->available)) {
    entry->notes.push_back(absl::StrCat(entry->dir, "/", missing, "/", kModelFile,
                                        ": version_policy ", policy.ToString(),
                                        " names version ", missing, ", which is not there"));
  }
  for (int64_t v : policy.Select(entry->available)) {
    const fs::path file = ServedFile(fs::path(entry->dir) / std::to_string(v));
    if (file.empty()) {  // removed since it was listed: the next scan sees it
      entry->notes.push_back(absl::StrCat(entry->dir, "/", v, ": model file gone; skipped"));
      continue;
    }
    entry->selected.push_back({v, file.string()});
  }
  if (!entry->selected.empty()) return absl::OkStatus();
  return absl::NotFoundError(absl::StrCat(
      entry->dir, ": no version to serve under version_policy ", policy.ToString(),
      "; version folders with ", kModelFile, " or ", kPackageFile, ": [", absl::StrJoin(entry->available, ","), "]"));
}

ModelEntry ScanModelFolder(const fs::path& root, const std::string& name) {
  ModelEntry entry;
  entry.name = name;
  entry.dir = (root / name).string();
  entry.config_path = (root / name / kModelConfigFile).string();
  entry.status = ReadConfig(&entry);
  if (entry.status.ok()) entry.status = ListVersions(&entry);
  if (entry.status.ok()) entry.status = SelectVersions(&entry);
  return entry;
}

bool IsModelFolder(const fs::directory_entry& e) {
  std::error_code ec;
  return e.is_directory(ec) && e.path().filename().string()[0] != '.';
}

}  // namespace

absl::StatusOr<RepositoryScan> ScanRepository(const std::string& root) {
  absl::StatusOr<std::vector<fs::directory_entry>> listed = ListFolder(root);
  if (!listed.ok()) return listed.status();
  RepositoryScan scan;
  scan.root = root;
  for (const fs::directory_entry& e : *listed) {
    if (!IsModelFolder(e)) {
      scan.notes.push_back(absl::StrCat(e.path().string(), ": not a model folder; skipped"));
      continue;
    }
    scan.models.push_back(ScanModelFolder(root, e.path().filename().string()));
  }
  return scan;
}

absl::StatusOr<ModelEntry> ScanModel(const std::string& root, const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("model name \"", name, "\" is not a folder name in the repository"));
  }
  absl::StatusOr<std::vector<fs::directory_entry>> listed = ListFolder(root);
  if (!listed.ok()) return listed.status();
  std::vector<std::string> names;
  for (const fs::directory_entry& e : *listed) {
    if (!IsModelFolder(e)) continue;
    if (e.path().filename().string() == name) return ScanModelFolder(root, name);
    names.push_back(e.path().filename().string());
  }
  return absl::NotFoundError(absl::StrCat("model \"", name, "\" is not in repository ", root,
                                          "; it has: [", absl::StrJoin(names, ", "), "]"));
}

}  // namespace metalserve
