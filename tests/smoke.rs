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
