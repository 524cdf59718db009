// Abseil's mutex deadlock detection, as a switch for the programs.
//
// Where Abseil is built without NDEBUG (Debian's packages are), every
// absl::Mutex Lock and Unlock records the lock order in one process-wide
// graph behind one global spin lock, gRPC's own mutexes included (libgrpc
// and libgpr lock absl::Mutex): about 360 instructions per lock pair, 16 %
// of an unbatched [1,4] request's user-space instructions on this project's
// development machine, and 3-16 % of ResNet-50's served requests/s on the
// GPU host (docs/performance.md, "Abseil's mutex deadlock detection"). So
// the programs (metalserve, metalserve-bench, the transport echo server)
// turn it off at start unless told to keep it. The unit tests do not call
// this and keep Abseil's setting, so a lock-order inversion in the code they
// run still aborts there; the ThreadSanitizer tree reports inversions too.
#ifndef METALSERVE_COMMON_MUTEX_MODE_H_
#define METALSERVE_COMMON_MUTEX_MODE_H_

namespace metalserve {

// "1" in this environment variable keeps Abseil's own setting (detection
// on where Abseil is built without NDEBUG); unset, or anything else, turns
// detection off.
inline constexpr char kDeadlockDetectionEnv[] = "METALSERVE_MUTEX_DEADLOCK_DETECTION";

// Applies the environment variable above. Call it first thing in main,
// before any other thread starts. Returns true when it turned detection off.
bool ApplyMutexDeadlockDetectionSetting();

}  // namespace metalserve

#endif  // METALSERVE_COMMON_MUTEX_MODE_H_
