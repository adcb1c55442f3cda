//! Shared helpers for the black-box integration tests: start the real `tidemark` binary on
//! 127.0.0.1:0, speak raw HTTP/1.1 over blocking `TcpStream`s, read chunked SSE incrementally,
//! and wait on observable state (a counter, an answer, a socket) instead of the clock.
#![allow(dead_code)]

pub mod heap;
pub mod redis;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Both io drivers: every wire test runs on each (many hosts disable io_uring).
pub const DRIVERS: [&str; 2] = ["uring", "epoll"];

/// A running server; killed on drop.
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    pub path: String,
    /// The admin listener's address, when started with `--metrics-listen` (from the banner).
    pub admin: Option<SocketAddr>,
}

impl Server {
    /// Starts the binary with `--listen 127.0.0.1:0` plus `args`.
    pub fn start(args: &[&str]) -> Server {
        let mut command = Command::new(env!("CARGO_BIN_EXE_tidemark"));
        command.args(["--listen", "127.0.0.1:0"]).args(args);
        Server::spawn(command)
    }

    /// `Server::start` with the process's file-descriptor limit (RLIMIT_NOFILE) set to
    /// `nofile` first (`ulimit -n` in a shell that then execs the binary).
    pub fn start_with_nofile(nofile: u32, args: &[&str]) -> Server {
        let mut command = Command::new("sh");
        let script = format!("ulimit -n {nofile} && exec \"$0\" \"$@\"");
        command.args(["-c", &script, env!("CARGO_BIN_EXE_tidemark"), "--listen", "127.0.0.1:0"]);
        command.args(args);
        Server::spawn(command)
    }

    /// `Server::start` with `envs` added to its environment and its log (stderr, at the most
    /// verbose level: `RUST_LOG=trace`) written to `log`.
    pub fn start_logged(args: &[&str], envs: &[(&str, &str)], log: &std::path::Path) -> Server {
        let mut command = Command::new(env!("CARGO_BIN_EXE_tidemark"));
        command.args(["--listen", "127.0.0.1:0"]).args(args);
        command.env("RUST_LOG", "trace").envs(envs.iter().copied());
        command.stderr(std::fs::File::create(log).expect("log file"));
        Server::spawn(command)
    }

    /// Runs `command` (the binary, or a shell that execs it) and reads its banner; its stderr
    /// is inherited unless the command set it (a test that reads the log).
    pub fn spawn(mut command: Command) -> Server {
        // The durable tests run with either writer: `TIDEMARK_TEST_DURABLE_WRITER=core` (or
        // `thread`) adds `--durable-writer` to every node started with `--durable` that does
        // not choose its writer itself.
        if let Ok(writer) = std::env::var("TIDEMARK_TEST_DURABLE_WRITER") {
            let args: Vec<_> = command.get_args().collect();
            if args.contains(&"--durable".as_ref()) && !args.contains(&"--durable-writer".as_ref())
            {
                command.args(["--durable-writer", &writer]);
            }
        }
        let mut child = command.stdout(Stdio::piped()).spawn().expect("spawn tidemark");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).expect("read banner");
        // "tidemark listening on http://127.0.0.1:PORT/mcp driver=... threads=N tools=..."
        let url = line.split_whitespace().nth(3).unwrap_or_else(|| panic!("banner: {line:?}"));
        // `https://` when started with `--tls-cert`.
        let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://"));
        let rest = rest.expect("http(s) url");
        let slash = rest.find('/').expect("path");
        // "... metrics=http://127.0.0.1:PORT/metrics" when the admin listener is on.
        let admin =
            line.split_whitespace().find_map(|w| w.strip_prefix("metrics=http://")).map(|rest| {
                rest[..rest.find('/').expect("metrics path")].parse().expect("admin address")
            });
        let (addr, path) = (rest[..slash].parse().expect("addr"), rest[slash..].to_owned());
        Server { child, addr, path, admin }
    }

    /// Sends `kill -SIG` to the server (through sh: `kill` is a shell builtin everywhere).
    pub fn signal(&self, sig: &str) {
        let status = Command::new("sh")
            .args(["-c", &format!("kill -{sig} {}", self.child.id())])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{sig}");
    }

    /// The server's open file descriptors now (`/proc/PID/fd`).
    pub fn open_fds(&self) -> usize {
        let dir = format!("/proc/{}/fd", self.pid());
        std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir}: {e}")).count()
    }

    /// The exit status, if the process ends within `bound`.
    pub fn exit_within(&mut self, bound: Duration) -> Option<ExitStatus> {
        exit_within(&mut self.child, bound)
    }

    /// Starts on a given driver (`uring` or `epoll`) with more args.
    pub fn on(driver: &str, args: &[&str]) -> Server {
        let mut all = vec!["--driver", driver];
        all.extend_from_slice(args);
        Server::start(&all)
    }

    /// `Server::on` with the admin listener on 127.0.0.1:0 (the banner names its address), so
    /// a test can wait on the server's counters (`wait_closed`, `wait_metric`).
    pub fn with_admin(driver: &str, args: &[&str]) -> Server {
        let mut all = vec!["--metrics-listen", "127.0.0.1:0"];
        all.extend_from_slice(args);
        Server::on(driver, &all)
    }

    /// The admin listener's address as `scrape` takes it; panics when the server was started
    /// without `--metrics-listen`.
    pub fn metrics(&self) -> String {
        self.admin.expect("start the server with --metrics-listen (Server::with_admin)").to_string()
    }

    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        s.set_nodelay(true).expect("nodelay");
        s
    }

    /// Host header value for this server.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A whole HTTP response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON (JSON responses only).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("json body: {e}: {}", self.text()))
    }

    /// All SSE events of a complete SSE body.
    pub fn events(&self) -> Vec<Event> {
        parse_events(&self.body)
    }
}

/// One SSE event.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub id: Option<String>,
    pub retry: Option<u64>,
    pub data: String,
}

impl Event {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.data)
            .unwrap_or_else(|e| panic!("event json: {e}: {}", self.data))
    }
    pub fn is_priming(&self) -> bool {
        self.data.is_empty()
    }
}

pub fn parse_events(body: &[u8]) -> Vec<Event> {
    let text = String::from_utf8_lossy(body);
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        if block.trim().is_empty() || block.starts_with(':') {
            continue;
        }
        let mut ev = Event { id: None, retry: None, data: String::new() };
        let mut datas = Vec::new();
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("id: ") {
                ev.id = Some(v.to_owned());
            } else if let Some(v) = line.strip_prefix("retry: ") {
                ev.retry = v.parse().ok();
            } else if let Some(v) = line.strip_prefix("data: ") {
                datas.push(v.to_owned());
            } else if line == "data:" {
                datas.push(String::new());
            }
        }
        ev.data = datas.join("\n");
        out.push(ev);
    }
    out
}

/// Writes a raw request.
pub fn send(stream: &mut TcpStream, raw: &[u8]) {
    stream.write_all(raw).expect("write request");
}

/// Builds a request: method, path, headers, body (Content-Length added when body is Some).
pub fn request(
    method: &str,
    path: &str,
    host: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Vec<u8> {
    let mut r = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\n");
    for (n, v) in headers {
        r.push_str(&format!("{n}: {v}\r\n"));
    }
    if let Some(b) = body {
        r.push_str(&format!("Content-Length: {}\r\n", b.len()));
    }
    r.push_str("\r\n");
    let mut bytes = r.into_bytes();
    if let Some(b) = body {
        bytes.extend_from_slice(b.as_bytes());
    }
    bytes
}

/// The headers every MCP POST carries.
pub const POST_HEADERS: [(&str, &str); 2] =
    [("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")];

/// Reads one whole response (Content-Length or chunked body).
pub fn read_response(stream: &mut TcpStream) -> Response {
    read_responses(stream, 1).pop().expect("one response")
}

/// One request, one response, on a fresh connection.
pub fn exchange(server: &Server, raw: &[u8]) -> Response {
    let mut s = server.connect();
    send(&mut s, raw);
    read_response(&mut s)
}

/// POST a JSON-RPC body with the standard headers plus `extra`.
pub fn post(server: &Server, extra: &[(&str, &str)], body: &str) -> Response {
    let mut h: Vec<(&str, &str)> = POST_HEADERS.to_vec();
    h.extend_from_slice(extra);
    exchange(server, &request("POST", &server.path, &server.host(), &h, Some(body)))
}

pub const INIT: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

/// initialize + notifications/initialized; returns the session id.
pub fn open_session(server: &Server) -> String {
    open_session_at(server, "2025-11-25")
}

/// initialize at `version` (which must be echoed) + notifications/initialized.
pub fn open_session_at(server: &Server, version: &str) -> String {
    let r = post(server, &[], &INIT.replace("2025-11-25", version));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["result"]["protocolVersion"], version);
    let sid = r.header("Mcp-Session-Id").expect("session id").to_owned();
    let n = post(
        server,
        &[("Mcp-Session-Id", &sid)],
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    assert_eq!(n.status, 202);
    sid
}

/// The session's `tools/list` (one page): its tools.
pub fn list_tools(server: &Server, sid: &str) -> Vec<serde_json::Value> {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let list = post(server, &[("Mcp-Session-Id", sid)], body);
    list.json()["result"]["tools"].as_array().expect("tools").clone()
}

/// A `tools/call` body.
pub fn call(id: u64, tool: &str, args: &str, progress: bool) -> String {
    let meta =
        if progress { format!(r#","_meta":{{"progressToken":{id}}}"#) } else { String::new() };
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{args}{meta}}}}}"#
    )
}

/// An SSE response read event by event, so a test can stop (and drop the connection) after k.
pub struct SseStream {
    reader: ByteReader<TcpStream>,
    pending: Vec<u8>,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    done: bool,
}

/// `reader.read(buf)`, again when a signal interrupted it. A socket read with a timeout
/// (`SO_RCVTIMEO`, which most test reads set) fails with EINTR rather than restart
/// (signal(7)), and the test process does take signals (which one was not pinned down): one
/// such read once ended `Wire::read_until` as if the server had closed, failing the drain test
/// 1 time in ~45 under load.
pub fn read_retrying<R: Read + ?Sized>(reader: &mut R, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match reader.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

struct ByteReader<S: Read> {
    stream: S,
    buf: Vec<u8>,
}

impl<S: Read> ByteReader<S> {
    fn fill(&mut self) -> bool {
        let mut tmp = [0u8; 8192];
        match read_retrying(&mut self.stream, &mut tmp) {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&tmp[..n]);
                true
            }
        }
    }
    fn line(&mut self) -> Option<String> {
        loop {
            if let Some(p) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.buf[..p]).into_owned();
                self.buf.drain(..p + 2);
                return Some(line);
            }
            if !self.fill() {
                return None;
            }
        }
    }
    fn exact(&mut self, n: usize) -> Vec<u8> {
        while self.buf.len() < n {
            if !self.fill() {
                break;
            }
        }
        let n = n.min(self.buf.len());
        self.buf.drain(..n).collect()
    }
    fn head(&mut self) -> (u16, Vec<(String, String)>) {
        let status_line = self.line().expect("status line");
        let status =
            status_line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).expect("status");
        let mut headers = Vec::new();
        while let Some(l) = self.line() {
            if l.is_empty() {
                break;
            }
            if let Some((n, v)) = l.split_once(':') {
                headers.push((n.trim().to_owned(), v.trim().to_owned()));
            }
        }
        (status, headers)
    }
    /// The buffered bytes, which start at a chunk-size line, include the last chunk (`0`, then
    /// the empty trailer). Chunk data is SSE text, which carries no CR.
    fn holds_last_chunk(&self) -> bool {
        self.buf.starts_with(b"0\r\n\r\n") || self.buf.windows(7).any(|w| w == b"\r\n0\r\n\r\n")
    }

    /// Next chunk's payload; None at the last chunk or EOF.
    fn chunk(&mut self) -> Option<Vec<u8>> {
        let size_line = self.line()?;
        let size = usize::from_str_radix(size_line.trim(), 16).ok()?;
        if size == 0 {
            let _ = self.line();
            return None;
        }
        let data = self.exact(size);
        let _ = self.exact(2);
        Some(data)
    }
}

impl SseStream {
    /// Sends `raw` on a fresh connection and reads the response head.
    pub fn open(server: &Server, raw: &[u8]) -> SseStream {
        let mut stream = server.connect();
        send(&mut stream, raw);
        SseStream::from_stream(stream)
    }

    pub fn from_stream(stream: TcpStream) -> SseStream {
        let mut reader = ByteReader { stream, buf: Vec::new() };
        let (status, headers) = reader.head();
        SseStream { reader, pending: Vec::new(), status, headers, done: false }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The next event (comments skipped); None when the response ended.
    pub fn next_event(&mut self) -> Option<Event> {
        self.next_until(false)
    }

    /// The next event, or `None` when a comment (`:` line, e.g. a keep-alive) comes first or
    /// the response ends: with a short `--sse-keepalive-secs`, `None` says nothing else was sent
    /// in between.
    pub fn next_event_before_comment(&mut self) -> Option<Event> {
        self.next_until(true)
    }

    /// The next event; with `stop_at_comment`, `None` at a comment block instead of skipping it.
    fn next_until(&mut self, stop_at_comment: bool) -> Option<Event> {
        loop {
            if let Some(p) = self.pending.windows(2).position(|w| w == b"\n\n") {
                let block: Vec<u8> = self.pending.drain(..p + 2).collect();
                if stop_at_comment && block.starts_with(b":") {
                    return None;
                }
                if let Some(ev) = parse_events(&block).into_iter().next() {
                    return Some(ev);
                }
                continue;
            }
            if self.done {
                return None;
            }
            match self.reader.chunk() {
                Some(c) => self.pending.extend_from_slice(&c),
                None => self.done = true,
            }
        }
    }

    /// Every remaining event until the response ends.
    pub fn rest(&mut self) -> Vec<Event> {
        let mut v = Vec::new();
        while let Some(e) = self.next_event() {
            v.push(e);
        }
        v
    }

    /// True once the terminating chunk was read.
    pub fn ended(&self) -> bool {
        self.done
    }

    /// Receives the rest of the response into the connection's buffer without taking its
    /// events, until the terminating chunk arrived — the server has written the whole stream —
    /// or `bound` passed; true if it arrived. A client that dropped the connection now would
    /// hold only the events it took.
    pub fn receive_to_end(&mut self, bound: Duration) -> bool {
        let reader = &mut self.reader;
        let was = reader.stream.read_timeout().expect("read timeout");
        let deadline = Instant::now() + bound;
        let arrived = loop {
            if self.done || reader.holds_last_chunk() {
                break true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || reader.stream.set_read_timeout(Some(left)).is_err() {
                break false;
            }
            if !reader.fill() {
                break reader.holds_last_chunk();
            }
        };
        reader.stream.set_read_timeout(was).expect("read timeout");
        arrived
    }

    /// Closes the connection (the client "drops" the stream).
    pub fn cut(self) {
        let _ = self.reader.stream.shutdown(std::net::Shutdown::Both);
    }

    /// The underlying socket, for reuse after the response ended (keep-alive).
    pub fn into_stream(self) -> TcpStream {
        self.reader.stream
    }
}

/// GET + Last-Event-ID on a fresh connection.
pub fn resume(server: &Server, sid: &str, last_event_id: &str) -> SseStream {
    let raw = request(
        "GET",
        &server.path,
        &server.host(),
        &[
            ("Accept", "text/event-stream"),
            ("Mcp-Session-Id", sid),
            ("Last-Event-ID", last_event_id),
        ],
        None,
    );
    SseStream::open(server, &raw)
}

/// The session's standalone GET stream (no Last-Event-ID) on a fresh connection; asserts 200.
pub fn open_standalone(server: &Server, sid: &str) -> SseStream {
    let headers = [("Accept", "text/event-stream"), ("Mcp-Session-Id", sid)];
    let stream =
        SseStream::open(server, &request("GET", &server.path, &server.host(), &headers, None));
    assert_eq!(stream.status, 200, "the standalone GET stream");
    stream
}

/// POST a tools/call and return the open SSE stream.
pub fn call_stream(server: &Server, sid: &str, body: &str, extra: &[(&str, &str)]) -> SseStream {
    let mut h: Vec<(&str, &str)> = POST_HEADERS.to_vec();
    h.push(("Mcp-Session-Id", sid));
    h.extend_from_slice(extra);
    SseStream::open(server, &request("POST", &server.path, &server.host(), &h, Some(body)))
}

/// Reads `get_counter` through a fresh session (the counter is server-global).
pub fn counter(server: &Server) -> u64 {
    let sid = open_session(server);
    let mut s = call_stream(server, &sid, &call(99, "get_counter", "{}", false), &[]);
    let evs = s.rest();
    let last = evs.last().expect("result event").json();
    last["result"]["content"][0]["text"].as_str().expect("text").parse().expect("number")
}

// ---- Added for http_conformance / session_lifecycle / limits ----

/// Like `request`, with a body of arbitrary bytes (e.g. invalid UTF-8).
pub fn request_bytes(
    method: &str,
    path: &str,
    host: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Vec<u8> {
    let mut r = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\n");
    for (n, v) in headers {
        r.push_str(&format!("{n}: {v}\r\n"));
    }
    r.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let mut bytes = r.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// Reads `n` responses that arrive back to back (pipelining) through one buffer, so bytes of a
/// later response that came in the same read as an earlier one are kept (`read_response` drops
/// them).
pub fn read_responses(stream: &mut TcpStream, n: usize) -> Vec<Response> {
    let mut reader = ByteReader { stream, buf: Vec::new() };
    let mut out = Vec::new();
    for _ in 0..n {
        let (status, headers) = reader.head();
        let mut resp = Response { status, headers, body: Vec::new() };
        if resp.header("Transfer-Encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            while let Some(chunk) = reader.chunk() {
                resp.body.extend_from_slice(&chunk);
            }
        } else {
            let len: usize =
                resp.header("Content-Length").and_then(|v| v.parse().ok()).unwrap_or(0);
            resp.body = reader.exact(len);
        }
        out.push(resp);
    }
    out
}

/// How a connection ended when the client waited for the server to close it.
#[derive(Debug, PartialEq, Eq)]
pub enum Ending {
    /// Orderly FIN (read returned 0).
    Closed,
    /// The server reset the connection.
    Reset,
    /// Still open when the read timeout fired: the server hung on to it.
    StillOpen,
}

/// Reads everything until the server closes the connection or `bound` passes; returns the bytes
/// and how it ended. For "answered and closed, never hangs" checks.
pub fn read_until_closed(stream: &mut TcpStream, bound: Duration) -> (Vec<u8>, Ending) {
    stream.set_read_timeout(Some(bound)).expect("timeout");
    let mut all = Vec::new();
    let mut tmp = [0u8; 8192];
    loop {
        match read_retrying(stream, &mut tmp) {
            Ok(0) => return (all, Ending::Closed),
            Ok(n) => all.extend_from_slice(&tmp[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return (all, Ending::StillOpen)
            }
            Err(_) => return (all, Ending::Reset),
        }
    }
}

// ---- Helpers added for sse_resume.rs and migration.rs ----

/// Starts a server on `driver` with its admin listener on 127.0.0.1:0 (the banner names the
/// address: a port picked free beforehand could be taken by a parallel test before the server
/// binds it); returns it and the metrics address.
pub fn server_with_metrics(driver: &str, args: &[&str]) -> (Server, String) {
    let server = Server::with_admin(driver, args);
    let addr = server.metrics();
    (server, addr)
}

/// The Prometheus text of `GET /metrics` at `addr`.
pub fn scrape(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connect metrics");
    s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").expect("write metrics request");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    assert!(text.starts_with("HTTP/1.1 200"), "metrics: {text}");
    text
}

/// The value of one sample (`name` or `name{labels}`, exactly as rendered) in `scrape` text.
pub fn metric(text: &str, sample: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(sample).and_then(|rest| rest.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no sample {sample} in:\n{text}"))
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("sample {sample}: {e}"))
}

/// Splits a wire event id `<tag>-<stream>-<seq>` (hex) into its parts.
pub fn split_event_id(id: &str) -> Option<(String, u64, u64)> {
    let mut parts = id.split('-');
    let tag = parts.next().filter(|t| t.len() == 8)?.to_owned();
    let stream = u64::from_str_radix(parts.next()?, 16).ok()?;
    let seq = u64::from_str_radix(parts.next()?, 16).ok()?;
    parts.next().is_none().then_some((tag, stream, seq))
}

/// The `progress` value of a `notifications/progress` event, else `None`.
pub fn progress_of(ev: &Event) -> Option<u64> {
    if ev.is_priming() {
        return None;
    }
    let v = ev.json();
    if v["method"] != "notifications/progress" {
        return None;
    }
    v["params"]["progress"].as_f64().map(|p| p as u64)
}

/// Parses a whole response from raw bytes; `None` while incomplete (for non-blocking readers).
pub fn parse_complete(bytes: &[u8]) -> Option<Response> {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&bytes[..end]);
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let mut resp = Response { status, headers, body: Vec::new() };
    let mut rest = &bytes[end + 4..];
    if resp.header("Transfer-Encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
            let size_text = String::from_utf8_lossy(&rest[..line_end]).into_owned();
            let size = usize::from_str_radix(size_text.trim(), 16).ok()?;
            rest = &rest[line_end + 2..];
            if size == 0 {
                return (rest.len() >= 2).then_some(resp);
            }
            if rest.len() < size + 2 {
                return None;
            }
            resp.body.extend_from_slice(&rest[..size]);
            rest = &rest[size + 2..];
        }
    }
    let n: usize = resp.header("Content-Length").and_then(|v| v.parse().ok()).unwrap_or(0);
    (rest.len() >= n).then(|| {
        resp.body = rest[..n].to_vec();
        resp
    })
}

/// The message events (priming events, which carry no message, left out).
pub fn messages(evs: &[Event]) -> Vec<Event> {
    evs.iter().filter(|e| !e.is_priming()).cloned().collect()
}

/// Reads the priming event of a fresh call stream and checks it; returns its id.
pub fn read_priming(s: &mut SseStream, ctx: &str) -> String {
    assert_eq!(s.status, 200, "{ctx}");
    let ev = s.next_event().unwrap_or_else(|| panic!("{ctx}: no priming event"));
    assert!(ev.is_priming(), "{ctx}: first event is not priming: {ev:?}");
    ev.id.unwrap_or_else(|| panic!("{ctx}: priming without id"))
}

/// Reads `k` message events, which must be progress 1..=k; returns the last id held.
pub fn read_progress(s: &mut SseStream, k: u64, mut last: String, ctx: &str) -> String {
    let mut got = 0;
    while got < k {
        let ev = s.next_event().unwrap_or_else(|| panic!("{ctx}: stream ended after {got}"));
        if ev.is_priming() {
            continue;
        }
        got += 1;
        assert_eq!(progress_of(&ev), Some(got), "{ctx}: {ev:?}");
        last = ev.id.unwrap_or_else(|| panic!("{ctx}: event without id"));
    }
    last
}

/// Asserts `evs` carry exactly progress `from..=steps` and then the result of request `id`,
/// each once, in order, with ids of the stream of `cursor` strictly after it. Returns the
/// result's text.
pub fn assert_rest(
    evs: &[Event],
    cursor: &str,
    from: u64,
    steps: u64,
    id: u64,
    ctx: &str,
) -> String {
    let msgs = messages(evs);
    let (tag, stream, mut seq) = split_event_id(cursor).expect("cursor id");
    let want: Vec<u64> = (from..=steps).collect();
    let got: Vec<u64> = msgs.iter().filter_map(progress_of).collect();
    assert_eq!(got, want, "{ctx}: progress values of {msgs:#?}");
    assert_eq!(msgs.len(), want.len() + 1, "{ctx}: exactly the rest and the result: {msgs:#?}");
    for ev in &msgs {
        let evid = ev.id.as_deref().unwrap_or_else(|| panic!("{ctx}: event without id"));
        let (t, st, sq) = split_event_id(evid).unwrap_or_else(|| panic!("{ctx}: id {evid}"));
        assert_eq!((t.as_str(), st), (tag.as_str(), stream), "{ctx}: id of another stream");
        assert!(sq > seq, "{ctx}: ids not strictly after the cursor / increasing: {evid}");
        seq = sq;
    }
    let last = msgs.last().expect("result").json();
    assert_eq!(last["id"], id, "{ctx}: result is the last message: {last}");
    last["result"]["content"][0]["text"].as_str().expect("result text").to_owned()
}

// ---- Helpers added for oversize.rs and pipelining.rs ----

/// Parses the first whole response at the start of `bytes`; returns it and how many bytes it
/// took, `None` while incomplete. `parse_complete` for responses that arrive back to back.
pub fn parse_next(bytes: &[u8]) -> Option<(Response, usize)> {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&bytes[..end]);
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let mut resp = Response { status, headers, body: Vec::new() };
    let mut at = end + 4;
    if resp.header("Transfer-Encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            let rest = &bytes[at..];
            let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
            let size_text = String::from_utf8_lossy(&rest[..line_end]).into_owned();
            let size = usize::from_str_radix(size_text.trim(), 16).ok()?;
            at += line_end + 2;
            if bytes.len() < at + size + 2 {
                return None;
            }
            resp.body.extend_from_slice(&bytes[at..at + size]);
            at += size + 2;
            if size == 0 {
                return Some((resp, at));
            }
        }
    }
    let n: usize = resp.header("Content-Length").and_then(|v| v.parse().ok()).unwrap_or(0);
    (bytes.len() >= at + n).then(|| {
        resp.body = bytes[at..at + n].to_vec();
        (resp, at + n)
    })
}

/// A connection whose bytes are read into one buffer against a deadline, so a response that
/// never completes fails the test (showing what did arrive) instead of blocking it, and bytes
/// of a later response that came with an earlier one are kept.
pub struct Wire {
    pub stream: TcpStream,
    pub buf: Vec<u8>,
    /// The peer closed (or reset) the connection.
    pub closed: bool,
}

impl Wire {
    pub fn new(stream: TcpStream) -> Wire {
        Wire { stream, buf: Vec::new(), closed: false }
    }

    /// Reads until `done(&buf)` holds; false if `bound` passed or the peer closed first.
    pub fn read_until(&mut self, bound: Duration, done: impl Fn(&[u8]) -> bool) -> bool {
        let deadline = std::time::Instant::now() + bound;
        let mut tmp = [0u8; 16384];
        while !done(&self.buf) {
            if self.closed {
                return false;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            self.stream.set_read_timeout(Some(left)).expect("timeout");
            match read_retrying(&mut self.stream, &mut tmp) {
                Ok(0) => self.closed = true,
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => self.closed = true,
            }
        }
        true
    }

    /// The next whole response, within `bound`; panics naming `ctx` with the bytes that did
    /// arrive (a hang or an early close fails here).
    pub fn response(&mut self, bound: Duration, ctx: &str) -> Response {
        if !self.read_until(bound, |b| parse_next(b).is_some()) {
            let how = if self.closed { "the server closed" } else { "still open" };
            panic!(
                "{ctx}: no whole response within {bound:?} ({how}); received {} bytes: {:?}",
                self.buf.len(),
                String::from_utf8_lossy(&self.buf)
            );
        }
        let (resp, used) = parse_next(&self.buf).expect("complete");
        self.buf.drain(..used);
        resp
    }
}

// ---- Helper added for memory.rs ----

impl Server {
    /// The server process's id (e.g. to read `/proc/<pid>/status`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

// ---- Waiting on state, not on the clock (issue 16 §7) ----

/// How often `poll_until` and `wait_until` look again: short against every bound they are
/// given, long enough that a poll loop does not take a core from the server on a busy host.
pub const POLL_EVERY: Duration = Duration::from_millis(5);

/// Looks at `done` every `every` until it holds (true) or `bound` passed (false). `done` is
/// looked at once more after the deadline, so a state reached during the last pause counts.
pub fn poll_every(bound: Duration, every: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + bound;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        // The poll interval of a wait on `done`, not a wait for a state.
        std::thread::sleep(every);
    }
}

/// `poll_every` at `POLL_EVERY`.
pub fn poll_until(bound: Duration, done: impl FnMut() -> bool) -> bool {
    poll_every(bound, POLL_EVERY, done)
}

/// Waits until `done` holds; fails the test naming `what` it waited for when `bound` passes
/// first.
pub fn wait_until(bound: Duration, what: &str, done: impl FnMut() -> bool) {
    assert!(poll_until(bound, done), "gave up after {bound:?} waiting for {what}");
}

/// Waits until the sample `sample` of `/metrics` at `metrics` satisfies `want`; returns its
/// value. Fails naming `what` and the last value seen when `bound` passes first.
pub fn wait_metric(
    metrics: &str,
    sample: &str,
    bound: Duration,
    what: &str,
    want: impl Fn(u64) -> bool,
) -> u64 {
    let mut last = 0;
    let reached = poll_until(bound, || {
        last = metric(&scrape(metrics), sample);
        want(last)
    });
    assert!(reached, "gave up after {bound:?} waiting for {what}: {sample} is {last}");
    last
}

/// Waits until the server holds exactly `open` connections (`tidemark_connections_active`):
/// every connection the client closed or cut beyond those has been ended by the server too,
/// and a stream it carried detached (owed, or settled) — what a test checks after a cut.
pub fn wait_closed(server: &Server, open: u64, ctx: &str) {
    let what = format!("{ctx}: the server to end the connections the client closed");
    wait_metric(&server.metrics(), "tidemark_connections_active", PROMPT_WAIT, &what, |n| {
        n == open
    });
}

/// Bound on a state the server reaches without a timer of its own (a cut seen, a call done):
/// generous, so only a hang reaches it.
pub const PROMPT_WAIT: Duration = Duration::from_secs(10);

/// How a cut call ended, as the 409 of a re-POST tells (`wait_call_done`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallEnd {
    /// -31001, not in flight: done, and its stream owed (or parked).
    Owed,
    /// -31002: done and settled: the server had written the whole stream into the socket before
    /// it saw the cut (a client slow to cut a short call).
    Settled,
}

/// Re-POSTs `body` — a request of session `sid` whose stream was cut — until the 409 says the
/// call is no longer in flight (CONTRACT §4 steps 2 and 3: nothing runs): the call has finished
/// and every event it will ever have is in the replay ring.
pub fn wait_call_done(server: &Server, sid: &str, body: &str, ctx: &str) -> CallEnd {
    let mut end = None;
    wait_until(PROMPT_WAIT, &format!("{ctx}: the cut call to finish"), || {
        let r = post(server, &[("Mcp-Session-Id", sid)], body);
        assert_eq!(r.status, 409, "{ctx}: probe {}", r.text());
        let v = r.json();
        end = match v["error"]["code"].as_i64() {
            Some(-31001) if v["error"]["data"]["owedStreams"][0]["inFlight"] == false => {
                Some(CallEnd::Owed)
            }
            Some(-31001) => None,
            Some(-31002) => Some(CallEnd::Settled),
            _ => panic!("{ctx}: the probe of a cut call: {v}"),
        };
        end.is_some()
    });
    end.expect("reached")
}

/// The exit status of `child`, if it ends within `bound`.
pub fn exit_within(child: &mut Child, bound: Duration) -> Option<ExitStatus> {
    let mut status = None;
    poll_until(bound, || {
        status = child.try_wait().expect("wait");
        status.is_some()
    });
    status
}

/// One TCP socket as the kernel lists it in `/proc/net/tcp` (IPv4: the tests use 127.0.0.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpEntry {
    /// `st`: 1 = ESTABLISHED, 8 = CLOSE_WAIT (the peer sent its FIN), …
    pub state: u8,
    /// `rx_queue`: bytes received that the socket's owner has not read yet.
    pub unread_bytes: u64,
}

/// The kernel's table of IPv4 TCP sockets (`/proc/net/tcp`), read once.
pub struct TcpTable(String);

impl TcpTable {
    pub fn read() -> TcpTable {
        TcpTable(std::fs::read_to_string("/proc/net/tcp").expect("read /proc/net/tcp"))
    }

    /// The socket bound to `local` and connected to `remote`, if listed (a socket that was
    /// reset or fully closed is not).
    pub fn entry(&self, local: SocketAddr, remote: SocketAddr) -> Option<TcpEntry> {
        let hex = |a: SocketAddr| match a {
            SocketAddr::V4(v4) => {
                format!("{:08X}:{:04X}", u32::from_ne_bytes(v4.ip().octets()), v4.port())
            }
            SocketAddr::V6(_) => panic!("IPv4 loopback only: {a}"),
        };
        let (local, remote) = (hex(local), hex(remote));
        self.0.lines().skip(1).find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.get(1) != Some(&local.as_str()) || fields.get(2) != Some(&remote.as_str()) {
                return None;
            }
            let state = u8::from_str_radix(fields.get(3)?, 16).ok()?;
            let (_, rx) = fields.get(4)?.split_once(':')?;
            Some(TcpEntry { state, unread_bytes: u64::from_str_radix(rx, 16).ok()? })
        })
    }

    /// The server ended its side of `client` (its FIN arrived, or the connection was reset).
    pub fn closed_by_peer(&self, client: &TcpStream) -> bool {
        let local = client.local_addr().expect("local");
        let Ok(peer) = client.peer_addr() else { return true };
        self.entry(local, peer).is_none_or(|e| e.state != TCP_ESTABLISHED)
    }
}

/// Bytes the client sent on `client` that the server has not read yet (the receive queue of
/// the server's end); `None` when the kernel lists no such socket.
pub fn unread_by_server(client: &TcpStream) -> Option<u64> {
    let (local, peer) = (client.local_addr().expect("local"), client.peer_addr().expect("peer"));
    TcpTable::read().entry(peer, local).map(|e| e.unread_bytes)
}

/// The server ended its side of `client` (its FIN arrived, or the connection was reset).
pub fn closed_by_peer(client: &TcpStream) -> bool {
    TcpTable::read().closed_by_peer(client)
}

/// `TCP_ESTABLISHED` in `/proc/net/tcp`'s `st` column.
const TCP_ESTABLISHED: u8 = 1;

// ---- Start-up refusals (startup.rs, tls.rs) ----

/// Starts the binary on `--listen 127.0.0.1:0` with `args`, as a start that is expected to be
/// refused: stdout dropped, stderr piped (without a backtrace) for the caller to read.
pub fn spawn_refusable(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_tidemark"))
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tidemark")
}

/// Runs the binary with `args` and waits (bounded) for it to exit; returns (status, stderr).
pub fn run_to_exit(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tidemark"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tidemark");
    let Some(status) = exit_within(&mut child, Duration::from_secs(10)) else {
        let _ = child.kill();
        let _ = child.wait();
        return (None, "still running after 10 s".into());
    };
    let mut err = String::new();
    child.stderr.take().expect("stderr").read_to_string(&mut err).expect("stderr");
    (status.code(), err)
}

/// One 2026-07-28 request (the tasks extension declared) with its routing headers and `extra`
/// ones. Returns the HTTP status and the JSON-RPC message (the last event of an SSE answer).
pub fn modern_with_tasks(
    server: &Server,
    method: &str,
    mut params: serde_json::Value,
    extra: &[(&str, &str)],
) -> (u16, serde_json::Value) {
    params["_meta"] = serde_json::json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": { "extensions": { "io.modelcontextprotocol/tasks": {} } },
    });
    let name =
        params.get("name").or_else(|| params.get("taskId")).and_then(serde_json::Value::as_str);
    let name = name.map(str::to_owned);
    let body = serde_json::json!({ "jsonrpc": "2.0", "id": 7, "method": method, "params": params });
    let mut headers = vec![("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", method)];
    if let Some(name) = &name {
        headers.push(("Mcp-Name", name));
    }
    headers.extend_from_slice(extra);
    let r = post(server, &headers, &body.to_string());
    let message = if r.header("Content-Type").is_some_and(|t| t.starts_with("text/event-stream")) {
        messages(&r.events()).last().expect("an event").json()
    } else {
        r.json()
    };
    (r.status, message)
}

/// The final JSON-RPC message of a response (the one with an `id`), JSON or SSE.
pub fn final_message(r: &Response) -> serde_json::Value {
    if r.header("Content-Type").is_some_and(|c| c.starts_with("text/event-stream")) {
        let mut answer = r.events().into_iter().filter(|e| !e.is_priming()).map(|e| e.json());
        answer.rfind(|m| m.get("id").is_some()).expect("a final message")
    } else {
        r.json()
    }
}

/// A 2026-07-28 `tools/call` of `tool` with `{"text":"hi"}` and no client capabilities.
pub fn modern_echo_call(server: &Server, id: u64, tool: &str) -> Response {
    let meta = serde_json::json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": { "name": tool, "arguments": { "text": "hi" }, "_meta": meta },
    });
    let headers =
        [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"), ("Mcp-Name", tool)];
    post(server, &headers, &body.to_string())
}

/// A connection to `server` from source address `source` (any of 127.0.0.0/8 is this host, so
/// a loopback address is another client to the server), with a 20 s read timeout.
pub fn connect_from(server: &Server, source: impl Into<std::net::IpAddr>) -> TcpStream {
    let source = source.into();
    let domain = if source.is_ipv4() { socket2::Domain::IPV4 } else { socket2::Domain::IPV6 };
    let socket = socket2::Socket::new(domain, socket2::Type::STREAM, None).expect("socket");
    socket.bind(&SocketAddr::new(source, 0).into()).expect("bind the source address");
    socket.connect(&server.addr.into()).expect("connect");
    let stream: TcpStream = socket.into();
    stream.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    stream
}

/// initialize + notifications/initialized with `Authorization: Bearer token`, both answered
/// (200, 202); the session id.
pub fn open_session_with_token(server: &Server, token: &str) -> String {
    let bearer = format!("Bearer {token}");
    let auth = [("Authorization", bearer.as_str())];
    let r = post(server, &auth, INIT);
    assert_eq!(r.status, 200, "{}", r.text());
    let sid = r.header("Mcp-Session-Id").expect("session id").to_owned();
    let done = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let h = [auth[0], ("Mcp-Session-Id", sid.as_str())];
    assert_eq!(post(server, &h, done).status, 202);
    sid
}

/// Sets its flag when dropped, also when a panic unwinds past it: a scoped test whose threads
/// loop until a stop flag ends them on a failed assertion instead of waiting on them forever.
pub struct SetOnDrop<'a>(pub &'a std::sync::atomic::AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}
