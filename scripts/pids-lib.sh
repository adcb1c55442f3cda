# Sourced by the test scripts that start background processes (clients.sh, browser.sh,
# haproxy.sh, haproxy-bench.sh): each started process's pid goes into `pids`, and every one
# still running is stopped when the script exits, however it exits (an INT or TERM exits 130,
# which runs the EXIT trap).

pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do
        if kill -0 "$p" 2>/dev/null; then
            kill "$p" 2>/dev/null || true
            wait "$p" 2>/dev/null || true
        fi
    done
}
trap cleanup EXIT
trap 'exit 130' INT TERM
