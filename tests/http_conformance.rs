//! Goal: every HTTP status CONTRACT §1 promises on the MCP endpoint, at the exact request that
//! triggers it, with the JSON-RPC error body each refusal must carry; plus keep-alive and
//! pipelining. Method: the real binary on 127.0.0.1:0, one server per io driver
//! (`support::DRIVERS`), raw HTTP/1.1 bytes over blocking `TcpStream`s, tables of cases. Limits
//! are tested at N (accepted) and N+1 (refused). Each table runs on `--threads 2`, so a request
//! on a fresh connection lands on the non-owner core about half the time and is handed over.
mod support;

use std::time::Duration;

use support::*;

/// `--max-body-bytes` of the servers here.
const BODY_MAX: usize = 512;
/// `--max-header-bytes` of the servers here.
const HEAD_MAX: usize = 1024;
/// `--max-headers` of the servers here.
const HEADERS_MAX: usize = 12;
/// Extra Host and Origin the servers here allow by flag.
const ALLOWED_HOST: &str = "mcp.example:8080";
const ALLOWED_ORIGIN: &str = "https://app.example";

fn start(driver: &str) -> Server {
    Server::on(
        driver,
        &[
            "--threads",
            "2",
            "--max-body-bytes",
            &BODY_MAX.to_string(),
            "--max-header-bytes",
            &HEAD_MAX.to_string(),
            "--max-headers",
            &HEADERS_MAX.to_string(),
            "--allowed-host",
            ALLOWED_HOST,
            "--allowed-origin",
            ALLOWED_ORIGIN,
        ],
    )
}

fn ping(id: u64) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#)
}

/// Asserts a refusal: the status, a JSON body that is a JSON-RPC error (no `result`), and the
/// exact code when the contract names one. `id` is null when the request's id was not read.
fn assert_rpc_error(r: &Response, status: u16, code: Option<i64>, what: &str) {
    assert_eq!(r.status, status, "{what}: status; body {}", r.text());
    assert_eq!(r.header("Content-Type"), Some("application/json"), "{what}: content type");
    let v = r.json();
    assert_eq!(v["jsonrpc"], "2.0", "{what}: {v}");
    assert!(v.get("result").is_none(), "{what}: an error has no result: {v}");
    assert!(v.get("id").is_some(), "{what}: a JSON-RPC error carries id (null if unknown): {v}");
    let got = v["error"]["code"].as_i64().unwrap_or_else(|| panic!("{what}: error.code: {v}"));
    assert!(v["error"]["message"].is_string(), "{what}: error.message: {v}");
    if let Some(code) = code {
        assert_eq!(got, code, "{what}: JSON-RPC code: {v}");
    }
}

/// A 2xx answer to `initialize`: a session was created.
fn assert_initialized(r: &Response, what: &str) {
    assert_eq!(r.status, 200, "{what}: {}", r.text());
    assert!(r.header("Mcp-Session-Id").is_some(), "{what}: session header");
    assert_eq!(r.json()["result"]["protocolVersion"], "2025-11-25", "{what}");
}

fn session_headers(sid: &str) -> Vec<(&str, &str)> {
    let mut h = POST_HEADERS.to_vec();
    h.push(("Mcp-Session-Id", sid));
    h
}

#[test]
fn host_and_origin_are_checked_against_loopback_and_the_allow_lists() {
    for driver in DRIVERS {
        let server = start(driver);
        let port = server.addr.port();
        // (case, Host, Origin, allowed)
        let cases: Vec<(&str, String, Option<String>, bool)> = vec![
            ("bound address", server.host(), None, true),
            ("localhost:PORT", format!("localhost:{port}"), None, true),
            ("LOCALHOST:PORT", format!("LOCALHOST:{port}"), None, true),
            ("localhost", "localhost".into(), None, true),
            ("127.0.0.1:PORT", format!("127.0.0.1:{port}"), None, true),
            ("[::1]:PORT", format!("[::1]:{port}"), None, true),
            ("[::1]", "[::1]".into(), None, true),
            ("allowed host", ALLOWED_HOST.into(), None, true),
            ("foreign host", "evil.example".into(), None, false),
            ("foreign host:PORT", format!("evil.example:{port}"), None, false),
            ("loopback-looking name", format!("127.0.0.1.evil.example:{port}"), None, false),
            ("localhost subdomain", format!("localhost.evil.example:{port}"), None, false),
            ("any address", format!("0.0.0.0:{port}"), None, false),
            ("LAN address", format!("192.168.1.10:{port}"), None, false),
            ("allowed host without its port", "mcp.example".into(), None, false),
            ("unclosed bracket", format!("[::1:{port}"), None, false),
            ("origin localhost", server.host(), Some(format!("http://localhost:{port}")), true),
            ("origin 127.0.0.1", server.host(), Some(format!("http://127.0.0.1:{port}")), true),
            ("origin [::1]", server.host(), Some(format!("http://[::1]:{port}")), true),
            ("origin https localhost", server.host(), Some("https://localhost".into()), true),
            ("allowed origin", server.host(), Some(ALLOWED_ORIGIN.into()), true),
            ("allowed origin and host", ALLOWED_HOST.into(), Some(ALLOWED_ORIGIN.into()), true),
            ("foreign origin", server.host(), Some("http://evil.example".into()), false),
            ("foreign https origin", server.host(), Some("https://evil.example".into()), false),
            ("origin with port", server.host(), Some(format!("http://evil.example:{port}")), false),
            ("allowed origin prefix", server.host(), Some(format!("{ALLOWED_ORIGIN}.evil")), false),
            (
                "origin subdomain",
                server.host(),
                Some("http://localhost.evil.example".into()),
                false,
            ),
            ("opaque origin", server.host(), Some("null".into()), false),
            ("origin without scheme", server.host(), Some(format!("localhost:{port}")), false),
            (
                "good origin, foreign host",
                "evil.example".into(),
                Some(ALLOWED_ORIGIN.into()),
                false,
            ),
            ("good host, foreign origin", ALLOWED_HOST.into(), Some("http://evil".into()), false),
        ];
        for (name, host, origin, allowed) in cases {
            let what = format!("{driver}: {name} (Host {host:?}, Origin {origin:?})");
            let mut h = POST_HEADERS.to_vec();
            if let Some(o) = &origin {
                h.push(("Origin", o));
            }
            let r = exchange(&server, &request("POST", &server.path, &host, &h, Some(INIT)));
            if allowed {
                assert_initialized(&r, &what);
            } else {
                assert_rpc_error(&r, 403, None, &what);
                assert!(r.json()["id"].is_null(), "{what}: 403 carries no id");
                assert!(r.header("Mcp-Session-Id").is_none(), "{what}: no session on 403");
            }
        }
        // The check comes before any other: GET and DELETE from a foreign origin are refused
        // too, even with a valid session.
        let sid = open_session(&server);
        for method in ["GET", "DELETE"] {
            let h = [
                ("Accept", "text/event-stream"),
                ("Mcp-Session-Id", sid.as_str()),
                ("Origin", "http://evil.example"),
            ];
            let r = exchange(&server, &request(method, &server.path, &server.host(), &h, None));
            assert_rpc_error(&r, 403, None, &format!("{driver}: {method} foreign origin"));
            let r =
                exchange(&server, &request(method, &server.path, "evil.example", &h[..2], None));
            assert_rpc_error(&r, 403, None, &format!("{driver}: {method} foreign host"));
        }
        let r = post(&server, &[("Mcp-Session-Id", &sid)], &ping(1));
        assert_eq!(r.status, 200, "{driver}: the refused DELETE did not end the session");
    }
}

#[test]
fn post_content_type_and_accept_are_checked() {
    let json = "application/json";
    let both = "application/json, text/event-stream";
    // (case, Content-Type, Accept, expected status)
    let cases: [(&str, Option<&str>, Option<&str>, u16); 14] = [
        ("standard", Some(json), Some(both), 200),
        ("charset parameter", Some("application/json; charset=utf-8"), Some(both), 200),
        ("media type case", Some("Application/JSON"), Some(both), 200),
        ("Content-Type missing", None, Some(both), 415),
        ("text/plain", Some("text/plain"), Some(both), 415),
        ("form", Some("application/x-www-form-urlencoded"), Some(both), 415),
        ("json-seq", Some("application/json-seq"), Some(both), 415),
        (
            "Accept reversed with q",
            Some(json),
            Some("text/event-stream, application/json;q=0.9"),
            200,
        ),
        ("Accept missing", Some(json), None, 406),
        ("Accept json only", Some(json), Some("application/json"), 406),
        ("Accept sse only", Some(json), Some("text/event-stream"), 406),
        ("Accept html", Some(json), Some("text/html"), 406),
        ("Accept json-seq", Some(json), Some("application/json-seq, text/event-stream"), 406),
        ("both wrong: 415 first", Some("text/plain"), Some("text/html"), 415),
    ];
    for driver in DRIVERS {
        let server = start(driver);
        for (name, ct, accept, want) in cases {
            let what = format!("{driver}: {name}");
            let mut h = Vec::new();
            if let Some(ct) = ct {
                h.push(("Content-Type", ct));
            }
            if let Some(a) = accept {
                h.push(("Accept", a));
            }
            let r =
                exchange(&server, &request("POST", &server.path, &server.host(), &h, Some(INIT)));
            if want == 200 {
                assert_initialized(&r, &what);
            } else {
                assert_rpc_error(&r, want, None, &what);
                assert!(r.header("Mcp-Session-Id").is_none(), "{what}: refused initialize");
            }
        }
    }
}

#[test]
fn get_needs_accept_text_event_stream() {
    // (case, Accept, expected status)
    let cases: [(&str, Option<&str>, u16); 6] = [
        ("Accept missing", None, 406),
        ("Accept json", Some("application/json"), 406),
        ("Accept html", Some("text/html"), 406),
        ("Accept sse", Some("text/event-stream"), 200),
        ("Accept both", Some("application/json, text/event-stream"), 200),
        ("Accept with parameter", Some("text/event-stream;q=1"), 200),
    ];
    for driver in DRIVERS {
        let server = start(driver);
        let sid = open_session(&server);
        for (name, accept, want) in cases {
            let what = format!("{driver}: GET {name}");
            let mut h = vec![("Mcp-Session-Id", sid.as_str())];
            if let Some(a) = accept {
                h.push(("Accept", a));
            }
            let raw = request("GET", &server.path, &server.host(), &h, None);
            if want == 200 {
                let mut s = SseStream::open(&server, &raw);
                assert_eq!(s.status, 200, "{what}");
                assert_eq!(s.header("Content-Type"), Some("text/event-stream"), "{what}");
                assert!(s.next_event().is_some_and(|e| e.is_priming()), "{what}: priming event");
                s.cut();
            } else {
                assert_rpc_error(&exchange(&server, &raw), want, None, &what);
            }
        }
    }
}

#[test]
fn malformed_bodies_get_400_with_the_json_rpc_code() {
    let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
    // (case, body, JSON-RPC code)
    let cases: Vec<(&str, Vec<u8>, i64)> = vec![
        ("truncated JSON", br#"{"jsonrpc":"2.0","id":1,"#.to_vec(), -32700),
        ("not JSON", b"hello".to_vec(), -32700),
        ("empty body", b"".to_vec(), -32700),
        ("trailing garbage", br#"{"jsonrpc":"2.0","id":1,"method":"ping"} x"#.to_vec(), -32700),
        ("single quotes", b"{'jsonrpc':'2.0','id':1,'method':'ping'}".to_vec(), -32700),
        ("nested past the depth limit", deep.into_bytes(), -32700),
        (
            "invalid UTF-8 in a string",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"p\xffng\"}".to_vec(),
            -32700,
        ),
        (
            "lone continuation byte",
            b"{\"jsonrpc\":\"2.0\",\"id\":\"\x80\",\"method\":\"ping\"}".to_vec(),
            -32700,
        ),
        (
            "overlong NUL",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"a\":\"\xc0\x80\"}}"
                .to_vec(),
            -32700,
        ),
        (
            "UTF-16 surrogate as UTF-8",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xed\xa0\x80\"}".to_vec(),
            -32700,
        ),
        ("empty object", b"{}".to_vec(), -32600),
        ("number", b"42".to_vec(), -32600),
        ("string", br#""ping""#.to_vec(), -32600),
        ("null", b"null".to_vec(), -32600),
        ("empty array", b"[]".to_vec(), -32600),
        ("no jsonrpc member", br#"{"id":1,"method":"ping"}"#.to_vec(), -32600),
        ("jsonrpc 1.0", br#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#.to_vec(), -32600),
        ("jsonrpc as number", br#"{"jsonrpc":2.0,"id":1,"method":"ping"}"#.to_vec(), -32600),
        ("method not a string", br#"{"jsonrpc":"2.0","id":1,"method":5}"#.to_vec(), -32600),
        ("null id", br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#.to_vec(), -32600),
        ("object id", br#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#.to_vec(), -32600),
        (
            "params a string",
            br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":"x"}"#.to_vec(),
            -32600,
        ),
        ("neither method nor result", br#"{"jsonrpc":"2.0","id":1}"#.to_vec(), -32600),
        (
            "result and error",
            br#"{"jsonrpc":"2.0","id":1,"result":{},"error":{}}"#.to_vec(),
            -32600,
        ),
    ];
    for driver in DRIVERS {
        let server = start(driver);
        let sid = open_session(&server);
        let h = session_headers(&sid);
        for (name, body, code) in &cases {
            let what = format!("{driver}: {name}");
            let raw = request_bytes("POST", &server.path, &server.host(), &h, body);
            assert_rpc_error(&exchange(&server, &raw), 400, Some(*code), &what);
        }
        // Without a session the body is judged the same way (it is read before routing).
        let raw = request_bytes("POST", &server.path, &server.host(), &POST_HEADERS, b"{oops");
        assert_rpc_error(&exchange(&server, &raw), 400, Some(-32700), &format!("{driver}: no sid"));
        // The session survives all of it.
        let r = post(&server, &[("Mcp-Session-Id", &sid)], &ping(9));
        assert_eq!(r.json()["result"], serde_json::json!({}), "{driver}");
    }
}

#[test]
fn batches_only_on_a_2025_03_26_session() {
    let batch = format!("[{},{}]", ping(1), ping(2));
    for driver in DRIVERS {
        let server = start(driver);
        for version in ["2025-11-25", "2025-06-18"] {
            let sid = open_session_at(&server, version);
            let r = post(&server, &[("Mcp-Session-Id", &sid)], &batch);
            assert_rpc_error(&r, 400, Some(-32600), &format!("{driver}: batch on {version}"));
            let r = post(&server, &[("Mcp-Session-Id", &sid)], &ping(3));
            assert_eq!(r.status, 200, "{driver}: {version} session still usable");
        }
        let sid = open_session_at(&server, "2025-03-26");
        let r = post(&server, &[("Mcp-Session-Id", &sid)], &batch);
        assert_eq!(r.status, 200, "{driver}: batch on 2025-03-26: {}", r.text());
        assert_eq!(r.header("Content-Type"), Some("application/json"), "{driver}");
        assert_eq!(
            r.json(),
            serde_json::json!([
                {"jsonrpc": "2.0", "id": 1, "result": {}},
                {"jsonrpc": "2.0", "id": 2, "result": {}}
            ]),
            "{driver}: one answer per request, in order"
        );
        // A batch of notifications only is accepted with 202 and no body (2025-03-26 §POST).
        let notes = r#"[{"jsonrpc":"2.0","method":"notifications/initialized"},
            {"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":77}}]"#;
        let r = post(&server, &[("Mcp-Session-Id", &sid)], notes);
        assert_eq!(r.status, 202, "{driver}: notification batch: {}", r.text());
        assert!(r.body.is_empty(), "{driver}: 202 has no body");
    }
}

/// initialize at `version` + notifications/initialized; returns the session id.

#[test]
fn other_methods_get_405_with_allow_and_other_paths_404() {
    for driver in DRIVERS {
        let server = start(driver);
        let sid = open_session(&server);
        let h = session_headers(&sid);
        for method in ["PUT", "PATCH", "OPTIONS", "TRACE", "CONNECT", "FOO"] {
            let what = format!("{driver}: {method}");
            let r =
                exchange(&server, &request(method, &server.path, &server.host(), &h, Some("{}")));
            assert_rpc_error(&r, 405, None, &what);
            let allow = r.header("Allow").unwrap_or_else(|| panic!("{what}: Allow header"));
            let mut listed: Vec<&str> = allow.split(',').map(str::trim).collect();
            listed.sort_unstable();
            assert_eq!(listed, ["DELETE", "GET", "POST"], "{what}: Allow: {allow}");
        }
        // (path, method) that are not the endpoint.
        for path in ["/", "/other", "/mcp/", "/mcpx", "/MCP", "/mcp/x", "//mcp"] {
            for method in ["POST", "GET", "DELETE"] {
                let what = format!("{driver}: {method} {path}");
                let body = (method == "POST").then_some(INIT);
                let r = exchange(&server, &request(method, path, &server.host(), &h, body));
                assert_rpc_error(&r, 404, None, &what);
            }
        }
        // A query string does not change the path.
        let r = exchange(&server, &request("POST", "/mcp?x=1", &server.host(), &h, Some(&ping(1))));
        assert_eq!(r.status, 200, "{driver}: query string: {}", r.text());
    }
}

/// RFC 9112 §6.3: a response to HEAD ends with its head. A body after it would be read as the
/// start of the next response on a keep-alive connection.
#[test]
fn head_gets_405_without_a_body() {
    for driver in DRIVERS {
        let server = start(driver);
        let sid = open_session(&server);
        let mut s = server.connect();
        let mut raw = request("HEAD", &server.path, &server.host(), &[], None);
        raw.extend(request(
            "POST",
            &server.path,
            &server.host(),
            &session_headers(&sid),
            Some(&ping(2)),
        ));
        send(&mut s, &raw);
        let text = read_until(&mut s, "\"id\":2", Duration::from_secs(5));
        assert!(text.starts_with("HTTP/1.1 405 "), "{driver}: {text}");
        let second = text[1..].find("HTTP/1.1 ").map(|i| i + 1);
        let head_end = text.find("\r\n\r\n").expect("head") + 4;
        assert_eq!(second, Some(head_end), "{driver}: bytes after a HEAD response head: {text}");
    }
}

/// Reads until `needle` shows up in what the server sent, or it closes, or `bound` passes.
fn read_until(s: &mut std::net::TcpStream, needle: &str, bound: Duration) -> String {
    let deadline = std::time::Instant::now() + bound;
    s.set_read_timeout(Some(Duration::from_millis(100))).expect("timeout");
    let mut all = Vec::new();
    let mut tmp = [0u8; 4096];
    while !String::from_utf8_lossy(&all).contains(needle) && std::time::Instant::now() < deadline {
        match read_retrying(s, &mut tmp) {
            Ok(0) => break,
            Ok(n) => all.extend_from_slice(&tmp[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => break,
        }
    }
    String::from_utf8_lossy(&all).into_owned()
}

#[test]
fn body_limit_at_n_and_n_plus_one() {
    for driver in DRIVERS {
        let server = start(driver);
        let sid = open_session(&server);
        let h = session_headers(&sid);
        let base = ping(5);
        let at = format!("{base}{}", " ".repeat(BODY_MAX - base.len()));
        let over = format!("{at} ");
        assert_eq!((at.len(), over.len()), (BODY_MAX, BODY_MAX + 1));

        // N bytes: answered, and the connection stays usable.
        let mut s = server.connect();
        send(&mut s, &request("POST", &server.path, &server.host(), &h, Some(&at)));
        let r = read_response(&mut s);
        assert_eq!(r.status, 200, "{driver}: body of N bytes: {}", r.text());
        assert_eq!(r.json()["id"], 5);
        send(&mut s, &request("POST", &server.path, &server.host(), &h, Some(&ping(6))));
        assert_eq!(read_response(&mut s).json()["id"], 6, "{driver}: keep-alive after N");

        // N+1 bytes, head and body in one write (what clients do): 413, then a clean close or
        // a usable connection, never a hang.
        let mut s = server.connect();
        send(&mut s, &request("POST", &server.path, &server.host(), &h, Some(&over)));
        oversize_answered_then_closed_or_usable(&server, &mut s, &h, &format!("{driver}: N+1"));

        // N+1 announced, body never sent: refused from the head alone, not after a wait.
        let mut s = server.connect();
        let raw = request("POST", &server.path, &server.host(), &h, Some(&over));
        send(&mut s, &raw[..raw.len() - over.len()]);
        oversize_answered_then_closed_or_usable(&server, &mut s, &h, &format!("{driver}: head"));

        // A huge Content-Length (more than the address space could hold is still a number).
        let mut s = server.connect();
        let mut raw = format!("POST {} HTTP/1.1\r\nHost: {}\r\n", server.path, server.host());
        for (n, v) in &h {
            raw.push_str(&format!("{n}: {v}\r\n"));
        }
        raw.push_str("Content-Length: 999999999999999999\r\n\r\n");
        send(&mut s, raw.as_bytes());
        oversize_answered_then_closed_or_usable(&server, &mut s, &h, &format!("{driver}: huge"));
    }
}

/// After a 413: the answer arrived with its JSON-RPC error; then either the server closed the
/// connection with a FIN, or it still answers a ping on it.
fn oversize_answered_then_closed_or_usable(
    server: &Server,
    s: &mut std::net::TcpStream,
    h: &[(&str, &str)],
    what: &str,
) {
    let r = read_response(s);
    assert_rpc_error(&r, 413, None, what);
    let closing = r.header("Connection").is_some_and(|c| c.eq_ignore_ascii_case("close"));
    if closing {
        let (rest, ending) = read_until_closed(s, Duration::from_secs(3));
        assert_eq!(ending, Ending::Closed, "{what}: closed cleanly after 413 (rest {rest:?})");
        assert!(
            rest.is_empty(),
            "{what}: nothing after the 413: {:?}",
            String::from_utf8_lossy(&rest)
        );
    } else {
        send(s, &request("POST", &server.path, &server.host(), h, Some(&ping(7))));
        let r = read_response(s);
        assert_eq!(r.json()["id"], 7, "{what}: connection usable after 413");
    }
}

#[test]
fn chunked_or_length_less_post_gets_411() {
    for driver in DRIVERS {
        let server = start(driver);
        let sid = open_session(&server);
        let body = ping(1);
        let head = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMcp-Session-Id: {sid}\r\n",
            server.path,
            server.host()
        );
        let cases = [
            (
                "chunked",
                format!(
                    "{head}Transfer-Encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
                    body.len()
                ),
            ),
            (
                "chunked and length",
                format!(
                    "{head}Transfer-Encoding: chunked\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                ),
            ),
            ("no length", format!("{head}\r\n")),
        ];
        for (name, raw) in cases {
            let what = format!("{driver}: {name}");
            let mut s = server.connect();
            send(&mut s, raw.as_bytes());
            let r = read_response(&mut s);
            assert_rpc_error(&r, 411, None, &what);
            // The body was not read, so the connection cannot be reused: it must be closed.
            let (_, ending) = read_until_closed(&mut s, Duration::from_secs(3));
            assert_ne!(ending, Ending::StillOpen, "{what}: connection left open after 411");
        }
    }
}

/// A POST initialize whose head is exactly `len` bytes (padded with an `X-Pad` header).
fn head_of_len(server: &Server, len: usize) -> Vec<u8> {
    let plain = request("POST", &server.path, &server.host(), &POST_HEADERS, Some(INIT));
    let head_len = plain.len() - INIT.len();
    let pad_line = "X-Pad: \r\n".len();
    assert!(len >= head_len + pad_line, "cannot build a head of {len} bytes");
    let pad = "a".repeat(len - head_len - pad_line);
    let mut h = POST_HEADERS.to_vec();
    h.push(("X-Pad", &pad));
    let raw = request("POST", &server.path, &server.host(), &h, Some(INIT));
    assert_eq!(raw.len() - INIT.len(), len);
    raw
}

/// A POST initialize with exactly `count` header lines (Host, Content-Type, Accept,
/// Content-Length, then `X-N` fillers).
fn head_with_headers(server: &Server, count: usize) -> Vec<u8> {
    let names: Vec<String> = (0..count - 4).map(|i| format!("X-{i}")).collect();
    let mut h = POST_HEADERS.to_vec();
    h.extend(names.iter().map(|n| (n.as_str(), "1")));
    request("POST", &server.path, &server.host(), &h, Some(INIT))
}

#[test]
fn header_limits_at_n_and_n_plus_one() {
    for driver in DRIVERS {
        let server = start(driver);
        // (case, request, accepted)
        let cases = [
            ("head of N bytes", head_of_len(&server, HEAD_MAX), true),
            ("head of N+1 bytes", head_of_len(&server, HEAD_MAX + 1), false),
            ("head of 4N bytes", head_of_len(&server, 4 * HEAD_MAX), false),
            ("N header lines", head_with_headers(&server, HEADERS_MAX), true),
            ("N+1 header lines", head_with_headers(&server, HEADERS_MAX + 1), false),
            ("200 header lines", head_with_headers(&server, 200), false),
        ];
        for (name, raw, accepted) in cases {
            let what = format!("{driver}: {name}");
            let mut s = server.connect();
            send(&mut s, &raw);
            let r = read_response(&mut s);
            if accepted {
                assert_initialized(&r, &what);
            } else {
                assert_rpc_error(&r, 431, None, &what);
                let (_, ending) = read_until_closed(&mut s, Duration::from_secs(3));
                assert_ne!(ending, Ending::StillOpen, "{what}: connection left open after 431");
            }
        }
    }
}

#[test]
fn keep_alive_and_pipelined_requests_are_answered_in_order() {
    for driver in DRIVERS {
        let server = start(driver);
        let sid = open_session(&server);
        let h = session_headers(&sid);
        let post_of = |body: &str| request("POST", &server.path, &server.host(), &h, Some(body));
        // Several fresh connections, so some are handed to the owner core with the pipelined
        // bytes still unread.
        for round in 0..8u64 {
            let what = format!("{driver} round {round}");
            let mut s = server.connect();
            let mut raw = post_of(&ping(1));
            raw.extend(post_of(&ping(2)));
            send(&mut s, &raw);
            let rs = read_responses(&mut s, 2);
            assert_eq!(rs[0].json()["id"], 1, "{what}: first");
            assert_eq!(rs[1].json()["id"], 2, "{what}: second");
            // The same connection keeps serving, request after request.
            send(&mut s, &post_of(&ping(3)));
            assert_eq!(read_response(&mut s).json()["id"], 3, "{what}: keep-alive");
        }

        // A refusal that keeps the connection, then a request: both answered, in order.
        let mut s = server.connect();
        let mut bad = POST_HEADERS.to_vec();
        bad[0] = ("Content-Type", "text/plain");
        let mut raw = request("POST", &server.path, &server.host(), &bad, Some(&ping(4)));
        raw.extend(post_of(&ping(5)));
        send(&mut s, &raw);
        let rs = read_responses(&mut s, 2);
        assert_rpc_error(&rs[0], 415, None, &format!("{driver}: pipelined 415"));
        assert_eq!(rs[1].json()["id"], 5, "{driver}: after the 415");

        // An SSE response (tools/call), then a JSON one, pipelined.
        let mut s = server.connect();
        let mut raw = post_of(&call(6, "echo", r#"{"text":"hi"}"#, false));
        raw.extend(post_of(&ping(7)));
        send(&mut s, &raw);
        let rs = read_responses(&mut s, 2);
        assert_eq!(rs[0].header("Content-Type"), Some("text/event-stream"), "{driver}");
        let last = rs[0].events().last().expect("events").json();
        assert_eq!(last["id"], 6, "{driver}: SSE answer first");
        assert_eq!(rs[1].json()["id"], 7, "{driver}: then the pipelined ping");

        // Connection: close is honoured: answered, marked, closed.
        let mut s = server.connect();
        let mut hc = h.clone();
        hc.push(("Connection", "close"));
        send(&mut s, &request("POST", &server.path, &server.host(), &hc, Some(&ping(8))));
        let (bytes, ending) = read_until_closed(&mut s, Duration::from_secs(3));
        let r = parse_complete(&bytes).expect("a response before the close");
        assert_eq!(r.json()["id"], 8, "{driver}");
        assert!(r.header("Connection").is_some_and(|c| c.eq_ignore_ascii_case("close")));
        assert_eq!(ending, Ending::Closed, "{driver}: closed after Connection: close");
    }
}

/// A POST initialize with the given raw header lines between the request line and the body.
fn init_with_lines(server: &Server, lines: &[String]) -> Vec<u8> {
    let mut raw = format!("POST {} HTTP/1.1\r\n", server.path);
    for l in lines {
        raw.push_str(l);
        raw.push_str("\r\n");
    }
    raw.push_str(
        "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n",
    );
    raw.push_str(&format!("Content-Length: {}\r\n\r\n{INIT}", INIT.len()));
    raw.into_bytes()
}

/// RFC 9112 §3.2: more than one Host line MUST get 400. Here it is also the DNS-rebinding check:
/// judging only one of two Host (or Origin) lines lets a foreign one through whenever the
/// loopback one is the one judged. Either 400 or 403 will do; never a session.
#[test]
fn duplicate_host_or_origin_lines_are_refused() {
    for driver in DRIVERS {
        let server = start(driver);
        let local = format!("Host: {}", server.host());
        let cases = [
            ("foreign Host first", vec!["Host: evil.example".to_owned(), local.clone()]),
            ("foreign Host last", vec![local.clone(), "Host: evil.example".to_owned()]),
            ("two loopback Hosts", vec![local.clone(), "Host: localhost".to_owned()]),
            (
                "foreign Origin first",
                vec![
                    local.clone(),
                    "Origin: http://evil.example".into(),
                    "Origin: http://localhost".into(),
                ],
            ),
            (
                "foreign Origin last",
                vec![
                    local.clone(),
                    "Origin: http://localhost".into(),
                    "Origin: http://evil.example".into(),
                ],
            ),
        ];
        for (name, lines) in cases {
            let what = format!("{driver}: {name}");
            let r = exchange(&server, &init_with_lines(&server, &lines));
            assert!(matches!(r.status, 400 | 403), "{what}: got {} {}", r.status, r.text());
            assert_rpc_error(&r, r.status, None, &what);
            assert!(r.header("Mcp-Session-Id").is_none(), "{what}: a session was created");
        }
    }
}

/// RFC 9112 §3.2: an HTTP/1.1 request without Host MUST get 400.
#[test]
fn http11_request_without_host_gets_400() {
    for driver in DRIVERS {
        let server = start(driver);
        let r = exchange(&server, &init_with_lines(&server, &[]));
        assert_rpc_error(&r, 400, None, &format!("{driver}: no Host"));
        assert!(r.header("Mcp-Session-Id").is_none(), "{driver}: a session was created");
    }
}

#[test]
fn malformed_request_heads_get_400_and_a_close() {
    let cases: [(&str, &[u8]); 5] = [
        ("no request line", b"GARBAGE\r\n\r\n"),
        ("HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
        ("signed Content-Length", b"POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Length: +2\r\n\r\n{}"),
        ("two Content-Lengths", b"POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}x"),
        ("space before colon", b"POST /mcp HTTP/1.1\r\nHost : localhost\r\nContent-Length: 2\r\n\r\n{}"),
    ];
    for driver in DRIVERS {
        let server = start(driver);
        for (name, raw) in cases {
            let what = format!("{driver}: {name}");
            let mut s = server.connect();
            send(&mut s, raw);
            let (bytes, ending) = read_until_closed(&mut s, Duration::from_secs(3));
            let r =
                parse_complete(&bytes).unwrap_or_else(|| panic!("{what}: no answer ({ending:?})"));
            assert_rpc_error(&r, 400, None, &what);
            assert_ne!(
                ending,
                Ending::StillOpen,
                "{what}: framing is lost, the connection must close"
            );
        }
    }
}

/// An oversize body much larger than one read: the 413 must still end in a clean close (FIN
/// after the answer, RFC 9112 §9.6 lingering close) or a usable connection. Closing with the
/// body unread makes the kernel send RST, which can destroy the 413 before the client reads it.
#[test]
fn large_oversize_body_gets_413_then_a_clean_close() {
    for driver in DRIVERS {
        let server = start(driver);
        let sid = open_session(&server);
        let body = format!("{}{}", ping(1), " ".repeat(256 * 1024));
        let raw =
            request("POST", &server.path, &server.host(), &session_headers(&sid), Some(&body));
        let mut s = server.connect();
        let mut writer = s.try_clone().expect("clone");
        // The server may stop reading at any point: write from another thread, ignore errors.
        let t = std::thread::spawn(move || {
            let _ = std::io::Write::write_all(&mut writer, &raw);
        });
        let (bytes, ending) = read_until_closed(&mut s, Duration::from_secs(5));
        let _ = t.join();
        let what = format!("{driver}: 256 KiB body over a {BODY_MAX}-byte limit");
        let r = parse_complete(&bytes).unwrap_or_else(|| panic!("{what}: no answer ({ending:?})"));
        assert_rpc_error(&r, 413, None, &what);
        assert_eq!(ending, Ending::Closed, "{what}: closed with RST instead of FIN");
    }
}

/// Goal: an absolute-form request target (RFC 9112 §3.2.2: a server MUST accept it) reaches the
/// endpoint when its authority is allowed, and gets 403 when its authority is foreign (the
/// DNS-rebinding rule applies to it as to Host). Method: raw request lines, both drivers.
#[test]
fn absolute_form_targets_are_accepted_and_their_authority_checked() {
    for driver in DRIVERS {
        let server = start(driver);
        let ok_target = format!("http://{}{}", server.host(), server.path);
        let raw = request("POST", &ok_target, &server.host(), &POST_HEADERS, Some(INIT));
        let r = exchange(&server, &raw);
        assert_eq!(r.status, 200, "{driver}: {}", r.text());
        let evil = format!("http://evil.example{}", server.path);
        let raw = request("POST", &evil, &server.host(), &POST_HEADERS, Some(INIT));
        assert_eq!(exchange(&server, &raw).status, 403, "{driver}: foreign authority");
        let other = format!("http://{}/other", server.host());
        let raw = request("POST", &other, &server.host(), &POST_HEADERS, Some(INIT));
        assert_eq!(exchange(&server, &raw).status, 404, "{driver}: other path");
    }
}
