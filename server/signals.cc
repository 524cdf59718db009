// The server process's signals: handlers that set flags, and the polling
// loops of main's thread that read them. Part of the metalserve executable.
#include "server/signals.h"

#include <algorithm>
#include <csignal>

#include "absl/time/clock.h"
#include "glog/logging.h"

namespace metalserve {
namespace {

// Set by the handlers, read by the main thread's polling loops.
volatile std::sig_atomic_t g_signal = 0;        // last SIGTERM/SIGINT
volatile std::sig_atomic_t g_signal_count = 0;  // how many so far
volatile std::sig_atomic_t g_dump = 0;          // SIGUSR1 seen
volatile std::sig_atomic_t g_rescan = 0;        // SIGHUP seen

void OnSignal(int sig) {
  g_signal = sig;
  g_signal_count = g_signal_count + 1;
}
void OnDump(int) { g_dump = 1; }
void OnRescan(int) { g_rescan = 1; }

bool Take(volatile std::sig_atomic_t* flag) {
  if (*flag == 0) return false;
  *flag = 0;
  return true;
}

}  // namespace

void InstallSignalHandlers() {
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGUSR1, OnDump);
  std::signal(SIGHUP, OnRescan);
}

int TerminationSignal() { return g_signal; }
bool TakeDumpRequest() { return Take(&g_dump); }
bool TakeRescanRequest() { return Take(&g_rescan); }

void ServeUntilSignal(const std::function<void()>& on_dump,
                      const std::function<void()>& on_rescan) {
  while (g_signal == 0) {
    absl::SleepFor(kSignalPoll);
    if (TakeDumpRequest()) on_dump();
    if (TakeRescanRequest()) on_rescan();
  }
}

void DrainGrace(absl::Duration grace) {
  if (grace <= absl::ZeroDuration()) return;
  LOG(INFO) << "drain grace " << absl::FormatDuration(grace)
            << ": still serving (a second signal skips it)";
  const int signals = g_signal_count;
  const absl::Time end = absl::Now() + grace;
  while (absl::Now() < end) {
    if (g_signal_count != signals) {
      LOG(INFO) << "second signal: skipping the rest of the drain grace";
      return;
    }
    absl::SleepFor(std::min(kSignalPoll, end - absl::Now()));
  }
}

}  // namespace metalserve
