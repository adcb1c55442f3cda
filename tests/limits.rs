//! Goal: each limit of CONTRACT §1 that a peer can observe, at N (served) and N+1 (refused with
//! a clear status, a JSON-RPC error body and a counter), and every timeout as "ends the
//! connection instead of hanging"; plus the start-up check that refuses a zero (or otherwise
//! impossible) limit with a message naming the flag. Body, header-bytes and header-count limits
//! at N/N+1 are in `http_conformance.rs`; here only their counters. Replay limits are observed
//! through resumes in `sse_resume.rs`. Method: the real binary with small limit flags, one
//! server per io driver (`support::DRIVERS`), raw HTTP/1.1 over blocking `TcpStream`s, counters
//! read from `/metrics`.
mod support;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

fn ping(id: u64) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#)
}

/// Asserts a refusal with a JSON-RPC error body.
fn assert_refused(r: &Response, status: u16, what: &str) {
    assert_eq!(r.status, status, "{what}: {}", r.text());
    let v = r.json();
    assert_eq!(v["jsonrpc"], "2.0", "{what}: {v}");
    assert!(v["error"]["code"].is_i64(), "{what}: JSON-RPC error body: {v}");
    assert!(v["error"]["message"].is_string(), "{what}: {v}");
}

#[test]
fn sessions_per_core_at_n_and_n_plus_one() {
    for driver in DRIVERS {
        let (server, metrics) =
            server_with_metrics(driver, &["--threads", "1", "--max-sessions-per-core", "2"]);
        let first = open_session(&server);
        let _second = open_session(&server);
        let r = post(&server, &[], INIT);
        assert_refused(&r, 503, &format!("{driver}: third initialize"));
        assert_eq!(r.json()["id"], 0, "{driver}: the refusal answers the initialize");
        assert!(r.header("Mcp-Session-Id").is_none(), "{driver}: no session on 503");
        assert_eq!(metric(&scrape(&metrics), "tidemark_limit_hits_total{limit=\"sessions\"}"), 1);
        // The live sessions are unaffected, and DELETE frees a slot.
        let r = post(&server, &[("Mcp-Session-Id", &first)], &ping(1));
        assert_eq!(r.status, 200, "{driver}");
        let del =
            request("DELETE", &server.path, &server.host(), &[("Mcp-Session-Id", &first)], None);
        assert_eq!(exchange(&server, &del).status, 200, "{driver}: DELETE");
        let _third = open_session(&server);
        assert_refused(&post(&server, &[], INIT), 503, &format!("{driver}: full again"));
    }
}

#[test]
fn streams_per_session_at_n_and_n_plus_one() {
    for driver in DRIVERS {
        let (server, metrics) =
            server_with_metrics(driver, &["--threads", "1", "--max-streams-per-session", "2"]);
        let sid = open_session(&server);
        // N streams in flight, each attached to its own connection: none can be evicted.
        let slow = |id: u64| call(id, "slow_counter", r#"{"steps":1,"delay_ms":5000}"#, true);
        let mut held = Vec::new();
        for id in [1, 2] {
            let mut s = call_stream(&server, &sid, &slow(id), &[]);
            assert_eq!(s.status, 200, "{driver}: stream {id} of N");
            assert!(s.next_event().is_some_and(|e| e.is_priming()), "{driver}: stream {id}");
            held.push(s);
        }
        // N+1: refused, with the request's id.
        let r =
            post(&server, &[("Mcp-Session-Id", &sid)], &call(3, "echo", r#"{"text":"x"}"#, false));
        assert_refused(&r, 429, &format!("{driver}: stream N+1"));
        assert_eq!(r.json()["id"], 3, "{driver}");
        assert_eq!(metric(&scrape(&metrics), "tidemark_limit_hits_total{limit=\"streams\"}"), 1);
        // Requests that need no stream still work, and the limit is per session.
        let r = post(&server, &[("Mcp-Session-Id", &sid)], &ping(4));
        assert_eq!(r.status, 200, "{driver}: ping needs no stream");
        let other = open_session(&server);
        let mut s = call_stream(&server, &other, &call(5, "echo", r#"{"text":"y"}"#, false), &[]);
        assert_eq!(s.status, 200, "{driver}: another session has its own streams");
        assert_eq!(s.rest().last().expect("result").json()["id"], 5);
        drop(held);
    }
}

#[test]
fn completed_streams_make_room_for_new_ones() {
    for driver in DRIVERS {
        let server = Server::on(driver, &["--threads", "1", "--max-streams-per-session", "2"]);
        let sid = open_session(&server);
        // N+3 calls one after the other: each completes and is delivered, so it can be evicted.
        for id in 1..=5u64 {
            let text = format!("n{id}");
            let body = call(id, "echo", &format!(r#"{{"text":"{text}"}}"#), false);
            let mut s = call_stream(&server, &sid, &body, &[]);
            assert_eq!(s.status, 200, "{driver}: call {id}");
            let last = s.rest().last().expect("result").json();
            assert_eq!(last["result"]["content"][0]["text"], text.as_str(), "{driver}: call {id}");
        }
    }
}

#[test]
fn half_sent_head_gets_408_or_a_close_not_a_hang() {
    for driver in DRIVERS {
        let (server, metrics) =
            server_with_metrics(driver, &["--threads", "1", "--header-timeout-ms", "200"]);
        let what = format!("{driver}: half-sent head");
        let mut s = server.connect();
        let head = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: app",
            server.path,
            server.host()
        );
        send(&mut s, head.as_bytes());
        let started = Instant::now();
        let (bytes, ending) = read_until_closed(&mut s, Duration::from_secs(5));
        assert_ne!(ending, Ending::StillOpen, "{what}: still open after {:?}", started.elapsed());
        if !bytes.is_empty() {
            let r = parse_complete(&bytes).expect("a whole response");
            assert_refused(&r, 408, &what);
        }
        assert!(
            metric(&scrape(&metrics), "tidemark_limit_hits_total{limit=\"header_timeout\"}") >= 1
        );

        // A body that stops short of its Content-Length: also ended, not held forever.
        let mut s = server.connect();
        let mut h = POST_HEADERS.to_vec();
        h.push(("Content-Length", "100"));
        let raw = request("POST", &server.path, &server.host(), &h, None);
        send(&mut s, &raw);
        send(&mut s, b"{\"jsonrpc\"");
        let (_, ending) = read_until_closed(&mut s, Duration::from_secs(5));
        assert_ne!(ending, Ending::StillOpen, "{driver}: short body");
    }
}

/// The header timeout bounds the whole head ("once its first byte arrived", config.rs), so a
/// client that sends one byte at a time just inside the timeout (slowloris) is still cut off.
#[test]
fn a_dripped_head_is_cut_off_by_the_header_timeout() {
    for driver in DRIVERS {
        let server = Server::on(driver, &["--threads", "1", "--header-timeout-ms", "300"]);
        let mut s = server.connect();
        s.set_read_timeout(Some(Duration::from_millis(100))).expect("timeout");
        let head = format!("POST {} HTTP/1.1\r\nHost: {}\r\nX-Drip: ", server.path, server.host());
        send(&mut s, head.as_bytes());
        let started = Instant::now();
        let mut answer = Vec::new();
        let ended = loop {
            if started.elapsed() > Duration::from_secs(3) {
                break false;
            }
            if s.write_all(b"a").is_err() {
                break true;
            }
            let mut tmp = [0u8; 1024];
            match read_retrying(&mut s, &mut tmp) {
                Ok(0) => break true,
                Ok(n) => answer.extend_from_slice(&tmp[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => break true,
            }
        };
        assert!(ended, "{driver}: a head dripped for 3 s (timeout 300 ms) is still being read");
        if let Some(r) = parse_complete(&answer) {
            assert_refused(&r, 408, &format!("{driver}: dripped head"));
        }
    }
}

#[test]
fn idle_keep_alive_connections_are_closed() {
    for driver in DRIVERS {
        let server = Server::on(driver, &["--threads", "1", "--idle-timeout-secs", "1"]);
        let sid = open_session(&server);
        // A served request, then silence: the server closes the connection (FIN, no bytes).
        let mut s = server.connect();
        let mut h = POST_HEADERS.to_vec();
        h.push(("Mcp-Session-Id", &sid));
        send(&mut s, &request("POST", &server.path, &server.host(), &h, Some(&ping(1))));
        assert_eq!(read_response(&mut s).status, 200, "{driver}");
        let (rest, ending) = read_until_closed(&mut s, Duration::from_secs(5));
        assert_eq!(ending, Ending::Closed, "{driver}: idle keep-alive connection");
        assert!(rest.is_empty(), "{driver}: closed silently: {:?}", String::from_utf8_lossy(&rest));
        // A connection that never sends a byte is closed too.
        let mut s = server.connect();
        let (_, ending) = read_until_closed(&mut s, Duration::from_secs(5));
        assert_eq!(ending, Ending::Closed, "{driver}: silent connection");
        // The session outlives its connections.
        let r = post(&server, &[("Mcp-Session-Id", &sid)], &ping(2));
        assert_eq!(r.status, 200, "{driver}: session survives the connection");
    }
}

#[test]
fn idle_timeout_counts_from_the_last_request() {
    // Goal: the idle timeout is the silence since the connection's last request, not since
    // its first: the connection's one idle timer is pushed later by each request (the server
    // moves its deadline instead of filing a new timer per wait), and a timer filed for an
    // earlier deadline must not close a connection that was busy since. Method: three pings
    // 0.6 s apart on one connection with a 1 s idle timeout (1.8 s in all, past the first
    // deadline), each answered; then silence closes it. The same after a 1.5 s stream.
    // Sleeps: elapsed time is what is tested.
    for driver in DRIVERS {
        let server = Server::on(driver, &["--threads", "1", "--idle-timeout-secs", "1"]);
        let sid = open_session(&server);
        let mut s = server.connect();
        let mut h = POST_HEADERS.to_vec();
        h.push(("Mcp-Session-Id", &sid));
        for id in 1..=4 {
            send(&mut s, &request("POST", &server.path, &server.host(), &h, Some(&ping(id))));
            assert_eq!(read_response(&mut s).status, 200, "{driver}: ping {id}");
            if id < 4 {
                std::thread::sleep(Duration::from_millis(600));
            }
        }
        let (rest, ending) = read_until_closed(&mut s, Duration::from_secs(5));
        assert_eq!(ending, Ending::Closed, "{driver}: idle after the last request");
        assert!(rest.is_empty(), "{driver}: closed silently: {:?}", String::from_utf8_lossy(&rest));
        // A stream outlasting the timeout (its timer fired meanwhile, with no wait to end),
        // then the next request on the connection at once: served, the timer filed anew.
        let slow = call(5, "slow_counter", r#"{"steps":3,"delay_ms":500}"#, true);
        let mut stream = call_stream(&server, &sid, &slow, &[]);
        assert_eq!(stream.status, 200, "{driver}: slow stream");
        assert_eq!(stream.rest().last().expect("result").json()["id"], 5, "{driver}");
        let mut s = stream.into_stream();
        send(&mut s, &request("POST", &server.path, &server.host(), &h, Some(&ping(6))));
        assert_eq!(read_response(&mut s).status, 200, "{driver}: the request after the stream");
        let (_, ending) = read_until_closed(&mut s, Duration::from_secs(5));
        assert_eq!(ending, Ending::Closed, "{driver}: idle after the stream's connection");
    }
}

#[test]
fn connections_per_core_at_n_and_n_plus_one() {
    for driver in DRIVERS {
        let (server, metrics) =
            server_with_metrics(driver, &["--threads", "1", "--max-connections-per-core", "2"]);
        let sid = open_session(&server);
        let mut h = POST_HEADERS.to_vec();
        h.push(("Mcp-Session-Id", &sid));
        // The connections `open_session` used are gone before counting starts.
        wait_closed(&server, 0, driver);
        // N connections, each proven live by a request and kept open.
        let mut open = Vec::new();
        for id in 1..=2u64 {
            let mut s = server.connect();
            send(&mut s, &request("POST", &server.path, &server.host(), &h, Some(&ping(id))));
            assert_eq!(read_response(&mut s).status, 200, "{driver}: connection {id} of N");
            open.push(s);
        }
        // N+1: told 503 with a JSON-RPC error, then closed.
        let mut s = server.connect();
        let (bytes, ending) = read_until_closed(&mut s, Duration::from_secs(5));
        let r = parse_complete(&bytes).unwrap_or_else(|| panic!("{driver}: no answer: {ending:?}"));
        assert_refused(&r, 503, &format!("{driver}: connection N+1"));
        assert_ne!(ending, Ending::StillOpen, "{driver}: refused connection closed");
        assert!(metric(&scrape(&metrics), "tidemark_limit_hits_total{limit=\"connections\"}") >= 1);
        // Closing one frees its slot, once the server has seen the close.
        drop(open.pop());
        wait_closed(&server, 1, driver);
        let mut s = server.connect();
        send(&mut s, &request("POST", &server.path, &server.host(), &h, Some(&ping(9))));
        let r = read_response(&mut s);
        assert_eq!(r.status, 200, "{driver}: the freed slot serves: {}", r.text());
    }
}

#[test]
fn limit_hits_are_counted() {
    for driver in DRIVERS {
        let (server, metrics) = server_with_metrics(
            driver,
            &[
                "--threads",
                "1",
                "--max-body-bytes",
                "64",
                "--max-header-bytes",
                "1024",
                "--max-headers",
                "8",
            ],
        );
        let sample = |name: &str| format!("tidemark_limit_hits_total{{limit=\"{name}\"}}");
        let before = scrape(&metrics);
        assert_eq!(metric(&before, &sample("body")), 0);
        assert_eq!(metric(&before, &sample("header")), 0);
        let big = format!("{}{}", ping(1), " ".repeat(64));
        let r = exchange(
            &server,
            &request("POST", &server.path, &server.host(), &POST_HEADERS, Some(&big)),
        );
        assert_refused(&r, 413, &format!("{driver}: body"));
        let pad = "a".repeat(1100);
        let r = exchange(
            &server,
            &request("GET", &server.path, &server.host(), &[("X-Pad", &pad)], None),
        );
        assert_refused(&r, 431, &format!("{driver}: head bytes"));
        let many: Vec<(String, &str)> = (0..8).map(|i| (format!("X-{i}"), "1")).collect();
        let many: Vec<(&str, &str)> = many.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let r = exchange(&server, &request("GET", &server.path, &server.host(), &many, None));
        assert_refused(&r, 431, &format!("{driver}: header count"));
        let after = scrape(&metrics);
        assert_eq!(metric(&after, &sample("body")), 1, "{driver}");
        assert_eq!(metric(&after, &sample("header")), 2, "{driver}");
    }
}

/// Runs the binary with `args`, expecting it to refuse to start: non-zero exit within a few
/// seconds, stderr naming `flag`.
fn refuses_to_start(args: &[&str], flag: &str) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tidemark"))
        .args(["--listen", "127.0.0.1:0", "--driver", "epoll"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tidemark");
    let Some(status) = exit_within(&mut child, Duration::from_secs(10)) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{args:?}: the server started instead of refusing the flag");
    };
    let mut stderr = String::new();
    child.stderr.take().expect("stderr").read_to_string(&mut stderr).expect("read stderr");
    let mut stdout = String::new();
    child.stdout.take().expect("stdout").read_to_string(&mut stdout).expect("read stdout");
    assert!(!status.success(), "{args:?}: exit status {status}");
    assert!(stderr.contains(flag), "{args:?}: stderr does not name {flag}: {stderr:?}");
    assert!(!stdout.contains("listening"), "{args:?}: printed a banner: {stdout:?}");
}

#[test]
fn impossible_limit_flags_stop_the_binary_at_start() {
    // (args, the flag the message must name)
    let cases: &[(&[&str], &str)] = &[
        (&["--max-body-bytes", "0"], "--max-body-bytes"),
        (&["--max-header-bytes", "0"], "--max-header-bytes"),
        (&["--max-headers", "0"], "--max-headers"),
        (&["--header-timeout-ms", "0"], "--header-timeout-ms"),
        (&["--idle-timeout-secs", "0"], "--idle-timeout-secs"),
        (&["--max-connections-per-core", "0"], "--max-connections-per-core"),
        (&["--max-sessions-per-core", "0"], "--max-sessions-per-core"),
        (&["--max-streams-per-session", "0"], "--max-streams-per-session"),
        (&["--replay-events", "0"], "--replay-events"),
        (&["--replay-bytes", "0"], "--replay-bytes"),
        (&["--session-idle-secs", "0"], "--session-idle-secs"),
        (&["--sse-keepalive-secs", "0"], "--sse-keepalive-secs"),
        (&["--owed-wait-ms", "0"], "--owed-wait-ms"),
        (&["--owed-timeout-secs", "0"], "--owed-timeout-secs"),
        (&["--max-held-per-session", "0"], "--max-held-per-session"),
        (&["--core-buffer-bytes", "0"], "--core-buffer-bytes"),
        (&["--drain-secs", "0"], "--drain-secs"),
        (&["--threads", "0"], "--threads"),
        (&["--replay-events", "3"], "--replay-events"),
        (&["--replay-events", "6"], "--replay-events"),
        (&["--replay-events", "4097"], "--replay-events"),
        (&["--threads", "1025"], "--threads"),
        (&["--max-headers", "129"], "--max-headers"),
        (&["--sse-first-write-hold-us", "1000001"], "--sse-first-write-hold-us"),
        (&["--owed-wait-ms", "2000", "--owed-timeout-secs", "2"], "--owed-wait-ms"),
        (&["--max-body-bytes=-1"], "--max-body-bytes"),
        (&["--max-body-bytes", "lots"], "--max-body-bytes"),
    ];
    for (args, flag) in cases {
        refuses_to_start(args, flag);
    }
}

#[test]
fn smallest_legal_limits_start_and_serve() {
    let ones = [
        "--max-body-bytes",
        "--header-timeout-ms",
        "--idle-timeout-secs",
        "--max-connections-per-core",
        "--max-sessions-per-core",
        "--max-streams-per-session",
        "--replay-events",
        "--replay-bytes",
        "--session-idle-secs",
        "--sse-keepalive-secs",
        "--owed-wait-ms",
        "--owed-timeout-secs",
        "--threads",
    ];
    let mut args: Vec<&str> = ones.iter().flat_map(|f| [*f, "1"]).collect();
    args.extend(["--max-headers", "128", "--sse-first-write-hold-us", "1000000"]);
    for driver in DRIVERS {
        let server = Server::on(driver, &args);
        // A one-byte body limit still answers (with 413) rather than failing.
        let r = post(&server, &[], INIT);
        assert_refused(&r, 413, &format!("{driver}: body over a 1-byte limit"));
    }
}

#[test]
fn held_posts_per_session_at_n_and_n_plus_one() {
    // Goal: --max-held-per-session bounds the POSTs a session holds at the migration boundary
    // (each keeps its request in memory): N are held and then answered, the N+1st gets 409
    // -31004 at once, and the counter says why. Method: cut a running slow_counter stream (now
    // owed), send N+1 pings on their own connections, then resume the owed stream.
    const HELD_MAX: u64 = 2;
    for driver in DRIVERS {
        let args = ["--max-held-per-session", "2", "--owed-wait-ms", "5000"];
        let (server, metrics) = server_with_metrics(driver, &args);
        let sid = open_session(&server);
        let body = call(1, "slow_counter", r#"{"steps":20,"delay_ms":20}"#, true);
        let mut s = call_stream(&server, &sid, &body, &[]);
        let priming = s.next_event().expect("priming").id.expect("id");
        s.cut();
        // The server has seen the cut (the stream is owed) once it ended that connection.
        wait_closed(&server, 0, driver);
        let held: Vec<_> = (0..HELD_MAX)
            .map(|i| {
                let (server_addr, host, path, sid) =
                    (server.addr, server.host(), server.path.clone(), sid.clone());
                std::thread::spawn(move || {
                    let mut h: Vec<(&str, &str)> = POST_HEADERS.to_vec();
                    h.push(("Mcp-Session-Id", &sid));
                    let raw = request("POST", &path, &host, &h, Some(&ping(10 + i)));
                    let mut c = std::net::TcpStream::connect(server_addr).expect("connect");
                    c.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
                    send(&mut c, &raw);
                    read_response(&mut c)
                })
            })
            .collect();
        // Wait until both are held (counted), then the next one is refused at once.
        let what = format!("{driver}: the pings to be held");
        wait_metric(&metrics, "tidemark_posts_held_total", Duration::from_secs(5), &what, |n| {
            n >= HELD_MAX
        });
        let started = Instant::now();
        let r = post(&server, &[("Mcp-Session-Id", &sid)], &ping(99));
        assert!(started.elapsed() < Duration::from_secs(2), "{driver}: N+1 was held too");
        assert_eq!(r.status, 409, "{driver}: {}", r.text());
        assert_eq!(r.json()["error"]["code"], -31004, "{driver}");
        let hits = metric(&scrape(&metrics), "tidemark_limit_hits_total{limit=\"held_posts\"}");
        assert_eq!(hits, 1, "{driver}: limit counter");
        // Resuming the owed stream releases the held ones, which then run.
        let mut g = resume(&server, &sid, &priming);
        let _ = g.rest();
        for h in held {
            let r = h.join().expect("held ping");
            assert_eq!(r.status, 200, "{driver}: held ping answered: {}", r.text());
        }
    }
}
