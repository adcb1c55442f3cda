//! Goal: issue 40 item 4, an idle legacy session (`initialize` + `notifications/initialized`,
//! then nothing) within its budgets: its live heap bytes (`IDLE_SESSION_HEAP_BYTES_BUDGET`,
//! tight: fails when a session takes one more block or a larger size class, and says which)
//! and the server's resident bytes (`IDLE_SESSION_BYTES_BUDGET`, loose: RSS is noisy, but it
//! sees what the heap count cannot: the allocator's pages, memory not from the heap, the
//! release binary).
//!
//! Heap: the server runs in this test's process (`tidemark::Server`, one worker, real sockets on
//! 127.0.0.1) under a global allocator that forwards to mimalloc (the release binary's) and
//! keeps, for allocations made and freed on the worker threads, the live bytes of every block
//! at its mimalloc size (`mi_usable_size`: the size class, what the block really takes). The
//! sum is split at `CONTAINER_BLOCK_BYTES`: a smaller block is a part of one session (its
//! `Session`, notifier, …), a larger one is a table shared by the core's sessions (the session
//! map, the registry's map, the timer wheel's slots), whose growth comes in steps. Live bytes
//! after `IDLE_SESSIONS_MEASURED` more sessions, minus before, over that count: exact and
//! repeatable for the parts (same bytes every run), within a few bytes for the tables.
//!
//! RSS: the real binary, one worker; the server's `VmRSS` from `/proc/<pid>/status` before and
//! after `IDLE_RSS_SESSIONS_MEASURED` sessions. The two tests take turns (`ONE_AT_A_TIME`) so
//! neither's server shares the cores with the other's.

// The counters are the test's, shared by the process's threads, not server state.
#![allow(clippy::disallowed_types)]

mod support;

use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use support::*;

/// Heap bytes one idle session's own blocks may take (blocks under `CONTAINER_BLOCK_BYTES`),
/// at mimalloc's size classes. Measured 432 B: its `Rc<RefCell<Session>>` (a 384-B block, 376
/// B used) and its notifier (`Rc<SessionNotifier>`, a 48-B block); 513 B before issue 40's
/// packing (448-B and 64-B blocks). One more block of 16 B a session, or the next size class,
/// fails it; the blocks by size are printed.
const IDLE_SESSION_HEAP_BYTES_BUDGET: usize = 440;

/// Heap bytes one idle session may take with its share of the core's tables (the session map,
/// the registry's map of session starts, the timer wheel's slots): these grow by doubling, so
/// their share moves with the count and, for the wheel, with how many sessions a slot got
/// (measured 522 B, of which the tables 87–91 B, at 2 000 → 14 000 sessions; at 100 k the
/// session map's share is smaller, 1.31 buckets of 17 B a session).
const IDLE_SESSION_HEAP_WITH_TABLES_BUDGET: usize = 545;

/// A block at least this large is a core's table, not a session's part: a session's largest
/// own block is its `Session` (384 B), a table's arrays pass this size by a few hundred
/// sessions.
const CONTAINER_BLOCK_BYTES: usize = 4096;

/// Sessions the heap bytes are counted over. The count puts the session map's growth at the
/// same step every run (2 000 → 14 000 sessions: 4 096 → 16 384 buckets), and a debug server
/// opens them in a few seconds.
const IDLE_HEAP_SESSIONS_MEASURED: usize = 12_000;

static PARTS_LIVE: AtomicI64 = AtomicI64::new(0);
/// Live blocks under `CONTAINER_BLOCK_BYTES` by size (index: size / 8), for the breakdown.
static PARTS_BY_SIZE: [AtomicI64; CONTAINER_BLOCK_BYTES / 8] =
    [const { AtomicI64::new(0) }; CONTAINER_BLOCK_BYTES / 8];
static TABLES_LIVE: AtomicI64 = AtomicI64::new(0);

/// One test's server at a time: each reads the cost of its own server's sessions.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[global_allocator]
static GLOBAL: support::heap::CountingMimalloc = support::heap::CountingMimalloc(note);

/// Adds (`sign` 1) or takes away (-1) block `p`'s size, when a worker thread made or frees it.
fn note(p: *mut u8, sign: i64) {
    if p.is_null() || !support::heap::is_worker() {
        return;
    }
    let size = support::heap::usable_size(p);
    if size < CONTAINER_BLOCK_BYTES {
        PARTS_LIVE.fetch_add(sign * size as i64, Relaxed);
        PARTS_BY_SIZE[size / 8].fetch_add(sign, Relaxed);
    } else {
        TABLES_LIVE.fetch_add(sign * size as i64, Relaxed);
    }
}

/// `VmRSS` (bytes) of process `pid`.
fn vm_rss(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let line = status.lines().find(|l| l.starts_with("VmRSS")).expect("VmRSS");
    let kib: usize = line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("kB");
    kib * 1024
}

/// Resident bytes one idle legacy session may cost the server (`initialize` +
/// `notifications/initialized`, then nothing): its `Session`, its entry in the core's session
/// table, the registry's record of its start and its notifier. The release binary measured
/// 628 B at 100 k (docs/performance.md, "Idle sessions"); 2 830 B before issue 40 (the ef6f4d3
/// binary reads 2 515 B here). Goal 600 B (issue 40 §4). This reading is RSS, which moves with
/// the allocator's pages and the tables' growth: on one tree it read 629, 664 and 725 B in
/// three runs at 60 000 sessions, so the budget is set where noise cannot fail it and any
/// regression of the kind issue 40 found (a session several hundred bytes larger) does. The
/// tight budget is the heap's (`IDLE_SESSION_HEAP_BYTES_BUDGET`); this one is kept for what
/// lies outside the heap count (the 600 B goal is measured on the release binary with
/// `tidemark-load sessions`, docs/performance.md).
const IDLE_SESSION_BYTES_BUDGET: usize = 900;

/// Sessions the RSS budget is measured over: enough that the table's growth and the allocator's
/// pages average out (36 MB at the budget; at 20 000 a run read 434–620 B for the same build),
/// few enough for a debug server in seconds.
const IDLE_RSS_SESSIONS_MEASURED: usize = 60_000;

/// Sessions opened, and their connections used, before the first reading, so the reading
/// counts sessions rather than the first touch of the allocator's pages and the buffers of the
/// connections.
const IDLE_SESSIONS_WARM_UP: usize = 2_000;

/// Connections the sessions are opened over, each pipelining `IDLE_SESSIONS_PIPELINED`.
const IDLE_OPEN_CONNECTIONS: usize = 4;
const IDLE_SESSIONS_PIPELINED: usize = 50;

/// Opens `count` sessions at `path` of `host` over `wires`: each wire pipelines a batch of
/// `initialize`s, then the batch's `notifications/initialized`; every answer must be 200 and 202.
fn open_idle_sessions(path: &str, host: &str, wires: &mut [Wire], count: usize) {
    let init = request("POST", path, host, &POST_HEADERS, Some(INIT));
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let mut left = count;
    while left > 0 {
        for wire in wires.iter_mut() {
            let batch = left.min(IDLE_SESSIONS_PIPELINED);
            left -= batch;
            send(&mut wire.stream, &init.repeat(batch));
            let mut notes = Vec::new();
            for _ in 0..batch {
                let r = wire.response(Duration::from_secs(10), "initialize");
                assert_eq!(r.status, 200, "initialize: {}", r.text());
                let sid = r.header("Mcp-Session-Id").expect("session id").to_owned();
                let mut h: Vec<(&str, &str)> = POST_HEADERS.to_vec();
                h.push(("Mcp-Session-Id", &sid));
                notes.extend(request("POST", path, host, &h, Some(initialized)));
            }
            send(&mut wire.stream, &notes);
            for _ in 0..batch {
                let r = wire.response(Duration::from_secs(10), "initialized");
                assert_eq!(r.status, 202, "notifications/initialized: {}", r.text());
            }
        }
    }
}

/// The server's resident bytes per idle session, measured over `IDLE_SESSIONS_MEASURED`.
fn idle_session_bytes(args: &[&str]) -> usize {
    let server = Server::start(args);
    let (path, host) = (server.path.clone(), server.host());
    let mut wires: Vec<Wire> =
        (0..IDLE_OPEN_CONNECTIONS).map(|_| Wire::new(server.connect())).collect();
    open_idle_sessions(&path, &host, &mut wires, IDLE_SESSIONS_WARM_UP);
    std::thread::sleep(Duration::from_millis(200));
    let before = vm_rss(server.pid());
    let started = Instant::now();
    open_idle_sessions(&path, &host, &mut wires, IDLE_RSS_SESSIONS_MEASURED);
    std::thread::sleep(Duration::from_millis(200));
    let after = vm_rss(server.pid());
    let per = after.saturating_sub(before) / IDLE_RSS_SESSIONS_MEASURED;
    eprintln!(
        "idle sessions: {IDLE_RSS_SESSIONS_MEASURED} opened in {:.1} s, VmRSS {} -> {} bytes: {per} B per session (budget {IDLE_SESSION_BYTES_BUDGET} B)",
        started.elapsed().as_secs_f64(),
        before,
        after
    );
    per
}

#[test]
fn an_idle_session_stays_within_its_resident_budget() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let args = ["--threads", "1", "--session-idle-secs", "3600"];
    let per = idle_session_bytes(&args);
    assert!(
        per <= IDLE_SESSION_BYTES_BUDGET,
        "an idle session costs {per} B of RSS, over its budget of {IDLE_SESSION_BYTES_BUDGET} B"
    );
}

/// Live heap bytes of the worker threads: (sessions' parts, the core's tables).
fn heap_live() -> (i64, i64) {
    (PARTS_LIVE.load(Relaxed), TABLES_LIVE.load(Relaxed))
}

/// Live small blocks by size now.
fn blocks_by_size() -> Vec<i64> {
    PARTS_BY_SIZE.iter().map(|n| n.load(Relaxed)).collect()
}

/// What the sessions' own blocks are: per size class, the blocks added per 100 sessions.
fn breakdown(before: &[i64], after: &[i64], sessions: usize) -> String {
    let per_100 = |n: i64| n as f64 * 100.0 / sessions as f64;
    let rows: Vec<String> = before
        .iter()
        .zip(after)
        .enumerate()
        .filter(|(_, (b, a))| (per_100(*a - *b)).abs() >= 0.5)
        .map(|(class, (b, a))| format!("{} B × {:.1}", class * 8, per_100(a - b)))
        .collect();
    format!("blocks per 100 sessions by size: {}", rows.join(", "))
}

/// Heap bytes per idle session on an in-process server: (its own parts, with its tables).
fn idle_session_heap_bytes() -> (usize, usize) {
    let mut cfg = tidemark::Config::default();
    cfg.server.listen = "127.0.0.1:0".parse().expect("address");
    cfg.server.threads = 1;
    cfg.sessions.session_idle = Duration::from_secs(3600);
    cfg.sessions.sessions_per_core_max = 4 * IDLE_HEAP_SESSIONS_MEASURED;
    let running = tidemark::Server::new(cfg).start().expect("start the server");
    let host = running.local_addr.to_string();
    let connect = || std::net::TcpStream::connect(running.local_addr).expect("connect");
    let mut wires: Vec<Wire> = (0..IDLE_OPEN_CONNECTIONS).map(|_| Wire::new(connect())).collect();
    open_idle_sessions("/mcp", &host, &mut wires, IDLE_SESSIONS_WARM_UP);
    // The worker answered the last request before it dropped that request's buffers.
    std::thread::sleep(Duration::from_millis(100));
    let (parts_before, tables_before) = heap_live();
    let blocks_before = blocks_by_size();
    let started = Instant::now();
    open_idle_sessions("/mcp", &host, &mut wires, IDLE_HEAP_SESSIONS_MEASURED);
    std::thread::sleep(Duration::from_millis(100));
    let (parts_after, tables_after) = heap_live();
    let blocks_after = blocks_by_size();
    running.shutdown();
    let per = |bytes: i64| usize::try_from(bytes.max(0)).unwrap_or(0) / IDLE_HEAP_SESSIONS_MEASURED;
    let parts = per(parts_after - parts_before);
    let tables = per(tables_after - tables_before);
    eprintln!(
        "idle sessions: {IDLE_HEAP_SESSIONS_MEASURED} opened in {:.1} s: live heap {parts} B per session in its own blocks (budget {IDLE_SESSION_HEAP_BYTES_BUDGET} B) + {tables} B of the core's tables = {} B (budget {IDLE_SESSION_HEAP_WITH_TABLES_BUDGET} B)",
        started.elapsed().as_secs_f64(),
        parts + tables
    );
    eprintln!(
        "idle sessions: {}",
        breakdown(&blocks_before, &blocks_after, IDLE_HEAP_SESSIONS_MEASURED)
    );
    (parts, parts + tables)
}

#[test]
fn an_idle_session_stays_within_its_heap_budget() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let (parts, with_tables) = idle_session_heap_bytes();
    assert!(
        parts <= IDLE_SESSION_HEAP_BYTES_BUDGET,
        "an idle session's own blocks take {parts} B of heap, over {IDLE_SESSION_HEAP_BYTES_BUDGET} B"
    );
    assert!(
        with_tables <= IDLE_SESSION_HEAP_WITH_TABLES_BUDGET,
        "an idle session takes {with_tables} B of heap with its share of the core's tables, \
         over {IDLE_SESSION_HEAP_WITH_TABLES_BUDGET} B"
    );
}
