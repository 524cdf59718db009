// Reads a model repository's layout (the format: docs/repository.md):
//
//   DIR/<model>/config.json          the signature, settings, version policy
//   DIR/<model>/<version>/model.pt   one TorchScript file per version folder
//   DIR/<model>/<version>/model.pt2  or an AOTInductor package (docs/aoti.md);
//                                    served instead of a model.pt beside
//                                    it, which then becomes the package's
//                                    verification reference
//
// A version folder is named by a positive decimal integer without leading
// zeros (Triton's and TF Serving's rule); other entries are skipped with a
// note, so an editor's backup or a half-copied "tmp" folder never becomes a
// version. The scan only lists and selects: it opens config.json but no
// model file, so it is cheap enough to run on every poll.
//
// Errors are per model: a bad config.json or a model folder without a
// usable version marks that model (ModelEntry::status, naming the file and
// the parser's message) and the others are still listed. Only a repository
// folder that cannot be read fails the scan as a whole.
//
// Thread-safety: free functions; they read the file system and share no
// state. A scan racing a copy into the repository sees either state of each
// file; a version folder whose model.pt is not there yet is skipped with a
// note and picked up by the next scan.
#ifndef METALSERVE_SERVER_REPOSITORY_REPOSITORY_SCAN_H_
#define METALSERVE_SERVER_REPOSITORY_REPOSITORY_SCAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/model_config/repository_config.h"

namespace metalserve {

// The file names the layout fixes.
inline constexpr char kModelConfigFile[] = "config.json";
inline constexpr char kModelFile[] = "model.pt";
inline constexpr char kPackageFile[] = "model.pt2";

struct VersionEntry {
  int64_t version = 0;
  std::string model_path;  // DIR/<model>/<version>/model.pt2 or model.pt
};

struct ModelEntry {
  std::string name;         // the folder's name
  std::string dir;          // DIR/<model>
  std::string config_path;  // DIR/<model>/config.json
  // OK, or why the model cannot be served: NotFound for a missing
  // config.json or no version folder the policy selects, InvalidArgument for
  // a config.json the parser refuses (the path and the parser's message),
  // FailedPrecondition for a folder that cannot be read.
  absl::Status status;
  RepositoryModelConfig config;  // meaningful when status is OK
  // Version folders holding model.pt or model.pt2, ascending.
  std::vector<int64_t> available;
  // The version policy's choice of `available`, ascending; non-empty when
  // status is OK.
  std::vector<VersionEntry> selected;
  // Entries skipped and versions the policy names but the folder lacks, one
  // line each with the path, for the log.
  std::vector<std::string> notes;
};

struct RepositoryScan {
  std::string root;
  std::vector<ModelEntry> models;  // by name
  std::vector<std::string> notes;  // top-level entries skipped
};

// Every model folder of `root`. FailedPrecondition naming the path and the
// system's message when `root` is not a readable folder.
absl::StatusOr<RepositoryScan> ScanRepository(const std::string& root);

// One model, as ScanRepository lists it. NotFound naming the models the
// repository has when `root` has no folder `name`; FailedPrecondition when
// `root` cannot be read; InvalidArgument for a name that is not a plain
// folder name (empty, ".", "..", or holding '/').
absl::StatusOr<ModelEntry> ScanModel(const std::string& root, const std::string& name);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_REPOSITORY_REPOSITORY_SCAN_H_
