#!/usr/bin/env bash
# Usage: scripts/durable-cost.sh [--store single|sentinel|replicas|cluster] [--runs N]
#                                [--duration D] [--warmup D] [--server-cpu N] [--load-cpu N]
#                                [--writer thread|core] [--bin PATH] [--out DIR] [--no-build]
#
# What the durable mirror (--durable, issue 20) costs, with a real redis-server (Debian's
# package, apt-installed when missing): the same release binary started plain and with
# --durable, alternating run by run, two scenarios each:
#   echo     legacy `tools/call echo` on established sessions (calls/s; echo is idempotent by
#            its annotations, so no write-ahead wait: the mirror's cost is queueing its records)
#   stream   slow_counter, 1000 progress events per call, no delay (events/s: one record each)
# then a non-idempotent call's start (slow_counter, one step, one call in flight: the latency
# its write-ahead adds, the WAIT with --store replicas), then, on two durable nodes
# (tests/durable/cost.py): Redis memory per idle session and per event, the mirror lag
# p50/p99 (its histogram's bucket bounds), and the adoption time p50/p99 (a dead node's
# session's first request on the peer to its whole answer, client-side).
# The server process runs on --server-cpu (taskset): its one worker thread and, with --durable,
# the mirror thread beside it, so a durable node gets no CPU a plain one lacks; the load
# generator and redis-server share --load-cpu. During each run's measured window the script
# also reads each server thread's and redis-server's CPU time (/proc, user + system) and
# reports it per call or event: where the durable node's time goes (durable-cost-cpu.txt).
#
# The store (--store, issue 41 item 5), every redis-server of it on --load-cpu:
#   single    one redis-server, --durable redis://… (the default)
#   sentinel  a primary, one replica and three sentinels (redis-server CONF --sentinel),
#             --durable redis+sentinel://…/tm: the primary's acknowledgement, as single
#   replicas  the same with --durable-replicas 1: every batch ends with WAIT 1 (bounded by
#             --durable-write-ahead-ms), so a non-idempotent call's start waits for the replica
#   cluster   three primaries (redis-cli --cluster create, no replicas),
#             --durable redis+cluster://…: each batch split per shard
# Other kinds than single write durable-cost-KIND.md (and -KIND.json, -KIND-runs/); the store
# figures (tests/durable/cost.py reads one server's memory) run on single, sentinel and replicas
# (on the primary), not on cluster.
#
# Output (default target/bench/): durable-cost.md (medians and durable/plain ratios, the CPU
# split, then the store figures), durable-cost.json, durable-cost-runs/*.json (and *.cpu0/1,
# the CPU samples), logs/.
#
# Flags:
#   --store KIND      single, sentinel, replicas or cluster (default single)
#   --runs N          runs per server and scenario (default 3)
#   --duration D      measurement window per run (default 5s)
#   --warmup D        warm-up per run (default 1s)
#   --server-cpu N    CPU for the server (default 0)
#   --load-cpu N      CPU for the load generator and redis-server (default 1)
#   --writer W        --durable-writer for the durable node: core (the binary's default: each
#                     worker writes its own records over io_uring; a Redis Cluster store keeps
#                     the thread) or thread (the mirror thread drains every core's queue)
#   --bin PATH        the server binary (default target/release/tidemark; another build's copy
#                     for a before/after comparison)
#   --out DIR         output directory (default target/bench)
#   --no-build        use the binaries already built
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS=3
DURATION=5s
WARMUP=1s
SERVER_CPU=0
LOAD_CPU=1
OUT="$ROOT/target/bench"
BUILD=1
STORE=single
WRITER=
BIN_OVERRIDE=

while [ $# -gt 0 ]; do
    case "$1" in
        --store) STORE="$2"; shift 2 ;;
        --runs) RUNS="$2"; shift 2 ;;
        --duration) DURATION="$2"; shift 2 ;;
        --warmup) WARMUP="$2"; shift 2 ;;
        --server-cpu) SERVER_CPU="$2"; shift 2 ;;
        --load-cpu) LOAD_CPU="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --writer) WRITER="$2"; shift 2 ;;
        --bin) BIN_OVERRIDE="$2"; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "durable-cost.sh: unknown flag $1 (see --help)" >&2; exit 2 ;;
    esac
done

case "$STORE" in
    single) NAME=durable-cost ;;
    sentinel|replicas|cluster) NAME="durable-cost-$STORE" ;;
    *) echo "durable-cost.sh: unknown --store $STORE (single, sentinel, replicas, cluster)" >&2; exit 2 ;;
esac

TIDEMARK_BIN="${BIN_OVERRIDE:-$ROOT/target/release/tidemark}"
LOAD_BIN="$ROOT/target/release/tidemark-load"
RUNS_DIR="$OUT/$NAME-runs"
mkdir -p "$RUNS_DIR" "$OUT/logs"
rm -f "$RUNS_DIR"/*.json

# shellcheck source=scripts/server-lib.sh
source "$ROOT/scripts/server-lib.sh"
pin_cpus "$SERVER_CPU" "$LOAD_CPU"
if ! command -v redis-server >/dev/null; then
    # shellcheck source=scripts/apt-lib.sh
    source "$ROOT/scripts/apt-lib.sh"
    apt_install durable-cost.sh redis-server
fi
if [ "$BUILD" = 1 ]; then
    (cd "$ROOT" && cargo build --release --quiet -p tidemark -p tidemark-load)
fi

# Every redis-server of the store (sentinels too), for the CPU samples and the clean-up.
STORE_PIDS=()
SENTINEL_PIDS=()
PEER_PIDS=()
STORE_DIR="$(mktemp -d)"
cleanup() {
    stop_server
    for pid in "${PEER_PIDS[@]}" "${STORE_PIDS[@]}" "${SENTINEL_PIDS[@]}"; do
        kill -9 "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$STORE_DIR"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# redis_cli PORT COMMAND...: one command to the server on PORT, its reply on stdout.
redis_cli() { local port="$1"; shift; redis-cli -p "$port" "$@"; }
# start_redis NAME PORT [ARGS...]: a redis-server on --load-cpu, waited for (PING).
start_redis() {
    local name="$1" port="$2"
    shift 2
    "${PIN_LOAD[@]}" redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$STORE_DIR" "$@" >"$OUT/logs/$NAME-$name.log" 2>&1 &
    STORE_PIDS+=($!)
    for _ in $(seq 1 100); do
        [ "$(redis_cli "$port" ping 2>/dev/null)" = PONG ] && return 0
        sleep 0.05
    done
    echo "durable-cost.sh: redis-server $name on $port did not answer" >&2
    exit 1
}
# start_sentinel_store: a primary, one replica and three sentinels (quorum 2); sets STORE_URL.
start_sentinel_store() {
    local replica i port conf sentinels=""
    start_redis primary "$REDIS_PORT"
    replica="$(free_port)"
    start_redis replica "$replica" --replicaof 127.0.0.1 "$REDIS_PORT" --repl-diskless-sync-delay 0
    for _ in $(seq 1 100); do
        redis_cli "$replica" info replication | grep -q master_link_status:up && break
        sleep 0.1
    done
    for i in 1 2 3; do
        port="$(free_port)"; conf="$STORE_DIR/sentinel-$i.conf"
        printf '%s\n' "port $port" "bind 127.0.0.1" "sentinel monitor tm 127.0.0.1 $REDIS_PORT 2" \
            "sentinel down-after-milliseconds tm 1000" >"$conf"
        "${PIN_LOAD[@]}" redis-server "$conf" --sentinel >"$OUT/logs/$NAME-sentinel-$i.log" 2>&1 &
        SENTINEL_PIDS+=($!)
        sentinels="${sentinels:+$sentinels,}127.0.0.1:$port"
    done
    for _ in $(seq 1 150); do
        redis_cli "$port" sentinel master tm 2>/dev/null | tr '\n' ' ' |
            grep -q 'num-slaves 1 .*num-other-sentinels 2 ' && break
        sleep 0.1
    done
    STORE_URL="redis+sentinel://$sentinels/tm"
}
# start_cluster_store: three cluster-enabled servers made three primaries; sets STORE_URL.
start_cluster_store() {
    local i port hosts=() seeds=""
    for i in 1 2 3; do
        port="$(free_port)"
        start_redis "cluster-$i" "$port" --cluster-enabled yes \
            --cluster-config-file "$STORE_DIR/nodes-$i.conf" --cluster-port "$(free_port)"
        hosts+=("127.0.0.1:$port")
        seeds="${seeds:+$seeds,}127.0.0.1:$port"
    done
    redis-cli --cluster create "${hosts[@]}" --cluster-replicas 0 --cluster-yes \
        >"$OUT/logs/$NAME-cluster-create.log" 2>&1
    for _ in $(seq 1 150); do
        redis_cli "$port" cluster info | grep -q cluster_state:ok && break
        sleep 0.1
    done
    STORE_URL="redis+cluster://$seeds"
}
REDIS_PORT="$(free_port)"
DURABLE_EXTRA=()
case "$STORE" in
    single) start_redis single "$REDIS_PORT"; STORE_URL="redis://127.0.0.1:$REDIS_PORT" ;;
    sentinel) start_sentinel_store ;;
    replicas) start_sentinel_store; DURABLE_EXTRA=(--durable-replicas 1) ;;
    cluster) start_cluster_store; REDIS_PORT="" ;;
esac
if [ -n "$WRITER" ]; then DURABLE_EXTRA+=(--durable-writer "$WRITER"); fi
echo "durable-cost.sh: store $STORE: --durable $STORE_URL ${DURABLE_EXTRA[*]}"

FAILED=0
# seconds D: a duration as the load generator takes it (5s, 500ms) in seconds, for sleep.
seconds() {
    case "$1" in
        *ms) awk -v ms="${1%ms}" 'BEGIN { print ms / 1000 }' ;;
        *s) echo "${1%s}" ;;
        *) echo "$1" ;;
    esac
}
# cpu_sample PID: one line per thread of PID, then one per redis-server of the store and per
# sentinel: NAME USER+SYSTEM clock ticks (the split sums each name's lines).
cpu_sample() {
    local task
    for task in /proc/"$1"/task/*; do
        echo "$(cat "$task/comm" 2>/dev/null) $(awk '{ print $14 + $15 }' "$task/stat" 2>/dev/null)"
    done
    for pid in "${STORE_PIDS[@]}"; do
        echo "redis-server $(awk '{ print $14 + $15 }' /proc/"$pid"/stat)"
    done
    for pid in "${SENTINEL_PIDS[@]}"; do
        echo "redis-sentinel $(awk '{ print $14 + $15 }' /proc/"$pid"/stat)"
    done
}
# one LABEL SCENARIO RUN LOAD_ARGS...: LABEL plain or durable.
one() {
    local label="$1" scenario="$2" run="$3"
    shift 3
    local log="$OUT/logs/$NAME-$scenario-$label-$run" durable_flags=()
    [ "$label" = durable ] && durable_flags=(--durable "$STORE_URL" "${DURABLE_EXTRA[@]}")
    start_server "$log.server.log" "${PIN_SERVER[@]}" "$TIDEMARK_BIN" \
        --listen 127.0.0.1:0 --threads 1 --tools demo "${durable_flags[@]}"
    echo "== $scenario $* against $label, run $run/$RUNS"
    "${PIN_LOAD[@]}" "$LOAD_BIN" "$scenario" "$@" --url "$SERVER_URL" --label "$label" \
        --duration "$DURATION" --warmup "$WARMUP" --quiet \
        --json "$RUNS_DIR/$scenario-$label-$run.json" >"$log.load.log" 2>&1 &
    local load_pid=$!
    # The measured window starts after the warm-up (sessions open in well under 0.1 s).
    sleep "$(seconds "$WARMUP")"
    cpu_sample "$SERVER_PID" >"$RUNS_DIR/$scenario-$label-$run.cpu0"
    sleep "$(seconds "$DURATION")"
    cpu_sample "$SERVER_PID" >"$RUNS_DIR/$scenario-$label-$run.cpu1"
    if ! wait "$load_pid"; then
        echo "   FAILED (see $log.load.log)"
        FAILED=1
    fi
    grep -E '^  (calls|events)_per_s' "$log.load.log" || tail -n 3 "$log.load.log"
    stop_server
}

for run in $(seq 1 "$RUNS"); do
    if [ $((run % 2)) = 1 ]; then order=(plain durable); else order=(durable plain); fi
    for label in "${order[@]}"; do one "$label" echo "$run" --connections 64; done
    for label in "${order[@]}"; do one "$label" stream "$run" --connections 16 --steps 1000; done
done

# A non-idempotent call's start: slow_counter with one step, one call in flight, closed loop.
# Durable, its record must be written before the tool runs (with --durable-replicas, WAITed
# for): the latency the write-ahead adds, p50/p99 per label, medians of the runs. With --store
# sentinel and --store replicas on the same machine, the difference is what WAIT adds.
START_DIR="$OUT/$NAME-start"
rm -rf "$START_DIR"; mkdir -p "$START_DIR"
start_run() {
    local label="$1" run="$2" durable_flags=()
    [ "$label" = durable ] && durable_flags=(--durable "$STORE_URL" "${DURABLE_EXTRA[@]}")
    start_server "$OUT/logs/$NAME-start-$label-$run.server.log" "${PIN_SERVER[@]}" \
        "$TIDEMARK_BIN" --listen 127.0.0.1:0 --threads 1 --tools demo "${durable_flags[@]}"
    "${PIN_LOAD[@]}" "$LOAD_BIN" stream --steps 1 --connections 1 --url "$SERVER_URL" \
        --label "$label" --duration "$DURATION" --warmup "$WARMUP" --quiet \
        --json "$START_DIR/$label-$run.json" >"$OUT/logs/$NAME-start-$label-$run.load.log" 2>&1 ||
        { echo "   start latency run FAILED ($label, run $run)"; FAILED=1; }
    stop_server
}
for run in $(seq 1 "$RUNS"); do
    if [ $((run % 2)) = 1 ]; then order=(plain durable); else order=(durable plain); fi
    for label in "${order[@]}"; do start_run "$label" "$run"; done
done
python3 - "$START_DIR" >"$OUT/$NAME-start.txt" <<'PY'
import glob, json, os, statistics, sys
by = {}
for path in glob.glob(os.path.join(sys.argv[1], "*.json")):
    label = os.path.basename(path).rsplit("-", 1)[0]
    lat = json.load(open(path))["latency"][0]
    by.setdefault(label, []).append((lat["p50_us"], lat["p99_us"]))
med = {k: (statistics.median(a for a, _ in v), statistics.median(b for _, b in v)) for k, v in by.items()}
print("A non-idempotent call's start (slow_counter, 1 step, one call in flight), µs, medians:")
for label in ("plain", "durable"):
    if label in med:
        print(f"  {label:8} p50 {med[label][0]:8.1f}  p99 {med[label][1]:8.1f}")
if "plain" in med and "durable" in med:
    print(f"  added    p50 {med['durable'][0] - med['plain'][0]:8.1f}  p99 {med['durable'][1] - med['plain'][1]:8.1f}")
PY

"$LOAD_BIN" report --ratio durable/plain --markdown "$OUT/$NAME.md.tmp" \
    --json "$OUT/$NAME.json" --title "tidemark: plain vs --durable, store $STORE (median runs)" \
    "$RUNS_DIR"/*.json >/dev/null

# The CPU split: per thread, its CPU time in the measured window per call (echo) or per event
# (stream), median over the runs; the window's count is its throughput times its length.
python3 - "$RUNS_DIR" "$(seconds "$DURATION")" "$(getconf CLK_TCK)" >"$OUT/$NAME-cpu.txt" <<'PY'
import glob, json, os, statistics, sys
runs, window, hz = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
split = {}
for path in sorted(glob.glob(os.path.join(runs, "*.json"))):
    base = path[: -len(".json")]
    scenario, label, _ = os.path.basename(base).rsplit("-", 2)
    throughput = json.load(open(path))["throughput"]
    unit = "call" if "calls_per_s" in throughput else "event"
    rate = throughput.get("calls_per_s") or throughput.get("events_per_s")
    def ticks(suffix):
        out = {}
        for line in open(base + suffix):
            name, _, value = line.strip().rpartition(" ")
            if name and value:
                out[name] = out.get(name, 0) + int(value)
        return out
    before, after = ticks(".cpu0"), ticks(".cpu1")
    for name, end in after.items():
        spent = (end - before.get(name, 0)) / hz
        if rate and spent > 0.01 * window:
            split.setdefault((scenario, unit, label, name), []).append(1e6 * spent / (rate * window))
print("CPU per unit of work (µs, user + system from /proc, median of the runs; threads under 1 % left out):")
for (scenario, unit, label, name), values in sorted(split.items()):
    print(f"  {scenario:7} {label:8} {name:16} {statistics.median(values):7.2f} µs per {unit}")
PY

# The store figures: two durable nodes on the same store (flushed first; the primary).
start_peer() {
    local id="$1"
    local log="$OUT/logs/$NAME-node$id.log"
    "$TIDEMARK_BIN" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --node-id "$id" --threads 2 \
        --tools demo --durable "$STORE_URL" "${DURABLE_EXTRA[@]}" --durable-lease-ms 1000 \
        >"$log" 2>&1 &
    PEER_PIDS+=($!)
    for _ in $(seq 1 200); do
        grep -q 'listening on' "$log" && break
        sleep 0.05
    done
    PEER_URL="$(grep -o 'http://[^ ]*/mcp' "$log" | head -n 1)"
    PEER_ADMIN="$(grep -o 'metrics=http://[^ ]*' "$log" | head -n 1 | sed 's/^metrics=//; s#/metrics$##')"
}
if [ -n "$REDIS_PORT" ]; then
    redis_cli "$REDIS_PORT" flushall >/dev/null
    start_peer 1; URL1="$PEER_URL"; ADMIN1="$PEER_ADMIN"; PID1="${PEER_PIDS[0]}"
    start_peer 2; URL2="$PEER_URL"; ADMIN2="$PEER_ADMIN"
    python3 "$ROOT/tests/durable/cost.py" --node1 "$URL1" --admin1 "$ADMIN1" --node2 "$URL2" \
        --admin2 "$ADMIN2" --node1-pid "$PID1" --redis-port "$REDIS_PORT" --lease-ms 1000 \
        >"$OUT/$NAME-store.txt" || FAILED=1
else
    echo "not run on a cluster (tests/durable/cost.py reads one server's memory)" >"$OUT/$NAME-store.txt"
fi

{
    echo "Machine: $(nproc --all) vCPU $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'),"
    echo "$(uname -sr), $(rustc --version), $(redis-server --version | cut -d' ' -f1-3). Store: $STORE"
    echo "(--durable $STORE_URL ${DURABLE_EXTRA[*]}). Server: 1 worker thread and the mirror thread"
    echo "on CPU $SERVER_CPU; load generator and every redis-server on CPU $LOAD_CPU; $RUNS alternating"
    echo "run(s) of $DURATION after $WARMUP warm-up; medians."
    echo
    cat "$OUT/$NAME.md.tmp"
    echo
    echo '```'
    cat "$OUT/$NAME-cpu.txt"
    echo
    cat "$OUT/$NAME-start.txt"
    echo '```'
    echo
    echo "Store figures (tests/durable/cost.py, one run):"
    echo
    echo '```'
    cat "$OUT/$NAME-store.txt"
    echo '```'
} >"$OUT/$NAME.md"
rm -f "$OUT/$NAME.md.tmp"
cat "$OUT/$NAME.md"
echo
echo "durable-cost.sh: wrote $OUT/$NAME.md, $NAME.json"
exit "$FAILED"
