#!/usr/bin/env bash
# ResNet-50 served against its raw forward in each input precision, side by
# side in one run on the GPU host (issue 20's rows; shared/gpu-host/README.md's
# recipe, .devtools/ and .devdeps/ in the tree): bench/run.py once per
# VARIANTS entry (default fp32, fp16 channels-last, uint8 input), each with
# the same server flags (the batching default, --allowed_batch_sizes as
# below) and the same client sweep SWEEP (default 1,64,256,512), writing
# one results JSON and plot per variant under $OUT (default
# /tmp/precision-out) with the whole log in $OUT/log.txt.
#
#   bash bench/precision_h200.sh
#   VARIANTS="fp16cl|--model=resnet50 --precision=fp16 --channels_last" \
#     bash bench/precision_h200.sh
#
# The device tool brings back only a few files from its $OUT: there, set
# OUT to a folder of its own and TAR to a file under the tool's $OUT, and the
# results (plots left out) come back as one archive.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/precision-out}
SWEEP=${SWEEP:-1,64,256,512}
TAG=${TAG:-prec}
VARIANTS=${VARIANTS:-"fp32|--model=resnet50;fp16cl|--model=resnet50 --precision=fp16 --channels_last;u8|--model=resnet50_u8"}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
source bench/gpu_host_env.sh
gpu_build_while_exporting --out build-gpu/models --only resnet50,resnet50_u8 -- \
  metalserve metalserve-bench runtime_bench || exit 1
IFS=';' read -r -a variants <<< "$VARIANTS"
for v in "${variants[@]}"; do
  label=${v%%|*} flags=${v#*|}
  echo "== $label"
  # shellcheck disable=SC2086  # flags are words
  python3 bench/run.py --build=build-gpu --models_dir=build-gpu/models --device=cuda --threads=8 \
    --optimize=auto --batches=1,64,256 --sweep="$SWEEP" --max_batch_size=256 \
    --allowed_batch_sizes=1,2,4,8,16,24,32,48,64,96,128,192,256 --duration=3 --warmup=1 \
    --raw_min_time=0.5 --bench_args=--connections=8 --host_label=h200 --out="$OUT" \
    --tag="$TAG-$label" $flags 2>&1 | grep -v "^runtime: warmed up"
  stamp "$label"
done
uptime
if [[ -n ${TAR:-} ]]; then
  tar czf "$TAR" --exclude='*.png' --exclude=.work -C "$(dirname "$OUT")" "$(basename "$OUT")"
fi
