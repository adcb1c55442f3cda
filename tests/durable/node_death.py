#!/usr/bin/env python3
"""The node-death fault test (issue 20, scripts/durable.sh): load through HAProxy on two nodes
mirroring to one Redis, one node killed with SIGKILL at a random moment, every call followed to
its end.

Goal: show the durable mirror's promise (CONTRACT §10) with a real crash. Counted and checked:
  - every call ends with its result or `-31006` (outcome unknown), within its deadline: no hang,
    no other error;
  - no lost event: the progress values a call's client holds (deduplicated by event id, as a
    client holding its cursor does) are 1..j in order with no gap, and j is every step when the
    call ends with its result;
  - no duplicate: never the same progress value under two event ids, never two finals;
  - no double execution: the upstream fixture logs each execution's tag
    ($COUNTER_FILE.calls); a tag appears at most once, exactly once for a call with a result;
  - no 404 for a mirrored session: a session 404s after the crash only if it was opened within
    the mirror's lag of the kill (counted apart as `unmirrored`, reported; never over 1 s).
Legacy calls (`slow_counter` with progress, through a bridged stdio upstream) are recovered at
random by GET + Last-Event-ID, by re-POST (409 and its hint, then GET) or, for keyed calls, by an
Idempotency-Key retry; 2026-07-28 keyed calls are re-issued with the same key and a new id.
Standard library only; the HTTP client is tests/clients/haproxy_checks.py's.

With --store-primary-pid (the sentinel stage, issue 41), the store's primary is SIGKILLed first,
at --store-kill-after-ms; the run waits for the first durable write on the promoted primary
(a node's /metrics, --node-metrics: tidemark_durable_failovers_total >= 1 and a batch counted
after the kill, which with --durable-replicas means a replica holds it too), reports that time,
and only then, --kill-after-ms later, SIGKILLs the node: its sessions are adopted through the
new primary, with the same counts.

Usage: node_death.py --via URL --calls-log FILE --victim-pid PID [--calls N] [--modern-calls N]
                     [--workers N] [--seed S] [--kill-after-ms A,B] [--json FILE]
                     [--store-primary-pid PID --node-metrics URL[,URL] [--store-kill-after-ms A,B]]
Prints one summary line and `node-death: PASS`/`FAIL ...`; exit 0 only on PASS.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import sys
import threading
import time
from collections import Counter

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "clients"))
import haproxy_checks  # noqa: E402
from haproxy_checks import Conn, Fail, modern, post  # noqa: E402

OUTCOME_UNKNOWN = -31006
CALL_DEADLINE_S = 90.0
RETRY_PAUSE_S = 0.2
UNMIRRORED_WINDOW_S = 1.0
# The sentinels' failover (down-after, election, promotion) and the nodes' reconnection.
FAILOVER_DEADLINE_S = 30.0
FAILOVER_POLL_S = 0.02
STEPS = 8
DELAY_MS = 60


class Call:
    """What one call's client holds: events by id, progress values, finals, how it ended."""

    def __init__(self, tag: str, era: str, keyed: bool):
        self.tag, self.era, self.keyed = tag, era, keyed
        self.seen_ids: set[str] = set()
        self.progress: list[int] = []
        self.finals: list[dict] = []
        self.last_id: str | None = None
        self.recoveries: Counter = Counter()
        self.problem: str | None = None
        self.session_opened = 0.0

    def take(self, ev_id: str | None, data: str) -> None:
        if ev_id is not None:
            if ev_id in self.seen_ids:
                return  # a repeat the hint rule allows; a client holding its cursor skips it
            self.seen_ids.add(ev_id)
            self.last_id = ev_id
        if not data:
            return
        msg = json.loads(data)
        if msg.get("method") == "notifications/progress":
            self.progress.append(int(msg["params"]["progress"]))
        elif "result" in msg or "error" in msg:
            self.finals.append(msg)

    def done(self) -> bool:
        return bool(self.finals)


def read_stream(conn: Conn, call: Call) -> None:
    """Reads SSE events (or one JSON answer) into `call` until the body ends or the socket dies."""
    status, headers = conn.head()
    if status != 200:
        body = conn.body()
        conn.close()
        raise Answered(status, headers, body)
    if headers.get("content-type", "").startswith("application/json"):
        call.take(None, conn.body().decode())
        conn.close()
        return
    for ev_id, data in conn.events():
        call.take(ev_id, data)
    conn.close()


class Answered(Exception):
    """A non-200 answer: its status, headers and body."""

    def __init__(self, status: int, headers: dict, body: bytes):
        super().__init__(f"{status}")
        self.status, self.headers, self.body = status, headers, body


def open_session(via: str, deadline: float) -> str:
    """haproxy_checks' initialize exchange, retried while the balancer fails over."""
    while True:
        try:
            return haproxy_checks.open_session(via)
        except (OSError, Fail, ValueError, KeyError):
            pass
        if time.monotonic() > deadline:
            raise Fail("initialize never succeeded")
        time.sleep(RETRY_PAUSE_S)


def legacy_call(via: str, sid: str, rid: int, call: Call, rng: random.Random, kill: dict) -> None:
    args = {"steps": STEPS, "delay_ms": DELAY_MS, "tag": call.tag}
    body = {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": "slow_counter", "arguments": args,
                       "_meta": {"progressToken": call.tag}}}
    headers = {"Mcp-Session-Id": sid}
    if call.keyed:
        headers["Idempotency-Key"] = "key-" + call.tag
    deadline = time.monotonic() + CALL_DEADLINE_S
    attempt = "post"
    while not call.done():
        if time.monotonic() > deadline:
            call.problem = f"no final within {CALL_DEADLINE_S:.0f} s ({dict(call.recoveries)})"
            return
        try:
            if attempt == "get":
                c = Conn(via)
                c.send("GET", {"Accept": "text/event-stream", "Mcp-Session-Id": sid,
                               "Last-Event-ID": call.last_id})
            else:
                c = post(via, body, headers)
            read_stream(c, call)
        except Answered as a:
            if a.status == 409 and a.headers.get("last-event-id"):
                # The call is owed: resume from the event we hold (or the hint, if we hold none).
                call.last_id = call.last_id or a.headers["last-event-id"]
                attempt = "get"
                continue
            if a.status == 404:
                if kill["at"] and call.session_opened > kill["at"] - UNMIRRORED_WINDOW_S:
                    call.problem = "unmirrored"
                else:
                    call.problem = f"404 for a mirrored session: {a.body[:200]!r}"
                return
            if a.status not in (502, 503, 504):
                call.problem = f"HTTP {a.status}: {a.body[:200]!r}"
                return
            time.sleep(RETRY_PAUSE_S)
        except (OSError, Fail, ValueError):
            time.sleep(RETRY_PAUSE_S)
        if call.done():
            break
        # Dropped (or refused while the balancer fails over): recover, as the client chooses.
        choices = ["repost"] + (["get"] if call.last_id else []) + (["keyed"] if call.keyed else [])
        attempt = rng.choice(choices)
        call.recoveries[attempt] += 1
        if attempt == "keyed":
            attempt = "post"


def modern_call(via: str, rid: int, call: Call) -> None:
    msg, headers = modern(rid, "tools/call", {
        "name": "slow_counter",
        "arguments": {"steps": STEPS, "delay_ms": DELAY_MS, "tag": call.tag},
        "_meta": {"progressToken": call.tag}})
    headers["Idempotency-Key"] = "key-" + call.tag
    deadline = time.monotonic() + CALL_DEADLINE_S
    while not call.done():
        if time.monotonic() > deadline:
            call.problem = f"no final within {CALL_DEADLINE_S:.0f} s"
            return
        try:
            # A re-issue is a new request: new id, same key; events of an earlier attempt are
            # not the re-issue's, so only the re-issue's own stream counts.
            call.seen_ids.clear()
            call.progress.clear()
            read_stream(post(via, msg, headers), call)
        except Answered as a:
            if a.status not in (502, 503, 504):
                call.finals.append(json.loads(a.body or b"{}"))
                return
            time.sleep(RETRY_PAUSE_S)
        except (OSError, Fail, ValueError):
            time.sleep(RETRY_PAUSE_S)
        if not call.done():
            call.recoveries["reissue"] += 1
            msg["id"] = msg["id"] + 100_000


def verify(call: Call, executions: Counter) -> str | None:
    """Why this call broke the promise, or None."""
    if call.problem and call.problem != "unmirrored":
        return call.problem
    ran = executions.get(call.tag, 0)
    if ran > 1:
        return f"ran {ran} times"
    if call.problem == "unmirrored":
        return None
    if len(call.finals) != 1:
        return f"{len(call.finals)} finals"
    final = call.finals[0]
    if len(set(call.progress)) != len(call.progress):
        return f"duplicate progress {call.progress}"
    if call.progress != list(range(1, len(call.progress) + 1)):
        return f"progress with a gap or out of order {call.progress}"
    if "result" in final:
        if call.progress != list(range(1, STEPS + 1)) and call.era == "legacy":
            return f"result after progress {call.progress}"
        if ran != 1:
            return f"a result, yet the upstream ran it {ran} times"
        return None
    code = final.get("error", {}).get("code")
    if code != OUTCOME_UNKNOWN:
        return f"final error {final.get('error')}"
    return None


def sample(url: str, name: str) -> int:
    """One unlabelled sample of a node's /metrics (0 when absent or unreachable)."""
    import urllib.request
    try:
        text = urllib.request.urlopen(url, timeout=2).read().decode()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith(name + " "):
            return int(float(line.split()[1]))
    return 0


def durable_lines(url: str) -> list[str]:
    """The node's tidemark_durable_* samples (the victim's, just before its SIGKILL)."""
    import urllib.request
    try:
        text = urllib.request.urlopen(url, timeout=2).read().decode()
    except OSError as e:
        return [f"unreachable: {e}"]
    return [line for line in text.splitlines() if line.startswith("tidemark_durable_")]


def kill_store_primary(pid: int, metrics: list[str]) -> float | None:
    """SIGKILLs the store's primary; seconds until a node counted a failover and a batch written
    after the kill (the first durable write on the promoted primary), None past the deadline."""
    before = [sample(u, "tidemark_durable_batches_total") for u in metrics]
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    while time.monotonic() - killed < FAILOVER_DEADLINE_S:
        for url, batches in zip(metrics, before):
            if (sample(url, "tidemark_durable_failovers_total") >= 1
                    and sample(url, "tidemark_durable_batches_total") > batches):
                return time.monotonic() - killed
        time.sleep(FAILOVER_POLL_S)
    return None


def wait_durable(url: str) -> float | None:
    """Seconds until the node's store is up and none of its sessions is marked not durable, None
    past the deadline."""
    began = time.monotonic()
    while time.monotonic() - began < FAILOVER_DEADLINE_S:
        if (sample(url, "tidemark_durable_up") == 1
                and sample(url, "tidemark_durable_sessions_not_durable") == 0):
            return time.monotonic() - began
        time.sleep(FAILOVER_POLL_S)
    return None


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--via", required=True, help="the balancer's MCP URL")
    p.add_argument("--calls-log", required=True, help="the fixture's $COUNTER_FILE.calls")
    p.add_argument("--victim-pid", type=int, required=True, help="the node to SIGKILL")
    p.add_argument("--calls", type=int, default=300, help="legacy calls")
    p.add_argument("--modern-calls", type=int, default=100, help="2026-07-28 keyed calls")
    p.add_argument("--workers", type=int, default=24)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--kill-after-ms", default="1500,4000", help="range of the kill's moment")
    p.add_argument("--json", help="write the per-call report here")
    p.add_argument("--store-primary-pid", type=int, help="the store's primary to SIGKILL first")
    p.add_argument("--store-kill-after-ms", default="1000,2000", help="range of its moment")
    p.add_argument("--node-metrics", default="", help="the nodes' /metrics URLs, comma-separated")
    a = p.parse_args()
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    print(f"node-death: seed {seed}", flush=True)
    rng = random.Random(seed)
    lo, hi = (int(x) for x in a.kill_after_ms.split(","))
    kill_delay = rng.uniform(lo, hi) / 1000

    calls: list[Call] = []
    for i in range(a.calls):
        calls.append(Call(f"L{seed}-{i}", "legacy", keyed=rng.random() < 0.3))
    for i in range(a.modern_calls):
        calls.append(Call(f"M{seed}-{i}", "modern", keyed=True))
    rng.shuffle(calls)
    queue = list(enumerate(calls))
    lock = threading.Lock()
    kill = {"at": 0.0}
    failover_failed = False

    def worker(wid: int) -> None:
        wrng = random.Random(seed * 1000 + wid)
        sid, opened, used = None, 0.0, 0
        while True:
            with lock:
                if not queue:
                    return
                idx, call = queue.pop()
            try:
                if call.era == "modern":
                    modern_call(a.via, idx + 1, call)
                    continue
                if sid is None or used >= 4:
                    sid = open_session(a.via, time.monotonic() + CALL_DEADLINE_S)
                    opened, used = time.monotonic(), 0
                used += 1
                call.session_opened = opened
                legacy_call(a.via, sid, idx + 1, call, wrng, kill)
                if call.problem:
                    sid = None
            except Fail as e:
                call.problem = str(e)

    threads = [threading.Thread(target=worker, args=(w,), daemon=True) for w in range(a.workers)]
    started = time.monotonic()
    for t in threads:
        t.start()
    failover = ""
    if a.store_primary_pid:
        lo_s, hi_s = (int(x) for x in a.store_kill_after_ms.split(","))
        time.sleep(rng.uniform(lo_s, hi_s) / 1000)
        hit = sum(1 for c in calls if (c.progress or c.seen_ids) and not c.done())
        at = time.monotonic() - started
        took = kill_store_primary(a.store_primary_pid, a.node_metrics.split(","))
        failover = (f"store primary SIGKILLed at {at:.2f} s ({hit} calls in flight), first durable "
                    f"write on the promoted primary after {took:.2f} s" if took is not None else
                    f"store primary SIGKILLed at {at:.2f} s: no durable write on a new primary "
                    f"within {FAILOVER_DEADLINE_S:.0f} s")
        print(f"node-death: {failover}", flush=True)
        if took is None:
            failover_failed = True
    time.sleep(kill_delay)
    if a.store_primary_pid:
        # The node dies with its sessions durable on the new primary (the premise of this
        # stage: adoption through it). With --durable-replicas the promoted primary may have no
        # replica for a while (the other one resyncing: WAIT answers 0, the store counts as
        # down, sessions not durable until rewritten); a node dying then loses those sessions
        # as documented, which the `redis` stage covers, not this one.
        waited = wait_durable(a.node_metrics.split(",")[0])
        failover += (f"; the victim durable again {waited:.2f} s later" if waited is not None
                     else f"; the victim not durable within {FAILOVER_DEADLINE_S:.0f} s")
        failover_failed = failover_failed or waited is None
    victim_durable = durable_lines(a.node_metrics.split(",")[0]) if a.node_metrics else []
    in_flight = sum(1 for c in calls if (c.progress or c.seen_ids) and not c.done())
    os.kill(a.victim_pid, signal.SIGKILL)
    kill["at"] = time.monotonic()
    print(f"node-death: SIGKILL to pid {a.victim_pid} at {kill['at'] - started:.2f} s "
          f"({in_flight} calls had events and no final)", flush=True)
    for t in threads:
        t.join(CALL_DEADLINE_S * 3)
    hung = sum(1 for t in threads if t.is_alive())

    executions: Counter = Counter()
    with open(a.calls_log) as f:
        executions.update(line.strip() for line in f if line.strip())
    stats = Counter()
    failures = []
    for c in calls:
        why = verify(c, executions)
        if why:
            failures.append(f"{c.tag} ({c.era}{', keyed' if c.keyed else ''}): {why}")
        elif c.problem == "unmirrored":
            stats["unmirrored"] += 1
        elif "result" in c.finals[0]:
            stats[f"{c.era}_result"] += 1
        else:
            stats[f"{c.era}_outcome_unknown"] += 1
        for k, v in c.recoveries.items():
            stats[f"recovered_by_{k}"] += v
    double = sum(1 for n in executions.values() if n > 1)
    summary = (f"calls {len(calls)} (legacy {a.calls}, modern {a.modern_calls}), "
               f"{', '.join(f'{k} {v}' for k, v in sorted(stats.items()))}, "
               f"double executions {double}, failures {len(failures)}, hung workers {hung}, "
               f"{time.monotonic() - started:.1f} s" + (f"; {failover}" if failover else ""))
    print(f"node-death: {summary}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"seed": seed, "summary": summary, "failures": failures,
                       "victim_durable_metrics_before_kill": victim_durable,
                       "calls": [{"tag": c.tag, "era": c.era, "keyed": c.keyed,
                                  "progress": c.progress, "finals": c.finals,
                                  "problem": c.problem, "recoveries": dict(c.recoveries)}
                                 for c in calls]}, f, indent=1)
    # The kill must have hit calls in flight, or the run showed nothing.
    if in_flight == 0:
        failures.append("no call was in flight at the kill")
    if failover_failed:
        failures.append("the nodes did not follow the store's failover")
    if failures or hung or double:
        for line in failures[:20]:
            print(f"  {line}")
        print(f"node-death: FAIL ({len(failures)} calls; rerun with --seed {seed})")
        return 1
    print("node-death: PASS")
    return 0


if __name__ == "__main__":
    socket.setdefaulttimeout(30)
    sys.exit(main())
