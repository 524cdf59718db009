#!/usr/bin/env bash
# Inputs in shared memory against inputs through gRPC, on the GPU host
# (shared/gpu-host/README.md's recipe: run from the repository root with
# .devtools/ and .devdeps/ in the tree), each comparison side by side in one
# call:
#
#   floor   602 KB requests (image_head: ResNet's 3x224x224 fp32 interface,
#           no compute, on the CPU device) at concurrency 64: the echo server
#           (gRPC alone, native Predict) for the floor, then bench/transport.py
#           --shared_memory with the null runner and image_head over KServe:
#           TCP, the Unix socket, and the socket with the inputs in a
#           registered region (server CPU per request, requests/s);
#   served  bench/run.py per VARIANTS entry (default ResNet-50 fp32 on CUDA),
#           twice: KServe over TCP, and the same with
#           --shared_memory=local / metalserve-bench --shared_memory=system;
#           served/raw best batch and the c=1 overhead of each.
#
#   bash bench/shm_h200.sh
#   SKIP_BUILD=1 PARTS=served VARIANTS="fp16cl|--model=resnet50 --precision=fp16 --channels_last" \
#     bash bench/shm_h200.sh
#
# Logs and JSON under $OUT (default /tmp/shm-out); with TAR set, the whole
# folder (plots left out) is also packed there, for the device tool, which
# brings back only a few files.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/shm-out}
PARTS=${PARTS:-floor,served}
SWEEP=${SWEEP:-1,64,256}
VARIANTS=${VARIANTS:-"fp32|--model=resnet50"}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
source bench/gpu_host_env.sh
if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  gpu_build_while_exporting --out build-gpu/models --only resnet50,resnet50_u8,image_head -- \
    metalserve metalserve-bench runtime_bench echo_server || exit 1
fi
for m in resnet50 image_head; do
  [[ -f build-gpu/models/$m.json ]] || { echo "no build-gpu/models/$m.json: stopping"; exit 1; }
done

if [[ ,$PARTS, == *,floor,* ]]; then
  echo "== floor: 602 KB, concurrency 64"
  python3 bench/transport.py --build=build-gpu --payloads=build-gpu/models/image_head.json \
    --servers=echo --concurrency=64 --duration=5 --threads=8 --json="$OUT/floor-echo.json"
  python3 bench/transport.py --build=build-gpu --payloads=build-gpu/models/image_head.json \
    --model=build-gpu/models/image_head.pt --servers=null,model --shared_memory \
    --bench_arg=--protocol=kserve --concurrency=64 --duration=5 --threads=8 \
    --json="$OUT/floor-kserve.json"
  stamp "floor"
fi

if [[ ,$PARTS, == *,served,* ]]; then
  IFS=';' read -r -a variants <<< "$VARIANTS"
  for v in "${variants[@]}"; do
    label=${v%%|*} flags=${v#*|}
    for mode in grpc shm; do
      echo "== $label $mode"
      server_args="" bench_args="--connections=8 --protocol=kserve"
      if [[ $mode == shm ]]; then
        server_args="--shared_memory=local"
        bench_args="$bench_args --shared_memory=system"
      fi
      # shellcheck disable=SC2086  # flags are words
      python3 bench/run.py --build=build-gpu --models_dir=build-gpu/models --device=cuda \
        --threads=8 --optimize=auto --batches=1,256 --sweep="$SWEEP" --max_batch_size=256 \
        --allowed_batch_sizes=1,2,4,8,16,24,32,48,64,96,128,192,256 --duration=3 --warmup=1 \
        --raw_min_time=0.5 --server_args="$server_args" --bench_args="$bench_args" \
        --host_label=gpu --out="$OUT" --tag="shm-$label-$mode" $flags 2>&1 |
        grep -v "^runtime: warmed up"
      stamp "$label $mode"
    done
  done
fi
uptime
if [[ -n ${TAR:-} ]]; then
  tar -czf "$TAR" --exclude='*.png' -C "$OUT" .
fi
