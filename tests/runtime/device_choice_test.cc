// Device choice (server/runtime/device_choice.h) against fake platforms:
// no Mac or GPU here, so availability and the probe's verdict are injected.
#include "server/runtime/device_choice.h"

#include "server/runtime/cuda_sync.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace metalserve {
namespace {

using ::metalserve::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A machine that claims `available` devices; `failing` maps a device to its
// probe's failure; records which devices were probed.
class FakePlatform final : public DevicePlatform {
 public:
  FakePlatform(std::vector<std::string> available, std::map<std::string, std::string> failing)
      : available_(std::move(available)), failing_(std::move(failing)) {}
  bool Available(const std::string& device, std::string* why) const override {
    for (const std::string& d : available_) {
      if (d == device) return true;
    }
    *why = device + " is not available";
    return false;
  }
  absl::Status Probe(const std::string& device) const override {
    probed_.push_back(device);
    auto it = failing_.find(device);
    if (it == failing_.end()) return absl::OkStatus();
    return absl::InternalError(it->second);
  }
  mutable std::vector<std::string> probed_;

 private:
  std::vector<std::string> available_;
  std::map<std::string, std::string> failing_;
};

// Collects the WARNING lines glog writes while it is alive.
class WarningSink final : public google::LogSink {
 public:
  WarningSink() { google::AddLogSink(this); }
  ~WarningSink() override { google::RemoveLogSink(this); }
  void send(google::LogSeverity severity, const char*, const char*, int, const struct ::tm*,
            const char* message, size_t len) override {
    if (severity != google::GLOG_WARNING) return;
    absl::MutexLock l(&mu_);
    lines_.emplace_back(message, len);
  }
  std::vector<std::string> lines() {
    absl::MutexLock l(&mu_);
    return lines_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> lines_;
};

MATCHER_P(IsOkAndHolds, want, "") {
  if (!arg.ok()) {
    *result_listener << "status is " << arg.status();
    return false;
  }
  *result_listener << "value is " << *arg;
  return *arg == want;
}

constexpr char kVmFailure[] = "MPS backend out of memory (MPS allocated: 0 bytes)";

TEST(DeviceChoiceTest, AutoTakesTheFirstAcceleratorThatPassesItsProbe) {
  const FakePlatform platform({"mps", "cuda:0"}, {});
  EXPECT_THAT(ChooseDeviceName("auto", platform), IsOkAndHolds("mps"));
  EXPECT_THAT(ChooseDeviceName("first_available", platform), IsOkAndHolds("mps"));
}

TEST(DeviceChoiceTest, AutoSkipsAnAvailableDeviceThatFailsItsProbeWithOneLogLine) {
  const FakePlatform platform({"mps"}, {{"mps", kVmFailure}});
  WarningSink sink;
  EXPECT_THAT(ChooseDeviceName("auto", platform), IsOkAndHolds("cpu"));
  ASSERT_EQ(sink.lines().size(), 1u);
  EXPECT_THAT(sink.lines()[0], AllOf(HasSubstr("mps"), HasSubstr(kVmFailure)));
}

TEST(DeviceChoiceTest, AutoFallsToTheNextAcceleratorWhenTheFirstFailsItsProbe) {
  const FakePlatform platform({"mps", "cuda:0"}, {{"mps", "results differ"}});
  EXPECT_THAT(ChooseDeviceName("auto", platform), IsOkAndHolds("cuda:0"));
  EXPECT_THAT(WorkingAccelerators(platform), ElementsAre("cuda:0"));
}

// first_available keeps the fixed order, and reports what it passed over.
TEST(DeviceChoiceTest, FirstAvailableListsEachAcceleratorThatFailedItsProbeAsSkipped) {
  const FakePlatform vm({"mps"}, {{"mps", kVmFailure}});
  std::vector<std::string> skipped;
  EXPECT_THAT(ChooseDeviceName("first_available", vm, &skipped), IsOkAndHolds("cpu"));
  EXPECT_THAT(skipped, ElementsAre(std::string("mps: probe failed: ") + kVmFailure));

  const FakePlatform both({"mps", "cuda:0"}, {{"mps", "results differ"}});
  skipped.clear();
  EXPECT_THAT(ChooseDeviceName("first_available", both, &skipped), IsOkAndHolds("cuda:0"));
  EXPECT_THAT(skipped, ElementsAre("mps: probe failed: results differ"));

  const FakePlatform working({"mps", "cuda:0"}, {});
  skipped.clear();
  EXPECT_THAT(ChooseDeviceName("first_available", working, &skipped), IsOkAndHolds("mps"));
  EXPECT_THAT(skipped, IsEmpty());
}

TEST(DeviceChoiceTest, UnavailableDevicesAreNotProbedAndAutoIsCpu) {
  const FakePlatform platform({}, {});
  EXPECT_THAT(ChooseDeviceName("auto", platform), IsOkAndHolds("cpu"));
  EXPECT_THAT(platform.probed_, IsEmpty());
}

TEST(DeviceChoiceTest, ExplicitDeviceThatFailsItsProbeIsFailedPreconditionWithTheFailure) {
  const FakePlatform platform({"mps", "cuda:0"}, {{"mps", kVmFailure}});
  EXPECT_THAT(ChooseDeviceName("mps", platform),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("'mps'"), HasSubstr("fails its probe"),
                             HasSubstr(kVmFailure))));
}

TEST(DeviceChoiceTest, ExplicitDeviceIsNeverReplaced) {
  const FakePlatform platform({"mps", "cuda:0"}, {});
  EXPECT_THAT(ChooseDeviceName("cuda", platform), IsOkAndHolds("cuda:0"));
  EXPECT_THAT(ChooseDeviceName("cpu", platform), IsOkAndHolds("cpu"));
  EXPECT_THAT(ChooseDeviceName("cuda:1", platform),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("cuda:1 is not available")));
}

TEST(DeviceChoiceTest, CpuIsTheReferenceAndIsNotProbed) {
  const FakePlatform platform({"mps"}, {{"cpu", "never asked"}});
  EXPECT_THAT(ChooseDeviceName("cpu", platform), IsOkAndHolds("cpu"));
  EXPECT_THAT(platform.probed_, IsEmpty());
}

TEST(DeviceChoiceTest, UnknownNamesAndBadIndexesAreInvalidArgument) {
  const FakePlatform platform({}, {});
  EXPECT_THAT(ChooseDeviceName("tpu", platform),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'tpu'")));
  EXPECT_THAT(ChooseDeviceName("cuda:x", platform),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bad CUDA index")));
}

// --- auto by measurement -----------------------------------------------------

DeviceTiming Timed(const std::string& device, std::map<int64_t, double> ms) {
  DeviceTiming t;
  t.device = device;
  for (const auto& [b, v] : ms) t.forward[b] = absl::Microseconds(v * 1000);
  return t;
}

DeviceTiming Failed(const std::string& device, const std::string& why) {
  DeviceTiming t;
  t.device = device;
  t.status = absl::InternalError(why);
  return t;
}

TEST(PickFastestTest, PicksTheLeastTotalOverTheSizesTheModelWillSee) {
  // The write-up's small model: the CPU wins at batch 1, MPS at 32.
  const std::vector<DeviceTiming> t = {Timed("mps", {{1, 4.0}, {32, 10.0}}),
                                       Timed("cpu", {{1, 1.0}, {32, 40.0}})};
  EXPECT_THAT(PickFastest(t, {1, 32}), IsOkAndHolds("mps"));
  EXPECT_THAT(PickFastest(t, {1}), IsOkAndHolds("cpu"));
  EXPECT_THAT(PickFastest(t, {32}), IsOkAndHolds("mps"));
}

TEST(PickFastestTest, CpuWinsWhenFasterAtEverySize) {
  const std::vector<DeviceTiming> t = {Timed("cuda:0", {{1, 2.0}, {4, 2.5}}),
                                       Timed("cpu", {{1, 0.5}, {4, 1.5}})};
  EXPECT_THAT(PickFastest(t, {1, 4}), IsOkAndHolds("cpu"));
}

TEST(PickFastestTest, ATieGoesToTheEarlierDevice) {
  const std::vector<DeviceTiming> t = {Timed("mps", {{1, 2.0}, {8, 3.0}}),
                                       Timed("cpu", {{1, 3.0}, {8, 2.0}})};
  EXPECT_THAT(PickFastest(t, {1, 8}), IsOkAndHolds("mps"));
}

TEST(PickFastestTest, ADeviceThatFailedToLoadIsNotChosen) {
  const std::vector<DeviceTiming> t = {Failed("mps", "op not implemented for MPS"),
                                       Timed("cpu", {{1, 9.0}})};
  EXPECT_THAT(PickFastest(t, {1}), IsOkAndHolds("cpu"));
  EXPECT_THAT(PickFastest({Failed("cpu", "bad model")}, {1}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("cpu: bad model")));
}

TEST(PickFastestTest, ADeviceMissingASizeIsNotChosen) {
  const std::vector<DeviceTiming> t = {Timed("mps", {{1, 0.1}}), Timed("cpu", {{1, 1.0}, {4, 1.0}})};
  EXPECT_THAT(PickFastest(t, {1, 4}), IsOkAndHolds("cpu"));
}

TEST(ChooseByMeasurementTest, ADeviceThatFailsItsProbeIsNeverMeasured) {
  const FakePlatform platform({"mps", "cuda:0"}, {{"mps", kVmFailure}});
  std::vector<std::string> measured;
  const auto choice = ChooseByMeasurement(WorkingAccelerators(platform), {1, 4}, [&](const std::string& d) {
    measured.push_back(d);
    return d == "cuda:0" ? Timed(d, {{1, 5.0}, {4, 5.0}}) : Timed(d, {{1, 1.0}, {4, 2.0}});
  });
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_THAT(measured, ElementsAre("cuda:0", "cpu"));
  EXPECT_EQ(choice->device, "cpu");
}

TEST(ChooseByMeasurementTest, AFasterAcceleratorIsChosenAndAFailedLoadIsSkipped) {
  const FakePlatform platform({"mps", "cuda:0"}, {});
  const auto choice = ChooseByMeasurement(WorkingAccelerators(platform), {1, 32}, [&](const std::string& d) {
    if (d == "mps") return Failed(d, "out of memory");
    return d == "cuda:0" ? Timed(d, {{1, 1.0}, {32, 2.0}}) : Timed(d, {{1, 0.5}, {32, 30.0}});
  });
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->device, "cuda:0");
  ASSERT_EQ(choice->timings.size(), 3u);
  EXPECT_FALSE(choice->timings[0].status.ok());
}

TEST(ChooseByMeasurementTest, TableNamesEveryDeviceSizeAndFailure) {
  const std::string table = TimingTable(
      {Timed("cpu", {{1, 1.5}, {4, 2.25}}), Failed("mps", "out of memory")}, {1, 4});
  EXPECT_THAT(table, AllOf(HasSubstr("b1 ms"), HasSubstr("b4 ms"), HasSubstr("1.500"),
                           HasSubstr("2.250"), HasSubstr("3.750"),
                           HasSubstr("mps      failed: out of memory")));
}

TEST(DescribeMeasuredChoiceTest, TheMeasuredTableReachesModelInfoWithSkippedDevices) {
  const FakePlatform platform({"mps", "cuda:0"}, {{"mps", kVmFailure}});
  std::vector<std::string> probe_skipped;
  const std::vector<std::string> working = WorkingAccelerators(platform, &probe_skipped);
  const auto choice = ChooseByMeasurement(working, {1, 8}, [&](const std::string& d) {
    return d == "cuda:0" ? Timed(d, {{1, 3.0}, {8, 4.0}}) : Timed(d, {{1, 0.5}, {8, 5.0}});
  });
  ASSERT_TRUE(choice.ok()) << choice.status();
  const DeviceChoiceInfo info = DescribeMeasuredChoice(*choice, probe_skipped);
  EXPECT_EQ(info.requested, "auto");
  EXPECT_EQ(info.reason, "measured");
  auto row = [](const std::string& d, int64_t b, double ms) {
    return AllOf(::testing::Field(&DeviceChoiceInfo::Timing::device, d),
                 ::testing::Field(&DeviceChoiceInfo::Timing::batch_size, b),
                 ::testing::Field(&DeviceChoiceInfo::Timing::forward,
                                  absl::Microseconds(ms * 1000)));
  };
  EXPECT_THAT(info.timings, ElementsAre(row("cuda:0", 1, 3.0), row("cuda:0", 8, 4.0),
                                        row("cpu", 1, 0.5), row("cpu", 8, 5.0)));
  EXPECT_THAT(info.skipped, ElementsAre(std::string("mps: probe failed: ") + kVmFailure));
}

TEST(DescribeMeasuredChoiceTest, CpuAloneIsNoAcceleratorAndAFailedLoadIsSkipped) {
  const FakePlatform none({}, {});
  const auto cpu_only = ChooseByMeasurement(WorkingAccelerators(none), {2}, [](const std::string& d) {
    return Timed(d, {{2, 1.25}});
  });
  ASSERT_TRUE(cpu_only.ok()) << cpu_only.status();
  const DeviceChoiceInfo info = DescribeMeasuredChoice(*cpu_only, {});
  EXPECT_EQ(info.reason, "no_accelerator");
  ASSERT_EQ(info.timings.size(), 1u);
  EXPECT_EQ(info.timings[0].device, "cpu");
  EXPECT_THAT(info.skipped, IsEmpty());

  MeasuredChoice failed_mps{"cpu", {Failed("mps", "out of memory"), Timed("cpu", {{1, 1.0}})}};
  EXPECT_THAT(DescribeMeasuredChoice(failed_mps, {}).skipped,
              ElementsAre("mps: out of memory"));
}

TEST(CudaSyncTest, ParsesEachScheduleAndNamesABadValueWithTheChoices) {
  for (const CudaSync mode : {CudaSync::kAuto, CudaSync::kSpin, CudaSync::kYield, CudaSync::kBlock}) {
    const absl::StatusOr<CudaSync> parsed = ParseCudaSync(CudaSyncName(mode));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, mode) << CudaSyncName(mode);
  }
  EXPECT_EQ(CudaSyncName(CudaSync::kBlock), "block");
  EXPECT_THAT(ParseCudaSync("blocking"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("cuda_sync 'blocking'"),
                             HasSubstr("auto, spin, yield, block"))));
}

TEST(CudaSyncTest, TheProcessModeStartsAutoAndKeepsWhatWasSet) {
  EXPECT_EQ(CurrentCudaSync(), CudaSync::kAuto);
  SetCudaSync(CudaSync::kBlock);
  EXPECT_EQ(CurrentCudaSync(), CudaSync::kBlock);
  SetCudaSync(CudaSync::kAuto);
  EXPECT_EQ(CurrentCudaSync(), CudaSync::kAuto);
}

}  // namespace
}  // namespace metalserve
