#include "server/repository/model_manager.h"

#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/repository/fake_servable.h"
#include "tests/testing/status_matchers.h"

namespace metalserve {

void PrintTo(const ServableId& id, std::ostream* os) { *os << id.ToString(); }

namespace {

using ::metalserve::testing::FakeFactory;
using ::metalserve::testing::FakeServable;
using ::metalserve::testing::IsOk;
using ::metalserve::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

// Bounds the waits for the release thread; they end as soon as it is done.
constexpr absl::Duration kReleaseWait = absl::Seconds(30);

// A scan's entry for `model` with `versions` selected.
ModelEntry Entry(const std::string& model, std::vector<int64_t> versions) {
  ModelEntry entry;
  entry.name = model;
  entry.dir = "/repo/" + model;
  entry.config.signature.name = model;
  for (int64_t v : versions) {
    entry.available.push_back(v);
    entry.selected.push_back({v, absl::StrCat("/repo/", model, "/", v, "/model.pt")});
  }
  return entry;
}

ServableId Id(const std::string& model, int64_t version) { return {model, version}; }

auto State(const std::string& model, int64_t version, ServableState state) {
  return AllOf(Field(&VersionStatus::id, Id(model, version)),
               Field(&VersionStatus::state, state));
}

class ModelManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto created = ModelManager::Create({.factory = &factory_});
    ASSERT_THAT(created.status(), IsOk());
    manager_ = *std::move(created);
  }
  // The version Get(model, version) answers with; -1 for an error.
  int64_t ServedVersion(const std::string& model, const std::string& version = "") {
    absl::StatusOr<ServableHandle> h = manager_->Get(model, version);
    return h.ok() ? h->id().version : -1;
  }
  std::vector<ServableId> DestroyedIds() {
    std::vector<ServableId> ids;
    for (const auto& d : factory_.destroyed()) ids.push_back(d.id);
    return ids;
  }

  FakeFactory factory_;
  std::unique_ptr<ModelManager> manager_;
};

TEST_F(ModelManagerTest, CreateRequiresAFactory) {
  EXPECT_THAT(ModelManager::Create({}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("factory")));
}

TEST_F(ModelManagerTest, NothingLoadedIsNotFoundSayingSo) {
  EXPECT_THAT(manager_->Get("m", ""),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("\"m\" is not loaded"), HasSubstr("loaded: none"))));
}

TEST_F(ModelManagerTest, EmptyVersionIsTheNewestReadyOneAndNumbersSelect) {
  ASSERT_THAT(manager_->Load(Entry("m", {1, 2})), IsOk());
  EXPECT_EQ(ServedVersion("m"), 2);
  EXPECT_EQ(ServedVersion("m", "1"), 1);
  EXPECT_EQ(ServedVersion("m", "2"), 2);
  auto handle = manager_->Get("m", "1");
  ASSERT_THAT(handle.status(), IsOk());
  ASSERT_NE(handle->As<FakeServable>(), nullptr);
  EXPECT_EQ(handle->As<FakeServable>()->id(), Id("m", 1));
}

TEST_F(ModelManagerTest, UnknownModelOrVersionIsNotFoundListingWhatIsLoaded) {
  ASSERT_THAT(manager_->Load(Entry("a", {1, 2})), IsOk());
  ASSERT_THAT(manager_->Load(Entry("b", {7})), IsOk());
  EXPECT_THAT(manager_->Get("c", ""),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("\"c\" is not loaded"), HasSubstr("a [1,2], b [7]"))));
  EXPECT_THAT(manager_->Get("a", "3"),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("no ready version \"3\""), HasSubstr("ready: [1,2]"))));
  EXPECT_THAT(manager_->Get("a", "latest"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("\"latest\"")));
}

TEST_F(ModelManagerTest, GetSaysWhetherTheModelOrTheVersionWasNotFound) {
  ASSERT_THAT(manager_->Load(Entry("a", {1, 2})), IsOk());
  LookupMiss miss = LookupMiss::kVersion;
  EXPECT_THAT(manager_->Get("a", "2", &miss), IsOk());
  EXPECT_EQ(miss, LookupMiss::kNone);
  EXPECT_THAT(manager_->Get("c", "", &miss), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(miss, LookupMiss::kModel);
  EXPECT_THAT(manager_->Get("a", "3", &miss), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(miss, LookupMiss::kVersion);
  // A version named like the model's message ("version ...") is still the version.
  EXPECT_THAT(manager_->Get("version 1", "1", &miss), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(miss, LookupMiss::kModel);
}

TEST_F(ModelManagerTest, EmptyModelNameIsTheOnlyModelServedAndNotFoundWithSeveral) {
  LookupMiss miss = LookupMiss::kNone;
  EXPECT_THAT(manager_->Get("", "", &miss),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("loaded: none")));
  EXPECT_EQ(miss, LookupMiss::kModel);
  ASSERT_THAT(manager_->Load(Entry("a", {1, 2})), IsOk());
  EXPECT_EQ(ServedVersion(""), 2);
  EXPECT_EQ(ServedVersion("", "1"), 1);
  EXPECT_THAT(manager_->Get("", "5", &miss),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("model \"a\" has no ready version \"5\"")));
  EXPECT_EQ(miss, LookupMiss::kVersion);
  ASSERT_THAT(manager_->Load(Entry("b", {7})), IsOk());
  EXPECT_THAT(manager_->Get("", "", &miss),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("\"\" is not loaded"), HasSubstr("a [1,2], b [7]"))));
  EXPECT_EQ(miss, LookupMiss::kModel);
}

TEST_F(ModelManagerTest, ReloadSwitchesToTheNewVersionAndKeepsTheOldAliveForItsHolders) {
  ASSERT_THAT(manager_->Load(Entry("m", {1})), IsOk());
  absl::StatusOr<ServableHandle> admitted = manager_->Get("m", "");
  ASSERT_THAT(admitted.status(), IsOk());
  ASSERT_THAT(manager_->Load(Entry("m", {2})), IsOk());
  EXPECT_EQ(ServedVersion("m"), 2);
  EXPECT_EQ(ServedVersion("m", "1"), -1);  // no longer served
  // The request admitted before the switch still holds version 1.
  EXPECT_EQ(admitted->As<FakeServable>()->id(), Id("m", 1));
  EXPECT_THAT(DestroyedIds(), IsEmpty());
  EXPECT_THAT(manager_->States(), ElementsAre(State("m", 1, ServableState::kUnloading),
                                              State("m", 2, ServableState::kReady)));
  EXPECT_FALSE(manager_->WaitUntilReleased("m", absl::ZeroDuration()));
  *admitted = ServableHandle();
  ASSERT_TRUE(manager_->WaitUntilReleased("m", kReleaseWait));
  EXPECT_THAT(DestroyedIds(), ElementsAre(Id("m", 1)));
  EXPECT_THAT(manager_->States(), ElementsAre(State("m", 2, ServableState::kReady)));
}

TEST_F(ModelManagerTest, FailedLoadLeavesTheServingVersionAndSaysWhy) {
  ASSERT_THAT(manager_->Load(Entry("m", {1})), IsOk());
  factory_.Fail(2, absl::InvalidArgumentError("outputs[0].shape[1]: declared 4, model gives 3"));
  EXPECT_THAT(manager_->Load(Entry("m", {2})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("m version 2"), HasSubstr("/repo/m/2/model.pt"),
                             HasSubstr("declared 4, model gives 3"),
                             HasSubstr("versions [1] keep serving"))));
  EXPECT_EQ(ServedVersion("m"), 1);
  const std::vector<VersionStatus> states = manager_->States();
  ASSERT_THAT(states, ElementsAre(State("m", 1, ServableState::kReady),
                                  State("m", 2, ServableState::kUnavailable)));
  EXPECT_THAT(states[1].reason, HasSubstr("declared 4"));
  // The next load of the model forgets the failure.
  factory_.Fail(2, absl::OkStatus());
  ASSERT_THAT(manager_->Load(Entry("m", {2})), IsOk());
  ASSERT_TRUE(manager_->WaitUntilReleased("m", kReleaseWait));
  EXPECT_THAT(manager_->States(), ElementsAre(State("m", 2, ServableState::kReady)));
}

TEST_F(ModelManagerTest, FailedFirstLoadServesNothingAndSaysSo) {
  factory_.Fail(1, absl::NotFoundError("cannot read /repo/m/1/model.pt"));
  EXPECT_THAT(manager_->Load(Entry("m", {1})),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nothing of it was serving")));
  EXPECT_THAT(manager_->Get("m", ""), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(manager_->States(), ElementsAre(State("m", 1, ServableState::kUnavailable)));
}

TEST_F(ModelManagerTest, OneFailedVersionDiscardsTheOthersLoadedWithIt) {
  ASSERT_THAT(manager_->Load(Entry("m", {1})), IsOk());
  factory_.Fail(3, absl::ResourceExhaustedError("out of memory"));
  EXPECT_THAT(manager_->Load(Entry("m", {2, 3})),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("m version 3")));
  EXPECT_EQ(ServedVersion("m"), 1);
  EXPECT_EQ(ServedVersion("m", "2"), -1);
  ASSERT_TRUE(manager_->WaitUntilReleased("m", kReleaseWait));
  EXPECT_THAT(DestroyedIds(), ElementsAre(Id("m", 2)));
}

TEST_F(ModelManagerTest, VersionsStillSelectedAreKeptNotReloaded) {
  ASSERT_THAT(manager_->Load(Entry("m", {1, 2})), IsOk());
  absl::StatusOr<ServableHandle> two = manager_->Get("m", "2");
  ASSERT_THAT(two.status(), IsOk());
  ASSERT_THAT(manager_->Load(Entry("m", {2, 3})), IsOk());  // latest 2, a new version 3
  EXPECT_THAT(factory_.loads(), ElementsAre(Id("m", 1), Id("m", 2), Id("m", 3)));
  EXPECT_EQ(ServedVersion("m", "1"), -1);
  EXPECT_EQ(manager_->Get("m", "2")->get(), two->get());  // the same instance
  EXPECT_EQ(ServedVersion("m"), 3);
  // reload_ready loads the kept ones anew and switches them too.
  ASSERT_THAT(manager_->Load(Entry("m", {2, 3}), /*reload_ready=*/true), IsOk());
  EXPECT_THAT(factory_.loads(), SizeIs(5));
  EXPECT_NE(manager_->Get("m", "2")->get(), two->get());
}

TEST_F(ModelManagerTest, HandleHeldAcrossUnloadKeepsTheServableAlive) {
  ASSERT_THAT(manager_->Load(Entry("m", {1})), IsOk());
  absl::StatusOr<ServableHandle> admitted = manager_->Get("m", "");
  ASSERT_THAT(admitted.status(), IsOk());
  ASSERT_THAT(manager_->Unload("m"), IsOk());
  EXPECT_THAT(manager_->Get("m", ""),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("loaded: none")));
  EXPECT_THAT(DestroyedIds(), IsEmpty());
  EXPECT_EQ(admitted->As<FakeServable>()->id(), Id("m", 1));
  EXPECT_THAT(manager_->States(), ElementsAre(State("m", 1, ServableState::kUnloading)));
  admitted = absl::NotFoundError("released");
  ASSERT_TRUE(manager_->WaitUntilReleased("m", kReleaseWait));
  EXPECT_THAT(DestroyedIds(), ElementsAre(Id("m", 1)));
  EXPECT_THAT(manager_->States(), IsEmpty());
}

TEST_F(ModelManagerTest, ServableIsDestroyedOffTheThreadReleasingTheLastHandle) {
  ASSERT_THAT(manager_->Load(Entry("m", {1})), IsOk());
  absl::StatusOr<ServableHandle> admitted = manager_->Get("m", "");
  ASSERT_THAT(manager_->Unload("m"), IsOk());
  admitted = absl::NotFoundError("released");  // the last handle, on this thread
  ASSERT_TRUE(manager_->WaitUntilReleased("m", kReleaseWait));
  ASSERT_THAT(factory_.destroyed(), SizeIs(1));
  // So a servable may join its own executor threads in its destructor.
  EXPECT_NE(factory_.destroyed()[0].thread, std::this_thread::get_id());
}

TEST_F(ModelManagerTest, UnloadOfAModelNotLoadedIsNotFoundListingWhatIs) {
  ASSERT_THAT(manager_->Load(Entry("a", {1})), IsOk());
  EXPECT_THAT(manager_->Unload("b"),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("\"b\" is not loaded"), HasSubstr("a [1]"))));
  EXPECT_EQ(ServedVersion("a"), 1);
}

TEST(ModelManagerUnloadTest, EachUnloadIsReportedWithItsOutcomeAndNoCallerNameWhenRefused) {
  FakeFactory factory;
  std::vector<std::pair<std::string, bool>> unloads;
  auto manager = ModelManager::Create(
      {.factory = &factory,
       .on_unload = [&unloads](const std::string& m, bool ok) { unloads.emplace_back(m, ok); }});
  ASSERT_THAT(manager.status(), IsOk());
  ASSERT_THAT((*manager)->Load(Entry("a", {1})), IsOk());
  ASSERT_THAT((*manager)->Unload("a"), IsOk());
  EXPECT_THAT((*manager)->Unload("anything a client sends"),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(unloads, ElementsAre(std::make_pair(std::string("a"), true),
                                   std::make_pair(std::string(""), false)));
}

TEST_F(ModelManagerTest, EntryWithAScanErrorIsReturnedAndChangesNothing) {
  ASSERT_THAT(manager_->Load(Entry("m", {1})), IsOk());
  ModelEntry bad = Entry("m", {2});
  bad.status = absl::InvalidArgumentError("/repo/m/config.json: config JSON: max_batch: ...");
  EXPECT_THAT(manager_->Load(bad), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("/repo/m/config.json")));
  EXPECT_EQ(ServedVersion("m"), 1);
  EXPECT_THAT(factory_.loads(), SizeIs(1));
}

TEST_F(ModelManagerTest, LoadingVersionIsVisibleWhileTheFactoryRuns) {
  ASSERT_THAT(manager_->Load(Entry("m", {1})), IsOk());
  absl::Notification entered, proceed;
  factory_.Hold(2, &entered, &proceed);
  std::thread loader([&] { EXPECT_THAT(manager_->Load(Entry("m", {2})), IsOk()); });
  entered.WaitForNotification();
  EXPECT_THAT(manager_->States(), ElementsAre(State("m", 1, ServableState::kReady),
                                              State("m", 2, ServableState::kLoading)));
  EXPECT_EQ(ServedVersion("m"), 1);  // lookups go on during the load
  proceed.Notify();
  loader.join();
  EXPECT_EQ(ServedVersion("m"), 2);
}

// Readers look the model up without pause while version 2 loads and the
// switch happens: every lookup finds a version, and the version never goes
// back from 2 to 1.
TEST_F(ModelManagerTest, LookupDuringReloadNeverSeesNoVersion) {
  ASSERT_THAT(manager_->Load(Entry("m", {1})), IsOk());
  absl::Notification entered, proceed;
  factory_.Hold(2, &entered, &proceed);
  std::thread loader([&] { EXPECT_THAT(manager_->Load(Entry("m", {2})), IsOk()); });
  entered.WaitForNotification();
  constexpr int kReaders = 4;
  constexpr int kLookupsDuringLoad = 2000;
  std::atomic<int> failures{0}, regressions{0}, during_load{0};
  absl::Notification readers_running;
  std::vector<std::thread> readers;
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&] {
      bool counted = false;  // toward readers_running, once
      auto count = [&] {
        if (!counted && ++during_load == kReaders) readers_running.Notify();
        counted = true;
      };
      int64_t last = 0;
      for (int i = 0; last != 2; ++i) {
        absl::StatusOr<ServableHandle> h = manager_->Get("m", "");
        if (!h.ok()) {
          ++failures;
          break;
        }
        if (h->id().version < last) ++regressions;
        last = h->id().version;
        if (i == kLookupsDuringLoad) count();
      }
      count();
    });
  }
  readers_running.WaitForNotification();  // each reader saw version 1 2000 times
  proceed.Notify();
  loader.join();
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(regressions.load(), 0);
}

TEST_F(ModelManagerTest, DestructorFreesEveryServedVersion) {
  ASSERT_THAT(manager_->Load(Entry("a", {1, 2})), IsOk());
  ASSERT_THAT(manager_->Load(Entry("b", {1})), IsOk());
  manager_.reset();
  EXPECT_THAT(factory_.destroyed(), SizeIs(3));
}

TEST(ServableStateTest, NamesAreTritons) {
  EXPECT_EQ(ServableStateName(ServableState::kLoading), "LOADING");
  EXPECT_EQ(ServableStateName(ServableState::kReady), "READY");
  EXPECT_EQ(ServableStateName(ServableState::kUnloading), "UNLOADING");
  EXPECT_EQ(ServableStateName(ServableState::kUnavailable), "UNAVAILABLE");
}

}  // namespace
}  // namespace metalserve
