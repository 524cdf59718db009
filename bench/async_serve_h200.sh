#!/usr/bin/env bash
# metalserve --grpc_api=async (Predict and ModelInfer through completion
# queues polled by the server's own threads) against the callback API, on the
# GPU host (shared/gpu-host/README.md's recipe: run from the repository root
# with .devtools/ and .devdeps/ in the tree), each beside its own echo floor,
# in one bench/transport.py run per row:
#
#   PART=floor (default): ROUNDS rounds (default 3) of echo, echo_async,
#     null and null_async at 602 KB (ResNet-50's 3x224x224 fp32, concurrency
#     64) and at [1,4] (concurrency 8), then null_async at 602 KB with 4 and
#     8 queues. About 6 minutes after the build.
#   PART=model: ResNet-50 fp32 on CUDA served by both APIs at concurrency 64
#     and 256 (602 KB, max batch 256, 8 s a row), ROUNDS rounds (default 2).
#
# Logs and JSON under $OUT (default /tmp/async-serve-out).
#   bash bench/async_serve_h200.sh
#   PART=model bash bench/async_serve_h200.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/async-serve-out}
PART=${PART:-floor}
mkdir -p "$OUT"
exec > >(tee "$OUT/log-$PART.txt") 2>&1
source bench/gpu_host_env.sh
gpu_build_while_exporting --out build-gpu/models --only resnet50,identity -- \
  metalserve metalserve-bench echo_server || exit 1
for m in resnet50 identity; do
  [[ -f build-gpu/models/$m.json ]] || { echo "no build-gpu/models/$m.json: stopping"; exit 1; }
done
big=(--build=build-gpu --payloads=build-gpu/models/resnet50.json --threads=8)
small=(--build=build-gpu --payloads=build-gpu/models/identity.json)
if [[ $PART == floor ]]; then
  for r in $(seq "${ROUNDS:-3}"); do
    echo "round $r: 602 KB, concurrency 64"
    python3 bench/transport.py "${big[@]}" --servers=echo,echo_async,null,null_async \
      --concurrency=64 --duration=5 --json="$OUT/floor-602k-$r.json"
    stamp "round $r 602 KB"
    echo "round $r: [1,4], concurrency 8"
    python3 bench/transport.py "${small[@]}" --servers=echo,echo_async,null,null_async \
      --concurrency=8 --duration=4 --json="$OUT/floor-identity-$r.json"
    stamp "round $r [1,4]"
  done
  for q in 4 8; do
    echo "602 KB, concurrency 64, null_async with $q queues"
    python3 bench/transport.py "${big[@]}" --servers=echo_async,null_async --cq_threads="$q" \
      --concurrency=64 --duration=5 --json="$OUT/queues-$q.json"
    stamp "queues $q"
  done
else
  for r in $(seq "${ROUNDS:-2}"); do
    for c in 64 256; do
      echo "round $r: ResNet-50 on CUDA, 602 KB, concurrency $c"
      python3 bench/transport.py "${big[@]}" --model=build-gpu/models/resnet50.pt \
        --servers=model,model_async --max_batch_size=256 --concurrency="$c" --duration=8 \
        --server_arg=--device=cuda --server_arg=--allowed_batch_sizes=1,8,32,64,128,256 \
        --json="$OUT/model-c$c-$r.json"
      stamp "round $r c=$c"
    done
  done
fi
uptime
