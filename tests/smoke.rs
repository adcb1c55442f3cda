//! Goal: the binary starts on each driver, a session opens and a tool call streams its progress
//! and result. Method: raw HTTP over loopback against the real binary.
mod support;
use support::*;

#[test]
fn slow_counter_streams_progress_then_result_on_both_drivers() {
    for driver in DRIVERS {
        let server = Server::on(driver, &["--threads", "2"]);
        let sid = open_session(&server);
        let mut s = call_stream(
            &server,
            &sid,
            &call(1, "slow_counter", r#"{"steps":3,"delay_ms":5}"#, true),
            &[],
        );
        assert_eq!(s.status, 200, "{driver}");
        let evs = s.rest();
        assert!(evs[0].is_priming(), "{driver}: priming first");
        assert_eq!(evs[0].retry, Some(1000));
        let progress: Vec<_> =
            evs.iter().filter(|e| e.data.contains("notifications/progress")).collect();
        assert_eq!(progress.len(), 3, "{driver}");
        let last = evs.last().unwrap().json();
        assert_eq!(last["id"], 1);
        assert!(last["result"]["content"][0]["text"].is_string());
    }
}

#[test]
fn slow_counter_stamp_carries_the_emit_time_and_is_off_by_default() {
    // Goal: over the wire, `stamp: true` puts each progress notification's emit time (µs since
    // the Unix epoch, this machine's clock) in its `message`, in order and inside the call;
    // without it the notifications carry no `message` (the default output other suites rely
    // on); a non-boolean stamp is -32602. Method: the real binary, one session, three calls.
    let server = Server::start(&["--threads", "1"]);
    let sid = open_session(&server);
    let now_us = || {
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        since.expect("clock after 1970").as_micros() as u64
    };
    let before = now_us();
    let args = r#"{"steps":3,"delay_ms":2,"stamp":true}"#;
    let mut s = call_stream(&server, &sid, &call(1, "slow_counter", args, true), &[]);
    let evs = s.rest();
    let after = now_us();
    let stamps: Vec<u64> = evs
        .iter()
        .filter(|e| e.data.contains("notifications/progress"))
        .map(|e| e.json()["params"]["message"].as_str().expect("a message").parse().expect("µs"))
        .collect();
    assert_eq!(stamps.len(), 3, "{evs:?}");
    assert!(stamps.windows(2).all(|w| w[0] <= w[1]), "{stamps:?}");
    assert!(before <= stamps[0] && stamps[2] <= after, "{before} ≤ {stamps:?} ≤ {after}");

    let plain = r#"{"steps":2,"delay_ms":0}"#;
    let mut s = call_stream(&server, &sid, &call(2, "slow_counter", plain, true), &[]);
    let progress: Vec<_> =
        s.rest().into_iter().filter(|e| e.data.contains("notifications/progress")).collect();
    assert_eq!(progress.len(), 2);
    assert!(progress.iter().all(|e| e.json()["params"].get("message").is_none()));

    let bad = r#"{"steps":1,"stamp":"yes"}"#;
    let r = post(&server, &[("Mcp-Session-Id", &sid)], &call(3, "slow_counter", bad, true));
    let answer = match r.events().last() {
        Some(event) => event.json(),
        None => r.json(),
    };
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
}
