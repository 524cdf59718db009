#!/usr/bin/env bash
# Executor threads and device concurrency against served throughput, side by
# side: for each round, each concurrency and each E:D pair, a fresh server
# with --executors=E --device_concurrency=D (and FLAGS) is load-tested by
# one metalserve-bench (bench/client_scaling.sh: req/s, worst p99, server
# CPU per request). The pairs run in turn inside every round, so drift over
# the run falls on all of them.
#
#   bench/executors.sh BUILD MODEL_PT "FLAGS" "C ..." "E:D ..." [ROUNDS] [DURATION_S]
#   bench/executors.sh build build/models/resnet18.pt "--threads=2 --max_batch_size=32" \
#       "16" "2:2 3:3 4:4" 2 5
#   # the GPU host (after source bench/gpu_host_env.sh; gpu_build metalserve metalserve-bench):
#   bench/executors.sh build-gpu build-gpu/models/resnet50.pt "--device=cuda --threads=8 \
#       --max_batch_size=256 --allowed_batch_sizes=1,8,32,64,128,256" "64 256" "2:2 3:3 4:4" 2 5
#
# Why: each executor thread gathers its batch's rows into the staging
# buffer, waits for the device and then answers every request of the batch,
# all while holding one of the D device slots, so with the defaults (2:2) the
# host-side work per request of two batches at a time is all that overlaps
# the device (docs/performance.md). Loopback only; stops by itself.
set -euo pipefail
build=$1 model=$2 flags=$3 concs=$4 pairs=$5 rounds=${6:-2} dur=${7:-5}
here=$(cd "$(dirname "$0")" && pwd)
for r in $(seq "$rounds"); do
  for c in $concs; do
    for pair in $pairs; do
      e=${pair%%:*} d=${pair##*:}
      printf "round %s c=%s executors=%s device_concurrency=%s: " "$r" "$c" "$e" "$d"
      bash "$here/client_scaling.sh" "$build" "$model" \
        "$flags --executors=$e --device_concurrency=$d" "$c" 1 "$dur"
    done
  done
done
