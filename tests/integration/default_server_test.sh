#!/usr/bin/env bash
# The README's promise: `metalserve` with no arguments serves the default
# classifier on 127.0.0.1:8500, and a Predict sent from a separate process
# (metalserve-bench) returns logits of shape [1, 1000]; the default listeners
# (gRPC 8500, metrics 9464) are bound to 127.0.0.1 only; with port 0 the log
# names the port bound. Bounded: each server is stopped with SIGTERM at its
# end, and killed if it outlives the test.
set -euo pipefail
server=$1 bench=$2
work=$(mktemp -d)
cleanup() {
  [[ -n "${pid:-}" ]] && kill -KILL "$pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
# await_ready LOG TEXT: waits up to 60 s for TEXT in LOG while $pid lives.
await_ready() {
  for _ in $(seq 1 600); do
    grep -q "$2" "$1" && return 0
    kill -0 "$pid" 2>/dev/null || { cat "$1"; exit 1; }
    sleep 0.1
  done
  grep -q "$2" "$1" || { echo "not ready"; exit 1; }
}

"$server" > "$work/server.log" 2>&1 &
pid=$!
await_ready "$work/server.log" "ready: gRPC on 127.0.0.1:8500"

"$bench" --requests=3 --concurrency=1 --deadline=30s --output=json \
  --dump_outputs="$work/out.json" > "$work/bench.json"
/usr/bin/python3 - "$work/out.json" "$work/bench.json" <<'PY'
import json, sys
out = json.load(open(sys.argv[1]))["outputs"]
assert len(out) == 1 and out[0]["shape"] == [1, 1000], out[0]["shape"]
run = json.load(open(sys.argv[2]))["runs"][0]
assert run["ok"] == 3 and not run["errors"], run
print("default server: logits", out[0]["shape"], "from a separate process; 3/3 ok")
PY
# The default listeners are on loopback only: gRPC 127.0.0.1:8500 and
# metrics 127.0.0.1:9464 (nothing on 0.0.0.0 or ::), and the metrics answer
# there with metalserve_ready 1.
/usr/bin/python3 - <<'PY'
import urllib.request
listening = {}
for path, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
    try:
        lines = open(path).read().splitlines()[1:]
    except OSError:
        continue
    for line in lines:
        local, state = line.split()[1], line.split()[3]
        addr, port = local.split(":")
        if state == "0A":  # LISTEN
            listening.setdefault(int(port, 16), set()).add(addr)
# 127.0.0.1 as IPv4, as IPv4-mapped IPv6 (gRPC's socket), and ::1.
loopback = {"0100007F", "0000000000000000FFFF00000100007F",
            "00000000000000000000000001000000"}
for port in (8500, 9464):
    found = listening.get(port, set())
    assert found and found <= loopback, (port, found)
body = urllib.request.urlopen("http://127.0.0.1:9464/metrics", timeout=10).read().decode()
assert "\nmetalserve_ready 1\n" in body, "metalserve_ready is not 1 on 127.0.0.1:9464"
print("default listeners: gRPC 127.0.0.1:8500, metrics 127.0.0.1:9464 (loopback only)")
PY
kill -TERM "$pid"
wait "$pid"
rc=$?
pid=
grep -q "exit" "$work/server.log"
[[ $rc == 0 ]] || exit $rc

# Port 0 asks for any free port: the log names the port it got, and a
# client reaches the server there.
"$server" --address=127.0.0.1:0 --metrics_address= > "$work/server0.log" 2>&1 &
pid=$!
await_ready "$work/server0.log" "ready: gRPC on"
port=$(sed -n 's/.*gRPC on 127\.0\.0\.1:0 bound port \([0-9]*\).*/\1/p' "$work/server0.log")
[[ -n $port && $port != 0 ]] || { echo "no bound port in the log"; cat "$work/server0.log"; exit 1; }
"$bench" --target=127.0.0.1:$port --requests=2 --concurrency=1 --deadline=30s --output=json \
  > "$work/bench0.json"
/usr/bin/python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))["runs"][0]
assert r["ok"] == 2 and not r["errors"], r
print("--address=127.0.0.1:0: bound port", sys.argv[2], "logged and served 2/2")' "$work/bench0.json" "$port"
kill -TERM "$pid"
wait "$pid"
rc=$?
pid=
exit $rc
