#!/usr/bin/env bash
# Usage: scripts/streams.sh [--streams N] [--events-per-s E] [--duration D] [--ramp D]
#                           [--sweep] [--sweep-streams LIST] [--sweep-rates LIST] [--knee-ms MS]
#                           [--ci] [--server-threads T] [--server-cpus LIST] [--load-cpu N]
#                           [--load-threads T] [--out DIR] [--no-build] [--server-bin PATH]
#
# Many live streams at once (issue 43 §2): `tidemark-load streams` holds N concurrent SSE
# streams, each a legacy `slow_counter` call receiving E events/s (`delay_ms` = 1000 / E,
# `stamp: true`: every progress notification carries its emit time), against a fresh release
# server (`--tools demo`). Every event must arrive once and in order (lost, duplicated,
# out_of_order all 0); reported: delivery latency p50/p99/p99.9 (server emit → client read, the
# same wall clock), the server's RSS (max over the run) and CPU (utime + stime over the window).
# Goals on the 2-core machine: 10 000 streams × 10 events/s with p99 ≤ 5 ms and RSS ≤ 512 MiB.
#
# Modes:
#   (default)  one run at --streams × --events-per-s for --duration (default 10 000 × 10, 30 s)
#   --sweep    one run per point of --sweep-streams × --sweep-rates (fresh server each), the knee
#              (the smallest total event rate whose p99 passes --knee-ms), streams-knee.svg
#              (p99 against events/s, one line per per-stream rate) and the percentile curves
#              of every point (streams-sweep.svg, tidemark-load plot)
#   --ci       a short correctness run on the debug binaries (300 streams × 20 events/s for
#              3 s): exit 1 unless it is clean. No goal is judged (the debug build is slow).
#
# The machine has 2 cores for server and load together; by default nothing is pinned (the
# server's --threads 2 pins its own workers, the load generator floats). --server-cpus and
# --load-cpu pin them apart (taskset), as scripts/limit.sh does. The script raises the soft
# limit of open files to the hard one: 10 000 streams are 10 000 sockets in each process.
#
# Output (default target/bench/streams/): streams.md (uptime before and after, the table, the
# verdicts), runs/*.json (tidemark-load's reports), streams.svg (delivery percentiles) or the
# sweep's SVGs, logs/.
#
# Flags:
#   --streams N          live streams (default 10000)
#   --events-per-s E     events per second per stream (default 10)
#   --duration D         measured window per run (default 30s; 10s per sweep point)
#   --ramp D             the streams start spread over this long (default 2s)
#   --sweep              run the sweep instead of one point
#   --sweep-streams LIST comma list (default 1000,2500,5000,10000,15000)
#   --sweep-rates LIST   comma list of events/s per stream (default 10,40)
#   --knee-ms MS         the p99 that marks the knee (default 50)
#   --ci                 the short correctness run (debug build)
#   --server-threads T   tidemark --threads (default 2)
#   --server-cpus LIST   taskset the server to LIST (default: not pinned)
#   --load-cpu N         taskset the load generator to CPU N (default: not pinned)
#   --load-threads T     tidemark-load --threads (default 1)
#   --out DIR            output directory (default target/bench/streams)
#   --no-build           use the binaries already built
#   --server-bin PATH    the tidemark binary (default target/release/tidemark)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STREAMS=10000
RATE=10
DURATION=""
RAMP=2s
SWEEP=0
SWEEP_STREAMS=1000,2500,5000,10000,15000
SWEEP_RATES=10,40
KNEE_MS=50
CI=0
SERVER_THREADS=2
SERVER_CPUS=""
LOAD_CPU=""
LOAD_THREADS=1
OUT="$ROOT/target/bench/streams"
BUILD=1
SERVER_BIN_FLAG=""

while [ $# -gt 0 ]; do
    case "$1" in
        --streams) STREAMS="$2"; shift 2 ;;
        --events-per-s) RATE="$2"; shift 2 ;;
        --duration) DURATION="$2"; shift 2 ;;
        --ramp) RAMP="$2"; shift 2 ;;
        --sweep) SWEEP=1; shift ;;
        --sweep-streams) SWEEP_STREAMS="$2"; shift 2 ;;
        --sweep-rates) SWEEP_RATES="$2"; shift 2 ;;
        --knee-ms) KNEE_MS="$2"; shift 2 ;;
        --ci) CI=1; shift ;;
        --server-threads) SERVER_THREADS="$2"; shift 2 ;;
        --server-cpus) SERVER_CPUS="$2"; shift 2 ;;
        --load-cpu) LOAD_CPU="$2"; shift 2 ;;
        --load-threads) LOAD_THREADS="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        --server-bin) SERVER_BIN_FLAG="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "streams.sh: unknown flag $1 (see --help)" >&2; exit 2 ;;
    esac
done

PROFILE=release
if [ "$CI" = 1 ]; then
    PROFILE=debug
    STREAMS=300
    RATE=20
    DURATION="${DURATION:-3s}"
    RAMP=500ms
    OUT="$ROOT/target/bench/streams-ci"
fi
TIDEMARK_BIN="${SERVER_BIN_FLAG:-$ROOT/target/$PROFILE/tidemark}"
LOAD_BIN="$ROOT/target/$PROFILE/tidemark-load"
RUNS_DIR="$OUT/runs"
mkdir -p "$RUNS_DIR" "$OUT/logs"
rm -f "$RUNS_DIR"/*.json

# shellcheck source=scripts/server-lib.sh
source "$ROOT/scripts/server-lib.sh"
PIN_SERVER=()
PIN_LOAD=()
[ -n "$SERVER_CPUS" ] && PIN_SERVER=(taskset -c "$SERVER_CPUS")
[ -n "$LOAD_CPU" ] && PIN_LOAD=(taskset -c "$LOAD_CPU")

if [ "$BUILD" = 1 ]; then
    if [ "$PROFILE" = release ]; then
        (cd "$ROOT" && cargo build --release --quiet -p tidemark -p tidemark-load)
    else
        (cd "$ROOT" && cargo build --quiet -p tidemark -p tidemark-load)
    fi
fi
# Each stream is a socket in the server and one in the load generator.
ulimit -n "$(ulimit -Hn)"
UPTIME_BEFORE="$(uptime)"
echo "streams.sh: $UPTIME_BEFORE (open files: $(ulimit -n))"

FAILED=0
# one N E D: a fresh server, `tidemark-load streams`; runs/streams-N-E.json.
one() {
    local n="$1" e="$2" d="$3" name="streams-$1-$2"
    start_server "$OUT/logs/$name.server.log" "${PIN_SERVER[@]}" "$TIDEMARK_BIN" \
        --listen 127.0.0.1:0 --threads "$SERVER_THREADS" --tools demo
    echo "== $n streams × $e events/s for $d"
    if ! "${PIN_LOAD[@]}" "$LOAD_BIN" streams --url "$SERVER_URL" --label "tidemark $n×$e" \
        --streams "$n" --events-per-s "$e" --duration "$d" --ramp "$RAMP" --warmup 1s \
        --threads "$LOAD_THREADS" --server-pid "$SERVER_PID" --quiet \
        --json "$RUNS_DIR/$name.json" --plot "$OUT/$name.svg" >"$OUT/logs/$name.load.log" 2>&1
    then
        echo "   FAILED (see $OUT/logs/$name.load.log)"
        FAILED=1
    fi
    grep -E '^streams:' "$OUT/logs/$name.load.log" || tail -n 5 "$OUT/logs/$name.load.log"
    stop_server
}

if [ "$SWEEP" = 1 ]; then
    IFS=, read -r -a SWEEP_N <<<"$SWEEP_STREAMS"
    IFS=, read -r -a SWEEP_E <<<"$SWEEP_RATES"
    for e in "${SWEEP_E[@]}"; do
        for n in "${SWEEP_N[@]}"; do one "$n" "$e" "${DURATION:-10s}"; done
    done
else
    one "$STREAMS" "$RATE" "${DURATION:-30s}"
fi
UPTIME_AFTER="$(uptime)"
echo "streams.sh: $UPTIME_AFTER"

TREE="$(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD -- src loadtest || echo '+changes')"
python3 - "$RUNS_DIR" "$OUT" "$KNEE_MS" "$SWEEP" <<'PY'
import glob, json, os, sys
runs_dir, out, knee_ms, sweep = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4] == "1"
rows = []
for path in glob.glob(os.path.join(runs_dir, "*.json")):
    r = json.load(open(path))
    d, v, c = r["latency"][0], r["values"], r["counters"]
    rows.append({"streams": int(v["streams"]), "rate": round(1000 / r["config"]["delay_ms"], 2),
        "events_per_s": r["throughput"]["events_per_s"], "p50": d["p50_us"], "p99": d["p99_us"],
        "p999": d["p999_us"], "rss_mib": v.get("server_rss_max_bytes", 0) / 2**20,
        "cpu": v.get("server_cpu_cores"), "us_per_event": v.get("server_cpu_us_per_event"),
        "lost": c.get("lost"), "dup": c.get("duplicated"), "ooo": c.get("out_of_order"),
        "ok": r["ok"]})
rows.sort(key=lambda r: (r["rate"], r["streams"]))
md = ["| streams × events/s | events/s received | delivery p50 / p99 / p99.9 | server RSS max | server CPU | CPU per event | lost / dup / out of order | |",
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
for r in rows:
    cpu = "-" if r["cpu"] is None else f"{r['cpu']:.2f} cores"
    per = "-" if r["us_per_event"] is None else f"{r['us_per_event']:.1f} µs"
    md.append(f"| {r['streams']:,} × {r['rate']:g} | {r['events_per_s']:,.0f} | {r['p50']/1000:.2f} / "
              f"{r['p99']/1000:.2f} / {r['p999']/1000:.2f} ms | {r['rss_mib']:.0f} MiB | {cpu} | {per} "
              f"| {r['lost']} / {r['dup']} / {r['ooo']} | {'OK' if r['ok'] else 'FAILED'} |")
goal = [r for r in rows if r["streams"] == 10000 and r["rate"] == 10]
if goal:
    g = goal[0]
    md += ["", f"Goal 10 000 × 10 events/s: p99 {g['p99']/1000:.2f} ms (≤ 5 ms: "
           f"{'PASS' if g['p99'] <= 5000 else 'MISS'}), RSS {g['rss_mib']:.0f} MiB (≤ 512 MiB: "
           f"{'PASS' if g['rss_mib'] <= 512 else 'MISS'})."]
if sweep:
    knees = []
    for rate in sorted({r["rate"] for r in rows}):
        line = [r for r in rows if r["rate"] == rate]
        past = [r for r in line if r["p99"] > knee_ms * 1000]
        knees.append(f"{rate:g} events/s per stream: " + (f"p99 passes {knee_ms:g} ms at "
                     f"{past[0]['streams']:,} streams ({past[0]['events_per_s']:,.0f} events/s)"
                     if past else f"p99 stays under {knee_ms:g} ms up to {line[-1]['streams']:,} streams"))
    md += ["", "Knee: " + "; ".join(knees) + "."]
    # p99 (log) against events/s received, one line per per-stream rate.
    W, H, L, B = 720, 420, 70, 50
    xs = [r["events_per_s"] for r in rows] or [1]
    ys = [max(r["p99"], 1) / 1000 for r in rows] or [1]
    import math
    xmax = max(xs) * 1.05
    ylo, yhi = math.floor(math.log10(min(ys + [knee_ms]) )) , math.ceil(math.log10(max(ys + [knee_ms]) * 1.01))
    if yhi == ylo: yhi += 1
    X = lambda x: L + (W - L - 20) * x / xmax
    Y = lambda y: H - B - (H - B - 30) * (math.log10(y) - ylo) / (yhi - ylo)
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W/2}" y="18" text-anchor="middle" font-size="14">tidemark: delivery p99 against events/s (N streams × E events/s)</text>']
    for k in range(ylo, yhi + 1):
        y = Y(10 ** k)
        svg.append(f'<line x1="{L}" y1="{y:.1f}" x2="{W-20}" y2="{y:.1f}" stroke="#ddd"/><text x="{L-6}" y="{y+4:.1f}" text-anchor="end">{10**k:g} ms</text>')
    for i in range(6):
        x = xmax * i / 5
        svg.append(f'<text x="{X(x):.1f}" y="{H-B+16}" text-anchor="middle">{x/1000:,.0f}k</text>')
    svg.append(f'<text x="{(W+L)/2}" y="{H-12}" text-anchor="middle">events/s received (all streams)</text>')
    ky = Y(knee_ms)
    svg.append(f'<line x1="{L}" y1="{ky:.1f}" x2="{W-20}" y2="{ky:.1f}" stroke="#c00" stroke-dasharray="6,4"/><text x="{W-24}" y="{ky-4:.1f}" text-anchor="end" fill="#c00">knee: p99 {knee_ms:g} ms</text>')
    colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b"]
    for i, rate in enumerate(sorted({r["rate"] for r in rows})):
        line = [r for r in rows if r["rate"] == rate]
        pts = " ".join(f"{X(r['events_per_s']):.1f},{Y(max(r['p99'],1)/1000):.1f}" for r in line)
        col = colours[i % len(colours)]
        svg.append(f'<polyline fill="none" stroke="{col}" stroke-width="2" points="{pts}"/>')
        for r in line:
            svg.append(f'<circle cx="{X(r["events_per_s"]):.1f}" cy="{Y(max(r["p99"],1)/1000):.1f}" r="3" fill="{col}"><title>{r["streams"]} × {r["rate"]:g}: p99 {r["p99"]/1000:.2f} ms</title></circle>')
            svg.append(f'<text x="{X(r["events_per_s"])+4:.1f}" y="{Y(max(r["p99"],1)/1000)-5:.1f}" font-size="10" fill="{col}">{r["streams"]:,}</text>')
        svg.append(f'<text x="{L+10}" y="{40+16*i}" fill="{col}">— {rate:g} events/s per stream (labels: streams)</text>')
    svg.append("</svg>")
    open(os.path.join(out, "streams-knee.svg"), "w").write("\n".join(svg) + "\n")
json.dump(rows, open(os.path.join(out, "streams.json"), "w"), indent=2)
open(os.path.join(out, "streams.md.tmp"), "w").write("\n".join(md) + "\n")
PY
if [ "$SWEEP" = 1 ]; then
    "$LOAD_BIN" plot "$RUNS_DIR"/*.json --out "$OUT/streams-sweep.svg" \
        --title "delivery latency by percentile, per streams × events/s"
fi
{
    echo "Machine: $(nproc --all) vCPU $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'),"
    echo "$(uname -sr). tidemark ($PROFILE) --threads $SERVER_THREADS${SERVER_CPUS:+ on CPUs $SERVER_CPUS},"
    echo "tidemark-load --threads $LOAD_THREADS${LOAD_CPU:+ on CPU $LOAD_CPU}; streams start over $RAMP, 1 s warm-up."
    echo "Tree $TREE. Load average before: ${UPTIME_BEFORE##*load average: }; after: ${UPTIME_AFTER##*load average: }."
    echo
    cat "$OUT/streams.md.tmp"
} >"$OUT/streams.md"
rm -f "$OUT/streams.md.tmp"
cat "$OUT/streams.md"
echo
echo "streams.sh: wrote $OUT/streams.md"
exit "$FAILED"
