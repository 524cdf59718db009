#!/usr/bin/env bash
# Where a concurrency-1 ResNet-50 request's time goes on the GPU host, by
# the server's own per-request timers: an unbatched server (as bench/run.py
# starts it) with --access_log, one metalserve-bench client at c=1, then the
# medians of the access log's queue_us, compute_us (RunBatch's wall time:
# staging copy, hand-off to the device thread, H2D, forward, D2H, outputs)
# and total_us (arrival to answer), and the runner's own split of compute
# (metalserve_compute_stage_seconds_total: assemble, wait, device, outputs;
# means per batch over the run, the client's warm-up included; the null
# runner times none and says so) beside the
# client's p50, the echo
# server's c=1 p50 (gRPC alone) and the raw batch-1 forward back to back and
# after 500 us idle (runtime_bench --gap_us). The same for the null runner
# (no model work). ROUNDS rounds (default 2). On the GPU host
# (shared/gpu-host/README.md's recipe, .devtools/ and .devdeps/ in the tree):
#
#   bash bench/c1_stages_h200.sh
#
# Set SKIP_BUILD=1 when build-gpu and its models exist. MODEL_VARIANTS
# (default one, empty: the server as above) lists, separated by ";", extra
# server flags for the model server, each variant served in turn in every
# round, e.g. MODEL_VARIANTS="--staging_buffers=0;--staging_buffers=2";
# METALSERVE names another server binary for all of them (a build before a
# change). ECHO_ANSWER_AFTER (default 1500us; empty: none) runs the echo
# server a second time answering each call that long after it arrived
# (echo_server --answer_after): the floor of a call whose server sleeps
# through a forward, p50 less the delay less how late its answers were.
# Log and access logs under $OUT (default /tmp/c1-stages-out). Loopback
# only.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/c1-stages-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
source bench/gpu_host_env.sh
gpu_build_resnet50 metalserve metalserve-bench runtime_bench echo_server || exit 1
bench=(build-gpu/metalserve-bench --concurrency=1 --input=random --output=json --progress=off)
p50() { python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["runs"][0]; print("%.3f" % (r["latency_us"]["p50"] / 1e3))' "$1"; }
stages() {  # stages ACCESS_LOG: the medians past the client's 1 s warm-up
  python3 - "$1" <<'PY'
import datetime, re, statistics, sys
rows = [dict(re.findall(r"(\w+)=(\S+)", l)) | {"t": l.split()[0]} for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if r.get("code") == "OK"]
when = lambda r: datetime.datetime.fromisoformat(r["t"].rstrip("Z"))
if rows:
    start = when(rows[0])
    rows = [r for r in rows if (when(r) - start).total_seconds() >= 1.2]
if not rows:
    sys.exit("  no OK requests past the warm-up in the access log")
def med(k): return statistics.median(int(r[k]) for r in rows) / 1e3
q, c, t = med("queue_us"), med("compute_us"), med("total_us")
print(f"  server stages, median of {len(rows)}: queue {q:.3f} ms, compute {c:.3f} ms,"
      f" total {t:.3f} ms (total - queue - compute {t - q - c:.3f} ms)")
PY
}
ready() {  # ready PID LOG: waits up to 120 s for the ready line while PID lives
  for _ in $(seq 240); do
    grep -q "ready: gRPC" "$2" && return 0
    kill -0 "$1" 2>/dev/null || return 1
    sleep 0.5
  done
  return 1
}
stop() {  # stop PID: SIGTERM, SIGKILL after 30 s
  kill "$1" 2>/dev/null
  for _ in $(seq 60); do kill -0 "$1" 2>/dev/null || break; sleep 0.5; done
  kill -9 "$1" 2>/dev/null
  wait "$1" 2>/dev/null
}
compute_stages() {  # compute_stages METRICS_PORT: the runner's stage means per batch so far
  python3 - "$1" <<'PY'
import re, sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=10).read().decode()
def total(name, label=""):
    return sum(float(m.group(1)) for m in re.finditer(
        rf'^{name}{{[^}}]*{label}[^}}]*}} (\S+)$', text, re.M))
n = total("metalserve_compute_stage_batches_total")
if not n:
    sys.exit("  no timed batches in /metrics")
parts = []
for s in ("assemble", "wait", "device", "outputs"):
    label = 'stage="%s"' % s
    parts.append("%s %.3f" % (s, 1e3 * total("metalserve_compute_stage_seconds_total", label) / n))
compute = total("metalserve_compute_duration_seconds_sum") / max(1, total("metalserve_compute_duration_seconds_count"))
print(f"  runner stages, mean of {n:.0f} batches (ms): {', '.join(parts)};"
      f" the executor's whole batch, answers included, {1e3 * compute:.3f}")
PY
}
serve() {  # serve LABEL MODEL_ARG [FLAG...]: prints the client's p50 and the stages
  local label=$1 model=$2 port mport tag=${1//[^A-Za-z0-9_=.-]/_}
  local log=$OUT/access-$tag-$r.log
  shift 2
  read -r port mport < <(free_port 2)
  rm -f "$log" "$OUT/server-$tag.log"
  "${METALSERVE:-build-gpu/metalserve}" --model="$model" --address=127.0.0.1:$port --metrics_address=127.0.0.1:$mport \
    --http_address= --device=cuda --threads=8 --precision=fp32 --optimize=auto \
    --max_batch_size=1 --monitor_log_interval=0 --access_log="$log" "$@" > "$OUT/server-$tag.log" 2>&1 &
  local pid=$!
  if ! ready "$pid" "$OUT/server-$tag.log"; then
    echo "$label: not ready"; tail -5 "$OUT/server-$tag.log"; stop "$pid"; return 1
  fi
  "${bench[@]}" --target=127.0.0.1:$port --duration=4s --warmup=1s > "$OUT/c.json" ||
    { echo "$label: client failed"; tail -5 "$OUT/server-$tag.log"; stop "$pid"; return 1; }
  local runner_stages
  runner_stages=$(compute_stages "$mport" 2>&1)
  stop "$pid"
  echo "$label: client p50 $(p50 "$OUT/c.json") ms"
  stages "$log"
  echo "$runner_stages"
}
for r in $(seq "${ROUNDS:-2}"); do
  echo "== round $r"
  port=$(free_port)
  rm -f "$OUT/echo.log"
  build-gpu/bench/transport/echo_server --signature=build-gpu/models/resnet50.json \
    --address=127.0.0.1:$port > "$OUT/echo.log" 2>&1 &
  echo_pid=$!
  if ready "$echo_pid" "$OUT/echo.log" &&
     "${bench[@]}" --target=127.0.0.1:$port --duration=4s --warmup=1s > "$OUT/c.json"; then
    echo "echo: client p50 $(p50 "$OUT/c.json") ms"
  else
    echo "echo: failed"; tail -5 "$OUT/echo.log"
  fi
  stop "$echo_pid"
  if [[ -n ${ECHO_ANSWER_AFTER-1500us} ]]; then
    port=$(free_port)
    rm -f "$OUT/echo-after.log"
    build-gpu/bench/transport/echo_server --signature=build-gpu/models/resnet50.json \
      --address=127.0.0.1:$port --answer_after="${ECHO_ANSWER_AFTER-1500us}" > "$OUT/echo-after.log" 2>&1 &
    echo_pid=$!
    if ready "$echo_pid" "$OUT/echo-after.log" &&
       "${bench[@]}" --target=127.0.0.1:$port --duration=4s --warmup=1s > "$OUT/c.json"; then
      stop "$echo_pid"
      echo "echo answering after ${ECHO_ANSWER_AFTER-1500us}: client p50 $(p50 "$OUT/c.json") ms;" \
        "$(grep "^answer_after:" "$OUT/echo-after.log")"
    else
      stop "$echo_pid"; echo "echo answering after ${ECHO_ANSWER_AFTER-1500us}: failed"; tail -5 "$OUT/echo-after.log"
    fi
  fi
  serve null null:build-gpu/models/resnet50.json
  IFS=';' read -r -a variants <<< "${MODEL_VARIANTS-}"
  [[ ${#variants[@]} -gt 0 ]] || variants=("")
  for v in "${variants[@]}"; do
    read -r -a flags <<< "$v"
    serve "model${v:+ $v}" build-gpu/models/resnet50.pt ${flags[@]+"${flags[@]}"}
  done
  for g in 0 500; do
    build-gpu/bench/runtime/runtime_bench --device=cuda --threads=8 --models=resnet50 \
      --levels=full --batches=1 --precision=fp32 --channels_last=0 --gap_us=$g \
      --benchmark_min_time=1.0 2>&1 | grep "^Forward" | sed "s/^/raw gap_us=$g: /"
  done
  stamp "round $r"
done
uptime
