//! A blocking MCP client on one `std::net::TcpStream`: session setup, single calls, and the
//! step-by-step flows of `resume` and `migration` (read k events, cut, resume).
//!
//! Owns: connect/send/read of one connection with a read timeout, the `initialize` handshake.
//! Called by: `main` (setup, `get_counter`), `scenario::resume`, `scenario::migration`.
//! Never: used on the throughput path (`engine` is); it blocks a thread per connection.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{bail, Context as _};

use crate::jsonrpc::{self, Message};
use crate::sse::SseEvent;
use crate::wire::{self, Head, PostTemplate, ResponseParser, Target};

/// Read buffer size; grows for larger responses.
const READ_BUF_BYTES: usize = 64 << 10;
/// Reads a FIN close makes to empty the receive buffer before it shuts the socket down.
const FIN_DRAIN_READS_MAX: usize = 64;

/// A negotiated session.
#[derive(Clone, Debug)]
pub struct Session {
    pub id: String,
    /// The protocol version the server answered `initialize` with.
    pub version: String,
}

/// An SSE message event, owned.
#[derive(Clone, Debug)]
pub struct Event {
    pub data: Vec<u8>,
}

/// How a read ended.
#[derive(Debug)]
pub enum ReadEnd {
    /// The whole response was read. `body` is the non-SSE body.
    Complete { head: Head, body: Vec<u8> },
    /// The event callback asked to stop in the middle of the body.
    Stopped { head: Head },
}

/// The blocking stream of a `Conn`: plain, or TLS over the same socket.
enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Stream {
    fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => &s.sock,
        }
    }
    fn set_read_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        self.tcp().set_read_timeout(t)
    }
    fn set_nonblocking(&self, on: bool) -> std::io::Result<()> {
        self.tcp().set_nonblocking(on)
    }
    fn shutdown(&self, how: std::net::Shutdown) -> std::io::Result<()> {
        self.tcp().shutdown(how)
    }
}

impl std::io::Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl std::io::Write for Stream {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(data),
            Stream::Tls(s) => s.write(data),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

pub struct Conn {
    stream: Stream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    parser: ResponseParser,
}

impl Conn {
    pub fn connect(target: &Target, timeout: Duration) -> anyhow::Result<Conn> {
        let stream = TcpStream::connect_timeout(&target.addr, timeout)
            .with_context(|| format!("connecting to {}", target.addr))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        let stream = if target.tls {
            let session = crate::tls::session(target)?;
            Stream::Tls(Box::new(rustls::StreamOwned::new(session, stream)))
        } else {
            Stream::Plain(stream)
        };
        Ok(Conn {
            stream,
            buf: vec![0; READ_BUF_BYTES],
            start: 0,
            end: 0,
            parser: ResponseParser::default(),
        })
    }

    pub fn set_read_timeout(&mut self, timeout: Duration) -> anyhow::Result<()> {
        self.stream.set_read_timeout(Some(timeout)).context("setting a read timeout")
    }

    pub fn send(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        self.stream.write_all(bytes).context("sending a request")
    }

    /// Closes the connection in the middle of a response: FIN, or RST when `reset`.
    pub fn cut(self, reset: bool) {
        if reset {
            let socket = socket2::SockRef::from(self.stream.tcp());
            let _ = socket.set_linger(Some(Duration::ZERO));
        }
        drop(self);
    }

    /// Closes the connection with a FIN (`scenario::fault`): first discards whatever already
    /// arrived (a close with unread bytes makes the kernel send RST instead), then shuts both
    /// directions down. Bytes still in flight may yet draw an RST from the kernel; a cut that
    /// must reset uses `cut(true)`.
    pub fn close_fin(mut self) {
        let _ = self.stream.set_nonblocking(true);
        let mut sink = [0u8; 16 << 10];
        for _ in 0..FIN_DRAIN_READS_MAX {
            match self.stream.read(&mut sink) {
                Ok(n) if n > 0 => {}
                _ => break,
            }
        }
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        drop(self);
    }

    /// Reads one response. `on_event` sees every SSE event (priming events too, with empty
    /// data) and returns true to stop reading at once (the rest of the response is abandoned,
    /// which is how the scenarios cut a stream).
    pub fn read<F>(&mut self, mut on_event: F) -> anyhow::Result<ReadEnd>
    where
        F: FnMut(SseEvent<'_>) -> bool,
    {
        loop {
            if self.parser.is_done() {
                // A previous read stopped early and the parser already took the rest.
                return Ok(self.complete());
            }
            if self.start < self.end {
                let mut stop = false;
                let used = self.parser.advance(&self.buf[self.start..self.end], &mut |ev| {
                    if !stop {
                        stop = on_event(ev);
                    }
                })?;
                self.start += used;
                if stop {
                    return Ok(ReadEnd::Stopped { head: self.parser.head.clone() });
                }
                if self.parser.is_done() {
                    return Ok(self.complete());
                }
            }
            if self.start == self.end {
                self.start = 0;
                self.end = 0;
            } else if self.end == self.buf.len() {
                if self.start > 0 {
                    self.buf.copy_within(self.start..self.end, 0);
                    self.end -= self.start;
                    self.start = 0;
                } else {
                    self.buf.resize(self.buf.len() * 2, 0);
                }
            }
            let n = self.stream.read(&mut self.buf[self.end..]).context("reading a response")?;
            if n == 0 {
                if self.parser.finish_eof() {
                    return Ok(self.complete());
                }
                bail!("connection closed in the middle of a response");
            }
            self.end += n;
        }
    }

    fn complete(&mut self) -> ReadEnd {
        let head = std::mem::take(&mut self.parser.head);
        let body = std::mem::take(&mut self.parser.body);
        self.parser.reset();
        ReadEnd::Complete { head, body }
    }

    /// Reads one whole response, collecting its SSE message events (priming events dropped).
    pub fn read_all(&mut self) -> anyhow::Result<(Head, Vec<u8>, Vec<Event>)> {
        let mut events = Vec::new();
        let end = self.read(|ev| {
            if !ev.data.is_empty() {
                events.push(Event { data: ev.data.to_vec() });
            }
            false
        })?;
        match end {
            ReadEnd::Complete { head, body } => Ok((head, body, events)),
            ReadEnd::Stopped { .. } => unreachable!("the callback never stops"),
        }
    }

    /// POSTs a request and returns the parsed messages of its answer (JSON body or SSE events).
    pub fn call(&mut self, request: &[u8]) -> anyhow::Result<(Head, Vec<Message>)> {
        self.send(request)?;
        let (head, body, events) = self.read_all()?;
        let mut messages = Vec::new();
        if !body.is_empty() {
            messages.extend(jsonrpc::parse(&body));
        }
        for ev in &events {
            messages.extend(jsonrpc::parse(&ev.data));
        }
        Ok((head, messages))
    }
}

/// `initialize` + `notifications/initialized` on `conn`.
pub fn open_session(conn: &mut Conn, target: &Target, id: u64) -> anyhow::Result<Session> {
    let init = PostTemplate::new(
        target,
        None,
        wire::PROTOCOL_VERSION,
        &jsonrpc::initialize_body(wire::PROTOCOL_VERSION),
    );
    conn.send(&init.bytes(id))?;
    let (head, body, events) = conn.read_all()?;
    if head.status != 200 {
        bail!("initialize answered HTTP {}", head.status);
    }
    let session = head.session_id.context("initialize answer has no Mcp-Session-Id")?;
    let message = if body.is_empty() { events.last().map(|e| e.data.clone()) } else { Some(body) };
    let message = message.context("initialize answer has no message")?;
    let value: serde_json::Value =
        serde_json::from_slice(&message).context("initialize answer is not JSON")?;
    let version = value["result"]["protocolVersion"]
        .as_str()
        .with_context(|| format!("initialize answer has no protocolVersion: {value}"))?
        .to_owned();
    let initialized =
        PostTemplate::new(target, Some(&session), &version, jsonrpc::INITIALIZED_BODY);
    conn.send(&initialized.bytes(0))?;
    let (head, _, _) = conn.read_all()?;
    if !(200..300).contains(&head.status) {
        bail!("notifications/initialized answered HTTP {}", head.status);
    }
    Ok(Session { id: session, version })
}

/// Opens `count` sessions over one keep-alive connection.
pub fn open_sessions(
    target: &Target,
    count: usize,
    timeout: Duration,
) -> anyhow::Result<Vec<Session>> {
    let mut conn = Conn::connect(target, timeout)?;
    (0..count)
        .map(|i| {
            open_session(&mut conn, target, i as u64 + 1)
                .with_context(|| format!("opening session {i}"))
        })
        .collect()
}

/// Opens `count` sessions round-robin over `connections` keep-alive connections. A server
/// creates a session on the core that accepted its `initialize`'s connection, and its
/// SO_REUSEPORT listeners spread connections over the cores: sessions opened over one
/// connection all live on one core (every later connection's request moved there).
pub fn open_sessions_spread(
    target: &Target,
    count: usize,
    connections: usize,
    timeout: Duration,
) -> anyhow::Result<Vec<Session>> {
    let mut conns: Vec<Conn> = (0..connections.clamp(1, count.max(1)))
        .map(|_| Conn::connect(target, timeout))
        .collect::<Result<_, _>>()?;
    let spread = conns.len();
    (0..count)
        .map(|i| {
            open_session(&mut conns[i % spread], target, i as u64 + 1)
                .with_context(|| format!("opening session {i}"))
        })
        .collect()
}

/// How many times `get_counter` waits out an answer that says when to retry (`retryAfterMs`:
/// tidemark's open upstream circuit breaker, which a bridged fault run may leave open as it
/// ends) before it gives up.
const RETRY_AFTER_WAITS_MAX: u64 = 3;
/// The longest of those waits, whatever the answer says.
const RETRY_AFTER_WAIT_MAX: Duration = Duration::from_secs(10);
/// A retried `get_counter` takes id `id + k * RETRY_ID_STRIDE` (k = 1, 2, …): a session
/// refuses an id it has seen, and the callers' ids stay far below this.
const RETRY_ID_STRIDE: u64 = 1 << 40;

/// The demo tools' global counter (`get_counter`). An answer with `retryAfterMs` is waited out
/// and the call made again (a new id), at most `RETRY_AFTER_WAITS_MAX` times.
pub fn get_counter(
    target: &Target,
    session: &Session,
    id: u64,
    timeout: Duration,
) -> anyhow::Result<u64> {
    let mut retry = 0;
    let text = loop {
        let call_id = id + retry * RETRY_ID_STRIDE;
        match tool_answer(target, session, call_id, jsonrpc::GET_COUNTER_BODY, timeout)? {
            Ok(text) => break text,
            Err(RefusedCall { retry_after: Some(wait), .. }) if retry < RETRY_AFTER_WAITS_MAX => {
                std::thread::sleep(wait.min(RETRY_AFTER_WAIT_MAX));
                retry += 1;
            }
            Err(refused) => bail!("get_counter failed: {refused}"),
        }
    };
    text.trim().parse().with_context(|| format!("get_counter returned {text:?}"))
}

/// The JSON-RPC error that answered a call.
#[derive(Debug)]
pub struct RefusedCall {
    code: i64,
    message: String,
    /// From the error's `data.retryAfterMs`.
    retry_after: Option<Duration>,
}

impl std::fmt::Display for RefusedCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.code, self.message)
    }
}

/// The text of the result of one `tools/call` (`body`, with `{id}` for the JSON-RPC id) on a
/// new connection.
pub fn tool_text(
    target: &Target,
    session: &Session,
    id: u64,
    body: &str,
    timeout: Duration,
) -> anyhow::Result<String> {
    tool_answer(target, session, id, body, timeout)?
        .map_err(|refused| anyhow::anyhow!("tools/call failed: {refused}"))
}

/// One `tools/call` on a new connection: the text of its result, or the error that answered
/// it (the outer error: no answer at all).
fn tool_answer(
    target: &Target,
    session: &Session,
    id: u64,
    body: &str,
    timeout: Duration,
) -> anyhow::Result<Result<String, RefusedCall>> {
    let mut conn = Conn::connect(target, timeout)?;
    let request = PostTemplate::new(target, Some(&session.id), &session.version, body);
    let (head, messages) = conn.call(&request.bytes(id))?;
    for message in messages {
        match message {
            Message::Result { text, .. } => return Ok(Ok(text)),
            Message::Error { code, message, retry_after_ms, .. } => {
                let retry_after = retry_after_ms.map(Duration::from_millis);
                return Ok(Err(RefusedCall { code, message, retry_after }));
            }
            _ => {}
        }
    }
    bail!("tools/call: HTTP {} without a result", head.status)
}
