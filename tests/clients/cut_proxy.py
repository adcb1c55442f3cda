#!/usr/bin/env python3
"""Loopback HTTP/1.1 proxy that drops SSE response streams mid-call, for the resumption tests.

Goal: make a real SDK client lose its `tools/call` response stream in the middle of the call, so
that it has to resume on its own (GET + Last-Event-ID); the test gives the client no help.
Method: forward every connection to the server byte-for-byte, except response bodies, which are
de-chunked, split into SSE events and re-chunked (one chunk per event) so a cut lands exactly on
an event boundary. The first `--cut-streams` SSE responses that match (`--match`) are cut once
`--cut-after-events` events carrying a JSON-RPC message (non-empty `data:`; priming events and
comments are not counted) have been forwarded: the client side of that connection is closed
without the terminating chunk. What happens to the server side is `--on-cut`:
  close  close it too (the server sees the drop), the default;
  drain  keep it open and discard what the server still writes (the server believes the stream
         was delivered: the client must still get the tail by Last-Event-ID);
  stall  keep it open and stop reading (a half-open peer: the server's writes pile up until it
         notices, and the resume must take the stream over from the stalled connection).
Matches: `progress` = a stream carrying `notifications/progress` (the default, counted from the
first progress event), `tools-call` = the SSE answer to a POST of `tools/call` and any resume of
one, `any` = every SSE response (the session's standalone GET stream included).

Random cut points (`tidemark connect`'s test, scripts/connect.sh): with `--cut-after-events-max M`
each matching stream is cut after a number of messages drawn uniformly from K..M (a stream that
ends first is not cut), from a generator seeded by `--seed`, so two runs against the same server
see the same schedule. With `--cut-heads-every K` every K-th POST of `tools/call` loses its response
head instead: the server ran the call, the client's connection closes before a byte of the answer
(the seed's hazard: a client that re-POSTs it runs it twice).

Usage: cut_proxy.py --upstream HOST:PORT [--listen 127.0.0.1:0] [--cut-after-events K]
           [--cut-after-events-max M] [--seed S] [--cut-heads-every K]
           [--cut-streams N] [--match progress|tools-call|any] [--on-cut close|drain|stall]
           [--log-file PATH]
The first stdout line is `cut_proxy listening on http://127.0.0.1:PORT/ upstream=HOST:PORT`;
each cut prints `cut_proxy cut stream=<n> after_events=<k> ...` to stdout; the --log-file has a
line per request (`> METHOD rpc=… last-event-id=… key=<Idempotency-Key>`) and per response head
(`< STATUS type for METHOD rpc=…`). Stops on SIGTERM/SIGINT.
Loopback only: it refuses a non-loopback --listen or --upstream. Standard library only.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import random
import signal
import sys
from dataclasses import dataclass, field

HEAD_BYTES_MAX = 64 * 1024
"""Largest request or response head accepted; a bigger one closes the connection (test tool)."""

READ_BYTES = 64 * 1024


class ProxyError(Exception):
    """The peer sent something this small proxy does not handle; the connection is closed."""


@dataclass
class RequestInfo:
    """What the response parser needs to know about the request it answers."""

    method: str
    rpc_method: str | None
    last_event_id: str | None


@dataclass
class Config:
    upstream_host: str
    upstream_port: int
    cut_after_events: int
    cut_streams: int
    match: str
    on_cut: str
    log_file: str | None
    cut_after_events_max: int | None = None
    cut_heads_every: int = 0
    rng: random.Random | None = None

    def cut_point(self) -> int:
        """Where the next matching stream is cut: fixed, or drawn from K..M."""
        if self.rng is None or self.cut_after_events_max is None:
            return self.cut_after_events
        return self.rng.randint(self.cut_after_events, self.cut_after_events_max)


@dataclass
class State:
    """Proxy-wide counters; the event loop is single-threaded, so plain ints suffice."""

    cuts_done: int = 0
    tool_posts: int = 0
    heads_cut: int = 0
    sse_streams_seen: int = 0
    connections: set[asyncio.Task] = field(default_factory=set)
    log: object = None

    def note(self, line: str) -> None:
        if self.log is not None:
            self.log.write(line + "\n")
            self.log.flush()


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def split_host_port(text: str) -> tuple[str, int]:
    text = text.removeprefix("http://").split("/", 1)[0]
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


async def read_head(reader: asyncio.StreamReader) -> bytes | None:
    """One HTTP head including the blank line; None on a clean EOF before any byte."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if not e.partial:
            return None
        raise ProxyError("connection closed inside a head") from e
    except asyncio.LimitOverrunError as e:
        raise ProxyError("head too large") from e
    return head


def parse_headers(head: bytes) -> tuple[str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise ProxyError(f"bad header line {line!r}")
        key = name.strip().lower()
        headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
    return lines[0], headers


def rewrite_host(head: bytes, host: str) -> bytes:
    """The request head with its Host header replaced by `host`."""
    lines = head.split(b"\r\n")
    out = [line for line in lines if not line.lower().startswith(b"host:")]
    out.insert(1, b"Host: " + host.encode())
    return b"\r\n".join(out)


async def read_chunked(reader: asyncio.StreamReader):
    """Yield the decoded pieces of a chunked body; the trailer is consumed and dropped."""
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass
            return
        data = await reader.readexactly(size)
        await reader.readexactly(2)
        yield data


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class SseSplitter:
    """Splits a byte stream into complete SSE events (WHATWG: lines end CRLF, LF or CR)."""

    def __init__(self) -> None:
        self.buf = b""

    def feed(self, data: bytes) -> list[tuple[bytes, str | None, bool]]:
        """Return (raw bytes of the event, its data field or None, has_id) per complete event."""
        self.buf += data
        events = []
        pos = 0
        start = 0
        data_lines: list[str] = []
        has_data = False
        has_id = False
        buf = self.buf
        while True:
            nl = self._line_end(buf, pos)
            if nl is None:
                break
            line_end, next_pos = nl
            line = buf[pos:line_end]
            pos = next_pos
            if line == b"":
                events.append((buf[start:pos], "\n".join(data_lines) if has_data else None, has_id))
                start = pos
                data_lines, has_data, has_id = [], False, False
                continue
            name, _, value = line.partition(b":")
            if value.startswith(b" "):
                value = value[1:]
            if name == b"data":
                has_data = True
                data_lines.append(value.decode("utf-8", "replace"))
            elif name == b"id":
                has_id = True
        self.buf = buf[start:]
        return events

    @staticmethod
    def _line_end(buf: bytes, pos: int) -> tuple[int, int] | None:
        lf = buf.find(b"\n", pos)
        cr = buf.find(b"\r", pos)
        if cr != -1 and (lf == -1 or cr < lf):
            if cr + 1 == len(buf):
                return None  # a CR at the end may be the first half of CRLF
            return (cr, cr + 2) if buf[cr + 1 : cr + 2] == b"\n" else (cr, cr + 1)
        if lf != -1:
            return lf, lf + 1
        return None


class Connection:
    """One client connection and its upstream connection."""

    def __init__(self, cfg: Config, state: State, cr, cw, ur, uw, conn_no: int) -> None:
        self.cfg, self.state = cfg, state
        self.cr, self.cw, self.ur, self.uw = cr, cw, ur, uw
        self.conn_no = conn_no
        self.pending: asyncio.Queue[RequestInfo] = asyncio.Queue()
        self.cut = False

    async def run(self) -> None:
        up = asyncio.create_task(self.requests())
        down = asyncio.create_task(self.responses())
        try:
            await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
            if self.cut and self.cfg.on_cut != "close" and not down.done():
                await down  # keep the server side open (drain/stall) until the server ends it
        finally:
            for t in (up, down):
                t.cancel()
            for w in (self.cw, self.uw):
                w.close()

    async def requests(self) -> None:
        """Client → server: forward each request, remembering what it asked for."""
        try:
            while True:
                head = await read_head(self.cr)
                if head is None:
                    return
                start, headers = parse_headers(head)
                method = start.split(" ", 1)[0]
                body = b""
                # Like nginx's default (proxy_set_header Host $proxy_host): the upstream sees
                # its own address as Host, which tidemark checks, port included.
                self.uw.write(rewrite_host(head, f"{self.cfg.upstream_host}:{self.cfg.upstream_port}"))
                if headers.get("transfer-encoding", "").lower() == "chunked":
                    async for piece in read_chunked(self.cr):
                        body += piece
                        self.uw.write(chunk(piece))
                    self.uw.write(b"0\r\n\r\n")
                elif "content-length" in headers:
                    body = await self.cr.readexactly(int(headers["content-length"]))
                    self.uw.write(body)
                await self.uw.drain()
                rpc = None
                if body:
                    try:
                        msg = json.loads(body)
                        rpc = msg.get("method") if isinstance(msg, dict) else "(batch)"
                    except ValueError:
                        rpc = "(invalid json)"
                info = RequestInfo(method, rpc, headers.get("last-event-id"))
                key = headers.get("idempotency-key")
                self.state.note(
                    f"conn={self.conn_no} > {method} rpc={rpc} last-event-id={info.last_event_id} key={key}"
                )
                await self.pending.put(info)
        except (ProxyError, asyncio.IncompleteReadError, ConnectionError) as e:
            self.state.note(f"conn={self.conn_no} request side ended: {e!r}")

    async def responses(self) -> None:
        """Server → client: forward each response, cutting a matching SSE stream."""
        try:
            while True:
                head = await read_head(self.ur)
                if head is None:
                    return
                status_line, headers = parse_headers(head)
                status = int(status_line.split(" ")[1])
                info = self.pending.get_nowait() if not self.pending.empty() else RequestInfo("?", None, None)
                if self.cut_head(info):
                    return
                self.cw.write(head)
                ctype = headers.get("content-type", "").lower()
                self.state.note(f"conn={self.conn_no} < {status} {ctype} for {info.method} rpc={info.rpc_method}")
                if status < 200 or status in (204, 304) or info.method == "HEAD":
                    await self.cw.drain()
                    continue
                if ctype.startswith("text/event-stream"):
                    await self.forward_sse(headers, info)
                    if self.cut:
                        return
                elif headers.get("transfer-encoding", "").lower() == "chunked":
                    async for piece in read_chunked(self.ur):
                        self.cw.write(chunk(piece))
                        await self.cw.drain()
                    self.cw.write(b"0\r\n\r\n")
                elif "content-length" in headers:
                    self.cw.write(await self.ur.readexactly(int(headers["content-length"])))
                else:
                    while data := await self.ur.read(READ_BYTES):  # delimited by close
                        self.cw.write(data)
                        await self.cw.drain()
                    return
                await self.cw.drain()
        except (ProxyError, asyncio.IncompleteReadError, ConnectionError) as e:
            self.state.note(f"conn={self.conn_no} response side ended: {e!r}")

    def cut_head(self, info: RequestInfo) -> bool:
        """Every --cut-heads-every'th tools/call POST: close the client side before the head."""
        if self.cfg.cut_heads_every <= 0 or info.method != "POST" or info.rpc_method != "tools/call":
            return False
        self.state.tool_posts += 1
        if self.state.tool_posts % self.cfg.cut_heads_every:
            return False
        self.state.heads_cut += 1
        line = f"cut_proxy cut head of tools/call post={self.state.tool_posts} heads_cut={self.state.heads_cut}"
        print(line, flush=True)
        self.state.note(line)
        self.cw.transport.abort()
        self.uw.close()
        return True

    def matches(self, info: RequestInfo, event_data: str | None) -> bool:
        if self.cfg.match == "any":
            return True
        if self.cfg.match == "tools-call":
            return info.rpc_method == "tools/call" or info.last_event_id is not None
        return event_data is not None and '"notifications/progress"' in event_data

    async def forward_sse(self, headers: dict[str, str], info: RequestInfo) -> None:
        self.state.sse_streams_seen += 1
        stream_no = self.state.sse_streams_seen
        chunked = headers.get("transfer-encoding", "").lower() == "chunked"
        splitter = SseSplitter()
        counting = False  # this stream has matched and counts toward a cut
        messages = 0
        cut_at = self.cfg.cut_after_events

        async def body_pieces():
            if chunked:
                async for piece in read_chunked(self.ur):
                    yield piece
            elif "content-length" in headers:
                yield await self.ur.readexactly(int(headers["content-length"]))
            else:
                while data := await self.ur.read(READ_BYTES):
                    yield data

        async for piece in body_pieces():
            for raw, data, _has_id in splitter.feed(piece):
                self.cw.write(chunk(raw) if chunked else raw)
                is_message = data is not None and data.strip() != ""
                if not counting and self.state.cuts_done < self.cfg.cut_streams and self.matches(info, data):
                    counting = True
                    cut_at = self.cfg.cut_point()
                if counting and is_message:
                    messages += 1
                if counting and messages >= cut_at:
                    await self.cw.drain()
                    await self.do_cut(stream_no, messages, info)
                    return
            await self.cw.drain()
        if splitter.buf:
            self.cw.write(chunk(splitter.buf) if chunked else splitter.buf)
        if chunked:
            self.cw.write(b"0\r\n\r\n")

    async def do_cut(self, stream_no: int, messages: int, info: RequestInfo) -> None:
        self.cut = True
        self.state.cuts_done += 1
        line = (
            f"cut_proxy cut stream={stream_no} after_events={messages} request={info.method} "
            f"rpc={info.rpc_method} last-event-id={info.last_event_id} on_cut={self.cfg.on_cut} "
            f"cuts={self.state.cuts_done}/{self.cfg.cut_streams}"
        )
        print(line, flush=True)
        self.state.note(line)
        # Close now, without the terminating chunk: the client sees its stream end mid-body.
        self.cw.transport.abort()
        if self.cfg.on_cut == "close":
            self.uw.close()
        elif self.cfg.on_cut == "drain":
            while await self.ur.read(READ_BYTES):
                pass
        else:  # stall: hold the socket, read nothing, until the server gives up on it
            await asyncio.Event().wait()


async def serve(cfg: Config, listen_host: str, listen_port: int) -> None:
    state = State()
    if cfg.log_file:
        state.log = open(cfg.log_file, "a", buffering=1)  # noqa: SIM115, ASYNC230 - once, at startup
    conn_counter = 0

    async def on_client(cr, cw) -> None:
        nonlocal conn_counter
        conn_counter += 1
        try:
            ur, uw = await asyncio.open_connection(cfg.upstream_host, cfg.upstream_port, limit=HEAD_BYTES_MAX)
        except OSError as e:
            state.note(f"upstream connect failed: {e!r}")
            cw.close()
            return
        conn = Connection(cfg, state, cr, cw, ur, uw, conn_counter)
        task = asyncio.current_task()
        state.connections.add(task)
        try:
            await conn.run()
        except asyncio.CancelledError:
            pass  # proxy shutdown
        finally:
            state.connections.discard(task)

    server = await asyncio.start_server(on_client, listen_host, listen_port, limit=HEAD_BYTES_MAX)
    port = server.sockets[0].getsockname()[1]
    print(
        f"cut_proxy listening on http://{listen_host}:{port}/ upstream={cfg.upstream_host}:{cfg.upstream_port}",
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()
        server.close()
        tasks = list(state.connections)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    print(f"cut_proxy stopped cuts={state.cuts_done} sse_streams={state.sse_streams_seen}", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument("--upstream", required=True, type=split_host_port, help="server HOST:PORT (loopback)")
    p.add_argument("--listen", default="127.0.0.1:0", type=split_host_port)
    p.add_argument("--cut-after-events", type=int, default=3)
    p.add_argument("--cut-after-events-max", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cut-heads-every", type=int, default=0)
    p.add_argument("--cut-streams", type=int, default=1)
    p.add_argument("--match", choices=["progress", "tools-call", "any"], default="progress")
    p.add_argument("--on-cut", choices=["close", "drain", "stall"], default="close")
    p.add_argument("--log-file")
    a = p.parse_args()
    (uh, up), (lh, lp) = a.upstream, a.listen
    if not (is_loopback(uh) and is_loopback(lh)):
        p.error("--upstream and --listen must be loopback addresses")
    if a.cut_after_events < 1 or a.cut_streams < 0:
        p.error("--cut-after-events must be >= 1 and --cut-streams >= 0")
    if a.cut_after_events_max is not None and a.cut_after_events_max < a.cut_after_events:
        p.error("--cut-after-events-max must be >= --cut-after-events")
    cfg = Config(uh, up, a.cut_after_events, a.cut_streams, a.match, a.on_cut, a.log_file)
    cfg.cut_heads_every = a.cut_heads_every
    if a.cut_after_events_max is not None:
        cfg.cut_after_events_max, cfg.rng = a.cut_after_events_max, random.Random(a.seed)
    asyncio.run(serve(cfg, lh, lp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
