#!/usr/bin/env bash
# Runs a libFuzzer binary for a bounded time over a copy of the committed seed
# corpus, then reports executions and crashes. Exit 0 only when it ran and
# found nothing.
#
#   run_fuzzer.sh FUZZER_BINARY CORPUS_DIR SECONDS
set -uo pipefail
fuzzer=$1 corpus=$2 seconds=${3:-60}
work=$(mktemp -d "${TMPDIR:-/tmp}/metalserve_fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/artifacts"
cp "$corpus"/* "$work/corpus/"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:detect_odr_violation=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
"$fuzzer" "$work/corpus" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -max_len=4096 -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
  >"$work/log" 2>&1
rc=$?
runs=$(grep -o 'Done [0-9]* runs' "$work/log" | grep -o '[0-9]*' | tail -1)
[[ -n $runs ]] || runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/log" | grep -o '[0-9]*$' | tail -1)
crashes=$(find "$work/artifacts" -type f | wc -l)
corpus_size=$(find "$work/corpus" -type f | wc -l)
echo "fuzz: $(basename "$fuzzer") ran ${runs:-0} executions in ${seconds} s, corpus $(ls "$corpus" | wc -l) -> ${corpus_size} inputs, crashes: ${crashes}, exit ${rc}"
if (( rc != 0 || crashes > 0 )); then
  tail -n 60 "$work/log"
  for f in "$work/artifacts"/*; do [[ -f $f ]] && { echo "artifact $f:"; od -A d -t x1 "$f" | head -20; }; done
  exit 1
fi
[[ -n ${runs:-} && ${runs} -gt 0 ]] || { echo "fuzz: no executions reported"; tail -n 30 "$work/log"; exit 1; }
