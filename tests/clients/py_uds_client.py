"""Real-client check of tidemark over a Unix socket with the official Python SDK (`mcp`).

Goal: the SDK's streamable HTTP client reaches `--listen unix:PATH` through an httpx transport
bound to the socket file (`AsyncHTTPTransport(uds=PATH)`, handed to the client as its
`http_client`), in both eras: `--mode legacy` (initialize, a session) and `--mode auto` (the
2026-07-28 era when the server discovers it), each doing tools/list and tools/call echo and
slow_counter (its progress notifications, once each).

Method: the URL names `localhost`, as a client of a socket file does (the Host the server's
loopback rule admits); the socket path is the connection's only address.

Used by scripts/clients.sh (stage `unix`). Prints `[LABEL] ok: ...` and exits 0, or prints
`[LABEL] FAILED: ...` and exits 1.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import MODERN_PROTOCOL_VERSIONS


class CheckFailed(Exception):
    pass


def check(ok: bool, what: str) -> None:
    if not ok:
        raise CheckFailed(what)


def text_of(result: Any, what: str) -> str:
    check(bool(result.content) and not result.is_error, f"{what}: {result!r}")
    return result.content[0].text


async def main(args: argparse.Namespace) -> str:
    transport = httpx2.AsyncHTTPTransport(uds=args.socket)
    http = httpx2.AsyncClient(transport=transport, timeout=httpx2.Timeout(30.0, read=60.0))
    async with http:
        client_obj = Client(streamable_http_client(args.url, http_client=http), mode=args.mode)
        async with client_obj as client:
            version = client.protocol_version
            era = "modern" if version in MODERN_PROTOCOL_VERSIONS else "legacy"
            check(era == args.expect_era, f"connect: era {era} (version {version})")
            names = sorted(t.name for t in (await client.list_tools()).tools)
            check("echo" in names and "slow_counter" in names, f"tools/list: {names}")
            echo = text_of(await client.call_tool("echo", {"text": "over uds"}), "echo")
            check(echo == "over uds", f"echo: {echo!r}")
            progress: list[float] = []

            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                progress.append(value)

            slow = await client.call_tool(
                "slow_counter", {"steps": 3, "delay_ms": 20}, progress_callback=on_progress
            )
            text_of(slow, "slow_counter")
            check(progress == [1, 2, 3], f"slow_counter progress: {progress}")
    return f"era={era} version={version} tools={len(names)} echo={echo!r} progress={progress}"


def run() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--socket", required=True, help="the socket file (--listen unix:PATH)")
    p.add_argument("--url", default="http://localhost/mcp")
    p.add_argument("--mode", choices=["legacy", "auto"], default="legacy")
    p.add_argument("--expect-era", choices=["legacy", "modern"], default="legacy")
    p.add_argument("--label", default="py-uds")
    args = p.parse_args()
    try:
        summary = anyio.run(main, args)
    except BaseException as e:  # noqa: BLE001 - report any SDK/transport error as a failure
        while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
            e = e.exceptions[0]
        kind = "FAILED" if isinstance(e, CheckFailed) else f"FAILED ({type(e).__name__})"
        print(f"[{args.label}] {kind}: {e}", file=sys.stderr)
        return 1
    print(f"[{args.label}] ok: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(run())
