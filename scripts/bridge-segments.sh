#!/usr/bin/env bash
# Usage: scripts/bridge-segments.sh [--runs N] [--trace-window S] [--server-cpu N] [--load-cpu N]
#                                   [--out DIR] [--no-build] [--server-bin PATH]
#
# Where the latency a stdio bridge adds at one call in flight goes (issue 43 item 1), by kernel
# trace: tidemark (`--upstream stdio:ECHO`, both isolation modes) and the bare relay
# (`tidemark-bare --relay ECHO`: an HTTP body written to one child's stdin, its reply line sent
# back, blocking pipes, no MCP: the least a relay through a third process costs) each front
# target/release/tidemark-stdio-echo on --server-cpu, while `tidemark-load echo --connections 1
# --sessions 1` calls from --load-cpu. During each run `perf record -a` takes the scheduler
# (sched_switch, sched_wakeup), syscall (raw_syscalls) and io_uring (submit, complete)
# tracepoints for --trace-window seconds, and every call is cut into six segments at these
# marks, one a call:
#   A  the load tool's sendto (its request leaves)
#   B  the server's first completion after A (tidemark: the request's RECV; the relay too)
#   C  the child's read returns (it has the request)
#   D  the child's write (its reply leaves)
#   E  the server has the reply (tidemark: a completion; the relay: its read returns)
#   W  the server wakes the load tool (its answer is in the load tool's socket)
#   F  the load tool's recvfrom returns
# A→B is the loopback request, B→C the server's work and hand-off to the child, C→D the child,
# D→E the reply's way back, E→W the server's work and its send, W→F the load tool's wake-up.
# Printed: each segment's p50 and p90 per server (median over --runs), and tidemark's excess
# over the relay segment by segment. The tracepoints slow every syscall a little, so the sum
# is above the untraced p50 (`scripts/bridge-compare.sh --only direct,c1` gives those); the
# differences between the servers are what this is for. Needs `perf` with tracepoint access
# (root, or perf_event_paranoid ≤ -1) and python3; not part of the test command.
#
# Output (default target/bench/segments/): segments.md (the table), trace-*.txt (perf script).
#
# Flags:
#   --runs N          traced runs per server (default 3)
#   --trace-window S  seconds traced in each run (default 0.3: ~2 000 calls)
#   --server-cpu N    CPU of the server and its child (default 0)
#   --load-cpu N      CPU of the load generator (default 1)
#   --out DIR         output directory (default target/bench/segments)
#   --no-build        use the release binaries already built
#   --server-bin PATH the tidemark binary (default target/release/tidemark)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS=3
WINDOW=0.3
SERVER_CPU=0
LOAD_CPU=1
OUT="$ROOT/target/bench/segments"
BUILD=1
TIDEMARK_BIN="$ROOT/target/release/tidemark"

while [ $# -gt 0 ]; do
    case "$1" in
        --runs) RUNS="$2"; shift 2 ;;
        --trace-window) WINDOW="$2"; shift 2 ;;
        --server-cpu) SERVER_CPU="$2"; shift 2 ;;
        --load-cpu) LOAD_CPU="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        --server-bin) TIDEMARK_BIN="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "bridge-segments.sh: unknown flag $1 (see --help)" >&2; exit 2 ;;
    esac
done
command -v perf >/dev/null || { echo "bridge-segments.sh: needs perf" >&2; exit 2; }
command -v python3 >/dev/null || { echo "bridge-segments.sh: needs python3" >&2; exit 2; }
if [ "$BUILD" = 1 ]; then
    (cd "$ROOT" && cargo build --release --quiet -p tidemark -p tidemark-load)
fi
ECHO_BIN="$ROOT/target/release/tidemark-stdio-echo"
LOAD_BIN="$ROOT/target/release/tidemark-load"
BARE_BIN="$ROOT/target/release/tidemark-bare"
mkdir -p "$OUT"

# shellcheck source=scripts/server-lib.sh
source "$ROOT/scripts/server-lib.sh"

# trace NAME RUN COMMAND...: the server under taskset, a c1 load, the traced window.
trace() {
    local name="$1" run="$2" load_pid
    shift 2
    start_server "$OUT/server-$name-$run.log" taskset -c "$SERVER_CPU" "$@"
    taskset -c "$LOAD_CPU" "$LOAD_BIN" echo --url "$SERVER_URL" --connections 1 --sessions 1 \
        --duration 4s --warmup 1s --quiet >"$OUT/load-$name-$run.log" 2>&1 &
    load_pid=$!
    sleep 2
    perf record -q -a -o "$OUT/perf.data" -e raw_syscalls:sys_enter -e raw_syscalls:sys_exit \
        -e io_uring:io_uring_submit_req -e io_uring:io_uring_complete \
        -e sched:sched_switch -e sched:sched_wakeup -- sleep "$WINDOW" >/dev/null 2>&1
    wait "$load_pid" || { echo "bridge-segments.sh: the load run against $name failed" >&2; exit 1; }
    stop_server
    perf script -i "$OUT/perf.data" -F comm,tid,cpu,time,event,trace 2>/dev/null \
        >"$OUT/trace-$name-$run.txt"
    rm -f "$OUT/perf.data"
}

for run in $(seq 1 "$RUNS"); do
    echo "== run $run/$RUNS"
    trace bare-relay "$run" "$BARE_BIN" --listen 127.0.0.1:0 --relay "$ECHO_BIN"
    trace tidemark-shared "$run" "$TIDEMARK_BIN" --listen 127.0.0.1:0 --threads 1 \
        --upstream "stdio:$ECHO_BIN" --upstream-isolation shared
    trace tidemark-session "$run" "$TIDEMARK_BIN" --listen 127.0.0.1:0 --threads 1 \
        --upstream "stdio:$ECHO_BIN"
done

python3 - "$OUT" "$RUNS" "$(git -C "$ROOT" log -1 --format=%h)" "$(cut -d' ' -f1-3 /proc/loadavg)" \
    <<'EOF' | tee "$OUT/segments.md"
import re, statistics, sys
out, runs, tree, load = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
SERVERS = [("bare-relay", "tidemark-bare"), ("tidemark-shared", "tidemark-0"),
           ("tidemark-session", "tidemark-0")]
SEGMENTS = [("A", "B", "request over loopback to the server"),
            ("B", "C", "server's work, hand-off to the child"),
            ("C", "D", "the child"),
            ("D", "E", "the reply back to the server"),
            ("E", "W", "server's work, its send to the client"),
            ("W", "F", "the client's wake-up and read"),
            ("A", "F", "the whole call")]
LINE = re.compile(r"\s*(.+?)\s+\d+\s+\[\d+\]\s+([\d.]+):\s+(\S+):\s*(.*)")

def calls(path, server):
    done, cur = [], {}
    for line in open(path):
        m = LINE.match(line)
        if not m:
            continue
        comm, t, name, rest = m.group(1).strip(), float(m.group(2)) * 1e6, m.group(3), m.group(4)
        if comm == "load-0" and name == "raw_syscalls:sys_enter" and rest.startswith("NR 44 "):
            if "F" in cur:
                done.append(cur)
            cur = {"A": t}
        elif "A" not in cur:
            continue
        elif comm.startswith("tidemark-stdio"):
            if name == "raw_syscalls:sys_exit" and rest.startswith("NR 0 =") and "C" not in cur:
                cur["C"] = t
            elif name == "raw_syscalls:sys_enter" and rest.startswith("NR 1 ") and "C" in cur:
                cur.setdefault("D", t)
        elif comm == server:
            if "B" not in cur and name == "io_uring:io_uring_complete":
                cur["B"] = t
            elif "D" in cur and "E" not in cur and (name == "io_uring:io_uring_complete" or
                    (name == "raw_syscalls:sys_exit" and rest.startswith("NR 0 ="))):
                cur["E"] = t
            elif "E" in cur and name == "sched:sched_wakeup" and "comm=load-0" in rest:
                cur.setdefault("W", t)
        elif comm == "load-0" and name == "raw_syscalls:sys_exit" and rest.startswith("NR 45 "):
            if "W" in cur:
                cur["F"] = t
    return [c for c in done if all(k in c for k in "ABCDEWF")]

def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))]

table = {}
for name, comm in SERVERS:
    per_run = [calls(f"{out}/trace-{name}-{r}.txt", comm) for r in range(1, runs + 1)]
    table[name] = {"calls": [len(c) for c in per_run]}
    for a, b, _ in SEGMENTS:
        p50 = statistics.median(pct([c[b] - c[a] for c in cs], 0.5) for cs in per_run if cs)
        p90 = statistics.median(pct([c[b] - c[a] for c in cs], 0.9) for cs in per_run if cs)
        table[name][a + b] = (p50, p90)
print(f"Bridge segments at one call in flight (tree {tree}, load average at the end {load}; "
      f"{runs} traced runs each, medians of the runs' p50 / p90, µs; traced, so above untraced "
      f"latencies):\n")
print("| segment | bare relay | tidemark shared | tidemark per-session | shared − relay (p50) |")
print("| --- | ---: | ---: | ---: | ---: |")
for a, b, what in SEGMENTS:
    cells = [f"{table[n][a + b][0]:.0f} / {table[n][a + b][1]:.0f}" for n, _ in SERVERS]
    excess = table["tidemark-shared"][a + b][0] - table["bare-relay"][a + b][0]
    print(f"| {a}→{b} {what} | " + " | ".join(cells) + f" | {excess:+.0f} |")
print("\nCalls cut per run: " + ", ".join(f"{n} {table[n]['calls']}" for n, _ in SERVERS))
EOF
