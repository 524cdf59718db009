#include "server/model_config/repository_config.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/model_config/model_config.h"
#include "tests/testing/status_matchers.h"

namespace metalserve {
namespace {

using ::metalserve::testing::IsOk;
using ::metalserve::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kSignature[] = R"("inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 4]}],
    "outputs": [{"name": "y", "dtype": "float32", "shape": [-1, 4]}])";

// A config.json with the signature and `extra` keys ("" for none).
std::string Config(const std::string& extra) {
  return absl::StrCat("{", kSignature, extra.empty() ? "" : ", ", extra, "}");
}

TEST(RepositoryConfigTest, SignatureAloneGivesNoSettingsAndLatestOne) {
  auto config = ParseRepositoryModelConfig(Config(R"("name": "m")"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->signature.name, "m");
  EXPECT_EQ(config->signature.version, "");
  ASSERT_EQ(config->signature.inputs.size(), 1u);
  EXPECT_THAT(config->signature.inputs[0].shape, ElementsAre(-1, 4));
  EXPECT_TRUE(config->settings.empty());
  EXPECT_EQ(config->version_policy.kind, VersionPolicy::Kind::kLatest);
  EXPECT_EQ(config->version_policy.latest, 1);
}

TEST(RepositoryConfigTest, ReadsEverySetting) {
  auto config = ParseRepositoryModelConfig(Config(R"(
      "max_batch_size": 8, "max_queue_delay_us": 1500, "allowed_batch_sizes": [1, 4, 8],
      "max_queue_size": 64, "precision": "fp16", "channels_last": true,
      "optimize": "freeze", "device": "cuda:1", "latency_target_us": 50000,
      "default_priority": 2, "rows_per_slot": 16)"));
  ASSERT_TRUE(config.ok()) << config.status();
  const ModelSettings& s = config->settings;
  EXPECT_EQ(s.latency_target, absl::Milliseconds(50));
  EXPECT_EQ(s.default_priority, 2);
  EXPECT_EQ(s.rows_per_slot, 16);
  EXPECT_EQ(s.max_batch_size, 8);
  EXPECT_EQ(s.max_queue_delay, absl::Microseconds(1500));
  EXPECT_THAT(s.allowed_batch_sizes, ElementsAre(1, 4, 8));
  EXPECT_EQ(s.max_queue_size, 64);
  EXPECT_EQ(s.precision, "fp16");
  EXPECT_EQ(s.channels_last, true);
  EXPECT_EQ(s.optimize, "freeze");
  EXPECT_EQ(s.device, "cuda:1");
}

TEST(RepositoryConfigTest, ExplicitFalseAndZeroDelayAreSetNotAbsent) {
  auto config = ParseRepositoryModelConfig(
      Config(R"("channels_last": false, "max_queue_delay_us": 0)"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->settings.channels_last, false);
  EXPECT_EQ(config->settings.max_queue_delay, absl::ZeroDuration());
  EXPECT_FALSE(config->settings.empty());
}

TEST(RepositoryConfigTest, ReadsTritonVersionPolicies) {
  auto latest = ParseRepositoryModelConfig(
      Config(R"("version_policy": {"latest": {"num_versions": 2}})"));
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->version_policy.ToString(), "latest 2");
  auto all = ParseRepositoryModelConfig(Config(R"("version_policy": {"all": {}})"));
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->version_policy.kind, VersionPolicy::Kind::kAll);
  auto specific = ParseRepositoryModelConfig(
      Config(R"("version_policy": {"specific": {"versions": [3, 1]}})"));
  ASSERT_TRUE(specific.ok()) << specific.status();
  EXPECT_THAT(specific->version_policy.specific, ElementsAre(1, 3));
}

TEST(RepositoryConfigTest, PolicySelectsFromAvailableVersions) {
  const std::vector<int64_t> available = {1, 2, 5, 9};
  VersionPolicy latest;
  EXPECT_THAT(latest.Select(available), ElementsAre(9));
  latest.latest = 3;
  EXPECT_THAT(latest.Select(available), ElementsAre(2, 5, 9));
  latest.latest = 10;
  EXPECT_THAT(latest.Select(available), ElementsAre(1, 2, 5, 9));
  VersionPolicy all{.kind = VersionPolicy::Kind::kAll};
  EXPECT_THAT(all.Select(available), ElementsAre(1, 2, 5, 9));
  VersionPolicy specific{.kind = VersionPolicy::Kind::kSpecific, .specific = {2, 3, 9}};
  EXPECT_THAT(specific.Select(available), ElementsAre(2, 9));
  EXPECT_THAT(specific.MissingSpecific(available), ElementsAre(3));
  EXPECT_THAT(latest.Select({}), ::testing::IsEmpty());
}

TEST(RepositoryConfigTest, UnknownKeyIsAnErrorNamingTheKey) {
  EXPECT_THAT(ParseRepositoryModelConfig(Config(R"("max_batch": 8)")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("config JSON"), HasSubstr("max_batch"))));
  EXPECT_THAT(
      ParseRepositoryModelConfig(Config(R"("version_policy": {"latest": {"num": 2}})")),
      StatusIs(absl::StatusCode::kInvalidArgument, AllOf(HasSubstr("version_policy.latest"),
                                                         HasSubstr("num"))));
}

TEST(RepositoryConfigTest, WrongTypeIsAnErrorNamingTheKey) {
  EXPECT_THAT(ParseRepositoryModelConfig(Config(R"("max_batch_size": "eight")")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("max_batch_size"), HasSubstr("eight"))));
  EXPECT_THAT(ParseRepositoryModelConfig(Config(R"("precision": 16)")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("precision")));
}

// Protobuf's JSON mapping alone would take each of these.
TEST(RepositoryConfigTest, LenientJsonTypesAreErrorsNamingKeyAndValue) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("channels_last": "yes")", R"(channels_last: "yes" is a string; expected true or false)"},
      {R"("max_batch_size": "8")", R"(max_batch_size: "8" is a string; expected a number)"},
      {R"("max_queue_delay_us": "100")", "max_queue_delay_us: \"100\" is a string"},
      {R"("latency_target_us": "5000")", "latency_target_us: \"5000\" is a string"},
      {R"("default_priority": "1")", "default_priority: \"1\" is a string"},
      {R"("rows_per_slot": "32")", "rows_per_slot: \"32\" is a string; expected a number"},
      {R"("allowed_batch_sizes": 8)", "allowed_batch_sizes: 8 is a number; expected a list"},
      {R"("allowed_batch_sizes": [1, "2"])", "allowed_batch_sizes[1]: \"2\" is a string"},
      {R"("version_policy": {"latest": {"num_versions": "2"}})",
       "version_policy.latest.num_versions: \"2\" is a string"},
      {R"("version_policy": {"specific": {"versions": 1}})",
       "version_policy.specific.versions: 1 is a number; expected a list"},
      {R"("devices": "cuda")", "devices: \"cuda\" is a string; expected a list"},
      {R"("devices": ["cuda", 1])", "devices[1]"},
  };
  for (const auto& [extra, message] : cases) {
    EXPECT_THAT(ParseRepositoryModelConfig(Config(extra)),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(message)))
        << extra;
  }
}

TEST(RepositoryConfigTest, OutOfRangeSettingsAreErrorsNamingKeyAndValue) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("max_batch_size": 0)", "max_batch_size: 0 must be at least 1"},
      {R"("max_queue_delay_us": -5)", "max_queue_delay_us: -5"},
      {R"("max_queue_size": 0)", "max_queue_size: 0"},
      {R"("latency_target_us": -1)", "latency_target_us: -1"},
      {R"("default_priority": 0)", "default_priority: 0 must be at least 1"},
      {R"("rows_per_slot": -3)", "rows_per_slot: -3"},
      {R"("precision": "fp8")", "precision: 'fp8' is not one of fp32, fp16, bf16"},
      {R"("optimize": "max")", "optimize: 'max'"},
      {R"("device": "gpu")", "device: 'gpu'"},
      {R"("device": "cuda:x")", "device: 'cuda:x'"},
      {R"("devices": ["cuda"])", "devices: hybrid serving needs two or more devices, got 1"},
      {R"("devices": ["cuda", "cuda"])", "devices: 'cuda' is listed twice"},
      {R"("devices": ["cuda", "gpu"])", "device: 'gpu'"},
      {R"("devices": ["auto", "cpu"])", "devices: 'auto' chooses one device"},
      {R"("devices": ["cuda", "cpu"], "device": "cpu")", "device and devices: set one"},
      {R"("allowed_batch_sizes": [4, 2])", "allowed_batch_sizes[1]: 2"},
      {R"("allowed_batch_sizes": [0])", "allowed_batch_sizes[0]: 0"},
      {R"("allowed_batch_sizes": [1, 4], "max_batch_size": 8)",
       "the last size, 4, must equal max_batch_size 8"},
      {R"("version_policy": {"latest": {"num_versions": 0}})",
       "version_policy.latest.num_versions: 0"},
      {R"("version_policy": {"specific": {"versions": []}})", "must not be empty"},
      {R"("version_policy": {"specific": {"versions": [2, 2]}})", "2 is listed twice"},
      {R"("version_policy": {"specific": {"versions": [0]}})", "versions[0]: 0"},
  };
  for (const auto& [extra, message] : cases) {
    EXPECT_THAT(ParseRepositoryModelConfig(Config(extra)),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(message)))
        << extra;
  }
}

TEST(RepositoryConfigTest, DevicesServeTheModelOnEachInTheOrderGiven) {
  absl::StatusOr<RepositoryModelConfig> c =
      ParseRepositoryModelConfig(Config(R"("devices": ["cuda:1", "cpu"])"));
  ASSERT_THAT(c.status(), IsOk());
  EXPECT_EQ(c->settings.devices, (std::vector<std::string>{"cuda:1", "cpu"}));
  EXPECT_FALSE(c->settings.device.has_value());
  EXPECT_FALSE(c->settings.empty());
  EXPECT_THAT(ParseModelSignature(Config(R"("devices": ["cuda", "cpu"])")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'devices' is a model repository setting")));
}

TEST(RepositoryConfigTest, VersionKeyIsRefusedBecauseVersionsAreFolders) {
  EXPECT_THAT(ParseRepositoryModelConfig(Config(R"("version": "2")")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'version'"), HasSubstr("numbered folders"))));
}

TEST(RepositoryConfigTest, SignatureErrorsAreReportedAsForASidecar) {
  EXPECT_THAT(ParseRepositoryModelConfig(R"({"inputs": [{"name": "x", "dtype": "f32",
      "shape": [-1]}], "outputs": [{"name": "y", "dtype": "float32", "shape": [-1]}]})"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("config JSON: inputs[0].dtype"), HasSubstr("f32"))));
}

TEST(RepositoryConfigTest, SidecarRefusesRepositorySettingsNamingTheFlag) {
  EXPECT_THAT(ParseModelSignature(Config(R"("max_batch_size": 8)")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'max_batch_size' is a model repository setting"),
                             HasSubstr("--max_batch_size"))));
  EXPECT_THAT(ParseModelSignature(Config(R"("max_queue_delay_us": 8)")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--max_queue_delay")));
  EXPECT_THAT(ParseModelSignature(Config(R"("latency_target_us": 8000)")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--latency_target")));
  EXPECT_THAT(ParseModelSignature(Config(R"("default_priority": 1)")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--default_priority")));
  EXPECT_THAT(ParseModelSignature(Config(R"("rows_per_slot": 8)")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--rows_per_slot")));
  EXPECT_THAT(ParseModelSignature(Config(R"("version_policy": {"all": {}})")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'version_policy'")));
}

TEST(RepositoryConfigTest, MissingFileIsNotFoundNamingThePath) {
  EXPECT_THAT(ReadRepositoryModelConfig("/nonexistent/m/config.json"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/m/config.json")));
}

}  // namespace
}  // namespace metalserve
