//! Goal: what tidemark presents to its upstreams (issue 18 item 5). The client's own
//! `Authorization` never reaches an upstream; the operator's per-upstream credentials from
//! `--upstream-credentials FILE` (values from tidemark's environment) do: headers on every
//! request to an HTTP upstream, environment variables in a stdio child; and no credential
//! appears in tidemark's command line, its child's command line or its log at the most verbose
//! level. A bad credentials file stops the start with a message that names the line and no
//! value.
//! Method: the real binary, on each io driver, in front of a raw loopback HTTP upstream that
//! records every request head it gets and answers as a minimal MCP server, and in front of
//! tests/fixtures/stdio_upstream.py (its `env` tool reads the child's environment);
//! /proc/PID/cmdline for `ps`'s view.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use support::{open_session, post, Server, DRIVERS};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/stdio_upstream.py");
/// What the client sends tidemark: it must reach no upstream.
const CLIENT_TOKEN: &str = "client-token-7f3a9c";
/// The operator's secrets, held in tidemark's environment and named by the file.
const UPSTREAM_TOKEN: &str = "upstream-secret-51e0d2";
const CHILD_SECRET: &str = "child-secret-a4b8e6";

/// A temporary file removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, text: &str) -> TempFile {
        let path = std::env::temp_dir()
            .join(format!("tidemark-credentials-{name}-{}", std::process::id()));
        std::fs::write(&path, text).expect("write temp file");
        TempFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("utf-8 path")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A loopback HTTP MCP server (a thread) that sends every request head it reads to the
/// channel and answers initialize, tools/list and notifications like a minimal server.
fn recording_upstream() -> (SocketAddr, mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (heads, received) = mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let heads = heads.clone();
            std::thread::spawn(move || serve_recorded(conn, heads));
        }
    });
    (addr, received)
}

fn serve_recorded(conn: std::net::TcpStream, heads: mpsc::Sender<String>) {
    let mut reader = BufReader::new(conn.try_clone().expect("clone"));
    let mut conn = conn;
    loop {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).map_or(true, |n| n == 0) {
                return;
            }
            head.push_str(&line);
            if line == "\r\n" {
                break;
            }
        }
        let length = head
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(str::to_owned))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        // The head, then the body: which message a head carried.
        let _ = heads.send(format!("{head}{}", String::from_utf8_lossy(&body)));
        let answer = if head.starts_with("POST") {
            let message: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let result = match message["method"].as_str() {
                Some("initialize") => serde_json::json!({
                    "protocolVersion": "2025-11-25",
                    "capabilities": { "tools": {} },
                    "serverInfo": { "name": "recorder", "version": "1" },
                }),
                Some("tools/list") => serde_json::json!({ "tools": [
                    { "name": "probe", "inputSchema": { "type": "object" } },
                ] }),
                Some("tools/call") => serde_json::json!({
                    "content": [{ "type": "text", "text": "probed" }],
                }),
                _ => serde_json::Value::Null,
            };
            if message.get("id").is_some() && message.get("method").is_some() {
                let text =
                    serde_json::json!({ "jsonrpc": "2.0", "id": message["id"], "result": result })
                        .to_string();
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nMcp-Session-Id: rec-1\r\n\
                     Content-Length: {}\r\n\r\n{text}",
                    text.len()
                )
            } else {
                "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n".to_owned()
            }
        } else if head.starts_with("GET") {
            "HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n".to_owned()
        } else {
            "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".to_owned()
        };
        if conn.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// The recorded requests whose body is a `tools/call`.
fn calls(heads: &[String]) -> Vec<&String> {
    heads.iter().filter(|h| h.contains(r#""method":"tools/call""#)).collect()
}

/// Every head the recorder got until it has been quiet for a moment.
fn drain_heads(received: &mpsc::Receiver<String>) -> Vec<String> {
    let mut heads = Vec::new();
    while let Ok(head) = received.recv_timeout(Duration::from_millis(500)) {
        heads.push(head);
    }
    heads
}

fn initialize_with_client_token(server: &Server) -> String {
    let init = post(
        server,
        &[("Authorization", &format!("Bearer {CLIENT_TOKEN}"))],
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
    );
    assert_eq!(init.status, 200, "{}", init.text());
    let sid = init.header("mcp-session-id").expect("a session id").to_owned();
    let list = post(
        server,
        &[("Mcp-Session-Id", &sid), ("Authorization", &format!("Bearer {CLIENT_TOKEN}"))],
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
    );
    assert_eq!(list.status, 200, "{}", list.text());
    assert!(list.json()["result"]["tools"].is_array(), "{}", list.text());
    sid
}

fn cmdline(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).expect("cmdline");
    String::from_utf8_lossy(&raw).replace('\0', " ")
}

#[test]
fn the_clients_authorization_never_reaches_an_http_upstream() {
    // With no credentials configured, the upstream sees no Authorization at all.
    for driver in DRIVERS {
        let (addr, received) = recording_upstream();
        let url = format!("http://{addr}/mcp");
        let front = Server::on(driver, &["--upstream", url.as_str(), "--threads", "1"]);
        initialize_with_client_token(&front);
        let heads = drain_heads(&received);
        assert!(heads.len() >= 3, "{driver}: initialize, initialized, tools/list: {heads:?}");
        for head in &heads {
            assert!(!head.contains(CLIENT_TOKEN), "{driver}: the client's token went up: {head}");
            assert!(
                !head.to_ascii_lowercase().contains("authorization:"),
                "{driver}: an Authorization went up: {head}"
            );
        }
    }
}

#[test]
fn configured_headers_reach_the_http_upstream_on_every_request_and_nowhere_else() {
    let file = TempFile::new(
        "http",
        "# the search upstream's key\n\
         search header Authorization Bearer ${TIDEMARK_TEST_UPSTREAM_TOKEN}\n\
         * header X-Tenant acme\n",
    );
    for driver in DRIVERS {
        let (addr, received) = recording_upstream();
        let upstream = format!("search=http://{addr}/mcp");
        let log = TempFile::new(&format!("http-{driver}.log"), "");
        let args = [
            "--upstream",
            upstream.as_str(),
            "--upstream-credentials",
            file.path(),
            "--threads",
            "1",
            "--driver",
            driver,
        ];
        let front = Server::start_logged(
            &args,
            &[("TIDEMARK_TEST_UPSTREAM_TOKEN", UPSTREAM_TOKEN)],
            &log.0,
        );
        let sid = initialize_with_client_token(&front);
        let gone = post(&front, &[("Mcp-Session-Id", &sid)], "").status;
        assert!(gone >= 400, "an empty POST is refused");
        let heads = drain_heads(&received);
        assert!(heads.len() >= 3, "{driver}: {heads:?}");
        for head in &heads {
            let expected = format!("\r\nAuthorization: Bearer {UPSTREAM_TOKEN}\r\n");
            assert!(head.contains(&expected), "{driver}: no credential on {head}");
            assert!(head.contains("\r\nX-Tenant: acme\r\n"), "{driver}: no X-Tenant on {head}");
            assert!(!head.contains(CLIENT_TOKEN), "{driver}: the client's token went up: {head}");
            assert_eq!(head.matches("Authorization:").count(), 1, "{driver}: {head}");
        }
        assert!(!cmdline(front.pid()).contains(UPSTREAM_TOKEN));
        drop(front);
        let logged = std::fs::read_to_string(&log.0).expect("log");
        assert!(logged.contains("upstream"), "{driver}: the trace log is empty: {logged:.200}");
        for secret in [UPSTREAM_TOKEN, CLIENT_TOKEN] {
            assert!(!logged.contains(secret), "{driver}: {secret} in the log");
        }
    }
}

#[test]
fn configured_environment_reaches_the_stdio_child_and_not_its_command_line() {
    let file = TempFile::new("stdio", "* env FIXTURE_SECRET ${TIDEMARK_TEST_CHILD_SECRET}\n");
    for driver in DRIVERS {
        let upstream = format!("stdio:python3 {FIXTURE}");
        let log = TempFile::new(&format!("stdio-{driver}.log"), "");
        let counter = std::env::temp_dir()
            .join(format!("tidemark-credentials-{driver}-{}.count", std::process::id()));
        let counter_env = format!("COUNTER_FILE={}", counter.display());
        let args = [
            "--upstream",
            upstream.as_str(),
            "--upstream-env",
            counter_env.as_str(),
            "--upstream-credentials",
            file.path(),
            "--threads",
            "1",
            "--driver",
            driver,
        ];
        let front =
            Server::start_logged(&args, &[("TIDEMARK_TEST_CHILD_SECRET", CHILD_SECRET)], &log.0);
        let sid = open_session(&front);
        let call = |id: u64, tool: &str, arguments: &str| {
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{arguments}}}}}"#
            );
            let answer = post(&front, &[("Mcp-Session-Id", &sid)], &body);
            let events = answer.events();
            let last = events.last().unwrap_or_else(|| panic!("{driver}: {}", answer.text()));
            last.json()["result"]["content"][0]["text"].as_str().expect("text").to_owned()
        };
        assert_eq!(call(2, "env", r#"{"name":"FIXTURE_SECRET"}"#), CHILD_SECRET, "{driver}");
        let child: u32 = call(3, "pid", "{}").parse().expect("a pid");
        for pid in [front.pid(), child] {
            assert!(!cmdline(pid).contains(CHILD_SECRET), "{driver}: in the argv of {pid}");
        }
        drop(front);
        let logged = std::fs::read_to_string(&log.0).expect("log");
        assert!(logged.contains("upstream started"), "{driver}: {logged:.200}");
        assert!(!logged.contains(CHILD_SECRET), "{driver}: the secret in the log");
        let _ = std::fs::remove_file(&counter);
    }
}

#[test]
fn a_bad_credentials_file_stops_the_start_naming_the_line_not_the_value() {
    let file = TempFile::new("bad", "search header Host ${TIDEMARK_TEST_UPSTREAM_TOKEN}\n");
    let missing = TempFile::new("missing", "search header X-Key ${TIDEMARK_TEST_UNSET_VAR}\n");
    for (file, expected) in
        [(&file, "Host is set by tidemark itself"), (&missing, "TIDEMARK_TEST_UNSET_VAR is unset")]
    {
        let output = Command::new(env!("CARGO_BIN_EXE_tidemark"))
            .args(["--listen", "127.0.0.1:0", "--upstream", "search=http://127.0.0.1:9/mcp"])
            .args(["--upstream-credentials", file.path()])
            .env("TIDEMARK_TEST_UPSTREAM_TOKEN", UPSTREAM_TOKEN)
            .env_remove("TIDEMARK_TEST_UNSET_VAR")
            .output()
            .expect("runs");
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("line 1") && stderr.contains(expected), "{stderr}");
        assert!(!stderr.contains(UPSTREAM_TOKEN), "{stderr}");
    }
    // --upstream-forward-authorization names an HTTP upstream, or the start fails.
    let output = Command::new(env!("CARGO_BIN_EXE_tidemark"))
        .args(["--listen", "127.0.0.1:0", "--upstream", "search=http://127.0.0.1:9/mcp"])
        .args(["--upstream-forward-authorization", "nosuch"])
        .output()
        .expect("runs");
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("\"nosuch\""));
}

/// `--auth-tokens` for the subject and forwarding tests: alice and bob.
const TOKENS: &str = "tok-alice-5e1 alice\ntok-bob-9c2 bob\n";

/// A legacy session as `token`, then a `tools/call` of `tool` in it and one in the 2026-07-28
/// era; both must succeed.
fn call_in_both_eras(server: &Server, token: &str, tool: &str) {
    let auth = format!("Bearer {token}");
    let init = post(
        server,
        &[("Authorization", &auth)],
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
    );
    assert_eq!(init.status, 200, "{token}: {}", init.text());
    let sid = init.header("mcp-session-id").expect("a session id").to_owned();
    let session = [("Mcp-Session-Id", sid.as_str()), ("Authorization", auth.as_str())];
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(post(server, &session, initialized).status, 202);
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"{tool}","arguments":{{}}}}}}"#
    );
    let legacy = post(server, &session, &body);
    assert!(legacy.text().contains("probed"), "{token} legacy: {}", legacy.text());
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"{tool}","arguments":{{}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
    );
    let headers = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", tool),
        ("Authorization", auth.as_str()),
    ];
    let modern = post(server, &headers, &body);
    assert!(modern.text().contains("probed"), "{token} 2026-07-28: {}", modern.text());
}

/// Goal: `NAME subject-header H` gives that HTTP upstream `H: <subject>` on the requests made
/// for an authorized client, with the right subject for two different tokens, in both eras and
/// both isolations (per-session: every request of the session's link; shared: each call's),
/// and never the token.
#[test]
fn the_subject_header_carries_each_callers_subject() {
    let file = TempFile::new("subject", "* subject-header X-Mcp-Subject\n");
    let tokens = TempFile::new("subject-tokens", TOKENS);
    for driver in DRIVERS {
        for isolation in ["per-session", "shared"] {
            let (addr, received) = recording_upstream();
            let url = format!("http://{addr}/mcp");
            let args = [
                "--upstream",
                url.as_str(),
                "--upstream-isolation",
                isolation,
                "--upstream-credentials",
                file.path(),
                "--auth-tokens",
                tokens.path(),
                "--threads",
                "1",
            ];
            let front = Server::on(driver, &args);
            for (token, subject, other) in
                [("tok-alice-5e1", "alice", "bob"), ("tok-bob-9c2", "bob", "alice")]
            {
                let ctx = format!("{driver} {isolation} {subject}");
                call_in_both_eras(&front, token, "probe");
                let heads = drain_heads(&received);
                let calls = calls(&heads);
                assert_eq!(calls.len(), 2, "{ctx}: a call per era: {heads:?}");
                let mine = format!("\r\nX-Mcp-Subject: {subject}\r\n");
                for head in &calls {
                    assert!(head.contains(&mine), "{ctx}: no subject on {head}");
                }
                for head in &heads {
                    assert!(!head.contains(&format!("X-Mcp-Subject: {other}")), "{ctx}: {head}");
                    assert!(!head.contains(token), "{ctx}: the token went up: {head}");
                    assert!(!head.to_ascii_lowercase().contains("authorization:"), "{ctx}");
                }
                if isolation == "per-session" {
                    // The session's own link: its initialize carries the opener's subject too.
                    let init = heads.iter().find(|h| h.contains(r#""method":"initialize""#));
                    let init = init.unwrap_or_else(|| panic!("{ctx}: no initialize: {heads:?}"));
                    assert!(init.contains(&mine), "{ctx}: {init}");
                }
            }
        }
    }
}

/// Goal: `--upstream-forward-authorization NAME` sends the client's own `Authorization` to
/// that upstream on the requests made for the client, in place of a configured one (which
/// stays for the link's own requests that no client made), and to no other upstream.
#[test]
fn forwarding_sends_the_clients_token_to_the_named_upstream_only() {
    let file = TempFile::new(
        "forward",
        "same header Authorization Bearer configured-fallback\n\
         other header Authorization Bearer ${TIDEMARK_TEST_UPSTREAM_TOKEN}\n",
    );
    let tokens = TempFile::new("forward-tokens", TOKENS);
    for driver in DRIVERS {
        let (same_addr, same_heads) = recording_upstream();
        let (other_addr, other_heads) = recording_upstream();
        let same = format!("same=http://{same_addr}/mcp");
        let other = format!("other=http://{other_addr}/mcp");
        let args = [
            "--upstream",
            same.as_str(),
            "--upstream",
            other.as_str(),
            "--upstream-forward-authorization",
            "same",
            "--upstream-credentials",
            file.path(),
            "--auth-tokens",
            tokens.path(),
            "--threads",
            "1",
            "--driver",
            driver,
        ];
        let log = TempFile::new(&format!("forward-{driver}.log"), "");
        let envs = [("TIDEMARK_TEST_UPSTREAM_TOKEN", UPSTREAM_TOKEN)];
        let front = Server::start_logged(&args, &envs, &log.0);
        for token in ["tok-alice-5e1", "tok-bob-9c2"] {
            let ctx = format!("{driver} {token}");
            call_in_both_eras(&front, token, "same__probe");
            call_in_both_eras(&front, token, "other__probe");
            let forwarded = format!("\r\nAuthorization: Bearer {token}\r\n");
            let same = drain_heads(&same_heads);
            assert_eq!(calls(&same).len(), 2, "{ctx}: {same:?}");
            for head in calls(&same) {
                assert!(head.contains(&forwarded), "{ctx}: not forwarded: {head}");
                assert!(!head.contains("configured-fallback"), "{ctx}: {head}");
            }
            // The configured one only where no caller is (the core's stateless link's own
            // initialize and listing); one `Authorization` per request.
            for head in &same {
                assert_eq!(head.matches("Authorization:").count(), 1, "{ctx}: {head}");
            }
            let other = drain_heads(&other_heads);
            assert_eq!(calls(&other).len(), 2, "{ctx}: {other:?}");
            let configured = format!("\r\nAuthorization: Bearer {UPSTREAM_TOKEN}\r\n");
            for head in &other {
                assert!(!head.contains(token), "{ctx}: the client's token reached another: {head}");
                assert!(head.contains(&configured), "{ctx}: {head}");
            }
        }
        drop(front);
        let logged = std::fs::read_to_string(&log.0).expect("log");
        assert!(logged.contains("upstream"), "{driver}: the trace log is empty: {logged:.200}");
        for secret in ["tok-alice-5e1", "tok-bob-9c2", UPSTREAM_TOKEN, "configured-fallback"] {
            assert!(!logged.contains(secret), "{driver}: {secret} in the log");
        }
    }
}
