#!/usr/bin/env bash
# Why two unbatched ResNet-50 servers answered one client at different p50s
# on the H200 (bench/results/h200-2026-12-03-resnet50-c1-transport-log.txt:
# 2.38 ms behind bench/run.py's server, 3.86 ms behind bench/transport.py's,
# same build). The servers differed in their listeners (one TCP address
# against TCP plus a Unix socket) and executors (run.py passes
# --executors=2 --device_concurrency=2; transport.py the default); the
# clients in their warm-up (run.py: --warmup=1s inside the timed run;
# transport.py: 200 requests in a separate run first). Each server variant
# below is measured by both clients, the variants in turn inside each of
# ROUNDS rounds (default 2), so drift falls on all of them. Prints, per
# variant and client, req/s, p50, p99 and the server's CPU per request
# (/proc/PID/stat over the timed run). On the GPU host
# (shared/gpu-host/README.md's recipe, .devtools/ and .devdeps/ in the tree):
#
#   bash bench/c1_gap_h200.sh
#
# Set SKIP_BUILD=1 when build-gpu and build-gpu/models/resnet50.pt exist.
# Log in $OUT/log.txt (default /tmp/c1-gap-out). Loopback only.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/c1-gap-out}
ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-3}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
source bench/gpu_host_env.sh
gpu_build_resnet50 metalserve metalserve-bench || exit 1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# label|listeners (tcp or tcp+uds)|flags
VARIANTS=${VARIANTS:-"tcp-e2|tcp|--executors=2 --device_concurrency=2;tcp-default|tcp|;both-e2|tcp+uds|--executors=2 --device_concurrency=2;both-default|tcp+uds|"}
IFS=';' read -r -a variants <<< "$VARIANTS"
base="--device=cuda --threads=8 --precision=fp32 --optimize=auto --max_batch_size=1"
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
# client NAME PID TARGET: one timed c=1 run, printed with the server's CPU.
client() {
  local name=$1 pid=$2 target=$3 t0 t1
  local bench=(build-gpu/metalserve-bench --target="$target" --concurrency=1 --input=random
               --output=json --progress=off)
  if [[ $name == runpy ]]; then
    # Its warm-up is inside the run: the CPU it reads is not per timed request.
    t0=0
    "${bench[@]}" --duration=${DURATION}s --warmup=1s > "$work/c.json" || return 1
  else
    "${bench[@]}" --requests=200 > /dev/null || return 1
    t0=$(cpu_ticks "$pid")
    "${bench[@]}" --duration=${DURATION}s > "$work/c.json" || return 1
  fi
  t1=$(cpu_ticks "$pid")
  [[ $name == runpy ]] && t1=0
  python3 - "$work/c.json" "$t0" "$t1" "$hz" "$name" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["runs"][0]
t0, t1, hz = map(float, sys.argv[2:5])
n = max(1, r["ok"])
cpu = f"{1e6*(t1-t0)/hz/n:7.1f} us/request" if t1 > 0 else "-"
print(f"client {sys.argv[5]:>9}: {r['requests_per_s']:7.1f} req/s  p50 {r['latency_us']['p50']/1e3:6.3f} ms"
      f"  p99 {r['latency_us']['p99']/1e3:6.3f} ms  server CPU {cpu}")
PY
}
for r in $(seq "$ROUNDS"); do
  for v in "${variants[@]}"; do
    IFS='|' read -r label listeners flags <<< "$v"
    port=$(free_port)
    addr=127.0.0.1:$port
    [[ $listeners == tcp+uds ]] && addr="$addr,unix://$work/s.sock"
    # shellcheck disable=SC2086  # flags are words
    build-gpu/metalserve --model=build-gpu/models/resnet50.pt --address="$addr" --metrics_address= \
      --http_address= --monitor_log_interval=0 $base $flags > "$work/server.log" 2>&1 &
    server=$!
    for _ in $(seq 240); do grep -q "ready: gRPC" "$work/server.log" && break; sleep 0.5; done
    echo "round $r $label ($addr; $flags)"
    if grep -q "ready: gRPC" "$work/server.log"; then
      grep -o "executors=[^ ]*\( ([^)]*)\)\?" "$work/server.log" | head -1
      client runpy "$server" "127.0.0.1:$port"
      client transport "$server" "127.0.0.1:$port"
    else
      tail -5 "$work/server.log"
    fi
    kill "$server"; wait "$server" 2>/dev/null
  done
  stamp "round $r"
done
uptime
