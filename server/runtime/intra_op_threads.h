// Intra-op threads per batch size on the CPU: a forward too small to gain
// from LibTorch's intra-op parallelism runs on one thread.
//
// Why: every parallel region of an OpenMP forward waits at its barrier for
// each worker thread. On a machine whose cores are shared (other processes
// building, other models), a worker that the kernel has descheduled makes
// the barrier wait a scheduling slice, so a forward of tiny_cnn at batch 1
// took 7-37 ms with 2 intra-op threads against 0.02-0.05 ms with one
// (runtime_bench, load average 9 on 2 cores; a 2-thread forward reached its
// 0.03 ms only with OMP_WAIT_POLICY=passive, which the launcher would have to
// set before LibTorch loads). At concurrency 1 the server answered at p50
// 12-20 ms instead of 0.25 ms, under every batching policy, and which
// server of a comparison was hit depended on the load of the moment.
//
// The rule, decided once per warm-up batch size at warm-up (TorchRunner) and
// applied to each served batch by the warm-up size it would be padded to:
//  * one thread when the forward on one thread costs less than
//    kParallelForwardFloor: the most `n` threads could save is below it,
//    while a barrier on a shared machine can cost tens of milliseconds;
//  * otherwise `n` threads only when they are at least 1 / kParallelMinGain
//    times faster than one (each timed as the least of a few forwards, so a
//    stall during the measurement counts against the parallel forward, the
//    one it would hit again).
// Once `n` threads win at a size, larger sizes take `n` without measuring
// one thread (parallelism pays more as the work grows), so a large model
// pays the comparison once.
//
// Thread-safety: ChooseIntraOpThreads is pure. CurrentIntraOpThreads and
// SetIntraOpThreads act on the calling thread's OpenMP setting (LibTorch's
// at::get_num_threads / at::set_num_threads): call them on the thread that
// runs the forward (the device thread, or a caller holding the device), one
// at a time.
#ifndef METALSERVE_SERVER_RUNTIME_INTRA_OP_THREADS_H_
#define METALSERVE_SERVER_RUNTIME_INTRA_OP_THREADS_H_

#include "absl/time/time.h"

namespace metalserve {

// Below this single-thread forward time a batch runs on one thread.
inline constexpr absl::Duration kParallelForwardFloor = absl::Milliseconds(1);
// `n` threads serve only when their forward takes at most this fraction of
// the single-thread one.
inline constexpr double kParallelMinGain = 0.8;

// The intra-op threads for a batch size whose forward took `one_thread` on
// one thread and `n_threads` on `n` (see the file comment). `n` <= 1: 1.
int ChooseIntraOpThreads(absl::Duration one_thread, absl::Duration n_threads, int n);

// The calling thread's intra-op thread count (at::get_num_threads).
int CurrentIntraOpThreads();
// Sets it when it differs, or when another thread has set a different count
// since: at::set_num_threads also sets process-wide state (the count of
// LibTorch's pthreadpool kernels, the default of threads that start later)
// and resets oneDNN's cached convolutions, so it is called only when either
// changes. Without the second check, a forward on an executor thread
// (torch_runner.h, cpu_forward_on_caller) setting one thread would leave
// another model's parallel batches on the device thread, whose own count
// had not changed, with a one-thread pool. The price: forwards at different
// counts on one device (two models, or one model's sizes) pay
// at::set_num_threads (a new pthreadpool, oneDNN's cache cleared) at every
// alternation, as they did when all of them ran on the device thread;
// forwards at one count never do (beyond LibTorch's own first call on each
// new thread). `threads` < 1: no-op.
void SetIntraOpThreads(int threads);
// at::set_num_threads(threads) whatever the counts, noted for
// SetIntraOpThreads: every direct setting in the runtime goes through here
// (a model's --threads at load), so that the process-wide count the check
// above trusts is the one LibTorch holds. `threads` < 1: no-op.
void ApplyIntraOpThreads(int threads);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_RUNTIME_INTRA_OP_THREADS_H_
