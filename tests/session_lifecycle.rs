//! Goal: the legacy-era session lifecycle of CONTRACT §2 as seen on the wire: `initialize`
//! creates a session with a well-formed, unguessable id; version negotiation; the
//! `MCP-Protocol-Version` check; 400 without a session, 404 for unknown, forged, deleted or
//! expired ids; 202 for notifications and client responses; `ping` and unknown methods; and a
//! session used from any connection whichever core accepted it. Method: the real binary on
//! 127.0.0.1:0 per io driver (`support::DRIVERS`), raw HTTP/1.1 over blocking `TcpStream`s,
//! tables of cases; cross-core hand-over is checked through `/metrics`.
mod support;

use std::time::Duration;

use serde_json::json;
use support::*;

const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

fn ping(id: u64) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#)
}

fn init_at(version: &str) -> String {
    INIT.replace("2025-11-25", version)
}

/// Asserts a refusal with a JSON-RPC error body (any code unless the contract names one).
fn assert_refused(r: &Response, status: u16, what: &str) {
    assert_eq!(r.status, status, "{what}: {}", r.text());
    let v = r.json();
    assert_eq!(v["jsonrpc"], "2.0", "{what}: {v}");
    assert!(v["error"]["code"].is_i64(), "{what}: JSON-RPC error body: {v}");
    assert!(v.get("result").is_none(), "{what}: {v}");
}

/// A request with method, session and extra headers; body only for POST.
fn raw(
    server: &Server,
    method: &str,
    sid: Option<&str>,
    extra: &[(&str, &str)],
    body: &str,
) -> Vec<u8> {
    let mut h: Vec<(&str, &str)> = match method {
        "POST" => POST_HEADERS.to_vec(),
        _ => vec![("Accept", "text/event-stream")],
    };
    if let Some(sid) = sid {
        h.push(("Mcp-Session-Id", sid));
    }
    h.extend_from_slice(extra);
    let body = (method == "POST").then_some(body);
    request(method, &server.path, &server.host(), &h, body)
}

/// Sends a request and returns its status; a 200 GET (an open SSE stream) is cut after its head.
fn status_of(server: &Server, raw: &[u8]) -> (u16, Response) {
    let mut s = server.connect();
    send(&mut s, raw);
    let is_get = raw.starts_with(b"GET ");
    if is_get {
        let sse = SseStream::from_stream(s);
        if sse.status == 200 {
            let status = sse.status;
            sse.cut();
            return (status, Response { status, headers: Vec::new(), body: Vec::new() });
        }
        // A refusal: re-read is not possible after the head was consumed, so ask again.
        let r = exchange(server, raw);
        return (r.status, r);
    }
    let r = read_response(&mut s);
    (r.status, r)
}

#[test]
fn initialize_creates_distinct_well_formed_sessions() {
    for driver in DRIVERS {
        let server = Server::on(driver, &["--threads", "2"]);
        let mut seen = std::collections::HashSet::new();
        for i in 0..8 {
            let r = post(&server, &[], INIT);
            assert_eq!(r.status, 200, "{driver}: {}", r.text());
            assert_eq!(r.header("Content-Type"), Some("application/json"), "{driver}");
            let sid = r.header("Mcp-Session-Id").expect("Mcp-Session-Id").to_owned();
            assert_eq!(sid.len(), 38, "{driver}: session id {sid:?}");
            assert!(
                sid.bytes().all(|b| (0x21..=0x7e).contains(&b)),
                "{driver}: visible ASCII {sid:?}"
            );
            assert!(seen.insert(sid.clone()), "{driver}: session {i} repeats an id: {sid}");
            let v = r.json();
            assert_eq!(v["id"], 0, "{driver}");
            assert_eq!(v["result"]["protocolVersion"], "2025-11-25", "{driver}");
            assert!(v["result"]["capabilities"].is_object(), "{driver}: {v}");
            assert!(v["result"]["serverInfo"]["name"].is_string(), "{driver}: {v}");
            let n = post(&server, &[("Mcp-Session-Id", &sid)], INITIALIZED);
            assert_eq!(n.status, 202, "{driver}");
        }
        // Ids do not share their random part: 128 bits from the CSPRNG leave the 32 hex digits
        // after the owner core all different (a counter or a timestamp would repeat a prefix).
        let tails: std::collections::HashSet<String> =
            seen.iter().map(|s| s[s.len() - 16..].to_owned()).collect();
        assert_eq!(tails.len(), seen.len(), "{driver}: {seen:?}");
    }
}

#[test]
fn protocol_version_is_negotiated() {
    // (requested, answered)
    let cases = [
        ("2025-11-25", "2025-11-25"),
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-03-26"),
        ("1999-01-01", "2025-11-25"),
        ("2024-11-05", "2025-11-25"),
        ("not-a-date", "2025-11-25"),
    ];
    for driver in DRIVERS {
        let server = Server::on(driver, &[]);
        for (requested, answered) in cases {
            let r = post(&server, &[], &init_at(requested));
            assert_eq!(r.status, 200, "{driver}: {requested}: {}", r.text());
            assert_eq!(r.json()["result"]["protocolVersion"], answered, "{driver}: {requested}");
            assert!(r.header("Mcp-Session-Id").is_some(), "{driver}: {requested}");
        }
    }
}

#[test]
fn protocol_version_header_after_initialize() {
    // (case, MCP-Protocol-Version, accepted)
    let cases: [(&str, Option<&str>, bool); 8] = [
        ("missing: the negotiated one is assumed", None, true),
        ("the negotiated one", Some("2025-11-25"), true),
        ("another supported (conformance suite)", Some("2025-03-26"), true),
        ("another supported", Some("2025-06-18"), true),
        ("unknown", Some("1999-01-01"), false),
        ("the pre-Streamable-HTTP revision", Some("2024-11-05"), false),
        ("garbage", Some("latest"), false),
        ("empty", Some(""), false),
    ];
    for driver in DRIVERS {
        let server = Server::on(driver, &[]);
        let sid = open_session(&server);
        for (name, version, accepted) in cases {
            let extra: Vec<(&str, &str)> =
                version.map(|v| vec![("MCP-Protocol-Version", v)]).unwrap_or_default();
            for method in ["POST", "GET"] {
                let what = format!("{driver}: {method} {name}");
                let (status, r) =
                    status_of(&server, &raw(&server, method, Some(&sid), &extra, &ping(1)));
                if accepted {
                    assert_eq!(status, 200, "{what}: {}", r.text());
                } else {
                    assert_refused(&r, 400, &what);
                }
            }
        }
    }
}

/// DELETE is a request after initialize too: MCP 2025-06-18 and 2025-11-25 transports
/// ("If the server receives a request with an invalid or unsupported `MCP-Protocol-Version`, it
/// MUST respond with 400"); the TypeScript SDK checks it on DELETE as well.
#[test]
fn delete_with_an_unsupported_protocol_version_gets_400() {
    for driver in DRIVERS {
        let server = Server::on(driver, &[]);
        let sid = open_session(&server);
        let bad = [("MCP-Protocol-Version", "1999-01-01")];
        let r = exchange(&server, &raw(&server, "DELETE", Some(&sid), &bad, ""));
        assert_refused(&r, 400, &format!("{driver}: DELETE with an unsupported version"));
        let r = post(&server, &[("Mcp-Session-Id", &sid)], &ping(2));
        assert_eq!(r.status, 200, "{driver}: the refused DELETE left the session alone");
        let ok = [("MCP-Protocol-Version", "2025-03-26")];
        let r = exchange(&server, &raw(&server, "DELETE", Some(&sid), &ok, ""));
        assert!(matches!(r.status, 200 | 204), "{driver}: DELETE with a supported version");
    }
}

#[test]
fn requests_without_a_session_get_400() {
    for driver in DRIVERS {
        let server = Server::on(driver, &[]);
        // (case, request)
        let cases = [
            ("POST ping", raw(&server, "POST", None, &[], &ping(1))),
            (
                "POST tools/list",
                raw(
                    &server,
                    "POST",
                    None,
                    &[],
                    r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
                ),
            ),
            ("POST notification", raw(&server, "POST", None, &[], INITIALIZED)),
            ("GET", raw(&server, "GET", None, &[], "")),
            ("DELETE", raw(&server, "DELETE", None, &[], "")),
        ];
        for (name, req) in cases {
            assert_refused(&exchange(&server, &req), 400, &format!("{driver}: {name}"));
        }
    }
}

#[test]
fn unknown_and_forged_session_ids_get_404() {
    for driver in DRIVERS {
        let server = Server::on(driver, &["--threads", "2"]);
        let real = open_session(&server);
        let flip = |i: usize| {
            let mut b = real.clone().into_bytes();
            b[i] = if b[i] == b'0' { b'1' } else { b'0' };
            String::from_utf8(b).expect("ascii")
        };
        let random_part = &real[4..];
        // (case, id)
        let cases: Vec<(&str, String)> = vec![
            ("one random digit changed", flip(20)),
            ("last digit changed", flip(35)),
            ("core 0, all zero", "0".repeat(36)),
            ("core 1 (exists), unknown random", format!("0001{}", "f".repeat(32))),
            ("core 0xffff (does not exist)", format!("ffff{random_part}")),
            ("core 0x0002 (one past the last)", format!("0002{random_part}")),
            ("core 0x8000", format!("8000{random_part}")),
            ("upper-case hex", real.to_uppercase()),
            ("too short", real[..35].to_owned()),
            ("too long", format!("{real}0")),
            ("not hex", "z".repeat(36)),
            ("UUID shaped", "123e4567-e89b-12d3-a456-426614174000".into()),
            ("node 0, core 0, all zero", "0".repeat(38)),
            ("node 0, core 1 (exists), unknown random", format!("000001{}", "f".repeat(32))),
            ("node 0, core 0xffff (does not exist)", format!("00ffff{}", &real[6..])),
            ("empty", String::new()),
        ];
        for (name, id) in &cases {
            for method in ["POST", "GET", "DELETE"] {
                let what = format!("{driver}: {method} {name} ({id:?})");
                let r = exchange(&server, &raw(&server, method, Some(id), &[], &ping(1)));
                assert_refused(&r, 404, &what);
            }
        }
        // None of that touched the real session, and the server is still up.
        let r = post(&server, &[("Mcp-Session-Id", &real)], &ping(2));
        assert_eq!(r.json()["result"], json!({}), "{driver}");
    }
}

#[test]
fn delete_ends_the_session() {
    for driver in DRIVERS {
        let server = Server::on(driver, &["--threads", "2"]);
        let sid = open_session(&server);
        let other = open_session(&server);
        let r = exchange(&server, &raw(&server, "DELETE", Some(&sid), &[], ""));
        assert!(matches!(r.status, 200 | 204), "{driver}: DELETE: {} {}", r.status, r.text());
        assert!(r.body.is_empty(), "{driver}: DELETE answer has no body");
        let after = [
            ("POST ping", raw(&server, "POST", Some(&sid), &[], &ping(1))),
            ("POST notification", raw(&server, "POST", Some(&sid), &[], INITIALIZED)),
            ("GET", raw(&server, "GET", Some(&sid), &[], "")),
            ("DELETE again", raw(&server, "DELETE", Some(&sid), &[], "")),
        ];
        for (name, req) in after {
            assert_refused(
                &exchange(&server, &req),
                404,
                &format!("{driver}: {name} after DELETE"),
            );
        }
        let r = post(&server, &[("Mcp-Session-Id", &other)], &ping(2));
        assert_eq!(r.status, 200, "{driver}: another session is untouched");
    }
}

#[test]
fn notifications_and_client_responses_get_202_without_body() {
    // (case, body)
    let cases = [
        ("initialized", INITIALIZED),
        (
            "cancelled, unknown request",
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":42}}"#,
        ),
        (
            "progress",
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}"#,
        ),
        ("roots changed", r#"{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}"#),
        (
            "unknown notification",
            r#"{"jsonrpc":"2.0","method":"notifications/whatever","params":{}}"#,
        ),
        ("result for an unknown request", r#"{"jsonrpc":"2.0","id":5,"result":{}}"#),
        ("string-id result", r#"{"jsonrpc":"2.0","id":"s-1","result":{"ok":true}}"#),
        ("error response", r#"{"jsonrpc":"2.0","id":6,"error":{"code":-1,"message":"no"}}"#),
    ];
    for driver in DRIVERS {
        let server = Server::on(driver, &[]);
        let sid = open_session(&server);
        for (name, body) in cases {
            let r = post(&server, &[("Mcp-Session-Id", &sid)], body);
            assert_eq!(r.status, 202, "{driver}: {name}: {}", r.text());
            assert!(r.body.is_empty(), "{driver}: {name}: 202 has no body");
            assert_eq!(r.header("Content-Length"), Some("0"), "{driver}: {name}");
        }
    }
}

#[test]
fn second_initialize_inside_a_session_is_refused() {
    for driver in DRIVERS {
        let server = Server::on(driver, &[]);
        let sid = open_session(&server);
        let r = post(&server, &[("Mcp-Session-Id", &sid)], &INIT.replace("\"id\":0", "\"id\":3"));
        assert_refused(&r, 400, &format!("{driver}: second initialize"));
        assert_eq!(r.json()["id"], 3, "{driver}: the refusal names the request");
        assert!(r.header("Mcp-Session-Id").is_none(), "{driver}: no new session");
        let r = post(&server, &[("Mcp-Session-Id", &sid)], &ping(4));
        assert_eq!(r.status, 200, "{driver}: the session carries on");
    }
}

#[test]
fn ping_and_unknown_methods() {
    // (case, body, expected answer)
    let cases = [
        (
            "ping",
            r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#,
            json!({"jsonrpc":"2.0","id":7,"result":{}}),
        ),
        (
            "ping, string id",
            r#"{"jsonrpc":"2.0","id":"p-1","method":"ping"}"#,
            json!({"jsonrpc":"2.0","id":"p-1","result":{}}),
        ),
        (
            "ping, params",
            r#"{"jsonrpc":"2.0","id":8,"method":"ping","params":{}}"#,
            json!({"jsonrpc":"2.0","id":8,"result":{}}),
        ),
    ];
    let unknown = [
        ("unknown method", r#"{"jsonrpc":"2.0","id":9,"method":"no/such/method"}"#, json!(9)),
        (
            "unknown, string id",
            r#"{"jsonrpc":"2.0","id":"u","method":"bogus","params":{}}"#,
            json!("u"),
        ),
        ("method case matters", r#"{"jsonrpc":"2.0","id":10,"method":"PING"}"#, json!(10)),
    ];
    for driver in DRIVERS {
        let server = Server::on(driver, &[]);
        let sid = open_session(&server);
        for (name, body, want) in &cases {
            let r = post(&server, &[("Mcp-Session-Id", &sid)], body);
            assert_eq!(r.status, 200, "{driver}: {name}");
            assert_eq!(r.json(), *want, "{driver}: {name}");
        }
        for (name, body, id) in &unknown {
            let r = post(&server, &[("Mcp-Session-Id", &sid)], body);
            assert_eq!(r.status, 200, "{driver}: {name}: {}", r.text());
            let v = r.json();
            assert_eq!(v["id"], *id, "{driver}: {name}");
            assert_eq!(v["error"]["code"], -32601, "{driver}: {name}: {v}");
        }
    }
}

#[test]
fn idle_sessions_expire() {
    for driver in DRIVERS {
        let (server, metrics) = server_with_metrics(driver, &["--session-idle-secs", "1"]);
        let sid = open_session(&server);
        // Alive right after creation.
        let r = post(&server, &[("Mcp-Session-Id", &sid)], &ping(1));
        assert_eq!(r.status, 200, "{driver}: fresh session");
        // Wait on the expiry counter, not on requests: a request would keep the session alive.
        let what = format!("{driver}: the idle session to expire");
        let sample = "tidemark_sessions_expired_total";
        wait_metric(&metrics, sample, Duration::from_secs(5), &what, |n| n > 0);
        let r = post(&server, &[("Mcp-Session-Id", &sid)], INITIALIZED);
        assert_refused(&r, 404, &format!("{driver}: idle session expired"));
        // The client starts over (MCP: a 404 means initialize again).
        let fresh = open_session(&server);
        assert_ne!(fresh, sid, "{driver}");
    }
}

#[test]
fn a_session_whose_client_opened_a_get_and_left_expires() {
    // Goal: the standalone GET stream keeps a session alive only while a connection holds it;
    // a client that opened it and went away must not pin its session forever. Method: open the
    // GET stream, cut it, then wait for the expiry counter with --session-idle-secs 1.
    for driver in DRIVERS {
        let (server, metrics) = server_with_metrics(driver, &["--session-idle-secs", "1"]);
        let sid = open_session(&server);
        let raw = request(
            "GET",
            &server.path,
            &server.host(),
            &[("Accept", "text/event-stream"), ("Mcp-Session-Id", &sid)],
            None,
        );
        let mut get = support::SseStream::open(&server, &raw);
        assert_eq!(get.status, 200, "{driver}: GET stream");
        assert!(get.next_event().expect("priming").is_priming(), "{driver}");
        get.cut();
        let what = format!("{driver}: the session of a left GET stream to expire (not pinned)");
        let sample = "tidemark_sessions_expired_total";
        wait_metric(&metrics, sample, Duration::from_secs(5), &what, |n| n > 0);
        let r = post(&server, &[("Mcp-Session-Id", &sid)], INITIALIZED);
        assert_refused(&r, 404, &format!("{driver}: expired"));
    }
}

#[test]
fn sessions_are_served_from_any_connection_on_any_core() {
    const SESSIONS: usize = 8;
    const CONNECTIONS: u64 = 8;
    for driver in DRIVERS {
        let (server, metrics) = server_with_metrics(driver, &["--threads", "2"]);
        let sids: Vec<String> = (0..SESSIONS).map(|_| open_session(&server)).collect();
        for (i, sid) in sids.iter().enumerate() {
            for c in 0..CONNECTIONS {
                let what = format!("{driver}: session {i} connection {c}");
                // Two requests, one after the other, on each fresh connection: the second runs
                // on the connection the first one may have moved to the owner core.
                let mut s = server.connect();
                for id in [2 * c + 1, 2 * c + 2] {
                    let body = ping(id);
                    let mut hh = POST_HEADERS.to_vec();
                    hh.push(("Mcp-Session-Id", sid));
                    send(&mut s, &request("POST", &server.path, &server.host(), &hh, Some(&body)));
                    let r = read_response(&mut s);
                    assert_eq!(r.status, 200, "{what}: {}", r.text());
                    assert_eq!(r.json(), json!({"jsonrpc":"2.0","id":id,"result":{}}), "{what}");
                }
            }
            // A streamed answer (tools/call is SSE) through a fresh connection as well.
            let body = call(100, "echo", r#"{"text":"over there"}"#, false);
            let mut st = call_stream(&server, sid, &body, &[]);
            assert_eq!(st.status, 200, "{driver}: session {i} tools/call");
            let last = st.rest().last().expect("events").json();
            assert_eq!(last["id"], 100, "{driver}: session {i}");
            assert_eq!(last["result"]["content"][0]["text"], "over there", "{driver}: session {i}");
        }
        let text = scrape(&metrics);
        let handoffs = metric(&text, "tidemark_handoffs_total");
        assert!(handoffs > 0, "{driver}: no request was handed to its owner core:\n{text}");
        // Delete from fresh connections as well: each is found on its owner core.
        for sid in &sids {
            let r = exchange(&server, &raw(&server, "DELETE", Some(sid), &[], ""));
            assert!(matches!(r.status, 200 | 204), "{driver}: DELETE {sid}: {}", r.status);
            let r = post(&server, &[("Mcp-Session-Id", sid)], &ping(1));
            assert_eq!(r.status, 404, "{driver}: after DELETE {sid}");
        }
    }
}
