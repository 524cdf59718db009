// The REST paths (server/service/rest_route.h): each route the server
// answers, with and without a version, and paths that name nothing.
#include "server/service/rest_route.h"

#include "gtest/gtest.h"

namespace metalserve {
namespace {

TEST(RestRouteTest, ServerAndHealthPaths) {
  EXPECT_EQ(ParseRoute("/v2").kind, Route::kServer);
  EXPECT_EQ(ParseRoute("/v2/").kind, Route::kServer);
  EXPECT_EQ(ParseRoute("/v2/health/live").kind, Route::kLive);
  EXPECT_EQ(ParseRoute("/v2/health/ready").kind, Route::kReady);
  EXPECT_FALSE(ParseRoute("/v2/health/ready").post());
}

TEST(RestRouteTest, ModelPathsWithAndWithoutAVersion) {
  Route r = ParseRoute("/v2/models/resnet50");
  EXPECT_EQ(r.kind, Route::kModel);
  EXPECT_EQ(r.name, "resnet50");
  EXPECT_EQ(r.version, "");
  r = ParseRoute("/v2/models/resnet50/versions/3/infer");
  EXPECT_EQ(r.kind, Route::kInfer);
  EXPECT_EQ(r.name, "resnet50");
  EXPECT_EQ(r.version, "3");
  EXPECT_TRUE(r.post());
  EXPECT_EQ(ParseRoute("/v2/models/m/ready").kind, Route::kModelReady);
  EXPECT_EQ(ParseRoute("/v2/models/m/versions/1/config").kind, Route::kModelConfig);
  EXPECT_EQ(ParseRoute("/v2/models/m/versions/1").kind, Route::kModel);
  EXPECT_FALSE(ParseRoute("/v2/models/m/config").post());
}

TEST(RestRouteTest, RepositoryPathsArePosts) {
  EXPECT_EQ(ParseRoute("/v2/repository/index").kind, Route::kRepositoryIndex);
  Route r = ParseRoute("/v2/repository/models/identity/load");
  EXPECT_EQ(r.kind, Route::kRepositoryLoad);
  EXPECT_EQ(r.name, "identity");
  EXPECT_TRUE(r.post());
  EXPECT_EQ(ParseRoute("/v2/repository/models/identity/unload").kind,
            Route::kRepositoryUnload);
}

TEST(RestRouteTest, OtherPathsNameNothing) {
  for (const char* url : {"/", "", "/v1/models/m", "/v2/models", "/v2/models/m/infer/x",
                          "/v2/models/m/versions", "/v2/models/m/predict", "/v2/health",
                          "/v2/repository/models/m/reload", "/v2/health/live/x"}) {
    EXPECT_EQ(ParseRoute(url).kind, Route::kNone) << url;
  }
}

}  // namespace
}  // namespace metalserve
