#include "server/repository/repository_scan.h"

#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/repository/temp_repository.h"
#include "tests/testing/status_matchers.h"

namespace metalserve {
namespace {

using ::metalserve::testing::IsOk;
using ::metalserve::testing::StatusIs;
using ::metalserve::testing::TempRepository;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

std::vector<int64_t> Selected(const ModelEntry& e) {
  std::vector<int64_t> v;
  for (const VersionEntry& s : e.selected) v.push_back(s.version);
  return v;
}

TEST(RepositoryScanTest, ListsModelsAndServesTheNewestVersionByDefault) {
  TempRepository repo;
  repo.WriteConfig("alpha");
  repo.WriteVersion("alpha", 1);
  repo.WriteVersion("alpha", 2);
  repo.WriteVersion("alpha", 10);
  repo.WriteConfig("beta", R"("name": "beta")");
  repo.WriteVersion("beta", 3);
  auto scan = ScanRepository(repo.root());
  ASSERT_THAT(scan.status(), IsOk());
  ASSERT_THAT(scan->models, SizeIs(2));
  const ModelEntry& alpha = scan->models[0];
  EXPECT_EQ(alpha.name, "alpha");
  EXPECT_THAT(alpha.status, IsOk());
  EXPECT_EQ(alpha.config.signature.name, "alpha");  // the folder names it
  EXPECT_THAT(alpha.available, ElementsAre(1, 2, 10));  // numeric, not text, order
  ASSERT_THAT(alpha.selected, SizeIs(1));
  EXPECT_EQ(alpha.selected[0].version, 10);
  EXPECT_EQ(alpha.selected[0].model_path, repo.Path("alpha/10/model.pt"));
  EXPECT_EQ(scan->models[1].name, "beta");
  EXPECT_THAT(Selected(scan->models[1]), ElementsAre(3));
}

TEST(RepositoryScanTest, ServesAPackageInsteadOfTheTorchScriptFileBesideIt) {
  TempRepository repo;
  repo.WriteConfig("m", R"("version_policy": {"all": {}})");
  repo.WriteVersion("m", 1);                // model.pt only
  repo.Write("m/2/model.pt2", "package");   // a package only
  repo.WriteVersion("m", 3);                // both: the package is served,
  repo.Write("m/3/model.pt2", "package");   // model.pt is its reference
  auto scan = ScanRepository(repo.root());
  ASSERT_THAT(scan.status(), IsOk());
  ASSERT_THAT(scan->models, SizeIs(1));
  const ModelEntry& m = scan->models[0];
  EXPECT_THAT(m.available, ElementsAre(1, 2, 3));
  ASSERT_THAT(m.selected, SizeIs(3));
  EXPECT_EQ(m.selected[0].model_path, repo.Path("m/1/model.pt"));
  EXPECT_EQ(m.selected[1].model_path, repo.Path("m/2/model.pt2"));
  EXPECT_EQ(m.selected[2].model_path, repo.Path("m/3/model.pt2"));
}

TEST(RepositoryScanTest, AppliesEachVersionPolicy) {
  TempRepository repo;
  for (const char* m : {"latest2", "all", "specific"}) {
    for (int v : {1, 2, 3}) repo.WriteVersion(m, v);
  }
  repo.WriteConfig("latest2", R"("version_policy": {"latest": {"num_versions": 2}})");
  repo.WriteConfig("all", R"("version_policy": {"all": {}})");
  repo.WriteConfig("specific", R"("version_policy": {"specific": {"versions": [1, 3, 7]}})");
  auto scan = ScanRepository(repo.root());
  ASSERT_THAT(scan.status(), IsOk());
  ASSERT_THAT(scan->models, SizeIs(3));
  EXPECT_THAT(Selected(scan->models[0]), ElementsAre(1, 2, 3));  // "all"
  EXPECT_THAT(Selected(scan->models[1]), ElementsAre(2, 3));     // "latest2"
  EXPECT_THAT(Selected(scan->models[2]), ElementsAre(1, 3));     // "specific"
  EXPECT_THAT(scan->models[2].status, IsOk());
  EXPECT_THAT(scan->models[2].notes,
              Contains(AllOf(HasSubstr("specific/7/model.pt"), HasSubstr("names version 7"))));
}

TEST(RepositoryScanTest, SkipsFoldersThatAreNotVersionsWithANote) {
  TempRepository repo;
  repo.WriteConfig("m");
  repo.WriteVersion("m", 1);
  repo.Write("m/02/model.pt", "x");    // leading zero
  repo.Write("m/tmp/model.pt", "x");   // not a number
  repo.Write("m/0/model.pt", "x");     // not positive
  repo.Write("m/README", "x");         // a file
  repo.Mkdir("m/5");                   // no model.pt yet (a copy under way)
  auto entry = ScanModel(repo.root(), "m");
  ASSERT_THAT(entry.status(), IsOk());
  EXPECT_THAT(entry->status, IsOk());
  EXPECT_THAT(entry->available, ElementsAre(1));
  EXPECT_THAT(entry->notes, SizeIs(5));
  EXPECT_THAT(entry->notes, Contains(HasSubstr(repo.Path("m/tmp"))));
  EXPECT_THAT(entry->notes, Contains(AllOf(HasSubstr(repo.Path("m/5/model.pt")),
                                           HasSubstr("version 5 skipped"))));
}

TEST(RepositoryScanTest, BadConfigMarksThatModelNamingFileAndKeyAndOthersStillList) {
  TempRepository repo;
  repo.WriteConfig("bad", R"("max_batch": 8)");
  repo.WriteVersion("bad", 1);
  repo.WriteConfig("good");
  repo.WriteVersion("good", 1);
  auto scan = ScanRepository(repo.root());
  ASSERT_THAT(scan.status(), IsOk());
  ASSERT_THAT(scan->models, SizeIs(2));
  EXPECT_THAT(scan->models[0].status,
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(repo.Path("bad/config.json")), HasSubstr("max_batch"))));
  EXPECT_THAT(scan->models[0].selected, IsEmpty());
  EXPECT_THAT(scan->models[1].status, IsOk());
}

TEST(RepositoryScanTest, MissingOrUnreadableConfigNamesThePath) {
  TempRepository repo;
  repo.WriteVersion("noconfig", 1);
  repo.WriteVersion("dangling", 1);
  std::filesystem::create_symlink(repo.Path("nowhere.json"), repo.Path("dangling/config.json"));
  repo.WriteVersion("folder", 1);
  repo.Mkdir("folder/config.json");
  auto scan = ScanRepository(repo.root());
  ASSERT_THAT(scan.status(), IsOk());
  ASSERT_THAT(scan->models, SizeIs(3));
  EXPECT_THAT(scan->models[0].status,  // "dangling"
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(repo.Path("dangling/config.json"))));
  EXPECT_THAT(scan->models[1].status,  // "folder"
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(repo.Path("folder/config.json"))));
  EXPECT_THAT(scan->models[2].status,  // "noconfig"
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr(repo.Path("noconfig/config.json")),
                             HasSubstr("docs/repository.md"))));
}

TEST(RepositoryScanTest, NoVersionToServeIsNotFoundNamingPolicyAndFolders) {
  TempRepository repo;
  repo.WriteConfig("empty");
  repo.WriteConfig("wrong", R"("version_policy": {"specific": {"versions": [4]}})");
  repo.WriteVersion("wrong", 1);
  auto scan = ScanRepository(repo.root());
  ASSERT_THAT(scan.status(), IsOk());
  EXPECT_THAT(scan->models[0].status,
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr(repo.Path("empty")), HasSubstr("latest 1"))));
  EXPECT_THAT(scan->models[1].status,
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("specific [4]"), HasSubstr("model.pt or model.pt2: [1]"))));
}

TEST(RepositoryScanTest, ConfigNameDifferentFromFolderIsAnError) {
  TempRepository repo;
  repo.WriteConfig("m", R"("name": "other")");
  repo.WriteVersion("m", 1);
  auto entry = ScanModel(repo.root(), "m");
  ASSERT_THAT(entry.status(), IsOk());
  EXPECT_THAT(entry->status, StatusIs(absl::StatusCode::kInvalidArgument,
                                      AllOf(HasSubstr("\"other\""), HasSubstr("\"m\""))));
}

TEST(RepositoryScanTest, TopLevelFilesAndHiddenFoldersAreNotModels) {
  TempRepository repo;
  repo.Write("README.md", "x");
  repo.Mkdir(".git");
  repo.WriteConfig("m");
  repo.WriteVersion("m", 1);
  auto scan = ScanRepository(repo.root());
  ASSERT_THAT(scan.status(), IsOk());
  EXPECT_THAT(scan->models, ElementsAre(Field(&ModelEntry::name, "m")));
  EXPECT_THAT(scan->notes, SizeIs(2));
}

TEST(RepositoryScanTest, UnreadableRepositoryFailsNamingThePath) {
  TempRepository repo;
  repo.Write("file", "x");
  EXPECT_THAT(ScanRepository(repo.Path("missing")),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr(repo.Path("missing")), HasSubstr("no such folder"))));
  EXPECT_THAT(ScanRepository(repo.Path("file")),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not a folder")));
}

TEST(RepositoryScanTest, ScanModelListsWhatTheRepositoryHasForAnUnknownName) {
  TempRepository repo;
  repo.WriteConfig("a");
  repo.WriteConfig("b");
  EXPECT_THAT(ScanModel(repo.root(), "c"),
              StatusIs(absl::StatusCode::kNotFound, AllOf(HasSubstr("\"c\""), HasSubstr("[a, b]"))));
  EXPECT_THAT(ScanModel(repo.root(), "../a"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ScanModel(repo.root(), ".."), StatusIs(absl::StatusCode::kInvalidArgument));
}

// models/export.py --repository writes what the scan and the config parser
// accept (the build exports it; see models/CMakeLists.txt).
TEST(RepositoryScanTest, ReadsTheRepositoryExportPyWrites) {
  const std::string root = METALSERVE_EXPORTED_REPOSITORY;
  if (!std::filesystem::exists(root)) {
    GTEST_SKIP() << root << " not exported (build the models target)";
  }
  auto scan = ScanRepository(root);
  ASSERT_THAT(scan.status(), IsOk());
  ASSERT_THAT(scan->models, SizeIs(2));
  for (const ModelEntry& m : scan->models) {
    EXPECT_THAT(m.status, IsOk()) << m.name;
    EXPECT_THAT(Selected(m), ElementsAre(1)) << m.name;
    EXPECT_THAT(m.notes, IsEmpty()) << m.name;
  }
  EXPECT_EQ(scan->models[1].name, "tiny_cnn");
  ASSERT_THAT(scan->models[1].config.signature.outputs, SizeIs(1));
  EXPECT_EQ(scan->models[1].config.signature.outputs[0].name, "logits");
}

}  // namespace
}  // namespace metalserve
