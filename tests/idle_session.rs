//! Goal: issue 40 item 4, an idle legacy session within its resident budget
//! (`IDLE_SESSION_BYTES_BUDGET`). Method: the real binary, one worker; sessions opened on
//! pipelining keep-alive connections; the server's `VmRSS` from `/proc/<pid>/status` before and
//! after. Its own test binary so that no other test's server takes the cores meanwhile (cargo
//! runs test binaries one at a time; tests/memory.rs's slow consumers have a 30 s bound).

mod support;

use std::time::{Duration, Instant};

use support::*;

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
/// regression of the kind issue 40 found (a session several hundred bytes larger) does. A
/// steadier measure (the live heap bytes per session, counted in process like
/// tests/allocations.rs) is the next step, and then the 600 B goal.
const IDLE_SESSION_BYTES_BUDGET: usize = 900;

/// Sessions the budget is measured over: enough that the table's growth and the allocator's
/// pages average out (36 MB at the budget; at 20 000 a run read 434–620 B for the same build),
/// few enough for a debug server in seconds.
const IDLE_SESSIONS_MEASURED: usize = 60_000;

/// Sessions opened, and their connections used, before the first reading, so the reading
/// counts sessions rather than the first touch of the allocator's pages and the buffers of the
/// connections.
const IDLE_SESSIONS_WARM_UP: usize = 2_000;

/// Connections the sessions are opened over, each pipelining `IDLE_SESSIONS_PIPELINED`.
const IDLE_OPEN_CONNECTIONS: usize = 4;
const IDLE_SESSIONS_PIPELINED: usize = 50;

/// Opens `count` sessions over `wires`: each wire pipelines a batch of `initialize`s, then
/// the batch's `notifications/initialized`; every answer must be 200 and 202.
fn open_idle_sessions(server: &Server, wires: &mut [Wire], count: usize) {
    let init = request("POST", &server.path, &server.host(), &POST_HEADERS, Some(INIT));
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
                notes.extend(request("POST", &server.path, &server.host(), &h, Some(initialized)));
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
    let mut wires: Vec<Wire> =
        (0..IDLE_OPEN_CONNECTIONS).map(|_| Wire::new(server.connect())).collect();
    open_idle_sessions(&server, &mut wires, IDLE_SESSIONS_WARM_UP);
    std::thread::sleep(Duration::from_millis(200));
    let before = vm_rss(server.pid());
    let started = Instant::now();
    open_idle_sessions(&server, &mut wires, IDLE_SESSIONS_MEASURED);
    std::thread::sleep(Duration::from_millis(200));
    let after = vm_rss(server.pid());
    let per = after.saturating_sub(before) / IDLE_SESSIONS_MEASURED;
    eprintln!(
        "idle sessions: {IDLE_SESSIONS_MEASURED} opened in {:.1} s, VmRSS {} -> {} bytes: {per} B per session (budget {IDLE_SESSION_BYTES_BUDGET} B)",
        started.elapsed().as_secs_f64(),
        before,
        after
    );
    per
}

#[test]
fn an_idle_session_stays_within_its_resident_budget() {
    let args = ["--threads", "1", "--session-idle-secs", "3600"];
    let per = idle_session_bytes(&args);
    assert!(
        per <= IDLE_SESSION_BYTES_BUDGET,
        "an idle session costs {per} B of RSS, over its budget of {IDLE_SESSION_BYTES_BUDGET} B"
    );
}
