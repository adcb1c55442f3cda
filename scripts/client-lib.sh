# Helpers shared by the scripts that drive real MCP clients against tidemark
# (scripts/clients.sh, scripts/bridge.sh). Source it after setting ROOT, CACHE and
# START_TIMEOUT_S; set SCRIPT_NAME for the messages. Nothing runs when it is sourced.

# npm_ci_pinned SRC DEST CHECK: installs SRC's package.json + package-lock.json into DEST with
# `npm ci` when the lock file changed or DEST/node_modules/CHECK is missing (idempotent).
npm_ci_pinned() {
    local src="$1" dest="$2" check="$3"
    mkdir -p "$dest"
    if ! cmp -s "$src/package-lock.json" "$dest/package-lock.json" \
        || [ ! -e "$dest/node_modules/$check" ]; then
        cp "$src/package.json" "$src/package-lock.json" "$dest/"
        (cd "$dest" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    fi
}

# pip_install_pinned VENV REQUIREMENTS MARKER [CHECK]: creates VENV once, then installs
# REQUIREMENTS when they differ from the copy kept as VENV/MARKER, or VENV/CHECK is missing.
pip_install_pinned() {
    local venv="$1" requirements="$2" marker="$3" check="${4:-bin/python}"
    if [ ! -x "$venv/bin/python" ]; then
        python3 -m venv "$venv"
    fi
    if ! cmp -s "$requirements" "$venv/$marker" || [ ! -e "$venv/$check" ]; then
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
        cp "$requirements" "$venv/$marker"
    fi
}

# wait_for_url FILE PID WHAT: prints the first http:// (or https://) URL of FILE's first line, waiting up to
# START_TIMEOUT_S while PID lives.
wait_for_url() {
    local file="$1" pid="$2" what="$3" url=""
    for _ in $(seq $((START_TIMEOUT_S * 10))); do
        if [ -s "$file" ]; then
            url="$(head -n 1 "$file" | grep -o 'https\{0,1\}://[^ ]*' || true)"
            if [ -n "$url" ]; then
                echo "$url"
                return 0
            fi
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "$SCRIPT_NAME: $what exited before printing its URL" >&2
            return 1
        fi
        sleep 0.1
    done
    echo "$SCRIPT_NAME: $what printed no URL within ${START_TIMEOUT_S}s" >&2
    return 1
}

# free_port: prints a loopback TCP port that was free a moment ago.
free_port() {
    python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()'
}
