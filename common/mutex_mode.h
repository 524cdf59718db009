// Abseil's mutex deadlock detection, as a switch for the programs.
//
// Where Abseil is built without NDEBUG (Debian's packages are), every
// absl::Mutex Lock and Unlock records the lock order in one process-wide
// graph behind one global spin lock, gRPC's own mutexes included (libgrpc
// and libgpr lock absl::Mutex): about 3x the cost of an uncontended lock
// pair on this project's development machine. It looked like a cause of the
// per-request ceiling (issue 20), but turning it off changed no served
// figure on this machine and cost 7 % at concurrency 256 on the GPU host
// (docs/performance.md), so the programs keep Abseil's setting unless told
// otherwise; the switch stays for the next measurement.
#ifndef METALSERVE_COMMON_MUTEX_MODE_H_
#define METALSERVE_COMMON_MUTEX_MODE_H_

namespace metalserve {

// "0" in this environment variable turns the detection off; anything else
// (or nothing) keeps Abseil's own setting.
inline constexpr char kDeadlockDetectionEnv[] = "METALSERVE_MUTEX_DEADLOCK_DETECTION";

// Applies the environment variable above. Call it first thing in main,
// before any other thread starts. Returns true when it turned detection off.
bool ApplyMutexDeadlockDetectionSetting();

}  // namespace metalserve

#endif  // METALSERVE_COMMON_MUTEX_MODE_H_
