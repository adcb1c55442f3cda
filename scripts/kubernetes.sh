#!/usr/bin/env bash
# Usage: scripts/kubernetes.sh [--no-build] [--help]
#
# The Kubernetes manifests of deploy/kubernetes/ (issue 42 item 5), checked offline: no
# cluster is needed, and none is started. Installs the schema checker kubernetes-validate from
# PyPI into .cache/kubernetes-venv (tests/kubernetes/requirements.txt; it carries the
# Kubernetes schemas) and Debian's haproxy when missing. Stages:
#   current    deploy/kubernetes/tidemark.yaml and tidemark-redis.yaml are exactly what
#              deploy/kubernetes/render prints (with no flag, and with --redis)
#   schemas    both, and a 5-node render with --durable and another namespace, validate
#              --strict against the schemas of Kubernetes 1.28 (the oldest with the pod-index
#              label) and 1.37; a manifest with an unknown field is refused (the checker can
#              fail)
#   coherent   tests/kubernetes/check.py on each: the balancer lists exactly the StatefulSet's
#              pods, ports, probes, grace = drain-secs + 10, the Secret's mount, the PDBs; a
#              StatefulSet scaled without the balancer is refused
#   node       the real tidemark started with the ConfigMap's TOML and TIDEMARK_NODE_ID=3
#              (loopback ports and a temporary key in place of the mounted ones): /healthz and
#              /readyz answer 200 on the admin port, an initialize is answered with a session
#              id of node 03, and SIGTERM ends it with exit 0 within the pod's grace period
#   balancer   `haproxy -c` accepts the ConfigMap's haproxy.cfg (names that do not resolve yet
#              are accepted: init-addr none)
#   refusals   render refuses --replicas 0 and 256, a bad namespace, --durable with --redis
#   --no-build   use target/release/tidemark as it is
#
# Prints PASS/FAIL per stage and `kubernetes: N passed, M failed`; exit 0 only when all passed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
OUT="$TARGET/kubernetes"
VENV="$ROOT/.cache/kubernetes-venv"
K8S="$ROOT/deploy/kubernetes"
CHECKS="$ROOT/tests/kubernetes"
START_TIMEOUT_S=30
OLDEST_K8S="1.28.0"
NEWEST_K8S="1.37.0"

build=1
usage() { sed -n '2,29s/^# \{0,1\}//p' "$0"; }
while [ "$#" -gt 0 ]; do
    case "$1" in
        --no-build) build=0; shift ;;
        --help) usage; exit 0 ;;
        *) echo "kubernetes.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done

SCRIPT_NAME=kubernetes.sh
# shellcheck source=SCRIPTDIR/client-lib.sh
source "$ROOT/scripts/client-lib.sh"
# shellcheck source=SCRIPTDIR/pids-lib.sh
source "$ROOT/scripts/pids-lib.sh"
# shellcheck source=SCRIPTDIR/apt-lib.sh
source "$ROOT/scripts/apt-lib.sh"

pip_install_pinned "$VENV" "$CHECKS/requirements.txt" tidemark-kubernetes-requirements.txt \
    bin/kubernetes-validate
PY="$VENV/bin/python"
command -v haproxy >/dev/null || apt_install kubernetes.sh haproxy
if [ "$build" = 1 ]; then
    (cd "$ROOT" && cargo build --release --quiet)
fi
TIDEMARK="$TARGET/release/tidemark"
rm -rf "$OUT"
mkdir -p "$OUT"

passed=0
failed=0
verdict() { # verdict NAME RC DETAIL
    if [ "$2" = 0 ]; then
        echo "kubernetes: PASS $1 $3"
        passed=$((passed + 1))
    else
        echo "kubernetes: FAIL $1 $3 (logs: $OUT)"
        failed=$((failed + 1))
    fi
}

# current
rc=0
"$K8S/render" >"$OUT/default.yaml" && "$K8S/render" --redis >"$OUT/redis.yaml" || rc=$?
{ diff -u "$K8S/tidemark.yaml" "$OUT/default.yaml" && diff -u "$K8S/tidemark-redis.yaml" "$OUT/redis.yaml"; } \
    >"$OUT/current.log" 2>&1 || rc=1
verdict current "$rc" "(the committed manifests are the renderer's output)"

# schemas
"$K8S/render" --replicas 5 --namespace prod --durable redis://redis.prod:6379/1 --drain-secs 12 \
    >"$OUT/five.yaml"
manifests=("$K8S/tidemark.yaml" "$K8S/tidemark-redis.yaml" "$OUT/five.yaml")
rc=0
for version in "$OLDEST_K8S" "$NEWEST_K8S"; do
    "$VENV/bin/kubernetes-validate" --strict --quiet -k "$version" "${manifests[@]}" \
        >>"$OUT/schemas.log" 2>&1 || rc=1
done
sed 's/^      enableServiceLinks: false$/      enableServiceLinks: false\n      unknownField: 1/' \
    "$K8S/tidemark.yaml" >"$OUT/unknown-field.yaml"
if "$VENV/bin/kubernetes-validate" --strict --quiet -k "$NEWEST_K8S" "$OUT/unknown-field.yaml" \
    >"$OUT/unknown-field.log" 2>&1; then
    echo "an unknown field was accepted" >>"$OUT/schemas.log"
    rc=1
fi
verdict schemas "$rc" "(${#manifests[@]} manifests --strict against Kubernetes $OLDEST_K8S and $NEWEST_K8S; an unknown field refused)"

# coherent
rc=0
for m in "${manifests[@]}"; do "$PY" "$CHECKS/check.py" "$m" >>"$OUT/coherent.log" 2>&1 || rc=1; done
sed 's/^  replicas: 5$/  replicas: 4/' "$OUT/five.yaml" >"$OUT/scaled-alone.yaml"
if "$PY" "$CHECKS/check.py" "$OUT/scaled-alone.yaml" >>"$OUT/coherent.log" 2>&1; then
    echo "a StatefulSet of 4 behind a balancer of 5 passed" >>"$OUT/coherent.log"
    rc=1
fi
verdict coherent "$rc" "($(grep -c ', 0 failed' "$OUT/coherent.log") of ${#manifests[@]} hang together; a scale without the balancer refused)"

# node: the real binary on the ConfigMap's settings
"$PY" "$CHECKS/check.py" "$K8S/tidemark.yaml" --toml-out "$OUT/tidemark.toml" \
    --haproxy-out "$OUT/haproxy.cfg" >/dev/null
head -c 48 /dev/urandom >"$OUT/request-state-key"
sed "s|^request-state-key-file = .*|request-state-key-file = \"$OUT/request-state-key\"|" \
    "$OUT/tidemark.toml" >"$OUT/node.toml"
read -r mcp_port admin_port < <("$PY" -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
grace="$("$PY" -c 'import sys, yaml
d = [x for x in yaml.safe_load_all(open(sys.argv[1])) if x and x["kind"] == "StatefulSet"][0]
print(d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"])' "$K8S/tidemark.yaml")"
TIDEMARK_CONFIG="$OUT/node.toml" TIDEMARK_NODE_ID=3 TIDEMARK_LISTEN="127.0.0.1:$mcp_port" \
    TIDEMARK_METRICS_LISTEN="127.0.0.1:$admin_port" "$TIDEMARK" >"$OUT/node.out" 2>"$OUT/node.err" &
node_pid=$!
pids+=("$node_pid")
rc=0
"$PY" - "$mcp_port" "$admin_port" "$START_TIMEOUT_S" >"$OUT/node.log" 2>&1 <<'PYEOF' || rc=$?
import json, sys, time, urllib.request
mcp, admin, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
def get(path):
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}{path}", timeout=5) as r:
        return r.status
deadline = time.time() + timeout
while True:
    try:
        statuses = (get("/healthz"), get("/readyz"))
        break
    except OSError:
        if time.time() > deadline:
            sys.exit("the admin listener never answered")
        time.sleep(0.1)
print("healthz, readyz:", statuses)
body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "kubernetes.sh", "version": "0"}}}).encode()
req = urllib.request.Request(f"http://127.0.0.1:{mcp}/mcp", data=body, headers={
    "Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
with urllib.request.urlopen(req, timeout=5) as r:
    session = r.headers["Mcp-Session-Id"]
print("session:", session)
sys.exit(0 if statuses == (200, 200) and session and session.startswith("03") else 1)
PYEOF
kill -TERM "$node_pid" 2>/dev/null || true
node_rc=0
for _ in $(seq $((grace * 10))); do kill -0 "$node_pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$node_pid" 2>/dev/null; then
    echo "still running ${grace}s after SIGTERM" >>"$OUT/node.log"
    kill -KILL "$node_pid"
    rc=1
fi
wait "$node_pid" || node_rc=$?
[ "$node_rc" = 0 ] || { echo "exit status $node_rc after SIGTERM" >>"$OUT/node.log"; rc=1; }
verdict node "$rc" "($(tr '\n' ' ' <"$OUT/node.log")exit $node_rc after SIGTERM)"

# balancer
rc=0
haproxy -c -f "$OUT/haproxy.cfg" >"$OUT/haproxy.log" 2>&1 || rc=$?
verdict balancer "$rc" "(haproxy -c on the ConfigMap's haproxy.cfg: $(haproxy -v | head -n 1 | cut -d' ' -f1-3))"

# refusals
refused=0
for bad in "--replicas 0" "--replicas 256" "--namespace Bad_Name" "--redis --durable redis://x:6379"; do
    # shellcheck disable=SC2086
    if ! "$K8S/render" $bad >/dev/null 2>>"$OUT/refusals.log"; then refused=$((refused + 1)); fi
done
rc=0
[ "$refused" = 4 ] || rc=1
verdict refusals "$rc" "($refused of 4 bad renders refused)"

echo "kubernetes: $passed passed, $failed failed"
[ "$failed" = 0 ]
