//! Goal: browser pages of a listed `--allowed-origin` can use the endpoint (CORS, WHATWG Fetch
//! §3.2), and nobody else gains anything: a preflight from a listed origin gets 204 with the
//! methods and every MCP request header; every kind of answer to a listed origin (JSON, 202,
//! SSE heads, refusals, 409, 422, 413, DELETE) carries `Access-Control-Allow-Origin` (echoed
//! once, never `*`), the exposed headers and `Vary: Origin`; an unlisted foreign origin stays
//! 403 (preflights too); a loopback origin that is not listed stays admitted without CORS
//! headers; no `Origin` means the answers of before, byte for byte in their headers.
//! Method: the real binary on 127.0.0.1:0 on both drivers with `--threads 2` (a fresh
//! connection lands on the non-owner core about half the time, so hand-offs are covered), raw
//! HTTP/1.1 over blocking `TcpStream`s, tables of cases, counters read from `/metrics`.
mod support;

use support::*;

/// The origin the servers here list with `--allowed-origin`.
const LISTED: &str = "http://127.0.0.1:8000";
/// A page on another loopback port: admitted by the DNS-rebinding rule, not listed.
const LOOPBACK_UNLISTED: &str = "http://localhost:8001";
/// `--max-body-bytes` of the servers here (the 413 case).
const BODY_MAX: usize = 1024;
/// `Access-Control-Allow-Headers` of every preflight answer, before any echoed param header.
const ALLOWED_HEADERS: &str = "Content-Type, Accept, Authorization, Mcp-Session-Id, \
    MCP-Protocol-Version, Last-Event-ID, Idempotency-Key, Mcp-Method, Mcp-Name";
const EXPOSED: &str =
    "Mcp-Session-Id, Last-Event-ID, Mcp-Stream-Resumable, Retry-After, WWW-Authenticate";

fn start(driver: &str) -> (Server, String) {
    let body_max = BODY_MAX.to_string();
    let args = ["--threads", "2", "--allowed-origin", LISTED, "--max-body-bytes", &body_max];
    server_with_metrics(driver, &args)
}

/// Every value of header `name` (a test must see a CORS header exactly once).
fn all<'r>(headers: &'r [(String, String)], name: &str) -> Vec<&'r str> {
    headers.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str()).collect()
}

/// The answer is shared with `LISTED`: each CORS header once, with its exact value.
fn assert_shared(headers: &[(String, String)], what: &str) {
    assert_eq!(all(headers, "Access-Control-Allow-Origin"), [LISTED], "{what}: {headers:?}");
    assert_eq!(all(headers, "Access-Control-Expose-Headers"), [EXPOSED], "{what}");
    assert_eq!(all(headers, "Vary"), ["Origin"], "{what}");
    assert!(all(headers, "Access-Control-Allow-Credentials").is_empty(), "{what}");
}

/// The answer carries no CORS header at all.
fn assert_not_shared(headers: &[(String, String)], what: &str) {
    for (name, _) in headers {
        let lower = name.to_ascii_lowercase();
        assert!(!lower.starts_with("access-control-"), "{what}: {name} in {headers:?}");
        assert_ne!(lower, "vary", "{what}: {headers:?}");
    }
}

fn preflight(server: &Server, origin: Option<&str>, extra: &[(&str, &str)]) -> Response {
    let mut h: Vec<(&str, &str)> = origin.map(|o| ("Origin", o)).into_iter().collect();
    h.extend_from_slice(extra);
    exchange(server, &request("OPTIONS", &server.path, &server.host(), &h, None))
}

#[test]
fn a_preflight_from_a_listed_origin_gets_204_with_every_mcp_header() {
    for driver in DRIVERS {
        let (server, admin) = start(driver);
        let requested =
            "content-type,mcp-param-region,mcp-protocol-version,mcp-session-id,x-custom";
        let r = preflight(
            &server,
            Some(LISTED),
            &[
                ("Access-Control-Request-Method", "POST"),
                ("Access-Control-Request-Headers", requested),
            ],
        );
        let what = format!("{driver}: preflight");
        assert_eq!(r.status, 204, "{what}: {}", r.text());
        assert!(r.body.is_empty(), "{what}");
        assert_eq!(r.header("Content-Length"), None, "{what}: RFC 9110 §8.6: none on a 204");
        assert_shared(&r.headers, &what);
        assert_eq!(
            all(&r.headers, "Access-Control-Allow-Methods"),
            ["GET, POST, DELETE, OPTIONS"],
            "{what}"
        );
        // The param header is echoed as asked; the unknown one is left out (the browser then
        // refuses that request itself).
        let allowed = format!("{ALLOWED_HEADERS}, mcp-param-region");
        assert_eq!(all(&r.headers, "Access-Control-Allow-Headers"), [allowed.as_str()], "{what}");
        assert_eq!(all(&r.headers, "Access-Control-Max-Age"), ["7200"], "{what}");
        assert_eq!(r.header("Access-Control-Allow-Private-Network"), None, "{what}");

        // Private Network Access asked for: granted, the listing being the operator's consent.
        let r = preflight(
            &server,
            Some(LISTED),
            &[
                ("Access-Control-Request-Method", "DELETE"),
                ("Access-Control-Request-Private-Network", "true"),
            ],
        );
        assert_eq!(r.status, 204, "{driver}: PNA preflight");
        assert_eq!(r.header("Access-Control-Allow-Private-Network"), Some("true"), "{driver}");
        assert_eq!(
            all(&r.headers, "Access-Control-Allow-Headers"),
            [ALLOWED_HEADERS],
            "{driver}: nothing asked, the whole MCP set"
        );

        let text = scrape(&admin);
        assert_eq!(metric(&text, "tidemark_cors_preflights_total"), 2, "{driver}");
        assert_eq!(metric(&text, "tidemark_cors_headers_left_out_total"), 1, "{driver}");
    }
}

#[test]
fn other_preflights_keep_the_answers_of_before() {
    for driver in DRIVERS {
        let (server, admin) = start(driver);
        let acrm = ("Access-Control-Request-Method", "POST");
        let acrh = ("Access-Control-Request-Headers", "content-type");
        // (case, Origin, carries Access-Control-Request-Method, status, shared)
        let cases: [(&str, Option<&str>, bool, u16, bool); 6] = [
            ("unlisted foreign origin", Some("http://evil.example"), true, 403, false),
            ("loopback prefix of the listed origin", Some("http://127.0.0.1:80"), true, 405, false),
            ("loopback origin, unlisted", Some(LOOPBACK_UNLISTED), true, 405, false),
            ("no Origin", None, true, 405, false),
            ("listed origin, no request method", Some(LISTED), false, 405, true),
            ("opaque origin", Some("null"), true, 403, false),
        ];
        for (name, origin, asks_method, status, shared) in cases {
            let what = format!("{driver}: {name}");
            let extra = if asks_method { vec![acrm, acrh] } else { vec![acrh] };
            let r = preflight(&server, origin, &extra);
            assert_eq!(r.status, status, "{what}: {}", r.text());
            assert!(r.json()["error"]["code"].is_i64(), "{what}: a JSON-RPC error body");
            if status == 405 {
                assert_eq!(r.header("Allow"), Some("GET, POST, DELETE"), "{what}");
            }
            if shared {
                assert_shared(&r.headers, &what);
                assert!(r.header("Access-Control-Allow-Methods").is_none(), "{what}");
            } else {
                assert_not_shared(&r.headers, &what);
            }
        }
        // A preflight to another path is not the endpoint's: 404 (shared: the origin is listed).
        let raw = request("OPTIONS", "/other", &server.host(), &[("Origin", LISTED), acrm], None);
        let r = exchange(&server, &raw);
        assert_eq!(r.status, 404, "{driver}: other path");
        assert_shared(&r.headers, &format!("{driver}: other path"));
        assert_eq!(metric(&scrape(&admin), "tidemark_cors_preflights_total"), 0, "{driver}");
    }
}

/// POST with the MCP headers plus `Origin: origin` (when given) and `extra`.
fn post_from(
    server: &Server,
    origin: Option<&str>,
    extra: &[(&str, &str)],
    body: &str,
) -> Response {
    let mut h: Vec<(&str, &str)> = origin.map(|o| ("Origin", o)).into_iter().collect();
    h.extend_from_slice(extra);
    post(server, &h, body)
}

#[test]
fn every_kind_of_answer_to_a_listed_origin_is_shared() {
    for driver in DRIVERS {
        let (server, _admin) = start(driver);
        let origin = [("Origin", LISTED)];

        let r = post(&server, &origin, INIT);
        assert_eq!(r.status, 200, "{driver}: initialize: {}", r.text());
        assert_shared(&r.headers, &format!("{driver}: initialize (JSON)"));
        let sid = r.header("Mcp-Session-Id").expect("session id").to_owned();
        let in_session = [("Origin", LISTED), ("Mcp-Session-Id", sid.as_str())];

        let r =
            post(&server, &in_session, r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        assert_eq!(r.status, 202, "{driver}");
        assert_shared(&r.headers, &format!("{driver}: 202"));

        let r = post(&server, &in_session, r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
        assert_eq!(r.status, 200, "{driver}");
        assert_shared(&r.headers, &format!("{driver}: tools/list (JSON)"));

        // An SSE head: the CORS lines sit in the head, the stream after it is whole.
        let mut s =
            call_stream(&server, &sid, &call(2, "slow_counter", r#"{"steps":3}"#, true), &origin);
        assert_eq!(s.status, 200, "{driver}: SSE");
        assert_shared(&s.headers, &format!("{driver}: SSE head"));
        assert_eq!(s.header("Content-Type"), Some("text/event-stream"), "{driver}");
        let events = s.rest();
        let progress: Vec<u64> = events.iter().filter_map(progress_of).collect();
        assert_eq!(progress, [1, 2, 3], "{driver}: SSE progress");
        assert!(s.ended(), "{driver}: the stream ended with its last chunk");

        // The same id again for a completed, non-idempotent call: 409 with the resume hint,
        // whose headers the page can read (exposed).
        let r = post(&server, &in_session, &call(2, "slow_counter", r#"{"steps":3}"#, true));
        assert_eq!(r.status, 409, "{driver}: {}", r.text());
        assert_shared(&r.headers, &format!("{driver}: 409"));
        assert!(r.header("Last-Event-ID").is_some(), "{driver}: 409 hint");

        // One Idempotency-Key, other params: 422.
        let keyed =
            [("Origin", LISTED), ("Mcp-Session-Id", sid.as_str()), ("Idempotency-Key", "k")];
        let first = post(&server, &keyed, &call(3, "echo", r#"{"text":"a"}"#, false));
        assert_eq!(first.status, 200, "{driver}: keyed echo: {}", first.text());
        let r = post(&server, &keyed, &call(4, "echo", r#"{"text":"b"}"#, false));
        assert_eq!(r.status, 422, "{driver}: {}", r.text());
        assert_shared(&r.headers, &format!("{driver}: 422"));

        // Refusals of the protocol path and of the edge.
        let r = post(&server, &origin, r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#);
        assert_eq!(r.status, 400, "{driver}: no session");
        assert_shared(&r.headers, &format!("{driver}: 400"));
        let r = post(
            &server,
            &[("Origin", LISTED), ("Mcp-Session-Id", "nope")],
            r#"{"jsonrpc":"2.0","id":6,"method":"ping"}"#,
        );
        assert_eq!(r.status, 404, "{driver}: unknown session");
        assert_shared(&r.headers, &format!("{driver}: 404"));
        let raw = request(
            "POST",
            &server.path,
            &server.host(),
            &[
                ("Origin", LISTED),
                ("Content-Type", "text/plain"),
                ("Accept", "application/json, text/event-stream"),
            ],
            Some("{}"),
        );
        let r = exchange(&server, &raw);
        assert_eq!(r.status, 415, "{driver}");
        assert_shared(&r.headers, &format!("{driver}: 415"));

        // 413: refused by the connection before routing, shared all the same.
        let big = format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"ping","params":{{"pad":"{}"}}}}"#,
            "x".repeat(BODY_MAX)
        );
        let r = post(&server, &in_session, &big);
        assert_eq!(r.status, 413, "{driver}");
        assert_shared(&r.headers, &format!("{driver}: 413"));

        // The standalone GET stream's head.
        let raw = request(
            "GET",
            &server.path,
            &server.host(),
            &[("Origin", LISTED), ("Accept", "text/event-stream"), ("Mcp-Session-Id", &sid)],
            None,
        );
        let s = SseStream::open(&server, &raw);
        assert_eq!(s.status, 200, "{driver}: GET stream");
        assert_shared(&s.headers, &format!("{driver}: GET stream head"));
        s.cut();

        let raw = request("DELETE", &server.path, &server.host(), &in_session, None);
        let r = exchange(&server, &raw);
        assert_eq!(r.status, 200, "{driver}: DELETE");
        assert_shared(&r.headers, &format!("{driver}: DELETE"));
    }
}

#[test]
fn other_origins_get_no_cors_headers() {
    for driver in DRIVERS {
        let (server, _admin) = start(driver);
        let r = post_from(&server, Some("http://evil.example"), &[], INIT);
        assert_eq!(r.status, 403, "{driver}: unlisted foreign origin");
        assert_not_shared(&r.headers, &format!("{driver}: 403"));
        for origin in [Some(LOOPBACK_UNLISTED), None] {
            let what = format!("{driver}: Origin {origin:?}");
            let r = post_from(&server, origin, &[], INIT);
            assert_eq!(r.status, 200, "{what}: {}", r.text());
            assert_not_shared(&r.headers, &what);
            let sid = r.header("Mcp-Session-Id").expect("session id").to_owned();
            let extra: Vec<(&str, &str)> = origin.map(|o| ("Origin", o)).into_iter().collect();
            let mut s =
                call_stream(&server, &sid, &call(1, "echo", r#"{"text":"x"}"#, false), &extra);
            assert_eq!(s.status, 200, "{what}: SSE");
            assert_not_shared(&s.headers, &what);
            assert!(!s.rest().is_empty(), "{what}");
        }
    }
}

#[test]
fn a_preflight_and_its_request_share_one_connection() {
    // The 204 has no body and no Content-Length: the next response on the connection must
    // still be read from the right byte (keep-alive, pipelined).
    for driver in DRIVERS {
        let (server, _admin) = start(driver);
        let mut raw = request(
            "OPTIONS",
            &server.path,
            &server.host(),
            &[
                ("Origin", LISTED),
                ("Access-Control-Request-Method", "POST"),
                ("Access-Control-Request-Headers", "content-type"),
            ],
            None,
        );
        let mut h: Vec<(&str, &str)> = POST_HEADERS.to_vec();
        h.push(("Origin", LISTED));
        raw.extend_from_slice(&request("POST", &server.path, &server.host(), &h, Some(INIT)));
        let mut stream = server.connect();
        send(&mut stream, &raw);
        let responses = read_responses(&mut stream, 2);
        assert_eq!(responses[0].status, 204, "{driver}");
        assert_eq!(responses[1].status, 200, "{driver}: {}", responses[1].text());
        assert_shared(&responses[1].headers, &format!("{driver}: after the preflight"));
        assert_eq!(responses[1].json()["result"]["protocolVersion"], "2025-11-25", "{driver}");
    }
}
