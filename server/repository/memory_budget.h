// Device memory admission: how much of a device's budget each loaded (or
// loading) model version takes, and whether one more fits.
//
// Behaviour: a load first Reserve()s its estimate (EstimateLoadBytes) on its
// device; the reservation is refused with ResourceExhausted, naming the
// figures, when the device's reservations plus the estimate would pass the
// budget. After the load the server Correct()s the figure with what the load
// measured, and Release()s it when the version's servable is destroyed (its
// last handle released). The measured figure is remembered per model and
// device (LastFigure), so the model's next load reserves at least that. A budget of 0 admits everything but still keeps the
// figures. The budget is per device: every device gets the same budget.
//
// A reload keeps the old version resident while the new one loads, so the new
// one must fit beside it.
//
// Pure accounting: no clock, no I/O (ResidentBytes below is the one reader of
// the process, used by the caller).
//
// Thread-safety: thread-safe; every method may be called from any thread.
#ifndef METALSERVE_SERVER_REPOSITORY_MEMORY_BUDGET_H_
#define METALSERVE_SERVER_REPOSITORY_MEMORY_BUDGET_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/tensor.h"
#include "server/repository/servable.h"

namespace metalserve {

// Weights take this many times their file's size once loaded (the TorchScript
// graph, the module's Python-free structures, allocator slack). A guess, not
// a measurement of every model: the load's measurement corrects it.
inline constexpr double kMemoryOverheadFactor = 1.5;

// What a load is expected to take, in bytes:
//   file_bytes x precision factor (fp16 and bf16 0.5, else 1) x
//   kMemoryOverheadFactor
//   + 2 x max_batch_size x (bytes of one row of every input and output)
// (the batch's staging copy and the model's own tensors). Variable
// non-batch dimensions count 1. One batch, whatever the device slots (four
// on CUDA by default): the device thread runs one batch's forward and its
// output copy back at a time (TorchRunner::RunHost, DeviceThread::RunSync),
// and the batches waiting in the other slots are host copies (pinned on
// CUDA), not device memory.
int64_t EstimateLoadBytes(int64_t file_bytes, absl::string_view precision,
                          const std::vector<TensorSpec>& inputs,
                          const std::vector<TensorSpec>& outputs, int64_t max_batch_size);

// The weights' part of the estimate (file x precision factor), without the
// overhead factor or buffers.
int64_t WeightBytes(int64_t file_bytes, absl::string_view precision);

// The process's resident set in bytes, from /proc/self/statm; -1 where that
// cannot be read (macOS).
int64_t ResidentBytes();

// "12.34 MiB".
std::string FormatMiB(int64_t bytes);

class MemoryBudget {
 public:
  struct Options {
    // Bytes each device may hold; 0 = no limit (figures are still kept).
    int64_t budget_bytes = 0;
  };
  // InvalidArgument for a negative budget.
  static absl::StatusOr<std::unique_ptr<MemoryBudget>> Create(const Options& options);

  // Takes `bytes` of `device`'s budget for `id` and returns a ticket for
  // Correct and Release. ResourceExhausted, when it does not fit:
  //   "loading tiny_cnn version 2 needs about 0.03 MiB; device cpu has 0.01
  //    MiB of its 0.05 MiB budget free (loaded: tiny_cnn version 1 0.04 MiB)"
  absl::StatusOr<uint64_t> Reserve(const ServableId& id, const std::string& device,
                                   int64_t bytes);
  // Replaces a reservation's figure (what the load measured) and remembers
  // it as the model's last figure on that device (LastFigure). Unknown
  // tickets are ignored.
  void Correct(uint64_t ticket, int64_t bytes);
  // The figure the last corrected load of `model` on `device` counted (kept
  // after its release); 0 when none. The next load of that model (a reload,
  // or a load after an unload) reserves at least this much: the file-size
  // estimate misses a model's activations, its measurement does not.
  int64_t LastFigure(const std::string& model, const std::string& device) const;
  // Gives a reservation back. Unknown tickets are ignored.
  void Release(uint64_t ticket);

  // Bytes reserved on `device`.
  int64_t Used(absl::string_view device) const;
  int64_t budget_bytes() const { return options_.budget_bytes; }

 private:
  struct Reservation {
    ServableId id;
    std::string device;
    int64_t bytes = 0;
  };
  explicit MemoryBudget(const Options& options) : options_(options) {}
  int64_t UsedLocked(absl::string_view device) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  std::string ListLocked(absl::string_view device) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  std::map<uint64_t, Reservation> reservations_ ABSL_GUARDED_BY(mu_);
  // (model, device) -> the last corrected figure; bounded by the models
  // ever loaded.
  std::map<std::pair<std::string, std::string>, int64_t> last_figure_ ABSL_GUARDED_BY(mu_);
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace metalserve

#endif  // METALSERVE_SERVER_REPOSITORY_MEMORY_BUDGET_H_
