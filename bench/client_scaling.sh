#!/usr/bin/env bash
# Is the load generator the ceiling? One metalserve-bench process at
# concurrency C against N processes at C/N each, side by side against one
# server, with the server's CPU seconds per request (/proc/PID/stat utime +
# stime over the timed run, every thread counted).
#
#   bench/client_scaling.sh BUILD MODEL_PT "SERVER FLAGS" C "N1 N2 ..." [DURATION_S]
#   bench/client_scaling.sh build-gpu build-gpu/models/resnet50.pt \
#       "--device=cuda --threads=8 --max_batch_size=256" 256 "1 2 4" 5
#
# SERVER_ENV="K=V ..." sets variables in the server's environment only.
# Prints one line per N: total req/s, each process's req/s, the worst p99,
# errors and server CPU us/request. Loopback only; stops by itself.
set -euo pipefail
build=$1 model=$2 flags=$3 conc=$4 counts=$5 dur=${6:-5}
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# shellcheck disable=SC2086
env ${SERVER_ENV:-} "$build/metalserve" --model="$model" --address=127.0.0.1:$port --metrics_address= --http_address= \
  --monitor_log_interval=0 $flags > "$work/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 600); do grep -q "ready: gRPC" "$work/server.log" && break; sleep 0.5; done
grep -q "ready: gRPC" "$work/server.log" || { tail -20 "$work/server.log"; exit 1; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$server/stat"; }
hz=$(getconf CLK_TCK)
# Warm-up at full concurrency, not timed.
"$build/metalserve-bench" --target=127.0.0.1:$port --concurrency=$conc --duration=2s --connections=8 \
  --input=random --progress=off > /dev/null
for n in $counts; do
  per=$(( conc / n ))
  t0=$(cpu_ticks)
  for i in $(seq "$n"); do
    "$build/metalserve-bench" --target=127.0.0.1:$port --concurrency=$per --duration=${dur}s \
      --connections=8 --input=random --seed=$i --output=json --progress=off \
      > "$work/c$n-$i.json" &
  done
  wait $(jobs -p | grep -v "^$server$") 2>/dev/null || true
  t1=$(cpu_ticks)
  python3 - "$work" "$n" "$per" "$t0" "$t1" "$hz" "$dur" <<'PY'
import json, sys
work, n, per, t0, t1, hz = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *map(float, sys.argv[4:7])
rs, p99, err, ok = [], 0.0, 0, 0
for i in range(1, n + 1):
    d = json.load(open(f"{work}/c{n}-{i}.json"))
    lv = d[0] if isinstance(d, list) else d.get("runs", [d])[0] if isinstance(d, dict) and "runs" in d else d
    rs.append(lv["requests_per_s"]); p99 = max(p99, lv["latency_us"]["p99"] / 1000)
    err += sum(lv["errors"].values()); ok += lv["ok"]
cpu_s = (t1 - t0) / hz
print(f"clients={n} x c={per}: total {sum(rs):,.0f} req/s ({' / '.join(f'{r:,.0f}' for r in rs)}), "
      f"worst p99 {p99:.2f} ms, errors {err}, server CPU {cpu_s:.2f} s over {ok} answers = "
      f"{1e6 * cpu_s / max(ok, 1):.0f} us/request", flush=True)
PY
done
