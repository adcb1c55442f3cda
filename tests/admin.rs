//! Goal: the admin listener (`--metrics-listen`, issue 11 §6): connections are served
//! concurrently, so idle or slow ones never delay a scrape; `/healthz` answers 200 while the
//! process runs, `/readyz` 200 while serving and 503 once a drain began, `/metrics` the
//! Prometheus text, 404 elsewhere, 405 for another method; at most `ADMIN_CONNECTIONS_MAX`
//! connections at once (N served, N+1 refused with 503).
//! Method: the real binary with `--metrics-listen 127.0.0.1:0` (the banner names the bound
//! address), raw HTTP/1.1 over loopback, one request per connection read to EOF; both drivers
//! where the workers' counters or drain are involved; signals sent with `kill`. Connections
//! being served are counted as the admin listener's connection threads in `/proc/<pid>/task`
//! (one per connection, named `tidemark-admin-conn`), so a test waits for that state.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use support::{poll_until, wait_until, Server, DRIVERS};

/// `config::ADMIN_CONNECTIONS_MAX`.
const ADMIN_CONNECTIONS_MAX: usize = 64;

/// The server with its admin listener on; `admin` is that listener's address.
struct Proc {
    server: Server,
    addr: SocketAddr,
    admin: SocketAddr,
}

impl Proc {
    fn start(driver: &str, args: &[&str]) -> Proc {
        let mut all = vec!["--metrics-listen", "127.0.0.1:0"];
        all.extend_from_slice(args);
        let server = Server::on(driver, &all);
        let admin = server.admin.expect("banner names the admin address");
        Proc { addr: server.addr, admin, server }
    }

    fn signal(&self, sig: &str) {
        self.server.signal(sig);
    }

    /// Admin connections being served: the listener's connection threads alive. A thread takes
    /// its connection's slot before it starts and gives it back before it ends.
    fn serving(&self) -> usize {
        let tasks = format!("/proc/{}/task", self.server.pid());
        std::fs::read_dir(tasks)
            .expect("read the server's threads")
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
            .filter(|name| name.trim_end() == CONNECTION_THREAD)
            .count()
    }

    /// Waits until exactly `n` admin connections are being served.
    fn wait_serving(&self, n: usize, what: &str) {
        wait_until(Duration::from_secs(10), what, || self.serving() == n);
    }
}

/// An admin connection thread's name (`tidemark-admin-conn`) as the kernel keeps it: 15 bytes.
const CONNECTION_THREAD: &str = "tidemark-admin-";

/// One request on a fresh admin connection; (status, body), read to EOF within 5 s.
fn fetch(admin: SocketAddr, method: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(admin).expect("connect admin");
    s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    write!(s, "{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n").expect("write");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read to EOF");
    let status = text.split_whitespace().nth(1).and_then(|s| s.parse().ok());
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status.unwrap_or_else(|| panic!("{method} {path}: {text:?}")), body)
}

#[test]
fn idle_connections_do_not_delay_a_scrape() {
    // 20 connections that send nothing, and 5 that send half a head, all being served, then a
    // scrape: it must be answered within a second (one at a time, it waited for each idle
    // one's timeout).
    for driver in DRIVERS {
        let server = Proc::start(driver, &[]);
        let idle: Vec<TcpStream> =
            (0..20).map(|_| TcpStream::connect(server.admin).expect("connect")).collect();
        let slow: Vec<TcpStream> = (0..5)
            .map(|_| {
                let mut s = TcpStream::connect(server.admin).expect("connect");
                s.write_all(b"GET /metr").expect("write");
                s
            })
            .collect();
        server.wait_serving(25, &format!("{driver}: the 25 idle and slow connections served"));
        let started = Instant::now();
        let (status, body) = fetch(server.admin, "GET", "/metrics");
        let took = started.elapsed();
        assert_eq!(status, 200, "{driver}: {body}");
        assert!(body.contains("# TYPE tidemark_requests_total counter"), "{driver}: {body}");
        assert!(took < Duration::from_secs(1), "{driver}: scrape took {took:?}");
        drop((idle, slow));
    }
}

#[test]
fn an_idle_admin_connection_is_closed_after_the_io_timeout() {
    let server = Proc::start("epoll", &[]);
    let mut idle = TcpStream::connect(server.admin).expect("connect");
    idle.set_read_timeout(Some(Duration::from_secs(6))).expect("timeout");
    let started = Instant::now();
    let mut buf = [0u8; 16];
    let n = support::read_retrying(&mut idle, &mut buf).unwrap_or(0);
    assert_eq!(n, 0, "closed without an answer");
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(1500) && took < Duration::from_secs(4), "{took:?}");
}

/// Within this of its first connection, a round of the bound test has sent its probe before
/// any held connection's `ADMIN_IO_TIMEOUT_MS` (2 s) closed it.
const ROUND_BUDGET: Duration = Duration::from_millis(1800);

/// One round of the bound test: N − 1 held connections being served, the N-th served, one
/// more held, then the probe's answer. `None` when the round ran past `ROUND_BUDGET` (a loaded
/// machine): a held connection may have timed out, so the probe proves nothing.
fn bounded_round(server: &Proc) -> Option<(u16, String)> {
    let started = Instant::now();
    let left = || ROUND_BUDGET.saturating_sub(started.elapsed());
    let mut held: Vec<TcpStream> = (0..ADMIN_CONNECTIONS_MAX - 1)
        .map(|_| TcpStream::connect(server.admin).expect("connect"))
        .collect();
    if !poll_until(left(), || server.serving() == ADMIN_CONNECTIONS_MAX - 1) {
        return None;
    }
    // The N-th connection is served.
    let (status, _) = fetch(server.admin, "GET", "/healthz");
    assert_eq!(status, 200, "the {ADMIN_CONNECTIONS_MAX}th connection");
    // Its thread gives its slot back just after the answer's end.
    if !poll_until(left(), || server.serving() == ADMIN_CONNECTIONS_MAX - 1) {
        return None;
    }
    held.push(TcpStream::connect(server.admin).expect("connect"));
    if !poll_until(left(), || server.serving() == ADMIN_CONNECTIONS_MAX) {
        return None;
    }
    // With N held, the next one is refused with 503 (and closed).
    let answer = fetch(server.admin, "GET", "/healthz");
    let in_time = started.elapsed() < ROUND_BUDGET;
    drop(held);
    in_time.then_some(answer)
}

#[test]
fn admin_connections_are_bounded_n_served_n_plus_one_refused() {
    // Held connections send nothing, so the server closes them ADMIN_IO_TIMEOUT_MS (2 s) after
    // accepting them; each round waits until they are all being served before its probe, and
    // a round that took longer than ROUND_BUDGET (a loaded machine) is tried again.
    let server = Proc::start("epoll", &[]);
    let mut refused = None;
    for _round in 0..10 {
        // The previous round's held connections are gone (their threads ended).
        server.wait_serving(0, "the held connections of the last round to end");
        refused = bounded_round(&server);
        if refused.is_some() {
            break;
        }
    }
    let (status, body) = refused.expect("a round within its budget (ten tried)");
    assert_eq!(status, 503, "connection {}: {body}", ADMIN_CONNECTIONS_MAX + 1);
    assert!(body.contains("too many admin connections"), "{body}");
    // Once the held ones are closed, the listener serves again.
    wait_until(Duration::from_secs(5), "the listener to serve again after the held closed", || {
        fetch(server.admin, "GET", "/healthz").0 == 200
    });
}

#[test]
fn health_readiness_and_other_paths() {
    // Table of paths while serving; then /readyz turns 503 during a drain while /healthz and
    // /metrics still answer.
    for driver in DRIVERS {
        let server = Proc::start(driver, &["--drain-secs", "10"]);
        let cases: [(&str, &str, u16, &str); 8] = [
            ("GET", "/healthz", 200, "ok\n"),
            ("GET", "/readyz", 200, "ready\n"),
            ("GET", "/metrics?name=x", 200, "# HELP"),
            ("GET", "/", 404, "not found"),
            ("GET", "/mcp", 404, "not found"),
            ("GET", "/metrics/x", 404, "not found"),
            ("POST", "/metrics", 405, "GET only"),
            ("DELETE", "/readyz", 405, "GET only"),
        ];
        for (method, path, want, text) in cases {
            let (status, body) = fetch(server.admin, method, path);
            assert_eq!(status, want, "{driver}: {method} {path}: {body}");
            assert!(body.contains(text), "{driver}: {method} {path}: {body:?}");
        }
        // A running call keeps the drain going while we look.
        let mut call = TcpStream::connect(server.addr).expect("connect");
        let sid = open_session(server.addr);
        let body = support::call(1, "slow_counter", r#"{"steps":40,"delay_ms":50}"#, true);
        let headers = [
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("Mcp-Session-Id", sid.as_str()),
        ];
        let raw = support::request("POST", "/mcp", &server.addr.to_string(), &headers, Some(&body));
        call.write_all(&raw).expect("write call");
        let mut first = [0u8; 64];
        assert!(
            support::read_retrying(&mut call, &mut first).expect("read") > 0,
            "{driver}: the call started"
        );
        server.signal("TERM");
        wait_until(
            Duration::from_secs(2),
            &format!("{driver}: /readyz 503 while draining"),
            || fetch(server.admin, "GET", "/readyz").0 == 503,
        );
        assert_eq!(fetch(server.admin, "GET", "/readyz"), (503, "draining\n".to_owned()));
        assert_eq!(fetch(server.admin, "GET", "/healthz"), (200, "ok\n".to_owned()), "{driver}");
        assert_eq!(fetch(server.admin, "GET", "/metrics").0, 200, "{driver}");
    }
}

/// initialize on a fresh connection to `addr`; the session id.
fn open_session(addr: SocketAddr) -> String {
    let headers =
        [("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")];
    let raw = support::request("POST", "/mcp", &addr.to_string(), &headers, Some(support::INIT));
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    s.write_all(&raw).expect("write");
    let r = support::read_response(&mut s);
    assert_eq!(r.status, 200, "{}", r.text());
    r.header("Mcp-Session-Id").expect("session id").to_owned()
}

#[test]
fn request_durations_are_counted_by_era_and_method_and_the_stream_gauges_sampled() {
    // initialize (+ notifications/initialized), 7 echo calls, a ping: each lands in its
    // (era, method) series with the right count, the SSE calls in the first-event histogram,
    // and the reaper's sample shows the session's ring bytes within a few of its intervals.
    const CALLS: u64 = 7;
    for driver in DRIVERS {
        let server = Proc::start(driver, &[]);
        let sid = support::open_session(&server.server);
        let session = [("Mcp-Session-Id", sid.as_str())];
        for id in 1..=CALLS {
            let body = support::call(id, "echo", r#"{"text":"hi"}"#, true);
            let r = support::post(&server.server, &session, &body);
            assert_eq!(r.status, 200, "{driver}: {}", r.text());
        }
        let ping = r#"{"jsonrpc":"2.0","id":99,"method":"ping"}"#;
        assert_eq!(support::post(&server.server, &session, ping).status, 200, "{driver}");
        let count = |text: &str, labels: &str| {
            let sample = format!("tidemark_request_duration_seconds_count{{{labels}}}");
            support::metric(text, &sample)
        };
        // A request is counted once its answer is written: the client may read it first.
        let ping_counted =
            r#"tidemark_request_duration_seconds_count{era="legacy",method="ping"} 1"#;
        wait_until(Duration::from_secs(2), &format!("{driver}: the ping counted"), || {
            let text = fetch(server.admin, "GET", "/metrics").1;
            let calls = format!("_count{{era=\"legacy\",method=\"tools/call\"}} {CALLS}\n");
            text.contains(ping_counted) && text.contains(&calls)
        });
        let (_, text) = fetch(server.admin, "GET", "/metrics");
        assert_eq!(count(&text, r#"era="legacy",method="initialize""#), 1, "{driver}");
        assert_eq!(count(&text, r#"era="legacy",method="notification""#), 1, "{driver}");
        assert_eq!(count(&text, r#"era="legacy",method="tools/call""#), CALLS, "{driver}");
        assert_eq!(count(&text, r#"era="legacy",method="ping""#), 1, "{driver}");
        let first = support::metric(&text, "tidemark_sse_first_event_seconds_count");
        assert!(first >= CALLS, "{driver}: {first} first events");
        let inf = r#"tidemark_request_duration_seconds_bucket{era="legacy",method="tools/call",le="+Inf"}"#;
        assert_eq!(support::metric(&text, inf), CALLS, "{driver}");
        assert_eq!(support::metric(&text, "tidemark_sessions_active"), 1, "{driver}");
        wait_until(Duration::from_secs(3), &format!("{driver}: ring bytes sampled"), || {
            let (_, text) = fetch(server.admin, "GET", "/metrics");
            let per_core: u64 = (text.lines())
                .filter_map(|l| l.strip_prefix("tidemark_core_ring_bytes{core=\""))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
                .sum();
            let total = support::metric(&text, "tidemark_ring_bytes");
            total > 0 && per_core == total
        });
    }
}
