#!/usr/bin/env python3
"""The store-outage test (issue 20, scripts/durable.sh): Redis killed mid-run and restarted.

Goal: a node whose store dies keeps serving at full speed and loses nothing of its own; the
sessions it could not mirror are marked not durable (counted in /metrics), its queues stay
inside their bounds, and mirroring resumes once the store is back (every session durable again).
Method: WORKERS threads run legacy echo calls on their own sessions straight at one node for
the whole run, while this script SIGKILLs redis-server at --outage-at seconds and starts it again
(same port, same command) --outage-secs later; /metrics is sampled every 100 ms throughout.
Checked: every echo call answered 200 with its own text (no error, none slower than
SLOW_CALL_S); `tidemark_durable_up` was 0 during the outage and 1 after; marked-not-durable
counted; the queue gauges never above the node's flags; within RECOVERY_S of the restart no
session is not durable and the up gauge is 1.
Standard library only. Prints a summary line and `redis-outage: PASS` or `FAIL: ...`.

Usage: redis_outage.py --node URL --admin URL --redis-pid PID --redis-cmd 'redis-server ...'
                       --queue-records N --queue-bytes N [--seconds S] [--outage-at S]
                       [--outage-secs S]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "clients"))
from haproxy_checks import Fail, json_answer, open_session, post  # noqa: E402

WORKERS = 8
SLOW_CALL_S = 2.0
RECOVERY_S = 20.0


def metrics(admin: str) -> dict[str, float]:
    """Every unlabelled-or-summed sample of the tidemark_durable_* families."""
    text = urllib.request.urlopen(admin + "/metrics", timeout=5).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r"^(tidemark_durable_[a-z_]+)(\{[^}]*\})? ([0-9.eE+-]+|NaN)$", line)
        if m and not m.group(1).endswith(("_bucket", "_sum", "_count")):
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--node", required=True)
    p.add_argument("--admin", required=True, help="the node's admin base URL (http://H:P)")
    p.add_argument("--redis-pid", type=int, required=True)
    p.add_argument("--redis-cmd", required=True)
    p.add_argument("--redis-log", default=os.devnull)
    p.add_argument("--queue-records", type=int, required=True)
    p.add_argument("--queue-bytes", type=int, required=True)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--outage-at", type=float, default=3.0)
    p.add_argument("--outage-secs", type=float, default=3.0)
    p.add_argument("--restarted-pid-file", help="write the new redis-server's pid here")
    a = p.parse_args()

    stop = threading.Event()
    lock = threading.Lock()
    stats = {"calls": 0, "errors": [], "slowest": 0.0}

    def worker(w: int) -> None:
        sid = None
        n = 0
        while not stop.is_set():
            try:
                if sid is None or n % 50 == 0:
                    sid = open_session(a.node)
                n += 1
                text = f"w{w}-{n}"
                t0 = time.monotonic()
                status, _, msg = json_answer(post(a.node, {
                    "jsonrpc": "2.0", "id": n, "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"text": text}}},
                    {"Mcp-Session-Id": sid}))
                took = time.monotonic() - t0
                got = msg.get("result", {}).get("content", [{}])[0].get("text")
                with lock:
                    stats["calls"] += 1
                    stats["slowest"] = max(stats["slowest"], took)
                    if status != 200 or got != text:
                        stats["errors"].append(f"{status} {json.dumps(msg)[:160]}")
            except (OSError, Fail, ValueError) as e:
                with lock:
                    stats["errors"].append(f"{type(e).__name__}: {e}")
                time.sleep(0.05)

    samples: list[tuple[float, dict[str, float]]] = []
    threads = [threading.Thread(target=worker, args=(w,), daemon=True) for w in range(WORKERS)]
    start = time.monotonic()
    for t in threads:
        t.start()
    killed = restarted = False
    # Moments of the kill and the restart; infinite until they happen.
    outage_began = restart_at = float("inf")
    while time.monotonic() - start < a.seconds:
        now = time.monotonic() - start
        if not killed and now >= a.outage_at:
            os.kill(a.redis_pid, signal.SIGKILL)
            killed = True
            outage_began = now
        if killed and not restarted and now >= a.outage_at + a.outage_secs:
            log = open(a.redis_log, "a")
            redis = subprocess.Popen(shlex.split(a.redis_cmd), stdout=log, stderr=log)
            if a.restarted_pid_file:
                with open(a.restarted_pid_file, "w") as f:
                    f.write(str(redis.pid))
            restarted = True
            restart_at = now
        try:
            samples.append((now, metrics(a.admin)))
        except OSError as e:
            stats["errors"].append(f"/metrics: {e}")
        time.sleep(0.1)
    stop.set()
    for t in threads:
        t.join(10)

    failures = []
    if not (killed and restarted):
        failures.append("the run ended before the outage was over (raise --seconds)")
    during = [m for t, m in samples if outage_began + 1.0 <= t < restart_at]
    if not any(m.get("tidemark_durable_up", 1) == 0 for m in during):
        failures.append("tidemark_durable_up never 0 during the outage")
    for _, m in samples:
        if m.get("tidemark_durable_queue_records", 0) > a.queue_records:
            failures.append(f"queue records {m['tidemark_durable_queue_records']} > bound")
            break
        if m.get("tidemark_durable_queue_bytes", 0) > a.queue_bytes:
            failures.append(f"queue bytes {m['tidemark_durable_queue_bytes']} > bound")
            break
    marked = max((m.get("tidemark_durable_sessions_marked_not_durable_total", 0)
                  for _, m in samples), default=0)
    if marked == 0:
        failures.append("no session was marked not durable during the outage")
    # Recovery: after the restart, every live session durable again and the store up.
    deadline = time.monotonic() + RECOVERY_S
    last = {}
    while time.monotonic() < deadline:
        last = metrics(a.admin)
        if last.get("tidemark_durable_up") == 1 and last.get(
                "tidemark_durable_sessions_not_durable", 1) == 0:
            break
        time.sleep(0.2)
    else:
        failures.append(f"not recovered {RECOVERY_S:.0f} s after the restart: {last}")
    if stats["errors"]:
        failures.append(f"{len(stats['errors'])} echo calls failed, e.g. {stats['errors'][:3]}")
    if stats["slowest"] > SLOW_CALL_S:
        failures.append(f"slowest echo call {stats['slowest']:.2f} s")
    print(f"redis-outage: {stats['calls']} echo calls, 0 allowed errors "
          f"(got {len(stats['errors'])}), slowest {stats['slowest'] * 1000:.0f} ms, "
          f"sessions marked not durable {marked:.0f}, "
          f"records dropped {last.get('tidemark_durable_records_dropped_total', 0):.0f}")
    if failures:
        print("redis-outage: FAIL: " + "; ".join(failures))
        return 1
    print("redis-outage: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
