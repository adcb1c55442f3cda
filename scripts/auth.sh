#!/usr/bin/env bash
# Usage: scripts/auth.sh [--help]
#
# Authorization against a real OAuth 2.1 authorization server (issue 18): installs Node 22 and
# oidc-provider into .cache/ (scripts/auth-lib.sh), starts it on loopback issuing JWT access
# tokens for a resource (client credentials grant with an RFC 8707 resource indicator), then:
#   jwt      the verifier's ignored test real_authorization_server_tokens_verify_through_its_
#            jwks_url_across_a_rotation (cargo test --lib): tokens in RS256, ES256 and EdDSA
#            verify through the provider's JWKS URL found by discovery; another resource or
#            issuer refuses them; after the provider rotates its key the new kid is refused at
#            once and accepted after the background refetch, old tokens still verify
#   (end to end: 401 -> protected resource metadata -> token -> retry against the tidemark
#   binary, with the official clients, is added here when the request path checks tokens)
#
# Prints one PASS/FAIL line per stage and a final `auth: N passed, M failed`; logs are in
# .cache/auth-results/. Exit 0 only when every stage passed. The server is stopped on exit.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RESULTS="$ROOT/.cache/auth-results"
case "${1:-}" in
    "") ;;
    --help) sed -n '2,17s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "auth.sh: unknown argument: $1" >&2; exit 2 ;;
esac
cd "$ROOT"

# shellcheck source=SCRIPTDIR/auth-lib.sh
source "$ROOT/scripts/auth-lib.sh"
trap auth_server_stop EXIT
trap 'exit 130' INT TERM
rm -rf "$RESULTS"
mkdir -p "$RESULTS"

auth_server_install
# The resource: the URL a tidemark of these tests is reached at (tokens' audience).
auth_server_start "http://127.0.0.1:8080/mcp" "$RESULTS/authorization-server.log"
echo "auth: authorization server at $AUTH_ISSUER for $AUTH_RESOURCE"

passed=0
failed=0
stage() {
    local name="$1" log="$RESULTS/$1.log"
    shift
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

# ---- end-to-end stages (the request path's 401 / discovery / retry) go here -----------------

echo "auth: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
