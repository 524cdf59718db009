#!/usr/bin/env bash
# One run on the GPU host (shared/gpu-host/README.md's recipe): builds with
# AOTInductor, runs the C++ loader probe, the served-package test, exports
# ResNet-50 (TorchScript and packages) and measures TorchScript against
# AOTInductor (bench/aoti_compare.py). Logs under $OUT (default /tmp/aoti-out).
#   bash bench/aoti_h200.sh
set -uo pipefail
OUT=${OUT:-/tmp/aoti-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
source bench/gpu_host_env.sh
mkdir -p build-gpu/models /tmp/x16
# Background jobs are waited for by pid: a bare `wait` also waits for the
# tee above (a process substitution), which never ends.
jobs_=()
(bench/aoti_probe/run_probe.sh /tmp/probe cuda,cpu tiny > "$OUT/probe.txt" 2>&1) &
jobs_+=($!)
(python3 models/export.py --out build-gpu/models --only resnet50 --format=pt2 --devices=cuda \
   > "$OUT/export.txt" 2>&1 || echo "export fp32 FAILED" >> "$OUT/export.txt") &
jobs_+=($!)
(python3 models/export.py --out /tmp/x16 --only resnet50 --format=pt2 --devices=cuda \
   --precision=fp16 --channels_last > "$OUT/export16.txt" 2>&1 &&
   mv /tmp/x16/resnet50.cuda.fp16.cl.pt2 build-gpu/models/ ||
   echo "export fp16 FAILED" >> "$OUT/export16.txt") &
jobs_+=($!)
# The client without libcurl: the unpacked Debian libcurl names libraries
# the host lacks (docs/operations.md).
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DMETALSERVE_BUILD_TESTS=OFF -DMETALSERVE_HTTP_CLIENT=OFF \
  -DMETALSERVE_PYTHON=$(command -v python3) $GPU_CMAKE_ARGS > "$OUT/cmake.txt" 2>&1
grep "AOTInductor runner" "$OUT/cmake.txt"
grep -q "AOTInductor runner: on" "$OUT/cmake.txt" || { wait "${jobs_[@]}"; echo "runner off: stopping"; exit 1; }
cmake --build build-gpu -j16 --target metalserve metalserve-bench runtime_bench \
  > "$OUT/build.txt" 2>&1 || { grep -E "error|Error" "$OUT/build.txt" | head -30; }
stamp "built"
python3 tests/runtime/aoti_serve_test.py --build build-gpu --aoti ON -v > "$OUT/serve_test.txt" 2>&1
echo "aoti_serve_test rc=$?"; tail -5 "$OUT/serve_test.txt"
stamp "served-package test done"
wait "${jobs_[@]}"
stamp "exports done"; grep -h "exported\|FAILED\|Error" "$OUT"/export*.txt
grep -v "^  meta" "$OUT/probe.txt" | grep -E "torch|loaded|batch|rc=|FAILED|rror"
python3 bench/aoti_compare.py --build=build-gpu --model=resnet50 --device=cuda \
  --variants=${VARIANTS:-ts-fp32,aoti-fp32,ts-fp16cl,aoti-fp16cl} --batches=1,32,256 \
  --allowed_batch_sizes=${ALLOWED:-1,2,4,8,16,32,64,128,256} ${COMPARE_ARGS:-} \
  --json="$OUT/aoti-compare.json"
stamp "measured"
grep -h "verified against\|does not match\|AOTInductor package\|load_ms" build-gpu/aoti-compare/server-*.log | cut -c1-400
cp build-gpu/aoti-compare/server-aoti-fp32.log "$OUT/" 2>/dev/null
