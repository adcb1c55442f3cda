//! Goal: issue 17 item 7, backpressure from the replay ring to the upstream. An upstream that
//! floods notifications during a call (stdio progress lines, an HTTP upstream's event stream)
//! must not evict the call's own unwritten events while its client is attached and reading:
//! tidemark stops reading that upstream until the writer has drained (CONTRACT §3, "either the
//! producer is paused or the stream is marked lost"), so the call ends with its result, every
//! event delivered once and in order, and memory stays inside its budget. A client that went
//! away still gets eviction (a -31003 gap on resume), never an upstream stalled for good. The
//! 2026-07-28 path has no ring: its pending notifications are bounded the same way.
//! Method: the real binary fronting tests/fixtures/stdio_upstream.py (its `flood` tool), and a
//! second tidemark in front of that one for the HTTP upstream, with rings far smaller than a
//! flood (`--replay-bytes 65536 --replay-events 256`); the server's `VmHWM` from
//! `/proc/<pid>/status` bounds what it held at any moment.

mod support;

use std::io::Write;
use std::time::Duration;

use serde_json::{json, Value};
use support::{
    assert_rest, call, call_stream, open_session, poll_until, post, read_priming, read_progress,
    request, resume, Server, SseStream, DRIVERS, POST_HEADERS,
};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/stdio_upstream.py");

/// Notifications of one flood: far beyond any ring the tests configure.
const FLOOD: u64 = 100_000;

/// Small rings: without backpressure a flood evicts the events of its own call at once.
const SMALL_RING: [&str; 4] = ["--replay-bytes", "65536", "--replay-events", "256"];

/// Growth of the server's resident memory a flood may cause: the ring (64 KiB), the write
/// buffer (256 KiB), one stdout read (64 KiB) and the allocator's slack, with room to spare
/// (about 4 MiB was measured); a flood taken in whole grew it by 57 MiB within 3 s.
const GROWTH_MAX: usize = 16 * 1024 * 1024;

/// The files the fixture writes beside its counter, removed on drop.
struct Files(std::path::PathBuf);

impl Files {
    fn new(name: &str) -> Files {
        let path = std::env::temp_dir()
            .join(format!("tidemark-flood-{name}-{}.count", std::process::id()));
        let files = Files(path);
        files.remove();
        files
    }

    fn env(&self) -> String {
        format!("COUNTER_FILE={}", self.0.display())
    }

    /// True once the fixture wrote every line of a flood and its result.
    fn flooded(&self) -> bool {
        self.0.with_extension("count.flooded").exists()
    }

    fn remove(&self) {
        let _ = std::fs::remove_file(&self.0);
        let _ = std::fs::remove_file(self.0.with_extension("count.flooded"));
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        self.remove();
    }
}

/// tidemark fronting the fixture with small rings, plus `extra`.
fn bridge(driver: &str, files: &Files, extra: &[&str]) -> Server {
    let upstream = format!("stdio:python3 {FIXTURE}");
    let env = files.env();
    let mut args = vec!["--upstream", upstream.as_str(), "--upstream-env", env.as_str()];
    args.extend_from_slice(&["--threads", "1", "--upstream-kill-grace-ms", "200"]);
    args.extend_from_slice(&SMALL_RING);
    args.extend_from_slice(extra);
    Server::on(driver, &args)
}

/// `VmRSS` or `VmHWM` (bytes) of process `pid`.
fn proc_status(pid: u32, field: &str) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let line = status.lines().find(|l| l.starts_with(field)).expect("field");
    let kib: usize = line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("kB");
    kib * 1024
}

/// Asserts the server's peak resident size grew by at most `GROWTH_MAX` over `start`.
fn assert_within_budget(server: &Server, start: usize, ctx: &str) {
    let peak = proc_status(server.pid(), "VmHWM");
    let growth = peak.saturating_sub(start);
    assert!(growth <= GROWTH_MAX, "{ctx}: peak RSS grew by {growth} bytes (> {GROWTH_MAX})");
}

/// Calls `flood` on a new session of `server` and reads its stream to the end: it must carry
/// every notification and the result (`read_whole_flood`), within the memory budget.
fn assert_flood_arrives(server: &Server, ctx: &str) {
    let sid = open_session(server);
    let start = proc_status(server.pid(), "VmRSS");
    let body = call(1, "flood", &format!(r#"{{"count":{FLOOD}}}"#), true);
    read_whole_flood(call_stream(server, &sid, &body, &[]), 1, ctx);
    assert_within_budget(server, start, ctx);
}

/// Reads a legacy flood call's stream to its end and checks it: progress 1..=`FLOOD` once each,
/// in order, then the result, nothing lost (no -31003, no cut).
fn read_whole_flood(mut s: SseStream, id: u64, ctx: &str) {
    let priming = read_priming(&mut s, ctx);
    let evs = s.rest();
    assert!(s.ended(), "{ctx}: the stream was cut after {} events", evs.len());
    if let Some(last) = evs.last() {
        let last = last.json();
        assert!(last["error"].is_null(), "{ctx}: the call ended with an error: {last}");
    }
    let text = assert_rest(&evs, &priming, 1, FLOOD, id, ctx);
    assert_eq!(text, FLOOD.to_string(), "{ctx}: the flood's own result");
}

#[test]
fn a_stdio_flood_reaches_a_reading_client_whole() {
    // Goal: 100 000 progress notifications from a stdio upstream through a 256-event ring reach
    // the client that reads them, every one once and in order, then the result; the server's
    // memory stays within its budget. Without backpressure the ring evicts the call's unwritten
    // events and the client gets a -31003 gap (or a cut) instead of its result.
    for driver in DRIVERS {
        let ctx = format!("{driver}: stdio flood");
        let files = Files::new(&format!("stdio-{driver}"));
        assert_flood_arrives(&bridge(driver, &files, &[]), &ctx);
    }
}

#[test]
fn an_http_flood_reaches_a_reading_client_whole() {
    // Goal: the same through an HTTP upstream: tidemark stops reading the upstream's response
    // stream while its own client has not been written what it holds, so the flood arrives
    // whole. Method: an outer tidemark whose `--upstream` is an inner tidemark fronting the
    // fixture; both have small rings, so the inner is paused through TCP by the outer's pause.
    for driver in DRIVERS {
        let ctx = format!("{driver}: http flood");
        let files = Files::new(&format!("http-{driver}"));
        let inner = bridge(driver, &files, &[]);
        let url = format!("http://{}{}", inner.addr, inner.path);
        let mut args = vec!["--upstream", url.as_str(), "--threads", "1"];
        args.extend_from_slice(&SMALL_RING);
        assert_flood_arrives(&Server::on(driver, &args), &ctx);
    }
}

#[test]
fn a_flood_whose_client_left_is_evicted_not_stalled() {
    // Goal: backpressure holds only while a client is attached: when it leaves, the ring
    // evicts as before, the upstream is read to the call's end (it is not paused forever), and
    // a resume from the client's last event reports the evicted events as -31003.
    // Method: read 10 of a 20 000-event flood, cut; re-POST the call (409 -31001, whose
    // `inFlight` says whether it still runs) until it finished; then resume.
    for driver in DRIVERS {
        let ctx = format!("{driver}: gone");
        let files = Files::new(&format!("gone-{driver}"));
        let server = bridge(driver, &files, &[]);
        let sid = open_session(&server);
        let body = call(1, "flood", r#"{"count":20000}"#, true);
        let mut s = call_stream(&server, &sid, &body, &[]);
        let priming = read_priming(&mut s, &ctx);
        let last = read_progress(&mut s, 10, priming, &ctx);
        s.cut();
        let finished = poll_until(Duration::from_secs(60), || {
            let r = post(&server, &[("Mcp-Session-Id", &sid)], &body);
            assert_eq!(r.status, 409, "{ctx}: the retry is refused: {}", r.text());
            r.json()["error"]["data"]["owedStreams"][0]["inFlight"] == json!(false)
        });
        assert!(finished, "{ctx}: the call never finished: its upstream stayed paused");
        assert!(files.flooded(), "{ctx}: the fixture wrote the whole flood");
        let evs = resume(&server, &sid, &last).rest();
        let gap = evs.iter().find(|e| !e.is_priming()).expect("an event").json();
        assert_eq!(gap["error"]["code"], -31003, "{ctx}: the evicted events are reported: {gap}");
    }
}

/// The bytes of a 2026-07-28 `tools/call` of `tool` with `arguments` and a progress token.
fn modern_call(server: &Server, id: u64, tool: &str, arguments: Value) -> Vec<u8> {
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": { "name": "flood-test", "version": "1" },
        "progressToken": id,
    });
    let params = json!({ "name": tool, "arguments": arguments, "_meta": meta });
    let body = json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params });
    let mut h: Vec<(&str, &str)> = POST_HEADERS.to_vec();
    h.extend([
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", tool),
    ]);
    request("POST", &server.path, &server.host(), &h, Some(&body.to_string()))
}

/// A connection whose receive buffer is `rcvbuf` bytes (set before connecting, so the window is
/// small from the start): a client that stops reading holds little in its kernel.
fn small_window(server: &Server, rcvbuf: usize) -> std::net::TcpStream {
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    socket.set_recv_buffer_size(rcvbuf).expect("SO_RCVBUF");
    socket.connect(&server.addr.into()).expect("connect");
    let stream: std::net::TcpStream = socket.into();
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    stream
}

#[test]
fn a_modern_flood_waits_for_its_client_and_arrives_whole() {
    // Goal: a 2026-07-28 call has no ring, but what it has not written is bounded too: while
    // its client does not read, the upstream is not read either (the fixture cannot finish
    // writing its flood), and once the client reads, every notification arrives in order, then
    // the result, with the server's memory within budget. Without backpressure tidemark takes
    // the whole flood (~30 MB) into memory while the client reads nothing.
    // Method: a client with a 16 KiB receive buffer that reads nothing for a window, in which
    // the fixture's "flooded" marker must not appear (elapsed time is what is tested: a paused
    // upstream shows itself only by not finishing); then it reads everything.
    for driver in DRIVERS {
        let ctx = format!("{driver}: modern");
        let files = Files::new(&format!("modern-{driver}"));
        let server = bridge(driver, &files, &[]);
        let start = proc_status(server.pid(), "VmRSS");
        let mut stream = small_window(&server, 16 * 1024);
        let arguments = json!({ "count": FLOOD, "pad": 200 });
        stream.write_all(&modern_call(&server, 7, "flood", arguments)).expect("send");
        let finished = poll_until(Duration::from_secs(3), || files.flooded());
        assert!(!finished, "{ctx}: the upstream finished its flood while the client read nothing");
        assert_within_budget(&server, start, &format!("{ctx}, while the client read nothing"));
        let mut s = SseStream::from_stream(stream);
        assert_eq!(s.status, 200, "{ctx}");
        let evs = s.rest();
        assert!(s.ended(), "{ctx}: the stream was cut after {} events", evs.len());
        let got: Vec<u64> = evs
            .iter()
            .map(|e| e.json())
            .filter(|m| m["method"] == "notifications/progress")
            .filter_map(|m| m["params"]["progress"].as_f64().map(|p| p as u64))
            .collect();
        assert!(got.iter().copied().eq(1..=FLOOD), "{ctx}: progress 1..={FLOOD} once, in order");
        let last = evs.last().expect("the result").json();
        assert_eq!(last["result"]["content"][0]["text"], FLOOD.to_string(), "{ctx}: {last}");
        assert_eq!(evs.len() as u64, FLOOD + 1, "{ctx}: nothing else on the stream");
        assert_within_budget(&server, start, &ctx);
    }
}

/// Goal: issue 38 finding 9, the upstream timeout measures the upstream. A stdio upstream that
/// sends log notifications for 4 s and then answers, behind `--upstream-timeout-secs 2`, with a
/// client that reads nothing for 3 s: tidemark holds the upstream back (backpressure) while the
/// client's unwritten events fill half the ring, and that pause does not count; nor does time in
/// which the upstream keeps sending for the call. The call ends with its result, every
/// notification delivered. Before, the timeout counted from the send and the call ended with
/// -32603 "did not answer in 2 s" although the upstream never went quiet.
/// Method: the fixture's `chatter` tool, 1000-byte logs as fast as stdout takes them, through
/// the small rings, read over a 16 KiB receive window after a 3 s pause (elapsed time is what is
/// tested): the pause holds the upstream back for over 2 s (with holds counted, the call ended
/// with "did not answer in 2 s"; with 200-byte logs every 2 ms the socket buffers took all and
/// nothing was held).
#[test]
fn a_chatty_upstream_held_back_for_a_slow_client_is_not_timed_out() {
    for driver in DRIVERS {
        let ctx = format!("{driver}: chatter");
        let files = Files::new(&format!("chatter-{driver}"));
        let server = bridge(driver, &files, &["--upstream-timeout-secs", "2"]);
        let sid = open_session(&server);
        let mut stream = small_window(&server, 16 * 1024);
        let body = call(1, "chatter", r#"{"ms":4000,"pad":1000,"every_ms":0}"#, false);
        let headers = [("Mcp-Session-Id", sid.as_str())];
        let mut h: Vec<(&str, &str)> = POST_HEADERS.to_vec();
        h.extend(headers);
        stream
            .write_all(&request("POST", &server.path, &server.host(), &h, Some(&body)))
            .expect("send");
        std::thread::sleep(Duration::from_secs(3));
        let mut s = SseStream::from_stream(stream);
        assert_eq!(s.status, 200, "{ctx}");
        let evs = support::messages(&s.rest());
        assert!(s.ended(), "{ctx}: the stream was cut after {} events", evs.len());
        let logs = evs.iter().filter(|e| e.json()["method"] == "notifications/message").count();
        let last = evs.last().expect("an end").json();
        assert!(last["error"].is_null(), "{ctx}: the call ended with an error: {last}");
        let sent: usize =
            last["result"]["content"][0]["text"].as_str().unwrap_or("").parse().unwrap_or(0);
        assert_eq!(logs, sent, "{ctx}: every notification the upstream sent arrived: {last}");
    }
}

/// Goal: the other side of the same rule: an upstream that goes silent during a call still
/// times out, `--upstream-timeout-secs` after its last message (not after the call began), and
/// one that keeps sending forever is ended by `--upstream-call-max-secs`, naming that flag.
/// Method: `chatter` for 1.5 s then silence, under a 2 s timeout: the call ends with -32603
/// `timeoutSecs` 3.5 s in (not 2 s); `chatter` for 20 s under `--upstream-call-max-secs 5`
/// ends with -32603 `callMaxSecs` about 5 s in.
#[test]
fn a_silent_upstream_still_times_out_and_a_busy_one_meets_the_call_max() {
    let files = Files::new("silent");
    let limits = ["--upstream-timeout-secs", "2", "--upstream-call-max-secs", "5"];
    let server = bridge("uring", &files, &limits);
    let sid = open_session(&server);
    let cases = [
        (r#"{"ms":1500,"hang":true}"#, "timeoutSecs", 2, 3.0),
        (r#"{"ms":20000}"#, "callMaxSecs", 5, 5.0),
    ];
    for (id, (args, key, secs, at_least)) in (1u64..).zip(cases) {
        let started = std::time::Instant::now();
        let mut s = call_stream(&server, &sid, &call(id, "chatter", args, false), &[]);
        let evs = s.rest();
        let took = started.elapsed().as_secs_f64();
        let last = evs.last().expect("an end").json();
        assert_eq!(last["error"]["code"], -32603, "{args}: {last}");
        assert_eq!(last["error"]["data"][key], secs, "{args}: {last}");
        assert!(took >= at_least && took < 10.0, "{args}: ended after {took:.1} s");
    }
}

/// `--list-changed-min-ms` of the list_changed flood test: a tenth of a second, so the flood's
/// second holds about ten windows.
const LIST_CHANGED_MIN_MS: u64 = 100;

#[test]
fn a_list_changed_flood_reaches_the_client_coalesced_with_the_last_one_kept() {
    // Goal (issue 38, finding 10): an upstream's 2000 `notifications/tools/list_changed` in a
    // second reach a legacy session's GET stream at most once per `--list-changed-min-ms` (plus
    // the first and a trailing one), not one for one; and the last is never lost: one arrives
    // after the upstream sent its last. Method: the fixture's `list_flood` (2000 over 1000 ms,
    // answering with the wall-clock time of its last line); a thread reads the session's GET
    // stream and stamps each event with the wall clock on arrival; after the call we wait
    // three windows (elapsed time is what is tested) and count.
    let files = Files::new("list-changed");
    let min = LIST_CHANGED_MIN_MS.to_string();
    let flags = ["--list-changed-min-ms", &min, "--metrics-listen", "127.0.0.1:0"];
    let server = bridge("uring", &files, &flags);
    let sid = open_session(&server);
    let mut standalone = support::open_standalone(&server, &sid);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        while let Some(ev) = standalone.next_event() {
            if !ev.is_priming() && tx.send((std::time::SystemTime::now(), ev.json())).is_err() {
                return;
            }
        }
    });
    let started = std::time::Instant::now();
    let body = call(2, "list_flood", r#"{"count":2000,"ms":1000}"#, false);
    let answer = post(&server, &[("Mcp-Session-Id", &sid)], &body);
    let flood = started.elapsed();
    let result: Value = answer.events().last().map(|e| e.json()).unwrap_or_else(|| answer.json());
    let last_sent: f64 = result["result"]["content"][0]["text"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("the flood's result: {result}"));
    std::thread::sleep(Duration::from_millis(3 * LIST_CHANGED_MIN_MS));
    let got: Vec<(std::time::SystemTime, Value)> = rx.try_iter().collect();
    for (_, message) in &got {
        assert_eq!(message["method"], "notifications/tools/list_changed", "{message}");
    }
    let windows = flood.as_millis() as usize / LIST_CHANGED_MIN_MS as usize;
    assert!(got.len() <= windows + 2, "{} in {flood:?}: not coalesced", got.len());
    assert!(got.len() >= 2, "{}: the first and at least one trailing", got.len());
    let secs = |t: &std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH).expect("after the epoch").as_secs_f64()
    };
    let last_got = got.iter().map(|(t, _)| secs(t)).fold(0.0, f64::max);
    assert!(
        last_got >= last_sent,
        "nothing arrived after the last change ({last_got} < {last_sent})"
    );
    let metrics = support::scrape(&server.metrics());
    let coalesced = support::metric(&metrics, "tidemark_list_changed_coalesced_total");
    assert!(coalesced >= 2000 - got.len() as u64, "{coalesced} counted, {} sent", got.len());
}
