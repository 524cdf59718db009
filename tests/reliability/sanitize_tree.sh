#!/usr/bin/env bash
# Configures and builds a torch-free sanitizer tree of just the torch-free
# test targets, then runs each test binary. Used by ctest (sanitizer label).
#
#   sanitize_tree.sh SOURCE_DIR TREE_DIR address|thread [build|run|all]
#
# address: clang++, ASan + UBSan (the same tree builds the libFuzzer target).
# thread:  clang++, TSan; absl::Mutex made visible to TSan by
#          tsan_absl_mutex.cc (linked in by tests/reliability/CMakeLists.txt), and tests/reliability/tsan.supp for reports
#          inside the uninstrumented system gRPC/protobuf libraries.
set -euo pipefail
src=$1 tree=$2 mode=$3 step=${4:-all}
jobs=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
cxx=${METALSERVE_SANITIZER_CXX:-clang++}
command -v "$cxx" >/dev/null || cxx=clang++-14

tests=(batcher_test service_test client_histogram_test client_util_test
       client_loadgen_test client_cli_test reliability_test transport_test tls_test
       repository_test device_thread_test)
targets=("${tests[@]}")
[[ $mode == address ]] && targets+=(request_fuzzer rest_request_fuzzer)

if [[ $step == build || $step == all ]]; then
  cmake -S "$src" -B "$tree" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
    -DMETALSERVE_WITH_TORCH=OFF -DMETALSERVE_BUILD_BENCH=OFF \
    -DMETALSERVE_SANITIZE="$mode" >/dev/null
  start=$(date +%s)
  cmake --build "$tree" -j"$jobs" --target "${targets[@]}"
  echo "sanitize_tree: built ${#targets[@]} targets ($mode) in $(( $(date +%s) - start )) s"
fi

if [[ $step == run || $step == all ]]; then
  here=$(cd "$(dirname "$0")" && pwd)
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:detect_odr_violation=0}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=0:exitcode=66:second_deadlock_stack=1:suppressions=$here/tsan.supp}
  # A sanitizer report fails the run, and so does any failed assertion,
  # except in the binaries listed below, whose failed cases (with no
  # sanitizer report) are re-run once alone and fail the run only if they
  # fail again; such retries are listed. None is listed: the load
  # generator's timing tests run on a simulated clock and the
  # metalserve-bench tests assert counts only, so a slow sanitized run
  # changes none of their results. List a binary here only for a test that
  # must measure real time.
  retry_ok=" "
  report_re='ERROR: AddressSanitizer|ERROR: LeakSanitizer|WARNING: ThreadSanitizer|runtime error:'
  failed=() retried=()
  log=$(mktemp)
  for t in "${tests[@]}"; do
    bin=$(find "$tree/tests" -type f -name "$t" -perm -u+x | head -1)
    if [[ -z $bin ]]; then echo "sanitize_tree: $t not built"; failed+=("$t"); continue; fi
    echo "=== $mode: $t"
    if (cd "$(dirname "$bin")" && timeout 600 "$bin" --gtest_brief=1) >"$log" 2>&1; then
      cat "$log"; continue
    fi
    cat "$log"
    if grep -qE "$report_re" "$log"; then failed+=("$t (sanitizer report)"); continue; fi
    cases=$(grep -oE '^\[  FAILED  \] [A-Za-z0-9_/.]+ \(' "$log" | awk '{print $4}' | paste -sd: -)
    if [[ -z $cases || $retry_ok != *" $t "* ]]; then failed+=("$t"); continue; fi
    echo "=== $mode: $t: re-running $cases once"
    if (cd "$(dirname "$bin")" && timeout 600 "$bin" --gtest_brief=1 --gtest_filter="$cases") >"$log" 2>&1 \
        && ! grep -qE "$report_re" "$log"; then
      retried+=("$cases")
    else
      cat "$log"; failed+=("$t")
    fi
  done
  # The gRPC cases again with Predict and ModelInfer served through
  # completion queues (--grpc_api=async): their own threads and shutdown.
  for t in service_test reliability_test; do
    bin=$(find "$tree/tests" -type f -name "$t" -perm -u+x | head -1)
    [[ -z $bin ]] && continue
    echo "=== $mode: $t (grpc_api=async)"
    if (cd "$(dirname "$bin")" && METALSERVE_TEST_GRPC_API=async timeout 600 "$bin" \
          --gtest_brief=1 --gtest_filter='ServiceTest.*:ClientViewTest.*:ReliabilityTest.*:AsyncServiceTest.*') \
        >"$log" 2>&1; then
      cat "$log"
    else
      cat "$log"; failed+=("$t (grpc_api=async)")
    fi
  done
  rm -f "$log"
  (( ${#retried[@]} )) && echo "sanitize_tree: $mode: passed only on retry: ${retried[*]}"
  if (( ${#failed[@]} )); then
    echo "sanitize_tree: $mode FAILED: ${failed[*]}"
    exit 1
  fi
  echo "sanitize_tree: $mode clean: ${tests[*]}"
fi
