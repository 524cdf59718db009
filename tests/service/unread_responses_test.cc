// UnreadResponses: the policy that bounds answers a client does not read,
// on a simulated clock.
#include "server/service/unread_responses.h"

#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/simulated_clock.h"
#include "tests/testing/status_matchers.h"

namespace metalserve {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Reason = UnreadResponses::Reason;
using ::metalserve::testing::StatusIs;

std::vector<uint64_t> Ids(const std::vector<UnreadResponses::Cut>& cuts) {
  std::vector<uint64_t> ids;
  for (const auto& c : cuts) ids.push_back(c.call);
  return ids;
}

class UnreadResponsesTest : public ::testing::Test {
 protected:
  std::unique_ptr<UnreadResponses> Make(int64_t per_connection, int64_t total,
                                        absl::Duration age = absl::Seconds(30)) {
    auto u = UnreadResponses::Create({per_connection, total, age}, &clock_);
    EXPECT_TRUE(u.ok()) << u.status();
    return std::move(*u);
  }
  SimulatedClock clock_;
};

TEST_F(UnreadResponsesTest, AnswersSentInTimeAreNeverCut) {
  auto u = Make(100, 1000);
  for (uint64_t call = 0; call < 50; ++call) {
    EXPECT_THAT(u->Add(call, "ipv4:127.0.0.1:1", 90), IsEmpty());
    u->Remove(call);
  }
  EXPECT_EQ(u->total_bytes(), 0);
  clock_.AdvanceTime(absl::Hours(1));
  EXPECT_THAT(u->TakeExpired(), IsEmpty());
}

TEST_F(UnreadResponsesTest, CutsTheConnectionsOldestAnswersPastItsBound) {
  auto u = Make(100, 1000);
  EXPECT_THAT(u->Add(1, "a", 40), IsEmpty());
  clock_.AdvanceTime(absl::Seconds(1));
  EXPECT_THAT(u->Add(2, "b", 40), IsEmpty());  // another connection
  EXPECT_THAT(u->Add(3, "a", 40), IsEmpty());
  clock_.AdvanceTime(absl::Seconds(1));
  const auto cuts = u->Add(4, "a", 40);  // "a": 120 > 100
  ASSERT_THAT(Ids(cuts), ElementsAre(1));
  EXPECT_EQ(cuts[0].peer, "a");
  EXPECT_EQ(cuts[0].bytes, 40);
  EXPECT_EQ(cuts[0].peer_bytes, 120);
  EXPECT_EQ(cuts[0].age, absl::Seconds(2));
  EXPECT_EQ(cuts[0].reason, Reason::kConnectionBytes);
  EXPECT_EQ(u->peer_bytes("a"), 80);
  EXPECT_EQ(u->peer_bytes("b"), 40);
  EXPECT_EQ(u->total_bytes(), 120);
}

TEST_F(UnreadResponsesTest, AnAnswerLargerThanTheBoundIsCutItself) {
  auto u = Make(100, 1000);
  EXPECT_THAT(Ids(u->Add(7, "a", 150)), ElementsAre(7));
  EXPECT_EQ(u->total_bytes(), 0);
}

TEST_F(UnreadResponsesTest, CutsTheOldestOfAnyConnectionPastTheTotal) {
  auto u = Make(100, 150);
  EXPECT_THAT(u->Add(1, "a", 60), IsEmpty());
  EXPECT_THAT(u->Add(2, "b", 60), IsEmpty());
  const auto cuts = u->Add(3, "c", 60);  // 180 > 150: "a"'s is the oldest
  EXPECT_THAT(cuts, ElementsAre(Field(&UnreadResponses::Cut::reason, Reason::kTotalBytes)));
  EXPECT_THAT(Ids(cuts), ElementsAre(1));
  EXPECT_EQ(u->total_bytes(), 120);
}

TEST_F(UnreadResponsesTest, CutsAnswersUnsentLongerThanMaxAge) {
  auto u = Make(100, 1000, absl::Seconds(10));
  EXPECT_THAT(u->Add(1, "a", 1), IsEmpty());
  clock_.AdvanceTime(absl::Seconds(6));
  EXPECT_THAT(u->Add(2, "a", 1), IsEmpty());
  EXPECT_THAT(u->Add(3, "b", 1), IsEmpty());
  u->Remove(3);
  clock_.AdvanceTime(absl::Seconds(4));
  EXPECT_THAT(u->TakeExpired(), IsEmpty());  // exactly max_age: not yet
  clock_.AdvanceTime(absl::Seconds(1));
  const auto cuts = u->TakeExpired();
  ASSERT_THAT(Ids(cuts), ElementsAre(1));
  EXPECT_EQ(cuts[0].reason, Reason::kAge);
  EXPECT_EQ(cuts[0].age, absl::Seconds(11));
  clock_.AdvanceTime(absl::Seconds(6));
  EXPECT_THAT(Ids(u->TakeExpired()), ElementsAre(2));
  EXPECT_EQ(u->total_bytes(), 0);
}

TEST_F(UnreadResponsesTest, ACallCutIsReturnedOnceAndItsLaterRemoveIsIgnored) {
  auto u = Make(100, 1000, absl::Seconds(1));
  EXPECT_THAT(Ids(u->Add(1, "a", 200)), ElementsAre(1));
  u->Remove(1);
  EXPECT_THAT(u->Add(2, "a", 50), IsEmpty());
  EXPECT_EQ(u->peer_bytes("a"), 50);
  clock_.AdvanceTime(absl::Seconds(2));
  EXPECT_THAT(Ids(u->TakeExpired()), ElementsAre(2));
  EXPECT_THAT(u->TakeExpired(), IsEmpty());
}

TEST_F(UnreadResponsesTest, RefusesOptionsOutOfRangeNamingTheField) {
  EXPECT_THAT(UnreadResponses::Create({0, 10, absl::Seconds(1)}, &clock_).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("max_unread_response_bytes_per_connection must be > 0, not 0")));
  EXPECT_THAT(UnreadResponses::Create({20, 10, absl::Seconds(1)}, &clock_).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("max_unread_response_bytes (10) must be >=")));
  EXPECT_THAT(UnreadResponses::Create({10, 10, absl::ZeroDuration()}, &clock_).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unread_response_timeout must be > 0")));
}

}  // namespace
}  // namespace metalserve
