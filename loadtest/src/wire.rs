//! HTTP/1.1 on the wire, client side: request templates and an incremental response parser.
//!
//! Owns: the target URL, the bytes of every request the load generator sends (POST with
//! JSON-RPC bodies, GET with `Last-Event-ID`), response heads (httparse), body framing
//! (`Content-Length`, chunked, until-close) and hand-off of `text/event-stream` bodies to `sse`.
//! Called by: `engine` (non-blocking, pipelined) and `client` (blocking), with whatever bytes the
//! socket returned; a response may end anywhere in the buffer and the next one start right after.
//! Never: allocates per request on the hot path beyond growing reused buffers, or looks at
//! JSON beyond what `jsonrpc` offers.

use std::net::{SocketAddr, ToSocketAddrs};

use anyhow::Context as _;

use crate::sse::{SseEvent, SseParser};

/// Largest response head we accept.
const HEAD_BYTES_MAX: usize = 64 << 10;
/// Headers per response head.
const HEADERS_MAX: usize = 48;
/// Largest non-SSE body we keep (bigger ones fail the response).
const BODY_BYTES_MAX: usize = 16 << 20;
/// Longest chunk-size line.
const CHUNK_LINE_MAX: usize = 256;

/// The protocol version sent before `initialize` has told us the negotiated one.
pub const PROTOCOL_VERSION: &str = "2025-11-25";

/// The stateless revision (`modern`): no `initialize`, no session; every request names it in
/// `MCP-Protocol-Version` and in its `_meta`.
pub const MODERN_PROTOCOL_VERSION: &str = "2026-07-28";

/// Where the server is: `http://host:port/path`.
#[derive(Clone, Debug)]
pub struct Target {
    pub addr: SocketAddr,
    /// `https://`: every connection speaks TLS (`tls`, trusting `--tls-ca`).
    pub tls: bool,
    /// The host part of the authority (the TLS server name).
    pub host: String,
    /// The `Host` header value (`host:port` as written in the URL).
    pub authority: String,
    pub path: String,
    /// `Authorization: Bearer <token>` on every request, when set (`--bearer-token`: a server
    /// with `--auth-tokens`).
    pub bearer: Option<String>,
}

impl Target {
    pub fn parse(url: &str) -> anyhow::Result<Target> {
        let (rest, tls) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
            (Some(rest), _) => (rest, false),
            (_, Some(rest)) => (rest, true),
            _ => anyhow::bail!("{url}: only http:// and https:// URLs are supported"),
        };
        let (authority, path) = match rest.find('/') {
            Some(slash) => (&rest[..slash], &rest[slash..]),
            None => (rest, "/mcp"),
        };
        let with_port = if authority.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        {
            authority.to_owned()
        } else {
            format!("{authority}:{}", if tls { 443 } else { 80 })
        };
        let host = match with_port.rsplit_once(':') {
            Some((host, _)) => host.trim_start_matches('[').trim_end_matches(']').to_owned(),
            None => authority.to_owned(),
        };
        let addr = with_port
            .to_socket_addrs()
            .with_context(|| format!("resolving {authority}"))?
            .next()
            .with_context(|| format!("{authority} resolves to no address"))?;
        Ok(Target {
            addr,
            tls,
            host,
            authority: authority.to_owned(),
            path: path.to_owned(),
            bearer: None,
        })
    }

    /// The `Host` value and, with a bearer token, the `Authorization` line after it: what
    /// every request writes after `Host: `.
    pub fn host_lines(&self) -> String {
        match &self.bearer {
            None => self.authority.clone(),
            Some(token) => format!("{}\r\nAuthorization: Bearer {token}", self.authority),
        }
    }
}

/// Appends the decimal digits of `n`.
pub fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

fn digits_u64(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |l| l as usize + 1)
}

/// A POST whose JSON body contains the JSON-RPC id (and maybe the progress token) at fixed
/// places: `parts[0] id parts[1] id parts[2] …`. Built once per session, written per request.
#[derive(Clone, Debug)]
pub struct PostTemplate {
    /// Everything up to and including `Content-Length: `.
    head: Vec<u8>,
    parts: Vec<Vec<u8>>,
}

impl PostTemplate {
    /// `body` uses `{id}` where the request id goes.
    pub fn new(target: &Target, session: Option<&str>, version: &str, body: &str) -> PostTemplate {
        match session {
            Some(session) => PostTemplate::with_headers(
                target,
                &[("Mcp-Session-Id", session), ("MCP-Protocol-Version", version)],
                body,
            ),
            None => PostTemplate::with_headers(target, &[], body),
        }
    }

    /// A POST with `headers` after Content-Type and Accept (no session unless one is among
    /// them): the stateless requests of `modern` carry `MCP-Protocol-Version`, `Mcp-Method` and
    /// `Mcp-Name` instead of a session id. `body` uses `{id}` where the request id goes.
    pub fn with_headers(target: &Target, headers: &[(&str, &str)], body: &str) -> PostTemplate {
        let mut head = Vec::with_capacity(256);
        head.extend_from_slice(b"POST ");
        head.extend_from_slice(target.path.as_bytes());
        head.extend_from_slice(b" HTTP/1.1\r\nHost: ");
        head.extend_from_slice(target.host_lines().as_bytes());
        head.extend_from_slice(
            b"\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n",
        );
        for (name, value) in headers {
            head.extend_from_slice(name.as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(value.as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(b"Content-Length: ");
        let parts = body.split("{id}").map(|p| p.as_bytes().to_vec()).collect();
        PostTemplate { head, parts }
    }

    /// Appends the whole request with `id` filled in.
    pub fn write(&self, id: u64, out: &mut Vec<u8>) {
        let literal: usize = self.parts.iter().map(Vec::len).sum();
        let body_len = literal + (self.parts.len() - 1) * digits_u64(id);
        out.extend_from_slice(&self.head);
        push_u64(out, body_len as u64);
        out.extend_from_slice(b"\r\n\r\n");
        let mut parts = self.parts.iter();
        if let Some(first) = parts.next() {
            out.extend_from_slice(first);
        }
        for part in parts {
            push_u64(out, id);
            out.extend_from_slice(part);
        }
    }

    /// The request as bytes (for requests sent once).
    pub fn bytes(&self, id: u64) -> Vec<u8> {
        let mut out = Vec::new();
        self.write(id, &mut out);
        out
    }
}

/// A POST of `body` on a session with extra headers (e.g. `Idempotency-Key`): for requests
/// built once and sent a few times (`scenario::fault`), not for the hot path.
pub fn post_request(
    target: &Target,
    session: &str,
    version: &str,
    body: &[u8],
    extra_headers: &[(&str, &str)],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(320 + body.len());
    out.extend_from_slice(b"POST ");
    out.extend_from_slice(target.path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(target.host_lines().as_bytes());
    out.extend_from_slice(
        b"\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n",
    );
    out.extend_from_slice(b"Mcp-Session-Id: ");
    out.extend_from_slice(session.as_bytes());
    out.extend_from_slice(b"\r\nMCP-Protocol-Version: ");
    out.extend_from_slice(version.as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in extra_headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Content-Length: ");
    push_u64(&mut out, body.len() as u64);
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(body);
    out
}

/// `GET` of the session's stream, resuming after `last_event_id` when given.
pub fn get_request(
    target: &Target,
    session: &str,
    version: &str,
    last_event_id: Option<&str>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"GET ");
    out.extend_from_slice(target.path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(target.host_lines().as_bytes());
    out.extend_from_slice(b"\r\nAccept: text/event-stream\r\nMcp-Session-Id: ");
    out.extend_from_slice(session.as_bytes());
    out.extend_from_slice(b"\r\nMCP-Protocol-Version: ");
    out.extend_from_slice(version.as_bytes());
    if let Some(id) = last_event_id {
        out.extend_from_slice(b"\r\nLast-Event-ID: ");
        out.extend_from_slice(id.as_bytes());
    }
    out.extend_from_slice(b"\r\n\r\n");
    out
}

/// What the body of a response is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BodyKind {
    #[default]
    Empty,
    Json,
    Sse,
    Other,
}

/// The parts of a response head the scenarios look at.
#[derive(Clone, Debug, Default)]
pub struct Head {
    pub status: u16,
    pub kind: BodyKind,
    pub session_id: Option<String>,
    /// `Last-Event-ID` on a response: the server's resume hint (CONTRACT §4, 409).
    pub last_event_id: Option<String>,
    /// `Mcp-Stream-Resumable: true`.
    pub resumable: bool,
    /// `Connection: close`, or a body delimited by the end of the connection.
    pub close: bool,
    pub chunked: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chunk {
    Size,
    Data(u64),
    DataEnd,
    Trailer,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Framing {
    Length(u64),
    Chunked(Chunk),
    UntilClose,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Head,
    Body(Framing),
    Done,
}

/// Why a response could not be read; the connection is closed after any of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    BadHead,
    HeadTooLarge,
    BadChunk,
    BodyTooLarge,
    SseLineTooLong,
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WireError::BadHead => "malformed response head",
            WireError::HeadTooLarge => "response head too large",
            WireError::BadChunk => "malformed chunked framing",
            WireError::BodyTooLarge => "response body too large",
            WireError::SseLineTooLong => "SSE line too long",
        })
    }
}

impl std::error::Error for WireError {}

/// Reads one response after another from a byte stream.
#[derive(Debug)]
pub struct ResponseParser {
    state: State,
    pub head: Head,
    /// The body of a non-SSE response (SSE bodies go to the sink event by event).
    pub body: Vec<u8>,
    pub sse: SseParser,
}

impl Default for ResponseParser {
    fn default() -> Self {
        ResponseParser {
            state: State::Head,
            head: Head::default(),
            body: Vec::with_capacity(1024),
            sse: SseParser::default(),
        }
    }
}

impl ResponseParser {
    /// Ready for the next response on the same connection.
    pub fn reset(&mut self) {
        self.state = State::Head;
        self.head = Head::default();
        self.body.clear();
        self.sse.reset();
    }

    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Consumes bytes from `buf`; returns how many. `is_done()` tells whether a whole response
    /// was read (the rest of `buf` then belongs to the next one).
    pub fn advance<F>(&mut self, buf: &[u8], sink: &mut F) -> Result<usize, WireError>
    where
        F: FnMut(SseEvent<'_>),
    {
        let mut used = 0;
        loop {
            match self.state {
                State::Done => return Ok(used),
                State::Head => {
                    let n = self.parse_head(&buf[used..])?;
                    if n == 0 {
                        return Ok(used);
                    }
                    used += n;
                }
                State::Body(framing) => {
                    let (n, next) = self.body_step(framing, &buf[used..], sink)?;
                    used += n;
                    self.state = next;
                    if n == 0 && next == State::Body(framing) {
                        return Ok(used);
                    }
                }
            }
        }
    }

    /// The connection ended: completes an until-close body, or reports a truncated response.
    pub fn finish_eof(&mut self) -> bool {
        if self.state == State::Body(Framing::UntilClose) {
            self.state = State::Done;
            return true;
        }
        self.state == State::Done
    }

    fn parse_head(&mut self, buf: &[u8]) -> Result<usize, WireError> {
        let mut headers = [httparse::EMPTY_HEADER; HEADERS_MAX];
        let mut response = httparse::Response::new(&mut headers);
        let n = match response.parse(buf) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) if buf.len() > HEAD_BYTES_MAX => {
                return Err(WireError::HeadTooLarge)
            }
            Ok(httparse::Status::Partial) => return Ok(0),
            Err(_) => return Err(WireError::BadHead),
        };
        let status = response.code.ok_or(WireError::BadHead)?;
        if (100..200).contains(&status) {
            return Ok(n); // 100 Continue and friends: the real head follows
        }
        let mut head = Head { status, ..Head::default() };
        let mut length = None;
        for header in response.headers.iter() {
            let name = header.name.as_bytes();
            let value = header.value;
            if name.eq_ignore_ascii_case(b"content-length") {
                let text = std::str::from_utf8(value).map_err(|_| WireError::BadHead)?;
                length = Some(text.trim().parse::<u64>().map_err(|_| WireError::BadHead)?);
            } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                head.chunked = ends_with_ignore_case(value, b"chunked");
            } else if name.eq_ignore_ascii_case(b"content-type") {
                head.kind = if starts_with_ignore_case(value, b"text/event-stream") {
                    BodyKind::Sse
                } else if starts_with_ignore_case(value, b"application/json") {
                    BodyKind::Json
                } else {
                    BodyKind::Other
                };
            } else if name.eq_ignore_ascii_case(b"mcp-session-id") {
                head.session_id = Some(String::from_utf8_lossy(value).into_owned());
            } else if name.eq_ignore_ascii_case(b"last-event-id") {
                head.last_event_id = Some(String::from_utf8_lossy(value).into_owned());
            } else if name.eq_ignore_ascii_case(b"mcp-stream-resumable") {
                head.resumable = value.eq_ignore_ascii_case(b"true");
            } else if name.eq_ignore_ascii_case(b"connection") {
                head.close = value.eq_ignore_ascii_case(b"close");
            }
        }
        let no_body = status == 204 || status == 304;
        self.state = if no_body {
            State::Done
        } else if head.chunked {
            State::Body(Framing::Chunked(Chunk::Size))
        } else if let Some(length) = length {
            if length == 0 {
                State::Done
            } else {
                State::Body(Framing::Length(length))
            }
        } else {
            head.close = true;
            State::Body(Framing::UntilClose)
        };
        if no_body || length == Some(0) && !head.chunked {
            head.kind = BodyKind::Empty;
        }
        self.head = head;
        Ok(n)
    }

    fn body_step<F>(
        &mut self,
        framing: Framing,
        buf: &[u8],
        sink: &mut F,
    ) -> Result<(usize, State), WireError>
    where
        F: FnMut(SseEvent<'_>),
    {
        match framing {
            Framing::Length(left) => {
                let take = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                self.body_bytes(&buf[..take], sink)?;
                let left = left - take as u64;
                let next = if left == 0 { State::Done } else { State::Body(Framing::Length(left)) };
                Ok((take, next))
            }
            Framing::UntilClose => {
                self.body_bytes(buf, sink)?;
                Ok((buf.len(), State::Body(framing)))
            }
            Framing::Chunked(chunk) => {
                let (n, next) = self.chunk_step(chunk, buf, sink)?;
                Ok((n, next.map_or(State::Done, |c| State::Body(Framing::Chunked(c)))))
            }
        }
    }

    /// One step of the chunked decoder; `None` as the next state means the body is complete.
    fn chunk_step<F>(
        &mut self,
        chunk: Chunk,
        buf: &[u8],
        sink: &mut F,
    ) -> Result<(usize, Option<Chunk>), WireError>
    where
        F: FnMut(SseEvent<'_>),
    {
        match chunk {
            Chunk::Size => {
                let Some(nl) = memchr::memchr(b'\n', buf) else {
                    if buf.len() > CHUNK_LINE_MAX {
                        return Err(WireError::BadChunk);
                    }
                    return Ok((0, Some(chunk)));
                };
                let line = &buf[..nl];
                let hex_end =
                    line.iter().position(|b| !b.is_ascii_hexdigit()).unwrap_or(line.len());
                if hex_end == 0 || hex_end > 15 {
                    return Err(WireError::BadChunk);
                }
                let text =
                    std::str::from_utf8(&line[..hex_end]).map_err(|_| WireError::BadChunk)?;
                let size = u64::from_str_radix(text, 16).map_err(|_| WireError::BadChunk)?;
                let next = if size == 0 { Chunk::Trailer } else { Chunk::Data(size) };
                Ok((nl + 1, Some(next)))
            }
            Chunk::Data(left) => {
                let take = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                self.body_bytes(&buf[..take], sink)?;
                let left = left - take as u64;
                Ok((take, Some(if left == 0 { Chunk::DataEnd } else { Chunk::Data(left) })))
            }
            Chunk::DataEnd => match buf {
                [] | [b'\r'] => Ok((0, Some(chunk))),
                [b'\r', b'\n', ..] => Ok((2, Some(Chunk::Size))),
                [b'\n', ..] => Ok((1, Some(Chunk::Size))),
                _ => Err(WireError::BadChunk),
            },
            Chunk::Trailer => {
                let Some(nl) = memchr::memchr(b'\n', buf) else {
                    if buf.len() > HEAD_BYTES_MAX {
                        return Err(WireError::BadChunk);
                    }
                    return Ok((0, Some(chunk)));
                };
                let line = &buf[..nl];
                if line.is_empty() || line == b"\r" {
                    Ok((nl + 1, None))
                } else {
                    Ok((nl + 1, Some(Chunk::Trailer)))
                }
            }
        }
    }

    fn body_bytes<F>(&mut self, bytes: &[u8], sink: &mut F) -> Result<(), WireError>
    where
        F: FnMut(SseEvent<'_>),
    {
        if self.head.kind == BodyKind::Sse {
            return self.sse.feed(bytes, sink).map_err(|_| WireError::SseLineTooLong);
        }
        if self.body.len() + bytes.len() > BODY_BYTES_MAX {
            return Err(WireError::BodyTooLarge);
        }
        self.body.extend_from_slice(bytes);
        Ok(())
    }
}

fn starts_with_ignore_case(value: &[u8], prefix: &[u8]) -> bool {
    value.len() >= prefix.len() && value[..prefix.len()].eq_ignore_ascii_case(prefix)
}

fn ends_with_ignore_case(value: &[u8], suffix: &[u8]) -> bool {
    value.len() >= suffix.len() && value[value.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_name_their_scheme_host_and_port() {
        let t = Target::parse("https://127.0.0.1:8443/mcp").expect("parse");
        assert!(t.tls);
        assert_eq!((t.host.as_str(), t.addr.port(), t.path.as_str()), ("127.0.0.1", 8443, "/mcp"));
        let t = Target::parse("https://localhost/x").expect("parse");
        assert_eq!((t.tls, t.host.as_str(), t.addr.port()), (true, "localhost", 443));
        let t = Target::parse("http://[::1]:9000/mcp").expect("parse");
        assert_eq!((t.tls, t.host.as_str(), t.addr.port()), (false, "::1", 9000));
        assert!(Target::parse("ftp://x/").is_err());
    }

    /// Feeds `bytes` split at every position and returns (status, kind, events, body) of each
    /// response, so framing bugs at boundaries show up.
    fn parse_all(bytes: &[u8]) -> Vec<(u16, BodyKind, Vec<String>, String)> {
        let mut out = Vec::new();
        let mut parser = ResponseParser::default();
        let mut events = Vec::new();
        let mut buf = Vec::new();
        for &b in bytes {
            buf.push(b);
            loop {
                let used = parser
                    .advance(&buf, &mut |ev: SseEvent<'_>| {
                        events.push(String::from_utf8_lossy(ev.data).into_owned())
                    })
                    .unwrap();
                buf.drain(..used);
                if !parser.is_done() {
                    break;
                }
                out.push((
                    parser.head.status,
                    parser.head.kind,
                    std::mem::take(&mut events),
                    String::from_utf8_lossy(&parser.body).into_owned(),
                ));
                parser.reset();
            }
        }
        out
    }

    #[test]
    fn pipelined_chunked_sse_json_and_202() {
        let sse = "id: 1\nretry: 5\ndata: \n\nid: 2\ndata: {\"id\":1}\n\n";
        let wire = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n\
             {:x}\r\n{}\r\n{:x}\r\n{}\r\n0\r\n\r\n\
             HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{{}}\
             HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n",
            10,
            &sse[..10],
            sse.len() - 10,
            &sse[10..]
        );
        let got = parse_all(wire.as_bytes());
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].0, 200);
        assert_eq!(got[0].1, BodyKind::Sse);
        assert_eq!(got[0].2, vec![String::new(), "{\"id\":1}".to_owned()]);
        assert_eq!((got[1].0, got[1].1, got[1].3.as_str()), (200, BodyKind::Json, "{}"));
        assert_eq!((got[2].0, got[2].1), (202, BodyKind::Empty));
    }

    #[test]
    fn template_fills_every_id_and_the_length() {
        let target = Target::parse("http://127.0.0.1:9/mcp").unwrap();
        let t = PostTemplate::new(&target, Some("s1"), "2025-11-25", "{\"id\":{id},\"t\":{id}}");
        let bytes = String::from_utf8(t.bytes(1234)).unwrap();
        assert!(bytes.starts_with("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:9\r\n"));
        assert!(bytes.contains("Mcp-Session-Id: s1\r\n"));
        assert!(bytes.ends_with("Content-Length: 20\r\n\r\n{\"id\":1234,\"t\":1234}"));
    }

    #[test]
    fn a_stateless_template_carries_its_headers_and_no_session() {
        let target = Target::parse("http://127.0.0.1:9/mcp").unwrap();
        let headers = [("MCP-Protocol-Version", MODERN_PROTOCOL_VERSION), ("Mcp-Name", "echo")];
        let t = PostTemplate::with_headers(&target, &headers, "{\"id\":{id}}");
        let bytes = String::from_utf8(t.bytes(7)).unwrap();
        assert!(bytes.contains(
            "text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Name: echo\r\n\
             Content-Length: 8\r\n\r\n{\"id\":7}"
        ));
        assert!(!bytes.to_ascii_lowercase().contains("mcp-session-id"));
        assert!(!bytes.to_ascii_lowercase().contains("connection:"), "keep-alive by default");
    }
}
