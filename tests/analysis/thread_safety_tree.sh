#!/usr/bin/env bash
# Builds the torch-free targets with clang's thread-safety analysis as an
# error, so a read of an ABSL_GUARDED_BY member without its mutex (or a
# function called without the lock it REQUIRES) fails the suite. Used by
# ctest (label "analysis"); runs nothing.
#
#   thread_safety_tree.sh SOURCE_DIR TREE_DIR
set -euo pipefail
src=$1 tree=$2
jobs=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
cxx=${METALSERVE_ANALYSIS_CXX:-clang++}
command -v "$cxx" >/dev/null || cxx=clang++-14
if ! command -v "$cxx" >/dev/null; then
  echo "thread_safety_tree: no clang++ (scripts/setup installs clang)" >&2
  exit 1
fi

# Every torch-free library and the test helpers; -O0: the analysis runs in
# the front end, so optimising would only cost time.
targets=(metalserve_common metalserve_proto_dtype metalserve_batcher metalserve_cache_policy metalserve_model_signature
         metalserve_device_thread metalserve_repository
         metalserve_metrics metalserve_service metalserve_client
         metalserve_testing metalserve_testing_server)
cmake -S "$src" -B "$tree" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_CXX_FLAGS_DEBUG="-O0" \
  -DCMAKE_CXX_FLAGS="-Wthread-safety -Werror=thread-safety" \
  -DMETALSERVE_WITH_TORCH=OFF -DMETALSERVE_BUILD_BENCH=OFF >/dev/null
start=$(date +%s)
cmake --build "$tree" -j"$jobs" --target "${targets[@]}"
echo "thread_safety_tree: ${#targets[@]} targets clean under -Werror=thread-safety in $(( $(date +%s) - start )) s"
