// The scheduling policy's flags (--batching, --max_request_rows,
// --latency_target, priorities), read into BatcherOptions, and
// --device_scheduling, --accelerator_inline_max_cost and --accelerator_spin.
// Only main calls
// this; a value that does not parse logs the flag and the value and exits 2.
#ifndef METALSERVE_SERVER_SCHEDULING_FLAGS_H_
#define METALSERVE_SERVER_SCHEDULING_FLAGS_H_

#include "server/batcher/batch_queue.h"
#include "server/runtime/fair_queue.h"

namespace metalserve {

// Sets b's policy, trim_padded_batches, max_request_rows, latency_target and priority fields
// (levels, bounds, timeouts, share, isolation) and inline_max_cost.
void SchedulingFromFlags(BatcherOptions* b);
// --device_scheduling: the order across models sharing a device thread.
FairQueue::Order DeviceOrderFromFlags();
// --accelerator_inline_max_cost (ServerOptions::accelerator_inline_max_cost).
absl::Duration AcceleratorInlineMaxCostFromFlags();
// --accelerator_spin (RuntimeOptions::accelerator_spin); outside [0, 100ms]
// logs the value and exits 2.
absl::Duration AcceleratorSpinFromFlags();

// This file's path in the repository, for --help.
inline constexpr char kSchedulingFlagsFile[] = "server/scheduling_flags.cc";

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SCHEDULING_FLAGS_H_
