#!/usr/bin/env python3
"""The counter server of counter_server.py as a Streamable HTTP MCP server (official Python SDK,
stateful sessions, resumable through an in-memory event store), for tidemark's `--upstream
http://...` bridge tests (scripts/bridge.sh, stage `http`).

Goal: an HTTP upstream with exactly the tools, prompt and resource of counter_server.py (the demo
set plus the fault tools), so the same unchanged SDK clients can run through the bridge.
Method: `build_server()` from counter_server.py, served by the SDK's own
`Server.streamable_http_app` (session manager, SSE responses, `Last-Event-ID` replay from the
event store below) under uvicorn.

Usage: http_counter_server.py PORT [--host 127.0.0.1] [--path /mcp] [--retry-ms N] [--no-event-store]
`--no-event-store`: no resumability (events carry no ids), as the SDK runs without one.
Prints `http_counter_server listening on http://HOST:PORT/PATH` once it accepts connections.
`GET /debug/sessions` answers {"sessions": N}: the MCP sessions it holds (a test hook).
COUNTER_FILE as for counter_server.py (one process here, but the same file keeps the tests
uniform). Stops on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from collections import OrderedDict

import anyio
import uvicorn
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from counter_server import build_server  # noqa: E402
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore  # noqa: E402

MAX_EVENTS = 10_000


class InMemoryEventStore(EventStore):
    """Every event of every stream, in order, the oldest dropped beyond MAX_EVENTS."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._events: OrderedDict[str, tuple[str, object]] = OrderedDict()  # event id -> (stream, msg)

    async def store_event(self, stream_id, message):  # type: ignore[override]
        event_id = str(next(self._ids))
        self._events[event_id] = (stream_id, message)
        while len(self._events) > MAX_EVENTS:
            self._events.popitem(last=False)
        return event_id

    async def replay_events_after(self, last_event_id, send_callback: EventCallback):  # type: ignore[override]
        if last_event_id not in self._events:
            return None
        stream_id = self._events[last_event_id][0]
        after = False
        for event_id, (sid, message) in list(self._events.items()):
            if after and sid == stream_id and message is not None:
                await send_callback(EventMessage(message, event_id))  # type: ignore[arg-type]
            if event_id == last_event_id:
                after = True
        return stream_id


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("port", type=int)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--path", default="/mcp")
    p.add_argument("--retry-ms", type=int, default=200)
    p.add_argument("--no-event-store", action="store_true")
    return p.parse_args()


async def main(args: argparse.Namespace) -> None:
    server = build_server()

    async def sessions(request: Request) -> JSONResponse:
        # Test hook: the MCP sessions this server holds (a private attribute of the SDK 2.3.0
        # session manager), so the tests can see that the bridge DELETEs its upstream sessions.
        live = getattr(server.session_manager, "_server_instances", None)
        return JSONResponse({"sessions": None if live is None else len(live)})

    app = server.streamable_http_app(
        streamable_http_path=args.path,
        event_store=None if args.no_event_store else InMemoryEventStore(),
        retry_interval=args.retry_ms,
        host=args.host,
        custom_starlette_routes=[Route("/debug/sessions", sessions, methods=["GET"])],
    )
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", lifespan="on")
    userver = uvicorn.Server(config)

    async def announce() -> None:
        while not userver.started:
            await anyio.sleep(0.05)
        print(f"http_counter_server listening on http://{args.host}:{args.port}{args.path}", flush=True)

    async with anyio.create_task_group() as tg:
        tg.start_soon(announce)
        await userver.serve()
        tg.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(main, parse_args())
