//! Goal: two live requests with one `Idempotency-Key` (CONTRACT §4 step 1, issue 11 §4): every
//! POST gets an HTTP answer and both receive the complete stream; the tool runs once.
//! Method: the real binary on both drivers; a slow_counter call with progress sent twice with
//! the same key, staggered (the second while the first is being written) and simultaneous
//! (two threads released together), each read to its end on its own connection.

mod support;

use std::sync::{Arc, Barrier};

use support::{call, call_stream, counter, open_session, progress_of, Server, DRIVERS};

const STEPS: u64 = 8;
const ARGS: &str = r#"{"steps":8,"delay_ms":25}"#;

/// Every event of a stream read to its end: checks progress 1..=STEPS once, in order, then one
/// result carrying `id`, then the end of the response.
fn assert_whole_stream(mut s: support::SseStream, id: u64, ctx: &str) {
    assert_eq!(s.status, 200, "{ctx}: status");
    let events = s.rest();
    assert!(s.ended(), "{ctx}: the response did not end with its terminating chunk");
    let progress: Vec<u64> = events.iter().filter_map(progress_of).collect();
    assert_eq!(progress, (1..=STEPS).collect::<Vec<_>>(), "{ctx}: progress");
    let last = events.last().unwrap_or_else(|| panic!("{ctx}: no events")).json();
    assert_eq!(last["id"], id, "{ctx}: the result carries this request's id: {last}");
    assert!(last["result"]["content"][0]["text"].is_string(), "{ctx}: result: {last}");
}

#[test]
fn a_duplicate_sent_while_the_original_streams_gets_the_whole_stream_too() {
    // Staggered: the retry arrives after the original's first progress event.
    for driver in DRIVERS {
        let server = Server::on(driver, &[]);
        let sid = open_session(&server);
        let before = counter(&server);
        let key = [("Idempotency-Key", "stagger-1")];
        let mut first = call_stream(&server, &sid, &call(1, "slow_counter", ARGS, true), &key);
        let priming = first.next_event().expect("priming");
        assert!(priming.is_priming(), "{driver}");
        let progress = first.next_event().expect("first progress");
        assert_eq!(progress_of(&progress), Some(1), "{driver}");
        let second = call_stream(&server, &sid, &call(2, "slow_counter", ARGS, true), &key);
        let rest_of_first = std::thread::spawn(move || {
            let events = first.rest();
            (events, first.ended())
        });
        assert_whole_stream(second, 2, &format!("{driver}: retry"));
        let (events, ended) = rest_of_first.join().expect("reader");
        assert!(ended, "{driver}: the original's connection was cut");
        let progress: Vec<u64> = events.iter().filter_map(progress_of).collect();
        assert_eq!(progress, (2..=STEPS).collect::<Vec<_>>(), "{driver}: original progress");
        assert_eq!(events.last().expect("result").json()["id"], 1, "{driver}");
        assert_eq!(counter(&server), before + 1, "{driver}: the tool ran once");
    }
}

#[test]
fn simultaneous_duplicates_both_get_an_answer_and_the_whole_stream() {
    // Simultaneous: both POSTs are released by one barrier, ten times per driver.
    for driver in DRIVERS {
        let server = Arc::new(Server::on(driver, &[]));
        let sid = open_session(&server);
        let before = counter(&server);
        const ROUNDS: u64 = 10;
        for round in 0..ROUNDS {
            let barrier = Arc::new(Barrier::new(2));
            let key = format!("together-{round}");
            let readers: Vec<_> = [10 + 2 * round, 11 + 2 * round]
                .into_iter()
                .map(|id| {
                    let (server, sid, key, barrier) =
                        (server.clone(), sid.clone(), key.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        let body = call(id, "slow_counter", ARGS, true);
                        barrier.wait();
                        let s = call_stream(&server, &sid, &body, &[("Idempotency-Key", &key)]);
                        assert_whole_stream(s, id, &format!("{driver} round {round} id {id}"));
                    })
                })
                .collect();
            for reader in readers {
                reader.join().expect("both requests got the whole stream");
            }
        }
        assert_eq!(counter(&server), before + ROUNDS, "{driver}: one execution per key");
    }
}
