//! Goal (issue 22 item 1): tidemark speaks 2026-07-28 to an HTTP upstream that serves only that
//! revision, and translates in every direction: a legacy client's session in front of it (each
//! call one stateless upstream request; the upstream's `InputRequiredResult` asked of the client
//! on its call's stream and retried with `inputResponses` and `requestState`; list changes
//! through `subscriptions/listen`), a 2026-07-28 client in front of it (tidemark's own
//! `InputRequiredResult`, the upstream's round carried in tidemark's sealed state so the upstream
//! sees each round once), and 2026-07-28 to 2026-07-28 through a second tidemark; `auto` keeps
//! `initialize` for an upstream that also serves a legacy revision; `modern` refuses one that
//! does not offer 2026-07-28.
//! Method: the real binary in front of tests/fixtures/modern_upstream.py (stdlib; refuses
//! `initialize` with 404 -32601 and any request lacking the revision's headers or `_meta`, and
//! logs every request it saw) or of a second real tidemark, over real sockets.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::{json, Value};
use support::{call, call_stream, list_tools, post, Server, SseStream};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/modern_upstream.py");
const STDIO_FIXTURE: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/stdio_upstream.py");

/// The fixture server, killed on drop.
struct Upstream {
    child: Child,
    url: String,
}

impl Upstream {
    fn start() -> Upstream {
        let mut child = Command::new("python3")
            .arg(FIXTURE)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs the fixture");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("stdout");
        BufReader::new(stdout).read_line(&mut line).expect("the fixture's first line");
        let url = line.trim().strip_prefix("listening on ").expect("listening line").to_owned();
        Upstream { child, url }
    }

    /// Every request the fixture saw, and its slow_counter executions.
    fn log(&self) -> (Vec<Value>, u64) {
        let addr = self.url.trim_start_matches("http://").trim_end_matches("/mcp");
        let mut conn = std::net::TcpStream::connect(addr).expect("fixture reachable");
        let raw = format!("GET /debug/log HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        support::send(&mut conn, raw.as_bytes());
        let body = support::read_response(&mut conn).json();
        (body["log"].as_array().expect("log").clone(), body["counter"].as_u64().expect("counter"))
    }

    /// How many requests of `method` (and tool `name`) the fixture saw.
    fn seen(&self, method: &str, name: Option<&str>) -> usize {
        let (log, _) = self.log();
        log.iter()
            .filter(|e| e["method"] == method)
            .filter(|e| name.is_none_or(|n| e["headers"]["Mcp-Name"] == n))
            .count()
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn front(url: &str, extra: &[&str]) -> Server {
    let upstream = format!("m={url}");
    let mut args = vec!["--upstream", upstream.as_str(), "--threads", "1"];
    args.extend_from_slice(extra);
    Server::start(&args)
}

/// A legacy session that declared elicitation.
fn open_elicitor(server: &Server) -> String {
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"t","version":"1"}}}"#;
    let r = post(server, &[], init);
    assert_eq!(r.status, 200, "{}", r.text());
    let sid = r.header("Mcp-Session-Id").expect("session id").to_owned();
    let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(post(server, &[("Mcp-Session-Id", &sid)], note).status, 202);
    sid
}

fn text_of(message: &Value) -> String {
    let text = message["result"]["content"][0]["text"].as_str();
    text.unwrap_or_else(|| panic!("a text result: {message}")).to_owned()
}

/// A 2026-07-28 request to `server`, with the revision's headers and `_meta`.
fn modern(server: &Server, id: u64, method: &str, mut params: Value) -> support::Response {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": { "elicitation": {} },
        "io.modelcontextprotocol/clientInfo": { "name": "t", "version": "1" },
    });
    let name = params.get("name").and_then(Value::as_str).map(str::to_owned);
    let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
    let mut headers = vec![("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", method)];
    if let Some(name) = &name {
        headers.push(("Mcp-Name", name));
    }
    post(server, &headers, &body.to_string())
}

/// `greet`/`ask` through its input round on a legacy session: the stream carries the
/// server→client `elicitation/create`, answered by a POST; then the result.
fn ask_on_session(server: &Server, sid: &str, tool: &str) -> String {
    let mut s = call_stream(server, sid, &call(5, tool, "{}", false), &[]);
    let request = loop {
        let ev = s.next_event().expect("the elicitation request on the call's stream");
        if !ev.is_priming() {
            break ev.json();
        }
    };
    assert_eq!(request["method"], "elicitation/create", "{request}");
    let answer = json!({ "jsonrpc": "2.0", "id": request["id"], "result": {
        "action": "accept", "content": { "name": "Ada" } } });
    let r = post(server, &[("Mcp-Session-Id", sid)], &answer.to_string());
    assert_eq!(r.status, 202, "{}", r.text());
    let end = s.rest().into_iter().map(|e| e.json()).find(|m| m.get("id") == Some(&json!(5)));
    text_of(&end.expect("the call's result"))
}

#[test]
fn a_legacy_client_in_front_of_a_modern_only_upstream() {
    let upstream = Upstream::start();
    let front = front(&upstream.url, &[]);
    let sid = open_elicitor(&front);

    let tools = list_tools(&front, &sid);
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    // `bad_header` declares an invalid x-mcp-header: tidemark, a conforming client, leaves it out.
    assert_eq!(names, ["echo", "slow_counter", "get_counter", "ask", "add_tool", "route"]);
    assert_eq!(tools[0]["annotations"]["readOnlyHint"], true, "annotations pass through");

    let echo =
        post(&front, &[("Mcp-Session-Id", &sid)], &call(2, "echo", r#"{"text":"hi"}"#, false));
    assert_eq!(text_of(&support::final_message(&echo)), "hi");

    // Progress of a stateless upstream call reaches the session's stream, and it runs once.
    let mut s = call_stream(&front, &sid, &call(3, "slow_counter", r#"{"steps":3}"#, true), &[]);
    let messages: Vec<Value> =
        s.rest().into_iter().filter(|e| !e.is_priming()).map(|e| e.json()).collect();
    let progress: Vec<&Value> =
        messages.iter().filter(|m| m["method"] == "notifications/progress").collect();
    assert_eq!(progress.len(), 3, "{messages:?}");
    assert_eq!(progress[0]["params"]["progressToken"], 3, "the client's own token");
    assert_eq!(text_of(messages.last().expect("result")), "counter 1 after 3 steps");
    assert_eq!(upstream.log().1, 1, "slow_counter ran once upstream");

    // The upstream's InputRequiredResult becomes a server→client request on the call's stream.
    assert_eq!(ask_on_session(&front, &sid, "ask"), "Hello, Ada!");
    assert_eq!(upstream.seen("tools/call", Some("ask")), 2, "round 1 and the retry");

    // A list change of the upstream (subscriptions/listen) reaches the session's GET stream.
    let raw = support::request(
        "GET",
        &front.path,
        &front.host(),
        &[("Accept", "text/event-stream"), ("Mcp-Session-Id", &sid)],
        None,
    );
    let mut listen = SseStream::open(&front, &raw);
    assert_eq!(listen.status, 200);
    let added = post(&front, &[("Mcp-Session-Id", &sid)], &call(6, "add_tool", "{}", false));
    assert_eq!(text_of(&support::final_message(&added)), "added");
    let changed = loop {
        let ev = listen.next_event().expect("list_changed on the GET stream");
        if !ev.is_priming() {
            break ev.json();
        }
    };
    assert_eq!(changed["method"], "notifications/tools/list_changed", "{changed}");
    let relisted = post(
        &front,
        &[("Mcp-Session-Id", &sid)],
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#,
    );
    assert!(relisted.text().contains("\"extra_1\""), "{}", relisted.text());

    // What the upstream saw: a probe first, never initialize, never a session id.
    let (log, _) = upstream.log();
    assert_eq!(log[0]["method"], "server/discover", "{log:?}");
    assert!(log.iter().all(|e| e["method"] != "initialize"), "{log:?}");
    assert!(log.iter().all(|e| e["headers"]["Mcp-Session-Id"].is_null()), "{log:?}");
    assert!(log.iter().any(|e| e["method"] == "subscriptions/listen"), "{log:?}");
}

#[test]
fn declared_arguments_reach_a_modern_upstream_as_mcp_param_headers() {
    // Goal (SEP-2243): a call of an upstream tool that declares `x-mcp-header` parameters
    // carries each present one as `Mcp-Param-{Name}` (nested ones, booleans, integers, the
    // base64 sentinel for text that is no plain header value; none for an absent value), from
    // a legacy session and from a 2026-07-28 client (whose own headers tidemark checks first);
    // a tool with an invalid declaration is neither listed nor callable. The fixture refuses a
    // call whose headers are missing or differ (400 -32020), so a missing header fails here.
    let upstream = Upstream::start();
    let front = front(&upstream.url, &[]);
    let sid = open_elicitor(&front);
    let on_session = |id: u64, tool: &str, arguments: &str| {
        let r = post(&front, &[("Mcp-Session-Id", &sid)], &call(id, tool, arguments, false));
        support::final_message(&r)
    };
    let all = r#"{"region":"eu-west","flag":true,"scope":{"tenant":7},"note":"n"}"#;
    assert_eq!(text_of(&on_session(1, "route", all)), "Region=eu-west Flag=true Tenant=7");
    let unicode = r#"{"region":"café","flag":false}"#;
    assert_eq!(text_of(&on_session(2, "route", unicode)), "Region==?base64?Y2Fmw6k=?= Flag=false");
    assert_eq!(text_of(&on_session(3, "route", r#"{"note":"only"}"#)), "none");
    let refused = on_session(4, "bad_header", r#"{"n":1.5}"#);
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert_eq!(upstream.seen("tools/call", Some("bad_header")), 0);

    // A 2026-07-28 client must send the headers itself (tidemark checks them, the nested
    // one included), and they go on to the upstream.
    let arguments = json!({ "region": "us-east", "scope": { "tenant": 9 } });
    let bare = modern(&front, 5, "tools/call", json!({ "name": "route", "arguments": arguments }));
    assert_eq!(bare.status, 400, "{}", bare.text());
    assert_eq!(bare.json()["error"]["code"], -32020, "{}", bare.text());
    let mut params = json!({ "name": "route", "arguments": arguments });
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let body = json!({ "jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": params });
    let headers = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "route"),
        ("Mcp-Param-Region", "us-east"),
        ("Mcp-Param-Tenant", "9"),
    ];
    let sent = post(&front, &headers, &body.to_string());
    assert_eq!(text_of(&support::final_message(&sent)), "Region=us-east Tenant=9");
    assert_eq!(upstream.seen("tools/call", Some("route")), 4);
}

#[test]
fn one_upstreams_list_change_reaches_every_session_on_every_core_once() {
    // Goal (issue 22 item 4): a list change of one upstream updates the merged list of every
    // session, on every core, and each client is told once. Method: two cores in front of the
    // fixture (m, whose `add_tool` notifies every `subscriptions/listen` stream: one per core's
    // link) and a stdio upstream (b); sessions opened until each core owns two (the session
    // id's digits 2..6 name its core), each with its GET stream; one `m__add_tool` call. Every
    // stream gets `tools/list_changed`, then a keep-alive comment (1 s) before anything else
    // (no second notice); every session lists `m__extra_1` beside the b tools.
    let upstream = Upstream::start();
    let m = format!("m={}", upstream.url);
    let b = format!("b=stdio:python3 {STDIO_FIXTURE}");
    let args = ["--upstream", &m, "--upstream", &b, "--threads", "2", "--sse-keepalive-secs", "1"];
    let server = Server::start(&args);
    let mut by_core: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for _ in 0..64 {
        if by_core.len() == 2 && by_core.values().all(|s| s.len() >= 2) {
            break;
        }
        let sid = support::open_session(&server);
        let core = sid[2..6].to_owned();
        let room = by_core.entry(core).or_default();
        if room.len() < 2 {
            room.push(sid);
        }
    }
    assert!(by_core.len() == 2 && by_core.values().all(|s| s.len() == 2), "{by_core:?}");
    let sessions: Vec<String> = by_core.into_values().flatten().collect();
    let mut streams: Vec<SseStream> = sessions
        .iter()
        .map(|sid| {
            let headers = [("Accept", "text/event-stream"), ("Mcp-Session-Id", sid.as_str())];
            let raw = support::request("GET", &server.path, &server.host(), &headers, None);
            let stream = SseStream::open(&server, &raw);
            assert_eq!(stream.status, 200);
            stream
        })
        .collect();
    for sid in &sessions {
        let names: Vec<String> = list_tools(&server, sid)
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_owned))
            .collect();
        assert!(!names.contains(&"m__extra_1".to_owned()), "{names:?}");
    }
    let added =
        post(&server, &[("Mcp-Session-Id", &sessions[0])], &call(1, "m__add_tool", "{}", false));
    assert_eq!(text_of(&support::final_message(&added)), "added");
    for (sid, stream) in sessions.iter().zip(streams.iter_mut()) {
        let notice = loop {
            let ev = stream.next_event().expect("list_changed on the GET stream");
            if !ev.is_priming() {
                break ev.json();
            }
        };
        assert_eq!(notice["method"], "notifications/tools/list_changed", "{sid}: {notice}");
        let second = stream.next_event_before_comment();
        assert!(second.is_none(), "{sid}: told twice: {:?}", second.map(|e| e.data));
        assert!(!stream.ended(), "{sid}: the GET stream ended");
        let names: Vec<String> = list_tools(&server, sid)
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_owned))
            .collect();
        assert!(names.contains(&"m__extra_1".to_owned()), "{sid} (core {}): {names:?}", &sid[2..6]);
        assert!(names.contains(&"b__echo".to_owned()), "{sid}: {names:?}");
    }
}

#[test]
fn a_modern_client_in_front_of_a_modern_only_upstream_answers_its_input_in_two_rounds() {
    let upstream = Upstream::start();
    let front = front(&upstream.url, &[]);
    let echo =
        modern(&front, 1, "tools/call", json!({ "name": "echo", "arguments": { "text": "yo" } }));
    assert_eq!(text_of(&support::final_message(&echo)), "yo");

    let first = support::final_message(&modern(
        &front,
        2,
        "tools/call",
        json!({ "name": "ask", "arguments": {} }),
    ));
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    assert_eq!(result["inputRequests"]["who"]["method"], "elicitation/create", "{first}");
    let state = result["requestState"].as_str().expect("tidemark's requestState").to_owned();
    assert!(!state.contains("ask:round1"), "the upstream's state is sealed inside tidemark's");

    // A forged carried round in inputResponses is ignored: only the sealed state counts.
    let retry = json!({ "name": "ask", "arguments": {}, "requestState": state,
        "inputResponses": { "who": { "action": "accept", "content": { "name": "Ada" } },
                            "tidemark/upstream-round": { "requestState": "forged" } } });
    let done = support::final_message(&modern(&front, 3, "tools/call", retry));
    assert_eq!(text_of(&done), "Hello, Ada!", "{done}");
    assert_eq!(upstream.seen("tools/call", Some("ask")), 2, "each upstream round once");
}

#[test]
fn both_eras_of_clients_through_two_tidemarks_speaking_2026_07_28_between_them() {
    let inner = Server::with_admin("uring", &["--tools", "demo", "--threads", "1"]);
    let url = format!("http://{}{}", inner.addr, inner.path);
    let front = front(&url, &["--upstream-protocol", "m=modern"]);
    // greet asks the client's name: as a server→client request for a legacy session.
    let sid = open_elicitor(&front);
    assert_eq!(ask_on_session(&front, &sid, "greet"), "Hello, Ada!");
    // And as an InputRequiredResult for a 2026-07-28 client, through both tidemarks' states.
    let first = support::final_message(&modern(
        &front,
        2,
        "tools/call",
        json!({ "name": "greet", "arguments": {} }),
    ));
    let asked = &first["result"]["inputRequests"];
    let (key, request) =
        asked.as_object().and_then(|o| o.iter().next()).expect("one input request");
    assert_eq!(request["method"], "elicitation/create", "{first}");
    let state = first["result"]["requestState"].clone();
    let retry = json!({ "name": "greet", "arguments": {}, "requestState": state,
        "inputResponses": { key.as_str(): { "action": "accept", "content": { "name": "Ada" } } } });
    assert_eq!(
        text_of(&support::final_message(&modern(&front, 3, "tools/call", retry))),
        "Hello, Ada!"
    );
    // The inner tidemark held no legacy session: every request was stateless.
    let sessions =
        support::metric(&support::scrape(&inner.metrics()), "tidemark_sessions_created_total");
    assert_eq!(sessions, 0, "the inner tidemark was spoken to statelessly");
}

#[test]
fn auto_keeps_initialize_for_an_upstream_that_also_serves_a_legacy_revision() {
    let inner = Server::with_admin("uring", &["--tools", "demo", "--threads", "1"]);
    let url = format!("http://{}{}", inner.addr, inner.path);
    let front = front(&url, &[]);
    let sid = open_elicitor(&front);
    let echo =
        post(&front, &[("Mcp-Session-Id", &sid)], &call(2, "echo", r#"{"text":"hi"}"#, false));
    assert_eq!(text_of(&support::final_message(&echo)), "hi");
    let sessions =
        support::metric(&support::scrape(&inner.metrics()), "tidemark_sessions_created_total");
    assert_eq!(sessions, 1, "a legacy upstream session, resumable");
}

#[test]
fn modern_refuses_an_upstream_that_does_not_offer_2026_07_28_and_bad_values_stop_the_start() {
    // A listener that answers every request 404 with no body: no server/discover there.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut buf = [0u8; 4096];
            let _ = std::io::Read::read(&mut conn, &mut buf);
            let _ = std::io::Write::write_all(
                &mut conn,
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    let front = front(&format!("http://{addr}/mcp"), &["--upstream-protocol", "*=modern"]);
    let init = post(&front, &[], support::INIT);
    let text = init.text();
    assert_eq!(init.status, 503, "a required upstream that cannot start: {text}");
    assert!(text.contains("server/discover") && text.contains("--upstream-protocol"), "{text}");

    for bad in ["m=sideways", "nobody=modern", "modern"] {
        let out = Command::new(env!("CARGO_BIN_EXE_tidemark"))
            .args(["--listen", "127.0.0.1:0", "--upstream", "m=http://127.0.0.1:9/mcp"])
            .args(["--upstream-protocol", bad])
            .output()
            .expect("runs");
        assert!(!out.status.success(), "{bad}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--upstream-protocol"), "{bad}: {stderr}");
    }
}

#[test]
fn input_rounds_stop_at_upstream_input_rounds_max() {
    // `ask {rounds: 2}` takes two rounds of input: answered at a bound of 2; at 1 the second
    // round ends the call with -32603 naming the upstream and the flag, without asking it.
    let upstream = Upstream::start();
    for (bound, answered) in [("2", true), ("1", false)] {
        let front = front(&upstream.url, &["--upstream-input-rounds-max", bound]);
        let sid = open_elicitor(&front);
        let body = call(5, "ask", r#"{"rounds":2}"#, false);
        let mut s = call_stream(&front, &sid, &body, &[]);
        let mut asked = 0;
        let end = loop {
            let ev = s.next_event().expect("the call's end");
            if ev.is_priming() {
                continue;
            }
            let message = ev.json();
            if message["method"] == "elicitation/create" {
                asked += 1;
                let answer = json!({ "jsonrpc": "2.0", "id": message["id"], "result": {
                    "action": "accept", "content": { "name": "Ada" } } });
                let r = post(&front, &[("Mcp-Session-Id", &sid)], &answer.to_string());
                assert_eq!(r.status, 202, "{}", r.text());
            } else if message.get("id") == Some(&json!(5)) {
                break message;
            }
        };
        if answered {
            assert_eq!((asked, text_of(&end)), (2, "Hello, Ada!".to_owned()), "{end}");
        } else {
            assert_eq!(asked, 1, "the round past the bound is not asked: {end}");
            assert_eq!(end["error"]["code"], -32603, "{end}");
            let message = end["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains("--upstream-input-rounds-max"), "{end}");
            assert_eq!(end["error"]["data"]["upstream"], "m", "{end}");
        }
    }
}
