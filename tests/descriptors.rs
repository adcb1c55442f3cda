//! Goal: a server out of file descriptors (issue 17 item 9c) answers a new connection at once
//! with 503 + `Retry-After` + `Connection: close` instead of leaving it in the accept queue
//! unanswered, does not spin on the failing accept, counts it, and serves normally again once
//! descriptors are free. Method: the real binary on each driver under a small RLIMIT_NOFILE
//! (`ulimit -n` in the shell that execs it), keep-alive connections held open until one is
//! answered 503, then closed; the admin listener's counter read afterwards.

mod support;

use std::net::TcpStream;
use std::time::Duration;

use support::*;

/// The server's descriptor limit: its own descriptors (standard streams, listeners, the ring
/// or epoll, wakers, the signal pipe, the reserve) plus a few connections.
const NOFILE: u32 = 40;

/// More connections than `NOFILE` could ever hold: the test fails rather than loops.
const CONNECTIONS_TRIED_MAX: u32 = NOFILE + 8;

/// Exhaustions one 503 may count. Each accept that fails for want of a descriptor is counted
/// once; a loop spinning on the readable listener would count millions.
const EXHAUSTIONS_PER_ANSWER_MAX: u64 = 200;

fn initialize(server: &Server, s: &mut TcpStream) -> Response {
    send(s, &request("POST", &server.path, &server.host(), &POST_HEADERS, Some(INIT)));
    read_response(s)
}

#[test]
fn out_of_descriptors_a_new_connection_gets_503_and_service_resumes() {
    for driver in DRIVERS {
        let server = Server::start_with_nofile(
            NOFILE,
            &["--driver", driver, "--threads", "1", "--metrics-listen", "127.0.0.1:0"],
        );
        let mut held = Vec::new();
        let refused = loop {
            assert!(held.len() < CONNECTIONS_TRIED_MAX as usize, "{driver}: never ran out");
            let mut s = server.connect();
            // A read timeout here (the helper's 10 s) is the defect: no answer at all.
            let r = initialize(&server, &mut s);
            match r.status {
                200 => held.push(s),
                503 => break r,
                other => panic!("{driver}: {other} {}", r.text()),
            }
        };
        assert_eq!(refused.header("Retry-After"), Some("1"), "{driver}");
        assert_eq!(refused.header("Connection"), Some("close"), "{driver}");
        assert_eq!(refused.json()["error"]["code"], -32603, "{driver}: {}", refused.text());
        assert!(held.len() > 2, "{driver}: only {} connections before the limit", held.len());
        drop(held);
        let mut served = None;
        let resumed = poll_until(Duration::from_secs(10), || {
            let mut s = server.connect();
            served = Some(initialize(&server, &mut s).status);
            served == Some(200)
        });
        assert!(resumed, "{driver}: not served again after the connections closed: {served:?}");
        let exhausted =
            metric(&scrape(&server.metrics()), "tidemark_accept_descriptors_exhausted_total");
        assert!(exhausted >= 1, "{driver}: exhaustion counted");
        assert!(exhausted <= EXHAUSTIONS_PER_ANSWER_MAX, "{driver}: {exhausted}: the accept spun");
    }
}
