#!/usr/bin/env bash
# Where a served batch pipeline loses the H200's throughput: ResNet-50 fp32
# on CUDA at concurrency 64 and 256 under several batching set-ups, each a
# fresh server load-tested by one metalserve-bench (bench/client_scaling.sh
# with BATCH_STATS=1: req/s, worst p99, server CPU per request, and over
# the timed run the batches' mean rows, padding, close reasons and the
# device's busy share). The set-ups run in turn inside each of ROUNDS
# rounds (default 2), so drift falls on all of them. On the GPU host
# (shared/gpu-host/README.md's recipe, .devtools/ and .devdeps/ in the tree):
#
#   bash bench/pipeline_h200.sh
#   SETUPS="adaptive|--batching=adaptive;fixed2|--batching=fixed --max_queue_delay=2ms" \
#     CONCS="256" bash bench/pipeline_h200.sh
#
# Logs under $OUT (default /tmp/pipeline-out), and the runs as JSON
# ($OUT/pipeline.json, bench/pipeline_json.py) for bench/results.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/pipeline-out}
ROUNDS=${ROUNDS:-2}
CONCS=${CONCS:-"64 256"}
SETUPS=${SETUPS:-"adaptive|--batching=adaptive;fixed0|--batching=fixed --max_queue_delay=0ms;fixed2|--batching=fixed --max_queue_delay=2ms;fixed5|--batching=fixed --max_queue_delay=5ms"}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
source bench/gpu_host_env.sh
gpu_build_while_exporting --out build-gpu/models --only resnet50 -- metalserve metalserve-bench ||
  exit 1
[[ -f build-gpu/models/resnet50.pt ]] || { echo "no build-gpu/models/resnet50.pt: stopping"; exit 1; }
base="--device=cuda --threads=8 --max_batch_size=256 --allowed_batch_sizes=1,8,32,64,128,256"
IFS=';' read -r -a setups <<< "$SETUPS"
for r in $(seq "$ROUNDS"); do
  for c in $CONCS; do
    for setup in "${setups[@]}"; do
      label=${setup%%|*} flags=${setup#*|}
      printf "round %s c=%s %s: " "$r" "$c" "$label"
      BATCH_STATS=1 bash bench/client_scaling.sh build-gpu build-gpu/models/resnet50.pt \
        "$base $flags" "$c" 1 5
    done
  done
  stamp "round $r"
done
uptime
python3 bench/pipeline_json.py --log="$OUT/log.txt" --out="$OUT/pipeline.json" \
  --command=bench/pipeline_h200.sh --env="SETUPS=\"$SETUPS\" CONCS=\"$CONCS\" ROUNDS=$ROUNDS"
