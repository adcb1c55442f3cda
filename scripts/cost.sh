#!/usr/bin/env bash
# Usage: scripts/cost.sh [--runs K] [--scenarios LIST] [--requests N] [--rate R]
#                        [--budgets FILE] [--out DIR] [--server-bin PATH] [--no-build]
#
# The cost gate: callgrind instructions per request of the release server, one scenario at a
# time, against the budgets committed in benches/cost-budgets.txt. Each measurement is
# scripts/callgrind.sh on the epoll driver, one worker, one connection, one request in flight,
# paced at --rate (every request finds the server idle, so the event loop turns once per
# request), and `--count requests`: the driver's blocking park (epoll_wait, the timer wheel)
# and the session reaper are not counted, since both are paid per unit of wall time, which
# valgrind stretches. Scenarios:
#   ping          JSON-RPC ping on a session (legacy era)
#   echo          tools/call echo on a session (legacy era, built-in demo tools)
#   modern-echo   tools/call echo as a stateless 2026-07-28 request (no session)
#   bridged-echo  tools/call echo through --upstream stdio:target/release/tidemark-stdio-echo
#                 (tidemark's instructions only: the stdio child is not traced)
#
# Prints per scenario `cost: <scenario> <measured> budget <b> (+x.x %)` and exits 1 when any
# measurement is above its budget + 3 %. With --runs K each scenario is measured K times: every
# run is printed, then `spread: <scenario> min <a> median <b> max <c> (<(max-min)/median> %)`,
# and the median is held against the budget.
#
# Budget rule: a budget only goes down. A change that must raise one says why in its commit.
#
# Flags:
#   --runs K           measurements per scenario (default 1)
#   --scenarios LIST   comma-separated (default ping,echo,modern-echo,bridged-echo)
#   --requests N       requests of callgrind.sh's smaller run; the larger runs 2N (default 1000)
#   --rate R           requests a second (default 200: about 15 s of load per measurement)
#   --budgets FILE     budgets file (default benches/cost-budgets.txt)
#   --out DIR          callgrind output (default target/bench/cost)
#   --server-bin PATH  server binary to measure (default target/release/tidemark), e.g. a
#                      before-binary copied aside, for a before/after on one machine; the
#                      stdio child and the load generator stay this tree's release builds
#   --no-build         use the release binaries already built
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS=1
SCENARIOS="ping,echo,modern-echo,bridged-echo"
REQUESTS=1000
RATE=200
BUDGETS="$ROOT/benches/cost-budgets.txt"
OUT="$ROOT/target/bench/cost"
BUILD=1
SERVER_BIN="$ROOT/target/release/tidemark"

while [ $# -gt 0 ]; do
    case "$1" in
        --runs) RUNS="$2"; shift 2 ;;
        --scenarios) SCENARIOS="$2"; shift 2 ;;
        --requests) REQUESTS="$2"; shift 2 ;;
        --rate) RATE="$2"; shift 2 ;;
        --budgets) BUDGETS="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --server-bin) SERVER_BIN="$2"; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "cost.sh: unknown flag $1 (see --help)" >&2; exit 2 ;;
    esac
done
[ "$RUNS" -ge 1 ] 2>/dev/null || { echo "cost.sh: --runs K, K >= 1" >&2; exit 2; }
[ -r "$BUDGETS" ] || { echo "cost.sh: no budgets file $BUDGETS" >&2; exit 2; }
[ -x "$SERVER_BIN" ] || [ "$BUILD" = 1 ] || { echo "cost.sh: no server binary $SERVER_BIN" >&2; exit 2; }

if [ "$BUILD" = 1 ]; then
    (cd "$ROOT" && cargo build --release --quiet -p tidemark -p tidemark-load)
fi

# budget_of SCENARIO: its instructions in the budgets file (lines `scenario instructions ...`).
budget_of() {
    awk -v s="$1" '$1 == s { print $2; found = 1 } END { if (!found) exit 1 }' \
        <(grep -v '^[[:space:]]*#' "$BUDGETS")
}

# measure SCENARIO RUN: prints its instructions per request.
measure() {
    local out="$OUT/$1-$2" line
    line="$("$ROOT/scripts/callgrind.sh" --no-build --scenario "$1" --connections 1 \
        --requests "$REQUESTS" --rate "$RATE" --count requests --server-bin "$SERVER_BIN" \
        --out "$out" | tail -n 1)"
    case "$line" in
        "callgrind: $1 "*) echo "$line" | awk '{ print $3 }' ;;
        *) echo "cost.sh: callgrind.sh gave no count for $1 (see $out)" >&2; return 1 ;;
    esac
}

failed=0
IFS=',' read -r -a scenarios <<<"$SCENARIOS"
for scenario in "${scenarios[@]}"; do
    budget="$(budget_of "$scenario")" || { echo "cost.sh: no budget for $scenario in $BUDGETS" >&2; exit 2; }
    counts=()
    for run in $(seq 1 "$RUNS"); do
        count="$(measure "$scenario" "$run")" || exit 1
        counts+=("$count")
        [ "$RUNS" = 1 ] || echo "run: $scenario $run $count"
    done
    sorted="$(printf '%s\n' "${counts[@]}" | sort -n)"
    min="$(echo "$sorted" | head -n 1)"
    max="$(echo "$sorted" | tail -n 1)"
    median="$(echo "$sorted" | sed -n "$(( (RUNS + 1) / 2 ))p")"
    if [ "$RUNS" -gt 1 ]; then
        awk -v s="$scenario" -v a="$min" -v m="$median" -v b="$max" \
            'BEGIN { printf "spread: %s min %d median %d max %d (%.2f %%)\n", s, a, m, b, 100 * (b - a) / m }'
    fi
    if ! awk -v s="$scenario" -v m="$median" -v b="$budget" 'BEGIN {
            over = 100 * (m - b) / b
            verdict = (over > 3) ? " FAIL: above budget + 3 %" : ""
            printf "cost: %s %d budget %d (%+.1f %%)%s\n", s, m, b, over, verdict
            exit (over > 3) }'; then
        failed=1
    fi
done
exit "$failed"
