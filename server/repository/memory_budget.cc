#include "server/repository/memory_budget.h"

#include <unistd.h>

#include <cmath>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace metalserve {
namespace {

int64_t RowBytesOf(const TensorSpec& spec) {
  int64_t bytes = ItemSize(spec.dtype);
  for (size_t i = 1; i < spec.shape.size(); ++i) bytes *= spec.shape[i] > 0 ? spec.shape[i] : 1;
  return bytes;
}

double PrecisionFactor(absl::string_view precision) {
  return precision == "fp16" || precision == "bf16" ? 0.5 : 1.0;
}

}  // namespace

int64_t WeightBytes(int64_t file_bytes, absl::string_view precision) {
  return static_cast<int64_t>(std::ceil(static_cast<double>(file_bytes) *
                                        PrecisionFactor(precision)));
}

int64_t EstimateLoadBytes(int64_t file_bytes, absl::string_view precision,
                          const std::vector<TensorSpec>& inputs,
                          const std::vector<TensorSpec>& outputs, int64_t max_batch_size) {
  int64_t row = 0;
  for (const TensorSpec& s : inputs) row += RowBytesOf(s);
  for (const TensorSpec& s : outputs) row += RowBytesOf(s);
  const double weights = static_cast<double>(WeightBytes(file_bytes, precision));
  return static_cast<int64_t>(std::ceil(weights * kMemoryOverheadFactor)) +
         2 * max_batch_size * row;
}

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return -1;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

std::string FormatMiB(int64_t bytes) {
  return absl::StrFormat("%.2f MiB", static_cast<double>(bytes) / (1 << 20));
}

absl::StatusOr<std::unique_ptr<MemoryBudget>> MemoryBudget::Create(const Options& options) {
  if (options.budget_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("device memory budget ", options.budget_bytes, " is negative"));
  }
  return std::unique_ptr<MemoryBudget>(new MemoryBudget(options));
}

absl::StatusOr<uint64_t> MemoryBudget::Reserve(const ServableId& id, const std::string& device,
                                               int64_t bytes) {
  absl::MutexLock lock(&mu_);
  const int64_t used = UsedLocked(device);
  const int64_t budget = options_.budget_bytes;
  if (budget > 0 && used + bytes > budget) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "loading ", id.ToString(), " needs about ", FormatMiB(bytes), "; device ", device,
        " has ", FormatMiB(std::max<int64_t>(budget - used, 0)), " of its ", FormatMiB(budget),
        " budget free (loaded: ", ListLocked(device), ")"));
  }
  const uint64_t ticket = next_ticket_++;
  reservations_[ticket] = Reservation{id, device, bytes};
  return ticket;
}

void MemoryBudget::Correct(uint64_t ticket, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  const auto it = reservations_.find(ticket);
  if (it == reservations_.end()) return;
  it->second.bytes = bytes;
  last_figure_[{it->second.id.model, it->second.device}] = bytes;
}

int64_t MemoryBudget::LastFigure(const std::string& model, const std::string& device) const {
  absl::ReaderMutexLock lock(&mu_);
  const auto it = last_figure_.find({model, device});
  return it == last_figure_.end() ? 0 : it->second;
}

void MemoryBudget::Release(uint64_t ticket) {
  absl::MutexLock lock(&mu_);
  reservations_.erase(ticket);
}

int64_t MemoryBudget::Used(absl::string_view device) const {
  absl::ReaderMutexLock lock(&mu_);
  return UsedLocked(device);
}

int64_t MemoryBudget::UsedLocked(absl::string_view device) const {
  int64_t used = 0;
  for (const auto& [ticket, r] : reservations_) {
    if (r.device == device) used += r.bytes;
  }
  return used;
}

std::string MemoryBudget::ListLocked(absl::string_view device) const {
  std::vector<std::string> items;
  for (const auto& [ticket, r] : reservations_) {
    if (r.device == device) items.push_back(absl::StrCat(r.id.ToString(), " ", FormatMiB(r.bytes)));
  }
  return items.empty() ? std::string("none") : absl::StrJoin(items, ", ");
}

}  // namespace metalserve
