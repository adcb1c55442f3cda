//! Goal: issue 40 §1, no heap allocation per steady-state request: on an established session
//! after warm-up, each case below allocates on the worker thread at most its budget (goal 0 for
//! every case) from the read of its bytes to the write of its answer; a budget only goes down.
//! On a miss the test prints the count per request and the allocation sites (the server's
//! frames of each allocation's backtrace, most frequent first).
//!
//! Method: the server runs in this test's process (`tidemark::Server::start`, one worker, the
//! built-in demo tools, real sockets on 127.0.0.1) under a counting global allocator. Only
//! allocations made on the worker threads (named `tidemark-N`) while a measured window is open
//! are counted: `alloc`, `alloc_zeroed` and `realloc` (a growing buffer is an allocation), not
//! frees. The client is this thread (not counted), on one kept-alive connection; each step
//! waits for its whole answer, so the window holds exactly `MEASURED` requests' work (plus
//! anything the worker does between them, which counts too: a timer's work is per unit of
//! time, and none is due in a window this short, except in the case made for it: the timer
//! wheel's).

// The sites of a miss are gathered from every worker thread into one map: a test's counter,
// not server state, so the per-core rule behind the lint does not apply.
#![allow(clippy::disallowed_types)]

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::HashMap;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use support::{read_response, request, send, Response, POST_HEADERS};

/// Requests before the window opens: pools, rings, tables and caches reach their steady size.
const WARM_UP: usize = 300;
/// Requests in the measured window.
const MEASURED: usize = 100;

/// Allocations per request allowed for each case (goal: 0). Lower a budget when the test says
/// the case came in under it; never raise one (issue 40 §1).
/// Measured at the test's start (f33cdac): ping 20, echo 63, 2026-07-28 echo 68, slow_counter
/// 90, resume 2, 409 65, keyed retry 55. After the first steps of issue 40 (per-core event
/// and answer buffers, instant built-in tools, inline ids, a socket read without allocation):
/// ping 16, echo 40, 2026-07-28 echo 44, slow_counter 58, 409 42, keyed 43. With the body
/// decoded onto a per-connection tape and built-in tools reading it in place: ping 0, echo 1,
/// slow_counter 14, 2026-07-28 echo 3, keyed 4. With events copied into their ring's one payload
/// buffer, the progress token inline, an async built-in tool's future in a slot the tool
/// reuses, the 2026-07-28 binding streamed and computed only when needed, and the scoped key in
/// a per-core buffer: 0 for every case, the table.
const BUDGETS: &[(&str, u64)] = &[
    ("ping", 0),
    ("echo (SSE)", 0),
    ("echo (--response-mode json)", 0),
    ("2026-07-28 echo", 0),
    ("slow_counter, 10 events", 0),
    ("resume of 100 buffered events", 0),
    ("409 re-POST", 0),
    ("keyed 2026-07-28 retry", 0),
    ("ping, the timer wheel re-arming its session", 0),
    ("bridged echo (stdio upstream)", 9),
];

/// Allocations a window may hold beyond its budget: none. A request that finds its session's
/// entry on the reaper's timer wheel far ahead brings it forward (`SessionTable::keep_close`,
/// at most once per the shortest session timeout), and the reaper re-arms the sessions it looks
/// at; both once pushed onto a slot's own vector, which allocated when the slot had no capacity
/// (this was 4). The wheel's entries now live in one slab whose freed entries are taken again,
/// so neither allocates after warm-up.
const TICK_SLACK: u64 = 0;

/// Set (to anything) to print every case's allocation sites, not only a miss's.
const SITES_ENV: &str = "TIDEMARK_ALLOCATION_SITES";

static COUNTING: AtomicBool = AtomicBool::new(false);
static RECORD_SITES: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static SITES: Mutex<Option<HashMap<String, u64>>> = Mutex::new(None);

thread_local! {
    /// Inside the counter's own work (classifying, recording a site): its allocations are not
    /// the server's.
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

struct Counting;

// SAFETY: every method forwards to `System` unchanged; the counting around it never touches
// the memory handed out. (A global allocator cannot be written without `unsafe`; the crate
// denies it elsewhere.)
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation();
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn note_allocation() {
    if !COUNTING.load(Relaxed) {
        return;
    }
    // `try_with`: a thread's locals may already be gone while it exits.
    let _ = BUSY.try_with(|busy| {
        if busy.replace(true) {
            return;
        }
        if support::heap::is_worker() {
            ALLOCATIONS.fetch_add(1, Relaxed);
            if RECORD_SITES.load(Relaxed) {
                record_site();
            }
        }
        busy.set(false);
    });
}

/// Files of the server whose frames name a site (std, the allocator and this test are left
/// out), the innermost few.
fn record_site() {
    let trace = std::backtrace::Backtrace::force_capture().to_string();
    let mut frames = Vec::new();
    let mut lines = trace.lines().peekable();
    while let Some(line) = lines.next() {
        let function = line.trim_start().split_once(": ").map_or("", |(_, f)| f);
        let place = lines.peek().map_or("", |l| l.trim_start());
        let ours = place.starts_with("at ./src/") || place.contains("/tidemark/src/");
        if function.is_empty() || !place.starts_with("at ") {
            continue;
        }
        if ours || (frames.is_empty() && !is_plumbing(function)) {
            frames.push(format!("{function} {}", place.trim_start_matches("at ")));
        }
        if frames.len() == 4 {
            break;
        }
    }
    let site = frames.join("\n      ← ");
    let mut sites = SITES.lock().unwrap_or_else(|p| p.into_inner());
    *sites.get_or_insert_with(HashMap::new).entry(site).or_default() += 1;
}

/// Frames of the counter and of the allocation machinery itself.
fn is_plumbing(function: &str) -> bool {
    [
        "std::backtrace",
        "std::thread::local",
        "allocations::",
        "alloc::alloc",
        "__rust",
        "alloc::raw_vec",
        "core::",
    ]
    .iter()
    .any(|p| function.contains(p))
}

/// The in-process server and one kept-alive connection to it.
struct Bench {
    running: tidemark::Running,
    conn: TcpStream,
    host: String,
}

impl Bench {
    fn start(adjust: impl FnOnce(&mut tidemark::Config)) -> Bench {
        let mut cfg = tidemark::Config::default();
        cfg.server.listen = "127.0.0.1:0".parse().expect("address");
        cfg.server.threads = 1;
        adjust(&mut cfg);
        let running = tidemark::Server::new(cfg).start().expect("start the server");
        let conn = TcpStream::connect(running.local_addr).expect("connect");
        conn.set_nodelay(true).expect("nodelay");
        let host = running.local_addr.to_string();
        Bench { running, conn, host }
    }

    fn exchange(&mut self, method: &str, headers: &[(&str, &str)], body: Option<&str>) -> Response {
        let mut all: Vec<(&str, &str)> = POST_HEADERS.to_vec();
        all.extend_from_slice(headers);
        send(&mut self.conn, &request(method, "/mcp", &self.host, &all, body));
        read_response(&mut self.conn)
    }

    fn post(&mut self, headers: &[(&str, &str)], body: &str) -> Response {
        self.exchange("POST", headers, Some(body))
    }

    /// initialize + notifications/initialized at 2025-11-25: the session id.
    fn open_session(&mut self) -> String {
        let r = self.post(&[], support::INIT);
        assert_eq!(r.status, 200, "initialize: {}", r.text());
        let sid = r.header("Mcp-Session-Id").expect("session id").to_owned();
        let done = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        assert_eq!(self.post(&[("Mcp-Session-Id", &sid)], done).status, 202);
        sid
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        self.running.shutdown();
    }
}

/// Runs `step(i)` `WARM_UP` times, then `MEASURED` times counting: allocations in the window.
fn count(bench: &mut Bench, mut step: impl FnMut(&mut Bench, usize)) -> u64 {
    for i in 0..WARM_UP {
        step(bench, i);
    }
    ALLOCATIONS.store(0, Relaxed);
    COUNTING.store(true, Relaxed);
    for i in WARM_UP..WARM_UP + MEASURED {
        step(bench, i);
    }
    COUNTING.store(false, Relaxed);
    ALLOCATIONS.load(Relaxed)
}

/// Counts a case; over its budget, runs it again recording sites and reports them.
fn check(
    case: &str,
    bench: &mut Bench,
    mut step: impl FnMut(&mut Bench, usize),
    misses: &mut Vec<String>,
) {
    let budget = BUDGETS.iter().find(|(c, _)| *c == case).expect("a budget").1;
    let total = count(bench, &mut step);
    let per_request = total as f64 / MEASURED as f64;
    eprintln!("allocations: {case}: {per_request:.2} per request (budget {budget}, goal 0)");
    let within = total <= budget * MEASURED as u64 + TICK_SLACK;
    let floor = total / MEASURED as u64;
    if within && floor < budget {
        eprintln!("allocations: {case}: under its budget: lower it to {floor}");
    }
    if within && std::env::var_os(SITES_ENV).is_none() {
        return;
    }
    *SITES.lock().unwrap_or_else(|p| p.into_inner()) = Some(HashMap::new());
    RECORD_SITES.store(true, Relaxed);
    count(bench, &mut step);
    RECORD_SITES.store(false, Relaxed);
    let sites = SITES.lock().unwrap_or_else(|p| p.into_inner()).take().unwrap_or_default();
    let mut sites: Vec<(String, u64)> = sites.into_iter().collect();
    sites.sort_by_key(|site| std::cmp::Reverse(site.1));
    let mut report = format!("{case}: {per_request:.2} allocations per request, budget {budget}");
    for (site, n) in sites {
        let each = n as f64 / MEASURED as f64;
        report.push_str(&format!("\n  {each:>6.2} × {site}"));
    }
    if within {
        eprintln!("{report}");
    } else {
        misses.push(report);
    }
}

fn echo_call(id: usize) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"hello"}}}}}}"#
    )
}

fn assert_answer(r: &Response, id: usize, ctx: &str) {
    assert_eq!(r.status, 200, "{ctx}: {}", r.text());
    let text = r.text();
    assert!(text.contains(&format!(r#""id":{id}"#)), "{ctx}: {text}");
}

fn legacy_cases(misses: &mut Vec<String>) {
    let mut bench = Bench::start(|_| {});
    let sid = bench.open_session();
    let session = [("Mcp-Session-Id", sid.as_str())];
    check(
        "ping",
        &mut bench,
        |b, i| {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"ping"}}"#);
            assert_answer(&b.post(&session, &body), i, "ping");
        },
        misses,
    );
    check(
        "echo (SSE)",
        &mut bench,
        |b, i| assert_answer(&b.post(&session, &echo_call(i)), i, "echo"),
        misses,
    );
    check(
        "slow_counter, 10 events",
        &mut bench,
        |b, i| {
            let body = support::call(i as u64, "slow_counter", r#"{"steps":10}"#, true);
            let r = b.post(&session, &body);
            assert_answer(&r, i, "slow_counter");
            assert_eq!(support::messages(&r.events()).len(), 11, "10 progress + result");
        },
        misses,
    );
    // A finished 100-step call, resumed from its first event each time: 99 progress events
    // and the result replayed from the ring.
    let body = support::call(1_000_000, "slow_counter", r#"{"steps":100}"#, true);
    let first = b_first_event_id(&mut bench, &session, &body);
    check(
        "resume of 100 buffered events",
        &mut bench,
        |b, _| {
            let headers = [("Mcp-Session-Id", sid.as_str()), ("Last-Event-ID", first.as_str())];
            let r = b.exchange("GET", &headers, None);
            assert_eq!(r.status, 200, "resume: {}", r.text());
            assert_eq!(support::messages(&r.events()).len(), 100, "99 progress + result");
        },
        misses,
    );
    // The same id as a finished, delivered non-idempotent call: 409 -31002 every time.
    check(
        "409 re-POST",
        &mut bench,
        |b, _| {
            let r = b.post(&session, &body);
            assert_eq!(r.status, 409, "re-POST: {}", r.text());
        },
        misses,
    );
}

/// POSTs `body` on the session, reads its stream to the end: its first event's id.
fn b_first_event_id(bench: &mut Bench, session: &[(&str, &str)], body: &str) -> String {
    let r = bench.post(session, body);
    assert_eq!(r.status, 200, "{}", r.text());
    let events = support::messages(&r.events());
    events[0].id.clone().expect("an event id")
}

fn json_mode_case(misses: &mut Vec<String>) {
    let mut bench = Bench::start(|cfg| cfg.sessions.response_mode = tidemark::ResponseMode::Json);
    let sid = bench.open_session();
    let session = [("Mcp-Session-Id", sid.as_str())];
    check(
        "echo (--response-mode json)",
        &mut bench,
        |b, i| assert_answer(&b.post(&session, &echo_call(i)), i, "echo json"),
        misses,
    );
}

const MODERN_META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;

fn modern_cases(misses: &mut Vec<String>) {
    let mut bench = Bench::start(|_| {});
    let headers = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "echo"),
    ];
    let echo = |id: usize| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"hello"}},{MODERN_META}}}}}"#
        )
    };
    check(
        "2026-07-28 echo",
        &mut bench,
        |b, i| assert_answer(&b.post(&headers, &echo(i)), i, "modern echo"),
        misses,
    );
    let keyed = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "echo"),
        ("Idempotency-Key", "allocations-key"),
    ];
    check(
        "keyed 2026-07-28 retry",
        &mut bench,
        |b, i| {
            let r = b.post(&keyed, &echo(i));
            assert_eq!(r.status, 200, "keyed retry: {}", r.text());
        },
        misses,
    );
}

/// Pause after each ping of the timer wheel's case: its window of `MEASURED` pings spans at
/// least two reaper ticks (every 250 ms).
const REARM_CASE_PAUSE: std::time::Duration = std::time::Duration::from_millis(5);

/// `ping` with the session's timer-wheel entry moved twice a reaper tick: with the shortest
/// session timeout one tick (`--stream-retention-secs` 0.25 s), each tick pops the session and
/// re-arms it at its idle deadline (the wheel's far end), and the next ping brings it back
/// (`SessionTable::keep_close`). Each move once pushed onto a slot that had never held an
/// entry and allocated; the slab takes the entry it just freed.
fn timer_wheel_case(misses: &mut Vec<String>) {
    let mut bench = Bench::start(|cfg| {
        cfg.sessions.stream_retention = std::time::Duration::from_millis(250);
    });
    let sid = bench.open_session();
    let session = [("Mcp-Session-Id", sid.as_str())];
    check(
        "ping, the timer wheel re-arming its session",
        &mut bench,
        |b, i| {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"ping"}}"#);
            assert_answer(&b.post(&session, &body), i, "ping");
            std::thread::sleep(REARM_CASE_PAUSE);
        },
        misses,
    );
}

/// The stdio upstream the bridged case fronts (its allocations are its own process's).
const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/stdio_upstream.py");

/// `tools/call echo` through `--upstream stdio:…` (one child per session): the worker's part of a
/// bridged call, from the client's request to its answer, the child's reply read in between. Not
/// among issue 40's cases (its goal 0 is for built-in tools); counted since 2026-12-07 at 11.0–11.5
/// a call so it cannot grow unseen, 10.0–10.1 since the request is encoded into a buffer the
/// child's stdin queue lends (`Transport::lend`), 9.1 since an answered request's slot serves the
/// next (`Peer`'s spare slots), 8.0 since the answer's result is checked without `serde_json`
/// (whose skip kept its nesting on a heap stack; `line_head::check_value`). Left: the answer's
/// copy out of the stdout line (`deliver`), `call_bridge`'s boxed future and two
/// vectors, the stream's signals and wake forwarding (`StreamState::signals`, `forward_wake`,
/// `Signal::hold` twice) and the driver's wait (`runtime::stream::wait`).
fn bridged_case(misses: &mut Vec<String>) {
    let mut bench = Bench::start(|cfg| {
        let spec = format!("stdio:python3 {FIXTURE}");
        cfg.upstream.specs = vec![tidemark::UpstreamSpec::parse(&spec).expect("the spec")];
    });
    let sid = bench.open_session();
    let session = [("Mcp-Session-Id", sid.as_str())];
    check(
        "bridged echo (stdio upstream)",
        &mut bench,
        |b, i| assert_answer(&b.post(&session, &echo_call(i)), i, "bridged echo"),
        misses,
    );
}

#[test]
fn steady_state_requests_allocate_within_their_budgets() {
    let mut misses = Vec::new();
    legacy_cases(&mut misses);
    json_mode_case(&mut misses);
    modern_cases(&mut misses);
    timer_wheel_case(&mut misses);
    bridged_case(&mut misses);
    assert!(misses.is_empty(), "over budget:\n{}", misses.join("\n"));
}
