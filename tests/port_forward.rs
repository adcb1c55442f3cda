//! Goal: a client behind a transparent port forwarder on the same machine (`ssh -L
//! 9000:127.0.0.1:8080`, `kubectl port-forward`, `socat`) is served: it names the forwarder's
//! port in `Host`, not ours, and a loopback name with any well-formed port is accepted (issue
//! 16). What the Host rule is for stays refused: a foreign host name, or a port that is not a
//! port. Method: the real binary on 127.0.0.1:0, once per io driver (`support::DRIVERS`); a
//! forwarder run by the test itself (a thread accepting on another 127.0.0.1 port that copies
//! bytes both ways to the server, changing none of them); raw HTTP/1.1 over blocking
//! `TcpStream`s, through the forwarder or straight to the server.
mod support;

use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use support::*;

/// A transparent TCP forwarder: every connection accepted on `addr` is copied byte for byte to
/// and from `target`. Stopped (and its accept thread joined) on drop.
struct Forwarder {
    addr: SocketAddr,
    /// Connections accepted and relayed so far.
    relayed: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl Forwarder {
    fn start(target: SocketAddr) -> Forwarder {
        let listener = TcpListener::bind("127.0.0.1:0").expect("forwarder bind");
        let addr = listener.local_addr().expect("forwarder address");
        let relayed = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (count, stopping) = (relayed.clone(), stop.clone());
        let accept = std::thread::spawn(move || {
            for client in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let server = TcpStream::connect(target).expect("forwarder connects to the server");
                count.fetch_add(1, Ordering::SeqCst);
                let (c, s) =
                    (client.try_clone().expect("clone"), server.try_clone().expect("clone"));
                std::thread::spawn(move || pipe(client, server));
                std::thread::spawn(move || pipe(s, c));
            }
        });
        Forwarder { addr, relayed, stop, accept: Some(accept) }
    }

    /// The `Host` a client of this forwarder sends: the forwarder's port, not the server's.
    fn host(&self) -> String {
        format!("localhost:{}", self.addr.port())
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).expect("connect to the forwarder");
        s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        s
    }

    /// One request, one response, on a fresh connection through the forwarder.
    fn exchange(&self, raw: &[u8]) -> Response {
        let mut s = self.connect();
        send(&mut s, raw);
        read_response(&mut s)
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the blocked accept so it sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

/// Copies `from` to `to` until `from` ends, then passes the end on (half-close), as a
/// forwarder does.
fn pipe(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 16384];
    loop {
        match read_retrying(&mut from, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// Asserts the Host refusal: 403, a JSON-RPC -32600 error with `id: null`, no session.
fn assert_forbidden(r: &Response, what: &str) {
    assert_eq!(r.status, 403, "{what}: status; body {}", r.text());
    let v = r.json();
    assert!(v["id"].is_null(), "{what}: {v}");
    assert_eq!(v["error"]["code"], -32600, "{what}: {v}");
    assert!(r.header("Mcp-Session-Id").is_none(), "{what}: no session on 403");
}

/// Goal: a session opened and used through a forwarder, under `Host: localhost:<forwarder
/// port>`, works as one opened directly: `initialize` 200 with a session, `initialized` 202,
/// `tools/call echo` 200 with the echoed text, on fresh connections and on one kept alive.
/// Method: a `Forwarder` in front of each server; every request sent to the forwarder with the
/// forwarder's port in Host (never the server's); the forwarder's count proves the requests
/// went through it.
#[test]
fn a_client_behind_a_port_forwarder_is_served() {
    for driver in DRIVERS {
        let server = Server::on(driver, &[]);
        let fwd = Forwarder::start(server.addr);
        assert_ne!(fwd.addr.port(), server.addr.port(), "{driver}: another port than ours");
        let host = fwd.host();
        let post = |extra: &[(&str, &str)], body: &str| {
            let mut h = POST_HEADERS.to_vec();
            h.extend_from_slice(extra);
            fwd.exchange(&request("POST", &server.path, &host, &h, Some(body)))
        };

        let r = post(&[], INIT);
        assert_eq!(r.status, 200, "{driver}: initialize via {host}: {}", r.text());
        assert_eq!(r.json()["result"]["protocolVersion"], "2025-11-25", "{driver}");
        let sid = r.header("Mcp-Session-Id").expect("session id").to_owned();
        let sid_header = [("Mcp-Session-Id", sid.as_str())];
        let n = post(&sid_header, r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        assert_eq!(n.status, 202, "{driver}: initialized via {host}: {}", n.text());

        let r = post(&sid_header, &call(1, "echo", r#"{"text":"through the tunnel"}"#, false));
        assert_eq!(r.status, 200, "{driver}: tools/call via {host}: {}", r.text());
        let last = r.events().last().expect("result event").json();
        assert!(last.get("error").is_none(), "{driver}: {last}");
        assert_eq!(last["id"], 1, "{driver}: {last}");
        assert_eq!(last["result"]["content"][0]["text"], "through the tunnel", "{driver}: {last}");

        // Two calls on one connection kept alive through the forwarder.
        let mut h = POST_HEADERS.to_vec();
        h.push(("Mcp-Session-Id", &sid));
        let mut s = fwd.connect();
        for id in [2u64, 3] {
            let text = format!("kept alive {id}");
            let body = call(id, "echo", &format!(r#"{{"text":"{text}"}}"#), false);
            send(&mut s, &request("POST", &server.path, &host, &h, Some(&body)));
            let r = read_response(&mut s);
            assert_eq!(r.status, 200, "{driver}: call {id} kept alive: {}", r.text());
            let last = r.events().last().expect("result event").json();
            assert_eq!(last["result"]["content"][0]["text"], text, "{driver}: {last}");
        }
        drop(s);
        assert_eq!(fwd.relayed.load(Ordering::SeqCst), 4, "{driver}: all went through it");
    }
}

/// Goal: accepting another port opens nothing else: a Host whose name is not loopback (and not
/// listed), or whose "port" is not 1 to 5 digits naming 1–65535, is refused with 403, sent
/// straight to the server or through the forwarder, in Host or as an absolute-form target's
/// authority; the same requests under the forwarder's Host are accepted, so the refusal is the
/// Host's doing. Method: `initialize` under each refused authority, on each driver.
#[test]
fn foreign_names_and_malformed_ports_are_refused() {
    for driver in DRIVERS {
        let server = Server::on(driver, &[]);
        let fwd = Forwarder::start(server.addr);
        let (port, other) = (server.addr.port(), fwd.addr.port());
        let refused: Vec<String> = vec![
            "localhost:9101.evil.com".into(),
            "localhost:evil.com".into(),
            "evil.com:9101".into(),
            format!("evil.com:{port}"),
            format!("evil.com:{other}"),
            format!("localhost:{other}.evil.com"),
            format!("localhost.evil.com:{other}"),
            format!("127.0.0.1.evil.com:{port}"),
            "localhost:0".into(),
            "localhost:65536".into(),
            "localhost:100000".into(),
            format!("localhost:+{other}"),
            format!("localhost:{other}:{other}"),
            format!("[::1]x{other}"),
            format!("[::1:{other}"),
        ];
        for authority in &refused {
            let in_host = request("POST", &server.path, authority, &POST_HEADERS, Some(INIT));
            let target = format!("http://{authority}{}", server.path);
            let in_target = request("POST", &target, &fwd.host(), &POST_HEADERS, Some(INIT));
            assert_forbidden(&exchange(&server, &in_host), &format!("{driver}: Host {authority}"));
            assert_forbidden(
                &exchange(&server, &in_target),
                &format!("{driver}: target authority {authority}"),
            );
            assert_forbidden(
                &fwd.exchange(&in_host),
                &format!("{driver}: Host {authority} via the forwarder"),
            );
        }
        // The control: the forwarder's own Host, in either place, is served.
        let host = fwd.host();
        let target = format!("http://{host}{}", server.path);
        for raw in [
            request("POST", &server.path, &host, &POST_HEADERS, Some(INIT)),
            request("POST", &target, &host, &POST_HEADERS, Some(INIT)),
        ] {
            let r = fwd.exchange(&raw);
            assert_eq!(r.status, 200, "{driver}: control via {host}: {}", r.text());
            assert!(r.header("Mcp-Session-Id").is_some(), "{driver}: control made a session");
        }
    }
}
