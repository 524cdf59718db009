// The server process's signals (signals.cc): SIGTERM/SIGINT end serving,
// SIGUSR1 asks for the metrics dump, SIGHUP for a repository rescan. The
// handlers only set flags; main's thread polls them every kSignalPoll.
#ifndef METALSERVE_SERVER_SIGNALS_H_
#define METALSERVE_SERVER_SIGNALS_H_

#include <functional>

#include "absl/time/time.h"

namespace metalserve {

// How often the main thread looks at the flags the handlers set.
inline constexpr absl::Duration kSignalPoll = absl::Milliseconds(20);

// Installed before anything slow (the model load), so that SIGTERM/SIGINT
// always lead to a clean exit 0 and SIGUSR1 never kills the process.
void InstallSignalHandlers();

// The last SIGTERM/SIGINT received, 0 before any.
int TerminationSignal();

// True once for each SIGUSR1 (resp. SIGHUP) received since the last call;
// signals that arrive between two calls count once.
bool TakeDumpRequest();
bool TakeRescanRequest();

// Returns once a SIGTERM/SIGINT has arrived, calling `on_dump` for each
// SIGUSR1 and `on_rescan` for each SIGHUP on this thread meanwhile.
void ServeUntilSignal(const std::function<void()>& on_dump,
                      const std::function<void()>& on_rescan);

// Keeps serving (health already NOT_SERVING) for `grace`, or until another
// SIGTERM/SIGINT, which skips the rest of it.
void DrainGrace(absl::Duration grace);

}  // namespace metalserve

#endif  // METALSERVE_SERVER_SIGNALS_H_
