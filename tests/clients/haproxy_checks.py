#!/usr/bin/env python3
"""Raw-HTTP checks of tidemark behind HAProxy (scripts/haproxy.sh), one per subcommand.

Goal: what the SDK clients cannot show on their own: a legacy re-POST after a cut gets the 409
and its Last-Event-ID hint from the node holding the session, and a GET from that hint through
the balancer finishes the call; a keyed 2026-07-28 call cut on one balancer instance and
re-issued through another runs the tool once; tasks created through the balancer land on both
nodes and `tasks/get` through either instance reaches each task's node; a session sent straight
to the wrong node is the misrouted 404; calls in flight while a node drains complete exactly
once; new sessions land on the remaining node; a session of a node that is down gets 503 with
Retry-After from the balancer.
Method: sockets and HTTP/1.1 by hand (standard library only), SSE read incrementally from the
chunked body; the execution counter (`get_counter`, per node) read straight from each node.
Each subcommand prints `ok: ...` and exits 0, or prints what failed and exits 1.

Usage: haproxy_checks.py SUBCOMMAND --via URL [--via-b URL] --node URL [--node URL] [...]
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
from urllib.parse import urlsplit

INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {},
    "clientInfo": {"name": "haproxy-checks", "version": "1"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {
        "extensions": {"io.modelcontextprotocol/tasks": {}}},
    "io.modelcontextprotocol/clientInfo": {"name": "haproxy-checks", "version": "1"},
}


class Fail(Exception):
    pass


def check(cond: bool, what: str) -> None:
    if not cond:
        raise Fail(what)


class Conn:
    """One HTTP/1.1 connection; reads a response head, then a body whole or event by event."""

    def __init__(self, url: str, timeout: float = 30.0):
        u = urlsplit(url)
        self.host, self.port, self.path = u.hostname, u.port, u.path or "/mcp"
        self.sock = socket.create_connection((self.host, self.port), timeout=timeout)
        self.buf = b""
        self.chunk_left = 0
        self.ended = False

    def send(self, method: str, headers: dict[str, str], body: bytes | None = None) -> None:
        lines = [f"{method} {self.path} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b""))

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise Fail("connection closed early")
        self.buf += data

    def head(self) -> tuple[int, dict[str, str]]:
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        raw, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        self.headers = headers
        self.chunked = headers.get("transfer-encoding", "").lower() == "chunked"
        self.length = int(headers.get("content-length", "0")) if not self.chunked else None
        return status, headers

    def body(self) -> bytes:
        if not self.chunked:
            while len(self.buf) < (self.length or 0):
                self._fill()
            body, self.buf = self.buf[: self.length], self.buf[self.length:]
            return body
        out = b""
        while not self.ended:
            out += self._chunk_bytes()
        return out

    def _chunk_bytes(self) -> bytes:
        """The next piece of a chunked body (b"" once its last chunk arrived)."""
        if self.chunk_left == 0:
            while b"\r\n" not in self.buf:
                self._fill()
            size_line, self.buf = self.buf.split(b"\r\n", 1)
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                while b"\r\n" not in self.buf:
                    self._fill()
                self.buf = self.buf.split(b"\r\n", 1)[1]
                self.ended = True
                return b""
            self.chunk_left = size
        if not self.buf:
            self._fill()
        piece = self.buf[: self.chunk_left]
        self.buf = self.buf[len(piece):]
        self.chunk_left -= len(piece)
        if self.chunk_left == 0:
            while len(self.buf) < 2:
                self._fill()
            self.buf = self.buf[2:]
        return piece

    def events(self):
        """Yields (id, data) per SSE event until the body ends."""
        pending = b""
        while True:
            while b"\n\n" not in pending:
                if self.ended:
                    return
                pending += self._chunk_bytes()
            raw, pending = pending.split(b"\n\n", 1)
            ev_id, data = None, []
            for line in raw.decode().split("\n"):
                if line.startswith("id:"):
                    ev_id = line[3:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].lstrip())
            if ev_id is None and not data:
                continue  # a comment (keep-alive)
            yield ev_id, "\n".join(data)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def post(url: str, message: dict, headers: dict[str, str] | None = None) -> Conn:
    c = Conn(url)
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    h.update(headers or {})
    c.send("POST", h, json.dumps(message).encode())
    return c


def json_answer(c: Conn) -> tuple[int, dict[str, str], dict]:
    status, headers = c.head()
    body = c.body()
    c.close()
    if headers.get("content-type", "").startswith("text/event-stream"):
        datas = [d for _, d in _events_of(body) if d]
        return status, headers, json.loads(datas[-1]) if datas else {}
    return status, headers, json.loads(body) if body else {}


def _events_of(body: bytes):
    for raw in body.decode().split("\n\n"):
        ev_id, data = None, []
        for line in raw.split("\n"):
            if line.startswith("id:"):
                ev_id = line[3:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())
        if ev_id is not None or data:
            yield ev_id, "\n".join(data)


def open_session(url: str) -> str:
    status, headers, msg = json_answer(post(url, INIT))
    check(status == 200, f"initialize: {status} {msg}")
    sid = headers["mcp-session-id"]
    status, _, _ = json_answer(post(url, INITIALIZED, {"Mcp-Session-Id": sid}))
    check(status == 202, f"initialized: {status}")
    return sid


def call(rid: int, tool: str, args: dict, token=None) -> dict:
    params = {"name": tool, "arguments": args}
    if token is not None:
        params["_meta"] = {"progressToken": token}
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


def modern(rid: int, method: str, params: dict) -> tuple[dict, dict[str, str]]:
    params = dict(params)
    meta = dict(MODERN_META)
    meta.update(params.pop("_meta", {}))
    params["_meta"] = meta
    name = params.get("name") or params.get("taskId")
    headers = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method}
    if name:
        headers["Mcp-Name"] = name
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}, headers


def counter(node: str) -> int:
    sid = open_session(node)
    _, _, msg = json_answer(post(node, call(9, "get_counter", {}), {"Mcp-Session-Id": sid}))
    return int(msg["result"]["content"][0]["text"])


def counters(nodes: list[str]) -> int:
    return sum(counter(n) for n in nodes)


def run_call_to_end(conn: Conn, steps: int, ctx: str) -> None:
    """Reads a slow_counter stream to its end: progress 1..steps once each, then one result."""
    progress, results = [], []
    for _, data in conn.events():
        if not data:
            continue
        msg = json.loads(data)
        if msg.get("method") == "notifications/progress":
            progress.append(int(msg["params"]["progress"]))
        elif "result" in msg or "error" in msg:
            results.append(msg)
    conn.close()
    check(progress == list(range(1, steps + 1)), f"{ctx}: progress {progress}")
    check(len(results) == 1 and "result" in results[0], f"{ctx}: results {results}")


# ---- subcommands ------------------------------------------------------------------------------


def cmd_repost(a) -> str:
    """A cut legacy call: the re-POST is 409 -31001 with a hint, the GET from it finishes."""
    sid = open_session(a.via)
    steps = 10
    c = post(a.via, call(1, "slow_counter", {"steps": steps, "delay_ms": 100}, "t"),
             {"Mcp-Session-Id": sid})
    status, headers = c.head()
    check(status == 200 and headers.get("content-type", "").startswith("text/event-stream"),
          f"call: {status} {headers}")
    seen = 0
    for _, data in c.events():
        if data:
            seen += 1
            if seen == 2:
                break
    c.close()  # the cut, mid-call
    time.sleep(0.3)
    status, headers, msg = json_answer(
        post(a.via, call(1, "slow_counter", {"steps": steps, "delay_ms": 100}, "t"),
             {"Mcp-Session-Id": sid}))
    check(status == 409, f"re-POST: expected 409, got {status} {msg}")
    check(msg["error"]["code"] == -31001, f"re-POST: {msg}")
    hint = headers.get("last-event-id")
    check(bool(hint) and headers.get("mcp-stream-resumable") == "true", f"re-POST headers {headers}")
    g = Conn(a.via)
    g.send("GET", {"Accept": "text/event-stream", "Mcp-Session-Id": sid, "Last-Event-ID": hint})
    status, _ = g.head()
    check(status == 200, f"resume GET: {status}")
    # From the hint (the priming event): every progress event again, then the result.
    run_call_to_end(g, steps, "resume")
    return f"session {sid[:2]}…: re-POST 409 -31001 hint={hint}, GET resumed to the result"


def cmd_keyed(a) -> str:
    """A keyed 2026-07-28 call cut on instance A, re-issued through instance B: one execution."""
    before = counters(a.node)
    key = f"haproxy-key-{time.time_ns()}"
    msg, headers = modern(1, "tools/call", {"name": "slow_counter",
                                            "arguments": {"steps": 10, "delay_ms": 100},
                                            "_meta": {"progressToken": "k"}})
    headers["Idempotency-Key"] = key
    c = post(a.via, msg, headers)
    status, _ = c.head()
    check(status == 200, f"keyed call: {status}")
    for _, data in c.events():
        if data:
            break
    c.close()  # dropped after the first event
    msg["id"] = 2
    c = post(a.via_b or a.via, msg, headers)
    status, _ = c.head()
    check(status == 200, f"keyed re-issue: {status}")
    results = [json.loads(d) for _, d in c.events() if d]
    final = [m for m in results if "result" in m or "error" in m]
    check(len(final) == 1 and "result" in final[0] and final[0]["id"] == 2, f"re-issue: {final}")
    after = counters(a.node)
    check(after == before + 1, f"executions: {before} -> {after} (want one)")
    return f"key {key}: cut through A, re-issued through B, ran once"


def cmd_tasks(a) -> str:
    """Tasks created through A land on both nodes; tasks/get through B finds each."""
    ids = []
    for i in range(8):
        msg, headers = modern(10 + i, "tools/call",
                              {"name": "slow_compute", "arguments": {"seconds": 0.5}})
        status, _, answer = json_answer(post(a.via, msg, headers))
        check(status == 200 and answer["result"]["resultType"] == "task", f"create: {answer}")
        ids.append(answer["result"]["taskId"])
    nodes = sorted({t[:2] for t in ids})
    check(len(nodes) >= 2, f"tasks landed on one node only: {ids}")
    for t in ids:
        msg, headers = modern(99, "tasks/get", {"taskId": t})
        status, _, answer = json_answer(post(a.via_b or a.via, msg, headers))
        check(status == 200 and "result" in answer, f"tasks/get {t}: {status} {answer}")
    return f"{len(ids)} tasks on nodes {nodes}, each found by tasks/get through the other instance"


def cmd_misrouted(a) -> str:
    """A session of node B sent straight to node A: 404 saying misrouted."""
    target, other = a.node[0], a.node[1]
    sid = open_session(other)
    status, _, msg = json_answer(post(target, {"jsonrpc": "2.0", "id": 1, "method": "ping"},
                                      {"Mcp-Session-Id": sid}))
    check(status == 404 and "misrouted" in msg["error"]["message"], f"{status} {msg}")
    return f"session {sid[:2]}… straight to the other node: 404 \"{msg['error']['message'][:40]}…\""


def cmd_spread(a) -> str:
    """Sessions opened through the balancer land on every node."""
    prefixes = {open_session(a.via)[:2] for _ in range(6)}
    check(len(prefixes) >= len(a.node), f"sessions landed on {prefixes} only")
    return f"6 sessions on nodes {sorted(prefixes)}"


def cmd_drain_calls(a) -> str:
    """Calls running on both nodes through the balancer while `--signal-file` asks for a drain:
    each completes exactly once (progress 1..N once, one result), sum of executions = calls."""
    steps, n = 30, 6
    survivors = a.survivors or a.node
    before = counters(survivors)
    conns, errors = [], []
    sids = [open_session(a.via) for _ in range(n)]
    check(len({s[:2] for s in sids}) >= 2, f"sessions on one node only: {[s[:2] for s in sids]}")
    for i, sid in enumerate(sids):
        c = post(a.via, call(i + 1, "slow_counter", {"steps": steps, "delay_ms": 100}, f"d{i}"),
                 {"Mcp-Session-Id": sid})
        status, _ = c.head()
        check(status == 200, f"call {i}: {status}")
        conns.append((sid, c))

    def read(sid, c):
        try:
            run_call_to_end(c, steps, f"call on node {sid[:2]}")
        except Exception as e:  # noqa: BLE001: reported below
            errors.append(str(e))

    threads = [threading.Thread(target=read, args=sc) for sc in conns]
    for t in threads:
        t.start()
    # Tell the script the calls run (it sends SIGTERM to one node now).
    with open(a.signal_file, "w") as f:
        f.write("running\n")
    for t in threads:
        t.join(60)
    check(not errors, f"calls: {errors}")
    after = counters(survivors)
    on_survivors = sum(1 for s in sids if any(s[:2] == f"{i:02x}" for i in a.survivor_id))
    check(after - before == on_survivors, f"survivors ran {after - before}, want {on_survivors}")
    return (f"{n} calls on nodes {sorted({s[:2] for s in sids})} completed once each "
            f"({after - before} executions on the surviving node for its {on_survivors} calls)")


def cmd_after_drain(a) -> str:
    """After the drain: new sessions land on the survivor; a drained node's session gets 503 +
    Retry-After from the balancer."""
    survivor = a.expect_prefix
    prefixes = [open_session(a.via)[:2] for _ in range(4)]
    check(all(p == survivor for p in prefixes), f"new sessions on {prefixes}, want {survivor}")
    gone = f"{a.gone_prefix}0000{'0' * 32}"
    status, headers, msg = json_answer(post(a.via, {"jsonrpc": "2.0", "id": 1, "method": "ping"},
                                            {"Mcp-Session-Id": gone}))
    check(status == 503 and headers.get("retry-after"), f"down node's session: {status} {headers}")
    check(msg["error"]["code"] == -32603, f"down node's session: {msg}")
    return f"new sessions on node {survivor} only; node {a.gone_prefix}'s session: 503 Retry-After"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("command")
    p.add_argument("--via", required=True, help="balancer instance A's MCP URL")
    p.add_argument("--via-b", help="balancer instance B's MCP URL")
    p.add_argument("--node", action="append", default=[], help="a node's MCP URL (direct)")
    p.add_argument("--survivors", action="append", help="nodes still up after a drain")
    p.add_argument("--survivor-id", action="append", type=int, default=[],
                   help="--node-id of each --survivors node")
    p.add_argument("--signal-file")
    p.add_argument("--expect-prefix")
    p.add_argument("--gone-prefix")
    a = p.parse_args()
    commands = {"repost": cmd_repost, "keyed": cmd_keyed, "tasks": cmd_tasks,
                "misrouted": cmd_misrouted, "spread": cmd_spread, "drain-calls": cmd_drain_calls,
                "after-drain": cmd_after_drain}
    try:
        print(f"ok: {commands[a.command](a)}")
        return 0
    except (Fail, OSError, KeyError, ValueError) as e:
        print(f"FAILED {a.command}: {type(e).__name__}: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
