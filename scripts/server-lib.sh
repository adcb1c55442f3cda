# Shared by bench.sh and compare.sh (sourced, not run): start and stop one server under test.
# start_server LOG CMD...: starts CMD in the background with its output in LOG, waits for its
# "listening on http(s)://..." line and sets SERVER_PID and SERVER_URL; exits 1 with the log if
# the server dies or never says where it listens. stop_server: kills it (also on EXIT).
# pin_cpus SERVER_CPU LOAD_CPU: sets the PIN_SERVER and PIN_LOAD command prefixes (taskset), or
# leaves both empty, with a warning, where there are fewer than 2 CPUs or no taskset.
SERVER_PID=""
SERVER_URL=""
stop_server() {
    if [ -n "$SERVER_PID" ]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=""
    fi
}
trap stop_server EXIT

start_server() {
    local log="$1"
    shift
    "$@" >"$log" 2>&1 &
    SERVER_PID=$!
    SERVER_URL=""
    for _ in $(seq 1 200); do
        SERVER_URL="$(grep -o 'https\{0,1\}://[^ ]*' "$log" | head -n 1 || true)"
        [ -n "$SERVER_URL" ] && return 0
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.05
    done
    echo "$(basename "$0"): the server did not start; its log:" >&2
    cat "$log" >&2
    exit 1
}

pin_cpus() {
    if command -v taskset >/dev/null && [ "$(nproc --all)" -ge 2 ]; then
        PIN_SERVER=(taskset -c "$1")
        PIN_LOAD=(taskset -c "$2")
    else
        echo "$(basename "$0"): fewer than 2 CPUs or no taskset: nothing is pinned" >&2
        PIN_SERVER=()
        PIN_LOAD=()
    fi
}
