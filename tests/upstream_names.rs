//! Goal (issue 22 item 4): tool names across providers. `--upstream-prefix NAME=always|
//! on-collision|never` decides which upstreams' names carry `NAME__`; a name two providers
//! offer and no policy separates stops the start with a message naming both; a prefixed name
//! past the spec's 128 characters is left out; a collision that appears later (a
//! `list_changed`) hides the newer tool and keeps routing the older one, logged and counted;
//! bad values are configuration errors.
//! Method: the real release binary over real sockets in front of
//! tests/fixtures/stdio_upstream.py (`--suffix S` renames its tools, `--extra-tool NAME` adds
//! one, `add_tool` adds one at run time and says `list_changed`); start-up errors by the exit
//! status and stderr of the binary.

mod support;

use support::{call, metric, post, run_to_exit, scrape, server_with_metrics, Server};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/stdio_upstream.py");

/// `--upstream NAME=stdio:python3 FIXTURE EXTRA…` (NAME empty: unnamed).
fn upstream(name: &str, extra: &str) -> String {
    let target = format!("stdio:python3 {FIXTURE} {extra}");
    if name.is_empty() {
        target
    } else {
        format!("{name}={target}")
    }
}

/// The server with these flags, one core, a short kill grace.
fn start(args: &[&str]) -> Server {
    let mut all = vec!["--threads", "1", "--upstream-kill-grace-ms", "200"];
    all.extend_from_slice(args);
    Server::on("uring", &all)
}

fn open(server: &Server) -> String {
    support::open_session(server)
}

fn names(server: &Server, sid: &str) -> Vec<String> {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let list = post(server, &[("Mcp-Session-Id", sid)], body);
    assert_eq!(list.status, 200, "{}", list.text());
    let tools = list.json()["result"]["tools"].as_array().expect("tools").clone();
    tools.iter().filter_map(|t| t["name"].as_str().map(str::to_owned)).collect()
}

/// A `tools/call` without progress: its JSON-RPC response (plain JSON or one SSE event).
fn call_json(server: &Server, sid: &str, id: u64, tool: &str, args: &str) -> serde_json::Value {
    let r = post(server, &[("Mcp-Session-Id", sid)], &call(id, tool, args, false));
    assert_eq!(r.status, 200, "{tool}: {}", r.text());
    let text = r.text();
    let body = if r.header("Content-Type").is_some_and(|c| c.starts_with("text/event-stream")) {
        let data: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("data:")).collect();
        data.into_iter().map(str::trim).find(|d| d.contains("\"id\"")).unwrap_or("").to_owned()
    } else {
        text
    };
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{tool}: {e}: {body}"))
}

/// The text of a successful call's first content item.
fn call_text(server: &Server, sid: &str, id: u64, tool: &str, args: &str) -> String {
    let response = call_json(server, sid, id, tool, args);
    let text = response["result"]["content"][0]["text"].as_str();
    text.unwrap_or_else(|| panic!("{tool}: {response}")).to_owned()
}

fn assert_unknown_tool(response: &serde_json::Value, tool: &str) {
    assert_eq!(response["error"]["code"], -32602, "{tool}: {response}");
    let message = response["error"]["message"].as_str().unwrap_or("");
    assert_eq!(message, format!("unknown tool: {tool}"), "{response}");
}

fn has(listed: &[String], name: &str) -> bool {
    listed.iter().any(|n| n == name)
}

#[test]
fn a_collision_no_policy_resolves_stops_the_start_naming_both() {
    // The demo set and one upstream (default `never`) both offer `echo`; two upstreams set to
    // `never` offer the same names; an unnamed upstream next to the demo set.
    let time = upstream("time", "");
    let other = upstream("other", "");
    let unnamed = upstream("", "");
    let cases: [(&[&str], &[&str]); 3] = [
        (
            &["--tools", "demo", "--upstream", &time],
            &[
                "tool `echo` is offered by built-in set `demo` and upstream `time`",
                "set --upstream-prefix time=always",
            ],
        ),
        (
            &[
                "--upstream",
                &time,
                "--upstream",
                &other,
                "--upstream-prefix",
                "time=never",
                "--upstream-prefix",
                "other=never",
            ],
            &["is offered by upstream `time` and upstream `other`", "--upstream-prefix other="],
        ),
        (
            &["--tools", "demo", "--upstream", &unnamed],
            &["tool `echo` is offered by built-in set `demo` and upstream `", "name the upstream"],
        ),
    ];
    for (args, wants) in cases {
        let (status, stderr) = run_to_exit(args);
        assert!(status.is_some_and(|s| s != 0), "{args:?}: {status:?} {stderr}");
        for want in wants {
            assert!(stderr.contains(want), "{args:?}: wants {want:?} in: {stderr}");
        }
    }
}

#[test]
fn always_prefixes_a_single_upstream() {
    let a = upstream("a", "");
    let server = start(&["--upstream", &a, "--upstream-prefix", "a=always"]);
    let sid = open(&server);
    let listed = names(&server, &sid);
    assert!(has(&listed, "a__echo") && has(&listed, "a__pid"), "{listed:?}");
    assert!(listed.iter().all(|n| n.starts_with("a__")), "{listed:?}");
    assert_eq!(call_text(&server, &sid, 2, "a__echo", r#"{"text":"hi"}"#), "hi");
    assert_unknown_tool(&call_json(&server, &sid, 3, "echo", "{}"), "echo");
    // Without the flag one upstream's names pass through (the default: never).
    let plain = start(&["--upstream", &a]);
    let sid = open(&plain);
    let listed = names(&plain, &sid);
    assert!(has(&listed, "echo") && !has(&listed, "a__echo"), "{listed:?}");
}

#[test]
fn never_with_two_upstreams_passes_names_through_and_routes_each_to_its_own() {
    let (a, b) = (upstream("a", ""), upstream("b", "--suffix _b"));
    let policies = ["--upstream-prefix", "a=never", "--upstream-prefix", "b=never"];
    let mut args = vec!["--upstream", a.as_str(), "--upstream", b.as_str()];
    args.extend_from_slice(&policies);
    let server = start(&args);
    let sid = open(&server);
    let listed = names(&server, &sid);
    for name in ["echo", "pid", "echo_b", "pid_b"] {
        assert!(has(&listed, name), "{name} in {listed:?}");
    }
    assert!(!listed.iter().any(|n| n.contains("__")), "nothing prefixed: {listed:?}");
    let pid_a = call_text(&server, &sid, 2, "pid", "{}");
    let pid_b = call_text(&server, &sid, 3, "pid_b", "{}");
    assert_ne!(pid_a, pid_b, "each name reaches its own upstream's process");
    assert_eq!(call_text(&server, &sid, 4, "pid", "{}"), pid_a);
    assert_eq!(call_text(&server, &sid, 5, "echo_b", r#"{"text":"to b"}"#), "to b");
    // Without the flags, two upstreams are prefixed as before.
    let default = start(&["--upstream", &a, "--upstream", &b]);
    let sid = open(&default);
    let listed = names(&default, &sid);
    assert!(has(&listed, "a__echo") && has(&listed, "b__echo_b"), "{listed:?}");
}

#[test]
fn on_collision_prefixes_only_the_colliding_upstream() {
    // `a` offers the demo set's `echo`, `slow_counter`, `get_counter`; `b`'s names are its own.
    let (a, b) = (upstream("a", ""), upstream("b", "--suffix _b"));
    let server = start(&[
        "--tools",
        "demo",
        "--upstream",
        &a,
        "--upstream",
        &b,
        "--upstream-prefix",
        "a=on-collision",
        "--upstream-prefix",
        "b=on-collision",
    ]);
    let sid = open(&server);
    let listed = names(&server, &sid);
    for name in ["echo", "greet", "a__echo", "a__pid", "echo_b", "pid_b"] {
        assert!(has(&listed, name), "{name} in {listed:?}");
    }
    assert!(!has(&listed, "pid") && !has(&listed, "b__pid_b"), "{listed:?}");
    let pid_a = call_text(&server, &sid, 2, "a__pid", "{}");
    let pid_b = call_text(&server, &sid, 3, "pid_b", "{}");
    assert_ne!(pid_a, pid_b);
    assert_eq!(call_text(&server, &sid, 4, "echo", r#"{"text":"demo"}"#), "demo");
    assert_eq!(call_text(&server, &sid, 5, "a__echo", r#"{"text":"a"}"#), "a");
}

#[test]
fn bad_names_and_prefix_values_are_configuration_errors() {
    let a = upstream("a", "");
    let dotted = upstream("a.b", "");
    let long = upstream(&"n".repeat(33), "");
    let cases: [(&[&str], &str); 6] = [
        (&["--upstream", &dotted], "--upstream name \"a.b\""),
        (&["--upstream", &long], "--upstream name"),
        (&["--upstream", &a, "--upstream-prefix", "c=always"], "no --upstream is named \"c\""),
        (&["--upstream", &a, "--upstream-prefix", "a=sometimes"], "expected NAME=always"),
        (&["--upstream", &a, "--upstream-prefix", "always"], "expected NAME=always"),
        (
            &["--upstream", &a, "--upstream-prefix", "a=always", "--upstream-prefix", "a=never"],
            "given twice",
        ),
    ];
    for (args, want) in cases {
        let (status, stderr) = run_to_exit(args);
        assert!(status.is_some_and(|s| s != 0), "{args:?}: {status:?} {stderr}");
        assert!(stderr.contains(want), "{args:?}: wants {want:?} in: {stderr}");
    }
    // 32 bytes is a name.
    let at_limit = upstream(&"n".repeat(32), "");
    let server = start(&["--upstream", &at_limit]);
    let sid = open(&server);
    assert!(has(&names(&server, &sid), "echo"));
}

#[test]
fn a_prefixed_name_past_128_characters_is_left_out_and_counted() {
    // `a__` + 125 characters is 128, the spec's longest; `a__` + 126 is one more.
    let (fits, over) = ("t".repeat(125), "u".repeat(126));
    let a = upstream("a", &format!("--extra-tool {fits} --extra-tool {over}"));
    let args = ["--threads", "1", "--upstream", &a, "--upstream-prefix", "a=always"];
    let (server, admin) = server_with_metrics("uring", &args);
    for round in 0..2 {
        let sid = open(&server);
        let listed = names(&server, &sid);
        let (at, past) = (format!("a__{fits}"), format!("a__{over}"));
        assert!(has(&listed, &at), "round {round}: 128 characters listed: {listed:?}");
        assert!(!has(&listed, &past), "round {round}: 129 left out");
        assert_eq!(call_text(&server, &sid, 2, &at, "{}"), fits);
        assert_unknown_tool(&call_json(&server, &sid, 3, &past, "{}"), &past);
    }
    // Two sessions (two children) listed it: counted once on the core.
    let sample = r#"tidemark_tools_hidden_total{reason="name_too_long"}"#;
    assert_eq!(metric(&scrape(&admin), sample), 1);
}

#[test]
fn a_collision_that_appears_later_hides_the_newer_tool_and_keeps_routing() {
    // Two `never` upstreams with distinct names at start; then `b` adds `pid` (a's name) and
    // `a` adds `pid_b` (b's name): each time the tool clients were calling keeps its name and
    // route, whichever provider comes first; the newcomer is hidden and counted.
    let (a, b) = (upstream("a", ""), upstream("b", "--suffix _b"));
    let args = [
        "--threads",
        "1",
        "--upstream",
        &a,
        "--upstream",
        &b,
        "--upstream-prefix",
        "a=never",
        "--upstream-prefix",
        "b=never",
    ];
    let (server, admin) = server_with_metrics("uring", &args);
    let sid = open(&server);
    let pid_a = call_text(&server, &sid, 2, "pid", "{}");
    let pid_b = call_text(&server, &sid, 3, "pid_b", "{}");
    assert_eq!(call_text(&server, &sid, 4, "add_tool_b", r#"{"name":"pid"}"#), "added");
    assert_eq!(call_text(&server, &sid, 5, "add_tool", r#"{"name":"pid_b"}"#), "added");
    for id in 6..8 {
        let listed = names(&server, &sid);
        assert_eq!(listed.iter().filter(|n| *n == "pid").count(), 1, "{listed:?}");
        assert_eq!(listed.iter().filter(|n| *n == "pid_b").count(), 1, "{listed:?}");
        assert_eq!(call_text(&server, &sid, id * 10, "pid", "{}"), pid_a, "still a's");
        assert_eq!(call_text(&server, &sid, id * 10 + 1, "pid_b", "{}"), pid_b, "still b's");
    }
    let sample = r#"tidemark_tools_hidden_total{reason="collision"}"#;
    assert_eq!(metric(&scrape(&admin), sample), 2);
}

/// What `GET path` on the admin listener `admin` answers (status line and body).
fn admin_get(admin: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(admin).expect("connect admin");
    s.set_read_timeout(Some(std::time::Duration::from_secs(5))).expect("timeout");
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").expect("write");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text
}

#[test]
fn an_unnamed_upstream_is_upstream_1_to_clients_never_its_command() {
    // Goal (issue 38, finding 10): an unnamed upstream's command line (here with an API key in
    // it) reaches no client: a call it fails ends with -32603 naming `upstream-1`, and neither
    // /status nor /metrics shows the command. Method: the fixture with `--api-key=SECRET…` on
    // its command line, no `NAME=`; `crash_after` makes it exit mid-call; a second server
    // whose unnamed command cannot start answers `initialize` 503 naming `upstream-1` only.
    const SECRET: &str = "SECRET-wire-38";
    let target = upstream("", &format!("--api-key={SECRET}"));
    let (server, admin) = server_with_metrics("uring", &["--threads", "1", "--upstream", &target]);
    let sid = open(&server);
    let failed = call_json(&server, &sid, 2, "crash_after", r#"{"ms":0}"#);
    let text = failed.to_string();
    assert_eq!(failed["error"]["code"], -32603, "{text}");
    assert_eq!(failed["error"]["data"]["upstream"], "upstream-1", "{text}");
    let message = failed["error"]["message"].as_str().expect("message");
    assert!(message.starts_with("upstream upstream-1 failed: exited"), "{text}");
    for page in ["/status", "/metrics"] {
        let body = admin_get(&admin, page);
        assert!(body.contains("upstream-1"), "{page}: {body}");
        for command in [SECRET, "stdio_upstream.py", "python3"] {
            assert!(!text.contains(command) && !body.contains(command), "{command}: {page}");
        }
    }
    let missing = format!("stdio:/nonexistent/tidemark-38/server --api-key={SECRET}");
    let down = start(&["--upstream", &missing]);
    let init = post(&down, &[], support::INIT);
    let body = init.text();
    assert_eq!(init.status, 503, "{body}");
    assert!(body.contains("upstream-1"), "{body}");
    assert!(!body.contains(SECRET) && !body.contains("/nonexistent"), "{body}");
}
