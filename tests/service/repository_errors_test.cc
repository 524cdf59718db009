#include "server/service/repository_errors.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace metalserve {
namespace {

using ::metalserve::testing::StatusIs;
using ::testing::HasSubstr;

TEST(RepositoryErrorsTest, ParametersAreRefusedNamingEachSortedAndNoneIsOk) {
  EXPECT_TRUE(RefuseRepositoryParameters("RepositoryModelLoad", {}).ok());
  EXPECT_THAT(RefuseRepositoryParameters("RepositoryModelLoad", {"file:1/model.pt", "config"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "RepositoryModelLoad parameters [config, file:1/model.pt] are not "
                       "supported: the model's folder and config.json are its only source"));
}

TEST(RepositoryErrorsTest, NoRepositoryAndBusyNameTheCallAndWhatToDo) {
  EXPECT_THAT(NoRepositoryError("RepositoryModelUnload"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("RepositoryModelUnload: the server was started with "
                                       "--model"),
                             HasSubstr("--model_control=explicit"))));
  EXPECT_THAT(RepositoryBusyError("RepositoryModelLoad", "m"),
              StatusIs(absl::StatusCode::kUnavailable,
                       "RepositoryModelLoad of \"m\": another load or unload is running; "
                       "retry when it is done"));
}

}  // namespace
}  // namespace metalserve
