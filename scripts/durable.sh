#!/usr/bin/env bash
# Usage: scripts/durable.sh [--only STAGE[,STAGE...]] [--calls N] [--modern-calls N] [--seed S]
#                           [--no-build] [--help]
#
# Surviving a node's death (issue 20, CONTRACT §10), with the real thing: Debian's
# `redis-server` and `haproxy` (apt-installed when missing), two tidemark nodes (--node-id 1 and
# 2, --threads 2, --durable to one Redis, a short --durable-lease-ms) in front of the stdio
# fixture tests/fixtures/stdio_upstream.py (shared isolation, one execution log for both nodes),
# and HAProxy on the configuration deploy/haproxy-config generates with --backup-peers (each node
# the other's backup). Stages:
#   kill    tests/durable/node_death.py: legacy calls with progress (recovered at random by GET +
#           Last-Event-ID, re-POST and its hint, Idempotency-Key retry) and keyed 2026-07-28
#           calls through HAProxy; node 1 gets SIGKILL at a random moment. Every call ends with
#           its result or -31006, no event lost or doubled, no tool run twice (the fixture's
#           execution log), no 404 for a mirrored session
#   redis   tests/durable/redis_outage.py: redis-server SIGKILLed mid-run and restarted on its
#           port: node 2 keeps answering echo calls, marks and counts not-durable sessions, its
#           queues stay inside --durable-queue-records/--durable-queue-bytes, and every session
#           is durable again after the restart
#   sentinel  the kill stage on a replicated store (issue 41): one redis-server primary, two
#           replicas, three redis-sentinels (down after SENTINEL_DOWN_AFTER_MS), the nodes on
#           --durable redis+sentinel://… --durable-replicas 1. node_death.py SIGKILLs the
#           primary under load, waits for the first durable write on the promoted replica
#           (reported), then SIGKILLs node 1: same counts as kill (no lost acknowledged event,
#           no double execution, every call its result or -31006). Its one failure in 7
#           runs (and the cluster stage's first run: a client looping GET and re-POST) was a
#           client holding events its node never mirrored: fixed, docs/reliability.md "A client
#           ahead of the store"
#   cluster the kill stage on a Redis Cluster (issue 41 item 2): three primaries with two
#           replicas each (redis-cli --cluster create, cluster-node-timeout
#           CLUSTER_NODE_TIMEOUT_MS; two replicas, so the promoted one still has one for
#           --durable-replicas 1), the nodes on --durable redis+cluster://… --durable-replicas 1.
#           node_death.py SIGKILLs one primary under load, waits for the first durable write
#           after the promotion, then SIGKILLs node 1: same counts as kill
#   --only STAGES  comma-separated, from kill,redis,sentinel,cluster (default: all four)
#   --calls N      legacy calls of the kill stage (default 300)
#   --modern-calls N  keyed 2026-07-28 calls of the kill stage (default 100)
#   --seed S       the kill stage's random choices (default: new, printed)
#   --writer W     --durable-writer of every node: core (default: each worker writes its own
#                  records) or thread (the mirror thread writes them; the cluster stage uses the
#                  thread's writer either way)
#   --no-build     use the existing target/release/tidemark
#
# Prints one PASS/FAIL line per stage and `durable: N passed, M failed`; logs in
# .cache/durable-results/. Exit 0 only when every stage passed. Every process it started is
# stopped on exit.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache"
RESULTS="$CACHE/durable-results"
START_TIMEOUT_S=30
STAGE_TIMEOUT_S=300
# A short lease, so the kill stage's adoption waits about a second, not the default three.
LEASE_MS=1000
# Small queues in the redis stage, so an outage reaches their bounds within seconds.
OUTAGE_QUEUE_RECORDS=2048
OUTAGE_QUEUE_BYTES=1048576

# The sentinel stage's failover: a primary is down after this without an answer, and a failover
# that stalls is retried after twice SENTINEL_FAILOVER_TIMEOUT_MS, so it takes a few seconds.
SENTINEL_DOWN_AFTER_MS=1000
SENTINEL_FAILOVER_TIMEOUT_MS=3000
SENTINEL_MASTER=tidemark

# The cluster stage's failover: a primary unanswered this long is failed, and its best replica
# is elected about as long again after.
CLUSTER_NODE_TIMEOUT_MS=1000

stages="kill,redis,sentinel,cluster"
calls=300
modern_calls=100
seed=()
build=1
writer=core
while [ "$#" -gt 0 ]; do
    case "$1" in
        --only) stages="${2:?--only needs a value}"; shift 2 ;;
        --calls) calls="${2:?}"; shift 2 ;;
        --modern-calls) modern_calls="${2:?}"; shift 2 ;;
        --seed) seed=(--seed "${2:?}"); shift 2 ;;
        --writer) writer="${2:?--writer needs thread or core}"; shift 2 ;;
        --no-build) build=0; shift ;;
        --help) sed -n '2,35s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "durable.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
done

# ---- installs (idempotent) ----------------------------------------------------------------
# shellcheck source=SCRIPTDIR/apt-lib.sh
source "$ROOT/scripts/apt-lib.sh"
command -v redis-server >/dev/null || apt_install durable.sh redis-server
command -v haproxy >/dev/null || apt_install durable.sh haproxy
echo "durable.sh: $(redis-server --version | cut -d' ' -f1-3), $(haproxy -v | head -n 1 | cut -d' ' -f1-3)"
SCRIPT_NAME=durable.sh
# shellcheck source=SCRIPTDIR/client-lib.sh
source "$ROOT/scripts/client-lib.sh"
if [ "$build" = 1 ]; then
    (cd "$ROOT" && cargo build --release --quiet)
fi
TIDEMARK="$ROOT/target/release/tidemark"

rm -rf "$RESULTS"
mkdir -p "$RESULTS"
# shellcheck source=SCRIPTDIR/pids-lib.sh
source "$ROOT/scripts/pids-lib.sh"

passed=0
failed=0
verdict() { # verdict NAME RC DETAIL
    if [ "$2" = 0 ]; then
        passed=$((passed + 1))
        echo "durable: PASS $1 $3"
    else
        failed=$((failed + 1))
        echo "durable: FAIL $1 $3 (logs: $RESULTS)"
    fi
}

# start_redis NAME PORT [ARGS...]: a throw-away redis-server (no persistence) in a directory of
# its own ($RESULTS/redis-NAME); sets redis_pid, redis_cmd. Its own directory: a replica's sync
# to disk writes dump.rdb there, which a server started later in the same directory loads (a
# cluster node then holds keys and `redis-cli --cluster create` refuses it: "is not empty", seen
# after the sentinel stage), and replicas syncing at once in one directory race on that file.
start_redis() {
    local name="$1" port="$2" dir="$RESULTS/redis-$1"
    shift 2
    mkdir -p "$dir"
    redis_cmd="redis-server --port $port --bind 127.0.0.1 --save '' --appendonly no --dir $dir"
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" "$@" \
        >"$RESULTS/$name.log" 2>&1 &
    redis_pid=$!
    pids+=("$redis_pid")
    for _ in $(seq 100); do
        redis-cli -p "$port" ping 2>/dev/null | grep -q PONG && return 0
        sleep 0.1
    done
    echo "durable.sh: redis-server on $port never answered" >&2
    cat "$RESULTS/$name.log" >&2
    exit 1
}

head -c 64 /dev/urandom >"$RESULTS/request-state.key"
# start_node NAME ID PORT ADMIN STORE FLAGS...: a durable tidemark node (STORE: a redis-server's
# port, or a whole --durable URL); sets node_pid.
start_node() {
    local name="$1" id="$2" port="$3" admin="$4" store="$5"
    shift 5
    case "$store" in
        *://*) ;;
        *) store="redis://127.0.0.1:$store" ;;
    esac
    COUNTER_FILE="$RESULTS/counter" "$TIDEMARK" --listen "127.0.0.1:$port" \
        --metrics-listen "127.0.0.1:$admin" --node-id "$id" --threads 2 --sse-retry-ms 200 \
        --upstream "stdio:python3 $ROOT/tests/fixtures/stdio_upstream.py" \
        --upstream-isolation shared \
        --request-state-key-file "$RESULTS/request-state.key" \
        --durable "$store" --durable-lease-ms "$LEASE_MS" --durable-writer "$writer" "$@" \
        >"$RESULTS/$name.stdout" 2>"$RESULTS/$name.stderr" &
    node_pid=$!
    pids+=("$node_pid")
    wait_for_url "$RESULTS/$name.stdout" "$node_pid" "$name" >/dev/null
}

# start_sentinels PRIMARY_PORT: three redis-sentinels monitoring it (quorum 2); sets
# sentinel_ports (comma-separated 127.0.0.1:PORT list).
start_sentinels() {
    local primary="$1" i port conf
    sentinel_ports=""
    for i in 1 2 3; do
        port="$(free_port)"; conf="$RESULTS/sentinel-$i.conf"
        printf '%s\n' "port $port" "bind 127.0.0.1" \
            "sentinel monitor $SENTINEL_MASTER 127.0.0.1 $primary 2" \
            "sentinel down-after-milliseconds $SENTINEL_MASTER $SENTINEL_DOWN_AFTER_MS" \
            "sentinel failover-timeout $SENTINEL_MASTER $SENTINEL_FAILOVER_TIMEOUT_MS" \
            "sentinel parallel-syncs $SENTINEL_MASTER 2" >"$conf"
        # redis-server in sentinel mode: the same binary Debian's redis-sentinel package links
        # to, without that package's service (which would start one more sentinel on 26379).
        redis-server "$conf" --sentinel >"$RESULTS/sentinel-$i.log" 2>&1 &
        pids+=("$!")
        sentinel_ports="${sentinel_ports:+$sentinel_ports,}127.0.0.1:$port"
    done
    for _ in $(seq 150); do
        # The last sentinel sees both replicas and the other two sentinels: a failover can start.
        if redis-cli -p "$port" sentinel master "$SENTINEL_MASTER" 2>/dev/null |
            tr '\n' ' ' | grep -q 'num-slaves 2 .*num-other-sentinels 2 '; then
            return 0
        fi
        sleep 0.1
    done
    echo "durable.sh: the sentinels never saw two replicas and each other" >&2
    exit 1
}

# kill_stage NAME STORE [NODE_FLAGS...] -- [node_death.py FLAGS...]: two nodes on STORE behind
# HAProxy, node_death.py's load, node 1 SIGKILLed.
kill_stage() {
    local name="$1" store="$2" node_flags=() p1 a1 p2 a2 ha sa rc=0
    shift 2
    while [ "$#" -gt 0 ] && [ "$1" != -- ]; do node_flags+=("$1"); shift; done
    [ "$#" -gt 0 ] && shift
    p1="$(free_port)"; a1="$(free_port)"; p2="$(free_port)"; a2="$(free_port)"
    : >"$RESULTS/counter.calls"
    start_node "$name-node1" 1 "$p1" "$a1" "$store" "${node_flags[@]}"
    local victim=$node_pid
    start_node "$name-node2" 2 "$p2" "$a2" "$store" --driver epoll "${node_flags[@]}"
    ha="$(free_port)"; sa="$(free_port)"
    "$ROOT/deploy/haproxy-config" --node "1=127.0.0.1:$p1,admin=$a1" \
        --node "2=127.0.0.1:$p2,admin=$a2" --backup-peers --listen "127.0.0.1:$ha" \
        --stats "127.0.0.1:$sa" >"$RESULTS/$name-haproxy.cfg"
    haproxy -c -f "$RESULTS/$name-haproxy.cfg" >"$RESULTS/$name-haproxy-check.log" 2>&1 || rc=$?
    if [ "$rc" != 0 ]; then
        verdict "$name" 1 "(haproxy -c refused the --backup-peers configuration)"
        return
    fi
    haproxy -db -f "$RESULTS/$name-haproxy.cfg" >"$RESULTS/$name-haproxy.log" 2>&1 &
    pids+=("$!")
    sleep 1 # the first health checks
    timeout "$STAGE_TIMEOUT_S" python3 "$ROOT/tests/durable/node_death.py" \
        --via "http://127.0.0.1:$ha/mcp" --calls-log "$RESULTS/counter.calls" \
        --victim-pid "$victim" --calls "$calls" --modern-calls "$modern_calls" "${seed[@]}" \
        --node-metrics "http://127.0.0.1:$a1/metrics,http://127.0.0.1:$a2/metrics" "$@" \
        --json "$RESULTS/$name-report.json" >"$RESULTS/$name.log" 2>&1 || rc=$?
    python3 -c 'import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' \
        "http://127.0.0.1:$a2/metrics" >"$RESULTS/$name-node2.metrics" 2>/dev/null || true
    verdict "$name" "$rc" "$(grep -h '^node-death: calls' "$RESULTS/$name.log" || tail -n 1 "$RESULTS/$name.log")"
}

stage_kill() {
    local rport
    rport="$(free_port)"; start_redis redis-kill "$rport"
    kill_stage kill "$rport"
}

stage_sentinel() {
    local primary_port primary_pid
    primary_port="$(free_port)"
    local sync=(--repl-diskless-sync-delay 0) i
    start_redis sentinel-primary "$primary_port" "${sync[@]}"
    primary_pid=$redis_pid
    for i in 1 2; do
        start_redis "sentinel-replica$i" "$(free_port)" "${sync[@]}" \
            --replicaof 127.0.0.1 "$primary_port"
    done
    for _ in $(seq 150); do
        [ "$(redis-cli -p "$primary_port" info replication | grep -c 'state=online')" = 2 ] && break
        sleep 0.1
    done
    start_sentinels "$primary_port"
    kill_stage sentinel "redis+sentinel://$sentinel_ports/$SENTINEL_MASTER" \
        --durable-replicas 1 -- --store-primary-pid "$primary_pid" \
        --store-kill-after-ms 1500,2500 --kill-after-ms 1000,2000
}

# start_cluster: nine cluster-enabled redis-servers made three primaries with two replicas each;
# sets cluster_seeds (a 127.0.0.1:PORT list) and cluster_victim_pid (one primary's pid).
start_cluster() {
    local i port ports=() node_pids=() hosts=()
    for i in $(seq 9); do
        port="$(free_port)"
        # The bus port given: the default, port + 10000, is past 65535 above 55535.
        start_redis "cluster-node$i" "$port" --cluster-enabled yes \
            --cluster-config-file "$RESULTS/cluster-nodes-$i.conf" \
            --cluster-port "$(free_port)" --cluster-node-timeout "$CLUSTER_NODE_TIMEOUT_MS" \
            --repl-diskless-sync-delay 0
        ports+=("$port"); node_pids+=("$redis_pid"); hosts+=("127.0.0.1:$port")
    done
    redis-cli --cluster create "${hosts[@]}" --cluster-replicas 2 --cluster-yes \
        >"$RESULTS/cluster-create.log" 2>&1
    for _ in $(seq 300); do
        local ok=0 synced=0
        for port in "${ports[@]}"; do
            redis-cli -p "$port" cluster info | grep -q 'cluster_state:ok' && ok=$((ok + 1))
            redis-cli -p "$port" info replication | grep -q 'master_link_status:up' &&
                synced=$((synced + 1))
        done
        [ "$ok" = 9 ] && [ "$synced" = 6 ] && break
        sleep 0.1
    done
    cluster_seeds="127.0.0.1:${ports[0]},127.0.0.1:${ports[1]},127.0.0.1:${ports[2]}"
    for i in "${!ports[@]}"; do
        if redis-cli -p "${ports[$i]}" role | head -n 1 | grep -q master; then
            cluster_victim_pid="${node_pids[$i]}"
            return 0
        fi
    done
    echo "durable.sh: the cluster has no primary" >&2
    exit 1
}

stage_cluster() {
    start_cluster
    kill_stage cluster "redis+cluster://$cluster_seeds" \
        --durable-replicas 1 -- --store-primary-pid "$cluster_victim_pid" \
        --store-kill-after-ms 1500,2500 --kill-after-ms 1000,2000
}

stage_redis() {
    local rport p a rc=0
    rport="$(free_port)"; start_redis redis-outage "$rport"
    p="$(free_port)"; a="$(free_port)"
    start_node outage-node 2 "$p" "$a" "$rport" \
        --durable-queue-records "$OUTAGE_QUEUE_RECORDS" --durable-queue-bytes "$OUTAGE_QUEUE_BYTES"
    timeout "$STAGE_TIMEOUT_S" python3 "$ROOT/tests/durable/redis_outage.py" \
        --node "http://127.0.0.1:$p/mcp" --admin "http://127.0.0.1:$a" \
        --redis-pid "$redis_pid" --redis-cmd "$redis_cmd" \
        --redis-log "$RESULTS/redis-outage-restarted.log" \
        --restarted-pid-file "$RESULTS/redis-restarted.pid" \
        --queue-records "$OUTAGE_QUEUE_RECORDS" --queue-bytes "$OUTAGE_QUEUE_BYTES" \
        >"$RESULTS/redis.log" 2>&1 || rc=$?
    if [ -s "$RESULTS/redis-restarted.pid" ]; then
        pids+=("$(cat "$RESULTS/redis-restarted.pid")")
    fi
    verdict redis "$rc" "$(grep -h '^redis-outage: [0-9]' "$RESULTS/redis.log" || tail -n 1 "$RESULTS/redis.log")"
}

# A stage that ends the script before its verdict (a set-up helper's exit, a stale process
# holding a port, set -e) prints a FAIL line naming it and the script exits non-zero, never
# silently: seen once, stale processes from an interrupted run made a stage exit 0 unsaid.
stage_now=""
on_exit() {
    local rc=$?
    if [ -n "$stage_now" ]; then
        echo "durable: FAIL $stage_now: the script ended inside the stage (exit $rc; logs: $RESULTS)"
        rc=1
    fi
    cleanup
    exit "$rc"
}
trap on_exit EXIT

IFS=',' read -r -a wanted <<<"$stages"
for s in "${wanted[@]}"; do
    stage_now="$s"
    case "$s" in
        kill) stage_kill ;;
        redis) stage_redis ;;
        sentinel) stage_sentinel ;;
        cluster) stage_cluster ;;
        *) stage_now=""; echo "durable.sh: unknown stage '$s' (known: kill, redis, sentinel, cluster)" >&2; exit 2 ;;
    esac
    stage_now=""
done
echo "durable: $passed passed, $failed failed"
[ "$failed" = 0 ] && [ "$((passed + failed))" = "${#wanted[@]}" ]
