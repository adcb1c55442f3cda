#!/usr/bin/env python3
"""A stdio MCP server on the official Python SDK (`mcp` 2.3.0, low-level `Server`) that tidemark's
bridge tests put behind `tidemark --upstream 'stdio:python tests/bridge/counter_server.py'`.

Goal: give the bridge an upstream whose tools are exactly tidemark's demo set (so the unchanged
tests/clients/ts_client.mjs and py_client.py run against the bridge as they do against
`--tools demo`), whose side effect is visible across processes (so "each call ran once" can be
checked whatever the isolation), and which can fail on demand.
Method: the low-level Server with hand-written input schemas and annotations copied from
src/provider/builtin/demo.rs; the execution counter lives in a file (env COUNTER_FILE) updated
under an fcntl lock, so every process of this server (one per session, one per core, or a test
reading the file) sees one counter.

Tools (schemas as in demo.rs):
  echo {text}                     readOnlyHint + idempotentHint; returns text
  slow_counter {steps=5 0..1000, delay_ms=0 0..10000}
                                  not idempotent: bumps the shared counter once, then sends
                                  `steps` progress notifications (progress i, total steps), waiting
                                  delay_ms before each; returns the counter after its increment
  get_counter {}                  readOnlyHint; returns the shared counter
Fault tools:
  crash_after {ms}                one progress notification (1 of 1), then os._exit(3) after ms
  garbage {text}                  writes a non-JSON line straight to the stdout wire (a duplicate
                                  of fd 1 taken before the SDK diverts fd 1), then returns text
                                  (over HTTP: just returns text)
  hang {}                         never returns (until cancelled or the process dies)
Also a prompt `greeting {name}` and a resource `counter://value` (text: the counter), plus
completion of greeting's `name` argument (prefix match over a fixed list).

Environment: COUNTER_FILE  path of the shared counter (created when missing; a missing or empty
file counts as 0). Without it the counter is private to this process (a warning on stderr).
COUNTER_CALL_LOG (optional) path of a log this server appends `<pid> start|end|cancelled <tool>`
to for every tools/call, so a test sees what reached the upstream (e.g. a notifications/cancelled).
Run: python counter_server.py  (stdio; stdout carries only JSON-RPC, except what `garbage` writes)
Imported by http_counter_server.py, which serves the same `build_server()` over Streamable HTTP.
"""

from __future__ import annotations

import fcntl
import os
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

SLOW_COUNTER_STEPS_MAX = 1000
SLOW_COUNTER_DELAY_MS_MAX = 10_000
CRASH_EXIT_STATUS = 3
GARBAGE_LINE = b"this line is not JSON-RPC (counter_server garbage tool)\n"
GREETING_NAMES = ["Alice", "Albert", "Bob", "Carol"]
COUNTER_URI = "counter://value"


def _annotations(read_only: bool, idempotent: bool) -> types.ToolAnnotations | None:
    # demo.rs `hints`: both flags listed when either is set, neither otherwise.
    if not (read_only or idempotent):
        return None
    return types.ToolAnnotations(read_only_hint=read_only, idempotent_hint=idempotent)


TOOLS = [
    types.Tool(
        name="echo",
        description="Returns the given text unchanged.",
        input_schema={
            "type": "object",
            "properties": {"text": {"type": "string", "description": "The text to return."}},
            "required": ["text"],
        },
        annotations=_annotations(True, True),
    ),
    types.Tool(
        name="slow_counter",
        description=(
            "Increments the server-wide execution counter once, then sends `steps` progress "
            "notifications, waiting `delay_ms` before each, and returns the counter value after "
            "its own increment. Not idempotent: every execution counts."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "steps": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": SLOW_COUNTER_STEPS_MAX,
                    "default": 5,
                    "description": "Progress notifications to send (0 to 1000, default 5).",
                },
                "delay_ms": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": SLOW_COUNTER_DELAY_MS_MAX,
                    "default": 0,
                    "description": "Milliseconds to wait before each notification (0 to 10000, default 0: no wait).",
                },
            },
        },
        annotations=_annotations(False, False),
    ),
    types.Tool(
        name="get_counter",
        description=(
            "Returns how many times slow_counter has started executing since the counter file was "
            "created, across all processes of this server."
        ),
        input_schema={"type": "object", "properties": {}},
        annotations=_annotations(True, False),
    ),
    types.Tool(
        name="crash_after",
        description="Sends one progress notification, then exits the process (status 3) after `ms`.",
        input_schema={
            "type": "object",
            "properties": {"ms": {"type": "integer", "minimum": 0, "default": 0}},
        },
    ),
    types.Tool(
        name="garbage",
        description="Writes a non-JSON line to stdout, then returns `text`.",
        input_schema={
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    ),
    types.Tool(
        name="hang",
        description="Never returns.",
        input_schema={"type": "object", "properties": {}},
    ),
]


# The real stdout (the JSON-RPC wire), duplicated before the SDK's stdio_server diverts fd 1 to
# stderr while it serves (mcp 2.x protects the wire from stray prints); `garbage` writes here.
_wire_fd: int | None = None

# ---- the shared counter -------------------------------------------------------------------
_private_counter = 0


def _counter_path() -> str | None:
    return os.environ.get("COUNTER_FILE") or None


def _locked_counter(increment: int) -> int:
    """Adds `increment` to the counter under an exclusive fcntl lock; returns the new value."""
    global _private_counter
    path = _counter_path()
    if path is None:
        _private_counter += increment
        return _private_counter
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX)
        raw = b""
        while chunk := os.read(fd, 64):
            raw += chunk
        value = int(raw.strip() or b"0")
        if increment:
            value += increment
            os.lseek(fd, 0, os.SEEK_SET)
            os.ftruncate(fd, 0)
            os.write(fd, f"{value}\n".encode())
        return value
    finally:
        os.close(fd)  # releases the lock


def bump_counter() -> int:
    return _locked_counter(1)


def read_counter() -> int:
    return _locked_counter(0)


# ---- handlers -----------------------------------------------------------------------------
def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


def _bounded(arguments: dict[str, Any], name: str, default: int, maximum: int | None) -> int:
    value = arguments.get(name, default)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MCPError(types.INVALID_PARAMS, f"argument `{name}` must be a non-negative integer")
    if maximum is not None and value > maximum:
        raise MCPError(types.INVALID_PARAMS, f"argument `{name}` must be at most {maximum}")
    return value


def _required_str(arguments: dict[str, Any], name: str) -> str:
    value = arguments.get(name)
    if not isinstance(value, str):
        raise MCPError(types.INVALID_PARAMS, f"argument `{name}` must be a string")
    return value


async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


def _call_log(line: str) -> None:
    """Appends one line to COUNTER_CALL_LOG (when set): what the upstream saw, for the tests."""
    path = os.environ.get("COUNTER_CALL_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()} {line}\n")


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    _call_log(f"start {params.name}")
    try:
        result = await _call_tool(ctx, params)
    except anyio.get_cancelled_exc_class():
        _call_log(f"cancelled {params.name}")
        raise
    _call_log(f"end {params.name}")
    return result


async def _call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    name = params.name
    arguments = params.arguments or {}
    if not isinstance(arguments, dict):
        raise MCPError(types.INVALID_PARAMS, "arguments must be an object")
    if name == "echo":
        return _text(_required_str(arguments, "text"))
    if name == "slow_counter":
        steps = _bounded(arguments, "steps", 5, SLOW_COUNTER_STEPS_MAX)
        delay_ms = _bounded(arguments, "delay_ms", 0, SLOW_COUNTER_DELAY_MS_MAX)
        value = bump_counter()
        for step in range(1, steps + 1):
            if delay_ms:
                await anyio.sleep(delay_ms / 1000)
            await ctx.session.report_progress(float(step), float(steps))
        return _text(str(value))
    if name == "get_counter":
        return _text(str(read_counter()))
    if name == "crash_after":
        ms = _bounded(arguments, "ms", 0, None)
        await ctx.session.report_progress(1.0, 1.0, "about to crash")
        await anyio.sleep(ms / 1000)
        sys.stderr.write(f"counter_server: crash_after: exiting with status {CRASH_EXIT_STATUS}\n")
        sys.stderr.flush()
        os._exit(CRASH_EXIT_STATUS)
    if name == "garbage":
        text = _required_str(arguments, "text")
        if _wire_fd is not None:
            os.write(_wire_fd, GARBAGE_LINE)
        return _text(text)
    if name == "hang":
        await anyio.sleep_forever()
    raise MCPError(types.INVALID_PARAMS, f"unknown tool: {name}")


async def list_prompts(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
    return types.ListPromptsResult(
        prompts=[
            types.Prompt(
                name="greeting",
                description="Greets someone by name.",
                arguments=[types.PromptArgument(name="name", description="Who to greet", required=True)],
            )
        ]
    )


async def get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
    if params.name != "greeting":
        raise MCPError(types.INVALID_PARAMS, f"unknown prompt: {params.name}")
    who = (params.arguments or {}).get("name", "")
    return types.GetPromptResult(
        description="A greeting",
        messages=[
            types.PromptMessage(role="user", content=types.TextContent(type="text", text=f"Hello, {who}!"))
        ],
    )


async def list_resources(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
    return types.ListResourcesResult(
        resources=[
            types.Resource(
                name="counter", uri=COUNTER_URI, description="The shared slow_counter count", mime_type="text/plain"
            )
        ]
    )


async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    if str(params.uri) != COUNTER_URI:
        raise MCPError(types.RESOURCE_NOT_FOUND if hasattr(types, "RESOURCE_NOT_FOUND") else -32002,
                       f"unknown resource: {params.uri}")
    return types.ReadResourceResult(
        contents=[types.TextResourceContents(uri=COUNTER_URI, mime_type="text/plain", text=str(read_counter()))]
    )


async def complete(ctx: Any, params: types.CompleteRequestParams) -> types.CompleteResult:
    ref = params.ref
    values: list[str] = []
    if getattr(ref, "type", None) == "ref/prompt" and getattr(ref, "name", None) == "greeting":
        if params.argument.name == "name":
            values = [n for n in GREETING_NAMES if n.startswith(params.argument.value)]
    return types.CompleteResult(completion=types.Completion(values=values, total=len(values), has_more=False))


def build_server() -> Server:
    return Server(
        "tidemark-bridge-counter",
        version="1.0.0",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
        on_completion=complete,
    )


async def main() -> None:
    global _wire_fd
    _wire_fd = os.dup(1)
    if _counter_path() is None:
        print("counter_server: COUNTER_FILE is not set; the counter is private to this process", file=sys.stderr)
    server = build_server()
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
