//! Goal: the bridge over Streamable HTTP (`--upstream http://…`, issue 9): an HTTP upstream's
//! tools stream progress and results through tidemark's own replay ring, resume after a drop at
//! the front, run once upstream, and an upstream that dies mid-call ends the call with -32603.
//! Method: the real binary in front of a second real tidemark serving the demo tools (a
//! Streamable HTTP MCP server with event ids), both on loopback; the inner `get_counter` shows
//! how often `slow_counter` ran; a raw `TcpListener` answering every request with a 307 for
//! an upstream that redirects.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};

use support::{
    assert_rest, call, call_stream, counter, list_tools, open_session, post, read_priming,
    read_progress, resume, Server,
};

fn front_of(inner: &Server, extra: &[&str]) -> Server {
    let url = format!("http://{}{}", inner.addr, inner.path);
    let mut args = vec!["--upstream", url.as_str(), "--threads", "1"];
    args.extend_from_slice(extra);
    Server::start(&args)
}

#[test]
fn an_http_upstreams_tools_stream_through_and_run_once() {
    let inner = Server::start(&["--tools", "demo", "--threads", "1"]);
    let front = front_of(&inner, &[]);
    let sid = open_session(&front);
    let tools = list_tools(&front, &sid);
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["echo", "slow_counter", "get_counter", "greet"]);

    let mut s = call_stream(
        &front,
        &sid,
        &call(2, "slow_counter", r#"{"steps":4,"delay_ms":100}"#, true),
        &[],
    );
    let priming = read_priming(&mut s, "front");
    let last = read_progress(&mut s, 2, priming, "front");
    s.cut();
    // Resumed at the front: the rest, once; the upstream call kept running meanwhile.
    let mut g = resume(&front, &sid, &last);
    let text = assert_rest(&g.rest(), &last, 3, 4, 2, "resume at the front");
    assert_eq!(text, "1");
    // A re-POST of the same call is refused with the hint, not forwarded.
    let body = call(2, "slow_counter", r#"{"steps":4,"delay_ms":100}"#, true);
    let again = post(&front, &[("Mcp-Session-Id", &sid)], &body);
    assert_eq!(again.status, 409, "{}", again.text());
    assert_eq!(counter(&inner), 1, "the upstream ran slow_counter once");
}

#[test]
fn an_http_upstream_that_dies_mid_call_ends_the_call_with_an_error() {
    let inner = Server::start(&["--tools", "demo", "--threads", "1"]);
    let front = front_of(&inner, &["--upstream-timeout-secs", "10"]);
    let sid = open_session(&front);
    let mut s = call_stream(
        &front,
        &sid,
        &call(1, "slow_counter", r#"{"steps":50,"delay_ms":100}"#, true),
        &[],
    );
    let priming = read_priming(&mut s, "kill");
    read_progress(&mut s, 1, priming, "kill");
    drop(inner);
    let started = std::time::Instant::now();
    let evs = support::messages(&s.rest());
    let end = evs.last().expect("an end").json();
    assert_eq!(end["error"]["code"], -32603, "{end}");
    assert_eq!(end["error"]["data"]["upstream"], "upstream-1", "unnamed: its index, not its URL");
    assert!(started.elapsed() < std::time::Duration::from_secs(9), "ended before the timeout");
}

#[test]
fn a_pooled_connection_the_upstream_closed_while_idle_is_not_reused() {
    // The upstream closes idle keep-alive connections after 1 s, sooner than the front's pool
    // gives up on them (`POOL_REUSE_WITHIN`, 2 s): each call after a pause of 1.6 s would be
    // written on a connection the upstream had closed and fail with end of stream (-32603,
    // never resent: the upstream might have read it). The pool must see the close first.
    let inner = Server::start(&["--tools", "demo", "--threads", "1", "--idle-timeout-secs", "1"]);
    let front = front_of(&inner, &[]);
    let sid = open_session(&front);
    for id in 1..=3u64 {
        if id > 1 {
            std::thread::sleep(std::time::Duration::from_millis(1_600));
        }
        let mut s =
            call_stream(&front, &sid, &call(id, "slow_counter", r#"{"steps":1}"#, false), &[]);
        let evs = support::messages(&s.rest());
        let end = evs.last().expect("an answer").json();
        assert_eq!(end["result"]["content"][0]["text"], id.to_string(), "call {id}: {end}");
    }
    assert_eq!(counter(&inner), 3, "each call ran once upstream");
}

#[test]
fn the_drain_deletes_the_upstream_sessions() {
    // The end of the front's drain stops its HTTP upstreams; each upstream session is DELETEd
    // before the process exits, not left to the upstream's idle expiry.
    let (inner, admin) =
        support::server_with_metrics("uring", &["--tools", "demo", "--threads", "1"]);
    let mut front = front_of(&inner, &[]);
    let _sid = open_session(&front);
    let deleted = "tidemark_sessions_deleted_total";
    assert_eq!(support::metric(&support::scrape(&admin), deleted), 0);
    front.signal("TERM");
    let status = front.exit_within(std::time::Duration::from_secs(10)).expect("drained");
    assert!(status.success(), "{status:?}");
    assert_eq!(
        support::metric(&support::scrape(&admin), deleted),
        1,
        "the upstream session was deleted"
    );
}

/// Where the redirecting upstream sends its clients.
const REDIRECT_TARGET: &str = "http://elsewhere.example:8080/mcp";

/// A tiny HTTP server on 127.0.0.1:0 (a thread, for the test's lifetime) answering every
/// request with `307` and `Location: REDIRECT_TARGET`, then closing the connection.
fn redirecting_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n")
                && support::read_retrying(&mut conn, &mut byte).is_ok_and(|n| n == 1)
            {
                head.push(byte[0]);
            }
            let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
            let length = text
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            let mut body = vec![0u8; length];
            let _ = conn.read_exact(&mut body);
            let answer = format!(
                "HTTP/1.1 307 Temporary Redirect\r\nLocation: {REDIRECT_TARGET}\r\n\
                 Content-Length: 0\r\nConnection: close\r\n\r\n"
            );
            let _ = conn.write_all(answer.as_bytes());
        }
    });
    addr
}

#[test]
fn an_upstream_answering_a_redirect_is_named_with_its_status_and_location() {
    // Goal: tidemark does not follow an upstream's redirect (a credential sent to the upstream
    // must not follow to another origin), and says so: the legacy `initialize` fails with a
    // message naming the upstream, the status and the Location; a 2026-07-28 call (served on
    // the core's shared link) ends with -32603 whose data names the upstream, not with
    // "unknown tool". Method: the front bridged to a raw listener that answers 307 to all.
    let upstream = format!("http://{}/mcp", redirecting_upstream());
    let front = Server::start(&["--upstream", upstream.as_str(), "--threads", "1"]);
    let init = post(
        &front,
        &[],
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
    );
    let error = &init.json()["error"];
    assert_eq!(error["code"], -32603, "{}", init.text());
    let message = error["message"].as_str().expect("a message");
    for part in ["upstream-1", "307", REDIRECT_TARGET] {
        assert!(message.contains(part), "{part:?} in {message:?}");
    }
    assert!(!message.contains(upstream.as_str()), "its URL in {message:?}");
    assert_eq!(error["data"]["upstream"], "upstream-1", "{error}");
    assert_eq!(error["data"]["status"], 307, "{error}");
    assert_eq!(error["data"]["location"], REDIRECT_TARGET, "{error}");

    let meta = serde_json::json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": { "name": "echo", "arguments": { "text": "a" }, "_meta": meta },
    });
    let headers = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "echo"),
    ];
    let answer = post(&front, &headers, &body.to_string());
    let error = &answer.json()["error"];
    assert_eq!(error["code"], -32603, "{}", answer.text());
    assert_eq!(error["data"]["upstream"], "upstream-1", "{error}");
    assert_eq!(error["data"]["location"], REDIRECT_TARGET, "{error}");
}

/// `VmRSS` (bytes) of process `pid`.
fn vm_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let line = status.lines().find(|l| l.starts_with("VmRSS")).expect("VmRSS");
    let kib: u64 = line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("kB");
    kib * 1024
}

#[test]
fn calls_through_an_http_upstream_leave_nothing_behind() {
    // Goal: an HTTP upstream call's task is freed when the call ends. Each call's task waits on
    // its link's `stop` signal (which fires only at shutdown) beside its read; a waiter that
    // gave up left its waker in the signal, so every call's finished task (~5.6 KiB in release)
    // stayed until the upstream session ended: RSS grew by 264 MiB over 48 k calls toward the
    // rmcp peer (issue 43's bridge comparison). Method: 500 echo calls on one session to warm
    // up, then two windows of 3 000; in at least one of them the front's VmRSS may grow by
    // less than 4 MiB (the leak: > 16 MiB in each). A leak grows in every window; the
    // allocator does not: VmRSS moves in steps of 2 MiB here (2 097 152 B each, sampled every
    // 500 calls: +4.1 MiB by call 2 000, flat to 4 000, back to +2.1 MiB at 4 500 and flat to
    // 8 500, 2026-12-07), and where such a step falls moved when a change took allocations off
    // the call's path, so a single window read 2.2–4.8 MB on one build and 0.1–1.1 on another.
    const CALLS: u64 = 3_000;
    let inner = Server::start(&["--tools", "demo", "--threads", "1"]);
    let front = front_of(&inner, &[]);
    let sid = open_session(&front);
    let echo = |id: u64| {
        let r =
            post(&front, &[("Mcp-Session-Id", &sid)], &call(id, "echo", r#"{"text":"x"}"#, false));
        assert_eq!(r.status, 200, "{}", r.text());
    };
    (0..500).for_each(echo);
    let start = vm_rss(front.pid());
    (500..500 + CALLS).for_each(echo);
    let middle = vm_rss(front.pid());
    (500 + CALLS..500 + 2 * CALLS).for_each(echo);
    let end = vm_rss(front.pid());
    let windows = [middle.saturating_sub(start), end.saturating_sub(middle)];
    eprintln!(
        "two windows of {CALLS} calls through an HTTP upstream: VmRSS grew {windows:?} bytes"
    );
    let grown = windows[0].min(windows[1]);
    assert!(
        grown < 4 << 20,
        "VmRSS grew by {windows:?} bytes over two windows of {CALLS} calls: a leak per call"
    );
}
