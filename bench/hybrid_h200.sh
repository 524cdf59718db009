#!/usr/bin/env bash
# Issue 22's hybrid measurement on the GPU host (shared/gpu-host/README.md's
# recipe: run from the repository root with .devtools/ and .devdeps/ in the
# tree). Builds build-gpu (metalserve and metalserve-bench only), exports
# tiny_cnn, lstm_small, mobilenet_v3_small and resnet50 beside it, then
# measures with bench/hybrid.py: each model served --device=cuda,
# --device=cpu and --devices=cuda,cpu, concurrency 1, 16 and 256.
# JSON (h200-<date>-hybrid.json), PNG where matplotlib is installed (else
# `bench/hybrid.py --from_json F` draws it elsewhere), the servers' logs
# (logs/) and this log under $OUT (default /tmp/hybrid-out).
#
# Wall time, about 8 minutes: build ~3 min (the export runs beside it);
# measuring ~5 min = 20 server starts (resnet50's hybrid ~25 s each, a
# start per level) + 36 levels of ~4.5 s (--duration=3 --warmup=1).
#   bash bench/hybrid_h200.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/hybrid-out}
RES=${RES:-/tmp/hybrid-res}
MODELS=${MODELS:-tiny_cnn,lstm_small,mobilenet_v3_small,resnet50}
mkdir -p "$RES" "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
source bench/gpu_host_env.sh
mkdir -p build-gpu/models
gpu_build_while_exporting --out build-gpu/models --only "$MODELS" -- metalserve metalserve-bench ||
  exit 1
# The server logs go to a temporary folder hybrid.py names; TMPDIR puts it under RES.
mkdir -p "$RES/logs"
TMPDIR="$RES/logs" python3 bench/hybrid.py --build=build-gpu --models="$MODELS" --threads=8 \
  --duration=${DURATION:-3} --warmup=${WARMUP:-1} --host_label=h200 --out="$RES"
echo "hybrid.py rc=$?"
stamp "measured"
uptime
cp "$RES"/*.json "$RES"/*.png "$OUT"/ 2>/dev/null
cp -r "$RES/logs" "$OUT"/ 2>/dev/null
ls "$OUT"
