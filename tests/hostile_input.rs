//! Goal: hostile or ambiguous input is refused with a status and a message that name the fault,
//! never silently changed, never read two ways, never counted twice: lone UTF-16 surrogate
//! escapes in JSON strings, a Host (or absolute-form authority) with a malformed port, conflicting
//! duplicates of single-valued headers, HTTP-syntax faults, and the request counter across a
//! hand-off. Method: the real binary on 127.0.0.1:0, once per io driver (`support::DRIVERS`),
//! raw HTTP/1.1 bytes over blocking `TcpStream`s, tables of cases; each refusal is checked for
//! its status, JSON-RPC code, `id: null` and message, each accepted case for its exact answer.
mod support;

use serde_json::json;
use support::*;

fn ping(id: u64) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#)
}

fn session_headers(sid: &str) -> Vec<(&str, &str)> {
    let mut h = POST_HEADERS.to_vec();
    h.push(("Mcp-Session-Id", sid));
    h
}

/// Asserts a refusal with `status`, JSON-RPC `code`, `id: null`, and returns its message.
fn refusal_message(r: &Response, status: u16, code: i64, what: &str) -> String {
    assert_eq!(r.status, status, "{what}: status; body {}", r.text());
    assert_eq!(r.header("Content-Type"), Some("application/json"), "{what}: content type");
    let v = r.json();
    assert_eq!(v["jsonrpc"], "2.0", "{what}: {v}");
    assert!(v["id"].is_null(), "{what}: the request's id was not read: {v}");
    assert!(v.get("result").is_none(), "{what}: an error has no result: {v}");
    assert_eq!(v["error"]["code"], code, "{what}: JSON-RPC code: {v}");
    v["error"]["message"].as_str().unwrap_or_else(|| panic!("{what}: message: {v}")).to_owned()
}

/// The text `echo` returned for a `tools/call` that was answered 200.
fn echoed(r: &Response, what: &str) -> String {
    assert_eq!(r.status, 200, "{what}: {}", r.text());
    let last = r.events().last().unwrap_or_else(|| panic!("{what}: no events")).json();
    assert!(last.get("error").is_none(), "{what}: {last}");
    last["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: no text in {last}"))
        .to_owned()
}

/// Goal: a JSON string escape that is half a UTF-16 surrogate pair is refused (400, -32700),
/// wherever it appears (value, key, id), and never reaches a tool changed (simd-json turns a
/// lone high surrogate into U+0000); a proper pair, and text that only looks like an escape,
/// reach `echo` exactly. Method: `tools/call echo` bodies on a session, the refused ones
/// compared by status and code, the accepted ones by the echoed text; then the session is
/// still usable.
#[test]
fn lone_surrogate_escapes_are_refused_and_pairs_round_trip() {
    // (case, raw JSON text of the `text` argument)
    let refused: [(&str, &str); 9] = [
        ("lone high surrogate", r#""\ud800""#),
        ("lone high surrogate, upper-case hex", r#""\uDBFF""#),
        ("lone low surrogate", r#""\udc00""#),
        ("high surrogate then a letter", r#""a\ud83db""#),
        ("high surrogate at the end of a longer string", r#""ok \ud83d""#),
        ("high then a non-surrogate escape", r#""\ud800\u0041""#),
        ("two high surrogates", r#""\ud800\ud800""#),
        ("low before high", r#""\ude00\ud83d""#),
        ("high then an escaped backslash", r#""\ud800\\u dc00""#),
    ];
    // (case, raw JSON text of the `text` argument, the text echo must return)
    let accepted: [(&str, &str, &str); 6] = [
        ("surrogate pair", r#""\ud83d\ude00""#, "\u{1F600}"),
        ("surrogate pair, upper-case hex", r#""\uD83D\uDE00""#, "\u{1F600}"),
        ("pair between text", r#""a\ud83d\ude00b""#, "a\u{1F600}b"),
        ("BMP escape", r#""\u00e9\u4e2d""#, "\u{e9}\u{4e2d}"),
        ("escaped backslash before u", r#""\\ud800""#, "\\ud800"),
        ("escaped backslash, then a pair", r#""\\\ud83d\ude00""#, "\\\u{1F600}"),
    ];
    for driver in DRIVERS {
        let server = Server::on(driver, &[]);
        let sid = open_session(&server);
        let h = session_headers(&sid);
        for (i, (name, text)) in refused.iter().enumerate() {
            let what = format!("{driver}: {name}");
            let body = call(i as u64 + 1, "echo", &format!(r#"{{"text":{text}}}"#), false);
            let r =
                exchange(&server, &request("POST", &server.path, &server.host(), &h, Some(&body)));
            refusal_message(&r, 400, -32700, &what);
        }
        // In an object key, and in the request id (which is echoed back byte for byte).
        let in_key = r#"{"jsonrpc":"2.0","id":50,"method":"tools/call","params":{"name":"echo","arguments":{"text":"k","\ud800":1}}}"#;
        let in_id = r#"{"jsonrpc":"2.0","id":"\udbff","method":"ping"}"#;
        for (name, body) in [("in a key", in_key), ("in the id", in_id)] {
            let r =
                exchange(&server, &request("POST", &server.path, &server.host(), &h, Some(body)));
            refusal_message(&r, 400, -32700, &format!("{driver}: lone surrogate {name}"));
        }
        for (i, (name, text, want)) in accepted.iter().enumerate() {
            let what = format!("{driver}: {name}");
            let body = call(i as u64 + 100, "echo", &format!(r#"{{"text":{text}}}"#), false);
            let r =
                exchange(&server, &request("POST", &server.path, &server.host(), &h, Some(&body)));
            assert_eq!(echoed(&r, &what), *want, "{what}");
        }
        let r = post(&server, &[("Mcp-Session-Id", &sid)], &ping(999));
        assert_eq!(r.json(), json!({"jsonrpc":"2.0","id":999,"result":{}}), "{driver}");
    }
}

/// (case, Host, absolute-form authority, Origin, allowed)
type HostCase = (&'static str, String, Option<String>, Option<String>, bool);

/// (case, method, headers, body, refused)
type DuplicateCase = (&'static str, &'static str, Vec<(String, String)>, Option<String>, bool);

/// Goal: on a loopback listener a Host (or an absolute-form target's authority) is a loopback
/// name with no port or a well-formed one, which need not be the port the server listens on (a
/// port forwarder's client names the forwarder's port; `tests/port_forward.rs` runs one);
/// `--allowed-host` values still match exactly, their port included; Origin's port is not ours
/// to check (a page on another local port may call us). Method: `initialize` under each Host on
/// a server started with `--listen 127.0.0.1:0`, 200 or 403 expected.
#[test]
fn host_names_a_loopback_name_and_a_well_formed_port() {
    const ALLOWED_HOST: &str = "mcp.example:8080";
    for driver in DRIVERS {
        let server = Server::on(driver, &["--allowed-host", ALLOWED_HOST]);
        let port = server.addr.port();
        let other = if port == 9999 { 9998 } else { 9999 };
        let host = server.host();
        let cases: Vec<HostCase> = vec![
            ("bound address", host.clone(), None, None, true),
            ("localhost:PORT", format!("localhost:{port}"), None, None, true),
            ("[::1]:PORT", format!("[::1]:{port}"), None, None, true),
            ("no port", "localhost".into(), None, None, true),
            ("[::1] without a port", "[::1]".into(), None, None, true),
            ("allowed host, its own port", ALLOWED_HOST.into(), None, None, true),
            (
                "Origin on another port",
                host.clone(),
                None,
                Some(format!("http://localhost:{other}")),
                true,
            ),
            (
                "authority with our port",
                host.clone(),
                Some(format!("localhost:{port}")),
                None,
                true,
            ),
            ("localhost:OTHER", format!("localhost:{other}"), None, None, true),
            ("127.0.0.1:OTHER", format!("127.0.0.1:{other}"), None, None, true),
            ("[::1]:OTHER", format!("[::1]:{other}"), None, None, true),
            (
                "authority with another port",
                host.clone(),
                Some(format!("localhost:{other}")),
                None,
                true,
            ),
            (
                "Origin with userinfo (evil.com's page)",
                host.clone(),
                None,
                Some("http://localhost:80@evil.com".into()),
                false,
            ),
            (
                "Origin with a path after the port",
                host.clone(),
                None,
                Some(format!("http://localhost:{other}/x@evil.com")),
                false,
            ),
            ("port 0", "localhost:0".into(), None, None, false),
            ("six-digit port", "localhost:100000".into(), None, None, false),
            ("port out of range", "localhost:65536".into(), None, None, false),
            ("port not a number", "localhost:http".into(), None, None, false),
            ("two ports", format!("localhost:{port}:{port}"), None, None, false),
            ("junk after the bracket", format!("[::1]x{port}"), None, None, false),
            ("port followed by a name", format!("localhost:{port}.evil.com"), None, None, false),
            ("a name for a port", "localhost:evil.com".into(), None, None, false),
            ("foreign name, our port", format!("evil.com:{port}"), None, None, false),
            ("allowed host on another port", "mcp.example:9999".into(), None, None, false),
            (
                "authority with a malformed port",
                host.clone(),
                Some(format!("localhost:{port}.evil.com")),
                None,
                false,
            ),
        ];
        for (name, host, authority, origin, allowed) in cases {
            let what = format!("{driver}: {name} (Host {host:?}, target {authority:?})");
            let mut h = POST_HEADERS.to_vec();
            if let Some(o) = &origin {
                h.push(("Origin", o));
            }
            let target = match &authority {
                Some(a) => format!("http://{a}{}", server.path),
                None => server.path.clone(),
            };
            let r = exchange(&server, &request("POST", &target, &host, &h, Some(INIT)));
            if allowed {
                assert_eq!(r.status, 200, "{what}: {}", r.text());
                assert!(r.header("Mcp-Session-Id").is_some(), "{what}: session created");
            } else {
                refusal_message(&r, 403, -32600, &what);
                assert!(r.header("Mcp-Session-Id").is_none(), "{what}: no session on 403");
            }
        }
    }
}

/// Goal: a single-valued header given twice with different values is refused (400, -32600, or
/// -32020 for an `Mcp-*` header; a message naming the duplicate) instead of "last one wins",
/// which a proxy that reads the first would disagree with; identical duplicates are accepted (as
/// identical Content-Length lines are, RFC 9112 §6.3). Method: requests of a real session carrying each header twice; the
/// conflicting ones must be refused, the identical ones answered as without the duplicate.
#[test]
fn conflicting_duplicate_single_valued_headers_are_refused() {
    for driver in DRIVERS {
        let server = Server::on(driver, &["--threads", "2"]);
        let (a, b) = (open_session(&server), open_session(&server));
        // Two event ids of one stream of session `a`, for the GET cases.
        let mut st = call_stream(&server, &a, &call(7, "echo", r#"{"text":"e"}"#, false), &[]);
        let evs = st.rest();
        let (e1, e2) = (
            evs[0].id.clone().expect("priming id"),
            evs.last().and_then(|e| e.id.clone()).expect("result id"),
        );
        assert_ne!(e1, e2, "{driver}");
        let post_h = |extra: &[(&'static str, String)]| -> Vec<(String, String)> {
            let mut h: Vec<(String, String)> =
                POST_HEADERS.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect();
            h.extend(extra.iter().map(|(n, v)| (n.to_string(), v.clone())));
            h
        };
        let get_h = |extra: &[(&'static str, String)]| -> Vec<(String, String)> {
            let mut h = vec![("Accept".to_owned(), "text/event-stream".to_owned())];
            h.extend(extra.iter().map(|(n, v)| (n.to_string(), v.clone())));
            h
        };
        let sid = |s: &str| ("Mcp-Session-Id", s.to_owned());
        let v1 = ("MCP-Protocol-Version", "2025-11-25".to_owned());
        let v2 = ("MCP-Protocol-Version", "2025-06-18".to_owned());
        let k1 = ("Idempotency-Key", "k-1".to_owned());
        let k2 = ("Idempotency-Key", "k-2".to_owned());
        let tool = call(20, "echo", r#"{"text":"x"}"#, false);
        let cases: Vec<DuplicateCase> = vec![
            ("two sessions", "POST", post_h(&[sid(&a), sid(&b)]), Some(ping(1)), true),
            (
                "two sessions, other name case",
                "POST",
                post_h(&[sid(&a), ("mcp-session-id", b.clone())]),
                Some(ping(2)),
                true,
            ),
            (
                "two protocol versions",
                "POST",
                post_h(&[sid(&a), v1.clone(), v2.clone()]),
                Some(ping(3)),
                true,
            ),
            (
                "two idempotency keys",
                "POST",
                post_h(&[sid(&a), k1.clone(), k2.clone()]),
                Some(tool.clone()),
                true,
            ),
            (
                "two Last-Event-IDs",
                "GET",
                get_h(&[sid(&a), ("Last-Event-ID", e1.clone()), ("Last-Event-ID", e2.clone())]),
                None,
                true,
            ),
            ("same session twice", "POST", post_h(&[sid(&a), sid(&a)]), Some(ping(4)), false),
            (
                "same version twice",
                "POST",
                post_h(&[sid(&a), v1.clone(), v1.clone()]),
                Some(ping(5)),
                false,
            ),
        ];
        for (name, method, headers, body, refused) in cases {
            let what = format!("{driver}: {name}");
            let h: Vec<(&str, &str)> =
                headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
            let raw = request(method, &server.path, &server.host(), &h, body.as_deref());
            let r = exchange(&server, &raw);
            if refused {
                // An `Mcp-*` header twice is a header mismatch (-32020), the others -32600.
                let mcp = name.starts_with("two sessions") || name == "two protocol versions";
                let message = refusal_message(&r, 400, if mcp { -32020 } else { -32600 }, &what);
                assert!(
                    message.contains("duplicate"),
                    "{what}: message names the fault: {message}"
                );
            } else {
                assert_eq!(r.status, 200, "{what}: {}", r.text());
            }
        }
        // Nothing above ran the tool under either key: the first key is still unused.
        let h = session_headers(&a);
        let mut h2 = h.clone();
        h2.push(("Idempotency-Key", "k-1"));
        let r = exchange(&server, &request("POST", &server.path, &server.host(), &h2, Some(&tool)));
        assert_eq!(echoed(&r, &format!("{driver}: key k-1 afterwards")), "x", "{driver}");
    }
}

/// Goal: `tidemark_requests_total` counts each request once, whichever core it lands on: a
/// request that reaches the non-owner core is handed to its session's owner and answered there,
/// and must not be counted on both. Method: `--threads 2`; sessions opened and used over fresh
/// connections (so about half land on the other core and are handed off); the counter must rise
/// by exactly the number of requests sent, and `tidemark_handoffs_total` must have risen (else
/// the test proved nothing).
#[test]
fn handed_off_requests_are_counted_once() {
    const SESSIONS: u64 = 8;
    const PINGS: u64 = 4;
    for driver in DRIVERS {
        let (server, metrics) = server_with_metrics(driver, &["--threads", "2"]);
        let before = scrape(&metrics);
        let mut sent = 0u64;
        for i in 0..SESSIONS {
            let sid = open_session(&server);
            sent += 2; // initialize, notifications/initialized
            for p in 0..PINGS {
                let id = i * 100 + p;
                let r = post(&server, &[("Mcp-Session-Id", &sid)], &ping(id));
                assert_eq!(r.json(), json!({"jsonrpc":"2.0","id":id,"result":{}}), "{driver}");
                sent += 1;
            }
        }
        let after = scrape(&metrics);
        let handoffs =
            metric(&after, "tidemark_handoffs_total") - metric(&before, "tidemark_handoffs_total");
        assert!(handoffs > 0, "{driver}: no request was handed off; the test proves nothing");
        let counted =
            metric(&after, "tidemark_requests_total") - metric(&before, "tidemark_requests_total");
        assert_eq!(counted, sent, "{driver}: {sent} requests, {handoffs} of them handed off");
    }
}

/// Goal: a 400 for an HTTP-syntax fault says which one (request line or header syntax,
/// Content-Length, Host, conflicting duplicate) instead of "not a JSON-RPC 2.0 message", which
/// stays the message for JSON that is not JSON-RPC; the status and the JSON-RPC body (-32600,
/// id null) are unchanged. Method: raw heads on fresh connections; each answer's message must
/// contain the fault's name and not the JSON-RPC wording.
#[test]
fn http_syntax_400s_name_the_http_fault() {
    for driver in DRIVERS {
        let server = Server::on(driver, &[]);
        let host = server.host();
        let p = &server.path;
        let body = ping(1);
        let n = body.len();
        // (case, raw request, a word the message must contain)
        let cases: Vec<(&str, String, &str)> = vec![
            ("no HTTP version", format!("POST {p}\r\nHost: {host}\r\n\r\n"), "request line"),
            ("bad version", format!("POST {p} HTTP/9.1\r\nHost: {host}\r\n\r\n"), "request line"),
            ("header without colon", format!("GET {p} HTTP/1.1\r\nHost: {host}\r\nOops\r\n\r\n"), "request line"),
            (
                "Content-Length not a number",
                format!("POST {p} HTTP/1.1\r\nHost: {host}\r\nContent-Length: ten\r\n\r\n"),
                "Content-Length",
            ),
            (
                "two Content-Lengths",
                format!("POST {p} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {n}\r\nContent-Length: 1\r\n\r\n{body}"),
                "Content-Length",
            ),
            ("no Host", format!("GET {p} HTTP/1.1\r\nAccept: text/event-stream\r\n\r\n"), "Host"),
            ("two Hosts", format!("GET {p} HTTP/1.1\r\nHost: {host}\r\nHost: {host}\r\n\r\n"), "Host"),
            (
                "two Origins",
                format!("GET {p} HTTP/1.1\r\nHost: {host}\r\nOrigin: http://localhost\r\nOrigin: http://localhost\r\n\r\n"),
                "Origin",
            ),
            (
                "conflicting duplicate header",
                format!("GET {p} HTTP/1.1\r\nHost: {host}\r\nLast-Event-ID: a\r\nLast-Event-ID: b\r\n\r\n"),
                "duplicate",
            ),
        ];
        for (name, raw, word) in cases {
            let what = format!("{driver}: {name}");
            let r = exchange(&server, raw.as_bytes());
            let message = refusal_message(&r, 400, -32600, &what);
            assert!(message.contains(word), "{what}: message names {word:?}: {message}");
            assert!(!message.contains("JSON-RPC"), "{what}: not a JSON-RPC fault: {message}");
        }
        // JSON that is not JSON-RPC keeps its message.
        let sid = open_session(&server);
        let raw = request("POST", p, &host, &session_headers(&sid), Some("42"));
        let message = refusal_message(&exchange(&server, &raw), 400, -32600, "not JSON-RPC");
        assert!(message.contains("not a JSON-RPC 2.0 message"), "{driver}: {message}");
    }
}

/// Goal: a legacy `Idempotency-Key` that is not UTF-8 is refused (400, -32600, a message naming
/// the key), not silently ignored (which ran the call unkeyed, so its retry ran it again).
/// Method: a real session's keyed `echo` with the key's bytes `k\xff`, then the same call with a
/// UTF-8 key, which runs.
#[test]
fn a_legacy_idempotency_key_that_is_not_utf8_is_refused() {
    for driver in DRIVERS {
        let server = Server::on(driver, &[]);
        let sid = open_session(&server);
        let tool = call(30, "echo", r#"{"text":"u"}"#, false);
        let mut h = session_headers(&sid);
        h.push(("Idempotency-Key", "k-PLACEHOLDER"));
        let raw = request("POST", &server.path, &server.host(), &h, Some(&tool));
        let at = raw.windows(13).position(|w| w == b"k-PLACEHOLDER").expect("placeholder");
        let mut bad = raw[..at].to_vec();
        bad.extend_from_slice(b"k\xff");
        bad.extend_from_slice(&raw[at + 13..]);
        let what = format!("{driver}: non-UTF-8 legacy key");
        let message = refusal_message(&exchange(&server, &bad), 400, -32600, &what);
        assert!(message.contains("Idempotency-Key"), "{what}: {message}");
        assert_eq!(echoed(&exchange(&server, &raw), &format!("{driver}: UTF-8 key")), "u");
    }
}
