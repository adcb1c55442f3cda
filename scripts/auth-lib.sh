# Sourced (not run) by scripts/auth.sh and any suite that needs a real OAuth authorization
# server: oidc-provider (npm, pinned in tests/auth/package-lock.json) installed into
# .cache/auth-server, started on loopback by tests/auth/provider.mjs under Node 22.
#
# auth_server_install: installs Node 22 and oidc-provider (idempotent), with provider.mjs and
#   e2e.mjs (the end-to-end driver of scripts/auth.sh) next to it.
# auth_server_start RESOURCE LOG [OTHER_RESOURCE]: starts the server for RESOURCE (the URL access
#   tokens are issued for: their `aud`; also for OTHER_RESOURCE when given), waits for its first
#   line and sets AUTH_ISSUER (its issuer URL; discovery at $AUTH_ISSUER/.well-known/openid-configuration, keys at $AUTH_ISSUER/jwks,
#   tokens at $AUTH_ISSUER/token) and AUTH_SERVER_PID; exits 1 with the log if it does not
#   start. The test client is tidemark-test / tidemark-test-secret (client_secret_post), its
#   scopes tools:read and tools:write; a second subject is tidemark-test-b / tidemark-test-b-secret.
# auth_server_token [SCOPE]: prints an access token (client credentials + resource indicator).
# auth_server_rotate: a new signing key signs later tokens (the old ones stay listed); prints
#   the new kid.
# auth_server_stop: stops it (also on EXIT when the caller's trap calls it).
AUTH_LIB_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
AUTH_SERVER_DIR="$AUTH_LIB_ROOT/.cache/auth-server"
AUTH_ISSUER=""
AUTH_RESOURCE=""
AUTH_SERVER_PID=""

auth_server_install() {
    # shellcheck source=SCRIPTDIR/setup-node.sh
    source "$AUTH_LIB_ROOT/scripts/setup-node.sh"
    local src="$AUTH_LIB_ROOT/tests/auth"
    mkdir -p "$AUTH_SERVER_DIR"
    if ! cmp -s "$src/package-lock.json" "$AUTH_SERVER_DIR/package-lock.json" \
        || [ ! -e "$AUTH_SERVER_DIR/node_modules/oidc-provider" ]; then
        cp "$src/package.json" "$src/package-lock.json" "$AUTH_SERVER_DIR/"
        (cd "$AUTH_SERVER_DIR" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    fi
    # ESM resolves imports next to the script, so the program runs from the install directory.
    cp "$src/provider.mjs" "$src/e2e.mjs" "$src/exchange_upstream.mjs" "$AUTH_SERVER_DIR/"
}

auth_server_start() {
    local resource="$1" log="$2" other=()
    [ -n "${3:-}" ] && other=(--other-resource "$3")
    AUTH_RESOURCE="$resource"
    # Created here, not by the background job's redirect: the first read below may come first,
    # and a sed of a missing file would end the caller (set -e).
    : >"$log"
    node "$AUTH_SERVER_DIR/provider.mjs" --resource "$resource" "${other[@]}" \
        ${AUTH_EXCHANGE_ARGS:+$AUTH_EXCHANGE_ARGS} >"$log" 2>&1 &
    AUTH_SERVER_PID=$!
    AUTH_ISSUER=""
    for _ in $(seq 1 300); do
        AUTH_ISSUER="$(sed -n 's/^authorization server listening on //p' "$log" | head -n 1)"
        [ -n "$AUTH_ISSUER" ] && return 0
        kill -0 "$AUTH_SERVER_PID" 2>/dev/null || break
        sleep 0.05
    done
    echo "$(basename "$0"): the authorization server did not start; its log:" >&2
    cat "$log" >&2
    exit 1
}

auth_server_token() {
    local scope="${1:-tools:read}"
    python3 - "$AUTH_ISSUER/token" "$AUTH_RESOURCE" "$scope" <<'PY'
import json, sys, urllib.parse, urllib.request
url, resource, scope = sys.argv[1:4]
form = urllib.parse.urlencode({"grant_type": "client_credentials", "client_id": "tidemark-test",
    "client_secret": "tidemark-test-secret", "resource": resource, "scope": scope}).encode()
with urllib.request.urlopen(urllib.request.Request(url, data=form), timeout=10) as answer:
    print(json.load(answer)["access_token"])
PY
}

auth_server_rotate() {
    python3 - "$AUTH_ISSUER/control/rotate" <<'PY'
import json, sys, urllib.request
with urllib.request.urlopen(urllib.request.Request(sys.argv[1], data=b""), timeout=10) as answer:
    print(json.load(answer)["kid"])
PY
}

auth_server_stop() {
    if [ -n "$AUTH_SERVER_PID" ]; then
        kill "$AUTH_SERVER_PID" 2>/dev/null || true
        wait "$AUTH_SERVER_PID" 2>/dev/null || true
        AUTH_SERVER_PID=""
    fi
}
