#!/usr/bin/env bash
# An unload gives a device's memory back (issue 18, docs/repository.md
# "Memory admission"), checked on a real device: the macOS workflow's MPS
# job runs it with mps, the GPU host with cuda; on cpu it reads the
# process's resident set instead (integration_unload_memory is the CPU's
# test in the suite).
#
#   tests/integration/unload_device_memory.sh BUILD DEVICE [MODEL]
#
# BUILD/metalserve serves a temporary repository holding identity on DEVICE
# (--model_control=explicit, 127.0.0.1 on free ports). MODEL (default
# resnet18, from BUILD/models) is added, loaded with metalservectl, sent 64
# requests with metalserve-bench, unloaded, and its release awaited. The
# device's reserved memory (metalserve_device_memory_bytes{kind="reserved"}:
# CUDA's caching allocator, MPS's driver allocation) is read from /metrics
# before the load, after the traffic and after the release (identity, still
# on the device, reports it again within a second). Exit 0 when the release
# gave back at least half of what the load and traffic added, 1 when not or
# on any failure (the server's log tail printed). Bounded: every wait has a
# deadline; the server is stopped on exit.
set -euo pipefail
build=${1:?usage: $0 BUILD DEVICE [MODEL]}
device=${2:?usage: $0 BUILD DEVICE [MODEL]}
model=${3:-resnet18}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/metalserve_unload_device.XXXXXX")
pid=
cleanup() {
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; echo "--- server log (tail)"; tail -30 "$tmp/server.log" || true; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

add_model() {  # name: BUILD/models/name.{pt,json} -> repo/name/{1/model.pt,config.json}
  mkdir -p "$tmp/repo/$1/1"
  cp "$build/models/$1.pt" "$tmp/repo/$1/1/model.pt"
  python3 - "$build/models/$1.json" "$tmp/repo/$1/config.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c.pop("version", None)
c.pop("torch_version", None)
json.dump(c, open(sys.argv[2], "w"))
EOF
}
add_model identity
port=$(free_port)
mport=$(free_port)
"$build/metalserve" --model_repository="$tmp/repo" --model_control=explicit --device="$device" \
  --address=127.0.0.1:"$port" --metrics_address=127.0.0.1:"$mport" --http_address= \
  --cache_dir=none --monitor_log_interval=0 --max_batch_size=8 > "$tmp/server.log" 2>&1 &
pid=$!
# python3 rather than curl: a curl beside unpacked libraries (the GPU host's
# recipe) may not start.
scrape() {
  python3 -c 'import sys, urllib.request
try: sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())
except OSError: pass' "http://127.0.0.1:$mport/metrics"
}
# The figure: the device's reserved bytes, or on cpu the resident set.
figure() {
  if [[ "$device" == cpu ]]; then
    scrape | awk '$1 == "metalserve_process_resident_memory_bytes" { printf "%.0f\n", $2 }'
  else
    scrape | awk '$1 ~ /^metalserve_device_memory_bytes\{device="(mps|cuda(:[0-9]+)?)",kind="reserved"\}$/ { printf "%.0f\n", $2; exit }'
  fi
}
wait_until() {  # seconds description command...
  local deadline=$(( $(date +%s) + $1 )) what=$2
  shift 2
  until "$@"; do
    kill -0 "$pid" 2>/dev/null || fail "server exited while waiting for $what"
    (( $(date +%s) < deadline )) || fail "no $what within the deadline"
    sleep 0.2
  done
}
ready() { scrape | grep -q '^metalserve_ready 1'; }
reported() { [[ -n "$(figure)" ]]; }
wait_until 120 "readiness" ready
wait_until 30 "memory figure for $device" reported
before=$(figure)

add_model "$model"
"$build/metalservectl" --server=127.0.0.1:"$port" load "$model" > /dev/null ||
  fail "metalservectl load $model"
"$build/metalserve-bench" --target=127.0.0.1:"$port" --model_name="$model" --requests=64 \
  --concurrency=8 --max_error_rate=0 --progress=off > "$tmp/bench.txt" 2>&1 ||
  { cat "$tmp/bench.txt"; fail "metalserve-bench against $model"; }
sleep 2  # the busy path reports at most once a second; then the idle loops
loaded=$(figure)
[[ -n "$loaded" ]] || fail "no memory figure after the traffic"

"$build/metalservectl" --server=127.0.0.1:"$port" unload "$model" > /dev/null ||
  fail "metalservectl unload $model"
released() { grep -q "released $model version 1" "$tmp/server.log"; }
wait_until 60 "release of $model" released
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
(( loaded > before )) ||
  fail "$device: the load and traffic added nothing to measure ($(mib "$before") -> $(mib "$loaded"))"
# Series are dropped at the release; identity's idle loop reports again.
deadline=$(( $(date +%s) + 30 ))
while :; do
  after=$(figure)
  if [[ -n "$after" ]] && (( (loaded - after) * 2 >= loaded - before )); then break; fi
  (( $(date +%s) < deadline )) || fail "$device: before the load $(mib "$before"), after traffic \
$(mib "$loaded"), after the release $(mib "${after:-0}"): less than half given back"
  sleep 0.2
done
echo "$device: before the load $(mib "$before"), after traffic $(mib "$loaded"), after the release $(mib "$after")"
echo "PASS: the release gave back $(( (loaded - after) * 100 / (loaded - before) ))% of what the load added"
