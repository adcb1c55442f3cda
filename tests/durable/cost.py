#!/usr/bin/env python3
"""What the durable mirror costs in the store, and how fast a peer adopts (issue 20 numbers;
run by scripts/durable-cost.sh, not by the test command).

Method, against a real redis-server and release tidemark nodes started by the caller:
- memory: Redis `used_memory` (INFO memory) before and after IDLE sessions are opened on node 1
  (per idle session), then after one session's slow_counter call of EVENTS progress events
  (per event; the ring holds them all at the default --replay-events);
- lag: node 1's `tidemark_durable_lag_seconds` histogram after that call, LAG_BURSTS more like
  it and LAG_CALLS echo calls on the same session (one burst alone is a handful of records),
  p50 and p99 from its buckets (upper bounds), and how many records it counted;
- adoption: ADOPT sessions on node 1, each with a finished call, then node 1 SIGKILLed; after its
  lease expired, each session's first request on node 2 (GET + Last-Event-ID of its first event)
  is timed from send to the whole answer read: p50/p99 as the client sees them, and node 2's
  `tidemark_durable_adoption_seconds` count.
Standard library only. Prints `key value` lines.

Usage: cost.py --node1 URL --admin1 URL --node2 URL --admin2 URL --node1-pid PID
               --redis-port P [--idle N] [--events N] [--adopt N] [--lease-ms MS]
               [--lag-bursts N] [--lag-calls N]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import sys
import time
import urllib.parse
import urllib.request


def redis(port: int, *args: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(("*%d\r\n" % len(args) + "".join("$%d\r\n%s\r\n" % (len(a), a) for a in args)).encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            data += chunk
            if not chunk or data.startswith(b"+") or data.startswith(b"-") or (data.startswith(b"$") and data.count(b"\r\n") >= 2):
                return data


def used_memory(port: int) -> int:
    for line in redis(port, "INFO", "memory").decode().splitlines():
        if line.startswith("used_memory:"):
            return int(line.split(":")[1])
    raise SystemExit("no used_memory in INFO")


def conn(url: str) -> tuple[http.client.HTTPConnection, str]:
    u = urllib.parse.urlsplit(url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=30), u.path


HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
           "MCP-Protocol-Version": "2025-11-25"}


def post(url: str, body: dict, sid: str | None = None) -> tuple[int, dict, bytes]:
    c, path = conn(url)
    h = dict(HEADERS)
    if sid:
        h["Mcp-Session-Id"] = sid
    c.request("POST", path, json.dumps(body), h)
    r = c.getresponse()
    data = r.read()
    headers = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, headers, data


def open_session(url: str) -> str:
    status, headers, _ = post(url, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "cost", "version": "1"}}})
    assert status == 200, status
    sid = headers["mcp-session-id"]
    post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)
    return sid


def first_event_id(body: bytes) -> str:
    for line in body.decode().splitlines():
        if line.startswith("id:"):
            return line[3:].strip()
    raise SystemExit("no event id in %r" % body[:200])


def metrics(admin: str) -> str:
    return urllib.request.urlopen(admin.rstrip("/") + "/metrics", timeout=5).read().decode()


def quantiles(text: str, family: str, qs: list[float]) -> list[float]:
    buckets = []
    for line in text.splitlines():
        if line.startswith(family + "_bucket{le=\""):
            le = line.split('le="')[1].split('"')[0]
            buckets.append((float("inf") if le == "+Inf" else float(le), int(line.split()[-1])))
    total = buckets[-1][1] if buckets else 0
    out = []
    for q in qs:
        want = q * total
        out.append(next((le for le, n in buckets if n >= want), float("nan")) if total else float("nan"))
    return out


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    for name in ("--node1", "--admin1", "--node2", "--admin2"):
        ap.add_argument(name, required=True)
    ap.add_argument("--node1-pid", type=int, required=True)
    ap.add_argument("--redis-port", type=int, required=True)
    ap.add_argument("--idle", type=int, default=2000)
    ap.add_argument("--events", type=int, default=1000)
    ap.add_argument("--adopt", type=int, default=200)
    ap.add_argument("--lease-ms", type=int, default=1000)
    ap.add_argument("--lag-bursts", type=int, default=20)
    ap.add_argument("--lag-calls", type=int, default=200)
    a = ap.parse_args()

    time.sleep(0.5)
    before = used_memory(a.redis_port)
    for _ in range(a.idle):
        open_session(a.node1)
    time.sleep(0.5)
    after_idle = used_memory(a.redis_port)
    print("redis_bytes_per_idle_session %.0f" % ((after_idle - before) / a.idle))

    sid = open_session(a.node1)
    time.sleep(0.3)
    base = used_memory(a.redis_port)
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "slow_counter", "arguments": {"steps": a.events, "delay_ms": 0}, "_meta": {"progressToken": 1}}}
    status, _, _ = post(a.node1, call, sid)
    assert status == 200, status
    time.sleep(0.5)
    print("redis_bytes_per_event %.0f" % ((used_memory(a.redis_port) - base) / a.events))

    for n in range(a.lag_bursts):
        call["id"] = 100 + n
        status, _, _ = post(a.node1, call, sid)
        assert status == 200, status
    for n in range(a.lag_calls):
        status, _, _ = post(a.node1, {"jsonrpc": "2.0", "id": 10_000 + n, "method": "tools/call",
                                      "params": {"name": "echo", "arguments": {"text": "lag"}}}, sid)
        assert status == 200, status
    time.sleep(0.5)
    text = metrics(a.admin1)
    p50, p99 = quantiles(text, "tidemark_durable_lag_seconds", [0.5, 0.99])
    print("mirror_lag_p50_le_seconds %g" % p50)
    print("mirror_lag_p99_le_seconds %g" % p99)
    samples = next((int(float(line.split()[-1])) for line in text.splitlines()
                    if line.startswith("tidemark_durable_lag_seconds_count")), 0)
    print("mirror_lag_records %d" % samples)

    echo = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "x"}}}
    adopted = []
    for _ in range(a.adopt):
        s = open_session(a.node1)
        _, _, body = post(a.node1, echo, s)
        adopted.append((s, first_event_id(body)))
    time.sleep(0.3)
    os.kill(a.node1_pid, signal.SIGKILL)
    time.sleep(a.lease_ms / 1000 * 1.5)
    took = []
    for s, event in adopted:
        c, path = conn(a.node2)
        t = time.perf_counter()
        c.request("GET", path, headers={"Accept": "text/event-stream", "Mcp-Session-Id": s,
                                        "Last-Event-ID": event, "MCP-Protocol-Version": "2025-11-25"})
        r = c.getresponse()
        body = r.read()
        took.append(time.perf_counter() - t)
        c.close()
        assert r.status == 200 and b'"id":5' in body, (r.status, body[:200])
    print("adoption_first_request_p50_ms %.2f" % (1000 * percentile(took, 0.5)))
    print("adoption_first_request_p99_ms %.2f" % (1000 * percentile(took, 0.99)))
    text = metrics(a.admin2)
    count = next(int(l.split()[-1]) for l in text.splitlines() if l.startswith("tidemark_durable_adoption_seconds_count"))
    print("adoptions_counted %d of %d" % (count, a.adopt))


if __name__ == "__main__":
    main()
