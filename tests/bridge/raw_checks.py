#!/usr/bin/env python3
"""Raw-HTTP checks of tidemark's bridge (scripts/bridge.sh, stages `retry` and `faults`), against
tidemark fronting tests/bridge/counter_server.py over stdio.

Goal: the guarantees no SDK client exercises by itself: a re-POST after a drop is refused (409
with a Last-Event-ID hint) and the GET resume delivers the rest, an Idempotency-Key retry replays
the first execution, the upstream runs each call once; and the upstream's faults (crash, garbage
on stdout, hang, SIGKILL, process cap, DELETE) end calls cleanly with -32603 and leave the session
usable.
Method: http.client only (no SDK), one session per scenario, `Mcp-Session-Id` and
`MCP-Protocol-Version: 2025-11-25` by hand; a "drop" closes the client's socket after the first
progress event. The shared counter is read from the counter file (COUNTER_FILE of the upstream);
the upstream's processes are the children of the tidemark pid (`pgrep -P`).

Usage: raw_checks.py --url URL --scenario NAME [--counter-file PATH] [--server-pid PID]
                     [--call-log PATH] [--label TEXT] [--timeout-secs N]
  retry          slow_counter {steps 5, delay 200} id 7: drop after the first progress; the same
                 POST again -> 409, Last-Event-ID header, -31001 naming id 7; GET from that hint ->
                 the remaining progress and the result (repeats allowed only of events already
                 held, same id and data); then id 11 dropped the same way and resumed from the
                 client's own last id -> exactly the tail, no repeat; then id 8 with
                 Idempotency-Key: drop, re-POST with the key -> progress 1..5 and the result
                 replayed, id 8; the key again with id 9 -> the same answer under id 9; the key
                 with other params -> 422 -31005; the counter file rose by exactly 3
  crash          crash_after {ms 300}: a progress, then error -32603 whose message/data name the
                 upstream and the exit status 3; echo on the same session then works, and
                 slow_counter runs (the child was respawned: a new pid)
  garbage        garbage {text}: the result; echo after it; garbage again; the same child throughout
  hang           hang: -32603 within 1.5..4.5 s (server run with --upstream-timeout-secs 2); with
                 --call-log the upstream saw the call cancelled; echo after
                 (a timed-out initialize, the child starting slower than 2 s, is retried: 5 attempts)
  kill           slow_counter {steps 10, delay 200}: SIGKILL the session's child after the first
                 progress -> -32603 (message/data name the upstream, data the signal 9); echo after
                 it works (respawn)
  max-processes  (server run with --upstream-max-processes 1) session 1 initialize 200; session 2
                 initialize 503; DELETE session 1 -> its child exits within 3 s; a new session
                 then initializes (200) within 3 s more (retried every 0.1 s while 503)
  delete         DELETE of a session ends its child within 3 s
  open           initialize and echo, then leave the session open (no DELETE): for a shutdown test
  cancel         slow_counter {steps 30, delay 100}: after progress 2, POST notifications/cancelled
                 (202); the call's stream ends within 3 s, at most 3 more progress; the upstream
                 saw the cancel (its COUNTER_CALL_LOG, --call-log, says `cancelled slow_counter`,
                 never `end`); echo after it works
Every scenario but `open` ends its session(s) with DELETE, also when a check failed.
Prints `[label] ok: ...` and exits 0 when every check passed; `[label] FAILED: ...` with the
exchanges (requests, statuses, headers, events) on stderr and exit 1 otherwise.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
from typing import Any

PROTOCOL_VERSION = "2025-11-25"
TRANSCRIPT: list[str] = []


class CheckFailed(Exception):
    pass


def check(cond: bool, msg: Any) -> None:
    """Raises CheckFailed(msg) unless cond; msg may be a callable (evaluated only on failure, e.g.
    when it reads a response body)."""
    if not cond:
        raise CheckFailed(msg() if callable(msg) else msg)


def note(line: str) -> None:
    TRANSCRIPT.append(f"{time.monotonic():.3f} {line}")


class Response:
    """One HTTP response; SSE bodies are read event by event."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse, what: str):
        self.conn = conn
        self.resp = resp
        self.status = resp.status
        self.headers = {k.lower(): v for k, v in resp.getheaders()}
        self.what = what
        self.events: list[dict[str, str]] = []
        note(f"< {self.status} {what} headers={self.headers}")

    @property
    def is_sse(self) -> bool:
        return self.headers.get("content-type", "").startswith("text/event-stream")

    def body_json(self) -> Any:
        raw = self.resp.read()
        note(f"< body {raw[:2000]!r}")
        self.conn.close()
        return json.loads(raw) if raw else None

    def next_event(self) -> dict[str, str] | None:
        """The next SSE event (fields id/event/data/retry), or None at the end of the stream."""
        ev: dict[str, str] = {}
        data: list[str] = []
        while True:
            line = self.resp.readline()
            if not line:
                return None
            text = line.decode("utf-8").rstrip("\r\n")
            if text == "":
                if ev or data:
                    if data:
                        ev["data"] = "\n".join(data)
                    self.events.append(ev)
                    note(f"< event {ev}")
                    return ev
                continue
            if text.startswith(":"):
                continue
            field, _, value = text.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "data":
                data.append(value)
            else:
                ev[field] = value

    def messages_until(self, stop) -> list[tuple[str | None, dict]]:
        """Reads events carrying JSON-RPC messages until stop(msg) is true or the stream ends."""
        out = []
        while (ev := self.next_event()) is not None:
            if not ev.get("data"):
                continue
            msg = json.loads(ev["data"])
            out.append((ev.get("id"), msg))
            if stop(msg):
                break
        return out

    def drop(self) -> None:
        note(f"x drop {self.what}")
        try:
            sock = self.conn.sock
            if sock is not None:
                sock.shutdown(2)
        except OSError:
            pass
        self.conn.close()


class Session:
    def __init__(self, url: str, timeout: float):
        u = urllib.parse.urlsplit(url)
        self.host, self.port, self.path = u.hostname, u.port, u.path or "/"
        self.timeout = timeout
        self.sid: str | None = None
        self.deleted = False

    def request(self, method: str, body: Any = None, headers: dict[str, str] | None = None,
                what: str = "") -> Response:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        h = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": PROTOCOL_VERSION}
        if self.sid:
            h["Mcp-Session-Id"] = self.sid
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        what = what or f"{method} {json.dumps(body)[:200] if body is not None else ''}"
        note(f"> {what} headers={ {k: v for k, v in h.items() if k not in ('Accept',)} }")
        conn.request(method, self.path, body=data, headers=h)
        return Response(conn, conn.getresponse(), what)

    def initialize(self) -> Response:
        r = self.request("POST", {
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                       "clientInfo": {"name": "tidemark-bridge-raw", "version": "1"}},
        }, what="POST initialize")
        if r.status != 200:
            r.body_json_safe = safe_body(r)
            return r
        self.sid = r.headers.get("mcp-session-id")
        if r.is_sse:
            r.messages_until(lambda m: m.get("id") == 0)
            r.conn.close()
        else:
            r.body_json()
        check(bool(self.sid), "initialize: no Mcp-Session-Id")
        n = self.request("POST", {"jsonrpc": "2.0", "method": "notifications/initialized"})
        n.resp.read()
        n.conn.close()
        check(n.status == 202, f"notifications/initialized: {n.status}, expected 202")
        return r

    def call(self, rid: Any, name: str, arguments: dict, token: str | None = None,
             headers: dict[str, str] | None = None) -> Response:
        params: dict[str, Any] = {"name": name, "arguments": arguments}
        if token is not None:
            params["_meta"] = {"progressToken": token}
        return self.request("POST", {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params},
                            headers, what=f"POST tools/call {name} id={rid} {headers or ''}")

    def call_to_end(self, rid: Any, name: str, arguments: dict, token: str | None = None) -> tuple[Response, list]:
        r = self.call(rid, name, arguments, token)
        check(r.status == 200, lambda: f"tools/call {name}: HTTP {r.status}: {safe_body(r)}")
        if not r.is_sse:
            return r, [(None, r.body_json())]
        msgs = r.messages_until(lambda m: m.get("id") == rid and ("result" in m or "error" in m))
        r.conn.close()
        return r, msgs

    def delete(self) -> Response:
        self.deleted = True
        r = self.request("DELETE", what="DELETE session")
        r.resp.read()
        r.conn.close()
        return r


def safe_body(r: Response) -> Any:
    try:
        raw = r.resp.read()
        note(f"< body {raw[:2000]!r}")
        r.conn.close()
        return json.loads(raw) if raw else None
    except Exception as e:  # noqa: BLE001
        return f"<unreadable: {e}>"


def is_progress(m: dict) -> bool:
    return m.get("method") == "notifications/progress"


def final_of(msgs: list, rid: Any) -> dict:
    finals = [m for _, m in msgs if m.get("id") == rid and ("result" in m or "error" in m)]
    check(len(finals) == 1, f"expected one final response with id {rid}, got {len(finals)}: {msgs}")
    return finals[0]


def result_text(m: dict, what: str) -> str:
    check("result" in m, f"{what}: expected a result, got {m}")
    r = m["result"]
    check(not r.get("isError"), f"{what}: isError: {r}")
    return r["content"][0]["text"]


COUNTER_VIA: list[Session] = []


def read_counter(path: str | None) -> int:
    """The shared counter: from the counter file, or (no file: e.g. against `--tools demo`, for a
    baseline) from get_counter on a session of its own."""
    if not path:
        s = COUNTER_VIA[0]
        _, msgs = s.call_to_end(f"gc-{time.monotonic_ns()}", "get_counter", {})
        return int(result_text(msgs[-1][1], "get_counter"))
    try:
        with open(path, encoding="ascii") as f:
            return int(f.read().strip() or 0)
    except FileNotFoundError:
        return 0


def children(pid: int | None) -> set[int]:
    check(pid is not None, "--server-pid is required for this scenario")
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return {int(x) for x in out.split()}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie not yet reaped by tidemark still "exists": count it as gone
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def new_child(pid: int | None, before: set[int], within: float = 3.0) -> int:
    deadline = time.monotonic() + within
    while True:
        new = children(pid) - before
        if len(new) == 1:
            return new.pop()
        if time.monotonic() > deadline:
            raise CheckFailed(f"expected exactly one new child of tidemark, got {sorted(new)} "
                              f"(children now {sorted(children(pid))}, before {sorted(before)})")
        time.sleep(0.05)


def gone_within(pid: int, secs: float) -> float | None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < secs:
        if not alive(pid):
            return time.monotonic() - t0
        time.sleep(0.05)
    return None


def echo_ok(s: Session, rid: Any, text: str = "still here") -> None:
    _, msgs = s.call_to_end(rid, "echo", {"text": text})
    got = result_text(final_of(msgs, rid), f"echo id={rid}")
    check(got == text, f"echo id={rid}: {got!r}")


def progress_values(msgs: list, token: str) -> list[float]:
    vals = []
    for _, m in msgs:
        if is_progress(m):
            check(m["params"].get("progressToken") == token,
                  f"progress carries token {m['params'].get('progressToken')!r}, the request sent {token!r}")
            vals.append(m["params"]["progress"])
    return vals


# ---- scenarios -----------------------------------------------------------------------------
def scenario_retry(s: Session, a: argparse.Namespace) -> str:
    s.initialize()
    c0 = read_counter(a.counter_file)
    args = {"steps": 5, "delay_ms": 200}

    # 1. drop, re-POST -> 409 with hint; GET from the hint -> the rest.
    r = s.call(7, "slow_counter", args, token="tok-7")
    check(r.status == 200 and r.is_sse, f"slow_counter id 7: HTTP {r.status} {r.headers}")
    first = r.messages_until(is_progress)
    check(first and is_progress(first[-1][1]), f"id 7: the stream ended before a progress: {first}")
    r.drop()
    time.sleep(0.1)
    again = s.call(7, "slow_counter", args, token="tok-7")
    body = safe_body(again)
    check(again.status == 409, f"re-POST of id 7 after the drop: HTTP {again.status}, expected 409; body {body}")
    hint = again.headers.get("last-event-id")
    check(bool(hint), f"409 without a Last-Event-ID header: {again.headers}")
    check(isinstance(body, dict) and body.get("error", {}).get("code") == -31001 and body.get("id") == 7,
          f"409 body: expected error -31001 with id 7, got {body}")
    owed = body["error"].get("data", {}).get("owedStreams", [])
    check(any(o.get("requestId") == 7 for o in owed), f"409 data.owedStreams does not name id 7: {body}")
    g = s.request("GET", headers={"Last-Event-ID": hint}, what=f"GET Last-Event-ID={hint}")
    check(g.status == 200 and g.is_sse, f"GET from the hint: HTTP {g.status} {g.headers}")
    tail = g.messages_until(lambda m: m.get("id") == 7 and ("result" in m or "error" in m))
    g.conn.close()
    held = dict(first)
    union = list(first)
    for eid, m in tail:
        if eid in held:
            check(held[eid] == m, f"resume repeated event {eid} with other data: {held[eid]} vs {m}")
            continue
        union.append((eid, m))
    vals = progress_values(union, "tok-7")
    check(vals == [1, 2, 3, 4, 5], f"id 7: progress after the resume {vals}, expected [1..5] once each")
    text7 = result_text(final_of(union, 7), "slow_counter id 7")
    check(text7 == str(c0 + 1), f"id 7: result {text7}, expected {c0 + 1}")
    repeats = len(tail) - (len(union) - len(first))

    # 2. resume from the client's own last id: exactly the tail.
    r = s.call(11, "slow_counter", args, token="tok-11")
    check(r.status == 200, lambda: f"slow_counter id 11: HTTP {r.status}: {safe_body(r)}")
    first = r.messages_until(lambda m: is_progress(m) and m["params"]["progress"] >= 2)
    r.drop()
    own = first[-1][0]
    g = s.request("GET", headers={"Last-Event-ID": own}, what=f"GET Last-Event-ID={own} (own cursor)")
    check(g.status == 200 and g.is_sse, f"GET from own cursor: HTTP {g.status}")
    tail = g.messages_until(lambda m: m.get("id") == 11 and ("result" in m or "error" in m))
    g.conn.close()
    check(not ({e for e, _ in tail} & {e for e, _ in first}), f"own-cursor resume repeated events: {tail}")
    vals = progress_values(first + tail, "tok-11")
    check(vals == [1, 2, 3, 4, 5], f"id 11: progress {vals}, expected [1..5] once each")
    text11 = result_text(final_of(tail, 11), "slow_counter id 11")
    check(text11 == str(c0 + 2), f"id 11: result {text11}, expected {c0 + 2}")

    # 3. Idempotency-Key: drop, re-POST with the key -> the first execution replayed.
    key = {"Idempotency-Key": "bridge-key-8"}
    r = s.call(8, "slow_counter", args, token="tok-8", headers=key)
    check(r.status == 200, lambda: f"slow_counter id 8 with key: HTTP {r.status}: {safe_body(r)}")
    r.messages_until(is_progress)
    r.drop()
    time.sleep(0.1)
    rp = s.call(8, "slow_counter", args, token="tok-8", headers=key)
    check(rp.status == 200 and rp.is_sse, lambda: f"re-POST of id 8 with the key: HTTP {rp.status}: {safe_body(rp)}")
    msgs = rp.messages_until(lambda m: m.get("id") == 8 and ("result" in m or "error" in m))
    rp.conn.close()
    vals = progress_values(msgs, "tok-8")
    check(vals == [1, 2, 3, 4, 5], f"key replay of id 8: progress {vals}, expected [1..5] from the first message")
    text8 = result_text(final_of(msgs, 8), "slow_counter id 8 (key replay)")
    check(text8 == str(c0 + 3), f"id 8: result {text8}, expected {c0 + 3}")
    r9 = s.call(9, "slow_counter", args, token="tok-8", headers=key)
    check(r9.status == 200, lambda: f"the key again with id 9: HTTP {r9.status}: {safe_body(r9)}")
    msgs9 = r9.messages_until(lambda m: m.get("id") == 9 and ("result" in m or "error" in m)) if r9.is_sse \
        else [(None, r9.body_json())]
    r9.conn.close()
    text9 = result_text(final_of(msgs9, 9), "slow_counter id 9 (key replay)")
    check(text9 == text8, f"the key's replay under id 9 answered {text9}, the first execution {text8}")
    r10 = s.call(10, "slow_counter", {"steps": 4, "delay_ms": 0}, token="tok-10", headers=key)
    b10 = safe_body(r10)
    check(r10.status == 422 and isinstance(b10, dict) and b10.get("error", {}).get("code") == -31005,
          f"the key with other params: HTTP {r10.status} {b10}, expected 422 -31005")
    echo_ok(s, 12)
    c1 = read_counter(a.counter_file)
    check(c1 == c0 + 3, f"counter rose by {c1 - c0} for 3 distinct slow_counter calls (upstream ran a call twice?)")
    s.delete()
    return f"409 hint={hint} resume repeated {repeats} held event(s); own-cursor tail exact; key replay ok; counter +3"


def scenario_crash(s: Session, a: argparse.Namespace) -> str:
    before = children(a.server_pid)
    s.initialize()
    child = new_child(a.server_pid, before)
    t0 = time.monotonic()
    _, msgs = s.call_to_end(1, "crash_after", {"ms": 300}, token="tok-crash")
    took = time.monotonic() - t0
    check(progress_values(msgs, "tok-crash") == [1], f"crash_after: expected one progress first: {msgs}")
    fin = final_of(msgs, 1)
    check("error" in fin and fin["error"].get("code") == -32603, f"crash_after: expected error -32603, got {fin}")
    said = json.dumps(fin["error"])
    check("3" in json.dumps(fin["error"].get("data")), f"crash_after: error data does not carry exit status 3: {said}")
    check(any(w in said.lower() for w in ("counter_server", "upstream", "stdio")),
          f"crash_after: error does not name the upstream: {said}")
    check(gone_within(child, 3) is not None, f"crash_after: child {child} still alive")
    echo_ok(s, 2, "after crash")
    _, msgs = s.call_to_end(3, "slow_counter", {"steps": 2}, token="tok-3")
    result_text(final_of(msgs, 3), "slow_counter after crash")
    now = children(a.server_pid) - before
    check(len(now) == 1 and child not in now,
          f"after the crash the session should run on one new child: children now {sorted(now)}, crashed {child}")
    s.delete()
    return f"-32603 after {took:.2f}s: {said}; respawned child {sorted(now)} (was {child})"


def scenario_garbage(s: Session, a: argparse.Namespace) -> str:
    before = children(a.server_pid)
    s.initialize()
    child = new_child(a.server_pid, before)
    for rid in (1, 3):
        _, msgs = s.call_to_end(rid, "garbage", {"text": f"g{rid}"})
        got = result_text(final_of(msgs, rid), f"garbage id={rid}")
        check(got == f"g{rid}", f"garbage id={rid}: {got!r}")
        echo_ok(s, rid + 1, f"after garbage {rid}")
    check(alive(child) and children(a.server_pid) - before == {child},
          f"the child changed after the garbage lines (was {child}, now {sorted(children(a.server_pid) - before)})")
    s.delete()
    return f"garbage twice, echo after each, same child {child}"


def scenario_hang(s: Session, a: argparse.Namespace) -> str:
    # --upstream-timeout-secs also bounds the child's `initialize`; a loaded machine can take
    # longer than 2 s to start a Python child (its imports alone take ~0.7 s idle), so a timed-out
    # initialize is retried, up to 5 attempts.
    for _ in range(5):
        try:
            s.initialize()
            break
        except CheckFailed:
            if s.sid:
                raise
            note("initialize did not succeed (child start slower than the timeout?); retrying")
    check(bool(s.sid), "initialize failed 5 times (the child never started within the 2 s timeout)")
    log_from = os.path.getsize(a.call_log) if a.call_log and os.path.exists(a.call_log) else 0
    t0 = time.monotonic()
    _, msgs = s.call_to_end(1, "hang", {})
    took = time.monotonic() - t0
    fin = final_of(msgs, 1)
    check("error" in fin and fin["error"].get("code") == -32603, f"hang: expected error -32603, got {fin}")
    check(1.5 <= took <= 4.5, f"hang: ended after {took:.2f}s, expected ~2 s (--upstream-timeout-secs 2)")
    if a.call_log:
        # The timed-out call must be cancelled upstream (notifications/cancelled to the child).
        seen = ""
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and "cancelled hang" not in seen:
            with open(a.call_log, encoding="utf-8") as f:
                f.seek(log_from)
                seen = f.read()
            time.sleep(0.05)
        check("cancelled hang" in seen, f"hang: the timed-out call was not cancelled upstream (call log: {seen!r})")
    echo_ok(s, 2, "after hang")
    s.delete()
    return f"-32603 after {took:.2f}s: {json.dumps(fin['error'])}"


def scenario_kill(s: Session, a: argparse.Namespace) -> str:
    before = children(a.server_pid)
    s.initialize()
    child = new_child(a.server_pid, before)
    r = s.call(1, "slow_counter", {"steps": 10, "delay_ms": 200}, token="tok-kill")
    check(r.status == 200 and r.is_sse, f"slow_counter: HTTP {r.status}")
    r.messages_until(is_progress)
    os.kill(child, signal.SIGKILL)
    note(f"kill -9 {child}")
    t0 = time.monotonic()
    r.messages_until(lambda m: m.get("id") == 1 and ("result" in m or "error" in m))
    took = time.monotonic() - t0
    r.conn.close()
    msgs = [(e.get("id"), json.loads(e["data"])) for e in r.events if e.get("data")]
    fin = final_of(msgs, 1)
    check("error" in fin and fin["error"].get("code") == -32603, f"after kill -9: expected error -32603, got {fin}")
    said = json.dumps(fin["error"])
    check(any(w in said.lower() for w in ("counter_server", "upstream", "stdio")),
          f"after kill -9: error does not name the upstream: {said}")
    check("9" in json.dumps(fin["error"].get("data")), f"after kill -9: error data does not carry signal 9: {said}")
    check(took < 5, f"after kill -9: the call took {took:.2f}s to end")
    echo_ok(s, 2, "after kill")
    s.delete()
    return f"-32603 {took:.2f}s after kill -9 of {child}: {said}"


def scenario_max_processes(s: Session, a: argparse.Namespace) -> str:
    before = children(a.server_pid)
    s.initialize()
    child = new_child(a.server_pid, before)
    echo_ok(s, 1)
    s2 = Session(a.url, a.timeout_secs)
    r2 = s2.initialize()
    b2 = getattr(r2, "body_json_safe", None)
    check(r2.status == 503, f"second session's initialize with --upstream-max-processes 1: HTTP {r2.status}, "
          f"expected 503; body {b2}")
    d = s.delete()
    check(d.status in (200, 202, 204), f"DELETE: HTTP {d.status}")
    gone = gone_within(child, 3)
    check(gone is not None, f"child {child} of the deleted session still alive after 3 s")
    # The slot is free once tidemark has seen its child exit; allow it CHILD_EXIT seconds.
    t0 = time.monotonic()
    tries = 0
    while True:
        tries += 1
        s3 = Session(a.url, a.timeout_secs)
        r3 = s3.initialize()
        if r3.status == 200 or time.monotonic() - t0 > 3:
            break
        time.sleep(0.1)
    freed = time.monotonic() - t0
    check(r3.status == 200, f"initialize 3 s after the first session's DELETE (its child gone): still HTTP {r3.status} "
          f"after {tries} tries: the process slot was not released")
    echo_ok(s3, 1)
    s3.delete()
    return (f"second initialize 503 (Retry-After={r2.headers.get('retry-after')}, body {b2}); child gone "
            f"{gone:.2f}s after DELETE; a new session initialized {freed:.2f}s after it ({tries} tries)")


def scenario_delete(s: Session, a: argparse.Namespace) -> str:
    before = children(a.server_pid)
    s.initialize()
    child = new_child(a.server_pid, before)
    echo_ok(s, 1)
    d = s.delete()
    check(d.status in (200, 202, 204), f"DELETE: HTTP {d.status}")
    gone = gone_within(child, 3)
    check(gone is not None, f"child {child} still alive 3 s after DELETE")
    return f"child {child} gone {gone:.2f}s after DELETE"


def scenario_cancel(s: Session, a: argparse.Namespace) -> str:
    check(bool(a.call_log), "--call-log is required for this scenario")
    s.initialize()
    with open(a.call_log, "a+", encoding="utf-8") as f:
        f.seek(0, os.SEEK_END)
        log_from = f.tell()
    r = s.call(1, "slow_counter", {"steps": 30, "delay_ms": 100}, token="tok-cancel")
    check(r.status == 200 and r.is_sse, f"slow_counter: HTTP {r.status}")
    r.messages_until(lambda m: is_progress(m) and m["params"]["progress"] >= 2)
    n = s.request("POST", {"jsonrpc": "2.0", "method": "notifications/cancelled",
                           "params": {"requestId": 1, "reason": "bridge test"}})
    n.resp.read()
    n.conn.close()
    check(n.status == 202, f"notifications/cancelled: HTTP {n.status}, expected 202")
    t0 = time.monotonic()
    rest = r.messages_until(lambda m: m.get("id") == 1)
    took = time.monotonic() - t0
    r.conn.close()
    check(took < 3, f"the cancelled call's stream stayed open {took:.2f}s")
    vals = [m["params"]["progress"] for _, m in rest if is_progress(m)]
    check(len(vals) <= 3, f"progress kept flowing after the cancel: {vals}")
    seen = ""
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        with open(a.call_log, encoding="utf-8") as f:
            f.seek(log_from)
            seen = f.read()
        if "cancelled slow_counter" in seen:
            break
        time.sleep(0.05)
    check("cancelled slow_counter" in seen,
          f"the upstream never saw the cancel (its call log: {seen.strip().splitlines()[-5:]})")
    check(seen.count("start slow_counter") == 1, f"the upstream saw the call {seen.count('start slow_counter')} times: {seen}")
    check("end slow_counter" not in seen, f"the upstream finished the cancelled call: {seen}")
    echo_ok(s, 2, "after cancel")
    s.delete()
    ended = [m for _, m in rest if m.get("id") == 1]
    return f"stream ended {took:.2f}s after the cancel ({'with ' + json.dumps(ended[0])[:120] if ended else 'no final response'}); upstream saw the cancel"


def scenario_open(s: Session, a: argparse.Namespace) -> str:
    before = children(a.server_pid)
    s.initialize()
    child = new_child(a.server_pid, before)
    echo_ok(s, 1)
    s.deleted = True  # left open on purpose: the server's shutdown must end this child
    return f"session {s.sid} left open with child {child}"


SCENARIOS = {
    "open": scenario_open,
    "cancel": scenario_cancel,
    "retry": scenario_retry, "crash": scenario_crash, "garbage": scenario_garbage, "hang": scenario_hang,
    "kill": scenario_kill, "max-processes": scenario_max_processes, "delete": scenario_delete,
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", required=True)
    p.add_argument("--scenario", choices=sorted(SCENARIOS), required=True)
    p.add_argument("--counter-file")
    p.add_argument("--server-pid", type=int)
    p.add_argument("--call-log", help="COUNTER_CALL_LOG of the upstream (scenario cancel)")
    p.add_argument("--label", default="raw")
    p.add_argument("--timeout-secs", type=float, default=60.0)
    a = p.parse_args()
    s = Session(a.url, a.timeout_secs)
    rc = 1
    try:
        if not a.counter_file and a.scenario == "retry":
            COUNTER_VIA.append(Session(a.url, a.timeout_secs))
            COUNTER_VIA[0].initialize()
        summary = SCENARIOS[a.scenario](s, a)
    except Exception as e:  # noqa: BLE001 - any failure, with the transcript
        kind = "FAILED" if isinstance(e, CheckFailed) else f"ERROR ({type(e).__name__})"
        print(f"[{a.label}] {kind}: {e}", file=sys.stderr)
        print(f"[{a.label}] transcript:", file=sys.stderr)
        for line in TRANSCRIPT[-60:]:
            print(f"    {line}", file=sys.stderr)
    else:
        print(f"[{a.label}] ok: {summary}")
        rc = 0
    finally:
        # A failed scenario still ends its session, so its upstream process does not outlive it.
        for sess in [s, *COUNTER_VIA]:
            if sess.sid and not sess.deleted:
                try:
                    sess.delete()
                except Exception:  # noqa: BLE001
                    pass
    return rc


if __name__ == "__main__":
    sys.exit(main())
