#!/usr/bin/env bash
# Two open measurements of issue 20 on the GPU host (shared/gpu-host/README.md's
# recipe, .devtools/ and .devdeps/ in the tree):
#
#   PART=c1 (default): ResNet-50 fp32 on CUDA at concurrency 1 against its raw
#     batch-1 forward both back to back and after 1 ms idle
#     (`bench/run.py --raw_gap_us=1000`), beside the transport floor
#     (`--transport`), ROUNDS runs (default 1). Splits the c=1 overhead into the
#     idle gap's share and the server's.
#   PART=buffers: the Unix-socket buffers on this host: its
#     net.core.wmem_max/rmem_max, then bench/transport.py at 602 KB
#     (concurrency 8, echo and null runner, TCP and socket) with the 1 MiB
#     default (asked with SO_SNDBUFFORCE first) against 212,992 bytes (a stock
#     cap), alternating, ROUNDS rounds (default 2). Each run prints the buffers
#     the servers were granted.
#
# Set SKIP_BUILD=1 when build-gpu and its models exist. Results and the log
# under $OUT (default /tmp/c1-split-out). Loopback only.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/c1-split-out}
PART=${PART:-c1}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log-$PART.txt") 2>&1
source bench/gpu_host_env.sh
gpu_build_resnet50 metalserve metalserve-bench runtime_bench echo_server || exit 1
if [[ $PART == c1 ]]; then
  for r in $(seq "${ROUNDS:-1}"); do
    python3 bench/run.py --build=build-gpu --models_dir=build-gpu/models --model=resnet50 \
      --device=cuda --threads=8 --optimize=auto --batches=1 --sweep=1 --max_batch_size=256 \
      --allowed_batch_sizes=1,2,4,8,16,24,32,48,64,96,128,192,256 --duration=3 --warmup=1 \
      --raw_min_time=1 --raw_gap_us=1000 --transport --host_label=h200 --out="$OUT" \
      --tag="c1-split-r$r" 2>&1 | grep -v "^runtime: warmed up"
    stamp "c1 round $r"
  done
else
  sysctl net.core.wmem_max net.core.rmem_max 2>/dev/null ||
    cat /proc/sys/net/core/wmem_max /proc/sys/net/core/rmem_max
  capped=(--server_arg=--unix_socket_buffer_bytes=212992 --echo_arg=--unix_socket_buffer_bytes=212992
          --bench_arg=--unix_socket_buffer_bytes=212992)
  for r in $(seq "${ROUNDS:-2}"); do
    for v in default capped; do
      echo "round $r: $v"
      extra=()
      [[ $v == capped ]] && extra=("${capped[@]}")
      python3 bench/transport.py --build=build-gpu --payloads=build-gpu/models/resnet50.json \
        --threads=8 --servers=echo,null --concurrency=8 --duration=4 "${extra[@]}" \
        --json="$OUT/buffers-$v-$r.json"
      stamp "round $r $v"
    done
  done
fi
uptime
