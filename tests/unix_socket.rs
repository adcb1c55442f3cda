//! Goal: `--listen unix:PATH` serves the MCP endpoint over a Unix socket file exactly as over
//! TCP (issue 42 §3): a session's initialize, calls, an SSE stream cut and resumed with
//! `GET` + `Last-Event-ID`, a re-POST of the cut call answered 409, the 2026-07-28 era, the
//! sessions' owner-core routing across the cores that share the one socket; the file gets
//! `--listen-mode` (0600 by default); one owner per file: a live owner is refused, a stale file
//! replaced, a file that is not a socket refused and left alone; the file is removed by the
//! SIGTERM drain; the Host rule of a loopback listener applies; a TCP address beside it serves
//! too.
//!
//! Method: the real binary, on both io drivers, raw HTTP/1.1 over blocking
//! `std::os::unix::net::UnixStream`s (no curl), each request on a fresh connection unless said.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::{call, exit_within, metric, parse_events, scrape, Event, DRIVERS, INIT};

/// Bound on anything that must not hang.
const PROMPT: Duration = Duration::from_secs(10);
const V_MODERN: &str = "2026-07-28";

/// A socket path unique to this test process and `name`.
fn socket_path(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("tm-uds-{}-{name}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

/// The binary on `path` (plus `args`), or its exit with its stderr when it did not start.
struct Unix {
    child: Child,
    path: PathBuf,
    banner: String,
}

impl Unix {
    fn start(driver: &str, path: &Path, args: &[&str]) -> Unix {
        Unix::try_start(driver, path, args).unwrap_or_else(|e| panic!("did not start: {e}"))
    }

    /// `Err(stderr)` when the process exits before its banner.
    fn try_start(driver: &str, path: &Path, args: &[&str]) -> Result<Unix, String> {
        let listen = format!("unix:{}", path.display());
        let mut child = Command::new(env!("CARGO_BIN_EXE_tidemark"))
            .args(["--driver", driver, "--listen", &listen])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tidemark");
        let mut banner = String::new();
        let stdout = child.stdout.take().expect("stdout");
        BufReader::new(stdout).read_line(&mut banner).expect("read banner");
        if banner.is_empty() {
            let _ = exit_within(&mut child, PROMPT);
            let mut stderr = String::new();
            child.stderr.take().expect("stderr").read_to_string(&mut stderr).expect("stderr");
            return Err(stderr);
        }
        // The log stays unread: keep the pipe drained so the server never blocks on it.
        let mut stderr = child.stderr.take().expect("stderr");
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
        Ok(Unix { child, path: path.to_owned(), banner })
    }

    fn connect(&self) -> UnixStream {
        let s = UnixStream::connect(&self.path).expect("connect the socket file");
        s.set_read_timeout(Some(PROMPT)).expect("timeout");
        s
    }

    fn signal(&self, sig: &str) {
        let kill = format!("kill -{sig} {}", self.child.id());
        assert!(Command::new("sh").args(["-c", &kill]).status().expect("kill").success());
    }
}

impl Drop for Unix {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A whole response: status, headers, body (chunked decoded).
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    fn json(&self) -> serde_json::Value {
        let text = String::from_utf8_lossy(&self.body);
        if self.header("Content-Type") == Some("text/event-stream") {
            let last = parse_events(text.as_bytes()).into_iter().rev().find(|e| !e.data.is_empty());
            return last.expect("an event").json();
        }
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }
}

/// A request's bytes: the `Host` given, JSON headers when there is a body.
fn request(method: &str, host: &str, headers: &[(&str, &str)], body: Option<&str>) -> Vec<u8> {
    let mut r = format!("{method} /mcp HTTP/1.1\r\nHost: {host}\r\n");
    if body.is_some() {
        r.push_str("Content-Type: application/json\r\n");
        r.push_str("Accept: application/json, text/event-stream\r\n");
    }
    for (n, v) in headers {
        r.push_str(&format!("{n}: {v}\r\n"));
    }
    if let Some(b) = body {
        r.push_str(&format!("Content-Length: {}\r\n\r\n{b}", b.len()));
    } else {
        r.push_str("\r\n");
    }
    r.into_bytes()
}

/// Reads a response head; the bytes read past it stay in `rest`.
fn read_head(s: &mut UnixStream, rest: &mut Vec<u8>) -> (u16, Vec<(String, String)>) {
    let end = loop {
        if let Some(p) = rest.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        let mut buf = [0u8; 4096];
        let n = s.read(&mut buf).expect("read head");
        assert!(n > 0, "closed before the head: {:?}", String::from_utf8_lossy(rest));
        rest.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8(rest.drain(..end + 4).collect()).expect("utf-8 head");
    let mut lines = head.split("\r\n");
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).expect("status");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    (status.parse().expect("status code"), headers)
}

/// Reads until `done(bytes)` or the peer closes.
fn fill_until(s: &mut UnixStream, rest: &mut Vec<u8>, done: impl Fn(&[u8]) -> bool) {
    while !done(rest) {
        let mut buf = [0u8; 4096];
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => rest.extend_from_slice(&buf[..n]),
            Err(e) => panic!("read body: {e}"),
        }
    }
}

/// Decodes a complete chunked body.
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(p) = raw.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(std::str::from_utf8(&raw[..p]).expect("size"), 16);
        let size = size.expect("chunk size");
        if size == 0 || raw.len() < p + 2 + size {
            break;
        }
        out.extend_from_slice(&raw[p + 2..p + 2 + size]);
        raw = &raw[(p + 4 + size).min(raw.len())..];
    }
    out
}

/// One request on a fresh connection, its whole response.
fn exchange(server: &Unix, raw: &[u8]) -> Reply {
    let mut s = server.connect();
    s.write_all(raw).expect("write request");
    let mut rest = Vec::new();
    let (status, headers) = read_head(&mut s, &mut rest);
    let reply = Reply { status, headers, body: Vec::new() };
    let body = if reply.header("Transfer-Encoding") == Some("chunked") {
        fill_until(&mut s, &mut rest, |b| b.ends_with(b"0\r\n\r\n"));
        dechunk(&rest)
    } else {
        let len: usize = reply.header("Content-Length").map_or(0, |v| v.parse().expect("len"));
        fill_until(&mut s, &mut rest, |b| b.len() >= len);
        rest
    };
    Reply { body, ..reply }
}

fn post(server: &Unix, headers: &[(&str, &str)], body: &str) -> Reply {
    exchange(server, &request("POST", "localhost", headers, Some(body)))
}

/// initialize + notifications/initialized over the socket; the session id.
fn open_session(server: &Unix) -> String {
    let r = post(server, &[], INIT);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let sid = r.header("Mcp-Session-Id").expect("session id").to_owned();
    let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(post(server, &[("Mcp-Session-Id", &sid)], note).status, 202);
    sid
}

/// The text of a tools/call result.
fn result_text(v: &serde_json::Value) -> String {
    v["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("result: {v}")).to_owned()
}

/// Goal: a session over the socket: initialize, tools/call, an SSE stream cut after its
/// priming event, a re-POST of the cut call answered 409 (its stream is owed), the resume by
/// GET + Last-Event-ID delivering every progress event and the result; the default mode 0600.
/// Method: two cores sharing the socket; the session's requests each on a fresh connection,
/// so on io_uring (whose cores take accepts in turn) some land on the core that does not own
/// the session and are handed to its owner (counted: `tidemark_handoffs_total`).
#[test]
fn a_session_calls_and_resumes_over_the_socket() {
    for driver in DRIVERS {
        let path = socket_path(&format!("session-{driver}"));
        let server =
            Unix::start(driver, &path, &["--threads", "2", "--metrics-listen", "127.0.0.1:0"]);
        let mode = std::fs::metadata(&path).expect("socket file").permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{driver}: the default --listen-mode");
        let sid = open_session(&server);
        // 16 fresh connections, each accepted by one of the two cores.
        for id in 1..=16 {
            let echo = call(id, "echo", r#"{"text":"over uds"}"#, false);
            let r = post(&server, &[("Mcp-Session-Id", &sid)], &echo);
            assert_eq!(r.status, 200, "{driver}");
            assert_eq!(result_text(&r.json()), "over uds", "{driver}");
        }
        let admin =
            server.banner.split_whitespace().find_map(|w| w.strip_prefix("metrics=http://"));
        let admin = admin.and_then(|a| a.split('/').next()).expect("admin address").to_owned();
        let handoffs = metric(&scrape(&admin), "tidemark_handoffs_total");
        // io_uring's pending accepts wait exclusively, in turn, so the cores alternate; epoll
        // wakes both, and the core awake already (the owner, which just answered) usually
        // wins: there the hand-off is not forced, only every answer checked.
        if driver == "uring" {
            assert!(handoffs > 0, "{driver}: no request reached the other core ({handoffs})");
        }
        cut_then_resume(&server, &sid, driver);
    }
}

/// The slow call cut after its priming event, re-POSTed (409), resumed to its end.
fn cut_then_resume(server: &Unix, sid: &str, driver: &str) {
    let body = call(40, "slow_counter", r#"{"steps":3,"delay_ms":100}"#, true);
    let mut s = server.connect();
    s.write_all(&request("POST", "localhost", &[("Mcp-Session-Id", sid)], Some(&body)))
        .expect("write");
    let mut rest = Vec::new();
    let (status, _) = read_head(&mut s, &mut rest);
    assert_eq!(status, 200, "{driver}");
    fill_until(&mut s, &mut rest, |b| dechunk(b).windows(2).any(|w| w == b"\n\n"));
    let priming: Vec<Event> = parse_events(&dechunk(&rest));
    let last = priming.first().and_then(|e| e.id.clone()).expect("the priming event's id");
    drop(s);
    let again = post(server, &[("Mcp-Session-Id", sid)], &body);
    assert_eq!(again.status, 409, "{driver}: a re-POST of the cut call");
    let resume = request(
        "GET",
        "localhost",
        &[("Accept", "text/event-stream"), ("Mcp-Session-Id", sid), ("Last-Event-ID", &last)],
        None,
    );
    let started = Instant::now();
    let r = exchange(server, &resume);
    assert_eq!(r.status, 200, "{driver}");
    assert!(started.elapsed() < PROMPT, "{driver}: the resume hung");
    let events = parse_events(&r.body);
    let progress = events.iter().filter(|e| e.data.contains("notifications/progress")).count();
    assert_eq!(progress, 3, "{driver}: every progress event once");
    assert!(result_text(&r.json()).parse::<u64>().is_ok(), "{driver}: the counter's result");
}

/// Goal: the 2026-07-28 era over the socket: a stateless tools/call answers, and a keyed one
/// (`Idempotency-Key`, whose record names the client by its peer address: none over a socket)
/// answers twice the same. Method: `_meta` and the era's headers, no session.
#[test]
fn the_modern_era_answers_over_the_socket() {
    for driver in DRIVERS {
        let path = socket_path(&format!("modern-{driver}"));
        let server = Unix::start(driver, &path, &["--threads", "2"]);
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": { "name": "echo", "arguments": { "text": "modern" }, "_meta": {
                "io.modelcontextprotocol/protocolVersion": V_MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": { "name": "uds", "version": "1" },
            } },
        })
        .to_string();
        let headers = [
            ("MCP-Protocol-Version", V_MODERN),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "echo"),
        ];
        let r = post(&server, &headers, &body);
        assert_eq!(r.status, 200, "{driver}: {}", String::from_utf8_lossy(&r.body));
        assert_eq!(result_text(&r.json()), "modern", "{driver}");
        let keyed: Vec<(&str, &str)> =
            headers.iter().copied().chain([("Idempotency-Key", "uds-key")]).collect();
        for attempt in 0..2 {
            let r = post(&server, &keyed, &body);
            assert_eq!(r.status, 200, "{driver} keyed {attempt}");
            assert_eq!(result_text(&r.json()), "modern", "{driver} keyed {attempt}");
        }
    }
}

/// Goal: over the socket the Host rule is a loopback listener's (a forwarder could put a
/// browser in front of the file): `localhost` and `--allowed-host` values pass, another name
/// is refused 403; Origin rules are unchanged (a foreign origin: 403).
/// Method: initialize with each Host / Origin.
#[test]
fn the_loopback_host_rule_applies_over_the_socket() {
    let path = socket_path("host");
    let server = Unix::start("epoll", &path, &["--allowed-host", "tidemark.sidecar"]);
    let cases: [(&str, Option<&str>, u16); 5] = [
        ("localhost", None, 200),
        ("127.0.0.1:8080", None, 200),
        ("tidemark.sidecar", None, 200),
        ("evil.example", None, 403),
        ("localhost", Some("http://evil.example"), 403),
    ];
    for (host, origin, want) in cases {
        let headers: Vec<(&str, &str)> = origin.map(|o| ("Origin", o)).into_iter().collect();
        let r = exchange(&server, &request("POST", host, &headers, Some(INIT)));
        assert_eq!(r.status, want, "Host {host}, Origin {origin:?}");
    }
}

/// Goal: `--listen-mode` sets the file's permissions; a TCP address beside the socket serves
/// the same sessions. Method: mode 0660 and `--listen 127.0.0.1:0` beside; a session opened
/// over the socket is used over TCP.
#[test]
fn the_mode_flag_and_a_tcp_listener_beside() {
    let path = socket_path("beside");
    let tcp = ["--listen", "127.0.0.1:0", "--listen-mode", "0660", "--threads", "2"];
    let server = Unix::start("uring", &path, &tcp);
    let mode = std::fs::metadata(&path).expect("socket file").permissions().mode();
    assert_eq!(mode & 0o777, 0o660);
    let sid = open_session(&server);
    let url = server.banner.split_whitespace().nth(3).expect("url");
    let addr = url.strip_prefix("http://").and_then(|r| r.split('/').next()).expect("addr");
    let mut s = std::net::TcpStream::connect(addr).expect("connect TCP");
    s.set_read_timeout(Some(PROMPT)).expect("timeout");
    let ping = r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#;
    let raw = support::request(
        "POST",
        "/mcp",
        addr,
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("Mcp-Session-Id", &sid),
        ],
        Some(ping),
    );
    s.write_all(&raw).expect("write");
    let r = support::read_response(&mut s);
    assert_eq!(r.status, 200, "the socket's session over TCP: {}", r.text());
    assert!(server.banner.contains(&format!("unix={}", path.display())), "{}", server.banner);
}

/// Goal: one owner per socket file: a second process on a live owner's path is refused (and
/// the owner keeps serving), a stale file a dead process left is replaced, a path that is not
/// a socket is refused with a clear error and left as it was.
/// Method: the real binary three times; a stale file made by binding a std listener and
/// dropping it (the file stays, nobody listens).
#[test]
fn one_owner_per_socket_file() {
    let path = socket_path("owner");
    let owner = Unix::start("epoll", &path, &[]);
    let refused = Unix::try_start("epoll", &path, &[]).err().expect("a second owner refused");
    assert!(refused.contains("in use by another process"), "{refused}");
    open_session(&owner);
    drop(owner);

    let stale = socket_path("stale");
    drop(std::os::unix::net::UnixListener::bind(&stale).expect("bind a stale socket"));
    assert!(std::fs::symlink_metadata(&stale).expect("left").file_type().is_socket());
    let server = Unix::start("epoll", &stale, &[]);
    open_session(&server);
    drop(server);

    let plain = socket_path("not-a-socket");
    std::fs::write(&plain, b"keep me").expect("write a plain file");
    let refused = Unix::try_start("epoll", &plain, &[]).err().expect("a plain file refused");
    assert!(refused.contains("exists and is not a socket (not removed)"), "{refused}");
    assert_eq!(std::fs::read(&plain).expect("still there"), b"keep me");
    let _ = std::fs::remove_file(&plain);
}

/// Goal: the SIGTERM drain removes the socket file (a restart finds the path free) and exits
/// 0. Method: SIGTERM, wait for the exit, look at the path.
#[test]
fn the_drain_removes_the_socket_file() {
    for driver in DRIVERS {
        let path = socket_path(&format!("drain-{driver}"));
        let mut server = Unix::start(driver, &path, &["--threads", "2"]);
        open_session(&server);
        server.signal("TERM");
        let status = exit_within(&mut server.child, PROMPT).expect("exits after the drain");
        assert!(status.success(), "{driver}: {status:?}");
        assert!(!path.exists(), "{driver}: the socket file is removed");
    }
}
