//! Goal: the MCP 2026-07-28 ("modern", stateless) era on the shared endpoint as seen on the wire
//! (CONTRACT §5, spec-checklist §2): `server/discover`; the order of the header and `_meta`
//! checks and their codes (-32602, -32020, -32022); removed and unknown methods (404 -32601);
//! GET/DELETE (405); calls answered as JSON or as a stream without event ids; logs only with a
//! log level; a closed stream cancels its call; MRTR (`input_required`, a sealed `requestState`,
//! -32021); `subscriptions/listen`; `Mcp-*` headers given twice and `Mcp-Param-*` values
//! compared as bytes (-32020); and the legacy era left as it was. Method: the real binary
//! on 127.0.0.1:0 per io driver (`support::DRIVERS`) where cheap, raw HTTP/1.1 over blocking
//! `TcpStream`s, requests built by `Modern` (headers and `_meta` a 2026-07-28 client sends, each
//! case taking one away or changing it), tables of cases; cancellation through `/metrics`.
mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::*;

/// The revision under test.
const V: &str = "2026-07-28";
const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// One 2026-07-28 POST: its headers (besides Content-Type and Accept) and its JSON body. `new`
/// builds what a well-behaved client sends; the other methods take a part away or change it.
#[derive(Clone)]
struct Modern {
    headers: Vec<(String, String)>,
    body: Value,
}

impl Modern {
    /// `method` with `params` plus `_meta` (protocol version, no client capabilities, client
    /// info), and the headers `MCP-Protocol-Version`, `Mcp-Method` and, for the methods that
    /// name something, `Mcp-Name` (the params' `name` or `uri`).
    fn new(id: impl Into<Value>, method: &str, params: Value) -> Modern {
        let mut params = params;
        params["_meta"] = json!({
            META_VERSION: V,
            META_CAPABILITIES: {},
            META_CLIENT_INFO: { "name": "modern-test", "version": "1" },
        });
        let mut headers = vec![
            ("MCP-Protocol-Version".to_owned(), V.to_owned()),
            ("Mcp-Method".to_owned(), method.to_owned()),
        ];
        let named = match method {
            "tools/call" | "prompts/get" => params["name"].as_str(),
            "resources/read" => params["uri"].as_str(),
            _ => None,
        };
        if let Some(name) = named {
            headers.push(("Mcp-Name".to_owned(), name.to_owned()));
        }
        let body = json!({ "jsonrpc": "2.0", "id": id.into(), "method": method, "params": params });
        Modern { headers, body }
    }

    /// `tools/call` of `tool` with `arguments`.
    fn call(id: impl Into<Value>, tool: &str, arguments: Value) -> Modern {
        Modern::new(id, "tools/call", json!({ "name": tool, "arguments": arguments }))
    }

    /// Sets header `name` (replacing one of that name).
    fn header(mut self, name: &str, value: &str) -> Modern {
        self = self.without_header(name);
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    fn without_header(mut self, name: &str) -> Modern {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self
    }

    /// Sets `params._meta[key]`.
    fn meta(mut self, key: &str, value: Value) -> Modern {
        self.body["params"]["_meta"][key] = value;
        self
    }

    fn without_meta(mut self, key: &str) -> Modern {
        if let Some(meta) = self.body["params"]["_meta"].as_object_mut() {
            meta.remove(key);
        }
        self
    }

    /// Sets `params[key]` (beside `_meta`).
    fn param(mut self, key: &str, value: Value) -> Modern {
        self.body["params"][key] = value;
        self
    }

    fn without_param(mut self, key: &str) -> Modern {
        if let Some(params) = self.body["params"].as_object_mut() {
            params.remove(key);
        }
        self
    }

    fn raw(&self, server: &Server) -> Vec<u8> {
        let mut h: Vec<(&str, &str)> = POST_HEADERS.to_vec();
        h.extend(self.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())));
        let body = self.body.to_string();
        request("POST", &server.path, &server.host(), &h, Some(&body))
    }

    /// Sends on a fresh connection and reads the whole answer.
    fn send(&self, server: &Server) -> Response {
        exchange(server, &self.raw(server))
    }

    /// Sends on a fresh connection and reads the answer's head only (a stream read as it comes).
    fn open(&self, server: &Server) -> SseStream {
        SseStream::open(server, &self.raw(server))
    }
}

/// The `_meta` client capabilities that let a server ask for a form.
fn elicitation() -> Value {
    json!({ "elicitation": {} })
}

/// The JSON-RPC messages of an answer: the events of a stream, else the one JSON body.
fn messages_of(r: &Response) -> Vec<Value> {
    let stream = r.header("Content-Type").is_some_and(|t| t.starts_with("text/event-stream"));
    if stream {
        r.events().iter().map(Event::json).collect()
    } else {
        vec![r.json()]
    }
}

/// Asserts a JSON-RPC error answer with `status`, `code` and the request's `id`; returns the
/// error object.
fn assert_error(r: &Response, status: u16, code: i64, id: &Value, ctx: &str) -> Value {
    assert_eq!(r.status, status, "{ctx}: {}", r.text());
    assert!(
        r.header("Content-Type").is_some_and(|t| t.starts_with("application/json")),
        "{ctx}: {:?}",
        r.headers
    );
    let v = r.json();
    assert_eq!(v["jsonrpc"], "2.0", "{ctx}: {v}");
    assert_eq!(v["error"]["code"], code, "{ctx}: {v}");
    assert!(v["error"]["message"].is_string(), "{ctx}: {v}");
    assert_eq!(&v["id"], id, "{ctx}: the error carries the request's id: {v}");
    assert!(v.get("result").is_none(), "{ctx}: {v}");
    v["error"].clone()
}

/// Asserts a 200 JSON answer whose result is complete; returns the result.
fn assert_complete(r: &Response, id: &Value, ctx: &str) -> Value {
    assert_eq!(r.status, 200, "{ctx}: {}", r.text());
    assert_eq!(r.header("Content-Type"), Some("application/json"), "{ctx}: {:?}", r.headers);
    let v = r.json();
    assert_eq!(&v["id"], id, "{ctx}: {v}");
    assert_eq!(v["result"]["resultType"], "complete", "{ctx}: {v}");
    v["result"].clone()
}

/// The answer of a stateless server carries neither a session nor resumption.
fn assert_stateless_head(headers: &[(String, String)], ctx: &str) {
    let has = |name: &str| headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    assert!(!has("Mcp-Session-Id"), "{ctx}: no session in 2026-07-28: {headers:?}");
    assert!(!has("Mcp-Stream-Resumable"), "{ctx}: no resumption in 2026-07-28: {headers:?}");
}

/// The text of a tool result's first content block.
fn text_of(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_else(|| panic!("text result: {result}"))
}

/// Goal: `server/discover` (which every 2026-07-28 server MUST implement) says which revisions
/// are served, what the server can do, how long that may be cached and who it is, without
/// minting a session. Method: one discover per driver; the answer's members and headers.
#[test]
fn server_discover_describes_the_server_without_a_session() {
    for driver in DRIVERS {
        let server = Server::on(driver, &[]);
        let id = json!(1);
        let r = Modern::new(1, "server/discover", json!({})).send(&server);
        let ctx = format!("{driver}: server/discover");
        let result = assert_complete(&r, &id, &ctx);
        assert_stateless_head(&r.headers, &ctx);
        let versions = result["supportedVersions"].as_array().expect("supportedVersions array");
        for v in [V, "2025-11-25"] {
            assert!(versions.iter().any(|s| s == v), "{ctx}: {v} in {versions:?}");
        }
        assert!(result["capabilities"].is_object(), "{ctx}: {result}");
        assert!(result["ttlMs"].is_u64(), "{ctx}: ttlMs is an integer ≥ 0: {result}");
        let scope = result["cacheScope"].as_str().unwrap_or("");
        assert!(matches!(scope, "public" | "private"), "{ctx}: cacheScope: {result}");
        let name = &result["_meta"][META_SERVER_INFO]["name"];
        assert!(name.as_str().is_some_and(|n| !n.is_empty()), "{ctx}: serverInfo: {result}");
    }
}

/// Goal: the checks a 2026-07-28 request passes, in the order the spec and the conformance suite
/// expect: `_meta` parts (-32602), then `MCP-Protocol-Version` against `_meta` (-32020 before
/// -32022), then `Mcp-Method` and `Mcp-Name` (-32020), each a 400 carrying the request's id; a
/// `Mcp-Name` in the `=?base64?…?=` form is compared decoded. Method: a well-formed `tools/call`
/// of `echo` (and a `tools/list`) with one part taken away or changed per case, each with its
/// own id; then the well-formed ones, which must be served.
#[test]
fn header_and_meta_checks_come_in_order_with_their_codes() {
    let echo = |id: u64| Modern::call(id, "echo", json!({ "text": "hi" }));
    let list = |id: u64| Modern::new(id, "tools/list", json!({}));
    // (case, request, JSON-RPC code); every one is a 400.
    let cases: Vec<(&str, Modern, i64)> = vec![
        ("no _meta", echo(10).without_param("_meta"), -32602),
        ("_meta not an object", echo(11).param("_meta", json!("2026-07-28")), -32602),
        ("no _meta protocolVersion", echo(12).without_meta(META_VERSION), -32602),
        ("no _meta clientCapabilities", echo(13).without_meta(META_CAPABILITIES), -32602),
        ("clientCapabilities not an object", echo(14).meta(META_CAPABILITIES, json!(1)), -32602),
        (
            "_meta version v999 under header 2026-07-28",
            echo(15).meta(META_VERSION, json!("v999")),
            -32020,
        ),
        (
            "modern _meta without MCP-Protocol-Version",
            echo(16).without_header("MCP-Protocol-Version"),
            -32020,
        ),
        ("no Mcp-Method", echo(17).without_header("Mcp-Method"), -32020),
        ("Mcp-Method of another method", echo(18).header("Mcp-Method", "tools/list"), -32020),
        ("no Mcp-Method on tools/list", list(19).without_header("Mcp-Method"), -32020),
        ("Mcp-Method differs on tools/list", list(20).header("Mcp-Method", "prompts/list"), -32020),
        ("Mcp-Method differs in case", list(21).header("Mcp-Method", "Tools/List"), -32020),
        ("no Mcp-Name", echo(22).without_header("Mcp-Name"), -32020),
        ("Mcp-Name of another tool", echo(23).header("Mcp-Name", "greet"), -32020),
        (
            "Mcp-Name base64 of another tool",
            echo(24).header("Mcp-Name", "=?base64?Z3JlZXQ=?="),
            -32020,
        ),
        ("Mcp-Name base64 not base64", echo(25).header("Mcp-Name", "=?base64?!!?="), -32020),
    ];
    for driver in DRIVERS {
        let server = Server::on(driver, &[]);
        for (name, req, code) in &cases {
            let ctx = format!("{driver}: {name}");
            let id = req.body["id"].clone();
            assert_error(&req.send(&server), 400, *code, &id, &ctx);
        }
        // Both the header and _meta name a revision we do not serve: -32022 with what we do.
        let req = echo(30).header("MCP-Protocol-Version", "v999").meta(META_VERSION, json!("v999"));
        let error = assert_error(&req.send(&server), 400, -32022, &json!(30), driver);
        let supported = error["data"]["supported"].as_array().expect("data.supported array");
        assert!(supported.iter().any(|v| v == V), "{driver}: {error}");
        assert_eq!(error["data"]["requested"], "v999", "{driver}: {error}");
        // The well-formed requests, and the Mcp-Name sentinel decoding to the right name.
        let ok = [
            ("plain", echo(40)),
            ("Mcp-Name as =?base64?…?=", echo(41).header("Mcp-Name", "=?base64?ZWNobw==?=")),
            ("header names in lower case", {
                let mut req = echo(42);
                req.headers.iter_mut().for_each(|(n, _)| *n = n.to_ascii_lowercase());
                req
            }),
        ];
        for (name, req) in ok {
            let ctx = format!("{driver}: {name}");
            let id = req.body["id"].clone();
            let result = assert_complete(&req.send(&server), &id, &ctx);
            assert_eq!(text_of(&result), "hi", "{ctx}: {result}");
        }
    }
}

/// Goal: the methods 2026-07-28 removed (`initialize`, `ping`, `logging/setLevel`,
/// `resources/subscribe`) and an unknown one get 404 with -32601 and the request's id; GET and
/// DELETE of a 2026-07-28 client (no session) get 405. Method: each as a well-formed modern
/// request (`initialize` with its legacy params plus the modern `_meta`).
#[test]
fn removed_and_unknown_methods_get_404_and_get_delete_405() {
    let cases: [(&str, Value); 5] = [
        (
            "initialize",
            json!({ "protocolVersion": V, "capabilities": {},
                    "clientInfo": { "name": "modern-test", "version": "1" } }),
        ),
        ("ping", json!({})),
        ("logging/setLevel", json!({ "level": "info" })),
        ("resources/subscribe", json!({ "uri": "demo://x" })),
        ("tools/frobnicate", json!({})),
    ];
    for driver in DRIVERS {
        let server = Server::on(driver, &[]);
        for (i, (method, params)) in cases.iter().enumerate() {
            let id = json!(format!("req-{i}"));
            let r = Modern::new(id.clone(), method, params.clone()).send(&server);
            let ctx = format!("{driver}: {method}");
            assert_error(&r, 404, -32601, &id, &ctx);
            assert_stateless_head(&r.headers, &ctx);
        }
        let version = ("MCP-Protocol-Version", V);
        let get = [("Accept", "text/event-stream"), version];
        for (method, headers) in [("GET", &get[..]), ("DELETE", &[version][..])] {
            let r =
                exchange(&server, &request(method, &server.path, &server.host(), headers, None));
            assert_eq!(r.status, 405, "{driver}: {method} without a session: {}", r.text());
        }
    }
}

/// Goal: a call that produces nothing before its result is answered as plain JSON with
/// `resultType: "complete"` and no session or resumption header; `tools/list` carries the
/// caching hints. Method: `echo` and `tools/list` on the demo tools, per driver.
#[test]
fn a_quick_call_is_json_and_lists_carry_cache_hints() {
    for driver in DRIVERS {
        let server = Server::on(driver, &["--tools", "demo"]);
        let id = json!("call-1");
        let r = Modern::call(id.clone(), "echo", json!({ "text": "tide" })).send(&server);
        let ctx = format!("{driver}: echo");
        let result = assert_complete(&r, &id, &ctx);
        assert_stateless_head(&r.headers, &ctx);
        assert_eq!(text_of(&result), "tide", "{ctx}: {result}");

        let r = Modern::new(2, "tools/list", json!({})).send(&server);
        let ctx = format!("{driver}: tools/list");
        let result = assert_complete(&r, &json!(2), &ctx);
        assert_stateless_head(&r.headers, &ctx);
        let tools = result["tools"].as_array().expect("tools array");
        assert!(tools.iter().any(|t| t["name"] == "echo"), "{ctx}: {result}");
        assert!(result["ttlMs"].is_u64(), "{ctx}: ttlMs is an integer ≥ 0: {result}");
        let scope = result["cacheScope"].as_str().unwrap_or("");
        assert!(matches!(scope, "public" | "private"), "{ctx}: cacheScope: {result}");
    }
}

/// Goal: a call that reports progress is answered as an SSE stream carrying exactly its
/// progress notifications (with the client's token) and then its result (with the request's
/// id), with no event ids (no resumption in 2026-07-28) and no `Mcp-Stream-Resumable`. Method:
/// `slow_counter {steps:3}` with a string progress token, read whole; the raw stream's lines.
#[test]
fn progress_streams_without_event_ids() {
    for driver in DRIVERS {
        let server = Server::on(driver, &["--tools", "demo"]);
        let req = Modern::call(7, "slow_counter", json!({ "steps": 3 }))
            .meta("progressToken", json!("p-7"));
        let r = req.send(&server);
        let ctx = format!("{driver}: slow_counter");
        assert_eq!(r.status, 200, "{ctx}: {}", r.text());
        assert_eq!(r.header("Content-Type"), Some("text/event-stream"), "{ctx}: {:?}", r.headers);
        assert_stateless_head(&r.headers, &ctx);
        let text = r.text();
        for line in text.lines() {
            assert!(!line.starts_with("id:"), "{ctx}: an event id in 2026-07-28: {text:?}");
            assert!(!line.starts_with("retry:"), "{ctx}: a retry hint in 2026-07-28: {text:?}");
        }
        let messages = messages_of(&r);
        assert_eq!(messages.len(), 4, "{ctx}: 3 progress and the result: {messages:#?}");
        for (step, m) in messages[..3].iter().enumerate() {
            assert_eq!(m["method"], "notifications/progress", "{ctx}: {m}");
            assert!(m.get("id").is_none(), "{ctx}: a notification: {m}");
            assert_eq!(m["params"]["progressToken"], "p-7", "{ctx}: {m}");
            assert_eq!(m["params"]["progress"].as_f64(), Some(step as f64 + 1.0), "{ctx}: {m}");
            assert_eq!(m["params"]["total"].as_f64(), Some(3.0), "{ctx}: {m}");
        }
        let last = &messages[3];
        assert_eq!(last["id"], 7, "{ctx}: the result is last: {last}");
        assert_eq!(last["result"]["resultType"], "complete", "{ctx}: {last}");
        assert!(last["result"]["content"][0]["text"].is_string(), "{ctx}: {last}");
    }
}

/// Goal: a server MUST NOT send `notifications/message` unless the request set
/// `_meta["io.modelcontextprotocol/logLevel"]`; with a level, the messages at or above it come
/// on the request's stream before its result. Method: the conformance logging tools (one
/// pausing between its logs, one not) without a level, with `info`, and with `error` (above
/// what they log).
#[test]
fn logs_are_sent_only_at_the_requested_level() {
    // (tool, log level, messages expected)
    let cases: [(&str, Option<&str>, usize); 6] = [
        ("test_tool_with_logging", None, 0),
        ("test_tool_with_logging", Some("info"), 3),
        ("test_tool_with_logging", Some("error"), 0),
        ("test_logging_tool", None, 0),
        ("test_logging_tool", Some("info"), 3),
        ("test_logging_tool", Some("error"), 0),
    ];
    for driver in DRIVERS {
        let server = Server::on(driver, &["--tools", "conformance"]);
        for (i, (tool, level, expected)) in cases.into_iter().enumerate() {
            let ctx = format!("{driver}: {tool} at {level:?}");
            let mut req = Modern::call(100 + i as u64, tool, json!({}));
            if let Some(level) = level {
                req = req.meta(META_LOG_LEVEL, json!(level));
            }
            let r = req.send(&server);
            assert_eq!(r.status, 200, "{ctx}: {}", r.text());
            let messages = messages_of(&r);
            let (last, before) = messages.split_last().expect("at least the result");
            assert_eq!(last["id"], 100 + i as u64, "{ctx}: the result is last: {messages:#?}");
            assert_eq!(last["result"]["resultType"], "complete", "{ctx}: {last}");
            let logs: Vec<&Value> =
                before.iter().filter(|m| m["method"] == "notifications/message").collect();
            assert_eq!(logs.len(), expected, "{ctx}: {messages:#?}");
            assert_eq!(before.len(), expected, "{ctx}: nothing else before the result");
            for log in logs {
                assert_eq!(log["params"]["level"], "info", "{ctx}: {log}");
            }
        }
    }
}

/// Goal: closing a 2026-07-28 response stream cancels the request (MUST): the server counts it
/// in `tidemark_modern_cancelled_total`, and keeps serving. Method: `slow_counter` of 50 steps
/// 100 ms apart with a progress token; the client reads the first progress event, closes the
/// connection, then scrapes `/metrics` until the counter is 1 (bounded by a generous deadline)
/// and calls `echo` on a new connection.
#[test]
fn a_closed_stream_cancels_its_call() {
    for driver in DRIVERS {
        let (server, admin) = server_with_metrics(driver, &["--tools", "demo"]);
        let ctx = driver;
        let cancelled = |admin: &str| metric(&scrape(admin), "tidemark_modern_cancelled_total");
        assert_eq!(cancelled(&admin), 0, "{ctx}: nothing cancelled yet");
        let req = Modern::call(1, "slow_counter", json!({ "steps": 50, "delay_ms": 100 }))
            .meta("progressToken", json!(1));
        let mut s = req.open(&server);
        assert_eq!(s.status, 200, "{ctx}");
        assert_eq!(s.header("Content-Type"), Some("text/event-stream"), "{ctx}: {:?}", s.headers);
        assert_stateless_head(&s.headers, ctx);
        let first = s.next_event().expect("first progress event");
        assert!(first.id.is_none(), "{ctx}: no event ids: {first:?}");
        let first = first.json();
        assert_eq!(first["method"], "notifications/progress", "{ctx}: {first}");
        assert_eq!(first["params"]["progress"].as_f64(), Some(1.0), "{ctx}: {first}");
        s.cut();
        let what = format!("{ctx}: the closed stream counted as a cancellation");
        let sample = "tidemark_modern_cancelled_total";
        let seen = wait_metric(&admin, sample, Duration::from_secs(15), &what, |n| n > 0);
        assert_eq!(seen, 1, "{ctx}: the closed stream was counted as a cancellation");
        let id = json!(2);
        let r = Modern::call(2, "echo", json!({ "text": "still here" })).send(&server);
        let result = assert_complete(&r, &id, &format!("{ctx}: after the cancel"));
        assert_eq!(text_of(&result), "still here", "{ctx}");
        assert_eq!(cancelled(&admin), 1, "{ctx}: a finished call is not a cancellation");
    }
}

/// Goal: `--sse-first-write-hold-us` on a 2026-07-28 call that does not answer in its first
/// poll (a bridged call): the answer is the same with the hold off, at its default and at its
/// largest, it comes when the call ends (not when the hold does), and a client that closes
/// the stream during the hold still cancels the call. Method: `slow_counter` of 3 steps 5 ms
/// apart without a progress token (nothing is streamed before the answer) under each hold,
/// the bodies compared; under the 1 s hold the answer within 800 ms; then a 50-step call cut
/// right after its request is sent, and `tidemark_modern_cancelled_total` waited for.
#[test]
fn the_first_write_hold_leaves_a_running_calls_answer_and_its_cancellation() {
    let call = Modern::call(1, "slow_counter", json!({ "steps": 3, "delay_ms": 5 }));
    let mut bodies = Vec::new();
    for hold in ["0", "1000", "1000000"] {
        let args = ["--tools", "demo", "--sse-first-write-hold-us", hold];
        let (server, admin) = server_with_metrics("uring", &args);
        let ctx = format!("hold {hold} µs");
        let started = std::time::Instant::now();
        let r = call.send(&server);
        let took = started.elapsed();
        assert_eq!(r.status, 200, "{ctx}: {}", r.text());
        assert_eq!(r.header("Content-Type"), Some("application/json"), "{ctx}: {:?}", r.headers);
        assert!(took < Duration::from_millis(800), "{ctx}: the answer waited for the hold");
        bodies.push(r.json());
        if hold != "1000000" {
            continue;
        }
        // Cut during the hold: nothing was written yet, and the call is still cancelled.
        let long = Modern::call(2, "slow_counter", json!({ "steps": 50, "delay_ms": 100 }));
        let mut s = std::net::TcpStream::connect(server.addr).expect("connect");
        std::io::Write::write_all(&mut s, &long.raw(&server)).expect("send");
        std::thread::sleep(Duration::from_millis(50));
        drop(s);
        let what = format!("{ctx}: the stream closed during the hold cancelled its call");
        let sample = "tidemark_modern_cancelled_total";
        let seen = wait_metric(&admin, sample, Duration::from_secs(15), &what, |n| n > 0);
        assert_eq!(seen, 1, "{what}");
    }
    assert!(bodies.windows(2).all(|w| w[0] == w[1]), "the same answer: {bodies:#?}");
    assert_eq!(bodies[0]["result"]["resultType"], "complete", "{:?}", bodies[0]);
}

/// Goal: MRTR with the demo `greet` tool: the first round answers `input_required` with an
/// elicitation request and a `requestState`; a retry with a new id, the answer and that state
/// completes it; a state altered by one character, or presented with another tool or other
/// arguments, is refused (-32602); a client without the elicitation capability gets 400 -32021
/// naming it. Method: the rounds as separate 2026-07-28 requests on fresh connections.
#[test]
fn greet_asks_for_input_and_finishes_on_the_retry() {
    for driver in DRIVERS {
        let server = Server::on(driver, &["--tools", "demo"]);
        let greet =
            |id: u64| Modern::call(id, "greet", json!({})).meta(META_CAPABILITIES, elicitation());
        let r = greet(1).send(&server);
        let ctx = format!("{driver}: round 1");
        assert_eq!(r.status, 200, "{ctx}: {}", r.text());
        assert_stateless_head(&r.headers, &ctx);
        let v = r.json();
        assert_eq!(v["id"], 1, "{ctx}: {v}");
        let result = &v["result"];
        assert_eq!(result["resultType"], "input_required", "{ctx}: {v}");
        assert_eq!(result["inputRequests"]["name"]["method"], "elicitation/create", "{ctx}: {v}");
        assert!(result["inputRequests"]["name"]["params"]["message"].is_string(), "{ctx}: {v}");
        let state = result["requestState"].as_str().expect("requestState string").to_owned();
        assert!(!state.is_empty(), "{ctx}");

        let answer = json!({ "name": { "action": "accept", "content": { "name": "Ada" } } });
        let retry = |req: Modern, state: &str| {
            req.param("inputResponses", answer.clone())
                .param("requestState", json!(state))
                .send(&server)
        };
        let r = retry(greet(2), &state);
        let ctx = format!("{driver}: round 2");
        let result = assert_complete(&r, &json!(2), &ctx);
        assert_eq!(text_of(&result), "Hello, Ada!", "{ctx}: {result}");

        // The state altered by one character (in the middle of its payload).
        let mut altered = state.clone().into_bytes();
        let at = altered.len() / 4;
        altered[at] = if altered[at] == b'A' { b'B' } else { b'A' };
        let altered = String::from_utf8(altered).expect("ascii");
        let refused: [(&str, u64, Modern, &str); 4] = [
            ("one character changed", 3, greet(3), &altered),
            ("another tool", 4, Modern::call(4, "echo", json!({ "text": "x" })), &state),
            (
                "other arguments",
                5,
                Modern::call(5, "greet", json!({ "extra": 1 }))
                    .meta(META_CAPABILITIES, elicitation()),
                &state,
            ),
            ("not a state at all", 6, greet(6), "not-a-state"),
        ];
        for (name, id, req, state) in refused {
            let ctx = format!("{driver}: requestState {name}");
            let r = retry(req, state);
            assert_error(&r, 400, -32602, &json!(id), &ctx);
        }
        // The state still works unaltered: refusals consumed nothing.
        let r = retry(greet(7), &state);
        let result = assert_complete(&r, &json!(7), &format!("{driver}: the state again"));
        assert_eq!(text_of(&result), "Hello, Ada!", "{driver}: {result}");

        // A client that cannot answer an elicitation is told what it lacks.
        let r = Modern::call(8, "greet", json!({})).send(&server);
        let ctx = format!("{driver}: no elicitation capability");
        let error = assert_error(&r, 400, -32021, &json!(8), &ctx);
        let required = &error["data"]["requiredCapabilities"];
        assert!(required["elicitation"].is_object(), "{ctx}: {error}");
    }
}

/// Goal: the MRTR decisions the revision leaves open, as docs/wire.md states them (issue 17 item
/// 9b): for a key answered both in the `requestState` and in `inputResponses` the latter wins;
/// a state may be sent again within its lifetime and the tool runs again with the same answers;
/// with an `Idempotency-Key` a replay of the finished round gets the recorded outcome (even with
/// other answers) instead of a second run. Method: the conformance two-round tool
/// (`step1` name, `step2` colour), each round a 2026-07-28 request on a fresh connection.
#[test]
fn request_state_precedence_and_replay_are_as_documented() {
    let server = Server::start(&["--tools", "conformance"]);
    let tool = "test_input_required_result_multi_round";
    let round = |id: u64, state: Option<&str>, answers: Value| {
        let mut req = Modern::call(id, tool, json!({})).meta(META_CAPABILITIES, elicitation());
        if let Some(state) = state {
            req = req.param("requestState", json!(state));
        }
        if answers != json!({}) {
            req = req.param("inputResponses", answers);
        }
        req
    };
    let form =
        |field: &str, value: &str| json!({ "action": "accept", "content": { field: value } });
    let state_of = |r: &Response, asked: &str, ctx: &str| -> String {
        let v = r.json();
        assert_eq!(v["result"]["resultType"], "input_required", "{ctx}: {v}");
        let requests = v["result"]["inputRequests"].as_object().expect("inputRequests");
        assert_eq!(requests.keys().collect::<Vec<_>>(), [asked], "{ctx}: {v}");
        v["result"]["requestState"].as_str().expect("requestState").to_owned()
    };
    let first = state_of(&round(1, None, json!({})).send(&server), "step1", "round 1");
    let step1 = json!({ "step1": form("name", "Ada") });
    let second = state_of(&round(2, Some(&first), step1).send(&server), "step2", "round 2");

    let blue = json!({ "step2": form("color", "blue") });
    let cases: [(&str, u64, Value, &str); 3] = [
        ("the sealed answer and the new one", 3, blue.clone(), "Ada likes blue"),
        (
            "inputResponses over the sealed answer",
            4,
            json!({ "step1": form("name", "Bob"), "step2": form("color", "blue") }),
            "Bob likes blue",
        ),
        ("the same round replayed", 5, blue.clone(), "Ada likes blue"),
    ];
    for (ctx, id, answers, text) in cases {
        let r = round(id, Some(&second), answers).send(&server);
        assert_eq!(text_of(&assert_complete(&r, &json!(id), ctx)), text, "{ctx}");
    }
    let again = round(6, Some(&second), json!({})).send(&server);
    state_of(&again, "step2", "the state alone: its answers used, the next one asked again");

    let keyed = |id: u64, answers: Value| {
        round(id, Some(&second), answers).header("Idempotency-Key", "mrtr-final").send(&server)
    };
    let r = keyed(7, blue);
    assert_eq!(text_of(&assert_complete(&r, &json!(7), "keyed")), "Ada likes blue");
    let red = json!({ "step2": form("color", "red") });
    let r = keyed(8, red);
    let ctx = "keyed replay with other answers: the recorded outcome, no second run";
    assert_eq!(text_of(&assert_complete(&r, &json!(8), ctx)), "Ada likes blue", "{ctx}");
}

/// A `subscriptions/listen` request for the notification types in `filter`.
fn listen(id: Value, filter: Value) -> Modern {
    Modern::new(id, "subscriptions/listen", json!({ "notifications": filter }))
}

/// The next event of a listen stream, which must be `method` tagged with `subscription`.
fn expect_on_listen(s: &mut SseStream, method: &str, subscription: &Value, ctx: &str) -> Value {
    let ev = s.next_event().unwrap_or_else(|| panic!("{ctx}: the stream ended or went silent"));
    assert!(ev.id.is_none(), "{ctx}: no event ids: {ev:?}");
    let v = ev.json();
    assert_eq!(v["method"], method, "{ctx}: {v}");
    assert!(v.get("id").is_none(), "{ctx}: a notification: {v}");
    assert_eq!(&v["params"]["_meta"][META_SUBSCRIPTION_ID], subscription, "{ctx}: {v}");
    v
}

/// Calls a conformance trigger tool on a new connection (with two cores, some of these land on
/// the core that does not hold a listen stream).
fn trigger(server: &Server, tool: &str, ctx: &str) {
    let id = json!(tool);
    let r = Modern::call(id.clone(), tool, json!({})).send(server);
    assert_complete(&r, &id, &format!("{ctx}: {tool}"));
}

/// Goal: `subscriptions/listen` opens a stream whose first message is the acknowledgement of
/// the types granted, every message tagged with the subscription id (the request's id); only
/// the requested list changes arrive, whichever core the change happened on. Method:
/// `--threads 2`, conformance tools; a tools-only stream and a prompts-only stream; four tool
/// changes, each triggered on a new connection and awaited on the tools stream; the prompts
/// stream's next message, after a prompt change, is that prompt change (no tools notification
/// came first); the tools stream's next, after one more tool change, is that tool change (no
/// prompts notification came first). Then a drain ends both streams with their request's
/// result, and nothing else came on either: a wrong notification is caught however late it
/// would have been sent, with no pause to wait for one.
#[test]
fn listen_streams_get_only_the_changes_they_asked_for() {
    for driver in DRIVERS {
        let mut server = Server::on(driver, &["--tools", "conformance", "--threads", "2"]);
        let tools_id = json!(41);
        let mut tools = listen(tools_id.clone(), json!({ "toolsListChanged": true })).open(&server);
        let ctx = format!("{driver}: tools listen");
        assert_eq!(tools.status, 200, "{ctx}");
        assert_eq!(tools.header("Content-Type"), Some("text/event-stream"), "{ctx}");
        assert_stateless_head(&tools.headers, &ctx);
        let ack = "notifications/subscriptions/acknowledged";
        let v = expect_on_listen(&mut tools, ack, &tools_id, &ctx);
        assert_eq!(v["params"]["notifications"]["toolsListChanged"], true, "{ctx}: {v}");
        assert!(v["params"]["notifications"].get("promptsListChanged").is_none(), "{ctx}: {v}");

        let prompts_id = json!("prompts-sub");
        let filter = json!({ "promptsListChanged": true });
        let mut prompts = listen(prompts_id.clone(), filter).open(&server);
        let pctx = format!("{driver}: prompts listen");
        assert_eq!(prompts.status, 200, "{pctx}");
        let v = expect_on_listen(&mut prompts, ack, &prompts_id, &pctx);
        assert_eq!(v["params"]["notifications"]["promptsListChanged"], true, "{pctx}: {v}");
        assert!(v["params"]["notifications"].get("toolsListChanged").is_none(), "{pctx}: {v}");

        // One trigger at a time, each awaited on the stream: one notification each.
        for round in 0..4 {
            let what = format!("{ctx}: tool change {round}");
            trigger(&server, "test_trigger_tool_change", &what);
            expect_on_listen(&mut tools, "notifications/tools/list_changed", &tools_id, &what);
        }
        // The tool changes were answered before this one was triggered, so a (wrong) tools
        // notification on the prompts stream would come first.
        trigger(&server, "test_trigger_prompt_change", driver);
        let prompts_changed = "notifications/prompts/list_changed";
        expect_on_listen(&mut prompts, prompts_changed, &prompts_id, &pctx);
        trigger(&server, "test_trigger_tool_change", driver);
        let what = format!("{ctx}: after the prompt change");
        expect_on_listen(&mut tools, "notifications/tools/list_changed", &tools_id, &what);
        // The drain ends each stream with its request's result: nothing else came before it.
        server.signal("TERM");
        for (stream, id, ctx) in [(&mut tools, &tools_id, &ctx), (&mut prompts, &prompts_id, &pctx)]
        {
            let rest: Vec<Value> = stream.rest().iter().map(Event::json).collect();
            assert!(stream.ended(), "{ctx}: the drain ends the stream");
            assert_eq!(rest.len(), 1, "{ctx}: only the result after the last change: {rest:#?}");
            assert_eq!(&rest[0]["id"], id, "{ctx}: {}", rest[0]);
            assert_eq!(rest[0]["result"]["resultType"], "complete", "{ctx}: {}", rest[0]);
        }
        let status = server.exit_within(Duration::from_secs(10)).expect("exited after the drain");
        assert_eq!(status.code(), Some(0), "{driver}");
    }
}

/// Goal: the legacy era is untouched by the modern one: `initialize` without a protocol header
/// still creates a session, and that session's requests stay legacy: one with
/// `MCP-Protocol-Version: 2026-07-28` gets 400 like any revision the session does not speak,
/// and one whose params carry the modern `_meta` is answered as a legacy request. Method: per
/// driver, a session from `support::open_session`, then requests on it.
#[test]
fn legacy_sessions_stay_legacy() {
    for driver in DRIVERS {
        let server = Server::on(driver, &[]);
        let sid = open_session(&server);
        let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        let modern_header =
            [("Mcp-Session-Id", sid.as_str()), ("MCP-Protocol-Version", V), ("Mcp-Method", "ping")];
        let r = post(&server, &modern_header, ping);
        assert_eq!(r.status, 400, "{driver}: a legacy session speaking 2026-07-28: {}", r.text());
        assert!(r.json()["error"]["code"].is_i64(), "{driver}: {}", r.text());
        let modern_meta = Modern::new(2, "tools/list", json!({})).body.to_string();
        let r = post(&server, &[("Mcp-Session-Id", &sid)], &modern_meta);
        assert_eq!(r.status, 200, "{driver}: {}", r.text());
        let v = messages_of(&r).pop().expect("answer");
        assert_eq!(v["id"], 2, "{driver}: {v}");
        assert!(v["result"]["tools"].is_array(), "{driver}: {v}");
        assert!(v["result"].get("resultType").is_none(), "{driver}: served as legacy: {v}");
        let r = post(&server, &[("Mcp-Session-Id", &sid)], ping);
        assert_eq!(r.status, 200, "{driver}: the session still works: {}", r.text());
        assert_eq!(r.json()["result"], json!({}), "{driver}");
    }
}

/// `raw` with `lines` (each ending in CRLF) inserted after its request line, so a header can be
/// given twice or carry bytes that are not UTF-8.
fn with_lines(raw: &[u8], lines: &[u8]) -> Vec<u8> {
    let at = raw.windows(2).position(|w| w == b"\r\n").expect("request line") + 2;
    [&raw[..at], lines, &raw[at..]].concat()
}

/// Goal: issue 17 item 5: every `Mcp-*` header, `Mcp-Param-*` included, given twice with
/// different values is a 400 -32020 (an intermediary reading the other value would authorize
/// something other than what runs), an identical repeat is accepted; and a Base64 header value
/// whose bytes are not UTF-8 equals no body value (a lossy decode made it equal a body holding
/// U+FFFD). Method: `test_header_param` (`Mcp-Param-Value`) of `--tools conformance` on the
/// real binary, raw header lines added to otherwise valid requests.
#[test]
fn mcp_headers_given_twice_differently_and_non_utf8_param_values_are_mismatches() {
    let server = Server::on("uring", &["--tools", "conformance"]);
    // `value` in the body and the `Mcp-Param-Value` header of the request's own header list;
    // `first` is the raw line sent before it (so it is the value a first-wins reader takes).
    let param = |id: u64, value: &str, header: &str, first: &[u8]| {
        let m = Modern::call(id, "test_header_param", json!({ "value": value }))
            .header("Mcp-Param-Value", header);
        exchange(&server, &with_lines(&m.raw(&server), first))
    };
    // (case, answer, status, code, id)
    let cases: Vec<(&str, Response, u16, i64, Value)> = vec![
        (
            "Mcp-Param twice, the first equal to the body",
            param(
                1,
                "v",
                "w",
                b"Mcp-Param-Value: v
",
            ),
            400,
            -32020,
            Value::Null,
        ),
        (
            "Mcp-Param twice, other name case",
            param(
                2,
                "v",
                "w",
                b"mcp-param-value: v
",
            ),
            400,
            -32020,
            Value::Null,
        ),
        (
            "Mcp-Param twice, same value",
            param(
                3,
                "v",
                "v",
                b"Mcp-Param-Value:  v
",
            ),
            200,
            0,
            json!(3),
        ),
        (
            "Mcp-Name twice",
            param(
                4,
                "v",
                "v",
                b"Mcp-Name: echo
",
            ),
            400,
            -32020,
            Value::Null,
        ),
        // `//4=` is the bytes ff fe: not UTF-8, so not the body's U+FFFD U+FFFD.
        (
            "Base64 value that is not UTF-8",
            param(5, "\u{fffd}\u{fffd}", "=?base64?//4=?=", b""),
            400,
            -32020,
            json!(5),
        ),
        // The same body with its own bytes encoded is accepted.
        (
            "Base64 value, UTF-8",
            param(6, "\u{fffd}\u{fffd}", "=?base64?77+977+9?=", b""),
            200,
            0,
            json!(6),
        ),
    ];
    let got: Vec<(&str, u16, i64, Value)> = cases
        .iter()
        .map(|(case, r, ..)| {
            let v: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
            (*case, r.status, v["error"]["code"].as_i64().unwrap_or(0), v["id"].clone())
        })
        .collect();
    let want: Vec<(&str, u16, i64, Value)> = cases
        .iter()
        .map(|(case, _, status, code, id)| (*case, *status, *code, id.clone()))
        .collect();
    assert_eq!(got, want);
    for (case, r, status, _, id) in &cases {
        if *status == 200 {
            assert_complete(r, id, case);
        } else {
            assert_error(r, *status, -32020, id, case);
        }
    }
}

/// `--list-changed-min-ms` of the listen-flood test.
const LIST_CHANGED_MIN_MS: u64 = 200;

/// Goal (issue 38, finding 10): a `subscriptions/listen` stream reports each kind of list
/// change at most once per `--list-changed-min-ms` (plus the first and a trailing one), and the
/// last change is reported after it happened. Method: 60 tool changes triggered 15 ms apart
/// (the conformance set's trigger) while a thread reads the listen stream, stamping each
/// notification on arrival; then three windows' wait (elapsed time is what is tested).
#[test]
fn a_listen_stream_reports_a_burst_of_list_changes_coalesced_and_the_last_one_after_it() {
    let min = LIST_CHANGED_MIN_MS.to_string();
    let args = ["--tools", "conformance", "--threads", "1", "--list-changed-min-ms", &min];
    let server = Server::on("uring", &args);
    let id = json!(7);
    let mut tools = listen(id.clone(), json!({ "toolsListChanged": true })).open(&server);
    let ack = "notifications/subscriptions/acknowledged";
    expect_on_listen(&mut tools, ack, &id, "listen flood");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        while let Some(ev) = tools.next_event() {
            if tx.send((std::time::Instant::now(), ev.json())).is_err() {
                return;
            }
        }
    });
    let began = std::time::Instant::now();
    for round in 0..60 {
        trigger(&server, "test_trigger_tool_change", &format!("change {round}"));
        // Spread over about a second: the listen stream's own 50 ms look alone would report
        // about twenty of them.
        std::thread::sleep(Duration::from_millis(15));
    }
    let last_change = std::time::Instant::now();
    std::thread::sleep(Duration::from_millis(3 * LIST_CHANGED_MIN_MS));
    let got: Vec<(std::time::Instant, Value)> = rx.try_iter().collect();
    for (_, v) in &got {
        assert_eq!(v["method"], "notifications/tools/list_changed", "{v}");
    }
    let windows = (last_change - began).as_millis() as usize / LIST_CHANGED_MIN_MS as usize;
    assert!(got.len() <= windows + 2, "{} for {windows} windows: not coalesced", got.len());
    assert!(got.iter().any(|(at, _)| *at >= last_change), "the last change reported after it");
}
