#!/usr/bin/env bash
# Usage: scripts/limit.sh [--runs N] [--duration D] [--warmup D] [--connections C]
#                         [--server-cpu N] [--load-cpu N] [--driver auto|uring|epoll]
#                         [--out DIR] [--no-build] [--server-bin PATH]
#
# tidemark's hot path against the limit (issue 40 §2): the bare monoio HTTP/1.1 server
# (loadtest/src/bin/tidemark-bare.rs: tidemark's runtime set-up, one fixed JSON-RPC answer with
# the request's id, no MCP) beside tidemark's `ping`, legacy `tools/call echo` (SSE) and the
# 2026-07-28 echo (`modern`), in one alternating run: rounds of bare, ping, echo, modern (odd
# runs in that order, even runs reversed, so drift on the shared VM hits all alike), --runs
# rounds. Each server is started fresh per round with one worker thread on --server-cpu; the
# load generator (tidemark-load; `ping` against the bare server) runs on --load-cpu (taskset).
#
# Per run: calls/s from tidemark-load, and the server's CPU per call: user + system time of the
# server process (/proc/PID/stat, every thread) over a window as long as the measured one,
# sampled after the warm-up while the load runs, divided by the calls in that window (calls/s
# × the sampled interval). It does not depend on whether the load generator is the bottleneck.
# The same window splits that CPU into user and system µs per call (utime and stime, fields 14
# and 15 of /proc/PID/stat), and counts TCP segments per call: the host's `Tcp: OutSegs`
# (/proc/net/snmp) over the window ÷ calls, both ends of the loopback (request and answer: 2.0
# when each travels in one segment). What separates the scenarios shows there: the kernel's
# share per call stays flat while the user share follows callgrind's instructions.
# Reported: per scenario the median calls/s, the median CPU per call and its user and system
# medians, the median segments per call, and the ratios of the issue's goals (median CPU per
# call): echo/ping ≤ 1.18, modern/ping ≤ 1.10, ping/bare ≤ 1.0, each PASS or MISS. Exit status
# 1 when a load run failed its checks (not when a goal is missed).
#
# Output (default target/bench/limit/): limit.md (uptime before and after, the table, the ratios,
# the tree it ran on; ready for docs/performance.md), limit.json, runs/*.json (tidemark-load's
# reports) and runs/*.cpu (user and system ticks, interval, OutSegs per run), logs/.
#
# Flags:
#   --runs N          rounds (default 3)
#   --duration D      measurement window per run (default 5s)
#   --warmup D        warm-up per run (default 1s)
#   --connections C   load connections (default 64)
#   --server-cpu N    CPU for the servers (default 1)
#   --load-cpu N      CPU for the load generator (default 0)
#   --driver D        both servers' --driver (default auto: io_uring with tidemark's ring flags)
#   --out DIR         output directory (default target/bench/limit)
#   --no-build        use the release binaries already built
#   --server-bin PATH the tidemark binary (default target/release/tidemark)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS=3
DURATION=5s
WARMUP=1s
CONNECTIONS=64
SERVER_CPU=1
LOAD_CPU=0
DRIVER=auto
OUT="$ROOT/target/bench/limit"
BUILD=1
SERVER_BIN_FLAG=""

while [ $# -gt 0 ]; do
    case "$1" in
        --runs) RUNS="$2"; shift 2 ;;
        --duration) DURATION="$2"; shift 2 ;;
        --warmup) WARMUP="$2"; shift 2 ;;
        --connections) CONNECTIONS="$2"; shift 2 ;;
        --server-cpu) SERVER_CPU="$2"; shift 2 ;;
        --load-cpu) LOAD_CPU="$2"; shift 2 ;;
        --driver) DRIVER="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        --server-bin) SERVER_BIN_FLAG="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "limit.sh: unknown flag $1 (see --help)" >&2; exit 2 ;;
    esac
done

TIDEMARK_BIN="${SERVER_BIN_FLAG:-$ROOT/target/release/tidemark}"
BARE_BIN="$ROOT/target/release/tidemark-bare"
LOAD_BIN="$ROOT/target/release/tidemark-load"
RUNS_DIR="$OUT/runs"
mkdir -p "$RUNS_DIR" "$OUT/logs"
rm -f "$RUNS_DIR"/*.json "$RUNS_DIR"/*.cpu

# shellcheck source=scripts/server-lib.sh
source "$ROOT/scripts/server-lib.sh"
pin_cpus "$SERVER_CPU" "$LOAD_CPU"

if [ "$BUILD" = 1 ]; then
    (cd "$ROOT" && cargo build --release --quiet -p tidemark -p tidemark-load)
fi
UPTIME_BEFORE="$(uptime)"
echo "limit.sh: $UPTIME_BEFORE"

# seconds D: a duration as the load generator takes it (5s, 500ms) in seconds, for sleep.
seconds() {
    case "$1" in
        *ms) awk -v ms="${1%ms}" 'BEGIN { print ms / 1000 }' ;;
        *s) echo "${1%s}" ;;
        *) echo "$1" ;;
    esac
}
# cpu_ticks PID: user and system time of PID (all its threads) so far, in clock ticks.
cpu_ticks() {
    awk '{ print $14, $15 }' "/proc/$1/stat"
}
# out_segs: TCP segments the host sent so far (the `Tcp:` values line of /proc/net/snmp).
out_segs() {
    awk '/^Tcp:/ { n++; if (n == 1) for (i = 1; i <= NF; i++) if ($i == "OutSegs") f = i }
         /^Tcp:/ && n == 2 { print $f }' /proc/net/snmp
}

FAILED=0
# one NAME RUN: NAME bare, ping, echo or modern; runs/NAME-RUN.json and runs/NAME-RUN.cpu
# ("user_before sys_before user_after sys_after ns_between segs_before segs_after").
one() {
    local name="$1" run="$2" scenario bin log="$OUT/logs/limit-$1-$2"
    case "$name" in
        bare) scenario=ping; bin="$BARE_BIN" ;;
        *) scenario="$name"; bin="$TIDEMARK_BIN" ;;
    esac
    local server_args=(--listen 127.0.0.1:0 --threads 1 --driver "$DRIVER")
    [ "$name" = bare ] || server_args+=(--tools demo)
    start_server "$log.server.log" "${PIN_SERVER[@]}" "$bin" "${server_args[@]}"
    echo "== $name ($scenario), run $run/$RUNS"
    "${PIN_LOAD[@]}" "$LOAD_BIN" "$scenario" --url "$SERVER_URL" --label "$name" \
        --connections "$CONNECTIONS" --duration "$DURATION" --warmup "$WARMUP" --quiet \
        --json "$RUNS_DIR/$name-$run.json" >"$log.load.log" 2>&1 &
    local load_pid=$! before after started ended segs_before segs_after
    # tidemark-load's window opens 0.1 s after its sessions (a few ms), then the warm-up.
    sleep "$(awk -v w="$(seconds "$WARMUP")" 'BEGIN { print w + 0.15 }')"
    before="$(cpu_ticks "$SERVER_PID")"
    segs_before="$(out_segs)"
    started="$(date +%s%N)"
    sleep "$(seconds "$DURATION")"
    after="$(cpu_ticks "$SERVER_PID")"
    segs_after="$(out_segs)"
    ended="$(date +%s%N)"
    echo "$before $after $((ended - started)) $segs_before $segs_after" >"$RUNS_DIR/$name-$run.cpu"
    if ! wait "$load_pid"; then
        echo "   FAILED (see $log.load.log)"
        FAILED=1
    fi
    grep -E '^  calls_per_s' "$log.load.log" || tail -n 3 "$log.load.log"
    stop_server
}

ORDER=(bare ping echo modern)
for run in $(seq 1 "$RUNS"); do
    if [ $((run % 2)) = 1 ]; then
        for name in "${ORDER[@]}"; do one "$name" "$run"; done
    else
        for ((i = ${#ORDER[@]} - 1; i >= 0; i--)); do one "${ORDER[$i]}" "$run"; done
    fi
done
UPTIME_AFTER="$(uptime)"
echo "limit.sh: $UPTIME_AFTER"

TREE="$(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD -- src loadtest || echo '+changes')"
python3 - "$RUNS_DIR" "$(getconf CLK_TCK)" "$OUT" <<'PY'
import glob, json, os, statistics, sys
runs_dir, hz, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
rows = {}
for path in sorted(glob.glob(os.path.join(runs_dir, "*.json"))):
    name, run = os.path.basename(path)[: -len(".json")].rsplit("-", 1)
    calls_per_s = json.load(open(path))["throughput"].get("calls_per_s") or 0
    u0, s0, u1, s1, ns, segs0, segs1 = (
        float(v) for v in open(path[: -len(".json")] + ".cpu").read().split())
    user_s, sys_s, window_s = (u1 - u0) / hz, (s1 - s0) / hz, ns / 1e9
    calls = calls_per_s * window_s
    per_call = (lambda x: x / calls) if calls else (lambda x: None)
    us = lambda x: None if per_call(x) is None else 1e6 * per_call(x)
    rows.setdefault(name, []).append({"run": int(run), "calls_per_s": calls_per_s,
        "server_cpu_share": (user_s + sys_s) / window_s,
        "server_cpu_us_per_call": us(user_s + sys_s), "server_user_us_per_call": us(user_s),
        "server_system_us_per_call": us(sys_s), "tcp_segments_per_call": per_call(segs1 - segs0)})
titles = {"bare": "bare monoio server (the limit; `ping` load)", "ping": "tidemark `ping`",
          "echo": "tidemark `tools/call echo` (legacy, SSE)", "modern": "tidemark 2026-07-28 echo"}
def median_of(runs, key):
    values = [r[key] for r in runs if r[key] is not None]
    return statistics.median(values) if values else None
med = {}
for name, runs in rows.items():
    med[name] = {key: median_of(runs, key) for key in ["calls_per_s", "server_cpu_us_per_call",
        "server_user_us_per_call", "server_system_us_per_call", "tcp_segments_per_call"]}
goals = [("echo", "ping", 1.18, "echo CPU/call ÷ ping's (echo ≥ 85 % of ping)"),
         ("modern", "ping", 1.10, "2026-07-28 echo CPU/call ÷ ping's"),
         ("ping", "bare", 1.00, "ping CPU/call ÷ the bare server's")]
ratios = []
for a, b, goal, what in goals:
    x = med.get(a, {}).get("server_cpu_us_per_call"); y = med.get(b, {}).get("server_cpu_us_per_call")
    ratio = x / y if x and y else None
    ratios.append({"ratio": f"{a}/{b}", "what": what, "value": ratio, "goal": goal,
                   "verdict": "?" if ratio is None else ("PASS" if ratio <= goal else "MISS")})
md = ["| | calls/s | server CPU per call | CPU share | each run (calls/s at µs per call) |",
      "| --- | ---: | ---: | ---: | --- |"]
for name in ["bare", "ping", "echo", "modern"]:
    if name not in med:
        continue
    m, runs = med[name], sorted(rows[name], key=lambda r: r["run"])
    share = statistics.median(r["server_cpu_share"] for r in runs)
    per_run = "; ".join(f"{r['calls_per_s']:,.0f} at {r['server_cpu_us_per_call'] or 0:.2f}" for r in runs)
    md.append(f"| {titles[name]} | {m['calls_per_s']:,.0f} | {m['server_cpu_us_per_call'] or 0:.2f} µs "
              f"| {100 * share:.0f} % | {per_run} |")
md += ["", "| medians | user µs per call | system µs per call | TCP segments per call |",
       "| --- | ---: | ---: | ---: |"]
for name in ["bare", "ping", "echo", "modern"]:
    if name in med:
        m = med[name]
        cells = [m["server_user_us_per_call"], m["server_system_us_per_call"], m["tcp_segments_per_call"]]
        md.append(f"| {titles[name]} | " + " | ".join("-" if c is None else f"{c:.2f}" for c in cells) + " |")
md += ["", "| goal (server CPU per call, medians) | ratio | goal | |", "| --- | ---: | ---: | --- |"]
for r in ratios:
    value = "-" if r["value"] is None else f"{r['value']:.3f}"
    md.append(f"| {r['what']} | {value} | ≤ {r['goal']:.2f} | {r['verdict']} |")
json.dump({"medians": med, "runs": rows, "ratios": ratios}, open(os.path.join(out, "limit.json"), "w"), indent=2)
open(os.path.join(out, "limit.md.tmp"), "w").write("\n".join(md) + "\n")
PY
{
    echo "Machine: $(nproc --all) vCPU $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'),"
    echo "$(uname -sr), $(rustc --version). Each server: 1 worker thread on CPU $SERVER_CPU (driver $DRIVER);"
    echo "tidemark-load on CPU $LOAD_CPU, $CONNECTIONS connections; $RUNS alternating round(s) of $DURATION after"
    echo "$WARMUP warm-up; medians. Server CPU per call: utime + stime from /proc over the window ÷ calls;"
    echo "TCP segments per call: the host's OutSegs (/proc/net/snmp) over the window ÷ calls."
    echo "Tree $TREE. Load average before: ${UPTIME_BEFORE##*load average: }; after: ${UPTIME_AFTER##*load average: }."
    echo
    cat "$OUT/limit.md.tmp"
} >"$OUT/limit.md"
rm -f "$OUT/limit.md.tmp"
cat "$OUT/limit.md"
echo
echo "limit.sh: wrote $OUT/limit.md, limit.json"
exit "$FAILED"
