#!/usr/bin/env bash
# Usage: scripts/soak.sh [--minutes M] [--ci] [--round-secs S] [--probe-secs S]
#                        [--reload-every S] [--rss-trend-pct P] [--fd-trend-max N]
#                        [--out DIR] [--no-build] [--server-bin PATH]
#
# The soak (issue 43 item 4): M minutes of mixed load at half of the measured capacity on the
# release binary, one server (`tidemark --threads 2 --tools demo`, a `--config` file with one
# `[[upstream]]` "up" = target/release/tidemark-stdio-echo, `--session-idle-secs 2`,
# `--metrics-listen`), with a SIGHUP every --reload-every seconds.
#
# The load is five tidemark-load processes at once, in rounds of --round-secs (10 s) until the
# M minutes are up (a loaded machine stretches a round, so it runs fewer):
#   legacy    `echo` on sessions (8 connections)               fixed rate, half its capacity
#   modern    `modern` 2026-07-28 stateless echo (8 conns)     fixed rate, half its capacity
#   bridged   `echo --tool up__echo` through the stdio upstream (4 connections; every legacy
#             session of the mix has its own upstream child)   fixed rate, half its capacity
#   streams   `streams`: 20 live slow_counter streams × 10 stamped events/s, every event checked
#             once and in order (lost / duplicated / out of order)
#   resume    `resume`: 20 cuts/s of a slow_counter stream after 1 event, resumed with GET +
#             Last-Event-ID with 1, 10 or 100 events buffered (lost / duplicate events)
# Capacity: first a probe of --probe-secs with the same five, the three call kinds closed-loop;
# each call kind then runs at half the calls/s it reached in the probe.
# The call kinds pace with --coarse-pacing (no spinning load threads beside the server; sends up
# to ~1 ms late, charged to their latency). Every round ends with a sample of the server: RSS
# and open descriptors (/proc) once the load processes exited and every session of the round
# expired (the quiet state, where a leak shows; a few seconds per round), its upstream children,
# sessions active (/metrics), and each kind's p99 over the round (from --json).
# Reloads: every --reload-every seconds, mid-round, the config file flips `log-level`
# (info / warn) and the upstream's `deny-tools` ([] / ["no_such_tool"], so the upstream gets a
# new provider and new children), then SIGHUP.
#
# Verdict (exit 1 on any failure):
#   - no error: every tidemark-load process exited 0 with all errors.* counters 0, and no
#     panic in the server's log;
#   - nothing lost or doubled: streams lost, duplicated, out_of_order and incomplete 0; resume
#     lost_events, duplicate_events, missing_final, duplicate_final 0;
#   - every reload applied: tidemark_upstream_reloads_total{outcome="applied"} = SIGHUPs sent,
#     refused 0;
#   - no growth trend: over the second half of the samples, the Theil-Sen line (the median of
#     the pairwise slopes: a late round's outlier moves it little) of RSS rises by at most
#     --rss-trend-pct (10; 25 with --ci) % of the half's median from the half's first
#     sample to its last, and that of open descriptors by at most --fd-trend-max (4). p99 is reported per sample
#     (range, first- and last-third medians), not judged: the machine is shared.
#
#   --minutes M        soak length (default 30)
#   --ci               the test command's version: 2 minutes, a 5 s probe, --rss-trend-pct 25
#   --round-secs S     one round of load and one sample (default 10)
#   --probe-secs S     the capacity probe (default 10; 5 with --ci)
#   --reload-every S   SIGHUP period (default 60)
#   --rss-trend-pct P  RSS growth allowed over the second half, % of its median (default 10;
#                      25 with --ci)
#   --fd-trend-max N   descriptor growth allowed over the second half (default 4)
#   --out DIR          results (default .cache/soak-results): soak.md (summary and verdict),
#                      samples.csv, soak.svg (RSS, descriptors and p99 against time),
#                      latency.svg (first and last round's percentile curves), runs/*.json,
#                      logs/
#   --no-build         use the binaries already built
#   --server-bin PATH  the tidemark binary (default target/release/tidemark)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MINUTES=30
ROUND_SECS=10
PROBE_SECS=""
RELOAD_EVERY=60
RSS_TREND_PCT=""
FD_TREND_MAX=4
OUT="$ROOT/.cache/soak-results"
BUILD=1
SERVER_BIN_FLAG=""
CI=0
# The fixed part of the mix (per round).
CALL_CONNECTIONS=8
BRIDGE_CONNECTIONS=4
STREAMS=20
STREAM_EVENTS_PER_S=10
RESUME_WORKERS=2
RESUMES_PER_S=20

while [ $# -gt 0 ]; do
    case "$1" in
        --minutes) MINUTES="$2"; shift 2 ;;
        --ci) CI=1; shift ;;
        --round-secs) ROUND_SECS="$2"; shift 2 ;;
        --probe-secs) PROBE_SECS="$2"; shift 2 ;;
        --reload-every) RELOAD_EVERY="$2"; shift 2 ;;
        --rss-trend-pct) RSS_TREND_PCT="$2"; shift 2 ;;
        --fd-trend-max) FD_TREND_MAX="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        --server-bin) SERVER_BIN_FLAG="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "soak.sh: unknown flag $1 (see --help)" >&2; exit 2 ;;
    esac
done
if [ "$CI" = 1 ]; then
    MINUTES=2
    PROBE_SECS="${PROBE_SECS:-5}"
    # Five samples in a minute catch only gross growth: the quiet RSS moves by ±5 MiB between
    # rounds on a loaded machine (docs/reliability.md#soak).
    RSS_TREND_PCT="${RSS_TREND_PCT:-25}"
fi
RSS_TREND_PCT="${RSS_TREND_PCT:-10}"
PROBE_SECS="${PROBE_SECS:-10}"
[ "$ROUND_SECS" -ge 5 ] || { echo "soak.sh: --round-secs must be at least 5" >&2; exit 2; }

for tool in python3 curl; do
    if ! command -v "$tool" >/dev/null; then
        # shellcheck source=scripts/apt-lib.sh
        . "$ROOT/scripts/apt-lib.sh"
        apt_install soak.sh "$tool"
    fi
done
if [ "$BUILD" = 1 ]; then
    (cd "$ROOT" && cargo build --release --quiet -p tidemark -p tidemark-load)
fi
TIDEMARK_BIN="${SERVER_BIN_FLAG:-$ROOT/target/release/tidemark}"
LOAD_BIN="$ROOT/target/release/tidemark-load"
ECHO_BIN="$ROOT/target/release/tidemark-stdio-echo"
RUNS="$OUT/runs"
LOGS="$OUT/logs"
rm -rf "$RUNS" "$LOGS"
mkdir -p "$RUNS" "$LOGS"
ulimit -n "$(ulimit -Hn)"

# The config file: the upstream set and the log level, the two things a SIGHUP flips.
CONFIG="$OUT/soak.toml"
write_config() { # write_config FLIP (0 or 1)
    local level=info deny="[]"
    if [ "$1" = 1 ]; then level=warn; deny='["no_such_tool"]'; fi
    cat >"$CONFIG" <<EOF
log-level = "$level"

[[upstream]]
name = "up"
spec = "stdio:$ECHO_BIN"
prefix = "always"
deny-tools = $deny
EOF
}
write_config 0

# shellcheck source=scripts/server-lib.sh
source "$ROOT/scripts/server-lib.sh"
start_server "$LOGS/server.log" "$TIDEMARK_BIN" --listen 127.0.0.1:0 --threads 2 --tools demo \
    --config "$CONFIG" --session-idle-secs 2 --metrics-listen 127.0.0.1:0
METRICS_URL="$(grep -o 'metrics=http://[^ ]*' "$LOGS/server.log" | head -n 1 | cut -d= -f2)"
UPTIME_BEFORE="$(uptime)"
echo "soak.sh: $MINUTES min in rounds of ${ROUND_SECS}s, SIGHUP every ${RELOAD_EVERY}s;" \
    "server pid $SERVER_PID at $SERVER_URL; $UPTIME_BEFORE"

LOAD_PIDS=()
LOAD_NAMES=()
# launch NAME JSON ARGS...: one tidemark-load process in the background.
launch() {
    local name="$1" json="$2"
    shift 2
    "$LOAD_BIN" "$@" --url "$SERVER_URL" --label "$name" --quiet --json "$json" \
        >"$LOGS/$(basename "$json" .json).log" 2>&1 &
    LOAD_PIDS+=($!)
    LOAD_NAMES+=("$name")
}
# mix TAG SECS RATE_LEGACY RATE_MODERN RATE_BRIDGED: the five processes for SECS seconds;
# an empty rate is closed loop.
mix() {
    local tag="$1" secs="$2" rl="$3" rm="$4" rb="$5"
    LOAD_PIDS=()
    LOAD_NAMES=()
    launch legacy "$RUNS/legacy-$tag.json" echo --connections "$CALL_CONNECTIONS" \
        --warmup 0 --duration "${secs}s" ${rl:+--coarse-pacing --rate "$rl"}
    launch modern "$RUNS/modern-$tag.json" modern --connections "$CALL_CONNECTIONS" \
        --warmup 0 --duration "${secs}s" ${rm:+--coarse-pacing --rate "$rm"}
    launch bridged "$RUNS/bridged-$tag.json" echo --tool up__echo \
        --connections "$BRIDGE_CONNECTIONS" --warmup 0 --duration "${secs}s" ${rb:+--coarse-pacing --rate "$rb"}
    # The streams run over ramp (1 s) + window, and each outlasts the window by its start.
    launch streams "$RUNS/streams-$tag.json" streams --streams "$STREAMS" \
        --events-per-s "$STREAM_EVENTS_PER_S" --ramp 1s --warmup 0 \
        --duration "$((secs - 2))s" --server-pid "$SERVER_PID"
    launch resume "$RUNS/resume-$tag.json" resume --connections "$RESUME_WORKERS" \
        --rate "$RESUMES_PER_S" --buffered 1,10,100 --warmup 0 --duration "${secs}s"
}
# wait_mix TAG: waits for the round's processes; records each exit status.
wait_mix() {
    local i rc
    for i in "${!LOAD_PIDS[@]}"; do
        rc=0
        wait "${LOAD_PIDS[$i]}" || rc=$?
        echo "$1,${LOAD_NAMES[$i]},$rc" >>"$OUT/exits.csv"
        [ "$rc" = 0 ] || echo "soak.sh: round $1: ${LOAD_NAMES[$i]} exited $rc" \
            "(see $LOGS/${LOAD_NAMES[$i]}-$1.log)" >&2
    done
}
metric() { # metric NAME_WITH_LABELS: its value now (0 when absent)
    curl -fsS "$METRICS_URL" | awk -v n="$1" '$1 == n { print $2; found=1 } END { if (!found) print 0 }'
}
sample() { # sample ROUND SECONDS: one line of samples.raw
    local rss fds children sessions
    rss="$(awk '/^VmRSS:/ { print $2 }' "/proc/$SERVER_PID/status")"
    fds="$(find "/proc/$SERVER_PID/fd" -mindepth 1 -maxdepth 1 | wc -l)"
    children="$(metric tidemark_upstream_children)"
    sessions="$(metric tidemark_sessions_active)"
    echo "$1,$2,$rss,$fds,$children,$sessions" >>"$OUT/samples.raw"
}

quiet() { # until the round's sessions expired (--session-idle-secs 2; at most 10 s): the quiet state
    local i
    for i in $(seq 1 100); do
        [ "$(metric tidemark_sessions_active)" = 0 ] && break
        sleep 0.1
    done
    sleep 0.3 # their children exit
}
echo "tag,kind,exit" >"$OUT/exits.csv"
echo "round,t_s,rss_kib,fds,children,sessions" >"$OUT/samples.raw"
START=$SECONDS
sample probe-before 0
echo "== capacity probe: ${PROBE_SECS}s, calls closed-loop"
mix probe "$PROBE_SECS" "" "" ""
wait_mix probe
read -r RATE_LEGACY RATE_MODERN RATE_BRIDGED < <(python3 - "$RUNS" <<'PY'
import json, sys
rates = []
for kind in ("legacy", "modern", "bridged"):
    r = json.load(open(f"{sys.argv[1]}/{kind}-probe.json"))
    rates.append(max(1.0, r["throughput"]["calls_per_s"] / 2))
print(" ".join(f"{x:.0f}" for x in rates))
PY
)
echo "== soak at half capacity: legacy $RATE_LEGACY, modern $RATE_MODERN, bridged $RATE_BRIDGED calls/s"
SOAK_START=$SECONDS
SOAK_SECS=$((MINUTES * 60))
RELOADS=0
NEXT_RELOAD=$RELOAD_EVERY
FLIP=0
round=0
# Rounds until the soak's time is up (a loaded machine stretches rounds: fewer of them).
while [ $((SECONDS - SOAK_START + ROUND_SECS / 2)) -lt "$SOAK_SECS" ]; do
    round=$((round + 1))
    tag="$(printf 'r%03d' "$round")"
    began=$((SECONDS - SOAK_START))
    mix "$tag" "$ROUND_SECS" "$RATE_LEGACY" "$RATE_MODERN" "$RATE_BRIDGED"
    # A reload, mid-round, in the round that reaches the next multiple of --reload-every.
    if [ $((began + ROUND_SECS)) -ge "$NEXT_RELOAD" ]; then
        sleep "$((ROUND_SECS / 2))"
        FLIP=$((1 - FLIP))
        write_config "$FLIP"
        kill -HUP "$SERVER_PID"
        RELOADS=$((RELOADS + 1))
        NEXT_RELOAD=$((NEXT_RELOAD + RELOAD_EVERY))
        echo "   round $round ($((SECONDS - SOAK_START)) s): SIGHUP $RELOADS (log-level and deny-tools flipped)"
    fi
    wait_mix "$tag"
    quiet
    sample "$tag" "$((SECONDS - SOAK_START))"
done
APPLIED="$(metric 'tidemark_upstream_reloads_total{outcome="applied"}')"
REFUSED="$(metric 'tidemark_upstream_reloads_total{outcome="refused"}')"
UPTIME_AFTER="$(uptime)"
kill -0 "$SERVER_PID" 2>/dev/null || { echo "soak.sh: the server died" >&2; exit 1; }
stop_server
PANICS="$(grep -c 'panicked' "$LOGS/server.log" || true)"
WALL=$((SECONDS - START))

"$LOAD_BIN" plot "$RUNS/legacy-r001.json" "$RUNS/legacy-$tag.json" \
    "$RUNS/modern-r001.json" "$RUNS/modern-$tag.json" \
    "$RUNS/bridged-r001.json" "$RUNS/bridged-$tag.json" \
    --out "$OUT/latency.svg" --title "soak: first and last round's call latency" >/dev/null ||
    echo "soak.sh: no latency plot" >&2
TREE="$(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD -- src loadtest || echo '+changes')"
rc=0
python3 - "$OUT" "$RSS_TREND_PCT" "$FD_TREND_MAX" "$RELOADS" "$APPLIED" "$REFUSED" "$PANICS" \
    "$WALL" "$MINUTES" "$RATE_LEGACY,$RATE_MODERN,$RATE_BRIDGED" "$TREE" \
    "${UPTIME_BEFORE##*load average: } → ${UPTIME_AFTER##*load average: }" <<'PY' || rc=$?
import csv, glob, json, os, statistics, sys
(out, rss_pct, fd_max, reloads, applied, refused, panics, wall, minutes, rates, tree,
 load) = sys.argv[1:13]
rss_pct, fd_max, reloads, panics = float(rss_pct), float(fd_max), int(reloads), int(panics)
applied, refused = int(float(applied)), int(float(refused))
KINDS = ("legacy", "modern", "bridged", "streams", "resume")
MUST_BE_ZERO = {"streams": ("lost", "duplicated", "out_of_order", "streams_incomplete"),
                "resume": ("lost_events", "duplicate_events", "missing_final", "duplicate_final")}

def run(kind, tag):
    path = os.path.join(out, "runs", f"{kind}-{tag}.json")
    return json.load(open(path)) if os.path.exists(path) else None

samples = [r for r in csv.DictReader(open(os.path.join(out, "samples.raw")))
           if r["round"].startswith("r")]
exits = list(csv.DictReader(open(os.path.join(out, "exits.csv"))))
failures, totals = [], {k: 0 for k in ("calls", "events", "resumes", "errors")}
totals.update({k: 0 for ks in MUST_BE_ZERO.values() for k in ks})
for e in exits:
    if e["exit"] != "0":
        failures.append(f"{e['kind']} of round {e['tag']} exited {e['exit']}")
rows = []
for s in samples:
    tag, row = s["round"], {"round": s["round"], "t_s": int(s["t_s"]),
                           "rss_mib": int(s["rss_kib"]) / 1024, "fds": int(s["fds"]),
                           "children": int(float(s["children"])),
                           "sessions": int(float(s["sessions"]))}
    for kind in KINDS:
        r = run(kind, tag)
        if r is None:
            failures.append(f"{kind} of round {tag}: no report")
            row[f"{kind}_p99_ms"] = ""
            continue
        errors = sum(v for k, v in r["counters"].items() if k.startswith("errors."))
        totals["errors"] += errors
        if not r["ok"] or errors:
            failures.append(f"{kind} of round {tag}: {'; '.join(r['failures']) or f'{errors} errors'}")
        for key in MUST_BE_ZERO.get(kind, ()):
            totals[key] += r["counters"].get(key, 0)
        tp = r["throughput"]
        totals["calls"] += round(tp.get("calls_per_s", 0) * r["measured_s"])
        totals["events"] += round(tp.get("events_per_s", 0) * r["measured_s"])
        totals["resumes"] += round(tp.get("resumes_per_s", 0) * r["measured_s"])
        row[f"{kind}_p99_ms"] = round(max(x["p99_us"] for x in r["latency"]) / 1000, 3)
    rows.append(row)
with open(os.path.join(out, "samples.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
    w.writeheader()
    w.writerows(rows)
if reloads != applied or refused:
    failures.append(f"reloads: {reloads} SIGHUPs, {applied} applied, {refused} refused")
if panics:
    failures.append(f"{panics} panic(s) in the server's log")

def slope(xs, ys):
    """Theil-Sen: the median of the pairwise slopes (one late round's outlier moves it little)."""
    pairs = [(ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(len(xs))
             for j in range(i + 1, len(xs)) if xs[j] != xs[i]]
    return statistics.median(pairs) if pairs else 0.0

half = rows[len(rows) // 2:]
trend = {}
if len(half) >= 3:
    xs = [r["t_s"] for r in half]
    span = xs[-1] - xs[0]
    for key, limit in (("rss_mib", rss_pct / 100 * statistics.median(r["rss_mib"] for r in half)),
                       ("fds", fd_max)):
        growth = slope(xs, [r[key] for r in half]) * span
        trend[key] = (growth, limit)
        if growth > limit:
            failures.append(f"{key} grows {growth:.2f} over the second half (limit {limit:.2f})")
else:
    failures.append(f"{len(rows)} samples: too few for a trend (3 in the second half at least)")
third = max(1, len(rows) // 3)
def med(part, key):
    vals = [r[key] for r in part if r[key] != ""]
    return statistics.median(vals) if vals else float("nan")
rl, rm, rb = rates.split(",")
md = [f"Soak: {minutes} min in {len(rows)} rounds (wall {wall} s with the probe), tree {tree}, "
      f"load average {load}.",
      f"Half of the probe's capacity: legacy {rl}, modern {rm}, bridged {rb} calls/s; "
      f"20 streams × 10 events/s; 20 resumes/s; {reloads} SIGHUP reload(s).", "",
      f"Totals: calls {totals['calls']:,}, stream events {totals['events']:,}, resumes "
      f"{totals['resumes']:,}; errors {totals['errors']}; streams lost {totals['lost']}, "
      f"duplicated {totals['duplicated']}, out of order {totals['out_of_order']}, incomplete "
      f"{totals['streams_incomplete']}; resume lost {totals['lost_events']}, duplicated "
      f"{totals['duplicate_events']}, missing final {totals['missing_final']}, duplicate final "
      f"{totals['duplicate_final']}; reloads applied {applied}, refused {refused}; panics {panics}.",
      "", "| sample | RSS MiB | fds | upstream children | sessions | "
      + " | ".join(f"{k} p99 ms" for k in KINDS) + " |",
      "| --- | ---: | ---: | ---: | ---: |" + " ---: |" * len(KINDS)]
for r in rows:
    md.append(f"| {r['round']} ({r['t_s']} s) | {r['rss_mib']:.1f} | {r['fds']} | {r['children']} "
              f"| {r['sessions']} | " + " | ".join(str(r[f'{k}_p99_ms']) for k in KINDS) + " |")
md.append("")
md.append(f"RSS first/last {rows[0]['rss_mib']:.1f} / {rows[-1]['rss_mib']:.1f} MiB; fds first/last "
          f"{rows[0]['fds']} / {rows[-1]['fds']}; first-third → last-third medians: RSS "
          f"{med(rows[:third], 'rss_mib'):.1f} → {med(rows[-third:], 'rss_mib'):.1f} MiB, fds "
          f"{med(rows[:third], 'fds'):g} → {med(rows[-third:], 'fds'):g}.")
for k in KINDS:
    vals = [r[f"{k}_p99_ms"] for r in rows if r[f"{k}_p99_ms"] != ""]
    if vals:
        md.append(f"- {k} p99 per sample: {min(vals):g}–{max(vals):g} ms (median first third "
                  f"{med(rows[:third], k + '_p99_ms'):g}, last third {med(rows[-third:], k + '_p99_ms'):g})")
for key, (growth, limit) in trend.items():
    md.append(f"- trend over the second half ({len(half)} samples, Theil-Sen): {key} "
              f"{growth:+.2f} (limit {limit:.2f})")
md += ["", "Verdict: " + ("PASS" if not failures else "FAIL: " + "; ".join(failures[:20]))]
open(os.path.join(out, "soak.md"), "w").write("\n".join(md) + "\n")
print("\n".join(md))

# soak.svg: RSS, descriptors and the calls' p99 against time, one panel each.
W, PH, L = 760, 170, 70
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{3 * PH + 40}" '
       'font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/>',
       f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="14">tidemark soak: {minutes} min, '
       'sampled at the end of every round</text>']
tmax = max(r["t_s"] for r in rows) or 1
panels = [("RSS (MiB)", [("rss_mib", "#1f77b4")]), ("open descriptors", [("fds", "#2ca02c")]),
          ("p99 (ms)", [(f"{k}_p99_ms", c) for k, c in zip(KINDS, ("#1f77b4", "#ff7f0e",
                        "#2ca02c", "#9467bd", "#8c564b"))])]
for i, (title, series) in enumerate(panels):
    top = 30 + i * PH
    vals = [r[k] for k, _ in series for r in rows if r[k] != ""] or [0]
    hi = max(vals) * 1.1 or 1
    X = lambda t: L + (W - L - 20) * t / tmax
    Y = lambda v: top + PH - 30 - (PH - 45) * v / hi
    svg.append(f'<text x="{L}" y="{top + 8}">{title}</text>')
    svg.append(f'<line x1="{L}" y1="{Y(0):.1f}" x2="{W - 20}" y2="{Y(0):.1f}" stroke="#999"/>')
    svg.append(f'<text x="{L - 6}" y="{Y(hi / 1.1) + 4:.1f}" text-anchor="end">{hi / 1.1:.4g}</text>')
    svg.append(f'<text x="{L - 6}" y="{Y(0) + 4:.1f}" text-anchor="end">0</text>')
    svg.append(f'<text x="{W - 20}" y="{Y(0) + 14:.1f}" text-anchor="end">{tmax} s</text>')
    for j, (key, colour) in enumerate(series):
        pts = " ".join(f"{X(r['t_s']):.1f},{Y(r[key]):.1f}" for r in rows if r[key] != "")
        svg.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{pts}"/>')
        if len(series) > 1:
            svg.append(f'<text x="{L + 10 + 90 * j}" y="{top + 22}" fill="{colour}">'
                       f'{key.split("_")[0]}</text>')
svg.append("</svg>")
open(os.path.join(out, "soak.svg"), "w").write("\n".join(svg) + "\n")
sys.exit(1 if failures else 0)
PY
echo "soak.sh: wrote $OUT/soak.md, $OUT/samples.csv, $OUT/soak.svg (wall ${WALL}s)"
exit "$rc"
