// How many cores this process may use: what sizes its thread pools and
// decides whether a thread may poll (server/main.cc's --grpc_api=auto,
// DeviceThread::ForDevice). Torch-free.
#ifndef METALSERVE_COMMON_USABLE_CORES_H_
#define METALSERVE_COMMON_USABLE_CORES_H_

#include "absl/strings/string_view.h"

namespace metalserve {

// The cores this process may use: the CPUs it may run on (Linux affinity),
// lowered to a cgroup CPU limit (a container's --cpus, a systemd unit's
// CPUQuota: cgroup v2 cpu.max or v1 cpu.cfs_quota_us / cpu.cfs_period_us,
// rounded up); elsewhere the hardware's count. At least 1.
int UsableCores();
// `cores` lowered to the limit in a cgroup v2 cpu.max text ("max 100000":
// none; "150000 100000": 1.5 cores, rounded up to 2). Unreadable text: `cores`.
int CoresUnderCpuMax(absl::string_view cpu_max, int cores);

}  // namespace metalserve

#endif  // METALSERVE_COMMON_USABLE_CORES_H_
