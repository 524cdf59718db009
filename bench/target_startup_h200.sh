#!/usr/bin/env bash
# Two measurements on the GPU host after bench/sched_h200.sh (same warm
# machine: build-gpu and build-gpu/models/resnet50.pt are reused; built here
# when missing), shared/gpu-host/README.md's recipe:
#
# 1. Issue 19's latency target, open loop (Poisson) with metalserve-bench's
#    four senders (--open_loop_threads default): fixed 2 ms against a 50 ms
#    target, ResNet-50 fp32 on cuda with the server's defaults, RATES
#    (default up to and past the closed loop's ~7,000-7,900 req/s), two
#    interleaved rounds, 3 s per rate.
# 2. Issue 20's start-up, launch to "ready" (bench/startup_time.sh):
#    ResNet-50 on cuda with the default batch sizes (1 and --max_batch_size
#    32) and with the 13 sizes of the benchmarks, each a first start and two
#    cached starts, cuDNN benchmark on (the default) and off.
#
# Wall time about 4 minutes with build-gpu present (251 s on 2026-12-03).
#   bash bench/target_startup_h200.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/target-out}
RES=${RES:-$OUT/res}
RATES=${RATES:-2000,3000,4000,5000,6000,7000}
mkdir -p "$OUT" "$RES"
exec > >(tee "$OUT/log.txt") 2>&1
source bench/gpu_host_env.sh
if [[ ! -x build-gpu/metalserve || ! -f build-gpu/models/resnet50.pt ]]; then
  mkdir -p build-gpu/models
  gpu_build_while_exporting --out build-gpu/models --only resnet50 -- metalserve metalserve-bench ||
    exit 1
fi
SIZES=1,2,4,8,16,24,32,48,64,96,128,192,256
if [[ ${SKIP_TARGET:-0} != 1 ]]; then
  python3 bench/run.py --build=build-gpu --model=resnet50 --device=cuda --threads=8 --optimize=auto \
    --max_batch_size=256 --allowed_batch_sizes=$SIZES \
    --duration=${DURATION:-3} --warmup=${WARMUP:-1} --rounds=2 --bench_args=--connections=8 \
    --policies=fixed:2ms,target:50ms --rates="$RATES" \
    --host_label=h200 --tag=target4s --out="$RES"
  echo "run.py rc=$?"
  stamp "target measured"
fi
# Start-up: each set-up's first start with an empty cache folder, then two
# cached starts.
startup() {  # LABEL FLAGS...
  local label=$1; shift
  local cache=/tmp/startup-cache-$label
  rm -rf "$cache"
  for run in first cached cached; do
    echo "== start-up $label $run: $*"
    BUILD=build-gpu bash bench/startup_time.sh "$cache" --model=build-gpu/models/resnet50.pt \
      --device=cuda "$@" | grep -E "ready_s|verified|skipped|warmed up|built "
  done
}
startup default
startup default_nobench --cudnn_benchmark=false
startup sizes13 --max_batch_size=256 --allowed_batch_sizes=$SIZES
startup sizes13_nobench --max_batch_size=256 --allowed_batch_sizes=$SIZES --cudnn_benchmark=false
stamp "start-up measured"
uptime
ls "$RES"
