#!/usr/bin/env bash
# Seconds from launch to the server's "ready: gRPC on" log line, with the load
# phases it logged; the server is stopped at once. Run it twice with the same
# cache folder to compare a first start with a cached one:
#
#   rm -rf /tmp/vcache
#   bench/startup_time.sh /tmp/vcache                     # first start
#   bench/startup_time.sh /tmp/vcache                     # verification cached
#   bench/startup_time.sh none                            # no cache
#
# Usage: [BUILD=build-gpu] bench/startup_time.sh CACHE_DIR [extra metalserve flags]
# (default model $BUILD/models/resnet18.pt on --device=cpu; later flags win;
# BUILD defaults to build).
set -euo pipefail
cd "$(dirname "$0")/.."
cache=$1
shift
log=$(mktemp)
start=$(date +%s.%N)
build=${BUILD:-build}
"$build"/metalserve --model="$build"/models/resnet18.pt --device=cpu \
  --address=127.0.0.1:0 --metrics_address=127.0.0.1:0 --cache_dir="$cache" "$@" >"$log" 2>&1 &
pid=$!
until grep -q "ready: gRPC on" "$log"; do
  kill -0 "$pid" 2>/dev/null || { cat "$log"; rm -f "$log"; exit 1; }
  sleep 0.05
done
end=$(date +%s.%N)
kill "$pid"
wait "$pid" 2>/dev/null || true
python3 -c "print(f'ready_s={$end - $start:.2f}')"
grep -E "loaded |signature checked|SHA-256|built |verified|rejected|warmed up" "$log" | sed 's/^.*\] //'
rm -f "$log"
