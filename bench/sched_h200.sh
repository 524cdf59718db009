#!/usr/bin/env bash
# Issue 19's policy comparison on the GPU host (shared/gpu-host/README.md's
# recipe: run from the repository root with .devtools/ and .devdeps/ in the
# tree). Builds build-gpu (metalserve and metalserve-bench only), exports
# ResNet-50 as TorchScript alongside the build, then measures with
# bench/run.py, ResNet-50 fp32 on cuda: unbatched, fixed 0/1/2/5 ms,
# adaptive (5 ms bound) and a 50 ms latency target, concurrency 1, 64 and
# 256, the policies interleaved over 2 rounds (each level's median round).
# JSON (h200-<date>-resnet50-sched-policies.json), server logs (.work/) and
# this log under $OUT (default /tmp/sched-out).
#
# Wall time, about 8 minutes: build ~3 min (the export runs beside it);
# measuring ~5 min = 14 server starts (~25 s the first, ~5 s each once the
# verification cache holds the verdict) + 42 levels of ~4.5 s (--duration=3
# --warmup=1 plus the client's start).
#   bash bench/sched_h200.sh
# SWEEP, ROUNDS, POLICIES and TAG override the concurrency levels, rounds,
# policies and results tag, e.g. one level with more rounds:
#   SWEEP=64 ROUNDS=3 POLICIES=fixed:0ms,fixed:1ms,adaptive:5ms TAG=c64 bash bench/sched_h200.sh
# VARIANTS measures candidate versions of one source file (VARIANT_OF)
# against the tree's in the same run: each FILE in VARIANTS is built in its
# place into build-gpu/metalserve-NAME (NAME: the file's name without .cc),
# the tree's file is built back last, and POLICIES names the binaries with
# @ (bench/policies.py), e.g.
#   VARIANT_OF=server/batcher/adaptive_policy.cc VARIANTS="ab/lead3.cc" \
#   POLICIES=fixed:1ms,adaptive:2ms,adaptive:2ms@build-gpu/metalserve-lead3 bash bench/sched_h200.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/sched-out}
# Results (JSON, plot) and the servers' logs and metrics (.work/) go to RES;
# the results are copied to OUT at the end.
RES=${RES:-/tmp/sched-res}
mkdir -p "$RES"
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
source bench/gpu_host_env.sh
mkdir -p build-gpu/models
gpu_build_while_exporting --out build-gpu/models --only resnet50 -- metalserve metalserve-bench ||
  exit 1
[[ -f build-gpu/models/resnet50.pt ]] || { echo "no build-gpu/models/resnet50.pt: stopping"; exit 1; }
if [[ -n ${VARIANTS:-} ]]; then
  cp "$VARIANT_OF" "$RES/tree-source.cc"
  for v in $VARIANTS; do
    cp "$v" "$VARIANT_OF"
    cmake --build build-gpu -j16 --target metalserve >> "$OUT/build.txt" 2>&1 ||
      { cp "$RES/tree-source.cc" "$VARIANT_OF"; echo "variant $v: build failed"; exit 1; }
    cp build-gpu/metalserve "build-gpu/metalserve-$(basename "$v" .cc)"
  done
  cp "$RES/tree-source.cc" "$VARIANT_OF"
  cmake --build build-gpu -j16 --target metalserve >> "$OUT/build.txt" 2>&1 || exit 1
  stamp "variants built: $VARIANTS"
fi
python3 bench/run.py --build=build-gpu --model=resnet50 --device=cuda --threads=8 --optimize=auto \
  --max_batch_size=256 --allowed_batch_sizes=1,2,4,8,16,24,32,48,64,96,128,192,256 \
  --sweep=${SWEEP:-1,64,256} --duration=${DURATION:-3} --warmup=${WARMUP:-1} --rounds=${ROUNDS:-2} \
  --bench_args=--connections=8 \
  --policies=${POLICIES:-unbatched,fixed:0ms,fixed:1ms,fixed:2ms,fixed:5ms,adaptive:5ms,target:50ms} \
  --host_label=h200 --tag=${TAG:-sched} --out="$RES"
echo "run.py rc=$?"
stamp "measured"
# The batches each policy closed and why (the last round's servers).
grep -H "batches_total\|batch_size_rows_sum\|batch_size_rows_count" "$RES"/.work/metrics-*.prom \
  2>/dev/null | grep -v ":#" | grep -v " 0$" | head -80
uptime
cp "$RES"/*.json "$RES"/*.png "$OUT"/ 2>/dev/null
ls "$OUT"
