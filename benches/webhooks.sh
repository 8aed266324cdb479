#!/usr/bin/env bash
# Webhook ingress against adnanh/webhook (Debian's `webhook`, 2.8.0), on this machine.
#
# Both run the same handler, /bin/true, behind the same check (a token in X-Canopy-Hook-Token),
# and both are loaded by wrk with 1 thread and 8 connections for 10 s:
#
#   1. accepted req/s: adnanh answers before running and records nothing; Canopy answers 202
#      once the delivery is committed to its database;
#   2. waited req/s: adnanh with include-command-output-in-response, Canopy with ?wait=true,
#      in rounds that alternate the two (the median round of each is reported);
#   3. exactly once: after the async run, every delivery Canopy accepted has completed once
#      (counted in its database, and by a second run whose handler appends its delivery id);
#   4. commands completed per second during and after the async run, until the last one ends
#      (adnanh's commands that failed to start are counted apart, not as completed).
#
# Usage: benches/webhooks.sh [path/to/canopy]   (default: builds a release binary)
# Env: DURATION (default 10s), CONNECTIONS (8), CANOPY_TARGET_DIR (/tmp/old-target),
#      CONCURRENCY (the Canopy hook's `concurrency`; default: the hook default),
#      WAITED_ROUNDS (3: rounds of the waited comparison, each server in turn).

set -euo pipefail

DURATION=${DURATION:-10s}
WAITED_ROUNDS=${WAITED_ROUNDS:-3}
CONNECTIONS=${CONNECTIONS:-8}
TOKEN=bench-token-0123456789abcdef
ROOT=$(cd "$(dirname "$0")/.." && pwd)

need() { command -v "$1" >/dev/null 2>&1; }
if ! need webhook || ! need wrk; then
    echo "installing webhook and wrk with apt" >&2
    # A fresh machine may have no package lists yet.
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq webhook wrk >/dev/null
fi
for tool in curl python3; do need "$tool" || { echo "needs $tool" >&2; exit 1; }; done

CANOPY=${1:-}
if [ -z "$CANOPY" ]; then
    target=${CANOPY_TARGET_DIR:-/tmp/old-target}
    (cd "$ROOT" && CARGO_TARGET_DIR=$target cargo build --release -p canopy >&2)
    CANOPY=$target/release/canopy
fi

WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

cat >"$WORK/post.lua" <<EOF
wrk.method = "POST"
wrk.body = '{"ref":"refs/heads/main","after":"0123456789abcdef"}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["X-Canopy-Hook-Token"] = "$TOKEN"
EOF

# wrk's "Requests/sec" and "N requests" and non-2xx count, as "rps total non2xx latency".
load() {
    local url=$1 out
    out=$(wrk -t1 -c"$CONNECTIONS" -d"$DURATION" -s "$WORK/post.lua" "$url")
    echo "$out" >&2
    python3 - "$out" <<'PY'
import re, sys
text = sys.argv[1]
rps = re.search(r"Requests/sec:\s+([\d.]+)", text).group(1)
total = re.search(r"(\d+) requests in", text).group(1)
bad = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
lat = re.search(r"Latency\s+(\S+)", text).group(1)
print(rps, total, bad.group(1) if bad else 0, lat)
PY
}

# CPU a server and the children it reaped have used so far, in clock ticks: "own children".
cpu() { awk '{print $14 + $15, $16 + $17}' "/proc/$1/stat"; }
# CPU per request since `before` (from `cpu`), in microseconds: "own children".
cpu_per() {
    local pid=$1 before=$2 requests=$3
    python3 - "$before" "$(cpu "$pid")" "$requests" "$(getconf CLK_TCK)" <<'PY'
import sys
(a_own, a_kids), (b_own, b_kids) = (map(int, x.split()) for x in sys.argv[1:3])
n, hz = int(sys.argv[3]), int(sys.argv[4])
print(round((b_own - a_own) * 1e6 / hz / n), round((b_kids - a_kids) * 1e6 / hz / n))
PY
}

# ---------------------------------------------------------------- adnanh/webhook
adnanh() { # $1: include output (true|false), $2: verbose (true|false); sets URL and LAST
    local sync=$1 verbose=$2 port
    port=$(free_port)
    cat >"$WORK/hooks-$sync.json" <<EOF
[{
  "id": "bench",
  "execute-command": "/bin/true",
  "include-command-output-in-response": $sync,
  "trigger-rule": {"match": {"type": "value", "value": "$TOKEN",
                             "parameter": {"source": "header", "name": "X-Canopy-Hook-Token"}}}
}]
EOF
    local flags=(-hooks "$WORK/hooks-$sync.json" -ip 127.0.0.1 -port "$port")
    if [ "$verbose" = true ]; then flags+=(-verbose); fi
    webhook "${flags[@]}" >"$WORK/adnanh-$sync-$verbose.log" 2>&1 &
    LAST=$!
    PIDS+=("$LAST")
    for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.05; done
    URL="http://127.0.0.1:$port/hooks/bench"
}
stop_last() { kill "$LAST" 2>/dev/null || true; wait "$LAST" 2>/dev/null || true; }
# Stops the last canopy daemon and removes its data dir (the disk may be small).
stop_canopy() { stop_last; du -sh "$DATA"/* >&2; rm -rf "$DATA"; }

# Waits until `count` (a command printing a number) stops growing for 1.5 s; prints
# "count seconds-since-start".
settle() {
    local start=$1 count=$2 last=-1 now stable=0 at
    while :; do
        now=$($count)
        if [ "$now" = "$last" ]; then
            stable=$((stable + 1))
            [ $stable -ge 15 ] && break
        else
            stable=0; last=$now; at=$(date +%s.%N)
        fi
        sleep 0.1
    done
    python3 -c "print($last, round($at - $start, 3))"
}

echo "== adnanh/webhook async (answers before running, records nothing)" >&2
adnanh false false
read -r A_RPS A_TOTAL A_BAD A_LAT < <(load "$URL")
stop_last

echo "== adnanh/webhook async, verbose (to count commands completed)" >&2
adnanh false true
start=$(date +%s.%N)
read -r _ AV_TOTAL _ _ < <(load "$URL")
# adnanh logs "finished handling" for a command that never started too (under this load most
# fail with "fork/exec: too many open files": one goroutine and its pipes per request): only
# the ones without an "error occurred" line ran.
adnanh_log=$WORK/adnanh-false-true.log
adnanh_finished() { grep -c "finished handling bench" "$adnanh_log" || true; }
adnanh_failed() { grep -c "error occurred" "$adnanh_log" || true; }
adnanh_done() { echo $(($(adnanh_finished) - $(adnanh_failed))); }
read -r A_DONE A_SECS < <(settle "$start" adnanh_done)
A_FAILED=$(adnanh_failed)
stop_last

# ---------------------------------------------------------------- canopy
canopy_daemon() { # $1: the handler command; sets DATA, URL and LAST
    local data=$WORK/canopy-$RANDOM
    mkdir -p "$data"
    cat >"$data/canopy.toml" <<EOF
[webhooks]
bind_port = 0
token = "$TOKEN"

[webhooks.entries.bench]
type = "command"
command = "$1"
${CONCURRENCY:+concurrency = $CONCURRENCY}
EOF
    CANOPY_LOG=warn "$CANOPY" daemon --listen 127.0.0.1:0 --data-dir "$data" >"$data/stderr.log" 2>&1 &
    LAST=$!
    PIDS+=("$LAST")
    for _ in $(seq 600); do [ -s "$data/webhooks.addr" ] && break; sleep 0.1; done
    [ -s "$data/webhooks.addr" ] || { cat "$data/stderr.log" >&2; exit 1; }
    DATA=$data
    URL="$(cat "$data/webhooks.addr")/hooks/global/bench"
}

# Deliveries by status, as JSON.
counts() { "$CANOPY" --data-dir "$1" webhooks show global/bench --json | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["deliveries"]))'; }
completed() { "$CANOPY" --data-dir "$DATA" webhooks show global/bench --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["deliveries"].get("completed", 0))'; }

echo "== canopy async (202 once the delivery is committed)" >&2
canopy_daemon /bin/true
start=$(date +%s.%N)
read -r C_RPS C_TOTAL C_BAD C_LAT < <(load "$URL")
read -r C_DONE C_SECS < <(settle "$start" completed)
C_COUNTS=$(counts "$DATA")
stop_canopy

# Waited requests, in rounds that alternate the two servers: this machine's speed drifts
# within minutes, and a single run of each compares two different machines. Each side's
# figure is its median round (by req/s).
WAITED=()
for round in $(seq "$WAITED_ROUNDS"); do
    echo "== round $round: adnanh/webhook sync (include-command-output-in-response)" >&2
    adnanh true false
    cpu_before=$(cpu "$LAST")
    read -r rps total bad lat < <(load "$URL")
    read -r own kids < <(cpu_per "$LAST" "$cpu_before" "$total")
    WAITED+=("adnanh $rps $bad $lat $own $kids")
    stop_last

    echo "== round $round: canopy ?wait=true" >&2
    canopy_daemon /bin/true
    cpu_before=$(cpu "$LAST")
    read -r rps total bad lat < <(load "$URL?wait=true")
    read -r own kids < <(cpu_per "$LAST" "$cpu_before" "$total")
    WAITED+=("canopy $rps $bad $lat $own $kids")
    stop_canopy
done
# The median round of each side: "rps non2xx latency own-cpu child-cpu".
median_round() {
    printf '%s\n' "${WAITED[@]}" | awk -v who="$1" '$1 == who' | sort -k2,2 -g |
        awk '{ rows[NR] = $0 } END { print rows[int((NR + 1) / 2)] }' | cut -d' ' -f2-
}
read -r S_RPS S_BAD S_LAT S_CPU S_CHILD < <(median_round adnanh)
read -r W_RPS W_BAD W_LAT W_CPU W_CHILD < <(median_round canopy)
W_ROUNDS=$(printf '%s\n' "${WAITED[@]}" | paste -sd';' -)

echo "== canopy async, each run appending its delivery id (exactly-once check)" >&2
canopy_daemon 'echo $CANOPY_HOOK_DELIVERY_ID >> runs.txt'
start=$(date +%s.%N)
read -r _ E_TOTAL E_BAD _ < <(load "$URL")
read -r E_DONE _ < <(settle "$start" completed)
E_COUNTS=$(counts "$DATA")
E_RUNS=$(wc -l <"$DATA/runs.txt")
E_UNIQUE=$(sort -u "$DATA/runs.txt" | wc -l)
stop_canopy

export W_ROUNDS S_CPU S_CHILD W_CPU W_CHILD A_FAILED A_RPS S_RPS C_RPS W_RPS S_LAT W_LAT A_DONE A_SECS C_DONE C_SECS AV_TOTAL C_TOTAL \
    A_BAD S_BAD C_BAD W_BAD C_COUNTS E_TOTAL E_COUNTS E_RUNS E_UNIQUE E_DONE
python3 - <<'PY'
import json, os
e = os.environ
a_rps, s_rps, c_rps, w_rps = (float(e[k]) for k in ("A_RPS", "S_RPS", "C_RPS", "W_RPS"))
a_cps = float(e["A_DONE"]) / float(e["A_SECS"])
c_cps = float(e["C_DONE"]) / float(e["C_SECS"])
row = "{:46} {:>16} {:>16} {:>7}"
print()
print(row.format("", "adnanh/webhook", "canopy", "ratio"))
print(row.format("accepted req/s (canopy: durably recorded)", f"{a_rps:,.0f}", f"{c_rps:,.0f}", f"{c_rps / a_rps:.2f}x"))
print(row.format("waited req/s (sync / ?wait=true), median round", f"{s_rps:,.0f}", f"{w_rps:,.0f}", f"{w_rps / s_rps:.2f}x"))
rounds = [r.split() for r in e["W_ROUNDS"].split(";")]
pairs = list(zip([r for r in rounds if r[0] == "adnanh"], [r for r in rounds if r[0] == "canopy"]))
print(row.format("  each round (adnanh / canopy = ratio)", "", "", ""))
for a, c in pairs:
    print(row.format("", f"{float(a[1]):,.0f}", f"{float(c[1]):,.0f}", f"{float(c[1]) / float(a[1]):.2f}x"))
print(row.format("  avg latency, waited", e["S_LAT"], e["W_LAT"], ""))
print(row.format("  server CPU per waited request (us)", e["S_CPU"], e["W_CPU"], ""))
print(row.format("  its commands' CPU per request (us)", e["S_CHILD"], e["W_CHILD"], ""))
print(row.format("commands completed/s (async run, to the last)", f"{a_cps:,.0f}", f"{c_cps:,.0f}", f"{c_cps / a_cps:.2f}x"))
print(row.format("  commands completed / requests answered", f"{e['A_DONE']} / {e['AV_TOTAL']}", f"{e['C_DONE']} / {e['C_TOTAL']}", ""))
c_failed = sum(v for k, v in json.loads(e["C_COUNTS"]).items() if k != "completed")
print(row.format("  commands that did not complete", e["A_FAILED"], f"{c_failed}", ""))
print(row.format("  seconds from start to the last command", e["A_SECS"], e["C_SECS"], ""))
print(row.format("  non-2xx answers (async, sync)", f"{e['A_BAD']}, {e['S_BAD']}", f"{e['C_BAD']}, {e['W_BAD']}", ""))
print()
print("canopy async run, deliveries by status:", e["C_COUNTS"])
counts = json.loads(e["E_COUNTS"])
print(f"exactly-once run: wrk counted {e['E_TOTAL']} answers; deliveries by status {counts};")
print(f"  the handler appended {e['E_RUNS']} delivery ids, {e['E_UNIQUE']} distinct")
ok = int(e["E_RUNS"]) == int(e["E_UNIQUE"]) == int(e["E_DONE"]) == sum(counts.values())
print("  every accepted delivery ran exactly once:", "yes" if ok else "NO")
PY
