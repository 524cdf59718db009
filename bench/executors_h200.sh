#!/usr/bin/env bash
# Executor threads and device slots against the H200's per-request ceiling
# (issue 20's lead, docs/performance.md), on the GPU host
# (shared/gpu-host/README.md's recipe: run from the repository root with
# .devtools/ and .devdeps/ in the tree):
#
#   1. ResNet-50 fp32 on CUDA, bench/executors.sh with the E:D pairs PAIRS
#      (default "2:2 4:4 8:8") at concurrency 64 and 256, ROUNDS rounds
#      (default 2) of 5 s, the pairs in turn inside each round;
#   2. the null runner (zeros, no model work, 602 KB requests) at
#      concurrency 256 with NULL_PAIRS (default "2:2 8:8"): the host side of
#      a batch (gather, answers) without a device.
#
# Logs under $OUT (default /tmp/executors-out), and the runs as JSON
# ($OUT/executors.json, bench/pipeline_json.py) for bench/results.
#   bash bench/executors_h200.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/executors-out}
ROUNDS=${ROUNDS:-2}
PAIRS=${PAIRS:-"2:2 4:4 8:8"}
NULL_PAIRS=${NULL_PAIRS:-"2:2 8:8"}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
source bench/gpu_host_env.sh
gpu_build_while_exporting --out build-gpu/models --only resnet50 -- metalserve metalserve-bench ||
  exit 1
[[ -f build-gpu/models/resnet50.pt ]] || { echo "no build-gpu/models/resnet50.pt: stopping"; exit 1; }
flags="--device=cuda --threads=8 --max_batch_size=256 --allowed_batch_sizes=1,8,32,64,128,256"
bash bench/executors.sh build-gpu build-gpu/models/resnet50.pt "$flags" "64 256" "$PAIRS" "$ROUNDS" 5
stamp "resnet50 done"  # bench/pipeline_json.py names the runs' model from these
bash bench/executors.sh build-gpu null:build-gpu/models/resnet50.json \
  "--threads=8 --max_batch_size=256" "256" "$NULL_PAIRS" "$ROUNDS" 5
stamp "null done"
uptime
python3 bench/pipeline_json.py --log="$OUT/log.txt" --out="$OUT/executors.json" \
  --command=bench/executors_h200.sh --env="PAIRS=\"$PAIRS\" NULL_PAIRS=\"$NULL_PAIRS\" ROUNDS=$ROUNDS"
