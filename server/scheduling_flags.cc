// The scheduling policy's flags, defined here to keep main.cc short; main
// lists them in --help beside its own (ConfigureFlagsHelp's extra files).
#include "server/scheduling_flags.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "glog/logging.h"
#include "server/flag_lists.h"

ABSL_FLAG(std::string, batching, "adaptive",
          "Batch closing policy: adaptive (close a partial batch as soon as waiting is "
          "not expected to pay, from the measured arrival rate and batch cost; "
          "--max_queue_delay bounds the wait) or fixed (wait --max_queue_delay in full)");
ABSL_FLAG(bool, trim_padded_batches, true,
          "With --batching=adaptive and --allowed_batch_sizes: cut a batch back to a smaller "
          "allowed size, leaving its newest requests for the next batch, when padding it "
          "would cost more measured device time per row (server/batcher/batch_queue.h)");
ABSL_FLAG(absl::Duration, latency_target, absl::ZeroDuration(),
          "End-to-end latency target (e.g. 20ms); 0 = none. Batches are sized and closed to "
          "meet it and a request estimated to finish after it (or its deadline) is refused "
          "at once with DEADLINE_EXCEEDED; below the measured batch-1 cost: start-up error");
ABSL_FLAG(int, priority_levels, 1,
          "Priority levels a request may ask for, 1 = highest (native field priority, "
          "KServe parameters[\"priority\"]); out of range: INVALID_ARGUMENT");
ABSL_FLAG(int, default_priority, 0,
          "Level of a request that asks for none; 0 = the lowest (--priority_levels)");
ABSL_FLAG(std::vector<std::string>, priority_queue_rows, {},
          "Per level (first = level 1), most rows of that level waiting; 0 or missing = "
          "only --max_queue_size bounds it (e.g. 64,0,0)");
ABSL_FLAG(std::vector<std::string>, priority_timeout, {},
          "Per level (first = level 1), how long a request of that level without an earlier "
          "deadline may wait (e.g. 50ms,1s); 0 or missing = no limit");
ABSL_FLAG(int, priority_share_every, 4,
          "Starvation bound: while lower priorities wait they head at least one batch in "
          "every N (>= 2)");
ABSL_FLAG(absl::Duration, priority_lower_batch_cost, absl::ZeroDuration(),
          "Priority isolation (e.g. 5ms); 0 = off. While a higher level is active "
          "(--priority_active_window), a batch headed by a lower level is capped at the "
          "largest allowed batch size whose measured device time is <= this, so a "
          "higher-level request waits behind about this much lower-level work per batch");
ABSL_FLAG(double, priority_fill_cost_ratio, 0,
          "Priority isolation (e.g. 1.5); 0 = off, else >= 1. Lower-level rows fill a "
          "batch headed by a higher level only while its estimated cost stays <= this "
          "many times the cost of the higher level's rows alone");
ABSL_FLAG(absl::Duration, priority_active_window, absl::Seconds(1),
          "A level counts as active for --priority_lower_batch_cost this long after one "
          "of its requests was admitted (> 0)");
ABSL_FLAG(int64_t, max_request_rows, 0,
          "Most rows one request may have; one of more than --max_batch_size rows is "
          "split into batches and reassembled. 0 = --max_queue_size");
ABSL_FLAG(absl::Duration, inline_max_cost, absl::Microseconds(100),
          "An unbatched model's call (--max_batch_size=1), or a batched model's lone "
          "one-row call that --batching=adaptive sends at once (nothing else expected soon), "
          "runs on the gRPC thread that received it, without the hand-off to the batcher's "
          "executor, when nothing of the model is queued or running, its device is idle, and "
          "a call's measured cost (device time or executor occupancy, the larger; needs "
          "--batching=adaptive) is at most this; 0 = never. Longer work stays off gRPC's "
          "threads (server/batcher/batcher.h)");
ABSL_FLAG(absl::Duration, accelerator_inline_max_cost, absl::Milliseconds(-1),
          "--inline_max_cost for a model on an accelerator (CUDA, MPS): its forward runs on "
          "the device's thread while the gRPC thread that received the call only waits, so a "
          "call as long as a forward may skip the hand-off to an executor, e.g. 10ms "
          "(docs/performance.md); 0 = never on an accelerator; negative (default) = "
          "--inline_max_cost on every device. A hybrid model with a CPU leg gets the "
          "smaller of the two; otherwise, with several executors, a call run inline takes "
          "none of the calls that arrive meanwhile (they go to executors)");
ABSL_FLAG(absl::Duration, accelerator_spin, absl::Milliseconds(1),
          "How long an accelerator's (CUDA, MPS) device thread polls for its next work "
          "after any (batches, loads, warm-up), and a caller whose batch went to an idle "
          "device polls for its end, before each sleeps: saves a thread wake-up each way at "
          "light load, for the caller's core around each batch's expected end (half this much "
          "either side) and up to this much of the device thread's after it while calls come "
          "within this much of each other (on an H100, ResNet-50 at one client: p50 0.54-0.64 ms "
          "lower in three rounds, for 0.5-1.1 ms more CPU per request); 0 = sleep at once; "
          "at most 100ms; off on a host of fewer than 4 usable cores "
          "(server/runtime/device_thread.h, docs/performance.md)");
ABSL_FLAG(std::string, device_scheduling, "fair",
          "Order of the batches of several models on one device thread: fair (each "
          "backlogged model version gets an equal share of measured device time; a model's "
          "batch waits behind about one batch of each other model, server/runtime/fair_queue.h) "
          "or fifo (submission order, for comparison)");

namespace metalserve {

FairQueue::Order DeviceOrderFromFlags() {
  const std::string o = absl::GetFlag(FLAGS_device_scheduling);
  if (o == "fair") return FairQueue::Order::kFair;
  if (o == "fifo") return FairQueue::Order::kFifo;
  LOG(ERROR) << "flags: --device_scheduling must be fair or fifo, got '" << o << "'";
  std::exit(2);
}

absl::Duration AcceleratorInlineMaxCostFromFlags() {
  return absl::GetFlag(FLAGS_accelerator_inline_max_cost);
}

absl::Duration AcceleratorSpinFromFlags() {
  const absl::Duration spin = absl::GetFlag(FLAGS_accelerator_spin);
  if (spin < absl::ZeroDuration() || spin > absl::Milliseconds(100)) {
    LOG(ERROR) << "flags: --accelerator_spin=" << absl::FormatDuration(spin)
               << " must be in [0, 100ms]";
    std::exit(2);
  }
  return spin;
}

void SchedulingFromFlags(BatcherOptions* b) {
  if (const std::string p = absl::GetFlag(FLAGS_batching); p == "adaptive" || p == "fixed") {
    b->policy = p == "adaptive" ? BatchingPolicy::kAdaptive : BatchingPolicy::kFixed;
  } else {
    LOG(ERROR) << "flags: --batching must be adaptive or fixed, got '" << p << "'";
    std::exit(2);
  }
  b->trim_padded_batches = absl::GetFlag(FLAGS_trim_padded_batches);
  b->max_request_rows = absl::GetFlag(FLAGS_max_request_rows);
  b->latency_target = absl::GetFlag(FLAGS_latency_target);
  b->priority_levels = absl::GetFlag(FLAGS_priority_levels);
  b->default_priority = absl::GetFlag(FLAGS_default_priority);
  b->priority_queue_rows =
      ParseSizes(absl::GetFlag(FLAGS_priority_queue_rows), "--priority_queue_rows");
  b->priority_timeouts =
      ParseDurations(absl::GetFlag(FLAGS_priority_timeout), "--priority_timeout");
  b->lower_priority_share_every = absl::GetFlag(FLAGS_priority_share_every);
  b->priority_lower_batch_cost = absl::GetFlag(FLAGS_priority_lower_batch_cost);
  b->priority_fill_cost_ratio = absl::GetFlag(FLAGS_priority_fill_cost_ratio);
  b->priority_active_window = absl::GetFlag(FLAGS_priority_active_window);
  b->inline_max_cost = absl::GetFlag(FLAGS_inline_max_cost);
}

}  // namespace metalserve
