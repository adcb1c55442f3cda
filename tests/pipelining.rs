//! Goal: HTTP/1.1 pipelining across an SSE answer. A `ping` that reaches the server together
//! with a `tools/call` (one TCP write), or while that call's SSE stream is being written, is
//! neither lost nor answered out of order: the connection first completes the SSE response
//! (every event, then the chunked end) and then answers the ping with its JSON 200.
//!
//! Method: the real binary on both io drivers, one keep-alive connection per round, raw
//! HTTP/1.1 bytes over a blocking socket read into one buffer against a deadline (a lost
//! request fails the test after `BOUND` instead of hanging it). Each case repeats `ROUNDS`
//! times to shake out races between the stream writer and the socket reader.
mod support;

use std::time::Duration;

use support::*;

/// Repetitions of each case per driver.
const ROUNDS: u64 = 20;
/// Bound on the answers of one round.
const BOUND: Duration = Duration::from_secs(3);

fn ping(id: u64) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#)
}

fn post_of(server: &Server, sid: &str, body: &str) -> Vec<u8> {
    let mut h: Vec<(&str, &str)> = POST_HEADERS.to_vec();
    h.push(("Mcp-Session-Id", sid));
    request("POST", &server.path, &server.host(), &h, Some(body))
}

/// Asserts a complete SSE answer to call `id`: chunked, priming event first, progress
/// 1..=`steps` in order, then the result as the last event. Returns the result's text.
fn assert_sse_answer(r: &Response, id: u64, steps: u64, ctx: &str) -> String {
    assert_eq!(r.status, 200, "{ctx}: {}", r.text());
    assert_eq!(r.header("Content-Type"), Some("text/event-stream"), "{ctx}");
    assert_eq!(r.header("Transfer-Encoding"), Some("chunked"), "{ctx}");
    let evs = r.events();
    assert!(evs.first().is_some_and(Event::is_priming), "{ctx}: priming first: {evs:#?}");
    let msgs = messages(&evs);
    let progress: Vec<u64> = msgs.iter().filter_map(progress_of).collect();
    assert_eq!(progress, (1..=steps).collect::<Vec<_>>(), "{ctx}: progress of {msgs:#?}");
    assert_eq!(msgs.len() as u64, steps + 1, "{ctx}: progress and the result: {msgs:#?}");
    let last = msgs.last().expect("result").json();
    assert_eq!(last["id"], id, "{ctx}: the result is the last event: {last}");
    last["result"]["content"][0]["text"].as_str().expect("result text").to_owned()
}

/// Asserts the JSON answer to `ping` `id`.
fn assert_ping_answer(r: &Response, id: u64, ctx: &str) {
    assert_eq!(r.status, 200, "{ctx}: {}", r.text());
    assert_eq!(r.header("Content-Type"), Some("application/json"), "{ctx}");
    let v = r.json();
    assert_eq!(v["id"], id, "{ctx}: the ping's answer: {v}");
    assert!(v["result"].is_object(), "{ctx}: {v}");
}

/// Goal: an echo call and a ping in one TCP write are both answered, the SSE echo result (and
/// its chunked end) first, then the ping's JSON; twice per connection (keep-alive).
/// Method: `ROUNDS` fresh connections, each carrying two such pairs one after the other.
#[test]
fn echo_and_ping_in_one_write_are_answered_in_order() {
    for driver in DRIVERS {
        let server = Server::on(driver, &["--threads", "1"]);
        let sid = open_session(&server);
        for round in 0..ROUNDS {
            let mut wire = Wire::new(server.connect());
            for pair in 0..2u64 {
                let ctx = format!("{driver} round {round} pair {pair}");
                let (call_id, ping_id) =
                    (1000 * round + 10 * pair + 1, 1000 * round + 10 * pair + 2);
                let text = format!("r{round}p{pair}");
                let body = call(call_id, "echo", &format!(r#"{{"text":"{text}"}}"#), false);
                let mut raw = post_of(&server, &sid, &body);
                raw.extend(post_of(&server, &sid, &ping(ping_id)));
                send(&mut wire.stream, &raw);
                let first = wire.response(BOUND, &format!("{ctx}: echo answer"));
                assert_eq!(assert_sse_answer(&first, call_id, 0, &ctx), text, "{ctx}");
                let second = wire.response(BOUND, &format!("{ctx}: ping answer"));
                assert_ping_answer(&second, ping_id, &ctx);
            }
        }
    }
}

/// Goal: a ping pipelined behind a call whose stream stays open for a while (progress with
/// pauses) is answered after the whole stream, not lost and not interleaved.
/// Method: `slow_counter` (4 steps, 10 ms apart) and a ping in one write, `ROUNDS` times.
#[test]
fn slow_call_and_ping_in_one_write_are_answered_in_order() {
    for driver in DRIVERS {
        let server = Server::on(driver, &["--threads", "1"]);
        let sid = open_session(&server);
        for round in 0..ROUNDS {
            let ctx = format!("{driver} round {round}");
            let (call_id, ping_id) = (2 * round + 1, 2 * round + 2);
            let body = call(call_id, "slow_counter", r#"{"steps":4,"delay_ms":10}"#, true);
            let mut raw = post_of(&server, &sid, &body);
            raw.extend(post_of(&server, &sid, &ping(ping_id)));
            let mut wire = Wire::new(server.connect());
            send(&mut wire.stream, &raw);
            let first = wire.response(BOUND, &format!("{ctx}: slow_counter answer"));
            assert_sse_answer(&first, call_id, 4, &ctx);
            let second = wire.response(BOUND, &format!("{ctx}: ping answer"));
            assert_ping_answer(&second, ping_id, &ctx);
        }
    }
}

/// Goal: a ping written on the connection while the server is writing a call's SSE stream
/// (after the first progress event arrived, before the result) is kept and answered right
/// after the stream ends. Method: `slow_counter` with 30 steps 2 ms apart, so more events are
/// produced while the ping's bytes arrive; the ping is written once the first progress event
/// is in; both answers must then complete within `BOUND`, in order. `ROUNDS` times.
#[test]
fn ping_written_while_the_stream_is_open_is_answered_after_it() {
    const STEPS: u64 = 30;
    for driver in DRIVERS {
        let server = Server::on(driver, &["--threads", "1"]);
        let sid = open_session(&server);
        for round in 0..ROUNDS {
            let ctx = format!("{driver} round {round}");
            let (call_id, ping_id) = (2 * round + 1, 2 * round + 2);
            let body = call(call_id, "slow_counter", r#"{"steps":30,"delay_ms":2}"#, true);
            let mut wire = Wire::new(server.connect());
            send(&mut wire.stream, &post_of(&server, &sid, &body));
            let progressed =
                wire.read_until(BOUND, |b| b.windows(22).any(|w| w == b"notifications/progress"));
            assert!(progressed, "{ctx}: no progress event: {}", String::from_utf8_lossy(&wire.buf));
            assert!(
                parse_next(&wire.buf).is_none(),
                "{ctx}: the stream ended before the ping was written; make the call longer"
            );
            send(&mut wire.stream, &post_of(&server, &sid, &ping(ping_id)));
            let first = wire.response(BOUND, &format!("{ctx}: slow_counter answer"));
            assert_sse_answer(&first, call_id, STEPS, &ctx);
            let second = wire.response(BOUND, &format!("{ctx}: ping answer after the stream"));
            assert_ping_answer(&second, ping_id, &ctx);
        }
    }
}

/// Goal: as above, with the ping timed to land when the tool's next progress notification is
/// due, which is when the stream writer may be woken for an event while it is reading the
/// ping's bytes. Method: `slow_counter` with 5 steps 1 ms apart; after the first progress
/// event, the client waits 0.8 to 2 ms (a different phase each round) and writes the ping;
/// `TIMED_ROUNDS` short rounds.
#[test]
fn ping_landing_with_a_progress_notification_is_answered_after_the_stream() {
    const STEPS: u64 = 5;
    const TIMED_ROUNDS: u64 = 100;
    for driver in DRIVERS {
        let server = Server::on(driver, &["--threads", "1"]);
        let sid = open_session(&server);
        for round in 0..TIMED_ROUNDS {
            let wait = Duration::from_micros(800 + (round % 7) * 200);
            let ctx = format!("{driver} round {round} (ping {wait:?} after the first progress)");
            let (call_id, ping_id) = (2 * round + 1, 2 * round + 2);
            let body = call(call_id, "slow_counter", r#"{"steps":5,"delay_ms":1}"#, true);
            let mut wire = Wire::new(server.connect());
            send(&mut wire.stream, &post_of(&server, &sid, &body));
            let progressed =
                wire.read_until(BOUND, |b| b.windows(22).any(|w| w == b"notifications/progress"));
            assert!(progressed, "{ctx}: no progress event: {}", String::from_utf8_lossy(&wire.buf));
            // Elapsed time is what this tests: the ping's phase against the next progress.
            std::thread::sleep(wait);
            send(&mut wire.stream, &post_of(&server, &sid, &ping(ping_id)));
            let first = wire.response(BOUND, &format!("{ctx}: slow_counter answer"));
            assert_sse_answer(&first, call_id, STEPS, &ctx);
            let second = wire.response(BOUND, &format!("{ctx}: ping answer after the stream"));
            assert_ping_answer(&second, ping_id, &ctx);
        }
    }
}
