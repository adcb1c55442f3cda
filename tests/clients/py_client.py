#!/usr/bin/env python3
"""Real-client check of tidemark with the official Python SDK (`mcp`, streamable HTTP).

Goal: prove that an unmodified Python SDK client completes a whole session against the server in
both of its connect modes: `legacy` (the initialize handshake) and `auto` (the SDK's default: probe
`server/discover` first, fall back to initialize when the server is not a 2026-07-28 server).
Sequence: connect, tools/list, a progress-emitting tools/call (each notification exactly once,
in order), echo, then DELETE on close; a dropped response stream must be resumed by the SDK
itself (GET + Last-Event-ID), never re-POSTed.
Method: drive `mcp.Client` as an application would; httpx event hooks only count what went on
the wire. `--protocol-version` patches the version the SDK offers in `initialize` (it always
offers its latest handshake version otherwise).

Usage: py_client.py --url URL [--mode legacy|auto|sdk-default] [--expect-era legacy|modern|any]
           [--protocol-version V] [--steps N] [--delay-ms N] [--check-counter]
           [--min-resumes N] [--timeout-s N] [--label TEXT] [--scenario sequence|reverse]
           [--greet]
       py_client.py --url URL --get-counter      prints the counter and exits
  --mode M       legacy | auto (passed to mcp.Client as mode=) | sdk-default (no mode= at all: the
                 SDK's own default, which is `auto` in mcp 2.x; the summary line names it).
  --greet        sequence only: also call the demo tool `greet` (no arguments) with an elicitation
                 callback registered. The server must ask, through elicitation/create, "What is your
                 name?" with a form schema of one required string property `name`; the callback
                 accepts with {name: "Ada"} and the result text must be exactly "Hello, Ada!". In
                 the legacy era the question comes as a server->client request on the call's SSE
                 stream (one tools/call POST, one POSTed JSON-RPC response); in the 2026-07-28 era
                 as an InputRequiredResult that the SDK answers by retrying tools/call with
                 inputResponses (two tools/call POSTs, the second carrying inputResponses, no
                 POSTed JSON-RPC response).
  --scenario S   sequence (default): the session above, against the demo tools.
                 reverse (against examples/custom_tool, which serves only `reverse`): after the
                 same connect checks, tools/list must contain `reverse` annotated
                 readOnlyHint: true with an inputSchema (type object) requiring a string `text`;
                 each call of reverse {text} must answer a first content item of type text
                 holding the text reversed by Unicode scalar values (ASCII, accented Latin, the
                 empty string, a character outside the BMP); calling an unknown tool must fail
                 cleanly (a JSON-RPC error -32602, or a result with isError true) and leave the
                 session usable (reverse is called again); every call POSTed once; then DELETE
                 as in `sequence`. Not with --check-counter or --get-counter.
Exit status: 0 when every check passed, 1 on the first mismatch (message on stderr), 2 on usage.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
import time
from collections import Counter
from typing import Any

import anyio
import httpx2
import mcp.client.session as mcp_client_session
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, ElicitResult
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS


class CheckFailed(Exception):
    """A behaviour of the server (or SDK) that this test does not accept."""


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise CheckFailed(msg)


class Wire:
    """What went over HTTP, recorded by httpx event hooks (observation only)."""

    def __init__(self) -> None:
        self.posts: Counter[str] = Counter()
        self.tool_calls: Counter[str] = Counter()
        self.resume_gets = 0
        self.gets = 0
        self.deletes = 0
        self.statuses: list[str] = []
        self.session_id: str | None = None
        self.discover_answer: str | None = None
        # greet's tools/call POSTs: for each, the inputResponses (or None) and whether it echoed a
        # requestState.
        self.greet_posts: list[tuple[Any, bool]] = []
        # Mcp-Method / Mcp-Name request headers seen (2026-07-28 standard headers; reported only).
        self.mcp_method_headers: Counter[str] = Counter()

    async def on_request(self, request: httpx2.Request) -> None:
        if request.method == "POST":
            try:
                msg = json.loads(request.content)
            except ValueError:
                return
            for m in msg if isinstance(msg, list) else [msg]:
                key = m.get("method") or ("(response)" if "result" in m or "error" in m else "?")
                self.posts[key] += 1
                if key == "tools/call":
                    params = m.get("params") or {}
                    self.tool_calls[str(params.get("name"))] += 1
                    if params.get("name") == "greet":
                        self.greet_posts.append((params.get("inputResponses"), "requestState" in params))
            if "mcp-method" in request.headers:
                name = request.headers.get("mcp-name")
                self.mcp_method_headers[request.headers["mcp-method"] + (f" {name}" if name else "")] += 1
        elif request.method == "GET":
            self.gets += 1
            if "last-event-id" in request.headers:
                self.resume_gets += 1
        elif request.method == "DELETE":
            self.deletes += 1

    async def on_response(self, response: httpx2.Response) -> None:
        req = response.request
        self.statuses.append(f"{req.method} {response.status_code}")
        sid = response.headers.get("mcp-session-id")
        if sid and req.method == "POST" and self.session_id is None:
            self.session_id = sid
        if req.method == "POST" and req.headers.get("mcp-method") == "server/discover":
            self.discover_answer = f"{response.status_code} {response.headers.get('content-type', '')}"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument("--url", required=True)
    p.add_argument("--mode", choices=["legacy", "auto", "sdk-default"], default="legacy")
    p.add_argument("--expect-era", choices=["legacy", "modern", "any"], default="legacy")
    p.add_argument("--protocol-version", choices=list(HANDSHAKE_PROTOCOL_VERSIONS))
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--delay-ms", type=int, default=20)
    p.add_argument("--check-counter", action="store_true")
    p.add_argument("--min-resumes", type=int, default=0)
    p.add_argument("--timeout-s", type=float, default=60.0)
    p.add_argument("--label", default="py")
    p.add_argument("--get-counter", action="store_true")
    p.add_argument("--scenario", choices=["sequence", "reverse"], default="sequence")
    p.add_argument("--greet", action="store_true")
    # A static bearer token (tidemark --auth-tokens): sent as `Authorization: Bearer` on every
    # request, as an MCP client holding an access token does.
    p.add_argument("--bearer-token")
    args = p.parse_args()
    for name in ("steps", "delay_ms", "min_resumes"):
        if getattr(args, name) < 0:
            p.error(f"--{name.replace('_', '-')} must be >= 0")
    if args.scenario == "reverse" and (args.check_counter or args.get_counter):
        p.error("--check-counter/--get-counter need the demo tools, not --scenario reverse")
    if args.greet and (args.scenario != "sequence" or args.get_counter):
        p.error("--greet needs --scenario sequence (the demo tools)")
    return args


def text_of(result: Any, what: str) -> str:
    check(bool(result.content), f"{what}: result has no content: {result!r}")
    first = result.content[0]
    check(getattr(first, "type", None) == "text", f"{what}: first content item is not text: {first!r}")
    check(not result.is_error, f"{what}: isError is true: {result!r}")
    return first.text


async def counter_value(client: Client, timeout_s: float) -> int:
    text = text_of(await client.call_tool("get_counter", {}, read_timeout_seconds=timeout_s), "get_counter")
    check(re.fullmatch(r"\d+", text.strip()) is not None, f"get_counter: text is not a number: {text!r}")
    return int(text.strip())


def check_connect(client: Client, args: argparse.Namespace, wire: Wire) -> tuple[str, str]:
    """Checks on the connection the SDK set up (era, version, session id); returns (version, era)."""
    version = client.protocol_version
    era = "modern" if version in MODERN_PROTOCOL_VERSIONS else "legacy"
    if args.expect_era != "any":
        check(
            era == args.expect_era,
            f"connect: mode={args.mode} ended in the {era} era (version {version}); expected {args.expect_era}; "
            f"server/discover was answered {wire.discover_answer}",
        )
    if args.protocol_version:
        check(version == args.protocol_version, f"initialize: asked {args.protocol_version}, got {version}")
    if era == "legacy":
        sid = wire.session_id
        check(bool(sid), "initialize: the response carried no Mcp-Session-Id")
        check(re.fullmatch(r"[\x21-\x7e]+", sid or "") is not None, f"session id is not visible ASCII: {sid!r}")
    return version, era


async def run_sequence(client: Client, args: argparse.Namespace, wire: Wire) -> dict[str, Any]:
    version, era = check_connect(client, args, wire)
    tools = await client.list_tools()
    names = [t.name for t in tools.tools]
    for want in ("echo", "slow_counter", "get_counter"):
        check(want in names, f"tools/list: missing {want}; got {names}")

    before = await counter_value(client, args.timeout_s) if args.check_counter else None
    posts_before = wire.posts["tools/call"]
    progress: list[tuple[float, float | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total))

    result = await client.call_tool(
        "slow_counter",
        {"steps": args.steps, "delay_ms": args.delay_ms},
        read_timeout_seconds=args.timeout_s,
        progress_callback=on_progress,
    )
    posts_for_call = wire.posts["tools/call"] - posts_before
    text = text_of(result, "slow_counter")
    check(re.fullmatch(r"\d+", text.strip()) is not None, f"slow_counter: result is not a number: {text!r}")
    # Progress notifications are dispatched to the callback asynchronously; give stragglers a moment
    # so a late duplicate is caught rather than missed.
    await anyio.sleep(0.05)
    values = [v for v, _ in progress]
    check(
        len(progress) == args.steps,
        f"slow_counter: expected {args.steps} progress notifications, got {len(progress)}: {values}",
    )
    check(
        all(b > a for a, b in itertools.pairwise(values)),
        f"slow_counter: progress not strictly increasing (duplicate or out of order): {values}",
    )
    for _, total in progress:
        check(total is None or total == args.steps, f"slow_counter: progress total {total}, expected {args.steps}")
    check(posts_for_call == 1, f"slow_counter: the SDK POSTed tools/call {posts_for_call} times (re-POST)")
    if args.check_counter:
        after = await counter_value(client, args.timeout_s)
        value = int(text.strip())
        check(
            value == before + 1 and after == before + 1,
            f"slow_counter ran more than once or not at all: before {before}, result {value}, after {after}",
        )
    check(
        wire.resume_gets >= args.min_resumes,
        f"expected at least {args.min_resumes} resume GET(s) with Last-Event-ID, saw {wire.resume_gets}",
    )

    echo = text_of(await client.call_tool("echo", {"text": "hi"}, read_timeout_seconds=args.timeout_s), "echo")
    check(echo == "hi", f"echo: expected 'hi', got {echo!r}")
    values_shown = [int(v) if float(v).is_integer() else v for v in values]
    summary = f"result={text.strip()} progress={values_shown}"
    if args.greet:
        summary += " " + await run_greet(client, args, wire, era)
    return {"version": version, "era": era, "summary": summary}


# --greet: the demo tool `greet` asks for a name through elicitation (form mode).
GREET_MESSAGE = "What is your name?"
GREET_NAME = "Ada"


class Elicitations:
    """The elicitation callback of --greet: records each question, answers {name: "Ada"}."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    async def __call__(self, context: Any, params: Any) -> Any:
        self.seen.append(params)
        return ElicitResult(action="accept", content={"name": GREET_NAME})


def check_greet_question(params: Any) -> None:
    check(getattr(params, "mode", None) == "form", f"greet: elicitation is not form mode: {params!r}")
    check(params.message == GREET_MESSAGE, f"greet: elicitation message {params.message!r}, expected {GREET_MESSAGE!r}")
    schema = params.requested_schema
    props = schema.get("properties") or {}
    check(
        schema.get("type") == "object"
        and list(props) == ["name"]
        and (props.get("name") or {}).get("type") == "string"
        and schema.get("required") == ["name"],
        f"greet: requestedSchema must be an object with one required string property 'name': {schema!r}",
    )


async def run_greet(client: Client, args: argparse.Namespace, wire: Wire, era: str) -> str:
    elicitations: Elicitations = args.elicitations
    responses_before = wire.posts["(response)"]
    greet = text_of(await client.call_tool("greet", {}, read_timeout_seconds=args.timeout_s), "greet")
    check(greet == f"Hello, {GREET_NAME}!", f"greet: expected 'Hello, {GREET_NAME}!', got {greet!r}")
    check(len(elicitations.seen) == 1, f"greet: the elicitation callback ran {len(elicitations.seen)} times, expected 1")
    check_greet_question(elicitations.seen[0])
    posted_responses = wire.posts["(response)"] - responses_before
    posts = wire.greet_posts
    if era == "modern":
        # InputRequiredResult, then the SDK's retry on a new request with inputResponses.
        check(
            len(posts) == 2,
            f"greet (2026-07-28): expected 2 tools/call POSTs (first round, retry with inputResponses), saw {len(posts)}",
        )
        check(posts[0][0] is None, f"greet (2026-07-28): the first round carried inputResponses: {posts[0][0]!r}")
        answers = posts[1][0]
        check(
            isinstance(answers, dict) and len(answers) == 1,
            f"greet (2026-07-28): the retry must carry one inputResponse: {answers!r}",
        )
        answer = next(iter(answers.values()))
        check(
            isinstance(answer, dict) and answer.get("action") == "accept"
            and answer.get("content") == {"name": GREET_NAME},
            f"greet (2026-07-28): the retry's inputResponse is not the callback's answer: {answer!r}",
        )
        check(posted_responses == 0, f"greet (2026-07-28): {posted_responses} JSON-RPC response(s) POSTed")
        how = f"input_required key={next(iter(answers))!r} requestState={'echoed' if posts[1][1] else 'absent'}"
    else:
        check(len(posts) == 1, f"greet (legacy): expected 1 tools/call POST, saw {len(posts)}")
        check(posted_responses == 1, f"greet (legacy): expected 1 POSTed elicitation response, saw {posted_responses}")
        how = "server->client request"
    return f"greet={greet!r} via {how}"


# --scenario reverse: the one tool of examples/custom_tool. (text, expected) pairs, written out (not
# computed) so the check does not share a bug with the server: reversal is by Unicode scalar values,
# so U+1F600 (a surrogate pair in UTF-16, 4 bytes in UTF-8) must stay whole.
REVERSE_CASES = [
    ("h\u00e9llo w\u00f6rld", "dlr\u00f6w oll\u00e9h"),  # "hello world" with e-acute, o-umlaut
    ("abc", "cba"),
    ("", ""),
    ("a\U0001f600b\u20ac", "\u20acb\U0001f600a"),
]
REVERSE_AFTER_ERROR = ("still here", "ereh llits")
UNKNOWN_TOOL = "no_such_tool"


async def call_reverse(client: Client, text: str, expected: str, timeout_s: float) -> None:
    what = f"reverse({text!r})"
    got = text_of(await client.call_tool("reverse", {"text": text}, read_timeout_seconds=timeout_s), what)
    check(got == expected, f"{what}: expected {expected!r}, got {got!r}")


async def run_reverse(client: Client, args: argparse.Namespace, wire: Wire) -> dict[str, Any]:
    version, era = check_connect(client, args, wire)
    tools = (await client.list_tools()).tools
    names = [t.name for t in tools]
    check("reverse" in names, f"tools/list: missing reverse; got {names}")
    tool = next(t for t in tools if t.name == "reverse")
    check(
        tool.annotations is not None and tool.annotations.read_only_hint is True,
        f"tools/list: reverse must be annotated readOnlyHint: true; annotations {tool.annotations!r}",
    )
    schema = tool.input_schema
    required = schema.get("required")
    check(
        schema.get("type") == "object" and isinstance(required, list) and "text" in required,
        f"tools/list: reverse's inputSchema must be an object requiring 'text': {schema!r}",
    )
    check(
        ((schema.get("properties") or {}).get("text") or {}).get("type") == "string",
        f"tools/list: reverse's inputSchema must declare text as a string: {schema!r}",
    )

    for text, expected in REVERSE_CASES:
        await call_reverse(client, text, expected, args.timeout_s)

    # An unknown tool: a JSON-RPC error -32602 (what tidemark answers; the spec's "unknown tool"), or
    # a tool result with isError true (what the SDK servers answer). Anything else (transport error,
    # HTTP status, other code, a success) is not clean.
    try:
        r = await client.call_tool(UNKNOWN_TOOL, {"text": "x"}, read_timeout_seconds=args.timeout_s)
    except MCPError as e:
        check(
            e.code == INVALID_PARAMS,
            f"{UNKNOWN_TOOL}: expected a JSON-RPC error {INVALID_PARAMS} (or an isError result), "
            f"got {e.code}: {e}",
        )
        unknown = f"jsonrpc:{e.code}"
    else:
        check(r.is_error is True, f"{UNKNOWN_TOOL}: calling an unknown tool succeeded: {r!r}")
        unknown = "isError"
    await call_reverse(client, *REVERSE_AFTER_ERROR, args.timeout_s)

    calls = len(REVERSE_CASES) + 1
    check(
        wire.tool_calls["reverse"] == calls,
        f"reverse: expected {calls} tools/call POSTs, saw {wire.tool_calls['reverse']}",
    )
    check(
        wire.tool_calls[UNKNOWN_TOOL] == 1,
        f"{UNKNOWN_TOOL}: expected 1 tools/call POST, saw {wire.tool_calls[UNKNOWN_TOOL]}",
    )
    check(
        wire.resume_gets >= args.min_resumes,
        f"expected at least {args.min_resumes} resume GET(s) with Last-Event-ID, saw {wire.resume_gets}",
    )
    summary = f"scenario=reverse tools={names} cases={calls} unknown={unknown}"
    return {"version": version, "era": era, "summary": summary}


def auth_headers(args: argparse.Namespace) -> dict[str, str]:
    return {"authorization": f"Bearer {args.bearer_token}"} if args.bearer_token else {}


async def check_terminated(
    url: str, session_id: str, version: str, wire: Wire, headers: dict[str, str]
) -> None:
    check(wire.deletes == 1, f"close: expected 1 DELETE, saw {wire.deletes}")
    async with httpx2.AsyncClient(timeout=10, headers=headers) as http:
        r = await http.post(
            url,
            headers={
                "content-type": "application/json",
                "accept": "application/json, text/event-stream",
                "mcp-session-id": session_id,
                "mcp-protocol-version": version,
            },
            content=json.dumps({"jsonrpc": "2.0", "id": 9999, "method": "tools/list"}),
        )
    check(r.status_code == 404, f"after DELETE: POST with the old session id got {r.status_code}, expected 404")


async def main(args: argparse.Namespace, wire: Wire) -> None:
    if args.protocol_version:
        # The SDK offers LATEST_HANDSHAKE_VERSION, read from this module at call time.
        mcp_client_session.LATEST_HANDSHAKE_VERSION = args.protocol_version
    http = httpx2.AsyncClient(
        headers=auth_headers(args),
        timeout=httpx2.Timeout(30.0, read=300.0),
        event_hooks={"request": [wire.on_request], "response": [wire.on_response]},
    )
    started = time.monotonic()
    client_kwargs: dict[str, Any] = {"read_timeout_seconds": args.timeout_s}
    if args.mode != "sdk-default":
        client_kwargs["mode"] = args.mode
    if args.greet:
        args.elicitations = Elicitations()
        client_kwargs["elicitation_callback"] = args.elicitations
    async with http:
        transport = streamable_http_client(args.url, http_client=http)
        client_obj = Client(transport, **client_kwargs)
        # sdk-default: name the mode the SDK picked by itself.
        mode_shown = args.mode if args.mode != "sdk-default" else f"sdk-default={client_obj.mode}"
        async with client_obj as client:
            if args.get_counter:
                print(await counter_value(client, args.timeout_s))
                return
            run_scenario = run_reverse if args.scenario == "reverse" else run_sequence
            r = await run_scenario(client, args, wire)
        # Leaving the Client context sends the DELETE (terminate_on_close).
        if r["era"] == "legacy":
            await check_terminated(args.url, wire.session_id or "", r["version"], wire, auth_headers(args))
    elapsed_ms = int((time.monotonic() - started) * 1000)
    print(
        f"[{args.label}] ok: mode={mode_shown} era={r['era']} version={r['version']} {r['summary']} "
        f"resumes={wire.resume_gets} discover={wire.discover_answer!r} posts={dict(wire.posts)} {elapsed_ms}ms"
    )
    if args.greet:
        print(f"[{args.label}] Mcp-Method headers: {dict(wire.mcp_method_headers)}")


def run() -> int:
    args = parse_args()
    wire = Wire()
    try:
        anyio.run(main, args, wire)
        return 0
    except BaseException as e:  # noqa: BLE001 - report any SDK/transport error as a failure
        while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
            e = e.exceptions[0]
        kind = "FAILED" if isinstance(e, CheckFailed) else f"ERROR ({type(e).__name__})"
        print(f"[{args.label}] {kind}: {e}", file=sys.stderr)
        print(f"[{args.label}] wire: statuses={wire.statuses} discover={wire.discover_answer!r}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(run())
