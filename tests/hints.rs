//! Goal: CONTRACT §4's hint rule (issue 11 §1): a GET from any `Last-Event-ID` hint the server
//! gives (409 -31001 / -31002, header and `data`) returns every event after the client's true
//! last event — possibly repeating some under the same ids — never a silent skip, whatever the
//! stream's state: running, or fully written into a socket that then died.
//! Method: the real binary on both drivers; a slow_counter call whose connection is cut after
//! the client read k events (k = 0 … all), a re-POST with the same id, then a GET from the
//! 409's hint; the events the client holds plus the GET's must be progress 1..=n and the result.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use support::{call, call_stream, open_session, post, progress_of, resume, Server, DRIVERS};

/// What the client ends up holding: progress value → event id, and whether it has the result.
#[derive(Default, Debug)]
struct Held {
    progress: BTreeMap<u64, String>,
    result: bool,
}

impl Held {
    fn take(&mut self, ev: &support::Event, ctx: &str) {
        if ev.is_priming() {
            return;
        }
        let id = ev.id.clone().unwrap_or_default();
        if let Some(p) = progress_of(ev) {
            // The same value twice must come under the same id (a repeat, not a duplicate).
            if let Some(before) = self.progress.insert(p, id.clone()) {
                assert_eq!(before, id, "{ctx}: progress {p} arrived under two ids");
            }
        } else if ev.json().get("result").is_some() {
            self.result = true;
        }
    }

    fn assert_complete(&self, steps: u64, ctx: &str) {
        let got: Vec<u64> = self.progress.keys().copied().collect();
        assert_eq!(got, (1..=steps).collect::<Vec<_>>(), "{ctx}: progress held");
        assert!(self.result, "{ctx}: no result");
    }
}

/// Re-POSTs request `id` (same body) and returns the 409's hint, checking header and `data`
/// agree and the code is one of `codes`.
fn hint_of_409(server: &Server, sid: &str, body: &str, codes: &[i64], ctx: &str) -> String {
    let r = post(server, &[("Mcp-Session-Id", sid)], body);
    assert_eq!(r.status, 409, "{ctx}: {}", r.text());
    let json = r.json();
    let code = json["error"]["code"].as_i64().expect("code");
    assert!(codes.contains(&code), "{ctx}: code {code}");
    let header = r.header("Last-Event-ID").expect("hint header").to_owned();
    let data = json["error"]["data"]["owedStreams"][0]["lastEventId"].as_str().expect("data");
    assert_eq!(header, data, "{ctx}: header and data hints differ");
    header
}

#[test]
fn a_fully_written_stream_cut_before_the_client_read_it_is_recoverable_from_the_hint() {
    // The server writes the whole (short) stream into the socket at once; the client takes
    // only k events of it and drops the connection once the rest has arrived unread. The stream is settled, so a re-POST of
    // the same id is -31002; its hint must not skip what the client never read.
    const STEPS: u64 = 5;
    for driver in DRIVERS {
        for k in 0..=STEPS as usize + 1 {
            let ctx = format!("{driver} k={k}");
            let server = Server::on(driver, &[]);
            let sid = open_session(&server);
            let body = call(1, "slow_counter", r#"{"steps":5}"#, true);
            let mut s = call_stream(&server, &sid, &body, &[]);
            let mut held = Held::default();
            for _ in 0..k {
                let ev = s.next_event().expect("event");
                held.take(&ev, &ctx);
            }
            // The server has written the whole stream once its last chunk is here; the
            // events after the k taken stay unread, and are lost with the connection.
            assert!(s.receive_to_end(Duration::from_secs(10)), "{ctx}: the stream never ended");
            s.cut();
            let hint = hint_of_409(&server, &sid, &body, &[-31001, -31002], &ctx);
            let mut g = resume(&server, &sid, &hint);
            assert_eq!(g.status, 200, "{ctx}: GET from the hint");
            for ev in g.rest() {
                assert!(!ev.data.contains("-31003"), "{ctx}: gap from the hint: {}", ev.data);
                held.take(&ev, &ctx);
            }
            held.assert_complete(STEPS, &ctx);
        }
    }
}

#[test]
fn a_hint_follows_what_a_resume_proved_the_client_holds() {
    // The client reads 2 progress events, drops, resumes from its own cursor and reads to
    // the end; a re-POST then gets a hint at its resume cursor (it proved it holds that much),
    // and a GET from it returns exactly the rest.
    for driver in DRIVERS {
        let ctx = driver.to_string();
        let server = Server::on(driver, &[]);
        let sid = open_session(&server);
        let body = call(1, "slow_counter", r#"{"steps":6,"delay_ms":30}"#, true);
        let mut s = call_stream(&server, &sid, &body, &[]);
        let mut held = Held::default();
        let mut cursor = String::new();
        for _ in 0..3 {
            let ev = s.next_event().expect("event");
            cursor = ev.id.clone().expect("id");
            held.take(&ev, &ctx);
        }
        s.cut();
        let mut g = resume(&server, &sid, &cursor);
        for ev in g.rest() {
            held.take(&ev, &ctx);
        }
        held.assert_complete(6, &ctx);
        let hint = hint_of_409(&server, &sid, &body, &[-31002], &ctx);
        assert_eq!(hint, cursor, "{ctx}: the hint is the resume cursor");
        let mut again = Held::default();
        for ev in resume(&server, &sid, &hint).rest() {
            again.take(&ev, &ctx);
        }
        let after: Vec<u64> = again.progress.keys().copied().collect();
        assert_eq!(after, vec![3, 4, 5, 6], "{ctx}: exactly what follows the cursor");
        assert!(again.result, "{ctx}");
    }
}

#[test]
fn a_running_stream_cut_mid_way_is_recoverable_from_the_hint() {
    // -31001 while the call still runs: the hint is the priming event (nothing proved held);
    // the GET repeats what the client has under the same ids, then continues live.
    for driver in DRIVERS {
        let ctx = driver.to_string();
        let server = Server::on(driver, &[]);
        let sid = open_session(&server);
        let body = call(1, "slow_counter", r#"{"steps":10,"delay_ms":40}"#, true);
        let mut s = call_stream(&server, &sid, &body, &[]);
        let mut held = Held::default();
        for _ in 0..3 {
            held.take(&s.next_event().expect("event"), &ctx);
        }
        s.cut();
        let hint = hint_of_409(&server, &sid, &body, &[-31001], &ctx);
        for ev in resume(&server, &sid, &hint).rest() {
            held.take(&ev, &ctx);
        }
        held.assert_complete(10, &ctx);
    }
}
