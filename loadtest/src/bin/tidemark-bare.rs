//! `tidemark-bare`: the limit tidemark's hot path is measured against (`scripts/limit.sh`). A
//! minimal monoio HTTP/1.1 server on the runtime set-up tidemark uses, answering every request
//! with one fixed JSON-RPC result that carries the request's id; no MCP at all.
//!
//! Owns: the same runtime as a tidemark worker (one monoio runtime per thread, io_uring with
//! 1024 entries and SINGLE_ISSUER|DEFER_TASKRUN, else COOP_TASKRUN, else no flags, else epoll;
//! the timer driver on; no SQPOLL; `--driver` and `MONOIO_FORCE_LEGACY_DRIVER` as tidemark's),
//! an SO_REUSEPORT listener per thread (backlog 1024), TCP_NODELAY on every connection, and
//! worker i pinned to the i-th CPU the process may use when there are enough of them.
//! Per connection: keep-alive, pipelining (every complete request in a read is answered, all
//! answers in one write), `Content-Length` framing, one read and one write buffer reused for
//! the connection's life, so a request allocates nothing.
//! The answer: `200`, `Content-Type: application/json`, a fixed `Mcp-Session-Id` (so
//! `tidemark-load`'s session set-up accepts it) and
//! `{"jsonrpc":"2.0","id":ID,"result":{"protocolVersion":"2025-11-25"}}`, ID being the raw bytes
//! after the body's first `"id":` (no JSON parse; `null` when there is none). The
//! `protocolVersion` is there for `initialize`; every request gets the same answer.
//!
//! With `--relay COMMAND` it is instead the limit of a stdio bridge at one call in flight
//! (`scripts/bridge-compare.sh`'s `bare-relay`): each worker spawns COMMAND once (split on
//! whitespace, as tidemark's `stdio:COMMAND ARGS…`), writes every request's body to the child's
//! stdin as one line, and answers a body with an id by the next line the child writes that
//! carries an id (`200`, the line as the JSON body), one without an id by `202` and no body.
//! The child's pipes are used blocking from the worker thread (a blocked read sleeps in the
//! kernel until the child writes: no poll, no completion queue), which is the cheapest a relay
//! can be and right only at one call in flight.
//! Never: parses JSON, reads a chunked body (the connection is closed), or grows its buffers
//! past `REQUEST_BYTES_MAX` (a larger request closes the connection); with `--relay`, serves
//! two calls at once (a second connection waits behind the call in flight).

use std::cell::RefCell;
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::rc::Rc;

use clap::{Parser, ValueEnum};
use memchr::memmem::Finder;
use monoio::buf::IoBufMut as _;
use monoio::io::{AsyncReadRent as _, AsyncWriteRentExt as _};
use monoio::net::TcpStream;

/// The largest request (head and body) a connection takes; also its read buffer's size, which
/// is allocated once (tidemark's read chunk).
const REQUEST_BYTES_MAX: usize = 16 * 1024;
/// Initial size of a connection's write buffer (it grows once if pipelined answers need more,
/// and is reused after).
const WRITE_BUFFER_BYTES: usize = 4 * 1024;
/// Header lines parsed per request (httparse's array, on the stack).
const HEADERS_MAX: usize = 32;
/// Ring entries, tidemark's (runtime-notes §0: the default; memlock cost about 105 KiB).
const RING_ENTRIES: u32 = 1024;
/// The listen backlog, tidemark's `LISTEN_BACKLOG`.
const LISTEN_BACKLOG: i32 = 1024;

const HEAD_BEFORE_LENGTH: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
Mcp-Session-Id: tidemark-bare\r\nContent-Length: ";
const BODY_BEFORE_ID: &[u8] = br#"{"jsonrpc":"2.0","id":"#;
const BODY_AFTER_ID: &[u8] = br#","result":{"protocolVersion":"2025-11-25"}}"#;
/// `--relay`'s answer to a notification (a body without an id): accepted, nothing to say.
const ACCEPTED: &[u8] = b"HTTP/1.1 202 Accepted\r\nMcp-Session-Id: tidemark-bare\r\n\
Content-Length: 0\r\n\r\n";
/// Lines the relay's child may write before the answer to a call (its notifications), past
/// which the connection is closed rather than read forever.
const RELAY_LINES_MAX: usize = 1000;

#[derive(Parser, Debug)]
#[command(version, about = "A bare monoio HTTP/1.1 server: the limit for tidemark's hot path")]
struct Args {
    /// Address to listen on (port 0: any free port; the bound one is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Worker threads, one runtime each.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// I/O driver, as tidemark's `--driver`.
    #[arg(long, value_enum, default_value_t = DriverChoice::Auto)]
    driver: DriverChoice,
    /// Relay every request's body to this stdio command's stdin and answer with its reply
    /// line (one child per worker): the bare limit of a stdio bridge at one call in flight.
    #[arg(long, value_name = "COMMAND")]
    relay: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum DriverChoice {
    /// io_uring with the best ring flags the kernel takes, else epoll.
    Auto,
    /// io_uring only.
    Uring,
    /// epoll (monoio's legacy driver).
    Epoll,
}

type UringRt = monoio::Runtime<monoio::time::TimeDriver<monoio::IoUringDriver>>;
type EpollRt = monoio::Runtime<monoio::time::TimeDriver<monoio::LegacyDriver>>;

fn main() {
    let args = Args::parse();
    let threads = args.threads.max(1);
    let first =
        listener(args.listen).unwrap_or_else(|e| fail(&format!("bind {}: {e}", args.listen)));
    let bound = first.local_addr().unwrap_or_else(|e| fail(&format!("local_addr: {e}")));
    let mut listeners = vec![first];
    for _ in 1..threads {
        listeners.push(listener(bound).unwrap_or_else(|e| fail(&format!("bind {bound}: {e}"))));
    }
    let cpus = allowed_cpus();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let mut workers = Vec::new();
    for (index, listener) in listeners.into_iter().enumerate() {
        let pin = (threads <= cpus.len()).then(|| cpus[index]);
        let ready = ready_tx.clone();
        let driver = args.driver;
        let relay = args.relay.clone();
        workers.push(std::thread::spawn(move || {
            if let Some(cpu) = pin {
                let _ = monoio::utils::bind_to_cpu_set([cpu]);
            }
            let relay = relay.map(|command| {
                Rc::new(RefCell::new(
                    Relay::spawn(&command).unwrap_or_else(|e| fail(&format!("--relay: {e}"))),
                ))
            });
            run(driver, listener, relay, ready);
        }));
    }
    let mut got = "";
    for _ in 0..threads {
        match ready_rx.recv() {
            Ok(Ok(name)) => got = name,
            Ok(Err(e)) => fail(&e),
            Err(_) => fail("a worker ended before its runtime was built"),
        }
    }
    println!("tidemark-bare: listening on http://{bound}/mcp ({threads} thread(s), driver {got})");
    for worker in workers {
        let _ = worker.join();
    }
}

fn fail(message: &str) -> ! {
    eprintln!("tidemark-bare: {message}");
    std::process::exit(2);
}

/// A non-blocking SO_REUSEPORT listener with TCP_NODELAY, as tidemark's `reuseport_listener`.
fn listener(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nodelay(true)?;
    socket.bind(&addr.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// The CPUs this process may run on (`Cpus_allowed_list`, so `taskset` is respected).
fn allowed_cpus() -> Vec<usize> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let Some(line) = status.lines().find(|l| l.starts_with("Cpus_allowed_list:")) else {
        return vec![0];
    };
    let mut cpus = Vec::new();
    for part in line.split(':').nth(1).unwrap_or("").trim().split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.trim().parse::<usize>(), b.trim().parse::<usize>()) {
            cpus.extend(a..=b);
        }
    }
    if cpus.is_empty() {
        cpus.push(0);
    }
    cpus
}

/// tidemark's ring set-up, flag set by flag set (runtime::build_uring).
fn build_uring() -> Option<(UringRt, &'static str)> {
    type RingFlags = fn(&mut io_uring::Builder);
    let attempts: [(&str, RingFlags); 3] = [
        ("io_uring+single_issuer+defer_taskrun", |b| {
            b.setup_single_issuer().setup_defer_taskrun();
        }),
        ("io_uring+coop_taskrun", |b| {
            b.setup_coop_taskrun();
        }),
        ("io_uring", |_| {}),
    ];
    for (name, flags) in attempts {
        let mut urb = io_uring::IoUring::builder();
        flags(&mut urb);
        let built = monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
            .with_entries(RING_ENTRIES)
            .uring_builder(urb)
            .enable_timer()
            .build();
        if let Ok(rt) = built {
            return Some((rt, name));
        }
    }
    None
}

/// One worker: its runtime (as tidemark picks it), then the accept loop forever.
fn run(
    choice: DriverChoice,
    listener: std::net::TcpListener,
    relay: Option<Rc<RefCell<Relay>>>,
    ready: std::sync::mpsc::Sender<Result<&'static str, String>>,
) {
    let forced_epoll = std::env::var_os("MONOIO_FORCE_LEGACY_DRIVER").is_some();
    let uring = match choice {
        DriverChoice::Auto | DriverChoice::Uring if !forced_epoll => build_uring(),
        _ => None,
    };
    match (uring, choice) {
        (Some((mut rt, name)), _) => {
            let _ = ready.send(Ok(name));
            rt.block_on(accept_loop(listener, relay));
        }
        (None, DriverChoice::Uring) => {
            let _ = ready.send(Err("io_uring is not available; use --driver epoll".into()));
        }
        (None, _) => match build_epoll() {
            Ok(mut rt) => {
                let _ = ready.send(Ok("epoll"));
                rt.block_on(accept_loop(listener, relay));
            }
            Err(e) => {
                let _ = ready.send(Err(format!("epoll runtime failed: {e}")));
            }
        },
    }
}

fn build_epoll() -> std::io::Result<EpollRt> {
    monoio::RuntimeBuilder::<monoio::LegacyDriver>::new().enable_timer().build()
}

async fn accept_loop(listener: std::net::TcpListener, relay: Option<Rc<RefCell<Relay>>>) {
    let listener = monoio::net::TcpListener::from_std(listener)
        .unwrap_or_else(|e| fail(&format!("listener could not join the runtime: {e}")));
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                monoio::spawn(serve(stream, relay.clone()));
            }
            // EMFILE and the like: wait instead of spinning.
            Err(_) => monoio::time::sleep(std::time::Duration::from_millis(10)).await,
        }
    }
}

/// One connection until the peer closes it or sends what this server does not take.
async fn serve(mut stream: TcpStream, relay: Option<Rc<RefCell<Relay>>>) {
    let id_marker = Finder::new(b"\"id\":");
    let mut input: Vec<u8> = Vec::with_capacity(REQUEST_BYTES_MAX);
    let mut output: Vec<u8> = Vec::with_capacity(WRITE_BUFFER_BYTES);
    loop {
        let mut taken = 0;
        loop {
            match request(&input[taken..], &id_marker) {
                Parsed::Complete { len, body_from, id } => {
                    let request = &input[taken..taken + len];
                    let id = id.map(|(from, to)| &request[from..to]);
                    if let Some(relay) = &relay {
                        if relay.borrow_mut().call(&request[body_from..], id, &mut output).is_err()
                        {
                            return;
                        }
                    } else {
                        answer(&mut output, id.unwrap_or(b"null"));
                    }
                    taken += len;
                }
                Parsed::Partial => break,
                Parsed::Refused => return,
            }
        }
        if taken > 0 {
            input.copy_within(taken.., 0);
            input.truncate(input.len() - taken);
        }
        if !output.is_empty() {
            let (written, buf) = stream.write_all(output).await;
            output = buf;
            output.clear();
            if written.is_err() {
                return;
            }
        }
        if input.len() == input.capacity() {
            return; // a request over REQUEST_BYTES_MAX
        }
        let len = input.len();
        let (read, buf) = stream.read(input.slice_mut(len..)).await;
        input = buf.into_inner();
        if !matches!(read, Ok(n) if n > 0) {
            return;
        }
    }
}

/// What the front of a connection's input holds.
#[derive(Debug, PartialEq, Eq)]
enum Parsed {
    /// One whole request of `len` bytes, its body from `body_from`; `id`: where its raw id
    /// value lies in it.
    Complete { len: usize, body_from: usize, id: Option<(usize, usize)> },
    /// Not all of it yet.
    Partial,
    /// Not HTTP/1.1 this server takes (bad head, chunked body, bad or huge `Content-Length`).
    Refused,
}

fn request(input: &[u8], id_marker: &Finder<'_>) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; HEADERS_MAX];
    let mut head = httparse::Request::new(&mut headers);
    let head_len = match head.parse(input) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Refused,
    };
    let mut body_len = 0usize;
    for header in head.headers.iter() {
        if header.name.eq_ignore_ascii_case("content-length") {
            match decimal(header.value) {
                Some(n) if n <= REQUEST_BYTES_MAX => body_len = n,
                _ => return Parsed::Refused,
            }
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            return Parsed::Refused;
        }
    }
    let len = head_len + body_len;
    if input.len() < len {
        return Parsed::Partial;
    }
    let id = raw_id(&input[head_len..len], id_marker).map(|(a, b)| (head_len + a, head_len + b));
    Parsed::Complete { len, body_from: head_len, id }
}

fn decimal(text: &[u8]) -> Option<usize> {
    if text.is_empty() || text.len() > 9 {
        return None;
    }
    text.iter().try_fold(0usize, |n, &d| d.is_ascii_digit().then(|| n * 10 + usize::from(d - b'0')))
}

/// The raw value after the body's first `"id":`: a string with its quotes, or everything up to
/// the next `,`, `}` or whitespace.
fn raw_id(body: &[u8], id_marker: &Finder<'_>) -> Option<(usize, usize)> {
    let mut from = id_marker.find(body)? + id_marker.needle().len();
    while body.get(from).is_some_and(u8::is_ascii_whitespace) {
        from += 1;
    }
    let rest = body.get(from..)?;
    let len = if rest.first() == Some(&b'"') {
        let mut i = 1;
        while i < rest.len() && rest[i] != b'"' {
            i += if rest[i] == b'\\' { 2 } else { 1 };
        }
        (i < rest.len()).then_some(i + 1)?
    } else {
        rest.iter().position(|&c| c == b',' || c == b'}' || c.is_ascii_whitespace())?
    };
    (len > 0).then_some((from, from + len))
}

/// Appends the one answer there is, carrying `id`.
fn answer(output: &mut Vec<u8>, id: &[u8]) {
    let body_len = BODY_BEFORE_ID.len() + id.len() + BODY_AFTER_ID.len();
    output.extend_from_slice(HEAD_BEFORE_LENGTH);
    push_decimal(output, body_len);
    output.extend_from_slice(b"\r\n\r\n");
    output.extend_from_slice(BODY_BEFORE_ID);
    output.extend_from_slice(id);
    output.extend_from_slice(BODY_AFTER_ID);
}

/// `--relay`'s child and its pipes, used blocking (see the module doc).
struct Relay {
    _child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// The reply line read; reused.
    line: Vec<u8>,
    /// The request line written (body and newline: one write); reused.
    request: Vec<u8>,
}

impl Relay {
    fn spawn(command: &str) -> std::io::Result<Relay> {
        let mut words = command.split_whitespace();
        let program = words.next().ok_or_else(|| std::io::Error::other("an empty command"))?;
        let mut child = Command::new(program)
            .args(words)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdin = child.stdin.take().ok_or_else(|| std::io::Error::other("no stdin"))?;
        let stdout = child.stdout.take().ok_or_else(|| std::io::Error::other("no stdout"))?;
        Ok(Relay {
            _child: child,
            stdin,
            stdout: BufReader::new(stdout),
            line: Vec::new(),
            request: Vec::new(),
        })
    }

    /// Writes `body` to the child as one line; for a call (`id`), reads the child's reply and
    /// appends the HTTP answer carrying it, else appends `202`.
    fn call(
        &mut self,
        body: &[u8],
        id: Option<&[u8]>,
        output: &mut Vec<u8>,
    ) -> std::io::Result<()> {
        self.request.clear();
        self.request.extend_from_slice(body);
        self.request.push(b'\n');
        self.stdin.write_all(&self.request)?;
        if id.is_none() {
            output.extend_from_slice(ACCEPTED);
            return Ok(());
        }
        for _ in 0..RELAY_LINES_MAX {
            self.line.clear();
            if self.stdout.read_until(b'\n', &mut self.line)? == 0 {
                return Err(std::io::Error::other("the child closed its stdout"));
            }
            let reply = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
            if memchr::memmem::find(reply, b"\"id\"").is_some() {
                respond(output, reply);
                return Ok(());
            }
        }
        Err(std::io::Error::other("no reply within RELAY_LINES_MAX lines"))
    }
}

fn push_decimal(output: &mut Vec<u8>, mut n: usize) {
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
    output.extend_from_slice(&digits[at..]);
}

/// Appends a `200` carrying `body` as it is.
fn respond(output: &mut Vec<u8>, body: &[u8]) {
    output.extend_from_slice(HEAD_BEFORE_LENGTH);
    push_decimal(output, body.len());
    output.extend_from_slice(b"\r\n\r\n");
    output.extend_from_slice(body);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn post(body: &str) -> Vec<u8> {
        format!("POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}", body.len())
            .into_bytes()
    }

    #[test]
    fn pipelined_requests_are_answered_with_their_ids() {
        let marker = Finder::new(b"\"id\":");
        let mut input = post(r#"{"jsonrpc":"2.0","id":42,"method":"ping"}"#);
        input.extend(post(r#"{"jsonrpc":"2.0","id": "a\"b","method":"ping"}"#));
        input.extend(post(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#));
        let mut ids = Vec::new();
        let mut at = 0;
        while let Parsed::Complete { len, id, .. } = request(&input[at..], &marker) {
            ids.push(id.map(|(a, b)| input[at + a..at + b].to_vec()));
            at += len;
        }
        assert_eq!(at, input.len());
        assert_eq!(ids, [Some(b"42".to_vec()), Some(br#""a\"b""#.to_vec()), None]);
    }

    #[test]
    fn the_answer_frames_its_body() {
        let mut out = Vec::new();
        answer(&mut out, b"7");
        let text = String::from_utf8(out).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.ends_with(&format!("Content-Length: {}", body.len())));
        assert_eq!(body, r#"{"jsonrpc":"2.0","id":7,"result":{"protocolVersion":"2025-11-25"}}"#);
    }

    #[test]
    fn partial_chunked_and_oversized_requests() {
        let marker = Finder::new(b"\"id\":");
        let whole = post(r#"{"id":1}"#);
        assert_eq!(request(&whole[..whole.len() - 1], &marker), Parsed::Partial);
        assert_eq!(request(b"POST / HTTP/1.1\r\nHost: x\r\n", &marker), Parsed::Partial);
        let chunked = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(request(chunked, &marker), Parsed::Refused);
        let huge = format!("POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n", REQUEST_BYTES_MAX + 1);
        assert_eq!(request(huge.as_bytes(), &marker), Parsed::Refused);
    }

    #[test]
    fn the_relay_answers_a_call_by_the_childs_line_and_a_notification_by_202() {
        // `cat` writes back each line it reads: the call's reply is its own request.
        let mut relay = Relay::spawn("cat").unwrap();
        let mut out = Vec::new();
        relay
            .call(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#, None, &mut out)
            .unwrap();
        assert_eq!(out, ACCEPTED);
        out.clear();
        let call = br#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#;
        relay.call(call, Some(b"3"), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.ends_with(&format!("Content-Length: {}", body.len())));
        // The notification's line came first and carries no id: it is skipped.
        assert_eq!(body.as_bytes(), call);
    }
}
