//! `endpoint`: the whole server, in this process, fed arbitrary byte streams over loopback TCP.
//!
//! One server per fuzz process (`Server::new(config).start()` on 127.0.0.1:0, `--threads 1` so a
//! hung worker is noticed after the input that hung it; `TIDEMARK_FUZZ_THREADS=2` also covers the
//! cross-core hand-off), with short timeouts and small limits so the limit paths are reachable.
//! Its workers run on their own threads; coverage counters are global, so what the server does
//! with an input guides the fuzzer.
//!
//! # Input
//!
//! A script of steps separated by `\n@@`. The first step is plain bytes written on connection 0,
//! then half-closed and read to the end (so a bare HTTP request is a valid input). Every later
//! step starts with two control bytes, `<slot><action>` (taken modulo 4 and 8, so the ASCII
//! digits `0`–`7` read as themselves), an optional `\n` that is skipped, then the bytes to
//! write on connection `slot` (opened on first use):
//!
//! | action | after writing |
//! | --- | --- |
//! | 0 | nothing: the next step on this slot is the next write (a split point) |
//! | 1 | pause 100 µs, so the server reads what came so far on its own |
//! | 2 | read until a whole response (500 µs for a first byte, 200 µs quiet, 2 ms in all) |
//! | 3 | half-close, read to the end (2 ms at most), close |
//! | 4 | close (the kernel resets if a response is unread) |
//! | 5 | reset (`SO_LINGER` 0) |
//! | 6 | read until the first SSE event id (a dropped stream mid-call), then close |
//! | 7 | as 6, then reset |
//!
//! Before a step is written, `$SID` becomes the last `Mcp-Session-Id` the server sent during
//! this input, `$EID` the last event id it sent (an SSE `id:` line or a `Last-Event-ID` hint),
//! and `$LEN` the number of bytes after the step's first blank line (its body), so a mutated
//! body keeps a matching `Content-Length`. Without a capture they become a well-formed id no
//! session has.
//!
//! # Check
//!
//! After every input all its connections are closed, every session it saw is deleted, and a
//! well-formed `initialize` + `DELETE` must be answered (200, then 2xx) within 5 s on a
//! connection kept across inputs. A panic anywhere (a server worker included: libfuzzer-sys
//! aborts on panic) or a missing answer is a finding. A missing answer usually depends on
//! what earlier inputs left in the server, so the saved input alone may not reproduce it: run
//! with `TIDEMARK_FUZZ_HANG_PAUSE=1` to keep the process for a debugger when it happens.

use std::cell::RefCell;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tidemark::{Config, Server};

/// Connections one input may use.
const SLOTS: usize = 4;
/// Steps of one input that are carried out; the rest is ignored (bounds an input's time).
const STEPS_MAX: usize = 16;
const DELIMITER: &[u8] = b"\n@@";
/// Long enough for the server (on another core, answering in ~30 µs) to read what came so far.
const PAUSE: Duration = Duration::from_micros(100);
/// How long a read step waits for the first byte, for the next byte, and in all. Every input
/// that waits for an answer the server does not give pays these, so they set the speed of
/// this target; the server answers a request on loopback in 30–60 µs.
const FIRST_BYTE_WAIT: Duration = Duration::from_micros(500);
const QUIET: Duration = Duration::from_micros(200);
const READ_WAIT_MAX: Duration = Duration::from_millis(2);
const WRITE_TIMEOUT: Duration = Duration::from_millis(50);
/// The liveness check's patience: far above any answer time, below libFuzzer's timeout
/// (`fuzz.sh`: 60 s). Not 5 s: on a loaded host (a niced fuzz run beside a release build) the
/// server thread was starved for 5 s and the probe reported a hang that was not one; a server
/// that stopped answering is still found, 30 s later.
const PROBE_DEADLINE: Duration = Duration::from_secs(30);
/// Bytes of one read step's response kept for framing (the rest is only scanned).
const RESPONSE_KEEP_MAX: usize = 64 * 1024;
/// Longest session or event id captured; longer values are not ids the server sends.
const CAPTURE_LEN_MAX: usize = 64;
/// Distinct session ids one input may leave behind to be deleted.
const SESSIONS_TRACKED_MAX: usize = 8;
/// What `$SID` / `$EID` become before the server sent one: well-formed, held by no session.
const SID_NONE: &[u8] = b"00000000000000000000000000000001";
const EID_NONE: &[u8] = b"00000000-1-1";

/// The server's flags: every timeout short, every limit small (reachable within an input).
const FLAGS: [&str; 30] = [
    "--listen",
    "127.0.0.1:0",
    "--tools",
    "demo,conformance",
    "--header-timeout-ms",
    "200",
    "--idle-timeout-secs",
    "5",
    "--owed-wait-ms",
    "20",
    "--owed-timeout-secs",
    "1",
    "--session-idle-secs",
    "10",
    "--stream-retention-secs",
    "2",
    "--sse-keepalive-secs",
    "1",
    "--max-streams-per-session",
    "4",
    "--replay-events",
    "16",
    "--replay-bytes",
    "8192",
    "--max-body-bytes",
    "65536",
    "--max-header-bytes",
    "4096",
    "--max-headers",
    "32",
];

pub fn check(data: &[u8]) {
    let addr = server_addr();
    let mut run = Run { addr, conns: Default::default(), captured: Captured::default() };
    for step in steps(data).into_iter().take(STEPS_MAX) {
        run.step(&step);
    }
    let sessions = std::mem::take(&mut run.captured.sessions);
    drop(run);
    let start = Instant::now();
    probe(addr, &sessions);
    if trace() {
        eprintln!("  probe: {:?}", start.elapsed());
    }
}

/// Starts the server on first use; it runs until the process ends.
fn server_addr() -> SocketAddr {
    static ADDR: OnceLock<SocketAddr> = OnceLock::new();
    *ADDR.get_or_init(|| {
        // The tidemark binary, like every Rust `main`, ignores SIGPIPE; libFuzzer's C `main`
        // does not, and a write to a reset socket would kill the process.
        ignore_sigpipe();
        let threads = std::env::var("TIDEMARK_FUZZ_THREADS").unwrap_or_else(|_| "1".into());
        let driver = std::env::var("TIDEMARK_FUZZ_DRIVER").unwrap_or_else(|_| "auto".into());
        let mut args = vec!["tidemark", "--threads", &threads, "--driver", &driver];
        args.extend(FLAGS);
        let cfg = Config::try_from_args(args).expect("fuzz server flags");
        let running = Server::new(cfg).start().expect("fuzz server starts");
        eprintln!(
            "endpoint: tidemark on {} driver={} threads={threads}",
            running.local_addr, running.driver
        );
        running.local_addr
    })
}

fn ignore_sigpipe() {
    // SAFETY: setting SIGPIPE's disposition to SIG_IGN at start-up, before any socket exists;
    // no handler code runs.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// What to do after a step's bytes are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Write,
    Pause,
    Read,
    Finish,
    Close,
    Reset,
    DropAfterEvent,
    ResetAfterEvent,
}

impl Action {
    fn from_byte(b: u8) -> Action {
        match b % 8 {
            0 => Action::Write,
            1 => Action::Pause,
            2 => Action::Read,
            3 => Action::Finish,
            4 => Action::Close,
            5 => Action::Reset,
            6 => Action::DropAfterEvent,
            _ => Action::ResetAfterEvent,
        }
    }
}

struct Step<'a> {
    slot: usize,
    action: Action,
    bytes: &'a [u8],
}

/// Splits an input into its steps (see the module doc).
fn steps(data: &[u8]) -> Vec<Step<'_>> {
    let mut parts = Vec::new();
    let mut rest = data;
    while let Some(at) = find(rest, DELIMITER) {
        parts.push(&rest[..at]);
        rest = &rest[at + DELIMITER.len()..];
    }
    parts.push(rest);
    let mut steps = vec![Step { slot: 0, action: Action::Finish, bytes: parts[0] }];
    for part in &parts[1..] {
        let slot = usize::from(part.first().copied().unwrap_or(0) % SLOTS as u8);
        let action = Action::from_byte(part.get(1).copied().unwrap_or(0));
        let mut bytes = part.get(2..).unwrap_or_default();
        if bytes.first() == Some(&b'\n') {
            bytes = &bytes[1..];
        }
        steps.push(Step { slot, action, bytes });
    }
    steps
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Ids the server sent during one input.
#[derive(Default)]
struct Captured {
    session: Option<Vec<u8>>,
    event: Option<Vec<u8>>,
    /// Every distinct session id seen, to delete after the input.
    sessions: Vec<Vec<u8>>,
}

impl Captured {
    /// Scans one response line (without its line break) for an id.
    fn line(&mut self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if trace() && (line.starts_with(b"HTTP/1.") || line.starts_with(b"data: {")) {
            eprintln!("    <- {}", show(line));
        }
        let value = |prefix: &[u8]| -> Option<Vec<u8>> {
            let head = line.get(..prefix.len())?;
            if !head.eq_ignore_ascii_case(prefix) {
                return None;
            }
            let v = line[prefix.len()..].trim_ascii();
            let plain = v.iter().all(|b| b.is_ascii_graphic());
            (!v.is_empty() && v.len() <= CAPTURE_LEN_MAX && plain).then(|| v.to_vec())
        };
        if let Some(sid) = value(b"mcp-session-id:") {
            if !self.sessions.contains(&sid) && self.sessions.len() < SESSIONS_TRACKED_MAX {
                self.sessions.push(sid.clone());
            }
            self.session = Some(sid);
        } else if let Some(eid) = value(b"last-event-id:").or_else(|| value(b"id:")) {
            self.event = Some(eid);
        }
    }

    /// The step's bytes with `$SID`, `$EID` and `$LEN` replaced.
    fn substitute(&self, bytes: &[u8]) -> Vec<u8> {
        let sid = self.session.as_deref().unwrap_or(SID_NONE);
        let eid = self.event.as_deref().unwrap_or(EID_NONE);
        let out = replace(&replace(bytes, b"$SID", sid), b"$EID", eid);
        if find(&out, b"$LEN").is_none() {
            return out;
        }
        let body_len = find(&out, b"\r\n\r\n").map_or(0, |at| out.len() - at - 4);
        // Counted before "$LEN" is replaced: in the head, its replacement leaves the body as is.
        replace(&out, b"$LEN", body_len.to_string().as_bytes())
    }
}

fn replace(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut rest = bytes;
    while let Some(at) = find(rest, from) {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(to);
        rest = &rest[at + from.len()..];
    }
    out.extend_from_slice(rest);
    out
}

/// One client connection of an input, and the partial response line carried between reads.
struct Conn {
    stream: TcpStream,
    line: Vec<u8>,
}

struct Run {
    addr: SocketAddr,
    conns: [Option<Conn>; SLOTS],
    captured: Captured,
}

/// What a read step waits for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Until {
    Response,
    End,
    EventId,
}

impl Run {
    fn step(&mut self, step: &Step<'_>) {
        let bytes = self.captured.substitute(step.bytes);
        if trace() {
            let first = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
            eprintln!("  [{}] {:?} {} bytes: {}", step.slot, step.action, bytes.len(), show(first));
        }
        let start = Instant::now();
        self.carry_out(step, &bytes);
        if trace() {
            eprintln!("    ({:?})", start.elapsed());
        }
    }

    fn carry_out(&mut self, step: &Step<'_>, bytes: &[u8]) {
        let Some(conn) = self.conn(step.slot) else { return };
        if conn.stream.write_all(bytes).is_err() {
            self.conns[step.slot] = None;
            return;
        }
        match step.action {
            Action::Write => {}
            Action::Pause => std::thread::sleep(PAUSE),
            Action::Read => self.read(step.slot, Until::Response),
            Action::Finish => {
                let _ = conn.stream.shutdown(Shutdown::Write);
                self.read(step.slot, Until::End);
                self.conns[step.slot] = None;
            }
            Action::Close => self.conns[step.slot] = None,
            Action::Reset => self.reset(step.slot),
            Action::DropAfterEvent => {
                self.read(step.slot, Until::EventId);
                self.conns[step.slot] = None;
            }
            Action::ResetAfterEvent => {
                self.read(step.slot, Until::EventId);
                self.reset(step.slot);
            }
        }
    }

    /// The connection in `slot`, connected on first use; `None` when the connect failed.
    fn conn(&mut self, slot: usize) -> Option<&mut Conn> {
        if self.conns[slot].is_none() {
            let stream = TcpStream::connect(self.addr).ok()?;
            stream.set_nodelay(true).ok()?;
            stream.set_write_timeout(Some(WRITE_TIMEOUT)).ok()?;
            self.conns[slot] = Some(Conn { stream, line: Vec::new() });
        }
        self.conns[slot].as_mut()
    }

    fn reset(&mut self, slot: usize) {
        if let Some(conn) = self.conns[slot].take() {
            let _ = socket2::SockRef::from(&conn.stream).set_linger(Some(Duration::ZERO));
        }
    }

    /// Reads from `slot` until `until`, a quiet spell, the end, or `READ_WAIT_MAX`.
    fn read(&mut self, slot: usize, until: Until) {
        let Some(conn) = self.conns[slot].as_mut() else { return };
        let start = Instant::now();
        let events_before = self.captured.event.clone();
        let mut response = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        loop {
            let left = READ_WAIT_MAX.saturating_sub(start.elapsed());
            let wait = match (until, response.is_empty()) {
                (Until::End, _) => left,
                (_, true) => FIRST_BYTE_WAIT.min(left),
                (_, false) => QUIET.min(left),
            };
            if wait.is_zero() || !readable(&conn.stream, wait) {
                return;
            }
            let n = match conn.stream.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return,
            };
            for &b in &buf[..n] {
                if b == b'\n' {
                    self.captured.line(&conn.line);
                    conn.line.clear();
                } else if conn.line.len() < 2 * CAPTURE_LEN_MAX {
                    conn.line.push(b);
                }
            }
            let keep = n.min(RESPONSE_KEEP_MAX.saturating_sub(response.len()));
            response.extend_from_slice(&buf[..keep]);
            let done = match until {
                Until::Response => response_complete(&response),
                Until::EventId => self.captured.event != events_before,
                Until::End => false,
            };
            if done {
                return;
            }
        }
    }
}

/// Waits up to `wait` for `stream` to be readable (data, end or error). `ppoll`, not
/// `SO_RCVTIMEO`: the socket timeout counts in scheduler ticks (4 ms at HZ=250), which would
/// make every wait of this harness several times longer than asked.
fn readable(stream: &TcpStream, wait: Duration) -> bool {
    let mut fd = libc::pollfd { fd: stream.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    let timeout = libc::timespec {
        tv_sec: wait.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(wait.subsec_nanos() as i32),
    };
    // SAFETY: one valid pollfd for the duration of the call, a valid timespec, no signal mask.
    let ready = unsafe { libc::ppoll(&mut fd, 1, &timeout, std::ptr::null()) };
    ready > 0
}

/// Whether `bytes` hold at least one whole HTTP/1.1 response (length-framed or chunked).
fn response_complete(bytes: &[u8]) -> bool {
    let Some(head_end) = find(bytes, b"\r\n\r\n").map(|at| at + 4) else { return false };
    let head = &bytes[..head_end];
    let body = &bytes[head_end..];
    let status = head.get(9..12).and_then(|s| std::str::from_utf8(s).ok()?.parse::<u16>().ok());
    if matches!(status, Some(100..=199 | 204 | 304)) {
        return true;
    }
    let mut chunked = false;
    for line in head.split(|&b| b == b'\n') {
        let line = line.trim_ascii();
        if let Some(v) = strip_prefix_ignore_case(line, b"content-length:") {
            let len = std::str::from_utf8(v.trim_ascii()).ok().and_then(|v| v.parse().ok());
            return len.is_some_and(|len: usize| body.len() >= len);
        }
        if strip_prefix_ignore_case(line, b"transfer-encoding:").is_some() {
            chunked = true;
        }
    }
    chunked && (body.starts_with(b"0\r\n\r\n") || find(body, b"\r\n0\r\n\r\n").is_some())
}

fn strip_prefix_ignore_case<'a>(line: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    let head = line.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix).then(|| &line[prefix.len()..])
}

const INITIALIZE: &str = concat!(
    r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","#,
    r#""capabilities":{},"clientInfo":{"name":"fuzz-probe","version":"1"}}}"#
);

thread_local! {
    /// The probe's keep-alive connection, reused across inputs.
    static PROBE: RefCell<Option<TcpStream>> = const { RefCell::new(None) };
}

/// Deletes the input's sessions, then requires an `initialize` and a `DELETE` to be answered.
fn probe(addr: SocketAddr, sessions: &[Vec<u8>]) {
    for sid in sessions {
        exchange(addr, &delete(sid), "DELETE of a session the input opened");
    }
    let init = format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{INITIALIZE}",
        INITIALIZE.len()
    );
    let answer = exchange(addr, init.as_bytes(), "initialize");
    assert!(answer.starts_with(b"HTTP/1.1 200 "), "initialize: {}", show(&answer));
    let mut captured = Captured::default();
    answer.split(|&b| b == b'\n').for_each(|line| captured.line(line));
    let sid = captured.session.unwrap_or_else(|| panic!("no session id: {}", show(&answer)));
    let answer = exchange(addr, &delete(&sid), "DELETE of the probe's session");
    assert!(answer.starts_with(b"HTTP/1.1 2"), "DELETE: {}", show(&answer));
}

fn delete(sid: &[u8]) -> Vec<u8> {
    let mut req = b"DELETE /mcp HTTP/1.1\r\nHost: localhost\r\nMcp-Session-Id: ".to_vec();
    req.extend_from_slice(sid);
    req.extend_from_slice(b"\r\n\r\n");
    req
}

/// Why the probe got no answer.
enum NoAnswer {
    /// The kept connection was closed (the server's idle timeout, say): worth one reconnect.
    Closed(String),
    /// Connected, but no whole response within `PROBE_DEADLINE` (or the connection closed
    /// halfway through one): the finding.
    Silent(String),
}

/// One request on the probe connection, reconnecting once if the server had closed it.
fn exchange(addr: SocketAddr, request: &[u8], what: &str) -> Vec<u8> {
    PROBE.with(|cell| {
        let mut slot = cell.borrow_mut();
        for attempt in 0..2 {
            let stream = match slot.as_mut() {
                Some(s) => s,
                None => match connect_probe(addr) {
                    Ok(s) => slot.insert(s),
                    Err(e) => panic!("{what}: the server refuses connections: {e}"),
                },
            };
            match request_response(stream, request) {
                Ok(answer) => {
                    if !keep_alive(&answer) {
                        *slot = None;
                    }
                    return answer;
                }
                Err(NoAnswer::Closed(_)) if attempt == 0 => *slot = None,
                Err(NoAnswer::Closed(e) | NoAnswer::Silent(e)) => {
                    pause_for_debugger();
                    panic!("{what}: the server did not answer a well-formed request: {e}")
                }
            }
        }
        unreachable!("the second attempt returns or panics")
    })
}

/// `TIDEMARK_FUZZ_HANG_PAUSE=1`: before reporting a server that does not answer, keep the
/// process 10 minutes for a debugger (`gdb -p PID -batch -ex "thread apply all bt"`), so the
/// stuck worker's stack can be read: the input alone rarely reproduces what a long run built up.
fn pause_for_debugger() {
    if std::env::var_os("TIDEMARK_FUZZ_HANG_PAUSE").is_some_and(|v| v == "1") {
        eprintln!("endpoint: no answer; pid {} paused 600 s for a debugger", std::process::id());
        std::thread::sleep(Duration::from_secs(600));
    }
}

fn connect_probe(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    s.set_write_timeout(Some(PROBE_DEADLINE))?;
    Ok(s)
}

fn request_response(stream: &mut TcpStream, request: &[u8]) -> Result<Vec<u8>, NoAnswer> {
    stream.write_all(request).map_err(|e| NoAnswer::Closed(format!("write: {e}")))?;
    let deadline = Instant::now() + PROBE_DEADLINE;
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !response_complete(&answer) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || !readable(stream, left) {
            let got = show(&answer);
            return Err(NoAnswer::Silent(format!(
                "no whole response in {PROBE_DEADLINE:?}: {got}"
            )));
        }
        match stream.read(&mut buf) {
            Ok(0) if answer.is_empty() => return Err(NoAnswer::Closed("closed".into())),
            Ok(0) => {
                return Err(NoAnswer::Silent(format!("closed mid-response: {}", show(&answer))))
            }
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(NoAnswer::Closed(format!("read: {e} after {}", show(&answer)))),
        }
    }
    Ok(answer)
}

fn keep_alive(answer: &[u8]) -> bool {
    let head_end = find(answer, b"\r\n\r\n").unwrap_or(answer.len());
    !answer[..head_end]
        .split(|&b| b == b'\n')
        .any(|l| l.trim_ascii().eq_ignore_ascii_case(b"connection: close"))
}

/// `TIDEMARK_FUZZ_TRACE=1`: print each step and the responses' status and data lines (for
/// writing seeds; far too slow for fuzzing).
fn trace() -> bool {
    static TRACE: OnceLock<bool> = OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("TIDEMARK_FUZZ_TRACE").is_some_and(|v| v == "1"))
}

fn show(bytes: &[u8]) -> String {
    let end = bytes.len().min(300);
    format!("{:?}", String::from_utf8_lossy(&bytes[..end]))
}
