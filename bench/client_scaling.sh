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
# errors and server CPU us/request. BATCH_STATS=1 also serves /metrics on a
# free loopback port and prints, over the timed run, the batches' mean rows,
# the padding's share of the rows run, the batches by close reason, the
# device's busy share (metalserve_device_busy_seconds_total over the run's
# wall time) and the batches cut back from padding with the rows they left. Loopback only; stops by itself.
set -euo pipefail
build=$1 model=$2 flags=$3 conc=$4 counts=$5 dur=${6:-5}
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
metrics_flag=--metrics_address=
if [[ ${BATCH_STATS:-0} == 1 ]]; then
  mport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  metrics_flag=--metrics_address=127.0.0.1:$mport
fi
# shellcheck disable=SC2086
env ${SERVER_ENV:-} "$build/metalserve" --model="$model" --address=127.0.0.1:$port $metrics_flag --http_address= \
  --monitor_log_interval=0 $flags > "$work/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 600); do grep -q "ready: gRPC" "$work/server.log" && break; sleep 0.5; done
grep -q "ready: gRPC" "$work/server.log" || { tail -20 "$work/server.log"; exit 1; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$server/stat"; }
hz=$(getconf CLK_TCK)
# The batch figures summed from /metrics (BATCH_STATS=1), as JSON, or {}.
batch_stats() {
  [[ ${BATCH_STATS:-0} == 1 ]] || { echo "{}"; return; }
  python3 - "$mport" <<'PY'
import json, re, sys, time, urllib.request
t_sent = time.time()
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=30).read().decode()
out = {"sent": t_sent, "answered": time.time(), "rows": 0.0, "batches": 0.0, "padding": 0.0,
       "busy": 0.0, "cut": 0.0, "cut_rows": 0.0, "reasons": {}}
for line in text.splitlines():
    m = re.match(r'^(\w+)(\{[^}]*\})? ([0-9.eE+-]+)$', line)
    if not m: continue
    name, labels, v = m.group(1), m.group(2) or "", float(m.group(3))
    if name == "metalserve_batch_size_rows_sum": out["rows"] += v
    elif name == "metalserve_batch_size_rows_count": out["batches"] += v
    elif name == "metalserve_batch_padding_rows_total": out["padding"] += v
    elif name == "metalserve_device_busy_seconds_total": out["busy"] += v
    elif name == "metalserve_batches_cut_total": out["cut"] += v
    elif name == "metalserve_batch_cut_rows_total": out["cut_rows"] += v
    elif name == "metalserve_batches_total":
        r = re.search(r'reason="([^"]*)"', labels)
        if r: out["reasons"][r.group(1)] = out["reasons"].get(r.group(1), 0) + v
print(json.dumps(out))
PY
}
# Warm-up at full concurrency, not timed.
"$build/metalserve-bench" --target=127.0.0.1:$port --concurrency=$conc --duration=2s --connections=8 \
  --input=random --progress=off > /dev/null
for n in $counts; do
  per=$(( conc / n ))
  s0=$(batch_stats || echo "{}")
  t0=$(cpu_ticks)
  for i in $(seq "$n"); do
    "$build/metalserve-bench" --target=127.0.0.1:$port --concurrency=$per --duration=${dur}s \
      --connections=8 --input=random --seed=$i --output=json --progress=off \
      > "$work/c$n-$i.json" &
  done
  wait $(jobs -p | grep -v "^$server$") 2>/dev/null || true
  t1=$(cpu_ticks)
  s1=$(batch_stats || echo "{}")
  python3 - "$work" "$n" "$per" "$t0" "$t1" "$hz" "$dur" "$s0" "$s1" <<'PY'
import json, sys
work, n, per, t0, t1, hz = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *map(float, sys.argv[4:7])
s0, s1 = json.loads(sys.argv[8]), json.loads(sys.argv[9])
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
if s0 and s1:
    d = {k: s1.get(k, 0) - s0.get(k, 0)
         for k in ("rows", "batches", "padding", "busy", "cut", "cut_rows")}
    # The busy share over the time between the scrapes (the first's answer to
    # the second's request): a slow answer must not stretch the window.
    d["t"] = s1["sent"] - s0["answered"]
    slow = max(s["answered"] - s["sent"] for s in (s0, s1))
    reasons = {r: int(v - s0["reasons"].get(r, 0)) for r, v in s1["reasons"].items()
               if v - s0["reasons"].get(r, 0) > 0}
    b = max(d["batches"], 1)
    print(f"  batches {int(d['batches'])}: mean {d['rows'] / b:.1f} rows, padding "
          f"{100 * d['padding'] / max(d['rows'] + d['padding'], 1):.1f} % of rows run, "
          f"closed {reasons}, device busy {100 * d['busy'] / max(d['t'], 1e-9):.0f} %, "
          f"cut back {int(d['cut'])} ({int(d['cut_rows'])} rows left for later)"
          + (f" (a /metrics scrape took {slow:.1f} s)" if slow > 1 else ""), flush=True)
PY
done
# SERVER_LOG_GREP=PATTERN: the server log's lines that match, after the
# figures (e.g. "sync schedule" to show that a setting took effect).
if [[ -n ${SERVER_LOG_GREP:-} ]]; then
  grep -h -- "$SERVER_LOG_GREP" "$work/server.log" | sed 's/^/  server: /' || true
fi
