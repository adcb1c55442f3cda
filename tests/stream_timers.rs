//! Goal: the two stream timers a client can observe. `--sse-keepalive-secs` puts a comment on an
//! idle SSE connection (so a dead peer shows up as a failed write), and
//! `--stream-retention-secs` bounds how long a completed stream stays resumable (400 after).
//! A stream live past `runtime::stream::PEER_WATCH_KEPT_AFTER_WAITS` (16) waits watches its
//! peer through a second descriptor of its own: it must still see the peer leave, and close
//! both descriptors.
//! Method: the real binary with one-second timers, raw HTTP over loopback, both drivers.
mod support;

use std::time::{Duration, Instant};

use support::*;

#[test]
fn idle_sse_connection_gets_keepalive_comments() {
    for driver in DRIVERS {
        let server = Server::on(driver, &["--sse-keepalive-secs", "1"]);
        let sid = open_session(&server);
        let raw = request(
            "GET",
            &server.path,
            &server.host(),
            &[("Accept", "text/event-stream"), ("Mcp-Session-Id", &sid)],
            None,
        );
        let mut conn = server.connect();
        send(&mut conn, &raw);
        let started = Instant::now();
        let mut seen = Vec::new();
        let mut buf = [0u8; 1024];
        while started.elapsed() < Duration::from_secs(5) {
            let n = read_retrying(&mut conn, &mut buf).expect("read");
            assert!(n > 0, "{driver}: the server closed an idle GET stream");
            seen.extend_from_slice(&buf[..n]);
            if String::from_utf8_lossy(&seen).contains(": keep-alive") {
                break;
            }
        }
        let text = String::from_utf8_lossy(&seen);
        assert!(text.contains(": keep-alive"), "{driver}: no keep-alive comment in {text:?}");
        assert!(started.elapsed() >= Duration::from_millis(900), "{driver}: comment came early");
    }
}

#[test]
fn completed_stream_is_resumable_until_retention_then_400() {
    for driver in DRIVERS {
        let server = Server::on(driver, &["--stream-retention-secs", "1"]);
        let sid = open_session(&server);
        let mut s = call_stream(&server, &sid, &call(1, "echo", r#"{"text":"kept"}"#, false), &[]);
        let events = s.rest();
        let priming = events[0].id.clone().expect("priming id");
        // Within retention: the answer can be fetched again from the priming id.
        let mut again = resume(&server, &sid, &priming);
        assert_eq!(again.status, 200, "{driver}");
        let replayed = again.rest();
        assert!(replayed.iter().any(|e| e.data.contains("\"kept\"")), "{driver}: {replayed:?}");
        // After retention (plus the reaper's tick) the stream is forgotten. Looked at every
        // 200 ms: a resume that still succeeds attaches to the stream for its replay, and the
        // reaper leaves an attached stream alone, so quick looks could hold it.
        let what = format!("{driver}: the stream to be forgotten after its retention");
        let forgotten = poll_every(Duration::from_secs(5), Duration::from_millis(200), || {
            resume(&server, &sid, &priming).status == 400
        });
        assert!(forgotten, "{what}: still resumable after 5 s");
    }
}

/// Progress events read before the client leaves: past the 16 waits after which a stream keeps
/// its peer watch on a second descriptor.
const EVENTS_BEFORE_LEAVING: u64 = 20;
/// The call's steps at `STEP_DELAY_MS`: the stream would run ~4 s more after the client leaves,
/// so an end within `LEFT_NOTICED_WITHIN` is the server noticing, not the call finishing.
const STEPS: u64 = 200;
const STEP_DELAY_MS: u64 = 20;
const LEFT_NOTICED_WITHIN: Duration = Duration::from_secs(2);

#[test]
fn a_live_stream_past_its_kept_peer_watch_still_sees_the_client_leave() {
    for driver in DRIVERS {
        let server = Server::on(driver, &["--threads", "1"]);
        let sid = open_session(&server);
        let args = format!(r#"{{"steps":{STEPS},"delay_ms":{STEP_DELAY_MS}}}"#);
        let mut s = call_stream(&server, &sid, &call(2, "slow_counter", &args, true), &[]);
        let primed = read_priming(&mut s, driver);
        read_progress(&mut s, EVENTS_BEFORE_LEAVING, primed, driver);
        // The stream holds its connection and the kept watch's duplicate of it.
        let live = server.open_fds();
        let mut socket = s.into_stream();
        // Half-closed: the client could still read, so only the peer watch can end the stream
        // now (its writes would keep succeeding for the ~4 s the call has left).
        socket.shutdown(std::net::Shutdown::Write).expect("shutdown");
        let (rest, ending) = read_until_closed(&mut socket, LEFT_NOTICED_WITHIN);
        let rest = String::from_utf8_lossy(&rest);
        assert_eq!(
            ending,
            Ending::Closed,
            "{driver}: the server kept the stream of a client that left"
        );
        assert!(!rest.contains("\"result\""), "{driver}: the call ran to its end first: {rest}");
        drop(socket);
        let what = format!("{driver}: both of the stream's descriptors closed ({live} while live)");
        let closed = poll_every(Duration::from_secs(2), Duration::from_millis(20), || {
            server.open_fds() + 2 <= live
        });
        assert!(closed, "{what}: {} now", server.open_fds());
    }
}
