#include "server/repository/model_repository.h"

#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/repository/fake_servable.h"
#include "tests/repository/temp_repository.h"
#include "tests/testing/simulated_clock.h"
#include "tests/testing/status_matchers.h"

namespace metalserve {

void PrintTo(const IndexEntry& e, std::ostream* os) {
  *os << e.model << " v'" << e.version << "' " << e.state << " (" << e.reason << ")";
}

namespace {

using ::metalserve::testing::FakeFactory;
using ::metalserve::testing::IsOk;
using ::metalserve::testing::StatusIs;
using ::metalserve::testing::TempRepository;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;
using ::testing::SizeIs;

auto Entry(const std::string& model, const std::string& version, const std::string& state) {
  return AllOf(Field(&IndexEntry::model, model), Field(&IndexEntry::version, version),
               Field(&IndexEntry::state, state));
}

class ModelRepositoryTest : public ::testing::Test {
 protected:
  std::unique_ptr<ModelRepository> Make(ModelControl control) {
    auto created = ModelRepository::Create(
        {.root = repo_.root(), .control = control, .factory = &factory_, .clock = &clock_});
    EXPECT_THAT(created.status(), IsOk());
    return created.ok() ? *std::move(created) : nullptr;
  }
  // The version the manager answers `model` with; -1 for an error.
  static int64_t Served(ModelRepository& r, const std::string& model) {
    auto h = r.manager()->Get(model, "");
    return h.ok() ? h->id().version : -1;
  }

  TempRepository repo_;
  FakeFactory factory_;
  SimulatedClock clock_;
};

TEST(ModelControlTest, ParsesTheThreeModesAndNamesABadOne) {
  EXPECT_EQ(*ParseModelControl("none"), ModelControl::kNone);
  EXPECT_EQ(*ParseModelControl("explicit"), ModelControl::kExplicit);
  EXPECT_EQ(*ParseModelControl("poll"), ModelControl::kPoll);
  EXPECT_THAT(ParseModelControl("auto"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'auto'"), HasSubstr("none, explicit, poll"))));
  EXPECT_EQ(ModelControlName(ModelControl::kPoll), "poll");
}

TEST_F(ModelRepositoryTest, CreateValidatesItsOptions) {
  EXPECT_THAT(ModelRepository::Create({.factory = &factory_}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--model_repository")));
  EXPECT_THAT(ModelRepository::Create({.root = repo_.root()}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("factory")));
  EXPECT_THAT(ModelRepository::Create({.root = repo_.root(),
                                       .control = ModelControl::kPoll,
                                       .poll_interval = absl::ZeroDuration(),
                                       .factory = &factory_}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("repository_poll_interval 0"), HasSubstr("poll"))));
  EXPECT_THAT(ModelRepository::Create({.root = repo_.Path("missing"), .factory = &factory_}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr(repo_.Path("missing"))));
}

TEST_F(ModelRepositoryTest, StartLoadsEveryGoodModelAndIndexShowsWhyOthersAreNot) {
  repo_.WriteConfig("good");
  repo_.WriteVersion("good", 1);
  repo_.WriteVersion("good", 2);
  repo_.WriteConfig("bad", R"("max_batch": 8)");
  repo_.WriteVersion("bad", 1);
  auto repository = Make(ModelControl::kNone);
  ASSERT_NE(repository, nullptr);
  EXPECT_EQ(Served(*repository, "good"), 2);
  const std::vector<IndexEntry> index = repository->Index(/*ready_only=*/false);
  ASSERT_THAT(index, ElementsAre(Entry("bad", "", "UNAVAILABLE"), Entry("good", "2", "READY")));
  EXPECT_THAT(index[0].reason, AllOf(HasSubstr(repo_.Path("bad/config.json")),
                                     HasSubstr("max_batch")));
  EXPECT_THAT(repository->Index(/*ready_only=*/true), ElementsAre(Entry("good", "2", "READY")));
}

TEST_F(ModelRepositoryTest, ExplicitLoadPicksUpANewVersionAndUnloadStopsServing) {
  repo_.WriteConfig("m");
  repo_.WriteVersion("m", 1);
  auto repository = Make(ModelControl::kExplicit);
  ASSERT_NE(repository, nullptr);
  repo_.WriteVersion("m", 2);
  ASSERT_THAT(repository->LoadModel("m"), IsOk());
  EXPECT_EQ(Served(*repository, "m"), 2);
  ASSERT_THAT(repository->LoadModel("m"), IsOk());  // nothing changed: no load
  EXPECT_THAT(factory_.loads(), SizeIs(2));
  ASSERT_THAT(repository->UnloadModel("m"), IsOk());
  EXPECT_THAT(repository->manager()->Get("m", ""), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(repository->UnloadModel("m"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("loaded: none")));
  EXPECT_THAT(repository->LoadModel("other"),
              StatusIs(absl::StatusCode::kNotFound, AllOf(HasSubstr("\"other\""),
                                                          HasSubstr("[m]"))));
  ASSERT_THAT(repository->LoadModel("m"), IsOk());  // back after an unload
  EXPECT_EQ(Served(*repository, "m"), 2);
}

TEST_F(ModelRepositoryTest, LoadAndUnloadAreRefusedUnlessExplicitNamingTheMode) {
  repo_.WriteConfig("m");
  repo_.WriteVersion("m", 1);
  for (ModelControl control : {ModelControl::kNone, ModelControl::kPoll}) {
    auto repository = Make(control);
    ASSERT_NE(repository, nullptr);
    const std::string mode = absl::StrCat("--model_control=", ModelControlName(control));
    EXPECT_THAT(repository->LoadModel("m"),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         AllOf(HasSubstr("RepositoryModelLoad"), HasSubstr(mode))));
    EXPECT_THAT(repository->UnloadModel("m"),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr(mode)));
    EXPECT_EQ(Served(*repository, "m"), 1);
  }
}

TEST_F(ModelRepositoryTest, RescanReloadsAChangedFileAndUnloadsARemovedModel) {
  repo_.WriteConfig("a");
  repo_.WriteVersion("a", 1);
  repo_.WriteConfig("b");
  repo_.WriteVersion("b", 1);
  auto repository = Make(ModelControl::kNone);
  ASSERT_NE(repository, nullptr);
  ASSERT_THAT(repository->Rescan(), IsOk());
  EXPECT_THAT(factory_.loads(), SizeIs(2));  // nothing changed
  const void* before = repository->manager()->Get("a", "")->get();
  repo_.Write("a/1/model.pt", "a new model of another size");
  std::filesystem::remove_all(repo_.Path("b"));
  ASSERT_THAT(repository->Rescan(), IsOk());
  EXPECT_THAT(factory_.loads(), SizeIs(3));
  EXPECT_NE(repository->manager()->Get("a", "")->get(), before);  // version 1 anew
  EXPECT_THAT(repository->manager()->Get("b", ""), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(ModelRepositoryTest, ConfigTurnedBadKeepsTheServingVersionAndSaysWhy) {
  repo_.WriteConfig("m");
  repo_.WriteVersion("m", 1);
  auto repository = Make(ModelControl::kNone);
  ASSERT_NE(repository, nullptr);
  repo_.WriteConfig("m", R"("precision": "fp8")");
  repo_.WriteVersion("m", 2);
  EXPECT_THAT(repository->Rescan(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(repo_.Path("m/config.json")), HasSubstr("fp8"))));
  EXPECT_EQ(Served(*repository, "m"), 1);
}

TEST_F(ModelRepositoryTest, FailedLoadIsRetriedByThePollerOnlyWhenFilesChange) {
  repo_.WriteConfig("m");
  repo_.WriteVersion("m", 1);
  auto repository = Make(ModelControl::kNone);
  ASSERT_NE(repository, nullptr);
  factory_.Fail(2, absl::InvalidArgumentError("verification failed"));
  repo_.WriteVersion("m", 2);
  EXPECT_THAT(repository->Rescan(), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("versions [1] keep serving")));
  EXPECT_THAT(repository->Rescan(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                             HasSubstr("last load failed")));
  EXPECT_THAT(factory_.loads(), SizeIs(2));  // v1, one attempt at v2
  EXPECT_EQ(Served(*repository, "m"), 1);
  factory_.Fail(2, absl::OkStatus());
  repo_.Write("m/2/model.pt", "fixed, and of another size");
  ASSERT_THAT(repository->Rescan(), IsOk());
  EXPECT_EQ(Served(*repository, "m"), 2);
}

// An operator's RepositoryModelLoad retries at once (the failure may have
// been passing, e.g. memory), unlike the poller.
TEST_F(ModelRepositoryTest, ExplicitLoadRetriesAFailedLoadOfUnchangedFiles) {
  repo_.WriteConfig("m");
  repo_.WriteVersion("m", 1);
  factory_.Fail(1, absl::ResourceExhaustedError("out of memory"));
  auto repository = Make(ModelControl::kExplicit);
  ASSERT_NE(repository, nullptr);
  EXPECT_THAT(repository->manager()->Get("m", ""), StatusIs(absl::StatusCode::kNotFound));
  factory_.Fail(1, absl::OkStatus());
  ASSERT_THAT(repository->LoadModel("m"), IsOk());
  EXPECT_EQ(Served(*repository, "m"), 1);
}

TEST_F(ModelRepositoryTest, PollerRescansOncePerIntervalOnItsClock) {
  repo_.WriteConfig("m");
  repo_.WriteVersion("m", 1);
  auto created = ModelRepository::Create({.root = repo_.root(),
                                          .control = ModelControl::kPoll,
                                          .poll_interval = absl::Seconds(5),
                                          .factory = &factory_,
                                          .clock = &clock_});
  ASSERT_THAT(created.status(), IsOk());
  ModelRepository& repository = **created;
  repo_.WriteVersion("m", 2);
  clock_.BlockUntilWaiters(1);  // the poller waits for its first interval
  clock_.AdvanceTime(absl::Seconds(4));
  clock_.BlockUntilWaiters(1);
  EXPECT_EQ(Served(repository, "m"), 1);  // not yet
  clock_.AdvanceTime(absl::Seconds(1));
  clock_.BlockUntilWaiters(1);  // waiting again: the rescan is done
  EXPECT_EQ(Served(repository, "m"), 2);
}

}  // namespace
}  // namespace metalserve
