#!/usr/bin/env bash
# Usage: scripts/conformance.sh [--only NAME[,NAME...]] [--no-build] [--server-cmd CMD] [--help]
#
# Runs the official MCP conformance suite (npm @modelcontextprotocol/conformance) against
# tidemark. Installs Node 22 and the suite versions into .cache/ (idempotent), builds tidemark
# (cargo build --release), starts `target/release/tidemark --listen 127.0.0.1:0 --tools
# conformance`, reads the URL from its first stdout line and runs, in order:
#   0.1.16-active     0.1.16 default (active) suite          must have 0 failures
#   0.1.16-pending    0.1.16 --suite pending                  must have no FAILURE
#   0.1.16-all        0.1.16 --suite all                      must have 0 failures
#   alpha12-2025-11-25  0.2.0-alpha.12 --requirements 2025-11-25  0 failures in every scenario
#   alpha12-2026-07-28  0.2.0-alpha.12 --requirements 2026-07-28  0 failures in every scenario
#                       it runs: the scored ones (the stateless revision on the same endpoint)
#                       and those the suite does not score (the tasks extension, pending ones)
# The suites talk to http://localhost:PORT/mcp (the dns-rebinding scenario needs a localhost URL).
#
#   --only NAMES       run only these suites (comma-separated names from the list above)
#   --no-build         do not run cargo build (use the existing target/release/tidemark)
#   --server-cmd CMD   start CMD instead of tidemark (it must print tidemark's first line,
#                      `... listening on http://127.0.0.1:PORT/mcp ...`); for stand-in servers
#
# Prints each suite's summary line (failing checks with their messages below it) and a final
# `conformance: N passed, M failed`. Per suite, .cache/conformance-results/ keeps <suite>.log
# (stdout) and <suite>/ (checks.json per scenario, the suite's -o output); the server's output is
# server.stdout / server.stderr there. Exit 0 only when every selected suite passed. The server is
# killed on exit.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache"
RESULTS="$CACHE/conformance-results"
ALL_SUITES="0.1.16-active,0.1.16-pending,0.1.16-all,alpha12-2025-11-25,alpha12-2026-07-28"
STABLE_VERSION="0.1.16"
ALPHA_VERSION="0.2.0-alpha.12"
SERVER_START_TIMEOUT_S=30

usage() { sed -n '2,29s/^# \{0,1\}//p' "$0"; }

only="$ALL_SUITES"
build=1
server_cmd=""
while [ "$#" -gt 0 ]; do
    case "$1" in
        --only) only="${2:?--only needs a value}"; shift 2 ;;
        --no-build) build=0; shift ;;
        --server-cmd) server_cmd="${2:?--server-cmd needs a value}"; shift 2 ;;
        --help) usage; exit 0 ;;
        *) echo "conformance.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done
IFS=',' read -r -a selected <<<"$only"
for s in "${selected[@]}"; do
    case ",$ALL_SUITES," in
        *",$s,"*) ;;
        *) echo "conformance.sh: unknown suite '$s' (known: $ALL_SUITES)" >&2; exit 2 ;;
    esac
done

# shellcheck source=SCRIPTDIR/setup-node.sh
source "$ROOT/scripts/setup-node.sh"

# install_suite VERSION: npm-installs the suite into .cache/conformance-VERSION once.
install_suite() {
    local version="$1" dir="$CACHE/conformance-$1"
    local pkg="$dir/node_modules/@modelcontextprotocol/conformance/package.json"
    if [ -f "$pkg" ] && node -e "process.exit(require('$pkg').version === '$version' ? 0 : 1)"; then
        return 0
    fi
    mkdir -p "$dir"
    [ -f "$dir/package.json" ] || printf '{"name":"conformance-%s","private":true}\n' "$version" >"$dir/package.json"
    (cd "$dir" && npm install --no-audit --no-fund --loglevel=error --save-exact \
        "@modelcontextprotocol/conformance@$version" >/dev/null)
}

needs_alpha=0
needs_stable=0
for s in "${selected[@]}"; do
    case "$s" in alpha12-*) needs_alpha=1 ;; *) needs_stable=1 ;; esac
done
[ "$needs_stable" = 1 ] && install_suite "$STABLE_VERSION"
[ "$needs_alpha" = 1 ] && install_suite "$ALPHA_VERSION"

if [ -z "$server_cmd" ]; then
    if [ "$build" = 1 ]; then
        (cd "$ROOT" && cargo build --release --quiet)
    fi
    server_cmd="$ROOT/target/release/tidemark --listen 127.0.0.1:0 --tools conformance"
fi

mkdir -p "$RESULTS"
server_out="$RESULTS/server.stdout"
server_err="$RESULTS/server.stderr"
server_pid=""
cleanup() {
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Start the server; its first stdout line names the URL.
# shellcheck disable=SC2086  # server_cmd is a command line by design
$server_cmd >"$server_out" 2>"$server_err" &
server_pid=$!
url=""
for _ in $(seq $((SERVER_START_TIMEOUT_S * 10))); do
    if [ -s "$server_out" ]; then
        url="$(head -n 1 "$server_out" | grep -o 'http://[^ ]*' || true)"
        [ -n "$url" ] && break
    fi
    if ! kill -0 "$server_pid" 2>/dev/null; then
        echo "conformance.sh: server exited before printing its URL; stderr:" >&2
        tail -n 20 "$server_err" >&2
        exit 1
    fi
    sleep 0.1
done
if [ -z "$url" ]; then
    echo "conformance.sh: no 'listening on http://...' line within ${SERVER_START_TIMEOUT_S}s" >&2
    exit 1
fi
# The dns-rebinding scenario sends Host: <url host>, which must be a localhost name.
url="${url/127.0.0.1/localhost}"
echo "conformance: server $(head -n 1 "$server_out")"
echo "conformance: url $url"

passed=0
failed=0
failed_names=()

# failed_checks DIR [--list]: counts (or lists, one per line) the FAILURE checks under DIR, of
# every scenario run (an alpha --requirements run's exit code ignores the ones it does not
# score; this script holds them to the same bar).
failed_checks() {
    node - "$@" <<'JS'
const fs = require('fs'), path = require('path');
const [dir, mode] = process.argv.slice(2);
const rows = [];
const dirs = fs.existsSync(dir) ? fs.readdirSync(dir) : [];
for (const d of dirs.sort()) {
  const file = path.join(dir, d, 'checks.json');
  if (!fs.existsSync(file)) continue;
  const scenario = d.replace(/^server-/, '').replace(/-\d{4}-\d\d-\d\dT.*$/, '');
  for (const c of JSON.parse(fs.readFileSync(file, 'utf8'))) {
    if (c.status === 'FAILURE') {
      rows.push(`${scenario} [${c.id}] ${c.description}: ${c.errorMessage ?? ''}`.slice(0, 400));
    }
  }
}
console.log(mode === '--list' ? rows.join('\n') : String(rows.length));
JS
}

# run_suite NAME VERSION ARGS...: runs one suite, prints its summary, counts the verdict.
run_suite() {
    local name="$1" version="$2"
    shift 2
    local bin="$CACHE/conformance-$version/node_modules/@modelcontextprotocol/conformance/dist/index.js"
    local log="$RESULTS/$name.log" out="$RESULTS/$name"
    local start rc=0
    rm -rf "$out"
    start=$(date +%s)
    node "$bin" server --url "$url" "$@" -o "$out" >"$log" 2>&1 || rc=$?
    local secs=$(($(date +%s) - start))
    local total failures
    total="$(grep -E '^Total: [0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1 || true)"
    [ -n "$total" ] || total="$(grep -E 'Passed: [0-9]+/[0-9]+' "$log" | tail -n 1 || true)"
    # Every FAILURE check of every scenario, from the -o output (the suite summary omits them).
    failures="$(failed_checks "$out")"
    if ! kill -0 "$server_pid" 2>/dev/null; then
        echo "conformance: $name: the server died during the suite; stderr tail:" >&2
        tail -n 20 "$server_err" >&2
        rc=1
    fi
    if [ "$rc" = 0 ] && [ "$failures" = 0 ]; then
        passed=$((passed + 1))
        echo "conformance: PASS $name (${secs}s): ${total:-no summary line}"
    else
        failed=$((failed + 1))
        failed_names+=("$name")
        echo "conformance: FAIL $name (${secs}s, exit $rc, $failures FAILURE checks): ${total:-no summary line}"
        grep -E '^✗' "$log" | head -n 40 | sed 's/^/    /' || true
        failed_checks "$out" --list | head -n 40 | sed 's/^/    /'
        echo "    (log: $log; checks: $out/*/checks.json)"
    fi
    if grep -q 'Not scored for' "$log"; then
        echo "    not scored by the suite (counted here all the same):"
        sed -n '/Not scored for/,$p' "$log" | grep -E '^\s+[✓✗] ' | sed 's/^\s*/      /' || true
    fi
}

for s in "${selected[@]}"; do
    case "$s" in
        0.1.16-active) run_suite "$s" "$STABLE_VERSION" ;;
        0.1.16-pending) run_suite "$s" "$STABLE_VERSION" --suite pending ;;
        0.1.16-all) run_suite "$s" "$STABLE_VERSION" --suite all ;;
        alpha12-2025-11-25) run_suite "$s" "$ALPHA_VERSION" --requirements 2025-11-25 ;;
        alpha12-2026-07-28) run_suite "$s" "$ALPHA_VERSION" --requirements 2026-07-28 ;;
    esac
done

if [ "$failed" -gt 0 ]; then
    echo "conformance: failed suites: ${failed_names[*]}"
fi
echo "conformance: $passed passed, $failed failed"
[ "$failed" = 0 ]
