#!/usr/bin/env bash
# Usage: scripts/test.sh [--only SUITE[,SUITE...]] [--help]
#
# The project's test command. Runs, in order, and keeps going when one fails:
#   cargo        cargo test --workspace --all-targets (unit, integration, proptest, benches in
#                test mode), the doc tests, and `cargo doc --no-deps` with warnings as errors;
#                Debian's redis-server (apt-installed, redis-cli with it) for
#                tests/durable_adopt.rs, durable_sentinel.rs and durable_cluster.rs (a
#                three-shard Redis Cluster, a primary killed: about 10 s), required
#   clients      scripts/clients.sh: the official TypeScript and Python SDK clients against the
#                release binary, including mid-call stream drops (cut proxy) and --threads 2,
#                the 2026-07-28 era's clients (Python SDK default mode, TypeScript v2
#                client auto and pinned, rmcp Discover), both SDKs over https:// (--tls-cert),
#                the Python client with a bearer token (--auth-tokens) in both eras, and
#                a Unix socket file (--listen unix:PATH): curl --unix-socket and the Python
#                SDK over an httpx uds transport in both eras (about 15 s)
#   browser      scripts/browser.sh: the official TypeScript clients (both eras) in headless
#                Chromium from a page of a listed --allowed-origin (CORS), pages of
#                unlisted origins blocked by the browser, and both eras with a bearer token
#                against --auth-tokens (requestInit headers) plus the tokenless 401
#   bridge       scripts/bridge.sh: tidemark in front of real MCP servers (--upstream):
#                server-everything (npm), mcp-server-time (PyPI), an official-Python-SDK stdio and
#                HTTP server, and one serving 2026-07-28 (tidemark speaking that revision to it),
#                with the official clients of both eras, the cut proxy, raw retries and faults
#   connect      scripts/connect.sh: `tidemark connect` (the client-side bridge) and mcp-remote,
#                12 non-idempotent calls each through the cut proxy (random cut points) against
#                tidemark (both eras: 2026-07-28 re-sends with the same Idempotency-Key, 409s
#                followed) and the official Python (with and without an event store) and TS SDK
#                servers: nothing lost, doubled or run twice; unknown outcomes reported -31006
#   conformance  scripts/conformance.sh: the official MCP conformance suite (0.1.16 active,
#                pending, all; 0.2.0-alpha.12 --requirements 2025-11-25 and 2026-07-28)
#   fault        scripts/fault.sh: the randomized fault test on each driver (io_uring, epoll):
#                2 000 legacy and 2 000 modern keyed cut-and-recovered calls, 500 bridged calls
#                per upstream (stdio, HTTP) with upstream faults; --audit: the legacy runs
#                with --audit-log, each call id checked to have exactly one line with the
#                result its client got (scripts/audit-check.py)
#   fuzz         scripts/fuzz.sh --seconds 20: each coverage-guided fuzz target (libFuzzer via
#                cargo-fuzz on stable) for 20 s from the committed seed corpora
#   haproxy      scripts/haproxy.sh: two nodes behind two real HAProxy instances (Debian's
#                package, apt-installed) on the configuration deploy/haproxy-config generates:
#                the official clients of both eras and cut streams through it, re-POST 409,
#                keyed re-issue across instances, tasks/get, a node drained mid-call
#   auth         scripts/auth.sh: a real OAuth authorization server (oidc-provider, npm) issuing
#                JWT access tokens; the verifier checks them through its JWKS URL, across a
#                key rotation; then the release binary requiring them: both eras with a
#                provider token, hostile tokens (alg none, HS256, expired, nbf, aud, iss, kid,
#                tampered, 100 KB, query) refused with nothing leaked, a rotation over the
#                wire, A's session with B's token -> 404, the official TypeScript clients'
#                own OAuth discovery (client credentials; v1 legacy, v2 2026-07-28), the Python
#                client in both eras, and a trace-level log holding no token
#   metrics      scripts/metrics.sh: `promtool check metrics` on the exposition, the Grafana
#                dashboard's names exist, and a real Prometheus (Debian's package,
#                apt-installed) scraping during a load run: rates, p99 and counts as the load says
#   durable      scripts/durable.sh: two durable nodes (--durable to a real redis-server) behind
#                HAProxy (--backup-peers): SIGKILL of one at a random moment under legacy and
#                keyed 2026-07-28 load (every call ends with its result or -31006; no event lost
#                or doubled, no tool run twice), then redis-server killed and restarted mid-run,
#                then the kill on a Sentinel-managed store (primary, two replicas, three
#                sentinels) and on a three-shard Redis Cluster, each store primary SIGKILLed
#                under load before node 1 is
#   traces       scripts/traces.sh: OpenTelemetry spans (--otlp-endpoint) received by an OTLP
#                receiver on the official opentelemetry-proto bindings (PyPI): attributes,
#                parentage from the client's traceparent, through a bridged call into an
#                upstream tidemark; a stalled receiver: spans dropped and counted
#   streams      scripts/streams.sh --ci: 300 live slow_counter streams × 20 events/s for 3 s
#                (tidemark-load streams, debug build): every event once and in order, nothing
#                refused or cut; the 10 000-stream run and the sweep are documented beside it
#                (docs/performance.md) and too long for this command
#   soak         scripts/soak.sh --ci: 2 minutes of mixed load on the release binary (legacy,
#                2026-07-28 and bridged calls at half the capacity a 5 s probe measured, 20
#                live streams, cuts resumed with Last-Event-ID, a SIGHUP reload): no error,
#                nothing lost or doubled, no RSS or descriptor growth over the second half; the
#                30-minute run is documented beside it (docs/reliability.md#soak)
#   kubernetes   scripts/kubernetes.sh: deploy/kubernetes/ checked offline (no cluster): the
#                manifests are the renderer's output, valid --strict against the Kubernetes
#                1.28 and 1.37 schemas (kubernetes-validate, PyPI), coherent (the balancer lists
#                the StatefulSet's pods; probes, grace, Secret), the real tidemark on the
#                ConfigMap's settings (probes 200, node id from the pod index, SIGTERM exit 0),
#                `haproxy -c` on the balancer's ConfigMap
#   cost         scripts/cost.sh: the cost gate, callgrind instructions per request of the
#                release binary (epoll driver, one request in flight) for ping, tools/call echo,
#                the 2026-07-28 echo and a bridged stdio echo, each against its budget in
#                benches/cost-budgets.txt (fails above budget + 3 %); Debian's valgrind and
#                binutils (apt-installed); about 1.5 minutes after the release build
#   --only SUITES  run only these (comma-separated: cargo,clients,browser,bridge,connect,
#                conformance,fault,fuzz,haproxy,auth,metrics,durable,traces,streams,soak,
#                kubernetes,cost)
#
# Needs cargo, python3 (with venv), node/npm (any version npm runs on; Node 22 is installed from
# npm into .cache/); installs everything else into .cache/ (and Debian's chromium, haproxy,
# redis-server, valgrind and binutils, with apt; and prometheus).
# Prints one line per suite and a final `suites: N passed, M failed`; exit 0 only when all passed.
# Each suite's output is also kept in .cache/test-logs/SUITE.log, and a failing suite's failure
# lines are printed again just before that last line.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ALL_SUITES="cargo,clients,browser,bridge,connect,conformance,fault,fuzz,haproxy,auth,metrics,durable,traces,streams,soak,kubernetes,cost"

only="$ALL_SUITES"
while [ "$#" -gt 0 ]; do
    case "$1" in
        --only) only="${2:?--only needs a value}"; shift 2 ;;
        --help) sed -n '2,/^set -euo/{/^set/d; s/^# \{0,1\}//p}' "$0"; exit 0 ;;
        *) echo "test.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
done
IFS=',' read -r -a selected <<<"$only"
for s in "${selected[@]}"; do
    case ",$ALL_SUITES," in
        *",$s,"*) ;;
        *) echo "test.sh: unknown suite '$s' (known: $ALL_SUITES)" >&2; exit 2 ;;
    esac
done

# run_suite SUITE: runs one suite; its exit status is the suite's.
run_suite() {
    local s="$1" rc=0 missing
    case "$s" in
        cargo)
            # tests/durable_*.rs talk to real redis-servers (the cluster test creates its cluster
            # with redis-cli, a dependency of Debian's redis-server); required here, not skipped.
            if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
                # shellcheck source=scripts/apt-lib.sh
                . "$ROOT/scripts/apt-lib.sh"
                apt_install test.sh redis-server || rc=$?
            fi
            TIDEMARK_REQUIRE_REDIS=1 cargo test --workspace --all-targets --no-fail-fast || rc=$?
            # The same durable tests with the mirror thread writing every core's records
            # (--durable-writer thread; the default is core, and the cluster test uses the
            # thread's writer either way, so it is not repeated).
            TIDEMARK_REQUIRE_REDIS=1 TIDEMARK_TEST_DURABLE_WRITER=thread cargo test \
                --test durable_adopt --test durable_sentinel --no-fail-fast || rc=$?
            cargo test --doc || rc=$?
            RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --lib || rc=$?
            ;;
        clients) scripts/clients.sh || rc=$? ;;
        browser) scripts/browser.sh || rc=$? ;;
        bridge) scripts/bridge.sh || rc=$? ;;
        connect) scripts/connect.sh || rc=$? ;;
        conformance) scripts/conformance.sh || rc=$? ;;
        fault) scripts/fault.sh --audit || rc=$? ;;
        fuzz) scripts/fuzz.sh --seconds 20 || rc=$? ;;
        haproxy) scripts/haproxy.sh || rc=$? ;;
        auth) scripts/auth.sh || rc=$? ;;
        metrics) scripts/metrics.sh || rc=$? ;;
        durable) scripts/durable.sh || rc=$? ;;
        traces) scripts/traces.sh || rc=$? ;;
        streams) scripts/streams.sh --ci || rc=$? ;;
        soak) scripts/soak.sh --ci || rc=$? ;;
        kubernetes) scripts/kubernetes.sh || rc=$? ;;
        cost)
            missing=()
            command -v valgrind >/dev/null || missing+=(valgrind)
            command -v objdump >/dev/null || missing+=(binutils)
            if [ ${#missing[@]} -gt 0 ]; then
                # shellcheck source=scripts/apt-lib.sh
                . "$ROOT/scripts/apt-lib.sh"
                apt_install test.sh "${missing[@]}" || rc=$?
            fi
            [ "$rc" != 0 ] || scripts/cost.sh || rc=$?
            ;;
    esac
    return "$rc"
}

# Each suite's whole output is also kept in LOGS/SUITE.log, and the lines of a failing suite that
# say why are printed again after the summary: a CI log is often read from its end only, and a
# suite's verdict lines would otherwise sit far above it.
LOGS="$ROOT/.cache/test-logs"
# The lines of a failing suite's log printed again at the end, at most.
FAILURE_LINES_MAX=12
mkdir -p "$LOGS"
passed=0
failed=0
summary=()
failures=()
cd "$ROOT"
for s in "${selected[@]}"; do
    echo "=== $s ==="
    start=$SECONDS
    set +e
    run_suite "$s" 2>&1 | tee "$LOGS/$s.log"
    rc=${PIPESTATUS[0]}
    set -e
    secs=$((SECONDS - start))
    if [ "$rc" = 0 ]; then
        passed=$((passed + 1))
        summary+=("PASS $s (${secs}s)")
    else
        failed=$((failed + 1))
        summary+=("FAIL $s (${secs}s, exit $rc)")
        failures+=("$s")
    fi
done
echo "=== summary ==="
printf '%s\n' "${summary[@]}"
for s in "${failures[@]}"; do
    echo "=== why $s failed (its log's failure lines; whole log: .cache/test-logs/$s.log) ==="
    # The verdict lines (a stage's FAIL, a test FAILED and where it panicked, an error), not
    # the server's own log lines (timestamped), which name failures on purpose in many tests.
    grep -E 'FAIL|panicked at|^error|timed out|never answered' "$LOGS/$s.log" |
        grep -vE '^[0-9]{4}-[0-9]{2}-[0-9]{2}T|^(PASS|ok )|, 0 failed|test result: ok' |
        tail -n "$FAILURE_LINES_MAX" || tail -n "$FAILURE_LINES_MAX" "$LOGS/$s.log"
done
echo "suites: $passed passed, $failed failed"
[ "$failed" = 0 ]
