// TorchRunner::WarmUp: the warm-up forwards of each warm-up batch size and
// the figures they leave (ModelInfo::warmup_timings, the intra-op threads per
// size on the CPU). The last load phase (torch_runner_load.cc); every forward
// goes through the forward path that serves (forward_path.h). See
// torch_runner.h.
#include <algorithm>
#include <cstdint>
#include <vector>

#include <torch/script.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "glog/logging.h"
#include "common/status_macros.h"
#include "server/runtime/intra_op_threads.h"
#include "server/runtime/torch_runner_internal.h"

namespace metalserve::torch_internal {

// Warm-up: one forward untimed, because TorchScript's profiling executor
// optimizes the graph on the runs after the first, then timed ones. On the
// CPU the optimized plan serves every size (no fusion groups, so no shape
// guards) and a long forward at a later size is already steady the first
// time: resnet18 at batch 32 on 2 threads, after batch 1, 884-915 ms first
// against 841-897 ms second (2-5 % apart, 2026-12-05). So there only the
// first size has untimed forwards, which took resnet18's cached start on a
// 2-core CPU from 2.88-3.10 s to 2.06-2.18 s (docs/operations.md). A short
// one is not: a new shape's set-up (oneDNN's primitives) made tiny_cnn's
// first forward at batch 32 0.33 ms against 0.12-0.14 after it, so a later
// size's first forward under kWarmUpSettledForward is followed by one more and
// the least counts (where three are timed, to compare thread counts, their
// least already does). With one timed forward the first size has two untimed:
// on a start whose verification was cached the module has not run yet, and
// the second run is the one that optimizes (tiny_cnn at batch 1: 1.03-1.10
// ms, against 0.07-0.09 ms after it; its figure was that 1 ms). On an
// accelerator every size keeps it, and the figure is the least of three
// timed forwards: the second forward there still pays the optimized graph's
// first run at that shape (fusion compiles, kernel selection), which made
// mobilenet_v3_small's batch-1 figure on the H200 look slower than the
// CPU's. On the CPU with several intra-op threads, sizes are compared on one
// thread and on all of them until all of them win (intra_op_threads.h). The
// hybrid picker (hybrid_runner.h) and the adaptive batcher's cost curve
// start from these figures. An AOTInductor package (aoti_runner.cc) shares
// this: compiled ahead, it has run every size in its verification already.
absl::Status TorchRunner::WarmUp(const std::vector<int64_t>& batch_sizes) {
  const bool cpu = device_->device().is_cpu();
  const int n = cpu ? CurrentIntraOpThreads() : 0;
  LOG(INFO) << "runtime: warming up batch sizes [" << absl::StrJoin(batch_sizes, ",") << "]"
            << (n > 1 ? absl::StrCat(", each on 1 and ", n, " intra-op threads until ", n,
                                     " win")
                      : "");
  std::vector<int64_t> sizes = batch_sizes;
  std::stable_sort(sizes.begin(), sizes.end());
  bool parallel_won = false;
  for (int64_t b : sizes) {
    const absl::Time start = clock_->TimeNow();
    const bool compare = n > 1 && !parallel_won;
    const int timed = compare || !cpu ? 3 : 1;
    // On the CPU: two untimed at the first size when only one is timed (the
    // profiling run, then the one that optimizes the plan), none at a later
    // one, whose first forward counts unless it is short (kWarmUpSettledForward).
    const int untimed = !cpu ? 1 : b != sizes.front() ? 0 : timed == 1 ? 2 : 1;
    ASSIGN_OR_RETURN(const absl::Duration at_n,
                     TimeWarmUpForwards(b, untimed, timed,
                                        untimed == 0 && timed == 1 ? kWarmUpSettledForward
                                                                   : absl::ZeroDuration()));
    WarmupTiming timing{b, at_n, n};
    if (compare) {
      // Untimed first: setting the thread count clears oneDNN's cache.
      SetIntraOpThreads(1);
      const absl::StatusOr<absl::Duration> at_one =
          TimeWarmUpForwards(b, 1, 3, absl::ZeroDuration());
      SetIntraOpThreads(n);
      RETURN_IF_ERROR(at_one.status());
      timing.intra_op_threads = ChooseIntraOpThreads(*at_one, at_n, n);
      parallel_won = timing.intra_op_threads > 1;
      if (!parallel_won) timing.forward = *at_one;
      LOG(INFO) << "runtime: batch size " << b << " serves on " << timing.intra_op_threads
                << " intra-op thread(s): forward " << absl::FormatDuration(*at_one)
                << " on 1, " << absl::FormatDuration(at_n) << " on " << n;
    }
    info_.warmup_timings.push_back(timing);
    LOG(INFO) << "runtime: warmed up batch size " << b << " in " << ElapsedMs(clock_, start)
              << " ms (forward " << absl::FormatDuration(timing.forward) << ")";
  }
  // A one-row batch may run on its executor only for a model served on one
  // intra-op thread at every size: at::set_num_threads on an executor also
  // sets LibTorch's process-wide count (pthreadpool kernels), so a model with
  // a parallel size would have its device-thread batches set it back at every
  // turn (SetIntraOpThreads), each time a new pthreadpool and oneDNN's cache
  // cleared.
  cpu_forward_on_caller_ =
      cpu_forward_on_caller_ && cpu &&
      std::all_of(info_.warmup_timings.begin(), info_.warmup_timings.end(),
                  [](const WarmupTiming& w) { return w.intra_op_threads <= 1; });
  return absl::OkStatus();
}

absl::StatusOr<absl::Duration> TorchRunner::TimeWarmUpForwards(int64_t batch, int untimed,
                                                                 int timed,
                                                                 absl::Duration settled) {
  absl::Duration least = absl::InfiniteDuration();
  const std::vector<at::Tensor> probe = ProbeInputs(*path_, batch, 7);
  for (int i = 0; i < untimed + timed || (i == untimed + timed && least < settled); ++i) {
    const absl::Time forward_start = clock_->TimeNow();
    const auto out = ForwardModel(probe, ForwardPurpose::kWarmUp);
    if (!out.ok()) {
      return absl::Status(out.status().code(), absl::StrCat("warm-up at batch ", batch, ": ",
                                                            out.status().message()));
    }
    if (i >= untimed) least = std::min(least, clock_->TimeNow() - forward_start);
  }
  return least;
}

}  // namespace metalserve::torch_internal
