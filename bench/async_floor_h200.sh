#!/usr/bin/env bash
# gRPC's asynchronous API against its callback API as the transport floor,
# on the GPU host (shared/gpu-host/README.md's recipe: run from the
# repository root with .devtools/ and .devdeps/ in the tree): the echo server
# served by the callback API (as metalserve is), the same through completion
# queues (echo_server --api=async, two polling threads) and the null runner,
# ROUNDS rounds (default 3) of bench/transport.py at 602 KB (ResNet-50's
# 3x224x224 fp32, concurrency 64) and at [1,4] (concurrency 8).
#
# Logs and JSON under $OUT (default /tmp/async-floor-out). About 4 minutes
# after the build. This VM's run: bench/results/vm-2026-12-04-async-echo-log.txt.
#   bash bench/async_floor_h200.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/async-floor-out}
ROUNDS=${ROUNDS:-3}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
source bench/gpu_host_env.sh
gpu_build_while_exporting --out build-gpu/models --only resnet50,identity -- \
  metalserve metalserve-bench echo_server || exit 1
for m in resnet50 identity; do
  [[ -f build-gpu/models/$m.json ]] || { echo "no build-gpu/models/$m.json: stopping"; exit 1; }
done
for r in $(seq "$ROUNDS"); do
  echo "round $r: 602 KB, concurrency 64"
  python3 bench/transport.py --build=build-gpu --payloads=build-gpu/models/resnet50.json \
    --servers=echo,echo_async,null --concurrency=64 --duration=5 --threads=8 \
    --json="$OUT/transport-602k-$r.json"
  stamp "round $r 602 KB"
  echo "round $r: [1,4], concurrency 8"
  python3 bench/transport.py --build=build-gpu --payloads=build-gpu/models/identity.json \
    --servers=echo,echo_async,null --concurrency=8 --duration=4 \
    --json="$OUT/transport-identity-$r.json"
  stamp "round $r [1,4]"
done
uptime
