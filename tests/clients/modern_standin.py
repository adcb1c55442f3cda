#!/usr/bin/env python3
"""A stand-in for `tidemark --tools demo` built on the Python SDK's own server (MCPServer, both eras).

Goal: check the client harness of scripts/clients.sh's `modern` stage against a server other than
tidemark, so that a failure there can be told apart: a harness (client-side) fault fails here too,
a tidemark fault does not. Not a reference for tidemark's behaviour: where the SDK server and
tidemark differ (the inputRequests key, `title`s in the elicitation schema, SSE vs JSON answers),
the clients accept both by design.

Serves the demo tools with tidemark's semantics: echo {text}; slow_counter {steps, delay_ms} (one
progress notification per step, then the global execution count); get_counter; greet (no
arguments: elicits "What is your name?" with a form of one required string `name`, answers
"Hello, NAME!"). In the legacy era the SDK sends the elicitation as a server->client request; in
2026-07-28 it returns an InputRequiredResult and resumes on the client's retry.

Usage (what scripts/clients.sh appends is accepted; only --listen is used):
  scripts/clients.sh --only modern --no-build \\
      --server-cmd "$PWD/.cache/venv/bin/python $PWD/tests/clients/modern_standin.py"
Prints `standin listening on http://HOST:PORT/mcp tools=demo` as its first stdout line.
"""

from __future__ import annotations

import argparse
import socket
from typing import Annotated

import anyio
import uvicorn
from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve
from pydantic import BaseModel

COUNTER = 0
mcp = MCPServer("tidemark-standin")


@mcp.tool()
def echo(text: str) -> str:
    """Returns the text unchanged."""
    return text


@mcp.tool()
async def slow_counter(ctx: Context, steps: int = 5, delay_ms: int = 0) -> str:
    """One progress notification per step, then the global execution count."""
    global COUNTER
    for i in range(1, steps + 1):
        if delay_ms:
            await anyio.sleep(delay_ms / 1000)
        await ctx.report_progress(i, steps)
    COUNTER += 1
    return str(COUNTER)


@mcp.tool()
def get_counter() -> str:
    """Executions of slow_counter since start."""
    return str(COUNTER)


class Name(BaseModel):
    name: str


def ask_name() -> Elicit[Name]:
    return Elicit("What is your name?", Name)


@mcp.tool()
def greet(who: Annotated[Name, Resolve(ask_name)]) -> str:
    """Asks the user's name through elicitation and greets them."""
    return f"Hello, {who.name}!"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--listen", default="127.0.0.1:0")
    args, _ignored = p.parse_known_args()
    host, port_text = args.listen.rsplit(":", 1)
    port = int(port_text)
    if port == 0:
        with socket.socket() as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
    print(f"standin listening on http://{host}:{port}/mcp tools=demo", flush=True)
    uvicorn.run(mcp.streamable_http_app(), host=host, port=port, log_level="warning")


if __name__ == "__main__":
    main()
