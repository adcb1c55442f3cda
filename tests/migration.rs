//! Goal: the migration boundary of CONTRACT §4 on the wire (issue 4 §6). A client whose stream
//! dropped mid-call and who re-POSTs is refused with a 409 that tells it where to resume, and
//! the tool never runs twice (seed case 1); a request POSTed while a replay is owed or being
//! written is held until the replay is flushed, so its answer never overtakes the replayed tail
//! (seed case 2); `Idempotency-Key` dedups; reused ids run fresh only when idempotent;
//! `notifications/cancelled`, `--owed-timeout-secs` and `--owed-wait-ms` release or refuse as
//! written; and `--migration-policy off` shows the double execution the strict tests catch.
//!
//! Method: the real binary on 127.0.0.1:0 (`--threads 1`, both io drivers where cheap), raw
//! HTTP/1.1 over loopback. A call's stream is "dropped" by closing the socket after k events.
//! Side effects are read from the server-global `slow_counter` execution counter
//! (`get_counter` in a fresh session); decisions from `/metrics` (`--metrics-listen`).

mod support;
use std::io::{ErrorKind, Read};
use std::net::TcpStream;
use std::thread::sleep;
use std::time::{Duration, Instant};
use support::*;

/// The seed's long call: 10 steps, 50 ms apart, so a cut and two re-POSTs land mid-call.
const LONG: &str = r#"{"steps":10,"delay_ms":50}"#;
/// Bound on anything that must "not hang".
const PROMPT: Duration = Duration::from_secs(3);

/// The session header, for `post`.
fn in_session(sid: &str) -> [(&str, &str); 1] {
    [("Mcp-Session-Id", sid)]
}

/// A 409's JSON-RPC code and its `data.matchedBy` (CONTRACT §4 step 2).
type Refusal = (i64, Option<&'static str>);
/// -31001 for a retry with the owed request's id.
const OWED_BY_ID: Refusal = (-31001, Some("id"));
/// -31001 for a request without an `Idempotency-Key` with the owed request's method and params.
const OWED_BY_PARAMS: Refusal = (-31001, Some("params"));
/// -31004: held too long while the session owed; no match, so no `matchedBy`.
const HELD_TOO_LONG: Refusal = (-31004, None);

/// Checks a 409 refusal: headers, JSON-RPC error (retry's id, `code`) and `data.owedStreams[0]`
/// naming request `owed_id`, its `first` event and the last event `written` to the client.
/// The hint is the last event the client is *known* to hold; for a stream never resumed that is
/// its priming event (`first`), never the last one written, which may have been lost in flight.
/// `refusal` is the code and the `data.matchedBy` it must carry (see `OWED_BY_ID`).
/// Returns `(hint header, inFlight)`.
fn assert_conflict(
    r: &Response,
    id: u64,
    refusal: Refusal,
    owed_id: u64,
    written: &str,
    first: &str,
    ctx: &str,
) -> (String, bool) {
    assert_eq!(r.status, 409, "{ctx}: {}", r.text());
    assert_eq!(r.header("Mcp-Stream-Resumable"), Some("true"), "{ctx}: {:?}", r.headers);
    let hint =
        r.header("Last-Event-ID").unwrap_or_else(|| panic!("{ctx}: no hint {:?}", r.headers));
    assert_eq!(hint, first, "{ctx}: the hint is the last event known delivered");
    let v = r.json();
    assert_eq!(v["id"], id, "{ctx}: the error answers the retry: {v}");
    let (code, matched_by) = refusal;
    assert_eq!(v["error"]["code"], code, "{ctx}: {v}");
    let matched = v["error"]["data"].get("matchedBy").and_then(|m| m.as_str());
    assert_eq!(matched, matched_by, "{ctx}: how the retry was matched: {v}");
    let owed = &v["error"]["data"]["owedStreams"][0];
    assert_eq!(owed["requestId"], owed_id, "{ctx}: {v}");
    assert_eq!(owed["lastEventId"], first, "{ctx}: {v}");
    assert_eq!(owed["lastWrittenEventId"], written, "{ctx}: {v}");
    assert_eq!(owed["firstEventId"], first, "{ctx}: {v}");
    let in_flight = owed["inFlight"].as_bool().unwrap_or_else(|| panic!("{ctx}: inFlight {v}"));
    (hint.to_owned(), in_flight)
}

/// Starts a call of `args` as request `id` and drops its stream after `k` progress events;
/// returns once the server has seen the cut (it ended the connection: the stream is owed), so
/// `server` needs its admin listener. Returns (priming id, last id held).
fn call_and_cut(
    server: &Server,
    sid: &str,
    id: u64,
    args: &str,
    k: u64,
    ctx: &str,
) -> (String, String) {
    let mut s = call_stream(server, sid, &call(id, "slow_counter", args, true), &[]);
    let priming = read_priming(&mut s, ctx);
    let last = read_progress(&mut s, k, priming.clone(), ctx);
    s.cut();
    wait_closed(server, 0, ctx);
    (priming, last)
}

/// Seed case 1 under strict policy: re-POSTs of a dropped call (same id; new id with the same
/// params in another key order and another progress token) get 409 -31001 with the resume hint,
/// nothing runs, and the GET with the hint delivers the whole first call from its priming event
/// (the client may have lost events in flight), while a GET from the client's own last id
/// delivers exactly the part it lacked.
/// Method: cut after k = 3 events; counters from `/metrics` before and after.
#[test]
fn seed_case_1_re_post_of_a_dropped_call_is_refused_and_resume_delivers_the_rest() {
    for driver in DRIVERS {
        let (server, m) = server_with_metrics(driver, &["--threads", "1"]);
        let m0 = scrape(&m);
        let sid = open_session(&server);
        let before = counter(&server);
        let (priming, last) = call_and_cut(&server, &sid, 1, LONG, 3, driver);
        let same_id = call(1, "slow_counter", LONG, true);
        let r = post(&server, &in_session(&sid), &same_id);
        let (_, in_flight) = assert_conflict(&r, 1, OWED_BY_ID, 1, &last, &priming, driver);
        assert!(in_flight, "{driver}: the call is still running");
        assert_eq!(counter(&server), before + 1, "{driver}: the same-id re-POST ran nothing");
        let new_id = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"_meta":{"progressToken":"other"},"arguments":{"delay_ms":50,"steps":10},"name":"slow_counter"}}"#;
        let r = post(&server, &in_session(&sid), new_id);
        let (hint, _) = assert_conflict(&r, 2, OWED_BY_PARAMS, 1, &last, &priming, driver);
        assert_eq!(counter(&server), before + 1, "{driver}: the new-id re-POST ran nothing");
        let started = Instant::now();
        let evs = resume(&server, &sid, &hint).rest();
        assert!(started.elapsed() < PROMPT, "{driver}: resume hung");
        let text = assert_rest(&evs, &hint, 1, 10, 1, driver);
        assert_eq!(text, (before + 1).to_string(), "{driver}");
        // A client that kept its own last id gets exactly the part it lacked.
        let own = resume(&server, &sid, &last).rest();
        assert_eq!(assert_rest(&own, &last, 4, 10, 1, driver), text, "{driver}: own cursor");
        assert_eq!(counter(&server), before + 1, "{driver}: exactly one execution");
        let m1 = scrape(&m);
        let retry = r#"tidemark_migrations_rejected_total{reason="retry_of_owed"}"#;
        assert!(metric(&m1, retry) >= metric(&m0, retry) + 2, "{driver}: {m1}");
        assert!(
            metric(&m1, "tidemark_replays_total") > metric(&m0, "tidemark_replays_total"),
            "{driver}"
        );
    }
}

/// Goal: issue 17 item 8, CONTRACT §4 step 2: two identical calls on one session (new ids,
/// distinct progress tokens) are two calls once the client says so. The first's stream is cut
/// while it runs; the second, re-sent with an `Idempotency-Key` the session has not seen, is
/// not matched by params (it was 409 -31001 naming the first's stream) but held by step 4 until
/// the first's stream is resumed, then runs: the first's tail arrives once, the second's whole
/// stream follows under its own id and token, and `slow_counter` ran exactly twice.
/// Method: `--threads 1`, the first cut after 2 events; the keyed POST on its own socket, the
/// resume sent once `tidemark_posts_held_total` says the POST is held.
#[test]
fn an_identical_call_with_a_fresh_key_is_a_new_call_held_until_the_resume() {
    for driver in DRIVERS {
        let (server, m) = server_with_metrics(driver, &["--threads", "1"]);
        let sid = open_session(&server);
        let before = counter(&server);
        let (_, last) = call_and_cut(&server, &sid, 1, LONG, 2, driver);
        let held_before = metric(&scrape(&m), "tidemark_posts_held_total");
        let mut h: Vec<(&str, &str)> = POST_HEADERS.to_vec();
        h.extend([("Mcp-Session-Id", sid.as_str()), ("Idempotency-Key", "second-call")]);
        let second = call(2, "slow_counter", LONG, true);
        let mut socket = server.connect();
        send(&mut socket, &request("POST", &server.path, &server.host(), &h, Some(&second)));
        let held = poll_until(PROMPT, || {
            metric(&scrape(&m), "tidemark_posts_held_total") > held_before || has_bytes(&socket)
        });
        assert!(held, "{driver}: the keyed POST was neither held nor answered");
        assert!(
            metric(&scrape(&m), "tidemark_posts_held_total") > held_before,
            "{driver}: the keyed POST was answered, not held: {}",
            read_response(&mut socket).text()
        );
        let tail = resume(&server, &sid, &last).rest();
        let text = assert_rest(&tail, &last, 3, 10, 1, driver);
        assert_eq!(text, (before + 1).to_string(), "{driver}: the first call's result");
        assert_tokens(&tail, 1, driver);
        let mut s2 = SseStream::from_stream(socket);
        let priming = read_priming(&mut s2, driver);
        let evs = s2.rest();
        let text = assert_rest(&evs, &priming, 1, 10, 2, &format!("{driver} second"));
        assert_eq!(text, (before + 2).to_string(), "{driver}: the second ran after the first");
        assert_tokens(&evs, 2, driver);
        assert_eq!(counter(&server), before + 2, "{driver}: exactly two executions");
    }
}

/// True when `socket` has bytes waiting to be read (an answer arrived).
fn has_bytes(socket: &TcpStream) -> bool {
    let mut one = [0u8; 1];
    socket.set_nonblocking(true).expect("nonblocking");
    let peeked = socket.peek(&mut one);
    socket.set_nonblocking(false).expect("blocking");
    matches!(peeked, Ok(n) if n > 0)
}

/// Every progress notification of `evs` carries progress token `token`.
fn assert_tokens(evs: &[Event], token: u64, ctx: &str) {
    for ev in messages(evs).iter().filter(|e| progress_of(e).is_some()) {
        assert_eq!(ev.json()["params"]["progressToken"], token, "{ctx}: {}", ev.data);
    }
}

/// Goal: a request whose id names a retained request of the session is that request's retry
/// or reuse, never another call's: a settled call's id POSTed again with the params of another
/// call that is owed is 409 -31002 naming its own stream (step 3), not -31001 naming the owed
/// one, whose stream a client would then resume (issue 17 item 8).
/// Method: a short call (id 5) read to its end, then an identical call (id 1) cut while it
/// runs; id 5 POSTed again with the same params.
#[test]
fn a_retained_id_is_never_matched_by_params_to_another_call() {
    for driver in DRIVERS {
        let server = Server::with_admin(driver, &["--threads", "1"]);
        let sid = open_session(&server);
        let before = counter(&server);
        let settled = call(5, "slow_counter", LONG, true);
        complete(&server, &sid, &settled, driver);
        call_and_cut(&server, &sid, 1, LONG, 2, driver);
        let r = post(&server, &in_session(&sid), &settled);
        assert_eq!(r.status, 409, "{driver}: {}", r.text());
        let v = r.json();
        assert_eq!(v["error"]["code"], -31002, "{driver}: the id is its own request's: {v}");
        assert_eq!(v["error"]["data"]["owedStreams"][0]["requestId"], 5, "{driver}: {v}");
        assert_eq!(counter(&server), before + 2, "{driver}: the refusal ran nothing");
    }
}

/// Seed case 1 with `--migration-policy off` (what the SDK servers do): the re-POST gets a 200
/// and the tool runs a second time. Proof that the strict test above can fail. Also proof that
/// the dedup checks can fail: two POSTs of one call without an `Idempotency-Key` run twice.
#[test]
fn policy_off_shows_the_double_execution() {
    for driver in DRIVERS {
        let server = Server::with_admin(driver, &["--threads", "1", "--migration-policy", "off"]);
        let sid = open_session(&server);
        let before = counter(&server);
        call_and_cut(&server, &sid, 1, LONG, 3, driver);
        let mut s = call_stream(&server, &sid, &call(1, "slow_counter", LONG, true), &[]);
        assert_eq!(s.status, 200, "{driver}: the re-POST is accepted");
        let msgs = messages(&s.rest());
        let last = msgs.last().expect("result").json();
        assert_eq!(last["id"], 1, "{driver}");
        assert_eq!(counter(&server), before + 2, "{driver}: the tool ran twice");

        let args = r#"{"steps":2}"#;
        let strict = Server::on(driver, &["--threads", "1"]);
        let sid = open_session(&strict);
        let before = counter(&strict);
        for id in [5, 6] {
            call_stream(&strict, &sid, &call(id, "slow_counter", args, true), &[]).rest();
        }
        assert_eq!(counter(&strict), before + 2, "{driver}: no key, no dedup");
    }
}

/// Goal: `Idempotency-Key` dedup (step 1): a second POST with the key runs nothing and gets the
/// original stream from its first message with its own id on the final response, whether the
/// first call completed or was dropped mid-way; the key with other params is 422 -31005. Under
/// `--migration-policy off` step 1 still applies (CONTRACT §4 says off skips steps 2–4).
/// Method: counter and `tidemark_dedup_hits_total` around each case.
#[test]
fn idempotency_key_dedups_and_refuses_other_params() {
    for driver in DRIVERS {
        for policy in ["strict", "off"] {
            let ctx = format!("{driver} {policy}");
            let (server, m) =
                server_with_metrics(driver, &["--threads", "1", "--migration-policy", policy]);
            let m0 = scrape(&m);
            let sid = open_session(&server);
            let before = counter(&server);
            let short = r#"{"steps":3,"delay_ms":5}"#;
            let key_a = [("Idempotency-Key", "key-a")];
            let mut s1 = call_stream(&server, &sid, &call(10, "slow_counter", short, true), &key_a);
            let priming = read_priming(&mut s1, &ctx);
            let text = assert_rest(&s1.rest(), &priming, 1, 3, 10, &ctx);
            assert_eq!(text, (before + 1).to_string(), "{ctx}");
            drop(s1);
            let mut s2 = call_stream(&server, &sid, &call(11, "slow_counter", short, true), &key_a);
            assert_eq!(s2.status, 200, "{ctx}");
            let replayed = s2.rest();
            drop(s2);
            let again = assert_rest(&replayed, &priming, 1, 3, 11, &format!("{ctx} dedup"));
            assert_eq!(again, text, "{ctx}: the original answer");
            // The retry sent progressToken 11 (the original 10): its progress must carry 11.
            let tokens: Vec<serde_json::Value> = replayed
                .iter()
                .filter(|e| e.data.contains("notifications/progress"))
                .map(|e| e.json()["params"]["progressToken"].clone())
                .collect();
            assert_eq!(tokens, vec![serde_json::json!(11); 3], "{ctx}: the retry's own token");
            assert_eq!(counter(&server), before + 1, "{ctx}: one execution");

            let key_b = [("Idempotency-Key", "key-b")];
            let args = r#"{"steps":10,"delay_ms":20}"#;
            let mut s3 = call_stream(&server, &sid, &call(12, "slow_counter", args, true), &key_b);
            let priming = read_priming(&mut s3, &ctx);
            read_progress(&mut s3, 2, priming.clone(), &ctx);
            s3.cut();
            wait_closed(&server, 0, &ctx);
            let mut s4 = call_stream(&server, &sid, &call(13, "slow_counter", args, true), &key_b);
            assert_eq!(s4.status, 200, "{ctx}");
            let text = assert_rest(&s4.rest(), &priming, 1, 10, 13, &format!("{ctx} dropped"));
            assert_eq!(text, (before + 2).to_string(), "{ctx}");
            assert_eq!(counter(&server), before + 2, "{ctx}: one execution of the dropped call");

            let other = call(14, "slow_counter", r#"{"steps":4}"#, true);
            let mut h = in_session(&sid).to_vec();
            h.extend(key_a);
            let r = post(&server, &h, &other);
            assert_eq!(r.status, 422, "{ctx}: {}", r.text());
            assert_eq!(r.json()["id"], 14, "{ctx}");
            assert_eq!(r.json()["error"]["code"], -31005, "{ctx}");
            assert_eq!(counter(&server), before + 2, "{ctx}: nothing ran");
            let m1 = scrape(&m);
            assert!(
                metric(&m1, "tidemark_dedup_hits_total")
                    >= metric(&m0, "tidemark_dedup_hits_total") + 2,
                "{ctx}"
            );
        }
    }
}

/// Goal: step 3: reusing the id of a completed request runs fresh when the new request is
/// idempotent (`echo`, `tools/list`, `ping`) and is 409 -31002 with the resume headers when it
/// is not (`slow_counter`, same or other params); a refused reuse runs nothing.
/// Method: a table of (first request, reuse, expected status), one session; counter checks.
#[test]
fn reused_ids_run_fresh_only_when_idempotent() {
    let echo = |id: u64, t: &str| call(id, "echo", &format!(r#"{{"text":"{t}"}}"#), false);
    let list = |id: u64| format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list"}}"#);
    let ping = |id: u64| format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
    let slow = |id: u64, steps: u64| slow_call(id, steps);
    let cases: Vec<(&str, String, String, u16)> = vec![
        ("echo after echo", echo(20, "first"), echo(20, "second"), 200),
        ("tools/list after tools/list", list(21), list(21), 200),
        ("ping after ping", ping(22), ping(22), 200),
        ("tools/list after slow_counter", slow(23, 1), list(23), 200),
        ("ping after slow_counter", slow(24, 1), ping(24), 200),
        ("echo after slow_counter", slow(25, 1), echo(25, "second"), 200),
        ("slow_counter after slow_counter", slow(26, 1), slow(26, 1), 409),
        ("slow_counter, other params", slow(27, 1), slow(27, 2), 409),
    ];
    for driver in DRIVERS {
        let (server, m) = server_with_metrics(driver, &["--threads", "1"]);
        let m0 = scrape(&m);
        let sid = open_session(&server);
        let before = counter(&server);
        let mut executions = 0;
        for (name, first, reuse, want) in &cases {
            let ctx = format!("{driver} {name}");
            let id = id_of(first);
            complete(&server, &sid, first, &ctx);
            executions += u64::from(first.contains("slow_counter"));
            let r = post(&server, &in_session(&sid), reuse);
            assert_eq!(r.status, *want, "{ctx}: {}", r.text());
            if *want == 200 {
                let v = answer_of(&r, &ctx);
                assert_eq!(v["id"], id, "{ctx}: {v}");
                assert!(v.get("result").is_some(), "{ctx}: ran fresh: {v}");
                if reuse.contains(r#""echo""#) {
                    assert_eq!(v["result"]["content"][0]["text"], "second", "{ctx}: ran fresh");
                }
                continue;
            }
            let v = r.json();
            assert_eq!(v["id"], id, "{ctx}: {v}");
            assert_eq!(v["error"]["code"], -31002, "{ctx}: {v}");
            assert_eq!(v["error"]["data"]["owedStreams"][0]["requestId"], id, "{ctx}: {v}");
            assert_eq!(r.header("Mcp-Stream-Resumable"), Some("true"), "{ctx}");
            assert!(r.header("Last-Event-ID").is_some(), "{ctx}: no hint: {:?}", r.headers);
        }
        assert_eq!(counter(&server), before + executions, "{driver}: refused reuses ran nothing");
        let reused = r#"tidemark_migrations_rejected_total{reason="id_reused"}"#;
        assert!(metric(&scrape(&m), reused) >= metric(&m0, reused) + 2, "{driver}");
    }
}

/// Goal: CONTRACT §4 step 3: the `Last-Event-ID` hint of a -31002 refusal fetches the original
/// answer by GET. Method: a completed, delivered `slow_counter` (read to its end), the same id
/// POSTed again → 409; GET with the hint must carry the original final response.
#[test]
fn id_reused_hint_fetches_the_original_answer() {
    for driver in DRIVERS {
        let server = Server::on(driver, &["--threads", "1"]);
        let sid = open_session(&server);
        let (original, final_event) = complete(&server, &sid, &slow_call(26, 2), driver);
        let r = post(&server, &in_session(&sid), &slow_call(26, 2));
        assert_eq!(r.status, 409, "{driver}: {}", r.text());
        assert_eq!(r.json()["error"]["code"], -31002, "{driver}");
        let hint = r.header("Last-Event-ID").expect("hint").to_owned();
        let mut g = resume(&server, &sid, &hint);
        assert_eq!(g.status, 200, "{driver}");
        let evs = messages(&g.rest());
        let got = evs.iter().map(Event::json).find(|j| j["id"] == 26);
        assert_eq!(
            got.as_ref(),
            Some(&original),
            "{driver}: GET with hint {hint} (the final response is event {final_event:?}) \
             did not return the original answer; got {evs:#?}"
        );
    }
}

/// A `slow_counter` call of `steps` steps, no delay.
fn slow_call(id: u64, steps: u64) -> String {
    call(id, "slow_counter", &format!(r#"{{"steps":{steps}}}"#), true)
}

/// The numeric `id` of a JSON-RPC request body.
fn id_of(body: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(body).expect("json body");
    v["id"].as_u64().expect("numeric id")
}

/// Sends `body` and reads its whole answer (JSON or SSE); returns the final JSON-RPC message and
/// the id of the SSE event that carried it.
fn complete(
    server: &Server,
    sid: &str,
    body: &str,
    ctx: &str,
) -> (serde_json::Value, Option<String>) {
    let r = post(server, &in_session(sid), body);
    assert_eq!(r.status, 200, "{ctx}: {}", r.text());
    let last_event = r.events().last().and_then(|e| e.id.clone());
    (answer_of(&r, ctx), last_event)
}

/// The final JSON-RPC message of a 200 answer, JSON or SSE.
fn answer_of(r: &Response, ctx: &str) -> serde_json::Value {
    if r.header("Content-Type") == Some("text/event-stream") {
        let msgs = messages(&r.events());
        msgs.last().unwrap_or_else(|| panic!("{ctx}: empty stream")).json()
    } else {
        r.json()
    }
}

/// Goal: step 2 for a *parked* stream (SEP-1699: the server closed it on purpose): a re-POST,
/// same id or new id, is 409 -31001 and runs nothing new; the GET with the hint gets the result.
/// Method: `--tools conformance`'s `test_reconnection`, which parks its stream at once.
#[test]
fn re_post_of_a_parked_call_is_refused_and_the_get_answers() {
    for driver in DRIVERS {
        let server = Server::on(driver, &["--threads", "1", "--tools", "conformance"]);
        let sid = open_session(&server);
        let body = |id: u64| call(id, "test_reconnection", "{}", false);
        let mut s = call_stream(&server, &sid, &body(1), &[]);
        let evs = s.rest();
        assert_eq!(evs.len(), 1, "{driver}: parked after the priming event: {evs:#?}");
        let priming = evs[0].id.clone().expect("priming id");
        let mut hint = String::new();
        for id in [1, 2] {
            let r = post(&server, &in_session(&sid), &body(id));
            let ctx = format!("{driver} re-POST id {id}");
            let by = if id == 1 { OWED_BY_ID } else { OWED_BY_PARAMS };
            hint = assert_conflict(&r, id, by, 1, &priming, &priming, &ctx).0;
        }
        let msgs = messages(&resume(&server, &sid, &hint).rest());
        assert_eq!(msgs.len(), 1, "{driver}: the result, once: {msgs:#?}");
        assert_eq!(msgs[0].json()["id"], 1, "{driver}");
    }
}

/// Goal: `notifications/cancelled` naming an owed request is accepted (202), stops it and
/// releases the session: a new POST is answered at once instead of being held, the cancelled
/// call counts once, and its tail is dropped (a resume carries no result). Method: cut a long call after 2 events, cancel it, POST `echo`
/// (a hold would last the default 2 s `--owed-wait-ms` and end in 409).
#[test]
fn cancelled_releases_the_owed_stream() {
    for driver in DRIVERS {
        let server = Server::with_admin(driver, &["--threads", "1"]);
        let sid = open_session(&server);
        let before = counter(&server);
        let held = call_and_cut(&server, &sid, 1, LONG, 2, driver);
        let cancel = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"user"}}"#;
        let r = post(&server, &in_session(&sid), cancel);
        assert_eq!(r.status, 202, "{driver}: {}", r.text());
        let started = Instant::now();
        let r = post(&server, &in_session(&sid), &call(2, "echo", r#"{"text":"after"}"#, false));
        assert_eq!(r.status, 200, "{driver}: {}", r.text());
        assert!(started.elapsed() < Duration::from_millis(1500), "{driver}: the POST was held");
        assert_eq!(answer_of(&r, driver)["result"]["content"][0]["text"], "after", "{driver}");
        assert_eq!(counter(&server), before + 1, "{driver}: one execution");
        let (_, last) = held;
        let evs = messages(&resume(&server, &sid, &last).rest());
        assert!(evs.iter().all(|e| e.json().get("result").is_none()), "{driver}: {evs:#?}");
    }
}

/// Goal: `--owed-timeout-secs 1`: an owed stream nobody resumes is abandoned (counted in
/// `tidemark_owed_abandoned_total`) after about a second, and then a POST runs without waiting (a hold
/// would end in 409 -31004 after `--owed-wait-ms 500`). Method: cut a short call at once and
/// poll `/metrics`.
#[test]
fn owed_stream_nobody_resumes_is_abandoned() {
    for driver in DRIVERS {
        let args = ["--threads", "1", "--owed-timeout-secs", "1", "--owed-wait-ms", "500"];
        let (server, m) = server_with_metrics(driver, &args);
        let sid = open_session(&server);
        call_and_cut(&server, &sid, 1, r#"{"steps":3,"delay_ms":5}"#, 0, driver);
        assert_eq!(metric(&scrape(&m), "tidemark_owed_abandoned_total"), 0, "{driver}: not yet");
        let what = format!("{driver}: the owed stream to be abandoned");
        wait_metric(&m, "tidemark_owed_abandoned_total", Duration::from_secs(4), &what, |n| n > 0);
        let r = post(&server, &in_session(&sid), &call(2, "echo", r#"{"text":"free"}"#, false));
        assert_eq!(r.status, 200, "{driver}: {}", r.text());
        assert_eq!(answer_of(&r, driver)["result"]["content"][0]["text"], "free", "{driver}");
    }
}

/// Goal: `--owed-wait-ms 300`: a POST held while a stream stays owed gets 409 -31004 after about
/// 300 ms, with the resume headers and `data.owedStreams`; after the resume a POST runs.
/// Method: cut a long call after 2 events, POST `echo`, time it; counters from `/metrics`.
#[test]
fn post_held_too_long_gets_409_with_the_hint() {
    for driver in DRIVERS {
        let (server, m) = server_with_metrics(driver, &["--threads", "1", "--owed-wait-ms", "300"]);
        let m0 = scrape(&m);
        let sid = open_session(&server);
        let (priming, last) = call_and_cut(&server, &sid, 1, LONG, 2, driver);
        let started = Instant::now();
        let r = post(&server, &in_session(&sid), &call(2, "echo", r#"{"text":"x"}"#, false));
        let waited = started.elapsed();
        let (hint, _) = assert_conflict(&r, 2, HELD_TOO_LONG, 1, &last, &priming, driver);
        assert!(waited >= Duration::from_millis(250), "{driver}: not held: {waited:?}");
        assert!(waited < PROMPT, "{driver}: held far too long: {waited:?}");
        assert_rest(&resume(&server, &sid, &hint).rest(), &hint, 1, 10, 1, driver);
        let r = post(&server, &in_session(&sid), &call(3, "echo", r#"{"text":"y"}"#, false));
        assert_eq!(r.status, 200, "{driver}: {}", r.text());
        let m1 = scrape(&m);
        let held = r#"tidemark_migrations_rejected_total{reason="held_too_long"}"#;
        assert!(metric(&m1, held) > metric(&m0, held), "{driver}");
        assert!(
            metric(&m1, "tidemark_posts_held_total") > metric(&m0, "tidemark_posts_held_total"),
            "{driver}"
        );
    }
}

/// A response read without blocking, so one thread can watch two sockets and tell which
/// answer arrived first.
struct Watched {
    socket: TcpStream,
    bytes: Vec<u8>,
}

impl Watched {
    fn open(server: &Server, raw: &[u8]) -> Watched {
        let mut socket = server.connect();
        send(&mut socket, raw);
        socket.set_nonblocking(true).expect("nonblocking");
        Watched { socket, bytes: Vec::new() }
    }

    /// Takes whatever has arrived; true once the response is complete.
    fn poll(&mut self) -> bool {
        let mut tmp = [0u8; 16 * 1024];
        loop {
            match self.socket.read(&mut tmp) {
                Ok(0) => break,
                Ok(n) => self.bytes.extend_from_slice(&tmp[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        parse_complete(&self.bytes).is_some()
    }

    fn response(&self) -> Response {
        parse_complete(&self.bytes).expect("complete response")
    }
}

/// Which request of a trial goes on the wire first.
#[derive(Clone, Copy, Debug)]
enum Order {
    /// The resume, then at once the new POST.
    ResumeFirst,
    /// The new POST, then the resume once the server has the POST (under the strict policy:
    /// once it holds it).
    PostFirst,
}

/// How often a trial looks at its two sockets. A tail that completes within this after the
/// echo may be counted first, so it bounds the overtaking a trial could miss.
const WATCH_EVERY: Duration = Duration::from_micros(100);

/// Starts the short call of a seed-case-2 trial as request `id`, drops it after its priming
/// event and returns that event's id once the call is done. `None` when the server had written
/// the whole call before it saw the cut (a client slow to cut, on a loaded host): the stream is
/// then settled, not owed, and the trial would prove nothing.
fn cut_short_call(server: &Server, sid: &str, id: u64, strict: bool, ctx: &str) -> Option<String> {
    let body = call(id, "slow_counter", r#"{"steps":3,"delay_ms":3}"#, true);
    let mut s = call_stream(server, sid, &body, &[]);
    let priming = read_priming(&mut s, ctx);
    s.cut();
    if strict {
        // Until the call is done: the 409 names the owed stream and says whether it runs.
        return (wait_call_done(server, sid, &body, ctx) == CallEnd::Owed).then_some(priming);
    }
    // Not a wait on a state, for want of one: under `--migration-policy off` no request tells
    // whether the call still runs without running it again (a re-POST) or resuming its stream
    // (a GET). So this waits well past the call's 3 × 3 ms. A call still running would let the
    // echo overtake its live tail under either policy: lateness can only make this proof pass
    // for the wrong reason, never fail it.
    sleep(Duration::from_millis(40));
    Some(priming)
}

/// Attempts at a trial's short call before its trial fails: each is retried only when the
/// call ran to its end before its cut reached the server.
const CUT_ATTEMPTS: u64 = 8;

/// One seed-case-2 trial: a short call is dropped after its priming event and finishes; the
/// client resumes it and POSTs `echo`. Returns the order in which the two answers completed
/// (`"tail"`, `"echo"`), as seen by one thread polling both sockets: when the echo is complete,
/// the resume socket is read once more, so a tail that arrived first is always counted first.
/// `server` needs its admin listener.
fn seed_case_2_trial(
    server: &Server,
    sid: &str,
    n: u64,
    order: Order,
    strict: bool,
) -> Vec<&'static str> {
    let ctx = format!("trial {n} {order:?}");
    let (id, priming) = (0..CUT_ATTEMPTS)
        .map(|attempt| 1000 + 2 * (CUT_ATTEMPTS * n + attempt))
        .find_map(|id| cut_short_call(server, sid, id, strict, &ctx).map(|p| (id, p)))
        .unwrap_or_else(|| panic!("{ctx}: each call was written whole before its cut"));
    let echo_id = id + 1;
    let get = request(
        "GET",
        &server.path,
        &server.host(),
        &[("Accept", "text/event-stream"), ("Mcp-Session-Id", sid), ("Last-Event-ID", &priming)],
        None,
    );
    let mut h: Vec<(&str, &str)> = POST_HEADERS.to_vec();
    h.push(("Mcp-Session-Id", sid));
    let echo_body = call(echo_id, "echo", r#"{"text":"new"}"#, false);
    let post_raw = request("POST", &server.path, &server.host(), &h, Some(&echo_body));
    // PostFirst sends the resume once the server has the POST: holds it (strict), or has
    // parsed it (off, where nothing is held).
    let metrics = server.metrics();
    let has_post = if strict { "tidemark_posts_held_total" } else { "tidemark_requests_total" };
    let before = metric(&scrape(&metrics), has_post);
    let mut tail = match order {
        Order::ResumeFirst => Some(Watched::open(server, &get)),
        Order::PostFirst => None,
    };
    let mut echo = Watched::open(server, &post_raw);
    let mut done = Vec::new();
    let finished = poll_every(PROMPT, WATCH_EVERY, || {
        if tail.is_none() && metric(&scrape(&metrics), has_post) > before {
            tail = Some(Watched::open(server, &get));
        }
        let tail_done = tail.as_mut().is_some_and(Watched::poll);
        if tail_done && !done.contains(&"tail") {
            done.push("tail");
        }
        if !done.contains(&"echo") && echo.poll() {
            let tail_done = tail.as_mut().is_some_and(Watched::poll);
            if tail_done && !done.contains(&"tail") {
                done.push("tail");
            }
            done.push("echo");
        }
        done.len() == 2
    });
    assert!(finished, "{ctx}: hung, completed so far {done:?}");
    let tail = tail.expect("resume sent").response();
    assert_eq!(tail.status, 200, "{ctx}");
    assert_rest(&tail.events(), &priming, 1, 3, id, &ctx);
    let echo = echo.response();
    assert_eq!(echo.status, 200, "{ctx}: {}", echo.text());
    assert_eq!(answer_of(&echo, &ctx)["id"], echo_id, "{ctx}");
    done
}

/// Seed case 2: resume, and POST a new request on the same session at once (or just before) →
/// the new request is held until the replay is flushed: over 100 trials the echo's answer is
/// never complete before the replayed tail. `tidemark_posts_held_total` and `tidemark_replays_total` move.
/// Method: `seed_case_2_trial`, alternating the order of the two requests.
#[test]
fn seed_case_2_new_post_never_overtakes_the_replayed_tail() {
    for driver in DRIVERS {
        let (server, m) = server_with_metrics(driver, &["--threads", "1"]);
        let m0 = scrape(&m);
        let sid = open_session(&server);
        for n in 0..100 {
            let order = if n % 2 == 0 { Order::ResumeFirst } else { Order::PostFirst };
            let done = seed_case_2_trial(&server, &sid, n, order, true);
            assert_eq!(
                done,
                ["tail", "echo"],
                "{driver} trial {n} {order:?}: echo overtook the tail"
            );
        }
        let m1 = scrape(&m);
        assert!(
            metric(&m1, "tidemark_posts_held_total")
                >= metric(&m0, "tidemark_posts_held_total") + 50,
            "{driver}: {m1}"
        );
        assert!(
            metric(&m1, "tidemark_replays_total") >= metric(&m0, "tidemark_replays_total") + 100,
            "{driver}"
        );
        // Every held POST's wait and every resume's replayed events were observed.
        let held = "tidemark_post_held_seconds_count";
        assert!(metric(&m1, held) >= metric(&m0, held) + 50, "{driver}: held waits timed");
        let replayed = "tidemark_resume_replay_events_count";
        assert!(metric(&m1, replayed) >= metric(&m0, replayed) + 100, "{driver}: replays sized");
    }
}

/// Proof that the seed-case-2 check can fail: with `--migration-policy off` nothing is held, and
/// an echo POSTed before the resume is answered before the replayed tail.
#[test]
fn policy_off_lets_the_new_post_overtake_the_tail() {
    let server = Server::with_admin("epoll", &["--threads", "1", "--migration-policy", "off"]);
    let sid = open_session(&server);
    let overtaken = (0..10)
        .filter(|&n| {
            seed_case_2_trial(&server, &sid, n, Order::PostFirst, false) == ["echo", "tail"]
        })
        .count();
    assert!(overtaken >= 5, "only {overtaken}/10 trials showed the overtaking");
}
