//! Goal: the bridge over Streamable HTTP (`--upstream http://…`, issue 9): an HTTP upstream's
//! tools stream progress and results through tidemark's own replay ring, resume after a drop at
//! the front, run once upstream, and an upstream that dies mid-call ends the call with -32603.
//! Method: the real binary in front of a second real tidemark serving the demo tools (a
//! Streamable HTTP MCP server with event ids), both on loopback; the inner `get_counter` shows
//! how often `slow_counter` ran.

mod support;

use support::{
    assert_rest, call, call_stream, counter, open_session, post, read_priming, read_progress,
    resume, Server,
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
    let list = post(
        &front,
        &[("Mcp-Session-Id", &sid)],
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
    );
    let tools = list.json()["result"]["tools"].as_array().expect("tools").clone();
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
    assert!(end["error"]["data"]["upstream"].as_str().is_some_and(|u| u.starts_with("http://")));
    assert!(started.elapsed() < std::time::Duration::from_secs(9), "ended before the timeout");
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
