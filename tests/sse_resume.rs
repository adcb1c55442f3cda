//! Goal: a resumed SSE stream delivers exactly the events the client missed, once, in order
//! (CONTRACT §3, issue 3 §5): after a cut at any point of a call, after the call finished,
//! twice in a row, and when two resumes race; a bad cursor is a 400 that leaks nothing of
//! another session; evicted events are reported as a -31003 gap, never as a silent empty 200;
//! `Last-Event-ID` on a POST is refused; the priming event carries `--sse-retry-ms`; and
//! SEP-1699's `test_reconnection` parks its stream and answers on the GET resume.
//!
//! Method: the real binary on 127.0.0.1:0, on both io drivers, raw HTTP/1.1 over blocking
//! sockets. A call is read event by event, the client "drops" the connection after k message
//! events, and resumes with `GET` + `Last-Event-ID` = the last id it holds. Exactly-once is
//! checked on the progress values and the event ids; "ran once" on the server-global
//! `slow_counter` execution counter (`get_counter` from a fresh session). A cut has been seen
//! once the server ended that connection (`wait_closed`, from `/metrics`); a cut call has
//! finished once a re-POST's 409 says it is no longer in flight (`wait_call_done`).

mod support;
use std::time::{Duration, Instant};
use support::*;

/// Steps of the call the resume cases cut.
const STEPS: u64 = 10;
/// `slow_counter` arguments: STEPS steps, long enough between steps for a cut to land.
const ARGS: &str = r#"{"steps":10,"delay_ms":20}"#;
/// Bound on anything that must "not hang".
const PROMPT: Duration = Duration::from_secs(3);

/// Goal: for every cut point k = 0…10 (k message events held after the priming event), the
/// resume delivers progress k+1..10 then the result, once, in order, and the tool ran once.
/// Method: one call per k on one server; counter read before and after each call.
#[test]
fn resume_after_cut_at_every_event_delivers_exactly_the_rest() {
    for driver in DRIVERS {
        let server = Server::with_admin(driver, &["--threads", "1"]);
        let sid = open_session(&server);
        for k in 0..=STEPS {
            let ctx = format!("{driver} k={k}");
            let before = counter(&server);
            let id = 100 + k;
            let mut s = call_stream(&server, &sid, &call(id, "slow_counter", ARGS, true), &[]);
            let priming = read_priming(&mut s, &ctx);
            let last = read_progress(&mut s, k, priming, &ctx);
            s.cut();
            wait_closed(&server, 0, &ctx);
            let started = Instant::now();
            let mut r = resume(&server, &sid, &last);
            assert_eq!(r.status, 200, "{ctx}");
            assert_eq!(r.header("Content-Type"), Some("text/event-stream"), "{ctx}");
            let evs = r.rest();
            assert!(started.elapsed() < PROMPT, "{ctx}: resume hung");
            let text = assert_rest(&evs, &last, k + 1, STEPS, id, &ctx);
            assert_eq!(text, (before + 1).to_string(), "{ctx}: result is this execution");
            assert_eq!(counter(&server), before + 1, "{ctx}: ran exactly once");
        }
    }
}

/// Goal: a resume after the call finished replays the tail and the result, then ends the
/// response; a resume from the last progress of a fully read call gets just the result.
/// Method: cut after 2 events, wait until a re-POST says the call is done, resume; then read a
/// second call to its end and resume from its last progress id.
#[test]
fn resume_after_the_call_finished_replays_then_ends() {
    for driver in DRIVERS {
        let server = Server::on(driver, &["--threads", "1"]);
        let sid = open_session(&server);
        let before = counter(&server);
        let args = r#"{"steps":10,"delay_ms":2}"#;
        let body = call(1, "slow_counter", args, true);
        let mut s = call_stream(&server, &sid, &body, &[]);
        let priming = read_priming(&mut s, driver);
        let last = read_progress(&mut s, 2, priming, driver);
        s.cut();
        wait_call_done(&server, &sid, &body, driver);
        let started = Instant::now();
        let mut r = resume(&server, &sid, &last);
        let evs = r.rest();
        assert!(r.ended(), "{driver}");
        assert!(started.elapsed() < PROMPT, "{driver}: finished stream's resume hung");
        assert_rest(&evs, &last, 3, STEPS, 1, driver);

        let mut s = call_stream(&server, &sid, &call(2, "slow_counter", args, true), &[]);
        let all = s.rest();
        let last_progress = all.iter().rev().find(|e| progress_of(e) == Some(STEPS));
        let last_progress = last_progress.and_then(|e| e.id.clone()).expect("progress 10 id");
        let mut r = resume(&server, &sid, &last_progress);
        let evs = r.rest();
        assert!(started.elapsed() < PROMPT, "{driver}: hung");
        assert_rest(&evs, &last_progress, STEPS + 1, STEPS, 2, driver);
        assert_eq!(counter(&server), before + 2, "{driver}: one execution per call");
    }
}

/// Goal: a resumed stream can itself be cut and resumed: the second resume continues from the
/// first resume's last id, and nothing is lost or repeated across the three connections.
/// Method: cut after 2, resume and read 3 more (3, 4, 5), cut, resume from 5 → 6..10, result.
#[test]
fn resume_twice_in_a_row() {
    for driver in DRIVERS {
        let server = Server::with_admin(driver, &["--threads", "1"]);
        let sid = open_session(&server);
        let before = counter(&server);
        let mut s = call_stream(&server, &sid, &call(7, "slow_counter", ARGS, true), &[]);
        let priming = read_priming(&mut s, driver);
        let id2 = read_progress(&mut s, 2, priming, driver);
        s.cut();
        wait_closed(&server, 0, driver);
        let mut r1 = resume(&server, &sid, &id2);
        assert_eq!(r1.status, 200, "{driver}");
        let mut got = Vec::new();
        let mut id5 = id2.clone();
        while got.len() < 3 {
            let ev = r1.next_event().expect("first resume ended early");
            if let Some(p) = progress_of(&ev) {
                got.push(p);
                id5 = ev.id.clone().expect("id");
            }
        }
        assert_eq!(got, [3, 4, 5], "{driver}: first resume");
        r1.cut();
        wait_closed(&server, 0, driver);
        let mut r2 = resume(&server, &sid, &id5);
        let evs = r2.rest();
        let text = assert_rest(&evs, &id5, 6, STEPS, 7, driver);
        assert_eq!(text, (before + 1).to_string());
        assert_eq!(counter(&server), before + 1, "{driver}: ran once");
    }
}

/// Goal: when two resumes of one stream race, the newer takes over: the older connection is
/// cut (it never gets the result), and the newer delivers exactly the rest.
/// Method: cut after 2; open resume A (its head read, so it is attached), then resume B from
/// the same id; read A to its end, then B.
#[test]
fn newer_of_two_concurrent_resumes_takes_over() {
    for driver in DRIVERS {
        let server = Server::with_admin(driver, &["--threads", "1"]);
        let sid = open_session(&server);
        let before = counter(&server);
        let mut s = call_stream(&server, &sid, &call(3, "slow_counter", ARGS, true), &[]);
        let priming = read_priming(&mut s, driver);
        let id2 = read_progress(&mut s, 2, priming, driver);
        s.cut();
        wait_closed(&server, 0, driver);
        let mut a = resume(&server, &sid, &id2);
        assert_eq!(a.status, 200, "{driver}: A");
        let mut b = resume(&server, &sid, &id2);
        assert_eq!(b.status, 200, "{driver}: B");
        let started = Instant::now();
        let a_evs = messages(&a.rest());
        assert!(started.elapsed() < PROMPT, "{driver}: the older connection was not ended");
        let a_progress: Vec<u64> = a_evs.iter().filter_map(progress_of).collect();
        assert_eq!(a_progress.len(), a_evs.len(), "{driver}: A got the result: {a_evs:#?}");
        let want: Vec<u64> = (3..3 + a_progress.len() as u64).collect();
        assert_eq!(a_progress, want, "{driver}: A's events are a prefix of the rest");
        let evs = b.rest();
        assert_rest(&evs, &id2, 3, STEPS, 3, driver);
        assert_eq!(counter(&server), before + 1, "{driver}: ran once");
    }
}

/// Goal: every bad cursor is a 400 with a JSON-RPC error and no byte of another session, and
/// does not disturb the session whose id was borrowed.
/// Method: sessions A (an `echo` of a secret, read to the end) and B (a short call); a table of
/// malformed, foreign and future ids sent as B's `Last-Event-ID`; afterwards A's stream still
/// resumes to its own result. Two threads, so A and B may live on different cores.
#[test]
fn bad_cursors_are_400_and_leak_nothing() {
    const SECRET: &str = "secret-of-session-a-7f3c";
    for driver in DRIVERS {
        let server = Server::on(driver, &["--threads", "2"]);
        let a = open_session(&server);
        let b = open_session(&server);
        let mut sa = call_stream(
            &server,
            &a,
            &call(1, "echo", &format!(r#"{{"text":"{SECRET}"}}"#), false),
            &[],
        );
        let a_evs = sa.rest();
        let a_priming = a_evs[0].id.clone().expect("A priming id");
        let a_last = a_evs.last().and_then(|e| e.id.clone()).expect("A result id");
        let mut sb =
            call_stream(&server, &b, &call(1, "slow_counter", r#"{"steps":2}"#, true), &[]);
        let b_evs = sb.rest();
        let b_last = b_evs.last().and_then(|e| e.id.clone()).expect("B result id");
        let (tag, stream, seq) = split_event_id(&b_last).expect("B id");
        let cases: Vec<(&str, String)> = vec![
            ("garbage", "garbage".into()),
            ("two parts", format!("{tag}-{stream:x}")),
            ("four parts", format!("{tag}-{stream:x}-{seq:x}-1")),
            ("short tag", format!("{}-{stream:x}-{seq:x}", &tag[..6])),
            ("non-hex seq", format!("{tag}-{stream:x}-zz")),
            ("seq over 64 bits", format!("{tag}-{stream:x}-1{}", "0".repeat(16))),
            ("A's event id on B", a_last.clone()),
            ("A's priming id on B", a_priming.clone()),
            ("B's tag, unknown stream", format!("{tag}-ff-1")),
            ("one past the stream's end", format!("{tag}-{stream:x}-{:x}", seq + 1)),
            ("far future", format!("{tag}-{stream:x}-ffffffffffffffff")),
        ];
        for (name, id) in cases {
            let ctx = format!("{driver} {name} ({id})");
            let raw = request(
                "GET",
                &server.path,
                &server.host(),
                &[("Accept", "text/event-stream"), ("Mcp-Session-Id", &b), ("Last-Event-ID", &id)],
                None,
            );
            let r = exchange(&server, &raw);
            assert_eq!(r.status, 400, "{ctx}: {}", r.text());
            assert!(r.json()["error"]["code"].is_i64(), "{ctx}: JSON-RPC error: {}", r.text());
            let body = r.text();
            assert!(!body.contains(SECRET), "{ctx}: leaked A's data: {body}");
            assert!(!body.contains(&a), "{ctx}: leaked A's session id: {body}");
        }
        let mut ra = resume(&server, &a, &a_priming);
        let evs = messages(&ra.rest());
        assert_eq!(evs.len(), 1, "{driver}: A still resumes to its own result: {evs:#?}");
        assert_eq!(evs[0].json()["result"]["content"][0]["text"], SECRET, "{driver}");
    }
}

/// Goal: a resume whose following events were evicted gets a 200 SSE whose only message is a
/// JSON-RPC error -31003 naming the lost range, then the end: for an owed stream (cut mid-call)
/// and for an acknowledged one (read to its end, then pushed out by a later call); and at the
/// limit, a tail that just fits the ring is replayed whole while one event more is a gap.
/// Method: `--replay-events 16`; each case in a fresh session, resumed after its call is done;
/// `tidemark_gaps_total` on `/metrics` counts every gap.
#[test]
fn evicted_events_are_reported_as_a_gap_never_a_silent_200() {
    for driver in DRIVERS {
        let (server, metrics) =
            server_with_metrics(driver, &["--threads", "1", "--replay-events", "16"]);
        // Owed: 40 steps (42 events) through a 16-event ring; cut after 2.
        let sid = open_session(&server);
        let body = call(5, "slow_counter", r#"{"steps":40,"delay_ms":2}"#, true);
        let mut s = call_stream(&server, &sid, &body, &[]);
        let priming = read_priming(&mut s, driver);
        let cursor = read_progress(&mut s, 2, priming, driver);
        s.cut();
        wait_call_done(&server, &sid, &body, &format!("{driver} owed"));
        assert_gap(&server, &sid, &cursor, 5, &format!("{driver} owed"));

        // Acknowledged: a call read to its end, then a 20-step call evicts it.
        let sid = open_session(&server);
        let mut s =
            call_stream(&server, &sid, &call(1, "slow_counter", r#"{"steps":3}"#, true), &[]);
        let first = s.rest();
        let cursor = first.iter().find(|e| progress_of(e) == Some(1)).and_then(|e| e.id.clone());
        let cursor = cursor.expect("progress 1 id");
        call_stream(&server, &sid, &call(2, "slow_counter", r#"{"steps":20}"#, true), &[]).rest();
        assert_gap(&server, &sid, &cursor, 1, &format!("{driver} acknowledged"));

        // At the limit, cursor = priming: 15 steps = 17 events, the 16 after the priming fit;
        // 16 steps = 18 events, one of the tail is gone.
        for (steps, fits) in [(15u64, true), (16, false)] {
            let ctx = format!("{driver} limit steps={steps}");
            let sid = open_session(&server);
            let args = format!(r#"{{"steps":{steps},"delay_ms":1}}"#);
            let body = call(9, "slow_counter", &args, true);
            let mut s = call_stream(&server, &sid, &body, &[]);
            let priming = read_priming(&mut s, &ctx);
            s.cut();
            wait_call_done(&server, &sid, &body, &ctx);
            if fits {
                let evs = resume(&server, &sid, &priming).rest();
                assert_rest(&evs, &priming, 1, steps, 9, &ctx);
            } else {
                assert_gap(&server, &sid, &priming, 9, &ctx);
            }
        }
        assert!(
            metric(&scrape(&metrics), "tidemark_gaps_total") >= 3,
            "{driver}: tidemark_gaps_total moved"
        );
    }
}

/// Resumes from `cursor` and asserts the -31003 gap for request `id`, then the end.
fn assert_gap(server: &Server, sid: &str, cursor: &str, id: u64, ctx: &str) {
    let started = Instant::now();
    let mut r = resume(server, sid, cursor);
    assert_eq!(r.status, 200, "{ctx}");
    assert_eq!(r.header("Content-Type"), Some("text/event-stream"), "{ctx}");
    let msgs = messages(&r.rest());
    assert!(r.ended(), "{ctx}: the response ends");
    assert!(started.elapsed() < PROMPT, "{ctx}: gap response hung");
    assert_eq!(msgs.len(), 1, "{ctx}: only the gap error, never silent: {msgs:#?}");
    let err = msgs[0].json();
    assert_eq!(err["id"], id, "{ctx}: the error answers the stream's request: {err}");
    assert_eq!(err["error"]["code"], -31003, "{ctx}: {err}");
    let (tag, stream, seq) = split_event_id(cursor).expect("cursor");
    let from = err["error"]["data"]["lostFrom"].as_str().expect("lostFrom");
    let to = err["error"]["data"]["lostTo"].as_str().expect("lostTo");
    let (ft, fs, fseq) = split_event_id(from).unwrap_or_else(|| panic!("{ctx}: lostFrom {from}"));
    let (tt, ts, tseq) = split_event_id(to).unwrap_or_else(|| panic!("{ctx}: lostTo {to}"));
    assert_eq!(
        (ft.as_str(), fs, tt.as_str(), ts),
        (tag.as_str(), stream, tag.as_str(), stream),
        "{ctx}"
    );
    assert!(seq <= fseq && fseq <= tseq, "{ctx}: range {from}..{to} after cursor {cursor}");
}

/// Goal: `Last-Event-ID` on any POST is a 400 ("resume with GET") and nothing runs.
/// Method: a table of POSTs (a call with a valid id of the session, with garbage, a
/// notification, an initialize) each carrying the header; the counter must not move.
#[test]
fn last_event_id_on_a_post_is_400() {
    for driver in DRIVERS {
        let server = Server::on(driver, &["--threads", "1"]);
        let sid = open_session(&server);
        let mut s =
            call_stream(&server, &sid, &call(1, "slow_counter", r#"{"steps":1}"#, true), &[]);
        let valid = s.rest()[0].id.clone().expect("priming id");
        let before = counter(&server);
        let run = call(2, "slow_counter", r#"{"steps":1}"#, true);
        let cases: [(&str, bool, &str, &str); 4] = [
            ("call, valid id", true, valid.as_str(), run.as_str()),
            ("call, garbage id", true, "garbage", run.as_str()),
            (
                "notification",
                true,
                valid.as_str(),
                r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            ),
            ("initialize", false, valid.as_str(), INIT),
        ];
        for (name, with_session, id, body) in cases {
            let mut h = vec![("Last-Event-ID", id)];
            if with_session {
                h.push(("Mcp-Session-Id", sid.as_str()));
            }
            let r = post(&server, &h, body);
            assert_eq!(r.status, 400, "{driver} {name}: {}", r.text());
            assert!(r.json()["error"]["code"].is_i64(), "{driver} {name}: {}", r.text());
        }
        assert_eq!(counter(&server), before, "{driver}: nothing ran");
    }
}

/// Goal: the priming event (an id, empty data) carries `retry:` = `--sse-retry-ms`, on a POST's
/// stream and on the standalone GET stream. Method: a table of flag values.
#[test]
fn priming_event_carries_the_configured_retry() {
    for driver in DRIVERS {
        for (flag, want) in [(None, 1000u64), (Some("1234"), 1234), (Some("50"), 50)] {
            let ctx = format!("{driver} --sse-retry-ms {flag:?}");
            let mut args = vec!["--threads", "1"];
            if let Some(v) = flag {
                args.extend(["--sse-retry-ms", v]);
            }
            let server = Server::on(driver, &args);
            let sid = open_session(&server);
            let mut s =
                call_stream(&server, &sid, &call(1, "slow_counter", r#"{"steps":1}"#, true), &[]);
            let first = s.next_event().expect("priming");
            assert!(first.is_priming() && first.id.is_some(), "{ctx}: {first:?}");
            assert_eq!(first.retry, Some(want), "{ctx}: POST stream");
            let raw = request(
                "GET",
                &server.path,
                &server.host(),
                &[("Accept", "text/event-stream"), ("Mcp-Session-Id", &sid)],
                None,
            );
            let mut g = SseStream::open(&server, &raw);
            assert_eq!(g.status, 200, "{ctx}");
            let first = g.next_event().expect("standalone priming");
            assert!(first.is_priming() && first.id.is_some(), "{ctx}: {first:?}");
            assert_eq!(first.retry, Some(want), "{ctx}: standalone GET stream");
            g.cut();
        }
    }
}

/// Goal: SEP-1699 polling: `test_reconnection` sends the priming event, then the server ends
/// the response before the result; a GET with the priming id delivers the result (whether the
/// GET comes before or after the result is produced), then ends.
/// Method: `--tools conformance`; the GET at once (the tool answers ~100 ms after closing),
/// then, for a second call, once a re-POST's 409 says the tool is done.
#[test]
fn sep_1699_reconnection_is_answered_on_the_get_resume() {
    for driver in DRIVERS {
        let server = Server::on(driver, &["--threads", "1", "--tools", "conformance"]);
        let sid = open_session(&server);
        for (n, after_result) in [false, true].into_iter().enumerate() {
            let when = if after_result { "after" } else { "before" };
            let ctx = format!("{driver} GET {when} the result");
            let id = n as u64 + 1;
            let started = Instant::now();
            let body = call(id, "test_reconnection", "{}", false);
            let mut s = call_stream(&server, &sid, &body, &[]);
            assert_eq!(s.header("Mcp-Stream-Resumable"), Some("true"), "{ctx}");
            let evs = s.rest();
            assert!(started.elapsed() < PROMPT, "{ctx}: server did not end the response");
            assert_eq!(evs.len(), 1, "{ctx}: only the priming event before the close: {evs:#?}");
            assert!(evs[0].is_priming(), "{ctx}");
            let priming = evs[0].id.clone().expect("priming id");
            if after_result {
                wait_call_done(&server, &sid, &body, &ctx);
            }
            let mut r = resume(&server, &sid, &priming);
            assert_eq!(r.status, 200, "{ctx}");
            let msgs = messages(&r.rest());
            assert!(started.elapsed() < PROMPT, "{ctx}: resume hung");
            assert_eq!(msgs.len(), 1, "{ctx}: the result, once: {msgs:#?}");
            let v = msgs[0].json();
            assert_eq!(v["id"], id, "{ctx}");
            let text = v["result"]["content"][0]["text"].as_str().unwrap_or_default();
            assert!(text.starts_with("Reconnection test completed"), "{ctx}: {v}");
        }
    }
}

/// Goal: a tool that emits more events in one burst than the ring holds, before its writer
/// sends anything, gives the live client the -31003 gap error and the end at once — never a
/// stream that waits for events it can no longer find. Method: `--replay-events 16`, a 20-step
/// `slow_counter` without delay on a fresh stream, read with a time bound.
#[test]
fn burst_larger_than_the_ring_is_a_prompt_gap_not_a_hang() {
    for driver in DRIVERS {
        let server = Server::on(driver, &["--threads", "1", "--replay-events", "16"]);
        let sid = open_session(&server);
        let started = Instant::now();
        let mut s =
            call_stream(&server, &sid, &call(3, "slow_counter", r#"{"steps":20}"#, true), &[]);
        let evs = s.rest();
        assert!(started.elapsed() < Duration::from_secs(3), "{driver}: stream hung");
        assert!(s.ended(), "{driver}: the response ends");
        let last = evs.last().expect("an event").json();
        assert_eq!(last["error"]["code"], -31003, "{driver}: {last}");
        assert_eq!(last["id"], 3, "{driver}");
    }
}
