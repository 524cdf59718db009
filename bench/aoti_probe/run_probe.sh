#!/usr/bin/env bash
# On the GPU host: exports the probe packages, builds aoti_probe, runs it.
#   bench/aoti_probe/run_probe.sh OUT_DIR DEVICES [MODELS]
set -uo pipefail
out=$1; devices=$2; models=${3:-tiny,resnet50}
here=$(dirname "$0")
mkdir -p "$out"
python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")'
cmake -S "$here" -B "$out/build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')" >"$out/cmake.log" 2>&1 &&
  cmake --build "$out/build" -j8 >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; echo "probe build FAILED"; }
python3 "$here/export_probe.py" "$out" "$devices" "$models" || echo "export FAILED rc=$?"
declare -A shape=([tiny]="3 8 8" [resnet50]="3 224 224")
declare -A sizes=([tiny]="1,2,7" [resnet50]="1,32,256")
for m in ${models//,/ }; do for d in ${devices//,/ }; do
  [[ -f "$out/${m}_${d}.pt2" ]] || continue
  "$out/build/aoti_probe" "$out/${m}_${d}.pt2" "$d" ${shape[$m]} "$out/${m}_${d}" "${sizes[$m]}"
  echo "aoti_probe $m $d rc=$?"
done; done
