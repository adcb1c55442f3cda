#!/usr/bin/env bash
# Usage: scripts/auth.sh [--only STAGE[,STAGE...]] [--no-build] [--help]
#
# Authorization against a real OAuth 2.1 authorization server (issue 18): installs Node 22 and
# oidc-provider into .cache/ (scripts/auth-lib.sh), starts it on loopback issuing JWT access
# tokens for a resource (client credentials grant with an RFC 8707 resource indicator), then:
#   jwt      the verifier's ignored test real_authorization_server_tokens_verify_through_its_
#            jwks_url_across_a_rotation (cargo test --lib): tokens in RS256, ES256 and EdDSA
#            verify through the provider's JWKS URL found by discovery; another resource or
#            issuer refuses them; after the provider rotates its key the new kid is refused at
#            once and accepted after the background refetch, old tokens still verify
# then, end to end against the release binary (cargo build --release unless --no-build; the
# environment's TIDEMARK_BIN names another build, e.g. target/debug/tidemark for trace lines) started
# with --auth-jwks-url <the provider's jwks_uri> --auth-issuer <its issuer> --auth-resource <its
# own URL>, a policy (get_counter needs tools:write) and a test key (--auth-jwks-file) that signs
# the hostile tokens whose only fault is a claim; tests/auth/e2e.mjs drives the wire:
#   wire     no token -> 401 with the resource_metadata challenge; the metadata names the provider;
#            a provider token -> initialize + tools/call in the legacy era and tools/call in the
#            2026-07-28 era; a tools:read token on get_counter -> 403 insufficient_scope
#   rotation the provider rotates its key: the new kid may be 401 invalid_token while the keys
#            refresh, and is accepted within --auth-jwks-min-refetch-secs (polled, then insisted)
#   hostile  alg none, HS256 keyed with the RSA public key, expired, nbf future, wrong aud (the
#            provider's token for another resource), wrong iss, unknown kid, tampered payload:
#            401 invalid_token in both eras; a 100 KB header -> 431; a token in the query -> 400;
#            nothing of a token in any answer
#   cross-subject  two client ids (two subjects): A's session id with B's token (POST, GET,
#            DELETE) -> 404, the POST's answer the same as an unknown session's; A's session lives on
#   ts-oauth the official TypeScript client with the SDK's ClientCredentialsProvider does the whole
#            discovery (401 -> metadata -> authorization server metadata -> token -> retry), then
#            tools/list + tools/call (legacy era)
#   ts-modern-oauth  the same with the TypeScript v2 client (@modelcontextprotocol/client) pinned
#            to 2026-07-28
#   py-legacy, py-modern  the official Python client with a provider token (--bearer-token)
#   no-token-in-log  tidemark's log (RUST_LOG=trace) contains none of the tokens sent above
#   exchange another tidemark fronting an HTTP upstream (tests/auth/exchange_upstream.mjs, which
#            takes only tokens for its own audience) with --upstream-auth who=exchange: the
#            provider's token-exchange grant (RFC 8693) trades each user's token; two users'
#            calls each carry that user's exchanged token (the upstream records sub and aud);
#            the cache holds it for its lifetime (exchanges counted at the provider), then a new
#            one is exchanged; a refused exchange ends the call with -32603 naming the upstream;
#            tidemark_upstream_token_exchanges_total counts the exchanges made and the refusal
#            and the provider's error; that tidemark's log holds no token
#   debug-trace-log  the debug build (cargo build unless --no-build) at RUST_LOG=trace, where
#            tidemark's own debug/trace lines exist: hostile + cross-subject again, then the same
#            log check
#
#   --only LIST   run only these stages (the servers still start)
#   --no-build    do not run cargo build (use the existing binary)
#
# Prints one PASS/FAIL line per stage and a final `auth: N passed, M failed`; logs are in
# .cache/auth-results/. Exit 0 only when every stage passed. The servers are stopped on exit.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RESULTS="$ROOT/.cache/auth-results"
build=1
only=""
while [ $# -gt 0 ]; do
    case "$1" in
        --no-build) build=0; shift ;;
        --only) only="${2:?--only needs a list}"; shift 2 ;;
        --help) sed -n '2,50s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "auth.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
done
cd "$ROOT"
CACHE="$ROOT/.cache"
START_TIMEOUT_S=30
SCRIPT_NAME=auth.sh
# shellcheck source=SCRIPTDIR/client-lib.sh
source "$ROOT/scripts/client-lib.sh"

# shellcheck source=SCRIPTDIR/auth-lib.sh
source "$ROOT/scripts/auth-lib.sh"
TIDEMARK_PID=""
EXCHANGE_PIDS=()
stop_all() {
    for pid in "$TIDEMARK_PID" "${EXCHANGE_PIDS[@]}"; do
        [ -n "$pid" ] || continue
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    auth_server_stop
}
trap stop_all EXIT
trap 'exit 130' INT TERM
rm -rf "$RESULTS"
mkdir -p "$RESULTS"

auth_server_install
npm_ci_pinned "$ROOT/tests/clients" "$CACHE/ts-clients" @modelcontextprotocol/sdk
npm_ci_pinned "$ROOT/tests/clients/ts_modern" "$CACHE/ts-modern" @modelcontextprotocol/client
cp "$ROOT/tests/auth/ts_oauth_client.mjs" "$CACHE/ts-clients/ts_oauth_client.mjs"
cp "$ROOT/tests/auth/ts_oauth_client.mjs" "$CACHE/ts-modern/ts_oauth_client.mjs"
pip_install_pinned "$CACHE/venv" "$ROOT/tests/clients/requirements.txt" tidemark-requirements.txt
if [ "$build" -eq 1 ]; then
    cargo build --release --bin tidemark
fi
# The resource: the URL the tidemark of these tests is reached at (tokens' audience).
PORT="$(free_port)"
TIDEMARK_URL="http://127.0.0.1:$PORT/mcp"
# The token exchange grant's audience and lifetime (stage exchange): short, so that the stage
# sees a token expire and another exchanged within seconds.
EXCHANGE_AUDIENCE="urn:tidemark-test:who"
EXCHANGE_TTL=4
EXCHANGE_MARGIN=1
AUTH_EXCHANGE_ARGS="--exchange-audience $EXCHANGE_AUDIENCE --exchange-ttl $EXCHANGE_TTL"
auth_server_start "$TIDEMARK_URL" "$RESULTS/authorization-server.log" \
    "http://127.0.0.1:$PORT/another-resource"
echo "auth: authorization server at $AUTH_ISSUER for $AUTH_RESOURCE"

passed=0
failed=0
stage() {
    local name="$1" log="$RESULTS/$1.log"
    shift
    case ",${only:-$name}," in *",$name,"*) ;; *) return 0 ;; esac
    if "$@" >"$log" 2>&1; then
        passed=$((passed + 1))
        echo "PASS $name"
    else
        failed=$((failed + 1))
        echo "FAIL $name (log: $log)"
        tail -n 40 "$log"
    fi
}

stage jwt env TIDEMARK_AUTH_ISSUER="$AUTH_ISSUER" TIDEMARK_AUTH_RESOURCE="$AUTH_RESOURCE" \
    cargo test --lib auth::jwt_tests::real_authorization_server -- --ignored --exact \
    auth::jwt_tests::real_authorization_server_tokens_verify_through_its_jwks_url_across_a_rotation

# ---- end to end: the tidemark binary requiring the provider's JWT access tokens -------------
TIDEMARK_BIN="${TIDEMARK_BIN:-$ROOT/target/release/tidemark}"
MIN_REFETCH_SECS=1
TEST_KEYS="$RESULTS/test-keys.json"
TOKENS_SEEN="$RESULTS/tokens-sent.txt"
: >"$TOKENS_SEEN"
node "$AUTH_SERVER_DIR/e2e.mjs" keygen "$TEST_KEYS"
printf 'tool get_counter tools:write\n' >"$RESULTS/policy"
# start_tidemark BIN LISTEN LOG: starts BIN at RUST_LOG=trace requiring the provider's tokens for
# the resource $TIDEMARK_URL (also when it listens elsewhere: the resource is a name), sets
# TIDEMARK_PID, waits for its banner (not the log's first line: the JWKS read at start logs first).
start_tidemark() {
    local bin="$1" listen="$2" log="$3"
    RUST_LOG=trace "$bin" --listen "$listen" \
        --auth-jwks-url "$AUTH_ISSUER/jwks" --auth-jwks-file "$TEST_KEYS" \
        --auth-jwks-min-refetch-secs "$MIN_REFETCH_SECS" \
        --auth-issuer "$AUTH_ISSUER" --auth-resource "$TIDEMARK_URL" \
        --auth-scopes-supported tools:read,tools:write --auth-policy "$RESULTS/policy" \
        >"$log" 2>&1 &
    TIDEMARK_PID=$!
    for _ in $(seq $((START_TIMEOUT_S * 10))); do
        grep -q '^tidemark listening on ' "$log" && return 0
        kill -0 "$TIDEMARK_PID" 2>/dev/null || break
        sleep 0.1
    done
    echo "auth.sh: $bin did not start; its log:" >&2
    tail -n 40 "$log" >&2
    exit 1
}
start_tidemark "$TIDEMARK_BIN" "127.0.0.1:$PORT" "$RESULTS/tidemark.log"
e2e() {
    env TIDEMARK_URL="${E2E_URL:-$TIDEMARK_URL}" AUTH_ISSUER="$AUTH_ISSUER" \
        AUTH_RESOURCE="$AUTH_RESOURCE" UPSTREAM_URL="${UPSTREAM_URL:-}" METRICS_URL="${METRICS_URL:-}" \
        EXCHANGE_AUDIENCE="$EXCHANGE_AUDIENCE" EXCHANGE_TTL="$EXCHANGE_TTL" \
        EXCHANGE_MARGIN="$EXCHANGE_MARGIN" AUTH_OTHER_RESOURCE="http://127.0.0.1:$PORT/another-resource" \
        TEST_KEYS="$TEST_KEYS" MIN_REFETCH_SECS="$MIN_REFETCH_SECS" TOKENS_SEEN="$TOKENS_SEEN" \
        node "$AUTH_SERVER_DIR/e2e.mjs" "$@"
}
stage wire e2e wire
stage rotation e2e rotation
stage hostile e2e hostile
stage cross-subject e2e cross-subject
stage ts-oauth node "$CACHE/ts-clients/ts_oauth_client.mjs" --sdk v1 --url "$TIDEMARK_URL" \
    --issuer "$AUTH_ISSUER" --client-id tidemark-test --client-secret tidemark-test-secret
stage ts-modern-oauth node "$CACHE/ts-modern/ts_oauth_client.mjs" --sdk v2 --url "$TIDEMARK_URL" \
    --issuer "$AUTH_ISSUER" --client-id tidemark-test --client-secret tidemark-test-secret
py_token="$(auth_server_token "tools:read tools:write")"
echo "$py_token" >>"$TOKENS_SEEN"
stage py-legacy "$CACHE/venv/bin/python" tests/clients/py_client.py --url "$TIDEMARK_URL" \
    --mode legacy --check-counter --bearer-token "$py_token"
stage py-modern "$CACHE/venv/bin/python" tests/clients/py_client.py --url "$TIDEMARK_URL" \
    --mode auto --expect-era modern --greet --bearer-token "$py_token"
# The TS clients' tokens are only in their providers' memory: for them the check is that the log
# holds no JWT-shaped string at all (base64url header.payload.signature starting with eyJ). The
# shape includes the dots: a dependency's trace-level hex dump of the issuer's JWKS shows 16
# bytes a line, whose random key material holds "eyJ" and 8 more base64url characters now and
# then (seen once in a CI-sized run), but never header.payload. as a JWT has them.
no_token_in_log() {
    local log="$1" lines
    lines="$(wc -l <"$log")"
    echo "$log: $lines lines"
    [ "$lines" -gt 20 ] || { echo "the log is too short to mean anything"; return 1; }
    local t n=0
    while IFS= read -r t; do
        [ -n "$t" ] || continue
        n=$((n + 1))
        for piece in $(echo "$t" | tr '.' ' '); do
            [ "${#piece}" -ge 16 ] || continue
            if grep -qF -- "$piece" "$log"; then
                echo "a piece of token $n is in the log"
                return 1
            fi
        done
    done <"$TOKENS_SEEN"
    echo "$n tokens sent, none of their parts in the log"
    if grep -qE 'eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.' "$log"; then
        echo "a JWT-shaped string is in the log"
        return 1
    fi
}
stage no-token-in-log no_token_in_log "$RESULTS/tidemark.log"

# wait_line LOG PATTERN PID: waits until LOG has a line matching the sed PATTERN (prints its
# first group).
wait_line() {
    local log="$1" pattern="$2" pid="$3" found
    for _ in $(seq $((START_TIMEOUT_S * 10))); do
        found="$(sed -n "s/$pattern/\1/p" "$log" | head -n 1)"
        [ -n "$found" ] && { echo "$found"; return 0; }
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    echo "auth.sh: no line like $pattern in $log:" >&2
    tail -n 40 "$log" >&2
    return 1
}
exchange_stage() {
    local upstream_log="$RESULTS/exchange-upstream.log" log="$RESULTS/tidemark-exchange.log"
    local credentials="$RESULTS/exchange-credentials" port metrics_port upstream_url
    : >"$upstream_log"
    node "$AUTH_SERVER_DIR/exchange_upstream.mjs" --issuer "$AUTH_ISSUER" \
        --audience "$EXCHANGE_AUDIENCE" >"$upstream_log" 2>&1 &
    EXCHANGE_PIDS+=($!)
    # In `stage`'s `if`, set -e is off: each step that can fail returns.
    upstream_url="$(wait_line "$upstream_log" '^exchange upstream listening on \(.*\)$' $!)" \
        || return 1
    # The client secret comes from the environment (never on the command line).
    {
        echo "who exchange token-endpoint $AUTH_ISSUER/token"
        echo "who exchange client-id tidemark-gateway"
        echo "who exchange client-secret \${GATEWAY_SECRET}"
        echo "who exchange audience $EXCHANGE_AUDIENCE"
        echo "who exchange resource $upstream_url"
    } >"$credentials"
    chmod 600 "$credentials"
    port="$(free_port)"
    metrics_port="$(free_port)"
    : >"$log"
    GATEWAY_SECRET=tidemark-gateway-secret RUST_LOG=trace "$TIDEMARK_BIN" \
        --listen "127.0.0.1:$port" --auth-jwks-url "$AUTH_ISSUER/jwks" \
        --auth-issuer "$AUTH_ISSUER" --auth-resource "$TIDEMARK_URL" \
        --upstream "who=$upstream_url" --upstream-protocol who=legacy \
        --upstream-auth who=exchange --upstream-credentials "$credentials" \
        --upstream-exchange-margin-secs "$EXCHANGE_MARGIN" \
        --metrics-listen "127.0.0.1:$metrics_port" >"$log" 2>&1 &
    EXCHANGE_PIDS+=($!)
    wait_line "$log" '^\(tidemark listening on\) .*$' $! >/dev/null || return 1
    E2E_URL="http://127.0.0.1:$port/mcp" UPSTREAM_URL="$upstream_url" \
        METRICS_URL="http://127.0.0.1:$metrics_port/metrics" e2e exchange || return 1
    no_token_in_log "$log"
}
stage exchange exchange_stage

# The release build's tracing stops at info (release_max_level_info): tidemark's own debug and
# trace lines exist only in a debug build. One more instance, the debug binary at RUST_LOG=trace,
# gets the hostile tokens and the cross-subject request; its log must hold none of them.
debug_trace_log() {
    local debug_port debug_log="$RESULTS/tidemark-debug.log"
    if [ "$build" -eq 1 ]; then
        cargo build --bin tidemark
    fi
    debug_port="$(free_port)"
    kill "$TIDEMARK_PID" 2>/dev/null || true
    wait "$TIDEMARK_PID" 2>/dev/null || true
    start_tidemark "$ROOT/target/debug/tidemark" "127.0.0.1:$debug_port" "$debug_log"
    E2E_URL="http://127.0.0.1:$debug_port/mcp" e2e hostile
    E2E_URL="http://127.0.0.1:$debug_port/mcp" e2e cross-subject
    grep -qE 'DEBUG|TRACE' <(sed 's/\x1b\[[0-9;]*m//g' "$debug_log" | grep ' tidemark::') || {
        echo "no debug/trace line of tidemark's own: not a debug build at RUST_LOG=trace?"
        return 1
    }
    no_token_in_log "$debug_log"
}
stage debug-trace-log debug_trace_log

echo "auth: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
