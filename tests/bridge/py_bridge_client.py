#!/usr/bin/env python3
"""Official Python SDK client checks of tidemark's bridge (scripts/bridge.sh: stages time, multi,
counter, http).

Goal: prove that an unmodified `mcp` 2.3.0 client sees the upstream's tools, prompts, resources and
completions through tidemark, with the names the bridge promises (unchanged for one upstream,
`NAME__tool` / `NAME__prompt` / `NAME+URI` for several), and that calls reach the right upstream.
Method: drive `mcp.Client` (streamable HTTP, legacy handshake) as an application would.

Usage: py_bridge_client.py --url URL --scenario time|multi|extras|reload|headers [--label TEXT]
                           [--timeout-s N] [--prefix P] [--counter-file PATH] [--mode legacy|auto]
                           [--config PATH --next-config PATH --pid PID]
  time     upstream mcp-server-time (--local-timezone UTC): tools/list shows get_current_time and
           convert_time (readOnlyHint) and none of tidemark's built-in demo tools; get_current_time {timezone: UTC} answers a JSON text with
           timezone "UTC" and an ISO datetime within a minute of now; convert_time 12:00
           Europe/London -> Asia/Tokyo answers both sides; an unknown timezone is a clean error
           (isError or JSON-RPC error) and the session goes on.
  extras   upstream counter_server.py (one upstream; --prefix P for a named one): prompts/list shows
           greeting, prompts/get greeting {name} says "Hello, <name>!"; resources/list shows
           counter://value, resources/read of it equals the counter (--counter-file: the file's
           value); completion of greeting's `name` "Al" -> [Alice, Albert]; a log-free echo.
  multi    two upstreams a=counter_server.py and t=mcp-server-time: tools/list shows a__echo,
           a__slow_counter, a__get_counter, t__get_current_time and no unprefixed name; a__echo,
           t__get_current_time and a__slow_counter (progress 1..3 once each) work; then the
           `extras` checks with prefix a.
  reload   (issue 22 item 7) tidemark --config PATH with upstreams a=counter_server.py and
           t=mcp-server-time, both prefix always: tools/list shows a__* and t__*; a__slow_counter
           {steps 6, delay_ms 300} runs, and after its first progress the client copies
           --next-config over --config (t kept, a removed, b=counter_server.py added) and sends
           tidemark (--pid) SIGHUP; the session's notifications/tools/list_changed arrives (the
           SDK's message handler), the running call still ends with its result and all 6
           progress steps, tools/list then shows t__* and b__* and no a__*, b__echo and
           t__get_current_time work in this same session, a__echo is a JSON-RPC error, and the
           counter rose by exactly one.
  headers  (issue 22 item 1, SEP-2243) upstream tidemark-peer-rmcp --modern-only, whose `route`
           {region, flag} declares both as x-mcp-header and refuses a call without matching
           Mcp-Param-* headers (400 -32020): tools/list shows route with its x-mcp-header
           annotations unchanged; route {region: "eu-west", flag: true} and {region: "café" (sent
           as the base64 sentinel), flag: false} answer their arguments. With --mode legacy the
           SDK sends no such headers (tidemark adds them toward the upstream); with --mode auto
           it speaks 2026-07-28 and sends them itself (tidemark checks them, then sends its own).
--mode: the SDK client's connect mode (default legacy: the initialize handshake).
Exit status: 0 when every check passed, 1 on the first failure (message on stderr), 2 on usage.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.shared.exceptions import MCPError


class CheckFailed(Exception):
    pass


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise CheckFailed(msg)


def text_of(result: Any, what: str) -> str:
    check(bool(result.content), f"{what}: no content: {result!r}")
    check(not result.is_error, f"{what}: isError: {result!r}")
    first = result.content[0]
    check(getattr(first, "type", None) == "text", f"{what}: first item is not text: {first!r}")
    return first.text


async def scenario_time(client: Client, args: argparse.Namespace, prefix: str = "") -> str:
    name = (lambda n: f"{prefix}__{n}") if prefix else (lambda n: n)
    tools = {t.name: t for t in (await client.list_tools()).tools}
    for want in ("get_current_time", "convert_time"):
        check(name(want) in tools, f"tools/list: missing {name(want)}; got {sorted(tools)}")
    if not prefix:
        for builtin in ("echo", "slow_counter", "get_counter"):
            check(builtin not in tools, f"tools/list: built-in {builtin} served next to an upstream (no --tools demo)")
    ann = tools[name("get_current_time")].annotations
    check(ann is not None and ann.read_only_hint is True, f"get_current_time annotations lost: {ann!r}")
    text = text_of(await client.call_tool(name("get_current_time"), {"timezone": "UTC"}), "get_current_time")
    got = json.loads(text)
    check(got.get("timezone") == "UTC", f"get_current_time: timezone {got.get('timezone')!r}: {text}")
    when = dt.datetime.fromisoformat(got["datetime"])
    skew = abs((when - dt.datetime.now(dt.timezone.utc)).total_seconds())
    check(skew < 60, f"get_current_time: {got['datetime']} is {skew:.0f}s away from now")
    conv = json.loads(
        text_of(
            await client.call_tool(
                name("convert_time"),
                {"source_timezone": "Europe/London", "time": "12:00", "target_timezone": "Asia/Tokyo"},
            ),
            "convert_time",
        )
    )
    check(
        conv.get("source", {}).get("timezone") == "Europe/London" and conv.get("target", {}).get("timezone") == "Asia/Tokyo",
        f"convert_time: {conv}",
    )
    try:
        bad = await client.call_tool(name("get_current_time"), {"timezone": "Not/AZone"})
        check(bad.is_error is True, f"get_current_time Not/AZone succeeded: {bad!r}")
        unknown = "isError"
    except MCPError as e:
        unknown = f"jsonrpc:{e.code}"
    again = text_of(await client.call_tool(name("get_current_time"), {"timezone": "UTC"}), "get_current_time again")
    check(json.loads(again).get("timezone") == "UTC", f"get_current_time after the error: {again}")
    return f"now={got['datetime']} convert ok bad-timezone={unknown}"


def read_counter_file(path: str | None) -> int | None:
    if not path:
        return None
    try:
        with open(path, encoding="ascii") as f:
            return int(f.read().strip() or 0)
    except FileNotFoundError:
        return 0


async def scenario_extras(client: Client, args: argparse.Namespace, prefix: str = "") -> str:
    pname = f"{prefix}__greeting" if prefix else "greeting"
    uri = f"{prefix}+counter://value" if prefix else "counter://value"
    prompts = [p.name for p in (await client.list_prompts()).prompts]
    check(pname in prompts, f"prompts/list: missing {pname}; got {prompts}")
    got = await client.get_prompt(pname, {"name": "Zoë"})
    said = got.messages[0].content.text if got.messages else None
    check(said == "Hello, Zoë!", f"prompts/get {pname}: {got!r}")
    resources = [str(r.uri) for r in (await client.list_resources()).resources]
    check(uri in resources, f"resources/list: missing {uri}; got {resources}")
    read = await client.read_resource(uri)
    check(len(read.contents) == 1, f"resources/read {uri}: {read!r}")
    value = read.contents[0].text
    check(str(read.contents[0].uri) == uri, f"resources/read: contents uri {read.contents[0].uri}, asked {uri}")
    expected = read_counter_file(args.counter_file)
    if expected is not None:
        check(value.strip() == str(expected), f"resources/read {uri}: {value!r}, counter file says {expected}")
    comp = await client.complete(types.PromptReference(type="ref/prompt", name=pname), {"name": "name", "value": "Al"})
    check(comp.completion.values == ["Alice", "Albert"], f"completion/complete: {comp!r}")
    return f"prompt ok resource {uri}={value.strip()} completion ok"


async def scenario_multi(client: Client, args: argparse.Namespace) -> str:
    names = sorted(t.name for t in (await client.list_tools()).tools)
    for want in ("a__echo", "a__slow_counter", "a__get_counter", "t__get_current_time", "t__convert_time"):
        check(want in names, f"tools/list: missing {want}; got {names}")
    for plain in ("echo", "slow_counter", "get_current_time"):
        check(plain not in names, f"tools/list: unprefixed {plain} listed with two upstreams: {names}")
    echo = text_of(await client.call_tool("a__echo", {"text": "via a"}), "a__echo")
    check(echo == "via a", f"a__echo: {echo!r}")
    before = read_counter_file(args.counter_file)
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    slow = text_of(
        await client.call_tool("a__slow_counter", {"steps": 3, "delay_ms": 20}, progress_callback=on_progress),
        "a__slow_counter",
    )
    await anyio.sleep(0.05)
    check(progress == [1.0, 2.0, 3.0], f"a__slow_counter: progress {progress}, expected [1, 2, 3]")
    if before is not None:
        after = read_counter_file(args.counter_file)
        check(slow.strip() == str(before + 1) and after == before + 1,
              f"a__slow_counter: counter before {before}, result {slow}, after {after}")
    t = await scenario_time(client, args, prefix="t")
    e = await scenario_extras(client, args, prefix="a")
    try:
        await client.call_tool("echo", {"text": "unprefixed"})
        raise CheckFailed("calling unprefixed echo succeeded with two upstreams")
    except MCPError as err:
        unknown = f"jsonrpc:{err.code}"
    return f"tools={names} slow={slow.strip()} progress={progress} unprefixed-echo={unknown}; {t}; {e}"


async def scenario_reload(client: Client, args: argparse.Namespace, changed: anyio.Event) -> str:
    names = sorted(t.name for t in (await client.list_tools()).tools)
    for want in ("a__echo", "a__slow_counter", "t__get_current_time"):
        check(want in names, f"tools/list before the reload: missing {want}; got {names}")
    check(not any(n.startswith("b__") for n in names), f"b listed before it was added: {names}")
    before = read_counter_file(args.counter_file)
    progress: list[float] = []
    first = anyio.Event()

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)
        first.set()

    slow: dict[str, str] = {}

    async def run_slow() -> None:
        result = await client.call_tool(
            "a__slow_counter", {"steps": 6, "delay_ms": 300}, progress_callback=on_progress
        )
        slow["text"] = text_of(result, "a__slow_counter across the reload")

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_slow)
        with anyio.fail_after(args.timeout_s):
            await first.wait()
        shutil.copyfile(args.next_config, args.config)
        os.kill(args.pid, signal.SIGHUP)
        with anyio.fail_after(args.timeout_s):
            await changed.wait()
    await anyio.sleep(0.05)
    check(progress == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], f"the removed upstream's call: progress {progress}")
    names = sorted(t.name for t in (await client.list_tools()).tools)
    check(not any(n.startswith("a__") for n in names), f"a still listed after its removal: {names}")
    for want in ("b__echo", "t__get_current_time"):
        check(want in names, f"tools/list after the reload: missing {want}; got {names}")
    echo = text_of(await client.call_tool("b__echo", {"text": "via b"}), "b__echo")
    check(echo == "via b", f"b__echo: {echo!r}")
    await scenario_time(client, args, prefix="t")
    try:
        await client.call_tool("a__echo", {"text": "gone"})
        raise CheckFailed("a__echo succeeded after a was removed")
    except MCPError as err:
        removed = f"jsonrpc:{err.code}"
    if before is not None:
        after = read_counter_file(args.counter_file)
        check(slow["text"].strip() == str(before + 1) and after == before + 1,
              f"a__slow_counter: counter before {before}, result {slow['text']}, after {after}")
    return f"list_changed ok; running call finished ({slow['text'].strip()}, {len(progress)} progress); tools={names}; a__echo={removed}"


async def scenario_headers(client: Client, args: argparse.Namespace) -> str:
    listed = await client.list_tools()
    route = next((t for t in listed.tools if t.name == "route"), None)
    check(route is not None, f"tools/list: no route; got {[t.name for t in listed.tools]}")
    properties = route.input_schema.get("properties", {})
    declared = {k: v.get("x-mcp-header") for k, v in properties.items()}
    check(declared == {"region": "Region", "flag": "Flag"}, f"route: x-mcp-header annotations {declared}")
    answers = []
    for region, flag in (("eu-west", True), ("café", False)):
        result = await client.call_tool("route", {"region": region, "flag": flag})
        text = text_of(result, f"route {region!r}")
        want = f"region={region} flag={'true' if flag else 'false'}"
        check(text == want, f"route {region!r}: {text!r}, expected {want!r}")
        answers.append(text)
    return f"version={client.protocol_version} route answered {answers}"


async def main(args: argparse.Namespace) -> str:
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        method = getattr(getattr(message, "root", message), "method", None)
        if method == "notifications/tools/list_changed":
            changed.set()

    async with Client(
        args.url, mode=args.mode, read_timeout_seconds=args.timeout_s, message_handler=on_message
    ) as client:
        if args.scenario == "headers":
            return await scenario_headers(client, args)
        if args.scenario == "reload":
            return await scenario_reload(client, args, changed)
        if args.scenario == "time":
            return await scenario_time(client, args, args.prefix)
        if args.scenario == "extras":
            return await scenario_extras(client, args, args.prefix)
        return await scenario_multi(client, args)


def run() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", required=True)
    p.add_argument("--scenario", choices=["time", "extras", "multi", "reload", "headers"], required=True)
    p.add_argument("--mode", choices=["legacy", "auto"], default="legacy")
    p.add_argument("--label", default="py-bridge")
    p.add_argument("--timeout-s", type=float, default=30.0)
    p.add_argument("--prefix", default="")
    p.add_argument("--counter-file")
    p.add_argument("--config", help="reload: tidemark's --config file, overwritten")
    p.add_argument("--next-config", help="reload: the file copied over it")
    p.add_argument("--pid", type=int, help="reload: tidemark's pid, sent SIGHUP")
    args = p.parse_args()
    if args.scenario == "reload" and not (args.config and args.next_config and args.pid):
        p.error("--scenario reload needs --config, --next-config and --pid")
    try:
        summary = anyio.run(main, args)
    except BaseException as e:  # noqa: BLE001 - any SDK/transport error is a failure
        while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
            e = e.exceptions[0]
        kind = "FAILED" if isinstance(e, CheckFailed) else f"ERROR ({type(e).__name__})"
        print(f"[{args.label}] {kind}: {e}", file=sys.stderr)
        return 1
    print(f"[{args.label}] ok: scenario={args.scenario} {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(run())
