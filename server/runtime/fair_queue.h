// The order in which one device thread runs the work of several submitters:
// fair queueing on measured device time. A pure policy object: it reads no
// clock and starts no thread (DeviceThread measures each item and charges
// it here), so its tests inject costs directly.
//
// Keys. Each item is queued under a key: one per model version
// ("<model>:<version>", what its batches are submitted under), and
// kDeviceKey for device work that belongs to no one model's serving (loads,
// verification, warm-up, release, cache clearing; also every caller that
// names no key).
//
// Rule (start-time fair queueing, charged after the fact with the time the
// device actually spent, since a batch's cost is known only once it ran):
//   - every key k has a virtual time v_k, the device time its items used;
//     Charge(k, c) adds an item's measured duration c to v_k;
//   - Pop takes the head item of the backlogged key (one with queued items)
//     with the least v_k; ties go to the item queued first;
//   - V, the system virtual time, is v of the key at its last Pop (the least
//     v among backlogged keys then; it never decreases);
//   - a key that becomes backlogged starts at v_k = max(v_k, V): idle time
//     earns no credit, a returning key joins "now" instead of claiming the
//     device until it has caught up.
// So a model whose batches take 10x longer gets a batch a tenth as often
// while both are backlogged: each backlogged key gets an equal share of
// device TIME, not of batches.
//
// Bound. Let item x reach the head of key A's queue. Until x is popped,
// every other key B is given at most (v_A - V) + C_B of device time (this
// counts an item of B already running at that moment), where C_B is the
// largest cost of one B item; and v_A - V <= c_A, the cost of A's previous
// item (0 when A was idle and started at V). So x waits at most
//     sum over keys B != A of (c_A + C_B)
// of device time, however many items the other keys have queued. Two keys:
// a model with 1 ms batches waits behind at most 1 ms + one batch of a
// flooded model with 10 ms batches; under FIFO it waited behind every batch
// queued before it. Device work (a load's verification, a cache clearing)
// is a key like any other, so it is not starved either; but one item is
// never cut short, so a 5 s load delays everyone by up to 5 s.
//
// Other properties: work-conserving (Pop returns an item whenever any is
// queued); FIFO within a key; with all costs zero (or Order::kFifo) exactly
// the submission order across keys, the DeviceThread's old behaviour.
//
// Memory: a key's state is dropped once it has no queued item and
// v_k <= V (it would restart at V anyway), so keys of unloaded versions do
// not accumulate.
//
// Thread-safety: none; the owner (DeviceThread) serialises every call.
#ifndef METALSERVE_SERVER_RUNTIME_FAIR_QUEUE_H_
#define METALSERVE_SERVER_RUNTIME_FAIR_QUEUE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace metalserve {

class FairQueue {
 public:
  // Work that belongs to the device rather than to one model's serving.
  static constexpr absl::string_view kDeviceKey = "device";

  enum class Order {
    kFair,  // the rule above
    kFifo,  // submission order across keys (for comparison; the old order)
  };
  using Work = absl::AnyInvocable<void()>;
  struct Item {
    std::string key;
    Work work;
  };

  explicit FairQueue(Order order = Order::kFair) : order_(order) {}

  // Queues `work` behind the key's queued items.
  void Push(absl::string_view key, Work work);
  // The next item by the rule. Requires !empty().
  Item Pop();
  // Adds `cost` (>= 0; negative counts as zero) to the key's virtual time:
  // call after the popped item ran, before the next Pop.
  void Charge(absl::string_view key, absl::Duration cost);
  // Charges work of `key` that ran without being queued, while no key was
  // backlogged (DeviceThread::RunHereIfIdle): as Push then Charge would,
  // v_k = max(v_k, V) + cost.
  void ChargeJoining(absl::string_view key, absl::Duration cost);

  bool empty() const { return size_ == 0; }
  int64_t size() const { return size_; }
  // v_k (V for a key with no state), and V; for tests.
  absl::Duration virtual_time(absl::string_view key) const;
  absl::Duration system_virtual_time() const { return now_; }
  // Keys with state (queued items, or credit used beyond V).
  int64_t keys() const { return static_cast<int64_t>(keys_.size()); }
  static absl::string_view OrderName(Order order);

 private:
  struct Entry {
    uint64_t seq;
    Work work;
  };
  struct KeyState {
    absl::Duration v = absl::ZeroDuration();
    std::deque<Entry> queue;
  };
  using KeyMap = std::map<std::string, KeyState, std::less<>>;

  KeyMap::iterator Next();
  void DropIdleKeys();

  const Order order_;
  KeyMap keys_;
  absl::Duration now_ = absl::ZeroDuration();  // V
  uint64_t next_seq_ = 0;
  int64_t size_ = 0;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_RUNTIME_FAIR_QUEUE_H_
