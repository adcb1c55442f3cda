#!/usr/bin/env python3
"""A Streamable HTTP MCP server on the official Python SDK (mcp 2.3.0, MCPServer) serving the
2026-07-28 revision, for scripts/bridge.sh's `modern` stage: tidemark in front of it must speak
that revision (server/discover, per-request _meta, Mcp-Method/Mcp-Name, no session) and
translate its InputRequiredResult for legacy and 2026-07-28 clients.

The SDK serves both eras from one app and picks by the MCP-Protocol-Version header; it has no
switch to refuse the legacy one. So by default a thin ASGI gate in front answers as a server
that serves only 2026-07-28 does: `initialize` -> 404 with -32601, GET and DELETE -> 405, any
POST without `MCP-Protocol-Version: 2026-07-28` -> 400. `--both` leaves the SDK's two eras open.

Tools, shaped like tidemark's demo set so tests/clients/py_client.py runs unchanged: echo {text}
(read-only), slow_counter {steps, delay_ms} (not idempotent: one more execution per call,
answered as the count, also written to COUNTER_FILE; progress per step), get_counter, greet
(the SDK's Resolve/Elicit: "What is your name?" for a required string `name`, "Hello, NAME!").

Usage: py_modern_server.py PORT [--both]. Prints `py_modern_server listening on
http://127.0.0.1:PORT/mcp` once it accepts connections. `GET /debug/log` answers
{"requests": [{method, version, session}], "executions": N}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Annotated

import anyio
import uvicorn
from pydantic import BaseModel

from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve

COUNTER_FILE = os.environ.get("COUNTER_FILE", "")
seen: list[dict] = []
executions = 0


class Name(BaseModel):
    name: str


def ask_name() -> Elicit[Name]:
    return Elicit("What is your name?", Name)


def build() -> MCPServer:
    mcp = MCPServer("py-modern-server")

    @mcp.tool(annotations={"readOnlyHint": True})
    def echo(text: str) -> str:
        """Echoes text."""
        return text

    @mcp.tool(annotations={"readOnlyHint": False, "idempotentHint": False})
    async def slow_counter(steps: int, ctx: Context, delay_ms: int = 20) -> str:
        """Counts one execution, with progress per step; answers the count."""
        global executions
        executions += 1
        value = executions
        if COUNTER_FILE:
            with open(COUNTER_FILE, "w") as f:
                f.write(str(value))
        for step in range(1, steps + 1):
            await anyio.sleep(delay_ms / 1000)
            await ctx.report_progress(step, steps)
        return str(value)

    @mcp.tool(annotations={"readOnlyHint": True})
    def get_counter() -> str:
        """slow_counter's executions."""
        return str(executions)

    @mcp.tool()
    def greet(who: Annotated[Name, Resolve(ask_name)]) -> str:
        """Asks the client a name."""
        return f"Hello, {who.name}!"

    return mcp


def gate(app, modern_only: bool):
    """The ASGI app behind a gate that logs each request and, when `modern_only`, refuses the
    legacy era as a server without it does."""

    async def send_json(send, status: int, body: dict | None) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        headers = [(b"content-length", str(len(data)).encode())]
        if body is not None:
            headers.append((b"content-type", b"application/json"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    async def asgi(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        if scope["path"] == "/debug/log":
            return await send_json(send, 200, {"requests": seen, "executions": executions})
        if scope["method"] != "POST":
            if modern_only:
                return await send_json(send, 405, None)
            return await app(scope, receive, send)
        chunks = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            method = json.loads(body).get("method")
        except (ValueError, AttributeError):
            method = None
        version = headers.get("mcp-protocol-version")
        seen.append({"method": method, "version": version,
                     "session": headers.get("mcp-session-id")})
        if modern_only and method == "initialize":
            return await send_json(send, 404, {"jsonrpc": "2.0", "id": None, "error": {
                "code": -32601, "message": "initialize: this server serves 2026-07-28 only"}})
        if modern_only and version != "2026-07-28":
            return await send_json(send, 400, {"jsonrpc": "2.0", "id": None, "error": {
                "code": -32600, "message": "MCP-Protocol-Version: 2026-07-28 required"}})
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await app(scope, replay, send)

    return asgi


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--both", action="store_true")
    args = parser.parse_args()
    app = build().streamable_http_app()
    config = uvicorn.Config(gate(app, not args.both), host="127.0.0.1", port=args.port,
                            log_level="warning", lifespan="on")
    server = uvicorn.Server(config)

    async def serve():
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve)
            while not server.started:
                await anyio.sleep(0.05)
            print(f"py_modern_server listening on http://127.0.0.1:{args.port}/mcp", flush=True)

    anyio.run(serve)
    sys.exit(0)


if __name__ == "__main__":
    main()
