#include "server/runtime/intra_op_threads.h"

#include <ATen/Parallel.h>

namespace metalserve {

int ChooseIntraOpThreads(absl::Duration one_thread, absl::Duration n_threads, int n) {
  if (n <= 1 || one_thread < kParallelForwardFloor) return 1;
  return n_threads <= kParallelMinGain * one_thread ? n : 1;
}

int CurrentIntraOpThreads() { return at::get_num_threads(); }

void SetIntraOpThreads(int threads) {
  if (threads >= 1 && at::get_num_threads() != threads) at::set_num_threads(threads);
}

}  // namespace metalserve
