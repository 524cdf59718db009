#!/usr/bin/env bash
# Abseil's mutex deadlock detection against the per-request ceiling, on the
# GPU host (shared/gpu-host/README.md's recipe: run from the repository root
# with .devtools/ and .devdeps/ in the tree). The same binaries, the server
# started alternately with METALSERVE_MUTEX_DEADLOCK_DETECTION=1 ("on":
# Debian's Abseil records every lock, gRPC's included, in one global graph)
# and as it starts by default ("off" since 2026-12-04, common/mutex_mode.h);
# the client runs with it off in both.
#
#   1. ResNet-50 fp32 on CUDA, one metalserve-bench at concurrency 64 and
#      256 (bench/client_scaling.sh: req/s, worst p99, server CPU per
#      request), ROUNDS rounds (default 2) of on then off;
#   2. the transport floor at 602 KB, concurrency 64: the echo server and the
#      null runner (bench/transport.py --servers=echo,null), on then off.
#
# Logs and JSON under $OUT (default /tmp/mutex-out). About 5 minutes after
# the build. Measured on 2026-12-02 (with the two modes' labels "kept" and
# "off"): bench/results/h200-2026-12-02-mutex-deadlock-detection-log.txt;
# on 2026-12-04 with =0 (...-2026-12-04-mutex-deadlock-detection-log.txt), and
# with off the default: bench/results/h200-2026-12-04-mutex-default-off-log.txt.
#   bash bench/mutex_h200.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/mutex-out}
ROUNDS=${ROUNDS:-2}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
source bench/gpu_host_env.sh
gpu_build_while_exporting --out build-gpu/models --only resnet50 -- \
  metalserve metalserve-bench echo_server || exit 1
[[ -f build-gpu/models/resnet50.pt ]] || { echo "no build-gpu/models/resnet50.pt: stopping"; exit 1; }
on=METALSERVE_MUTEX_DEADLOCK_DETECTION=1
unset METALSERVE_MUTEX_DEADLOCK_DETECTION  # the client's default: off
flags="--device=cuda --threads=8 --max_batch_size=256 --allowed_batch_sizes=1,8,32,64,128,256"
for r in $(seq "$ROUNDS"); do
  for mode in on off; do
    server_env=$on
    [[ $mode == off ]] && server_env=
    for c in 64 256; do
      printf "round %s detection=%s c=%s: " "$r" "$mode" "$c"
      SERVER_ENV="$server_env" bash bench/client_scaling.sh build-gpu build-gpu/models/resnet50.pt \
        "$flags" "$c" 1 5
    done
    stamp "round $r $mode"
  done
done
for mode in on off; do
  env_arg=(--server_env="$on")
  [[ $mode == off ]] && env_arg=()
  echo "transport floor, detection=$mode"
  python3 bench/transport.py --build=build-gpu --payloads=build-gpu/models/resnet50.json \
    --servers=echo,null --concurrency=64 --duration=5 --threads=8 "${env_arg[@]}" \
    --json="$OUT/transport-$mode.json"
  stamp "transport $mode"
done
uptime
