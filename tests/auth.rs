//! Goal: authorization at the endpoint (issue 18; CONTRACT §8), both io drivers: the 401/400/403
//! answers and their `WWW-Authenticate` challenges, the protected resource metadata (RFC 9728)
//! at both paths with CORS, the SIGHUP reload of `--auth-tokens` keeping sessions, the refusal
//! to listen on a non-loopback address without authorization, and no token in any answer or
//! in the most verbose log.
//!
//! Method: the real binary with a token file in a temporary directory, raw HTTP/1.1 over
//! blocking sockets; answers are asserted on their status, headers and JSON-RPC body.

mod support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use support::*;

const INIT_BODY: &str = INIT;

/// A 2026-07-28 `server/discover` (with its headers `MODERN_HEADERS`).
const MODERN_DISCOVER: &str = r#"{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;

/// A fresh temporary directory for one test's files.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tidemark-auth-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A token file: alice (two tokens, scopes `read`), bob (scope `read,write`).
const TOKENS: &str = "# test tokens\ntok-alice-1 alice read\ntok-alice-2 alice read\n\
                      tok-bob bob read,write\n";

fn token_file(name: &str, text: &str) -> PathBuf {
    let path = temp_dir(name).join("tokens");
    std::fs::write(&path, text).expect("write tokens");
    path
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// POST `body` with `Authorization: Bearer token` (none when `token` is empty) plus `extra`.
fn post_as(server: &Server, token: &str, extra: &[(&str, &str)], body: &str) -> Response {
    let auth = bearer(token);
    let mut headers: Vec<(&str, &str)> = extra.to_vec();
    if !token.is_empty() {
        headers.push(("Authorization", &auth));
    }
    post(server, &headers, body)
}

/// initialize + initialized as `token`'s subject; the session id.
fn open_session_as(server: &Server, token: &str) -> String {
    let r = post_as(server, token, &[], INIT_BODY);
    assert_eq!(r.status, 200, "{}", r.text());
    let sid = r.header("Mcp-Session-Id").expect("session id").to_owned();
    let n = post_as(
        server,
        token,
        &[("Mcp-Session-Id", &sid)],
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    assert_eq!(n.status, 202);
    sid
}

/// A refusal case: its name, headers, body, the status and the challenge wanted.
type Case<'a> = (&'a str, Vec<(&'a str, String)>, &'a str, u16, Option<&'a str>);

fn metadata_url(server: &Server) -> String {
    format!("http://{}/.well-known/oauth-protected-resource{}", server.addr, server.path)
}

/// Goal: the answer to every way of not presenting a valid token, both eras' requests
/// (legacy POST/GET/DELETE, a 2026-07-28 POST): 401 with the challenge pointing at the
/// metadata (plus `invalid_token` when a token was sent), 400 `invalid_request` for a query
/// token even beside a good header, 400 for two different Authorization headers, 431 for a
/// 100 KB one; every body a JSON-RPC error (-32600) that never echoes the token.
#[test]
fn refusals_carry_the_challenge() {
    for driver in DRIVERS {
        let tokens = token_file(&format!("refusals-{driver}"), TOKENS);
        let server = Server::on(driver, &["--auth-tokens", tokens.to_str().expect("path")]);
        let plain = format!("Bearer resource_metadata=\"{}\"", metadata_url(&server));
        let invalid = format!("{plain}, error=\"invalid_token\"");
        let modern = MODERN_DISCOVER;
        let modern_headers =
            [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "server/discover")];
        let cases: [Case<'_>; 8] = [
            ("no token", vec![], INIT_BODY, 401, Some(&plain)),
            (
                "unknown token",
                vec![("Authorization", bearer("tok-mallory"))],
                INIT_BODY,
                401,
                Some(&invalid),
            ),
            (
                "prefix of a token",
                vec![("Authorization", bearer("tok-alice"))],
                INIT_BODY,
                401,
                Some(&invalid),
            ),
            (
                "another scheme",
                vec![("Authorization", "Basic dG9rLWFsaWNlLTE6".into())],
                INIT_BODY,
                401,
                Some(&plain),
            ),
            (
                "empty bearer",
                vec![("Authorization", "Bearer ".into())],
                INIT_BODY,
                401,
                Some(&invalid),
            ),
            (
                "bad characters",
                vec![("Authorization", "Bearer tok\"alice".into())],
                INIT_BODY,
                401,
                Some(&invalid),
            ),
            (
                "modern, no token",
                modern_headers.iter().map(|(n, v)| (*n, v.to_string())).collect(),
                modern,
                401,
                Some(&plain),
            ),
            (
                "two different headers",
                vec![
                    ("Authorization", bearer("tok-alice-1")),
                    ("Authorization", bearer("tok-bob")),
                ],
                INIT_BODY,
                400,
                None,
            ),
        ];
        for (name, headers, body, status, challenge) in cases {
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            let r = post(&server, &headers, body);
            assert_eq!(r.status, status, "{driver} {name}: {}", r.text());
            assert_eq!(r.header("WWW-Authenticate"), challenge, "{driver} {name}");
            assert_eq!(r.json()["error"]["code"], -32600, "{driver} {name}");
            assert!(!r.text().contains("tok-"), "{driver} {name}: the body names a token");
        }
        // A query-string token is refused even with a valid header (RFC 6750 §2.3: never
        // accepted here), and the challenge says why.
        let mut h: Vec<(&str, &str)> = POST_HEADERS.to_vec();
        let good = bearer("tok-alice-1");
        h.push(("Authorization", &good));
        let path = format!("{}?access_token=tok-alice-1", server.path);
        let r = exchange(&server, &request("POST", &path, &server.host(), &h, Some(INIT_BODY)));
        assert_eq!(r.status, 400, "{driver} query token: {}", r.text());
        let challenge = r.header("WWW-Authenticate").expect("challenge");
        assert!(challenge.contains("error=\"invalid_request\""), "{challenge}");
        assert!(!r.text().contains("tok-alice"), "{driver}: a query token echoed");
        // GET and DELETE need a token too (before a session is even looked up).
        for method in ["GET", "DELETE"] {
            let raw = request(
                method,
                &server.path,
                &server.host(),
                &[("Accept", "text/event-stream"), ("Mcp-Session-Id", "x")],
                None,
            );
            let r = exchange(&server, &raw);
            assert_eq!(r.status, 401, "{driver} {method}");
            assert_eq!(r.header("WWW-Authenticate"), Some(plain.as_str()));
        }
        // A 100 KB Authorization header: the head limit answers (431), nothing else runs.
        let huge = format!("Bearer {}", "a".repeat(100 * 1024));
        let r = post(&server, &[("Authorization", &huge)], INIT_BODY);
        assert_eq!(r.status, 431, "{driver} 100 KB header");
        assert!(!r.text().contains("aaaa"), "{driver}: the 431 echoes the header");
        // The valid tokens serve, and keep serving on one keep-alive connection (the cache).
        let sid = open_session_as(&server, "tok-alice-1");
        let mut conn = server.connect();
        for id in 1..=3 {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
            let mut h: Vec<(&str, &str)> = POST_HEADERS.to_vec();
            h.push(("Authorization", &good));
            h.push(("Mcp-Session-Id", &sid));
            send(&mut conn, &request("POST", &server.path, &server.host(), &h, Some(&body)));
            let r = read_response(&mut conn);
            assert_eq!(r.status, 200, "{driver} keep-alive ping {id}: {}", r.text());
        }
        // The same connection with another token is validated again, not served from the cache.
        let mut h: Vec<(&str, &str)> = POST_HEADERS.to_vec();
        let bad = bearer("tok-mallory");
        h.push(("Authorization", &bad));
        h.push(("Mcp-Session-Id", &sid));
        let ping = r#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#;
        send(&mut conn, &request("POST", &server.path, &server.host(), &h, Some(ping)));
        assert_eq!(
            read_response(&mut conn).status,
            401,
            "{driver}: the cache served another token"
        );
        let r = post_as(&server, "tok-alice-1", modern_headers.as_slice(), modern);
        assert_eq!(r.status, 200, "{driver} modern with a token: {}", r.text());
    }
}

/// Goal: the protected resource metadata (RFC 9728) at the well-known path and its
/// path-inserted form, without a token, with the configured fields; shared by CORS with a
/// listed origin (preflight included); other methods 405; other well-known paths 404; and no
/// metadata at all when authorization is off.
#[test]
fn metadata_document_at_both_paths() {
    for driver in DRIVERS {
        let tokens = token_file(&format!("metadata-{driver}"), TOKENS);
        let server = Server::on(
            driver,
            &[
                "--auth-tokens",
                tokens.to_str().expect("path"),
                "--auth-resource",
                "https://mcp.example/mcp",
                "--auth-issuer",
                "https://as.example",
                "--auth-scopes-supported",
                "read,write",
                "--allowed-origin",
                "https://app.example",
            ],
        );
        let well_known = "/.well-known/oauth-protected-resource";
        for path in [well_known.to_owned(), format!("{well_known}{}", server.path)] {
            let raw =
                request("GET", &path, &server.host(), &[("Origin", "https://app.example")], None);
            let r = exchange(&server, &raw);
            assert_eq!(r.status, 200, "{driver} {path}: {}", r.text());
            assert_eq!(r.header("Access-Control-Allow-Origin"), Some("https://app.example"));
            let doc = r.json();
            assert_eq!(doc["resource"], "https://mcp.example/mcp");
            assert_eq!(doc["authorization_servers"], serde_json::json!(["https://as.example"]));
            assert_eq!(doc["scopes_supported"], serde_json::json!(["read", "write"]));
            assert_eq!(doc["bearer_methods_supported"], serde_json::json!(["header"]));
            let preflight = request(
                "OPTIONS",
                &path,
                &server.host(),
                &[("Origin", "https://app.example"), ("Access-Control-Request-Method", "GET")],
                None,
            );
            let r = exchange(&server, &preflight);
            assert_eq!(r.status, 204, "{driver} {path} preflight");
            let r = exchange(
                &server,
                &request("POST", &path, &server.host(), &POST_HEADERS, Some("{}")),
            );
            assert_eq!(r.status, 405, "{driver} {path} POST");
        }
        // A listed page reads the 401's challenge (its OAuth client starts from it).
        let mut h: Vec<(&str, &str)> = POST_HEADERS.to_vec();
        h.push(("Origin", "https://app.example"));
        let raw = request("POST", &server.path, &server.host(), &h, Some(INIT_BODY));
        let r = exchange(&server, &raw);
        assert_eq!(r.status, 401, "{driver}");
        let exposed = r.header("Access-Control-Expose-Headers").expect("exposed");
        assert!(exposed.contains("WWW-Authenticate"), "{driver}: {exposed}");
        let r = exchange(
            &server,
            &request("GET", &format!("{well_known}/other"), &server.host(), &[], None),
        );
        assert_eq!(r.status, 404, "{driver}: another resource's metadata");
        // The challenge names the resource's own metadata URL (RFC 9728 §3.1 path insertion).
        let r = post(&server, &[], INIT_BODY);
        let want = format!("Bearer resource_metadata=\"https://mcp.example{well_known}/mcp\"");
        assert_eq!(r.header("WWW-Authenticate"), Some(want.as_str()));
        let off = Server::on(driver, &[]);
        let r = exchange(&off, &request("GET", well_known, &off.host(), &[], None));
        assert_eq!(r.status, 404, "{driver}: metadata without authorization");
    }
}

/// Goal: `--auth-required-scope`: a token without it gets 403 `insufficient_scope` naming the
/// scope (so a client can step up), and the 401 challenge names it in `scope`.
#[test]
fn required_scope_is_403_insufficient_scope() {
    for driver in DRIVERS {
        let tokens = token_file(&format!("scope-{driver}"), TOKENS);
        let path = tokens.to_str().expect("path");
        let server = Server::on(driver, &["--auth-tokens", path, "--auth-required-scope", "write"]);
        let r = post_as(&server, "tok-alice-1", &[], INIT_BODY);
        assert_eq!(r.status, 403, "{driver}: {}", r.text());
        let challenge = r.header("WWW-Authenticate").expect("challenge");
        assert!(
            challenge.ends_with(", error=\"insufficient_scope\", scope=\"write\""),
            "{challenge}"
        );
        assert_eq!(post_as(&server, "tok-bob", &[], INIT_BODY).status, 200);
        let r = post(&server, &[], INIT_BODY);
        assert!(r.header("WWW-Authenticate").expect("challenge").ends_with(", scope=\"write\""));
    }
}

/// Goal: SIGHUP reloads the token file without dropping sessions: a session opened with a
/// token that the new file drops continues with a new token of the same subject; the dropped
/// token is refused at once (also on the connection that had it cached); a file that does not
/// load keeps the old set. Method: rewrite the file, signal, poll until the new token serves.
#[test]
fn sighup_reload_keeps_sessions() {
    for driver in DRIVERS {
        let tokens = token_file(&format!("reload-{driver}"), TOKENS);
        let server = Server::on(driver, &["--auth-tokens", tokens.to_str().expect("path")]);
        let sid = open_session_as(&server, "tok-alice-1");
        let mut cached = server.connect();
        let ping = |id: u64| format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
        let old = bearer("tok-alice-1");
        let mut h: Vec<(&str, &str)> = POST_HEADERS.to_vec();
        h.push(("Authorization", &old));
        h.push(("Mcp-Session-Id", &sid));
        send(&mut cached, &request("POST", &server.path, &server.host(), &h, Some(&ping(1))));
        assert_eq!(read_response(&mut cached).status, 200);
        std::fs::write(&tokens, "tok-alice-3 alice read\ntok-bob bob read,write\n")
            .expect("rewrite");
        server.signal("HUP");
        let reloaded = poll_until(Duration::from_secs(10), || {
            post_as(&server, "tok-alice-3", &[("Mcp-Session-Id", &sid)], &ping(2)).status == 200
        });
        assert!(reloaded, "{driver}: the new token never served the session");
        send(&mut cached, &request("POST", &server.path, &server.host(), &h, Some(&ping(3))));
        assert_eq!(
            read_response(&mut cached).status,
            401,
            "{driver}: a dropped token still served"
        );
        // A broken file keeps the set in use.
        std::fs::write(&tokens, "lonely-token-without-subject\n").expect("rewrite");
        server.signal("HUP");
        // Nothing observable changes, so wait on a later reload that does change something.
        std::fs::write(&tokens, "tok-alice-3 alice read\ntok-carol carol\n").expect("rewrite");
        server.signal("HUP");
        assert!(poll_until(Duration::from_secs(10), || {
            post_as(&server, "tok-carol", &[], INIT_BODY).status == 200
        }));
        let r = post_as(&server, "tok-alice-3", &[("Mcp-Session-Id", &sid)], &ping(4));
        assert_eq!(r.status, 200, "{driver}: the session did not survive the reloads");
    }
}

/// Goal: tidemark refuses to listen on a non-loopback address with neither authorization nor
/// `--allow-unauthenticated`, with a message naming both flags; either flag lets it start.
#[test]
fn non_loopback_needs_auth_or_the_flag() {
    let bin = env!("CARGO_BIN_EXE_tidemark");
    let out = Command::new(bin)
        .args(["--listen", "0.0.0.0:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("run");
    assert!(!out.status.success(), "it listened on 0.0.0.0 without authorization");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--auth-tokens"), "{stderr}");
    assert!(stderr.contains("--allow-unauthenticated"), "{stderr}");
    assert!(out.stdout.is_empty(), "a banner was printed: it listened");
    let mut open = Command::new(bin);
    open.args(["--listen", "0.0.0.0:0", "--allow-unauthenticated"]);
    let _server = Server::spawn(open);
    let tokens = token_file("nonloopback", TOKENS);
    let mut with_auth = Command::new(bin);
    with_auth.args(["--listen", "0.0.0.0:0", "--auth-tokens", tokens.to_str().expect("path")]);
    let _server = Server::spawn(with_auth);
}

/// Goal: no token reaches the log at the most verbose level. Method: a debug build at
/// `RUST_LOG=trace` with its stderr in a file, every kind of request with tokens (valid,
/// invalid, in the query string, a reload), then the log is searched for the tokens' text.
#[test]
fn trace_log_holds_no_token() {
    let dir = temp_dir("log");
    let tokens = dir.join("tokens");
    std::fs::write(&tokens, TOKENS).expect("tokens");
    let log = dir.join("log");
    let mut command = Command::new(env!("CARGO_BIN_EXE_tidemark"));
    command
        .args(["--listen", "127.0.0.1:0", "--auth-tokens", tokens.to_str().expect("path")])
        .env("RUST_LOG", "trace")
        .stderr(std::fs::File::create(&log).expect("log file"));
    let server = Server::spawn(command);
    let sid = open_session_as(&server, "tok-alice-1");
    let _ = post_as(
        &server,
        "tok-alice-1",
        &[("Mcp-Session-Id", &sid)],
        &call(2, "echo", r#"{"text":"hi"}"#, false),
    );
    let _ = post_as(&server, "tok-mallory-secret", &[], INIT_BODY);
    let path = format!("{}?access_token=tok-query-secret", server.path);
    let _ =
        exchange(&server, &request("POST", &path, &server.host(), &POST_HEADERS, Some(INIT_BODY)));
    std::fs::write(&tokens, "tok-reloaded-secret alice\nbroken-line\n").expect("rewrite");
    server.signal("HUP");
    std::fs::write(&tokens, "tok-reloaded-secret alice\n").expect("rewrite");
    server.signal("HUP");
    assert!(poll_until(Duration::from_secs(10), || {
        post_as(&server, "tok-reloaded-secret", &[], INIT_BODY).status == 200
    }));
    drop(server);
    let text = std::fs::read_to_string(&log).expect("read log");
    assert!(text.contains("TRACE") || text.contains("DEBUG"), "not a verbose log: {text:.400}");
    assert!(text.contains("SIGHUP"), "the reloads were not logged");
    for secret in [
        "tok-alice-1",
        "tok-mallory-secret",
        "tok-query-secret",
        "tok-reloaded-secret",
        "broken-line",
    ] {
        assert!(!text.contains(secret), "the log holds {secret}");
    }
}

/// Goal: the per-tool policy (`--auth-policy`, `--auth-write-scope`), both eras: `tools/list`
/// shows a subject exactly the tools it may call, and a call of any other is refused 403
/// `insufficient_scope` naming the missing scopes (a JSON-RPC error with the request's id);
/// the write default spares tools annotated `readOnlyHint: true`. Method: the demo tools
/// (`slow_counter` is not read-only), a rule for `get_counter`; for every tool the server has,
/// each subject's listing is compared with the answer to calling it.
#[test]
fn policy_lists_what_it_allows_and_refuses_the_rest() {
    for driver in DRIVERS {
        let dir = temp_dir(&format!("policy-{driver}"));
        let tokens = dir.join("tokens");
        std::fs::write(&tokens, "tok-alice alice\ntok-bob bob counters,write\n").expect("tokens");
        let policy = dir.join("policy");
        std::fs::write(&policy, "# counters\ntool get_counter counters\n").expect("policy");
        let server = Server::on(
            driver,
            &[
                "--tools",
                "demo",
                "--auth-tokens",
                tokens.to_str().expect("path"),
                "--auth-policy",
                policy.to_str().expect("path"),
                "--auth-write-scope",
                "write",
            ],
        );
        let all = ["echo", "slow_counter", "get_counter", "greet"];
        let wanted = [("tok-alice", vec!["echo", "greet"]), ("tok-bob", all.to_vec())];
        for (token, allowed) in wanted {
            let sid = open_session_as(&server, token);
            let session = [("Mcp-Session-Id", sid.as_str())];
            let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
            let listed = post_as(&server, token, &session, list).json();
            let names = |v: &serde_json::Value| -> Vec<String> {
                let tools = v["result"]["tools"].as_array().expect("tools").iter();
                tools.map(|t| t["name"].as_str().expect("name").to_owned()).collect()
            };
            let mut legacy = names(&listed);
            legacy.sort();
            let mut want: Vec<String> = allowed.iter().map(|s| s.to_string()).collect();
            want.sort();
            assert_eq!(legacy, want, "{driver} {token}: legacy tools/list");
            let modern_list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
            let headers = [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/list")];
            let mut modern = names(&post_as(&server, token, &headers, modern_list).json());
            modern.sort();
            assert_eq!(modern, want, "{driver} {token}: 2026-07-28 tools/list");
            for (index, tool) in all.into_iter().enumerate() {
                let id = 5 + index as u64;
                if tool == "greet" {
                    // Allowed to both; a call would wait for an elicitation answer.
                    continue;
                }
                let args =
                    if tool == "slow_counter" { r#"{"steps":1,"delay_ms":1}"# } else { "{}" };
                let r = post_as(&server, token, &session, &call(id, tool, args, false));
                let ctx = format!("{driver} {token} legacy {tool}");
                if allowed.contains(&tool) {
                    assert_eq!(r.status, 200, "{ctx}: {}", r.text());
                    continue;
                }
                assert_eq!(r.status, 403, "{ctx}: {}", r.text());
                let challenge = r.header("WWW-Authenticate").expect("challenge");
                let scope = if tool == "get_counter" { "counters" } else { "write" };
                let tail = format!(", error=\"insufficient_scope\", scope=\"{scope}\"");
                assert!(challenge.ends_with(&tail), "{ctx}: {challenge}");
                assert_eq!(r.json()["id"], id, "{ctx}");
                let body = format!(
                    r#"{{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{{"name":"{tool}","arguments":{args},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
                );
                let headers = [
                    ("MCP-Protocol-Version", "2026-07-28"),
                    ("Mcp-Method", "tools/call"),
                    ("Mcp-Name", tool),
                ];
                let r = post_as(&server, token, &headers, &body);
                assert_eq!(r.status, 403, "{driver} {token} modern {tool}: {}", r.text());
                assert!(r.header("WWW-Authenticate").expect("challenge").ends_with(&tail));
            }
        }
    }
}

/// Goal: the policy flags without a verifier are refused at start (nothing would name scopes).
#[test]
fn policy_without_auth_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_tidemark"))
        .args(["--listen", "127.0.0.1:0", "--auth-write-scope", "write"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--auth-write-scope needs authorization"), "{stderr}");
}

/// Goal: an `upstream` rule of the policy covers every tool of that upstream (by its name) and
/// no other: a subject without its scope is not listed `b__*` and gets 403 calling one; with
/// the scope it is listed and served; upstream `a`'s tools need nothing. Method: tidemark in
/// front of two copies of tests/fixtures/stdio_upstream.py named `a` and `b`.
#[test]
fn policy_upstream_rule_covers_that_upstreams_tools() {
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/stdio_upstream.py");
    for driver in DRIVERS {
        let dir = temp_dir(&format!("policy-upstream-{driver}"));
        let tokens = dir.join("tokens");
        std::fs::write(&tokens, "tok-alice alice\ntok-bob bob b.use\n").expect("tokens");
        let policy = dir.join("policy");
        std::fs::write(&policy, "upstream b b.use\n").expect("policy");
        let counter = format!("COUNTER_FILE={}", dir.join("count").display());
        let (a, b) = (format!("a=stdio:python3 {fixture}"), format!("b=stdio:python3 {fixture}"));
        let server = Server::on(
            driver,
            &[
                "--threads",
                "1",
                "--upstream",
                &a,
                "--upstream",
                &b,
                "--upstream-env",
                &counter,
                "--auth-tokens",
                tokens.to_str().expect("path"),
                "--auth-policy",
                policy.to_str().expect("path"),
            ],
        );
        for (token, sees_b) in [("tok-alice", false), ("tok-bob", true)] {
            let sid = open_session_as(&server, token);
            let session = [("Mcp-Session-Id", sid.as_str())];
            let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
            let listed = post_as(&server, token, &session, list).json();
            let tools = listed["result"]["tools"].as_array().expect("tools");
            let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
            assert!(names.contains(&"a__echo"), "{driver} {token}: {names:?}");
            assert_eq!(names.contains(&"b__echo"), sees_b, "{driver} {token}: {names:?}");
            assert_eq!(names.iter().any(|n| n.starts_with("b__")), sees_b, "{driver} {token}");
            let r =
                post_as(&server, token, &session, &call(2, "b__echo", r#"{"text":"hi"}"#, false));
            if sees_b {
                assert_eq!(r.status, 200, "{driver} {token}: {}", r.text());
                assert!(r.text().contains("hi"), "{driver} {token}: {}", r.text());
            } else {
                assert_eq!(r.status, 403, "{driver} {token}: {}", r.text());
                let challenge = r.header("WWW-Authenticate").expect("challenge");
                assert!(challenge.ends_with("scope=\"b.use\""), "{challenge}");
            }
            let r =
                post_as(&server, token, &session, &call(3, "a__echo", r#"{"text":"hi"}"#, false));
            assert_eq!(r.status, 200, "{driver} {token} a__echo: {}", r.text());
        }
    }
}

/// Goal: SIGHUP reloads `--auth-policy` as it does the tokens: a new rule holds for the
/// requests after it, and a bad file keeps the old policy, logged with the file and line.
/// Method: the real binary with a policy that lets alice call `echo`; rewrite it to need a
/// scope alice lacks, SIGHUP, see the 403; break it, SIGHUP, see the warning naming file and
/// line while the old rule still holds.
#[test]
fn sighup_reloads_the_policy_and_a_bad_file_keeps_the_old_one() {
    for driver in DRIVERS {
        let dir = temp_dir(&format!("policy-reload-{driver}"));
        let tokens = dir.join("tokens");
        std::fs::write(&tokens, "tok-alice alice read\n").expect("tokens");
        let policy = dir.join("policy");
        std::fs::write(&policy, "tool echo read\n").expect("policy");
        let log = dir.join("log");
        let args = [
            "--driver",
            driver,
            "--auth-tokens",
            tokens.to_str().expect("path"),
            "--auth-policy",
            policy.to_str().expect("path"),
        ];
        let server = Server::start_logged(&args, &[], &log);
        let sid = open_session_as(&server, "tok-alice");
        let session = [("Mcp-Session-Id", sid.as_str())];
        let echo = |id: u64| call(id, "echo", r#"{"text":"hi"}"#, false);
        assert_eq!(post_as(&server, "tok-alice", &session, &echo(2)).status, 200, "{driver}");
        std::fs::write(&policy, "# echo now needs admin\ntool echo admin\n").expect("rewrite");
        server.signal("HUP");
        let refused = poll_until(Duration::from_secs(10), || {
            post_as(&server, "tok-alice", &session, &echo(3)).status == 403
        });
        assert!(refused, "{driver}: the reloaded policy never held");
        std::fs::write(&policy, "tool echo read\ntool echo\n").expect("break");
        server.signal("HUP");
        let path = policy.display().to_string();
        let logged = poll_until(Duration::from_secs(10), || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            text.contains("--auth-policy not reloaded") && text.contains(&path)
        });
        assert!(logged, "{driver}: no warning naming the file");
        let text = std::fs::read_to_string(&log).expect("log");
        let warning =
            text.lines().find(|l| l.contains("--auth-policy not reloaded")).expect("line");
        assert!(warning.contains(&format!("{path}:2:")), "{driver}: file:line: {warning}");
        let r = post_as(&server, "tok-alice", &session, &echo(4));
        assert_eq!(r.status, 403, "{driver}: the old policy did not stay: {}", r.text());
    }
}
