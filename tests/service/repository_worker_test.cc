#include "server/service/repository_worker.h"

#include <atomic>
#include <mutex>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace metalserve {
namespace {

using ::metalserve::testing::StatusIs;
using ::testing::HasSubstr;

TEST(RepositoryWorkerTest, RefusesASecondWhileOneRunsThenTakesTheNext) {
  RepositoryWorker worker;
  absl::Notification release, finished;
  // Guarded by a std::mutex, not only ordered by `finished`: ThreadSanitizer
  // cannot see the release in Debian's uninstrumented absl::Notification::
  // Notify and reported the read below as a race (sanitizer_tsan, once).
  std::mutex answered_mu;
  absl::Status answered;
  ASSERT_TRUE(worker
                  .TryRun(
                      "RepositoryModelLoad", "a",
                      [&] {
                        release.WaitForNotification();
                        return absl::NotFoundError("no a");
                      },
                      [&](const absl::Status& s) {
                        {
                          std::lock_guard<std::mutex> l(answered_mu);
                          answered = s;
                        }
                        finished.Notify();
                      })
                  .ok());
  EXPECT_THAT(worker.TryRun("RepositoryModelUnload", "b", [] { return absl::OkStatus(); },
                            [](const absl::Status&) { ADD_FAILURE() << "ran"; }),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("RepositoryModelUnload of \"b\": another load or unload is "
                                 "running")));
  release.Notify();
  finished.WaitForNotification();
  {
    std::lock_guard<std::mutex> l(answered_mu);
    EXPECT_THAT(answered, StatusIs(absl::StatusCode::kNotFound, HasSubstr("no a")));
  }
  // `done` ran after the worker went idle: the next one starts.
  absl::Notification second;
  EXPECT_TRUE(worker
                  .TryRun("RepositoryModelLoad", "c", [] { return absl::OkStatus(); },
                          [&](const absl::Status&) { second.Notify(); })
                  .ok());
  second.WaitForNotification();
}

TEST(RepositoryWorkerTest, StopWaitsForTheRunningOneAndRefusesTheRest) {
  RepositoryWorker worker;
  std::atomic<bool> done{false};
  absl::Notification started;
  ASSERT_TRUE(worker
                  .TryRun(
                      "RepositoryModelLoad", "a",
                      [&] {
                        started.Notify();
                        return absl::OkStatus();
                      },
                      [&](const absl::Status&) { done.store(true); })
                  .ok());
  started.WaitForNotification();
  worker.Stop();
  EXPECT_TRUE(done.load());
  EXPECT_THAT(worker.TryRun("RepositoryModelLoad", "b", [] { return absl::OkStatus(); },
                            [](const absl::Status&) {}),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("shutting down")));
}

}  // namespace
}  // namespace metalserve
