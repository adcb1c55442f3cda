//! Goal: issue 43 item 2, 10 000 live streams on two cores within 512 MiB: the heap bytes one
//! live stream holds on its server (its connection, its call, its session's ring) within a
//! budget (`LIVE_STREAM_HEAP_BYTES_BUDGET`), counted in process, not read from RSS, so the test
//! is deterministic (RSS per stream is `scripts/streams.sh`'s, docs/performance.md "Live
//! streams").
//!
//! Method: as `tests/idle_session.rs` does, the server runs in this test's process (one worker,
//! real sockets on 127.0.0.1) under a global allocator that forwards to mimalloc and keeps the
//! live bytes of every block the worker thread holds, at its mimalloc size (`mi_usable_size`).
//! `LIVE_STREAMS_MEASURED` sessions are opened first; then each gets its own connection with
//! one `slow_counter` call whose first event is `STREAM_DELAY_MS` away, and the test reads each
//! answer's head. Live bytes then minus before, over the count, is one live stream's fixed cost
//! (the sessions' own cost is before; an event's is its ring's, bounded by `--replay-events`
//! and `--replay-bytes` and tested with the ring); the blocks by size class say what it is.
//! Then, on a fresh server, `ENDED_STREAMS_MEASURED` streams that waited run to their end on
//! connections that stay open: together they may hold no more read buffers than the core's
//! spares (`ENDED_STREAMS_READ_BUFFERS_MAX`).

// The counters are the test's, shared by the process's threads, not server state.
#![allow(clippy::disallowed_types)]

mod support;

use std::net::TcpStream;
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use support::*;

/// Heap bytes one live stream may hold on the server (its connection, its call and the stream's
/// record in its session, answer head written, no event yet), at mimalloc's size classes, on the
/// debug build. Measured 36 763 B at the start (8d1ecff: a 16 KiB read buffer, 2 × 4 KiB write
/// buffers, the connection's task 6 KiB), 20 625 B with the read buffer lent to the core while
/// the stream waits, 13 969 B with the write buffers starting at 1 KiB and 512 B (were 4 KiB
/// each). One more block of 1 KiB a stream fails it; the blocks by size are printed.
const LIVE_STREAM_HEAP_BYTES_BUDGET: usize = 14_848;

/// Live streams the bytes are counted over: enough that the core's tables' steps average out,
/// few enough for a debug server to open in a few seconds.
const LIVE_STREAMS_MEASURED: usize = 1_000;

/// The streams' pause before each event: longer than opening them all takes, so each is
/// counted with its answer's head written and no event yet (an event's cost is its ring's,
/// bounded by `--replay-events`/`--replay-bytes` and tested with the ring).
const STREAM_DELAY_MS: u64 = 10_000;
/// Events per stream: the streams outlive the reading.
const STREAM_STEPS: u64 = 3;

/// Live bytes by size class (index: size / 8), blocks up to `BY_SIZE_MAX` bytes; larger ones
/// are in the last slot.
const BY_SIZE_MAX: usize = 64 * 1024;
static LIVE: AtomicI64 = AtomicI64::new(0);
static BY_SIZE: [AtomicI64; BY_SIZE_MAX / 8 + 1] =
    [const { AtomicI64::new(0) }; BY_SIZE_MAX / 8 + 1];

#[global_allocator]
static GLOBAL: support::heap::CountingMimalloc = support::heap::CountingMimalloc(note);

/// Adds (`sign` 1) or takes away (-1) block `p`'s size, when a worker thread made or frees it.
fn note(p: *mut u8, sign: i64) {
    if p.is_null() || !support::heap::is_worker() {
        return;
    }
    let size = support::heap::usable_size(p);
    LIVE.fetch_add(sign * size as i64, Relaxed);
    BY_SIZE[size.min(BY_SIZE_MAX) / 8].fetch_add(sign, Relaxed);
}

fn blocks_by_size() -> Vec<i64> {
    BY_SIZE.iter().map(|n| n.load(Relaxed)).collect()
}

/// Per size class, the blocks and bytes added per stream (classes under 0.05 blocks left out).
fn breakdown(before: &[i64], after: &[i64], streams: usize) -> String {
    let rows: Vec<String> = before
        .iter()
        .zip(after)
        .enumerate()
        .map(|(class, (b, a))| (class * 8, (a - b) as f64 / streams as f64))
        .filter(|(_, per)| per.abs() >= 0.05)
        .map(|(size, per)| format!("{size} B × {per:.2}"))
        .collect();
    format!("blocks per live stream by size: {}", rows.join(", "))
}

/// Opens one session per id over one keep-alive connection.
fn open_sessions(host: &str, count: usize, wire: &mut Wire) -> Vec<String> {
    let init = request("POST", "/mcp", host, &POST_HEADERS, Some(INIT));
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    (0..count)
        .map(|_| {
            send(&mut wire.stream, &init);
            let r = wire.response(Duration::from_secs(10), "initialize");
            assert_eq!(r.status, 200, "initialize: {}", r.text());
            let sid = r.header("Mcp-Session-Id").expect("session id").to_owned();
            let mut h: Vec<(&str, &str)> = POST_HEADERS.to_vec();
            h.push(("Mcp-Session-Id", &sid));
            send(&mut wire.stream, &request("POST", "/mcp", host, &h, Some(initialized)));
            let r = wire.response(Duration::from_secs(10), "initialized");
            assert_eq!(r.status, 202, "notifications/initialized: {}", r.text());
            sid
        })
        .collect()
}

/// A `slow_counter` call on `session` over a new connection, sent: a live stream of
/// `STREAM_STEPS` events `STREAM_DELAY_MS` apart.
fn start_stream(addr: std::net::SocketAddr, host: &str, session: &str) -> TcpStream {
    let args = format!(r#"{{"steps":{STREAM_STEPS},"delay_ms":{STREAM_DELAY_MS}}}"#);
    start_call(addr, host, session, &args)
}

/// A `slow_counter` call with `args` on `session` over a new connection, sent.
fn start_call(addr: std::net::SocketAddr, host: &str, session: &str, args: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    let mut h: Vec<(&str, &str)> = POST_HEADERS.to_vec();
    h.push(("Mcp-Session-Id", session));
    let body = call(1, "slow_counter", args, true);
    send(&mut stream, &request("POST", "/mcp", host, &h, Some(&body)));
    stream
}

/// An in-process server with one worker, its address and Host, and `count` sessions opened
/// on it over one keep-alive connection (returned with them).
fn server_with_sessions(
    count: usize,
) -> (tidemark::Running, std::net::SocketAddr, String, Vec<String>) {
    let mut cfg = tidemark::Config::default();
    cfg.server.listen = "127.0.0.1:0".parse().expect("address");
    cfg.server.threads = 1;
    cfg.sessions.session_idle = Duration::from_secs(3600);
    let running = tidemark::Server::new(cfg).start().expect("start the server");
    let (addr, host) = (running.local_addr, running.local_addr.to_string());
    let mut wire = Wire::new(TcpStream::connect(addr).expect("connect"));
    let sessions = open_sessions(&host, count, &mut wire);
    (running, addr, host, sessions)
}

/// Reads the stream's answer head (and whatever came with it): the stream is live.
fn await_head(stream: &mut TcpStream) {
    let mut head = Vec::new();
    let mut chunk = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = read_retrying(stream, &mut chunk).expect("read the stream's head");
        assert!(n > 0, "the server closed the stream");
        head.extend_from_slice(&chunk[..n]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&head));
}

/// Heap bytes per live stream on an in-process server, and the breakdown by size class.
fn live_stream_heap_bytes() -> (usize, String) {
    let (running, addr, host, sessions) = server_with_sessions(LIVE_STREAMS_MEASURED + 1);
    // One stream first, so the core's per-stream scratch (first use) is not counted.
    let mut warm = start_stream(addr, &host, &sessions[0]);
    await_head(&mut warm);
    std::thread::sleep(Duration::from_millis(100));
    let before = (LIVE.load(Relaxed), blocks_by_size());
    let started = Instant::now();
    let mut streams: Vec<TcpStream> =
        sessions[1..].iter().map(|s| start_stream(addr, &host, s)).collect();
    streams.iter_mut().for_each(await_head);
    let opened = started.elapsed();
    assert!(opened < Duration::from_millis(STREAM_DELAY_MS), "the first events were sent");
    std::thread::sleep(Duration::from_millis(100));
    let after = (LIVE.load(Relaxed), blocks_by_size());
    drop((warm, streams));
    running.shutdown();
    let per = usize::try_from(after.0 - before.0).unwrap_or(0) / LIVE_STREAMS_MEASURED;
    eprintln!(
        "live streams: {LIVE_STREAMS_MEASURED} opened in {:.1} s: live heap {per} B per stream (budget {LIVE_STREAM_HEAP_BYTES_BUDGET} B)",
        opened.as_secs_f64()
    );
    (per, breakdown(&before.1, &after.1, LIVE_STREAMS_MEASURED))
}

/// Connections whose stream ended and that stay open, counted for read buffers.
const ENDED_STREAMS_MEASURED: usize = 200;

/// Read buffers (blocks of 16 KiB or more) the ended streams' connections may hold together:
/// the core's spares (`SPARE_READ_BUFFERS_MAX`, 16), none per connection. Before, each such
/// connection took 16 KiB back at its stream's end to wait for its next request, and
/// 10 000 of them were the RSS peak of `scripts/streams.sh` (issue 43 §2).
const ENDED_STREAMS_READ_BUFFERS_MAX: i64 = 16;

/// Reads until the stream's chunked body ends: the call is over, the connection kept alive.
fn await_end(stream: &mut TcpStream) {
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    while !got.ends_with(b"0\r\n\r\n") {
        let n = read_retrying(stream, &mut chunk).expect("read the stream to its end");
        assert!(n > 0, "the server closed the connection");
        got.extend_from_slice(&chunk[..n]);
    }
}

/// Blocks of 16 KiB or more that the worker holds after `ENDED_STREAMS_MEASURED` short
/// streams ended on connections that stay open, minus before.
fn ended_stream_read_buffers() -> i64 {
    let (running, addr, host, sessions) = server_with_sessions(ENDED_STREAMS_MEASURED);
    std::thread::sleep(Duration::from_millis(100));
    let large = || blocks_by_size()[16 * 1024 / 8..].iter().sum::<i64>();
    let before = large();
    // Two events 200 ms apart: each stream waits (and lends its read buffer) before it ends.
    let args = r#"{"steps":2,"delay_ms":200}"#;
    let mut streams: Vec<TcpStream> =
        sessions.iter().map(|s| start_call(addr, &host, s, args)).collect();
    streams.iter_mut().for_each(await_end);
    std::thread::sleep(Duration::from_millis(100));
    let after = large();
    drop(streams);
    running.shutdown();
    after - before
}

#[test]
fn a_live_stream_stays_within_its_heap_budget() {
    // One test, so the two in-process servers never count each other's blocks.
    let held = ended_stream_read_buffers();
    eprintln!(
        "ended streams: {ENDED_STREAMS_MEASURED} kept-alive connections hold {held} read buffers"
    );
    assert!(
        held <= ENDED_STREAMS_READ_BUFFERS_MAX,
        "{ENDED_STREAMS_MEASURED} connections after their streams hold {held} blocks of 16 KiB or more"
    );
    let (per, blocks) = live_stream_heap_bytes();
    eprintln!("live streams: {blocks}");
    assert!(
        per <= LIVE_STREAM_HEAP_BYTES_BUDGET,
        "a live stream holds {per} B of heap, over {LIVE_STREAM_HEAP_BYTES_BUDGET} B; {blocks}"
    );
}
