// ModelVersionWatch: answers counted per version, and a worker answered by a
// version older than one it had seen counted as a regression.
#include "client/model_versions.h"

#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace metalserve::client {
namespace {

using ::testing::ElementsAre;
using ::testing::Optional;
using ::testing::Pair;

// Sends one call on `worker` and records `version` as its answer, as a
// closed-loop slot does (the next call is sent after this one's answer).
bool Answer(ModelVersionWatch& watch, size_t worker, const std::string& version) {
  return watch.Record(worker, watch.NewestSeen(worker), version);
}

TEST(VersionNumberTest, OnlyPlainDecimalIntegersAreNumbered) {
  EXPECT_THAT(VersionNumber("7"), Optional(7));
  EXPECT_THAT(VersionNumber("0012"), Optional(12));
  EXPECT_FALSE(VersionNumber("").has_value());
  EXPECT_FALSE(VersionNumber("v2").has_value());
  EXPECT_FALSE(VersionNumber("-1").has_value());
  EXPECT_FALSE(VersionNumber("+1").has_value());
  EXPECT_FALSE(VersionNumber(" 1").has_value());
  EXPECT_FALSE(VersionNumber("99999999999999999999").has_value());
}

TEST(ModelVersionWatchTest, CountsAnswersPerVersionInNumericOrder) {
  ModelVersionWatch watch(2);
  for (const char* v : {"9", "10", "10", "2"}) Answer(watch, 0, v);
  Answer(watch, 1, "10");
  Answer(watch, 1, "");
  Answer(watch, 1, "abc");
  const ModelVersionStats stats = watch.Stats();
  // Numbers by value ("9" before "10"), then the unnumbered by string.
  EXPECT_THAT(stats.responses, ElementsAre(Pair("2", 1), Pair("9", 1), Pair("10", 3),
                                           Pair("", 1), Pair("abc", 1)));
}

TEST(ModelVersionWatchTest, AnOlderVersionAfterANewerOneIsARegression) {
  ModelVersionWatch watch(1);
  EXPECT_FALSE(Answer(watch, 0, "1"));
  EXPECT_FALSE(Answer(watch, 0, "2"));
  EXPECT_FALSE(Answer(watch, 0, "2"));
  EXPECT_TRUE(Answer(watch, 0, "1"));   // went back
  EXPECT_FALSE(Answer(watch, 0, "2"));  // forward again: not counted
  EXPECT_TRUE(Answer(watch, 0, "1"));
  EXPECT_FALSE(Answer(watch, 0, "3"));
  EXPECT_EQ(watch.NewestSeen(0), 3);
  EXPECT_EQ(watch.Stats().regressions, 2);
}

TEST(ModelVersionWatchTest, WorkersAreJudgedApart) {
  // One worker on version 2 does not make another's version 1 a regression:
  // during a switch, calls admitted before it still answer on the old one.
  ModelVersionWatch watch(2);
  Answer(watch, 0, "2");
  EXPECT_FALSE(Answer(watch, 1, "1"));
  EXPECT_FALSE(Answer(watch, 1, "2"));
  EXPECT_EQ(watch.NewestSeen(0), 2);
  EXPECT_EQ(watch.Stats().regressions, 0);
  // Indices wrap: worker 3 is worker 1.
  EXPECT_TRUE(Answer(watch, 3, "1"));
  EXPECT_EQ(watch.Stats().regressions, 1);
}

TEST(ModelVersionWatchTest, OverlappingCallsAreJudgedByWhatWasSeenAtSend) {
  // Open loop: two calls of one lane in flight across a switch. The one
  // sent first may answer on the old version after the second answered on
  // the new one; a call sent after the new version answered may not.
  ModelVersionWatch watch(1);
  Answer(watch, 0, "1");
  const int64_t first = watch.NewestSeen(0);
  const int64_t second = watch.NewestSeen(0);
  EXPECT_FALSE(watch.Record(0, second, "2"));
  EXPECT_FALSE(watch.Record(0, first, "1"));
  EXPECT_EQ(watch.NewestSeen(0), 2);
  EXPECT_TRUE(Answer(watch, 0, "1"));
  EXPECT_EQ(watch.Stats().regressions, 1);
}

TEST(ModelVersionWatchTest, UnnumberedVersionsAreNeverRegressions) {
  ModelVersionWatch watch(1);
  EXPECT_EQ(watch.NewestSeen(0), ModelVersionWatch::kNoneSeen);
  EXPECT_FALSE(Answer(watch, 0, "5"));
  EXPECT_FALSE(Answer(watch, 0, ""));
  EXPECT_FALSE(Answer(watch, 0, "latest"));
  EXPECT_EQ(watch.NewestSeen(0), 5);
  EXPECT_EQ(watch.Stats().regressions, 0);
}

TEST(ModelVersionWatchTest, ConcurrentWorkersAreCountedExactly) {
  constexpr int kWorkers = 4;
  constexpr int kAnswers = 1000;
  ModelVersionWatch watch(kWorkers);
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&watch, w] {
      // Half on version 1, then half on 2; worker 0 goes back once at the end.
      for (int i = 0; i < kAnswers; ++i) Answer(watch, w, i < kAnswers / 2 ? "1" : "2");
      if (w == 0) Answer(watch, w, "1");
    });
  }
  for (std::thread& t : threads) t.join();
  const ModelVersionStats stats = watch.Stats();
  EXPECT_THAT(stats.responses, ElementsAre(Pair("1", kWorkers * kAnswers / 2 + 1),
                                           Pair("2", kWorkers * kAnswers / 2)));
  EXPECT_EQ(stats.regressions, 1);
}

}  // namespace
}  // namespace metalserve::client
