//! Goal: a message larger than the whole replay ring (`--replay-bytes`) ends its request with a
//! JSON-RPC error instead of silently never arriving. The answer is code -32603, a `message`
//! naming `--replay-bytes` and `data: {eventBytes, replayBytes}` (the encoded size of the event
//! that did not fit, the configured limit), with the request's id: the stream's final event in
//! SSE mode (resumable like any final event), the 200 JSON body in `--response-mode json`. The
//! limit is tested at N (the largest `echo` text whose result still fits: delivered unchanged)
//! and N+1 (the error); the session keeps working afterwards; a too large progress event (not
//! the final message) ends the call the same way.
//!
//! Method: the real binary with `--replay-bytes 4096` on both io drivers, raw HTTP/1.1 over
//! blocking sockets, every response read against a deadline (a stream that never ends fails
//! the test instead of hanging it). Sizes are derived from observed bytes: an `echo` of a short
//! and a longer text gives the result message's fixed overhead (checked to grow one byte per
//! text byte), so N = 4096 - overhead; a `slow_counter` call with a one-character progress
//! token gives the progress message's overhead the same way. The ring's other event of a call,
//! the priming event, holds 0 payload bytes.
mod support;

use std::time::Duration;

use support::*;

/// `--replay-bytes` of the servers here.
const RING: usize = 4096;
/// Bound on any response that must end; a hang fails the test after this long.
const BOUND: Duration = Duration::from_secs(3);

fn start(driver: &str, json_mode: bool) -> Server {
    let ring = RING.to_string();
    let mut args = vec!["--threads", "1", "--replay-bytes", &ring];
    if json_mode {
        args.extend(["--response-mode", "json"]);
    }
    Server::on(driver, &args)
}

fn echo(id: u64, text: &str) -> String {
    call(id, "echo", &format!(r#"{{"text":"{text}"}}"#), false)
}

/// A `slow_counter` call whose progress token is the JSON string `token`.
fn counter_with_token(id: u64, steps: u64, token: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"slow_counter","arguments":{{"steps":{steps}}},"_meta":{{"progressToken":"{token}"}}}}}}"#
    )
}

fn digits(id: u64) -> usize {
    id.to_string().len()
}

/// POSTs `body` in session `sid` on a fresh connection; the whole response, within `BOUND`.
fn post_within(server: &Server, sid: &str, body: &str, ctx: &str) -> Response {
    let mut h: Vec<(&str, &str)> = POST_HEADERS.to_vec();
    h.push(("Mcp-Session-Id", sid));
    let mut wire = Wire::new(server.connect());
    send(&mut wire.stream, &request("POST", &server.path, &server.host(), &h, Some(body)));
    wire.response(BOUND, ctx)
}

/// GET + `Last-Event-ID` on a fresh connection; the whole response, within `BOUND`.
fn resume_within(server: &Server, sid: &str, last_event_id: &str, ctx: &str) -> Response {
    let h = [
        ("Accept", "text/event-stream"),
        ("Mcp-Session-Id", sid),
        ("Last-Event-ID", last_event_id),
    ];
    let mut wire = Wire::new(server.connect());
    send(&mut wire.stream, &request("GET", &server.path, &server.host(), &h, None));
    wire.response(BOUND, ctx)
}

/// The final JSON-RPC message of a `tools/call` answer and its exact encoded bytes: the last
/// SSE event's data (after checking the stream opens with a priming event), or the JSON body.
fn answer(r: &Response, json_mode: bool, ctx: &str) -> (serde_json::Value, String) {
    assert_eq!(r.status, 200, "{ctx}: headers {:?}, body {:?}", r.headers, r.text());
    if json_mode {
        assert_eq!(r.header("Content-Type"), Some("application/json"), "{ctx}: {}", r.text());
        return (r.json(), r.text());
    }
    assert_eq!(r.header("Content-Type"), Some("text/event-stream"), "{ctx}");
    let evs = r.events();
    assert!(evs.first().is_some_and(Event::is_priming), "{ctx}: priming first: {evs:#?}");
    let last = evs.last().expect("events");
    assert!(!last.is_priming(), "{ctx}: no message after the priming event: {evs:#?}");
    (last.json(), last.data.clone())
}

/// The result message's bytes minus the text and id bytes: measured from two echoes of
/// different lengths, which must differ by exactly their text lengths (no escaping, no padding).
fn echo_overhead(server: &Server, sid: &str, json_mode: bool, ctx: &str) -> usize {
    let short = "a";
    let long = "b".repeat(100);
    let (v1, raw1) = answer(&post_within(server, sid, &echo(1, short), ctx), json_mode, ctx);
    let (v2, raw2) = answer(&post_within(server, sid, &echo(2, &long), ctx), json_mode, ctx);
    assert_eq!(v1["result"]["content"][0]["text"], short, "{ctx}: {v1}");
    assert_eq!(v2["result"]["content"][0]["text"], long.as_str(), "{ctx}: {v2}");
    assert_eq!(raw2.len() - raw1.len(), long.len() - short.len(), "{ctx}: {raw1} / {raw2}");
    raw1.len() - short.len() - digits(1)
}

/// Asserts the oversize error: -32603 naming `--replay-bytes`, `{eventBytes, replayBytes}`,
/// the request's id, no result.
fn assert_oversize_error(v: &serde_json::Value, id: u64, event_bytes: usize, ctx: &str) {
    assert_eq!(v["jsonrpc"], "2.0", "{ctx}: {v}");
    assert_eq!(v["id"], id, "{ctx}: the error answers the request: {v}");
    assert!(v.get("result").is_none(), "{ctx}: an error, not a result: {v}");
    let e = &v["error"];
    assert_eq!(e["code"], -32603, "{ctx}: {v}");
    let message = e["message"].as_str().unwrap_or_else(|| panic!("{ctx}: message: {v}"));
    assert!(message.contains("--replay-bytes"), "{ctx}: message names the flag: {v}");
    assert!(e["data"].is_object(), "{ctx}: data object: {v}");
    assert_eq!(e["data"]["eventBytes"], event_bytes, "{ctx}: size of the event: {v}");
    assert_eq!(e["data"]["replayBytes"], RING, "{ctx}: the configured limit: {v}");
}

/// Goal: in SSE mode (the default `auto`), an echo whose result is exactly `--replay-bytes` is
/// delivered unchanged; one byte more ends the stream with the -32603 error as its final event.
/// Method: N from the measured overhead; the N call's result must be exactly RING bytes.
#[test]
fn sse_result_at_the_limit_is_delivered_and_one_byte_over_is_a_32603_error() {
    for driver in DRIVERS {
        let server = start(driver, false);
        let sid = open_session(&server);
        let base = echo_overhead(&server, &sid, false, driver);

        let ctx = format!("{driver}: result of exactly --replay-bytes");
        let text = "x".repeat(RING - base - digits(3));
        let (v, raw) = answer(&post_within(&server, &sid, &echo(3, &text), &ctx), false, &ctx);
        assert_eq!(raw.len(), RING, "{ctx}: N is at the limit");
        assert_eq!(v["id"], 3, "{ctx}");
        assert_eq!(v["result"]["content"][0]["text"], text.as_str(), "{ctx}");

        let ctx = format!("{driver}: result of --replay-bytes + 1");
        let text = "x".repeat(RING + 1 - base - digits(4));
        let r = post_within(&server, &sid, &echo(4, &text), &ctx);
        let (v, _) = answer(&r, false, &ctx);
        assert_oversize_error(&v, 4, RING + 1, &ctx);
        let msgs = messages(&r.events());
        assert_eq!(msgs.len(), 1, "{ctx}: the error is the stream's only message: {msgs:#?}");
    }
}

/// Goal: the oversize error is an ordinary final event: it has an id of the call's stream, a
/// GET resume from the priming event returns it (then the end, not a hang), and the session
/// serves the next call. Method: an N+1 echo read to its end, an echo, the resume.
#[test]
fn sse_oversize_error_is_resumable_and_the_session_goes_on() {
    for driver in DRIVERS {
        let server = start(driver, false);
        let sid = open_session(&server);
        let base = echo_overhead(&server, &sid, false, driver);

        let ctx = format!("{driver}: oversize call");
        let text = "y".repeat(RING + 1 - base - digits(5));
        let r = post_within(&server, &sid, &echo(5, &text), &ctx);
        let (error, _) = answer(&r, false, &ctx);
        assert_oversize_error(&error, 5, RING + 1, &ctx);
        let evs = r.events();
        let priming = evs[0].id.clone().unwrap_or_else(|| panic!("{ctx}: priming id"));
        let error_id = evs.last().and_then(|e| e.id.clone());
        let error_id = error_id.unwrap_or_else(|| panic!("{ctx}: the error event has an id"));
        let (tag, stream, seq) = split_event_id(&priming).expect("priming id");
        let (etag, estream, eseq) = split_event_id(&error_id).expect("error id");
        assert_eq!((etag, estream), (tag, stream), "{ctx}: error on the call's stream");
        assert!(eseq > seq, "{ctx}: error after the priming event");

        let ctx = format!("{driver}: echo after the oversize error");
        let (v, _) = answer(&post_within(&server, &sid, &echo(6, "after"), &ctx), false, &ctx);
        assert_eq!(v["id"], 6, "{ctx}: {v}");
        assert_eq!(v["result"]["content"][0]["text"], "after", "{ctx}: {v}");

        let ctx = format!("{driver}: resume from the oversize call's priming event");
        let r = resume_within(&server, &sid, &priming, &ctx);
        assert_eq!(r.status, 200, "{ctx}: {}", r.text());
        let got = messages(&r.events());
        assert_eq!(got.len(), 1, "{ctx}: exactly the error: {got:#?}");
        assert_eq!(got[0].id.as_deref(), Some(error_id.as_str()), "{ctx}: same event");
        assert_eq!(got[0].json(), error, "{ctx}: the same error");
    }
}

/// Goal: with `--response-mode json`, the N echo is a 200 JSON result and N+1 a 200 JSON
/// -32603 error with the request's id (not a 202 with no body); the session serves the next
/// call. Method: as in SSE mode; the overhead is measured on JSON bodies.
#[test]
fn json_mode_result_at_the_limit_and_one_byte_over_is_a_32603_error_body() {
    for driver in DRIVERS {
        let server = start(driver, true);
        let sid = open_session(&server);
        let base = echo_overhead(&server, &sid, true, driver);

        let ctx = format!("{driver} json: result of exactly --replay-bytes");
        let text = "x".repeat(RING - base - digits(3));
        let (v, raw) = answer(&post_within(&server, &sid, &echo(3, &text), &ctx), true, &ctx);
        assert_eq!(raw.len(), RING, "{ctx}: N is at the limit");
        assert_eq!(v["id"], 3, "{ctx}");
        assert_eq!(v["result"]["content"][0]["text"], text.as_str(), "{ctx}");

        let ctx = format!("{driver} json: result of --replay-bytes + 1");
        let text = "x".repeat(RING + 1 - base - digits(4));
        let r = post_within(&server, &sid, &echo(4, &text), &ctx);
        let (v, _) = answer(&r, true, &ctx);
        assert_oversize_error(&v, 4, RING + 1, &ctx);

        let ctx = format!("{driver} json: echo after the oversize error");
        let (v, _) = answer(&post_within(&server, &sid, &echo(5, "after"), &ctx), true, &ctx);
        assert_eq!(v["id"], 5, "{ctx}: {v}");
        assert_eq!(v["result"]["content"][0]["text"], "after", "{ctx}: {v}");
    }
}

/// Goal: a progress notification (not the final message) too large for the ring ends the call
/// with the -32603 error as its only and final message: never a silent gap in the stream
/// followed by a normal result. Method: the client picks the progress token, so a token of the
/// right length makes `slow_counter`'s first progress event exactly RING+1 bytes (the size of
/// a progress event measured with a one-character token); the result itself is small.
#[test]
fn sse_progress_event_over_the_limit_ends_the_call_with_a_32603_error() {
    for driver in DRIVERS {
        let server = start(driver, false);
        let sid = open_session(&server);

        let ctx = format!("{driver}: progress size with a short token");
        let r = post_within(&server, &sid, &counter_with_token(1, 3, "t"), &ctx);
        let (v, _) = answer(&r, false, &ctx);
        assert!(v["result"].is_object(), "{ctx}: {v}");
        let msgs = messages(&r.events());
        assert_eq!(msgs.len(), 4, "{ctx}: 3 progress events and the result: {msgs:#?}");
        assert_eq!(progress_of(&msgs[0]), Some(1), "{ctx}: {msgs:#?}");
        assert_eq!(msgs[0].json()["params"]["progressToken"], "t", "{ctx}");
        // The token's encoded bytes are `"t"`: 3.
        let base = msgs[0].data.len() - 3;

        let ctx = format!("{driver}: progress event of --replay-bytes + 1");
        let token = "p".repeat(RING + 1 - base - 2);
        let r = post_within(&server, &sid, &counter_with_token(2, 3, &token), &ctx);
        let (v, _) = answer(&r, false, &ctx);
        assert_oversize_error(&v, 2, RING + 1, &ctx);
        let msgs = messages(&r.events());
        assert_eq!(msgs.len(), 1, "{ctx}: the error is the only message: {msgs:#?}");

        let ctx = format!("{driver}: echo after the oversize progress");
        let (v, _) = answer(&post_within(&server, &sid, &echo(3, "after"), &ctx), false, &ctx);
        assert_eq!(v["id"], 3, "{ctx}: {v}");
        assert_eq!(v["result"]["content"][0]["text"], "after", "{ctx}: {v}");
    }
}
