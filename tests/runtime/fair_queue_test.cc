// FairQueue, the device thread's order across keys, driven as a simulated
// device: each Pop runs its item, which "takes" an injected cost per key;
// simulated device time is the sum of the costs. No clock, no threads.
#include "server/runtime/fair_queue.h"

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace metalserve {
namespace {

using ::testing::ElementsAre;

constexpr absl::string_view kLight = "identity:1";
constexpr absl::string_view kHeavy = "tiny_cnn:1";
constexpr absl::string_view kOther = "mobilenet:1";

// A simulated device: runs items one at a time, each costing its key's cost.
class SimDevice {
 public:
  explicit SimDevice(FairQueue::Order order = FairQueue::Order::kFair) : q_(order) {}

  void SetCost(absl::string_view key, absl::Duration cost) { cost_[std::string(key)] = cost; }
  // Queues an item under `key` labelled `label`; `queued_at` is recorded.
  void Push(absl::string_view key, std::string label = "") {
    const int id = next_id_++;
    queued_at_[id] = now_;
    q_.Push(key, [this, id, label = std::move(label)] {
      ran_.push_back(label);
      last_id_ = id;
    });
  }
  // Runs the next item; returns its key. Records how long it waited.
  std::string RunOne() {
    FairQueue::Item item = q_.Pop();
    std::move(item.work)();
    waited_[last_id_] = now_ - queued_at_[last_id_];
    last_waited_ = waited_[last_id_];
    const absl::Duration c = cost_[item.key];
    now_ += c;
    used_[item.key] += c;
    q_.Charge(item.key, c);
    return item.key;
  }

  FairQueue& queue() { return q_; }
  absl::Duration now() const { return now_; }
  absl::Duration used(absl::string_view key) { return used_[std::string(key)]; }
  absl::Duration last_waited() const { return last_waited_; }
  const std::vector<std::string>& ran() const { return ran_; }

 private:
  FairQueue q_;
  std::map<std::string, absl::Duration> cost_;
  std::map<std::string, absl::Duration> used_;
  std::map<int, absl::Duration> queued_at_;
  std::map<int, absl::Duration> waited_;
  std::vector<std::string> ran_;
  absl::Duration now_;
  absl::Duration last_waited_;
  int next_id_ = 0;
  int last_id_ = -1;
};

// The light model sends one request at a time (closed loop) while the heavy
// one keeps 50 batches queued. Its wait is the header's bound: its own
// previous batch plus one heavy batch, c_A + C_B, whatever the backlog.
absl::Duration WorstLightWait(FairQueue::Order order) {
  SimDevice dev(order);
  dev.SetCost(kLight, absl::Milliseconds(1));
  dev.SetCost(kHeavy, absl::Milliseconds(10));
  for (int i = 0; i < 50; ++i) dev.Push(kHeavy);
  dev.Push(kLight);
  absl::Duration worst;
  for (int step = 0; step < 2000; ++step) {
    const std::string key = dev.RunOne();
    if (key == kLight) {
      worst = std::max(worst, dev.last_waited());
      dev.Push(kLight);
    } else {
      dev.Push(kHeavy);  // keep the flood at 50 queued
    }
  }
  return worst;
}

TEST(FairQueueTest, FloodedKeyDoesNotStarveAnotherBeyondTheStatedBound) {
  // c_A + C_B = 1 ms + 10 ms.
  EXPECT_LE(WorstLightWait(FairQueue::Order::kFair), absl::Milliseconds(11));
  // FIFO, for contrast: behind all 50 queued heavy batches.
  EXPECT_GE(WorstLightWait(FairQueue::Order::kFifo), absl::Milliseconds(500));
}

TEST(FairQueueTest, BoundHoldsWithThreeKeysAndAKeyJoiningLate) {
  SimDevice dev;
  dev.SetCost(kLight, absl::Milliseconds(2));
  dev.SetCost(kHeavy, absl::Milliseconds(10));
  dev.SetCost(kOther, absl::Milliseconds(30));
  for (int i = 0; i < 20; ++i) {
    dev.Push(kHeavy);
    dev.Push(kOther);
  }
  // The light key joins late (at V: no credit for the time it was absent).
  for (int i = 0; i < 30; ++i) {
    const std::string key = dev.RunOne();
    dev.Push(key);
  }
  dev.Push(kLight);
  while (dev.RunOne() != kLight) {
  }
  // sum over B != A of (c_A + C_B), c_A = 0 (it joined at V): 10 + 30 ms.
  EXPECT_LE(dev.last_waited(), absl::Milliseconds(40));
}

TEST(FairQueueTest, EqualDemandGetsEqualDeviceTimeNotEqualBatches) {
  SimDevice dev;
  dev.SetCost(kLight, absl::Milliseconds(1));
  dev.SetCost(kHeavy, absl::Milliseconds(10));
  for (int i = 0; i < 5; ++i) {
    dev.Push(kLight);
    dev.Push(kHeavy);
  }
  while (dev.now() < absl::Seconds(10)) {
    dev.Push(dev.RunOne());  // both stay backlogged
  }
  const absl::Duration light = dev.used(kLight), heavy = dev.used(kHeavy);
  // Equal shares, within one item of the larger cost.
  EXPECT_LE(light - heavy, absl::Milliseconds(10));
  EXPECT_LE(heavy - light, absl::Milliseconds(10));
  EXPECT_GE(light, absl::Milliseconds(4990));
}

TEST(FairQueueTest, KeyAloneGetsTheWholeDevice) {
  SimDevice dev;
  dev.SetCost(kHeavy, absl::Milliseconds(10));
  dev.SetCost(kLight, absl::Milliseconds(1));
  // Another key used the device a lot, then left.
  for (int i = 0; i < 100; ++i) dev.Push(kLight);
  for (int i = 0; i < 100; ++i) dev.RunOne();
  for (int i = 0; i < 100; ++i) dev.Push(kHeavy);
  for (int i = 0; i < 100; ++i) {
    ASSERT_FALSE(dev.queue().empty());  // work-conserving: never idles
    EXPECT_EQ(dev.RunOne(), kHeavy);
  }
  EXPECT_TRUE(dev.queue().empty());
  EXPECT_EQ(dev.used(kHeavy), absl::Seconds(1));
}

TEST(FairQueueTest, IdleTimeEarnsNoCredit) {
  SimDevice dev;
  dev.SetCost(kHeavy, absl::Milliseconds(10));
  dev.SetCost(kLight, absl::Milliseconds(10));
  // The heavy key runs alone for 1 s while the light one is idle.
  for (int i = 0; i < 100; ++i) dev.Push(kHeavy);
  for (int i = 0; i < 90; ++i) dev.RunOne();
  // Then the light one floods: it must not take the device for the 0.9 s the
  // heavy one was ahead; they alternate.
  for (int i = 0; i < 10; ++i) dev.Push(kLight, "light");
  std::vector<std::string> next;
  for (int i = 0; i < 6; ++i) next.push_back(dev.RunOne());
  EXPECT_THAT(next, ElementsAre(kLight, kHeavy, kLight, kHeavy, kLight, kHeavy));
}

TEST(FairQueueTest, ItemsOfOneKeyRunInSubmissionOrder) {
  SimDevice dev;
  dev.SetCost(kLight, absl::Milliseconds(1));
  dev.SetCost(kHeavy, absl::Milliseconds(7));
  for (int i = 0; i < 5; ++i) {
    dev.Push(kLight, "l" + std::to_string(i));
    dev.Push(kHeavy, "h" + std::to_string(i));
  }
  while (!dev.queue().empty()) dev.RunOne();
  std::vector<std::string> light, heavy;
  for (const std::string& r : dev.ran()) (r[0] == 'l' ? light : heavy).push_back(r);
  EXPECT_THAT(light, ElementsAre("l0", "l1", "l2", "l3", "l4"));
  EXPECT_THAT(heavy, ElementsAre("h0", "h1", "h2", "h3", "h4"));
}

TEST(FairQueueTest, DeviceWorkIsNotStarvedByTwoFloodedModels) {
  SimDevice dev;
  dev.SetCost(kLight, absl::Milliseconds(5));
  dev.SetCost(kHeavy, absl::Milliseconds(20));
  dev.SetCost(FairQueue::kDeviceKey, absl::Milliseconds(1));
  for (int i = 0; i < 40; ++i) {
    dev.Push(kLight);
    dev.Push(kHeavy);
  }
  for (int i = 0; i < 25; ++i) dev.Push(dev.RunOne());
  dev.Push(FairQueue::kDeviceKey, "clear cache");
  while (dev.RunOne() != FairQueue::kDeviceKey) {
  }
  // Joined at V: at most one item of each model, 5 + 20 ms.
  EXPECT_LE(dev.last_waited(), absl::Milliseconds(25));
}

TEST(FairQueueTest, ZeroCostsAndFifoOrderKeepSubmissionOrderAcrossKeys) {
  for (FairQueue::Order order : {FairQueue::Order::kFair, FairQueue::Order::kFifo}) {
    SimDevice dev(order);  // no costs set: zero
    dev.Push(kHeavy, "1");
    dev.Push(kHeavy, "2");
    dev.Push(kLight, "3");
    dev.Push(FairQueue::kDeviceKey, "4");
    dev.Push(kHeavy, "5");
    while (!dev.queue().empty()) dev.RunOne();
    EXPECT_THAT(dev.ran(), ElementsAre("1", "2", "3", "4", "5"))
        << FairQueue::OrderName(order);
  }
}

TEST(FairQueueTest, KeysOfIdleVersionsAreDropped) {
  SimDevice dev;
  dev.SetCost(kHeavy, absl::Milliseconds(10));
  for (int v = 0; v < 100; ++v) {
    dev.SetCost("m:" + std::to_string(v), absl::Milliseconds(1));
    dev.Push("m:" + std::to_string(v));
    dev.RunOne();
    dev.Push(kHeavy);
    dev.RunOne();
  }
  // Only keys still ahead of V (at most the last ones charged) keep state.
  EXPECT_LE(dev.queue().keys(), 2);
}

}  // namespace
}  // namespace metalserve
