#!/usr/bin/env bash
# Issue 18's reload-under-load measurement on the GPU host
# (shared/gpu-host/README.md's recipe: run from the repository root with
# .devtools/ and .devdeps/ in the tree). Builds build-gpu (metalserve,
# metalserve-bench, metalservectl), exports a model repository with MODELS
# (default resnet50) beside it, then runs bench/reload.py for each: KServe
# gRPC at concurrency 32 for DURATION (default 40 s: a ResNet-50 load,
# verified and warmed up at batch 1 and 64, takes seconds, and the five
# loads must end inside the run) steady, then as long while versions 2..6 are
# loaded one by one on the same device (each verifies and warms up beside
# the serving version, then traffic switches and the old one drains).
# JSON (h200-<date>-reload-<model>.json), the servers' logs and this log
# under $OUT (default /tmp/reload-out).
#
# Wall time, about 2 minutes per model after the build: the server's first
# load and two 41 s runs (reload.py turns the verification cache off, so
# every load verifies).
#   bash bench/reload_h200.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/reload-out}
MODELS=${MODELS:-resnet50}
FLAGS=${FLAGS:---device=cuda --threads=8 --max_batch_size=64 --executors=2 --device_concurrency=2}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
source bench/gpu_host_env.sh
gpu_build_while_exporting --repository build-gpu/model_repository --only "$MODELS" -- \
  metalserve metalserve-bench metalservectl || exit 1
date=$(date +%F)
for model in ${MODELS//,/ }; do
  python3 bench/reload.py --build=build-gpu --repository=build-gpu/model_repository \
    --model="$model" --concurrency=32 --duration=${DURATION:-40s} --reloads=5 --server_flags="$FLAGS" \
    --host_label=h200 --output="$OUT/h200-$date-reload-$model.json"
  echo "reload.py $model rc=$?"
  stamp "measured $model"
done
uptime
ls "$OUT"
