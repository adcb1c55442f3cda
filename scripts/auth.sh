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
#   cross-subject  two client ids (two subjects): A's session id with B's token -> 404, the same
#            answer as an unknown session
#   ts-oauth the official TypeScript client with the SDK's ClientCredentialsProvider does the whole
#            discovery (401 -> metadata -> authorization server metadata -> token -> retry), then
#            tools/list + tools/call (legacy era)
#   ts-modern-oauth  the same with the TypeScript v2 client (@modelcontextprotocol/client) pinned
#            to 2026-07-28
#   py-legacy, py-modern  the official Python client with a provider token (--bearer-token)
#   no-token-in-log  tidemark's log (RUST_LOG=trace) contains none of the tokens sent above
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
        --help) sed -n '2,45s/^# \{0,1\}//p' "$0"; exit 0 ;;
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
stop_all() {
    if [ -n "$TIDEMARK_PID" ]; then
        kill "$TIDEMARK_PID" 2>/dev/null || true
        wait "$TIDEMARK_PID" 2>/dev/null || true
    fi
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
RUST_LOG=trace "$TIDEMARK_BIN" --listen "127.0.0.1:$PORT" \
    --auth-jwks-url "$AUTH_ISSUER/jwks" --auth-jwks-file "$TEST_KEYS" \
    --auth-jwks-min-refetch-secs "$MIN_REFETCH_SECS" \
    --auth-issuer "$AUTH_ISSUER" --auth-resource "$TIDEMARK_URL" \
    --auth-scopes-supported tools:read,tools:write --auth-policy "$RESULTS/policy" \
    >"$RESULTS/tidemark.log" 2>&1 &
TIDEMARK_PID=$!
# The banner is not the log's first line (the JWKS read at start logs before it at trace level).
for _ in $(seq $((START_TIMEOUT_S * 10))); do
    grep -q '^tidemark listening on ' "$RESULTS/tidemark.log" && break
    kill -0 "$TIDEMARK_PID" 2>/dev/null || break
    sleep 0.1
done
grep -q '^tidemark listening on ' "$RESULTS/tidemark.log" || {
    echo "auth.sh: tidemark did not start; its log:" >&2
    tail -n 40 "$RESULTS/tidemark.log" >&2
    exit 1
}
e2e() {
    env TIDEMARK_URL="$TIDEMARK_URL" AUTH_ISSUER="$AUTH_ISSUER" AUTH_RESOURCE="$AUTH_RESOURCE" \
        AUTH_OTHER_RESOURCE="http://127.0.0.1:$PORT/another-resource" TEST_KEYS="$TEST_KEYS" \
        MIN_REFETCH_SECS="$MIN_REFETCH_SECS" TOKENS_SEEN="$TOKENS_SEEN" \
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
# The TS client's token is only in its provider's memory: its digest-free check is that the log
# holds no JWT-shaped string at all (base64url header.payload.signature starting with eyJ).
no_token_in_log() {
    local log="$RESULTS/tidemark.log" lines
    lines="$(wc -l <"$log")"
    echo "tidemark.log: $lines lines"
    [ "$lines" -gt 20 ] || { echo "the log is too short to mean anything"; return 1; }
    grep -q 'TRACE\|DEBUG' "$log" || echo "(no trace/debug lines: the release build's levels)"
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
    if grep -qE 'eyJ[A-Za-z0-9_-]{8,}' "$log"; then
        echo "a JWT-shaped string is in the log"
        return 1
    fi
}
stage no-token-in-log no_token_in_log

echo "auth: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
