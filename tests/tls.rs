//! Goal: with `--tls-cert`/`--tls-key` every MCP listener speaks HTTP/1.1 over TLS 1.3/1.2
//! (ALPN `http/1.1`) on both io drivers, with nothing above the transport changed: both eras,
//! SSE streams and their resume, keep-alive connections moved between cores (the TLS session
//! moves with the socket); a handshake is bounded by `--header-timeout-ms` and a silent,
//! dripping or garbage peer never holds a core; plaintext HTTP and an `h2`-only client are
//! refused at the handshake; SIGHUP serves a new certificate to new connections while old ones
//! go on, and a bad file keeps the old certificate; start-up refuses half or broken TLS flags.
//!
//! Method: the real binary on 127.0.0.1:0, a test CA and server certificates made at test time
//! (rcgen), a rustls client over blocking sockets speaking raw HTTP/1.1 (the same parsing as
//! the plain tests: `support::parse_next`, `parse_events`), counters from `/metrics`.
mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use serde_json::{json, Value};
use support::*;

/// Bound on anything that must not hang.
const PROMPT: Duration = Duration::from_secs(5);

/// A CA and a server certificate it signed for `localhost` and 127.0.0.1, as PEM files.
struct Pki {
    ca: CertificateDer<'static>,
    leaf: CertificateDer<'static>,
    cert_pem: String,
    key_pem: String,
    ca_pem: String,
}

impl Pki {
    fn new(name: &str) -> Pki {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, format!("tidemark test CA {name}"));
        let ca = ca_params.self_signed(&ca_key).expect("CA");
        let leaf_key = KeyPair::generate().expect("leaf key");
        let mut leaf_params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .expect("leaf params");
        leaf_params.distinguished_name.push(DnType::CommonName, format!("tidemark {name}"));
        let leaf = leaf_params.signed_by(&leaf_key, &ca, &ca_key).expect("leaf");
        Pki {
            ca: ca.der().clone(),
            leaf: leaf.der().clone(),
            cert_pem: leaf.pem(),
            key_pem: leaf_key.serialize_pem(),
            ca_pem: ca.pem(),
        }
    }

    /// Writes the chain and key as `dir/cert.pem` and `dir/key.pem`.
    fn write(&self, dir: &Path) {
        std::fs::write(dir.join("cert.pem"), &self.cert_pem).expect("write cert");
        std::fs::write(dir.join("key.pem"), &self.key_pem).expect("write key");
        std::fs::write(dir.join("ca.pem"), &self.ca_pem).expect("write ca");
    }
}

/// A fresh directory under the system's temp dir.
fn temp_dir(tag: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("tidemark-tls-{}-{tag}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A TLS server with the admin listener; its PEM files live in `dir`.
struct TlsServer {
    server: Server,
    dir: PathBuf,
}

impl TlsServer {
    fn start(driver: &str, pki: &Pki, args: &[&str]) -> TlsServer {
        let dir = temp_dir(driver);
        pki.write(&dir);
        let cert = dir.join("cert.pem").display().to_string();
        let key = dir.join("key.pem").display().to_string();
        let mut all = vec!["--tls-cert", &cert, "--tls-key", &key];
        all.extend_from_slice(args);
        TlsServer { server: Server::with_admin(driver, &all), dir }
    }

    fn metric(&self, sample: &str) -> u64 {
        metric(&scrape(&self.server.metrics()), sample)
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A client configuration trusting `ca` alone, offering `alpn`.
fn client_config(ca: &CertificateDer<'static>, alpn: &[&[u8]]) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots.add(ca.clone()).expect("add CA");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// One TLS client connection with its bytes read into one buffer against deadlines.
struct Tls {
    stream: StreamOwned<ClientConnection, TcpStream>,
    buf: Vec<u8>,
    closed: bool,
}

impl Tls {
    /// Connects and finishes the handshake; `Err` carries the handshake's failure.
    fn try_connect(server: &Server, config: Arc<ClientConfig>) -> Result<Tls, std::io::Error> {
        let tcp = server.connect();
        let name = ServerName::try_from("localhost").expect("name");
        let session = ClientConnection::new(config, name).expect("client session");
        let mut stream = StreamOwned::new(session, tcp);
        while stream.conn.is_handshaking() {
            stream.conn.complete_io(&mut stream.sock)?;
        }
        Ok(Tls { stream, buf: Vec::new(), closed: false })
    }

    fn connect(server: &Server, pki: &Pki) -> Tls {
        Tls::try_connect(server, client_config(&pki.ca, &[b"http/1.1"])).expect("TLS handshake")
    }

    /// The certificate the server presented.
    fn server_cert(&self) -> CertificateDer<'static> {
        self.stream.conn.peer_certificates().expect("server certificate")[0].clone()
    }

    fn send(&mut self, raw: &[u8]) {
        self.stream.write_all(raw).expect("TLS write");
        self.stream.flush().expect("TLS flush");
    }

    /// Reads until `done(&buf)`; false when `bound` passed or the server closed first.
    fn read_until(&mut self, bound: Duration, done: impl Fn(&[u8]) -> bool) -> bool {
        let deadline = Instant::now() + bound;
        let mut tmp = [0u8; 16384];
        while !done(&self.buf) {
            let left = deadline.saturating_duration_since(Instant::now());
            if self.closed || left.is_zero() {
                return false;
            }
            self.stream.sock.set_read_timeout(Some(left)).expect("timeout");
            match read_retrying(&mut self.stream, &mut tmp) {
                Ok(0) => self.closed = true,
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => self.closed = true,
            }
        }
        true
    }

    /// The next whole response.
    fn response(&mut self, ctx: &str) -> Response {
        let got = self.read_until(PROMPT, |b| parse_next(b).is_some());
        assert!(got, "{ctx}: no whole response: {:?}", String::from_utf8_lossy(&self.buf));
        let (resp, used) = parse_next(&self.buf).expect("complete");
        self.buf.drain(..used);
        resp
    }

    /// Sends `raw` and reads its whole response.
    fn exchange(&mut self, raw: &[u8], ctx: &str) -> Response {
        self.send(raw);
        self.response(ctx)
    }

    /// The SSE events of the (chunked) response being read, once `k` message events arrived.
    fn events_until(&mut self, k: usize, ctx: &str) -> Vec<Event> {
        let enough = |b: &[u8]| messages(&parse_events(&dechunk(b))).len() >= k;
        assert!(self.read_until(PROMPT, enough), "{ctx}: {:?}", String::from_utf8_lossy(&self.buf));
        parse_events(&dechunk(&self.buf))
    }
}

/// The body bytes of the whole chunks of a chunked response read so far (its head skipped).
fn dechunk(bytes: &[u8]) -> Vec<u8> {
    let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else { return Vec::new() };
    let mut at = end + 4;
    let mut body = Vec::new();
    loop {
        let rest = &bytes[at..];
        let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") else { return body };
        let text = String::from_utf8_lossy(&rest[..line_end]).into_owned();
        let Ok(size) = usize::from_str_radix(text.trim(), 16) else { return body };
        if size == 0 || rest.len() < line_end + 2 + size {
            return body;
        }
        body.extend_from_slice(&rest[line_end + 2..line_end + 2 + size]);
        at += line_end + 2 + size + 2;
        if at > bytes.len() {
            return body;
        }
    }
}

/// A POST of `body` with the MCP headers plus `extra`.
fn post_raw(server: &Server, extra: &[(&str, &str)], body: &str) -> Vec<u8> {
    let mut headers: Vec<(&str, &str)> = POST_HEADERS.to_vec();
    headers.extend_from_slice(extra);
    request("POST", &server.path, &server.host(), &headers, Some(body))
}

/// initialize + notifications/initialized on `tls`; the session id.
fn open_session_on(tls: &mut Tls, server: &Server, ctx: &str) -> String {
    let r = tls.exchange(&post_raw(server, &[], INIT), ctx);
    assert_eq!(r.status, 200, "{ctx}: {}", r.text());
    let sid = r.header("Mcp-Session-Id").expect("session id").to_owned();
    let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let r = tls.exchange(&post_raw(server, &[("Mcp-Session-Id", &sid)], note), ctx);
    assert_eq!(r.status, 202, "{ctx}: {}", r.text());
    sid
}

/// The text of the one result message of a tools/call answer (JSON or SSE).
fn result_text(r: &Response, ctx: &str) -> String {
    assert_eq!(r.status, 200, "{ctx}: {}", r.text());
    let message = if r.header("Content-Type") == Some("text/event-stream") {
        messages(&r.events()).last().expect("a message").json()
    } else {
        r.json()
    };
    let text = message["result"]["content"][0]["text"].as_str();
    text.unwrap_or_else(|| panic!("{ctx}: {message}")).to_owned()
}

/// A 2026-07-28 `tools/call` request.
fn modern_call(server: &Server, id: u64, tool: &str, arguments: Value, progress: bool) -> Vec<u8> {
    let mut meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": { "name": "tls-test", "version": "1" },
    });
    if progress {
        meta["progressToken"] = json!(id);
    }
    let params = json!({ "name": tool, "arguments": arguments, "_meta": meta });
    let body = json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params });
    let extra =
        [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"), ("Mcp-Name", tool)];
    post_raw(server, &extra, &body.to_string())
}

/// Goal: both eras over TLS, as over plain TCP: a legacy session's initialize, calls on one
/// keep-alive connection, an SSE stream cut after 3 of 10 progress events and resumed with
/// `GET` + `Last-Event-ID` on a new TLS connection (exactly the rest, once); a 2026-07-28 echo
/// and a streamed call. ALPN says `http/1.1`; the handshakes are counted.
#[test]
fn both_eras_and_a_resume_over_tls() {
    let pki = Pki::new("eras");
    for driver in DRIVERS {
        let tls_server = TlsServer::start(driver, &pki, &["--threads", "2"]);
        let server = &tls_server.server;
        let ctx = format!("{driver}: legacy");
        let mut tls = Tls::connect(server, &pki);
        assert_eq!(tls.stream.conn.alpn_protocol(), Some(&b"http/1.1"[..]), "{ctx}");
        let sid = open_session_on(&mut tls, server, &ctx);
        for id in 1..=3 {
            let body = call(id, "echo", &format!(r#"{{"text":"tide {id}"}}"#), false);
            let r = tls.exchange(&post_raw(server, &[("Mcp-Session-Id", &sid)], &body), &ctx);
            assert_eq!(result_text(&r, &ctx), format!("tide {id}"), "{ctx}");
        }

        let ctx = format!("{driver}: cut and resume");
        let body = call(10, "slow_counter", r#"{"steps":10,"delay_ms":30}"#, true);
        tls.send(&post_raw(server, &[("Mcp-Session-Id", &sid)], &body));
        let held = tls.events_until(3, &ctx);
        let last = messages(&held)[2].id.clone().expect("event id");
        drop(tls);
        let mut again = Tls::connect(server, &pki);
        let get = request(
            "GET",
            &server.path,
            &server.host(),
            &[("Accept", "text/event-stream"), ("Mcp-Session-Id", &sid), ("Last-Event-ID", &last)],
            None,
        );
        again.send(&get);
        assert!(
            again.read_until(PROMPT, |b| parse_next(b).is_some()),
            "{ctx}: the resumed stream ends: {:?}",
            String::from_utf8_lossy(&again.buf)
        );
        let (resumed, _) = parse_next(&again.buf).expect("whole");
        let text = assert_rest(&resumed.events(), &last, 4, 10, 10, &ctx);
        assert!(!text.is_empty(), "{ctx}");

        let ctx = format!("{driver}: 2026-07-28");
        let mut modern = Tls::connect(server, &pki);
        let r = modern.exchange(&modern_call(server, 1, "echo", json!({"text": "m"}), false), &ctx);
        assert_eq!(result_text(&r, &ctx), "m", "{ctx}: {}", r.text());
        let req = modern_call(server, 2, "slow_counter", json!({"steps": 3}), true);
        let r = modern.exchange(&req, &ctx);
        assert_eq!(r.header("Content-Type"), Some("text/event-stream"), "{ctx}");
        assert_eq!(messages(&r.events()).len(), 4, "{ctx}: 3 progress and the result");

        assert!(tls_server.metric("tidemark_tls_handshakes_total") >= 3, "{driver}");
        assert_eq!(tls_server.metric("tidemark_tls_handshakes_failed_total"), 0, "{driver}");
    }
}

/// Goal: the drain on a TLS listener: after SIGTERM a running call's TLS stream is ended at
/// `--drain-secs` with the chunked body's last chunk and then `close_notify` (a clean end, not a
/// cut), and the process exits 0. Method: `slow_counter` of 50 steps of 100 ms, 2 progress
/// events read, SIGTERM with `--drain-secs 1`, the rest read to the TLS end.
#[test]
fn the_drain_ends_a_tls_stream_cleanly() {
    let pki = Pki::new("drain");
    for driver in DRIVERS {
        let mut tls_server = TlsServer::start(driver, &pki, &["--drain-secs", "1"]);
        let ctx = format!("{driver}: drain");
        let server = &tls_server.server;
        let mut tls = Tls::connect(server, &pki);
        let sid = open_session_on(&mut tls, server, &ctx);
        let body = call(3, "slow_counter", r#"{"steps":50,"delay_ms":100}"#, true);
        tls.send(&post_raw(server, &[("Mcp-Session-Id", &sid)], &body));
        tls.events_until(2, &ctx);
        server.signal("TERM");
        let ended = tls.read_until(Duration::from_secs(10), |b| parse_next(b).is_some());
        assert!(ended, "{ctx}: the stream did not end: {:?}", String::from_utf8_lossy(&tls.buf));
        let mut rest = Vec::new();
        let end = tls.stream.read_to_end(&mut rest);
        assert!(end.is_ok(), "{ctx}: not a clean TLS end: {end:?}");
        let status = tls_server.server.exit_within(Duration::from_secs(10));
        assert!(status.is_some_and(|s| s.success()), "{ctx}: exit {status:?}");
    }
}

/// Goal: a request and an answer much larger than one TLS record (16 KiB) and than one
/// encrypted write (64 KiB of plaintext) arrive whole and in order, twice on one connection.
/// Method: echo of a 1 MiB text (a body of many records; an answer of many encrypted writes).
#[test]
fn large_messages_cross_many_records() {
    let pki = Pki::new("large");
    for driver in DRIVERS {
        let tls_server = TlsServer::start(driver, &pki, &[]);
        let server = &tls_server.server;
        let ctx = format!("{driver}: 1 MiB echo");
        let mut tls = Tls::connect(server, &pki);
        let sid = open_session_on(&mut tls, server, &ctx);
        for round in 0..2u8 {
            let text: String = (0..1 << 20)
                .map(|i| char::from(b'a' + ((i + round as usize) % 26) as u8))
                .collect();
            let body = call(7, "echo", &json!({ "text": text }).to_string(), false);
            let r = tls.exchange(&post_raw(server, &[("Mcp-Session-Id", &sid)], &body), &ctx);
            assert!(result_text(&r, &ctx) == text, "{ctx}: round {round}: the echo differs");
        }
    }
}

/// Goal: one TLS keep-alive connection carries requests for sessions living on both cores of
/// `--threads 2`: each request for the other core's session moves the connection (socket and
/// TLS session) there, and it goes on there over the same TLS session. Method: 16 sessions
/// opened on fresh connections (SO_REUSEPORT spreads them; all on one core has odds 2^-16),
/// then two rounds of calls for every session on one connection; every answer right, and
/// `tidemark_handoffs_total` grew.
#[test]
fn a_keep_alive_tls_connection_moves_between_cores() {
    let pki = Pki::new("handoff");
    for driver in DRIVERS {
        let tls_server = TlsServer::start(driver, &pki, &["--threads", "2"]);
        let server = &tls_server.server;
        let ctx = format!("{driver}: hand-off");
        let sessions: Vec<String> = (0..16)
            .map(|_| open_session_on(&mut Tls::connect(server, &pki), server, &ctx))
            .collect();
        let before = tls_server.metric("tidemark_handoffs_total");
        let mut tls = Tls::connect(server, &pki);
        for round in 0..2 {
            for (n, sid) in sessions.iter().enumerate() {
                let text = format!("r{round} s{n}");
                let body = call(n as u64 + 1, "echo", &format!(r#"{{"text":"{text}"}}"#), false);
                let r = tls.exchange(&post_raw(server, &[("Mcp-Session-Id", sid)], &body), &ctx);
                assert_eq!(result_text(&r, &ctx), text, "{ctx}");
            }
        }
        let moved = tls_server.metric("tidemark_handoffs_total") - before;
        assert!(moved >= 1, "{ctx}: the connection never moved");
        assert_eq!(tls_server.metric("tidemark_tls_handshakes_failed_total"), 0, "{ctx}");
    }
}

/// Goal: a handshake must end within `--header-timeout-ms`; peers that say nothing, drip a
/// ClientHello or send garbage are closed, and while many of them are open a real client is
/// served at once (no core is held). Plaintext HTTP sent to the TLS port is closed (after an
/// alert), never answered in plaintext. Method: 16 silent and 16 dripping sockets, a TLS
/// client served meanwhile, then every stalled socket seen closed by the server, and the
/// failure counter.
#[test]
fn slow_silent_and_plaintext_peers_are_closed() {
    let pki = Pki::new("slow");
    for driver in DRIVERS {
        let tls_server = TlsServer::start(driver, &pki, &["--header-timeout-ms", "500"]);
        let server = &tls_server.server;
        let ctx = format!("{driver}: stalled handshakes");
        let silent: Vec<TcpStream> = (0..16).map(|_| server.connect()).collect();
        let mut dripping: Vec<TcpStream> = (0..16).map(|_| server.connect()).collect();
        for s in &mut dripping {
            // A handshake record's header announcing 512 bytes, and three of them.
            s.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01]).expect("drip");
        }
        let started = Instant::now();
        let mut tls = Tls::connect(server, &pki);
        let sid = open_session_on(&mut tls, server, &ctx);
        assert!(!sid.is_empty(), "{ctx}");
        assert!(started.elapsed() < Duration::from_secs(2), "{ctx}: {:?}", started.elapsed());
        for mut s in silent.into_iter().chain(dripping) {
            let (bytes, ending) = read_until_closed(&mut s, PROMPT);
            assert!(!matches!(ending, Ending::StillOpen), "{ctx}: still open after {bytes:?}");
        }

        let ctx = format!("{driver}: plaintext HTTP to the TLS port");
        let mut plain = server.connect();
        send(&mut plain, &post_raw(server, &[], INIT));
        let (bytes, ending) = read_until_closed(&mut plain, PROMPT);
        assert!(!matches!(ending, Ending::StillOpen), "{ctx}: still open");
        assert!(!bytes.starts_with(b"HTTP/"), "{ctx}: answered in plaintext: {bytes:?}");
        // The server goes on.
        Tls::connect(server, &pki).exchange(&post_raw(server, &[], INIT), &ctx);
        let failed = tls_server.metric("tidemark_tls_handshakes_failed_total");
        assert!(failed >= 33, "{ctx}: {failed} failed handshakes counted");
    }
}

/// Goal: a TLS connection the server closes (here after `Connection: close`) ends with the
/// TLS `close_notify`, so the client sees a clean end (rustls reports a bare TCP close as an
/// unexpected EOF); and over `--max-connections-per-core` a new TLS connection is closed at
/// the accept without an answer, and served again once a slot is free.
#[test]
fn closes_are_clean_and_the_connection_limit_closes_at_accept() {
    let pki = Pki::new("close");
    for driver in DRIVERS {
        let args = ["--threads", "1", "--max-connections-per-core", "1"];
        let tls_server = TlsServer::start(driver, &pki, &args);
        let server = &tls_server.server;
        let ctx = format!("{driver}: clean close");
        let mut tls = Tls::connect(server, &pki);
        let r = tls.exchange(&post_raw(server, &[("Connection", "close")], INIT), &ctx);
        assert_eq!(r.status, 200, "{ctx}: {}", r.text());
        tls.stream.sock.set_read_timeout(Some(PROMPT)).expect("timeout");
        let mut rest = Vec::new();
        let end = tls.stream.read_to_end(&mut rest);
        assert!(end.is_ok(), "{ctx}: not a clean TLS end: {end:?}");

        let ctx = format!("{driver}: connection limit");
        let holder = poll_until(PROMPT, || tls_server.metric("tidemark_connections_active") == 0);
        assert!(holder, "{ctx}: the closed connection still counted");
        let mut first = Tls::connect(server, &pki);
        first.exchange(&post_raw(server, &[], INIT), &ctx);
        let mut over = server.connect();
        let (bytes, ending) = read_until_closed(&mut over, PROMPT);
        assert!(!matches!(ending, Ending::StillOpen), "{ctx}: the one over the limit stayed open");
        assert!(bytes.is_empty(), "{ctx}: answered: {bytes:?}");
        drop(first);
        let served = poll_until(PROMPT, || {
            Tls::try_connect(server, client_config(&pki.ca, &[b"http/1.1"])).is_ok_and(|mut t| {
                t.send(&post_raw(server, &[], INIT));
                t.read_until(PROMPT, |b| parse_next(b).is_some())
            })
        });
        assert!(served, "{ctx}: a freed slot is not served");
    }
}

/// Goal: ALPN is `http/1.1` only: a client offering only `h2` gets the
/// `no_application_protocol` alert; one offering no ALPN is served HTTP/1.1; a TLS 1.2-only
/// client is served over TLS 1.2, and a default one gets TLS 1.3.
#[test]
fn alpn_is_http11_only_and_both_versions_are_served() {
    let pki = Pki::new("alpn");
    for driver in DRIVERS {
        let tls_server = TlsServer::start(driver, &pki, &[]);
        let server = &tls_server.server;
        let refused = Tls::try_connect(server, client_config(&pki.ca, &[b"h2"]));
        let why = refused.err().unwrap_or_else(|| panic!("{driver}: h2-only accepted"));
        let text = format!("{why:?}");
        assert!(text.contains("NoApplicationProtocol"), "{driver}: {text}");
        let mut none = Tls::try_connect(server, client_config(&pki.ca, &[])).expect("no ALPN");
        assert_eq!(none.stream.conn.alpn_protocol(), None, "{driver}");
        let r = none.exchange(&post_raw(server, &[], INIT), driver);
        assert_eq!(r.status, 200, "{driver}: {}", r.text());
        let version = none.stream.conn.protocol_version();
        assert_eq!(version, Some(rustls::ProtocolVersion::TLSv1_3), "{driver}");

        let mut roots = RootCertStore::empty();
        roots.add(pki.ca.clone()).expect("add CA");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls12 = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS12])
            .expect("TLS 1.2")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut old = Tls::try_connect(server, Arc::new(tls12)).expect("TLS 1.2 handshake");
        let version = old.stream.conn.protocol_version();
        assert_eq!(version, Some(rustls::ProtocolVersion::TLSv1_2), "{driver}");
        let r = old.exchange(&post_raw(server, &[], INIT), driver);
        assert_eq!(r.status, 200, "{driver}: {}", r.text());
    }
}

/// Goal: SIGHUP reloads the certificate: a connection opened after it is served the new one,
/// a connection opened before goes on (same session, same TLS session); files that do not
/// load leave the last good certificate in place. Method: certificate A, a session on a
/// keep-alive connection, files replaced by certificate B (another CA) and SIGHUP: new
/// connections trusting B's CA get B (polled until the signal thread did it), the old
/// connection's next call is answered; then a broken certificate file and SIGHUP: new
/// connections still get B.
#[test]
fn sighup_serves_the_new_certificate_to_new_connections() {
    let (a, b) = (Pki::new("a"), Pki::new("b"));
    for driver in DRIVERS {
        let tls_server = TlsServer::start(driver, &a, &[]);
        let server = &tls_server.server;
        let ctx = format!("{driver}: reload");
        let mut old = Tls::connect(server, &a);
        assert_eq!(old.server_cert(), a.leaf, "{ctx}");
        let sid = open_session_on(&mut old, server, &ctx);

        b.write(&tls_server.dir);
        server.signal("HUP");
        let mut fresh = None;
        let reloaded = poll_until(PROMPT, || {
            fresh = Tls::try_connect(server, client_config(&b.ca, &[b"http/1.1"])).ok();
            fresh.is_some()
        });
        assert!(reloaded, "{ctx}: certificate B never served");
        let mut fresh = fresh.expect("connected");
        assert_eq!(fresh.server_cert(), b.leaf, "{ctx}");
        let r = fresh.exchange(&post_raw(server, &[], INIT), &ctx);
        assert_eq!(r.status, 200, "{ctx}: {}", r.text());

        let body = call(5, "echo", r#"{"text":"still here"}"#, false);
        let r = old.exchange(&post_raw(server, &[("Mcp-Session-Id", &sid)], &body), &ctx);
        assert_eq!(result_text(&r, &ctx), "still here", "{ctx}: the old connection goes on");
        assert_eq!(old.server_cert(), a.leaf, "{ctx}");

        std::fs::write(tls_server.dir.join("cert.pem"), "not a certificate\n").expect("write");
        server.signal("HUP");
        // The signal thread has handled this HUP once a SIGHUP sent after it is handled too;
        // nothing observable follows a failed reload but the log, so the check is that B stays.
        for _ in 0..5 {
            let tls = Tls::try_connect(server, client_config(&b.ca, &[b"http/1.1"]));
            let tls = tls.unwrap_or_else(|e| panic!("{ctx}: after a bad reload: {e}"));
            assert_eq!(tls.server_cert(), b.leaf, "{ctx}: the last good certificate stays");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Goal: start-up refuses `--tls-cert` without `--tls-key` (and the reverse), a missing file,
/// a file with no certificate, and a key that is not the certificate's, each saying which.
#[test]
fn startup_refuses_half_or_broken_tls() {
    let (a, b) = (Pki::new("start-a"), Pki::new("start-b"));
    let dir = temp_dir("startup");
    a.write(&dir);
    std::fs::write(dir.join("other-key.pem"), &b.key_pem).expect("write");
    std::fs::write(dir.join("empty.pem"), "").expect("write");
    let path = |name: &str| dir.join(name).display().to_string();
    let (cert, key) = (path("cert.pem"), path("key.pem"));
    let (empty, other_key) = (path("empty.pem"), path("other-key.pem"));
    let cases: [(Vec<&str>, &str); 5] = [
        (vec!["--tls-cert", &cert], "--tls-key"),
        (vec!["--tls-key", &key], "--tls-cert"),
        (vec!["--tls-cert", "/nonexistent/cert.pem", "--tls-key", &key], "/nonexistent/cert.pem"),
        (vec!["--tls-cert", &empty, "--tls-key", &key], "no CERTIFICATE"),
        (vec!["--tls-cert", &cert, "--tls-key", &other_key], "--tls-key"),
    ];
    for (args, says) in cases {
        let all: Vec<&str> = ["--listen", "127.0.0.1:0"].iter().chain(&args).copied().collect();
        let (status, err) = run_to_exit(&all);
        assert!(matches!(status, Some(s) if s != 0), "{args:?}: exit {status:?}: {err}");
        assert!(err.contains(says), "{args:?}: stderr does not say {says:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
