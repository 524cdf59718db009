// StagingPool: a runner's batch host buffers, kept for later batches instead
// of allocated per batch (RuntimeOptions::staging_buffers). Torch-free: the
// runtime gives it the allocation (pinned host memory on CUDA, LibTorch's CPU
// allocator elsewhere) and wraps what it lends in tensors.
//
// Why: every batch's rows are copied once into one host buffer that the
// device reads (torch_runner.cc). Allocated per batch, that buffer came on
// CUDA from LibTorch's caching host allocator (a lock, its events queried
// and recorded per use) and on the CPU from malloc; kept, a buffer is
// written again and nothing else is done.
//
// Contract:
//   - Take(bytes) lends a buffer of at least `bytes`: the smallest kept one
//     that holds them (Lease::reused), else a new one of exactly `bytes` from
//     the allocation function (whose exception, e.g. out of memory, passes
//     through with nothing kept or lent). Its contents are whatever the last
//     batch left: the borrower writes every byte it uses.
//   - Give(lease) takes it back once the batch is done: the borrower gives
//     it back only when nothing reads it any more, a device copy from it
//     included (the runtime waits for its stream after a failed batch). It
//     is kept only if nothing else shares its Block (Block::use_count() == 1
//     once the lease is given: tensors that wrap the buffer share it, so a
//     model that kept a reference to an input keeps the buffer from reuse;
//     it is dropped instead, and freed with the last reference). At most
//     `keep` buffers are kept: with `keep` kept, a larger one given back
//     replaces the smallest kept, one no larger is dropped. keep = 0 keeps
//     none: every Take allocates (the behaviour before the pool). Give does
//     not allocate or throw.
//   - Memory: the kept buffers stay allocated while the runner lives (at
//     most `keep` of the largest batches' inputs, kept_bytes(); on CUDA
//     pinned host memory, which LibTorch's host allocator rounds up to a
//     power of two and also caches once used).
//
// Thread-safety: Take and Give are thread-safe (several executors assemble
// batches at once). Lent buffers are the borrower's alone.
#ifndef METALSERVE_SERVER_RUNTIME_STAGING_POOL_H_
#define METALSERVE_SERVER_RUNTIME_STAGING_POOL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace metalserve {

class StagingPool {
 public:
  // A buffer: get() is its first byte; freed when the last copy goes.
  using Block = std::shared_ptr<void>;
  // Allocates a buffer of `bytes`; may throw (out of memory).
  using AllocateFn = std::function<Block(int64_t bytes)>;

  struct Lease {
    Block block;
    int64_t capacity = 0;  // bytes
    bool reused = false;   // a kept buffer, not a new one
    char* data() const { return static_cast<char*>(block.get()); }
  };

  StagingPool(int keep, AllocateFn allocate);
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  Lease Take(int64_t bytes);
  void Give(Lease lease);

  // Bytes of the buffers kept now (not counting those lent).
  int64_t kept_bytes() const;
  // Buffers given back but dropped because something still shared them.
  int64_t dropped_shared() const;

 private:
  const int keep_;
  const AllocateFn allocate_;
  mutable absl::Mutex mu_;
  std::vector<Lease> kept_ ABSL_GUARDED_BY(mu_);
  int64_t dropped_shared_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_RUNTIME_STAGING_POOL_H_
