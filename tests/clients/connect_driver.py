#!/usr/bin/env python3
"""A local MCP client on stdio that counts what a stdio-to-HTTP bridge loses, doubles or reports.

Goal: measure a bridge (`tidemark connect`, mcp-remote) end to end: N non-idempotent calls
through it, their streams cut by tests/clients/cut_proxy.py, and count calls lost (no answer),
answers and progress events duplicated, progress events lost, outcomes reported unknown
(-31006), other errors, and executions on the server beyond one per call.
Method: start the bridge command, `initialize`, read the server's execution counter
(`get_counter`), then N `tools/call slow_counter {steps, delay_ms}` one after another, each with
its own progress token, waiting up to --call-timeout-s for its answer; read the counter again;
close stdin. The counter rises once per execution, so executions beyond N are double runs.
With --modern the client speaks MCP 2026-07-28 (CONTRACT §5): no `initialize`, a
`server/discover` first, and every request names the revision, the client's info and
capabilities in its `_meta`, so the bridge sends it statelessly (no session, no event ids).

Usage: connect_driver.py --label NAME --calls N [--steps S] [--delay-ms D]
           [--call-timeout-s T] [--modern] -- BRIDGE-COMMAND...
Prints one line `connect_driver label=NAME calls=N ok=.. unknown=.. errors=.. lost=..
dup_answers=.. dup_events=.. lost_events=.. executions=.. double_executions=.. counter_before=..
counter_after=..` (executions None when a counter read failed), and exits 0
(the caller judges the counts); 2 when the bridge could not even initialize.
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import queue
import subprocess
import sys
import threading
import time
from collections import Counter

INIT_TIMEOUT_S = 30
PROTOCOL_VERSION = "2025-11-25"
MODERN_VERSION = "2026-07-28"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "connect_driver", "version": "1"},
}


class Bridge:
    """The bridge process: JSON lines in, JSON lines out (a reader thread fills a queue)."""

    def __init__(self, command: list[str]) -> None:
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        self.inbox: queue.Queue[dict] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            line = line.strip()
            if not line:
                continue
            try:
                self.inbox.put(json.loads(line))
            except ValueError:
                sys.stderr.write(f"connect_driver: not JSON from the bridge: {line[:200]!r}\n")

    def send(self, message: dict) -> None:
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=15)
        except (subprocess.TimeoutExpired, BrokenPipeError):
            self.proc.kill()
            self.proc.wait()


class Tally:
    """Everything the bridge wrote, sorted by what it answers."""

    def __init__(self) -> None:
        self.answers: Counter = Counter()
        self.answer: dict = {}
        self.progress: Counter = Counter()

    def take(self, message: dict) -> None:
        if message.get("method") == "notifications/progress":
            p = message.get("params", {})
            self.progress[(p.get("progressToken"), p.get("progress"))] += 1
        elif "id" in message and "method" not in message:
            self.answers[message["id"]] += 1
            self.answer.setdefault(message["id"], message)

    def wait(self, bridge: Bridge, rid, timeout_s: float) -> dict | None:
        deadline = time.monotonic() + timeout_s
        while rid not in self.answer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                self.take(bridge.inbox.get(timeout=left))
            except queue.Empty:
                return None
        return self.answer[rid]

    def drain(self, bridge: Bridge, quiet_s: float) -> None:
        """Takes what is still coming (late duplicates count too)."""
        while True:
            try:
                self.take(bridge.inbox.get(timeout=quiet_s))
            except queue.Empty:
                return


def counter_value(answer: dict | None) -> int | None:
    try:
        return int(answer["result"]["content"][0]["text"].strip().split()[-1])
    except (TypeError, KeyError, IndexError, ValueError):
        return None


def call(rid, name: str, arguments: dict, token=None, modern: bool = False) -> dict:
    params: dict = {"name": name, "arguments": arguments}
    meta: dict = dict(MODERN_META) if modern else {}
    if token is not None:
        meta["progressToken"] = token
    if meta:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


def start(bridge: Bridge, tally: Tally, modern: bool) -> bool:
    """`initialize` (legacy) or `server/discover` (2026-07-28); False when it got no answer."""
    if modern:
        bridge.send({"jsonrpc": "2.0", "id": "init", "method": "server/discover",
                     "params": {"_meta": dict(MODERN_META)}})
        return tally.wait(bridge, "init", INIT_TIMEOUT_S) is not None
    bridge.send({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
        "protocolVersion": PROTOCOL_VERSION, "capabilities": {},
        "clientInfo": {"name": "connect_driver", "version": "1"}}})
    if tally.wait(bridge, "init", INIT_TIMEOUT_S) is None:
        return False
    bridge.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    return True


def run(a: argparse.Namespace) -> int:
    bridge = Bridge(a.command)
    tally = Tally()
    if not start(bridge, tally, a.modern):
        print(f"connect_driver label={a.label} failed=initialize", flush=True)
        bridge.close()
        return 2
    bridge.send(call("before", "get_counter", {}, modern=a.modern))
    before = counter_value(tally.wait(bridge, "before", a.call_timeout_s))
    codes: Counter = Counter()
    for i in range(1, a.calls + 1):
        arguments = {"steps": a.steps, "delay_ms": a.delay_ms}
        bridge.send(call(i, "slow_counter", arguments, token=f"t{i}", modern=a.modern))
        answer = tally.wait(bridge, i, a.call_timeout_s)
        if answer is None:
            codes["lost"] += 1
        elif "error" in answer:
            codes["unknown" if answer["error"].get("code") == -31006 else "errors"] += 1
        else:
            codes["ok"] += 1
    bridge.send(call("after", "get_counter", {}, modern=a.modern))
    after = counter_value(tally.wait(bridge, "after", a.call_timeout_s))
    tally.drain(bridge, 0.5)
    bridge.close()
    report(a, tally, codes, before, after)
    return 0


def report(a: argparse.Namespace, tally: Tally, codes: Counter, before, after) -> None:
    dup_answers = sum(n - 1 for rid, n in tally.answers.items() if n > 1)
    dup_events = sum(n - 1 for n in tally.progress.values() if n > 1)
    lost_events = 0
    for i in range(1, a.calls + 1):
        answer = tally.answer.get(i)
        if answer is not None and "result" in answer:
            got = sum(1 for (token, _p) in tally.progress if token == f"t{i}")
            lost_events += max(0, a.steps - got)
    executions = None if before is None or after is None else after - before
    double = None if executions is None else max(0, executions - a.calls)
    print(
        f"connect_driver label={a.label} calls={a.calls} ok={codes['ok']} unknown={codes['unknown']} "
        f"errors={codes['errors']} lost={codes['lost']} dup_answers={dup_answers} dup_events={dup_events} "
        f"lost_events={lost_events} executions={executions} double_executions={double} "
        f"counter_before={before} counter_after={after}",
        flush=True,
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument("--label", required=True)
    p.add_argument("--calls", type=int, required=True)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--delay-ms", type=int, default=20)
    p.add_argument("--call-timeout-s", type=float, default=30)
    p.add_argument("--modern", action="store_true", help="speak MCP 2026-07-28 (no initialize)")
    p.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args()
    if a.command and a.command[0] == "--":
        a.command = a.command[1:]
    if not a.command:
        p.error("the bridge command is missing (after --)")
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
