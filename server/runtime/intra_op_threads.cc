#include "server/runtime/intra_op_threads.h"

#include <atomic>

#include <ATen/Parallel.h>

namespace metalserve {

int ChooseIntraOpThreads(absl::Duration one_thread, absl::Duration n_threads, int n) {
  if (n <= 1 || one_thread < kParallelForwardFloor) return 1;
  return n_threads <= kParallelMinGain * one_thread ? n : 1;
}

namespace {

// The count the last at::set_num_threads of this process applied to its
// process-wide settings (0: none yet).
std::atomic<int> process_threads{0};

}  // namespace

int CurrentIntraOpThreads() { return at::get_num_threads(); }

void ApplyIntraOpThreads(int threads) {
  if (threads < 1) return;
  at::set_num_threads(threads);
  process_threads.store(threads, std::memory_order_relaxed);
}

void SetIntraOpThreads(int threads) {
  if (threads < 1) return;
  if (at::get_num_threads() == threads &&
      process_threads.load(std::memory_order_relaxed) == threads) {
    return;
  }
  ApplyIntraOpThreads(threads);
}

}  // namespace metalserve
