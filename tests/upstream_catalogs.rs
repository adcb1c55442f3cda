//! Goal: issue 38 finding 6, upstream tool catalogs inside a budget. Behind an upstream that
//! lists 3000 tools with 4 KB schemas (a 12 MB `tools/list`), every per-session link used to
//! keep its own catalog and every session its own tool table: about 70 MiB of RSS per session.
//! Equal listings are now held once per core, shared by every session listed them, and the
//! bytes of a core's distinct listings have a budget (`--upstream-catalog-bytes-per-core`, the
//! `tidemark_upstream_catalog_bytes` gauge): a session whose listing would take the core past
//! it gets `initialize` 503 + `Retry-After` naming the flag.
//! Method: the real binary (one core, per-session children) fronting
//! tests/fixtures/stdio_upstream.py with `--many-tools`; resident memory from
//! `/proc/<pid>/status` (`VmRSS`), the catalog bytes from `/metrics`.

mod support;

use support::{metric, post, scrape, server_with_metrics, Server, INIT};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/stdio_upstream.py");

/// tidemark (with its admin listener) fronting the fixture listing `many` more tools of
/// `schema_bytes` each, plus `extra` flags.
fn bridge(many: usize, schema_bytes: usize, extra: &[&str]) -> (Server, String) {
    let upstream =
        format!("stdio:python3 {FIXTURE} --many-tools {many} --schema-bytes {schema_bytes}");
    let mut args = vec!["--upstream", upstream.as_str(), "--threads", "1"];
    args.extend_from_slice(&["--upstream-kill-grace-ms", "200"]);
    args.extend_from_slice(&["--upstream-start-timeout-secs", "120"]);
    args.extend_from_slice(extra);
    server_with_metrics("uring", &args)
}

/// `VmRSS` of process `pid`, in bytes.
fn rss(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let line = status.lines().find(|l| l.starts_with("VmRSS")).expect("VmRSS");
    let kib: usize = line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("kB");
    kib * 1024
}

/// Opens a session (asserting 200) and lists its tools once, so its tool table is built.
fn session_with_tools(server: &Server, ctx: &str) -> usize {
    let init = post(server, &[], INIT);
    assert_eq!(init.status, 200, "{ctx}: {}", init.text());
    let sid = init.header("Mcp-Session-Id").expect("session id").to_owned();
    let list = post(
        server,
        &[("Mcp-Session-Id", &sid)],
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
    );
    list.json()["result"]["tools"].as_array().map_or(0, Vec::len)
}

#[test]
fn eight_sessions_behind_one_large_listing_hold_it_once() {
    // Goal: 8 sessions behind a 12 MB listing cost about one catalog, not eight: the seven
    // sessions after the first grow the server's RSS by less than 1.5× what the first did
    // (before: about 70 MiB each, several times the first's growth; RSS is noisy by tens of
    // MiB here, as each session's start parses its 12 MB listing and frees it again), and the
    // catalog gauge holds one listing's bytes.
    let (server, metrics) = bridge(3000, 4096, &[]);
    let before = rss(server.pid());
    let tools = session_with_tools(&server, "session 1");
    assert!(tools >= 3000, "the first session lists the bulk tools: {tools}");
    let after_one = rss(server.pid());
    for n in 2..=8 {
        let listed = session_with_tools(&server, &format!("session {n}"));
        assert_eq!(listed, tools, "session {n} is listed the same tools");
    }
    let after_eight = rss(server.pid());
    let first = after_one.saturating_sub(before);
    let seven = after_eight.saturating_sub(after_one);
    eprintln!("RSS: first session +{} MiB, seven more +{} MiB", first >> 20, seven >> 20);
    assert!(
        seven < first * 3 / 2,
        "seven more sessions grew RSS by {seven} bytes, the first by {first}"
    );
    let held = metric(&scrape(&metrics), "tidemark_upstream_catalog_bytes");
    assert!((12_000_000..16_000_000).contains(&held), "eight sessions hold one listing: {held}");
}

#[test]
fn a_listing_past_the_catalog_budget_refuses_initialize_naming_the_flag() {
    // Goal: the budget at its limit: a budget of exactly one listing's bytes takes sessions
    // listed it (they share it); one byte less refuses the first session with 503 +
    // Retry-After, -32603 naming `--upstream-catalog-bytes-per-core`, counted as a limit hit.
    // Method: a 200-tool listing; its bytes read from the gauge of a server without a budget.
    let (probe, metrics) = bridge(200, 1024, &[]);
    session_with_tools(&probe, "probe");
    let bytes = metric(&scrape(&metrics), "tidemark_upstream_catalog_bytes");
    drop(probe);
    let at = bytes.to_string();
    let (server, metrics) = bridge(200, 1024, &["--upstream-catalog-bytes-per-core", &at]);
    for n in 1..=3 {
        session_with_tools(&server, &format!("at the limit, session {n}"));
    }
    assert_eq!(metric(&scrape(&metrics), "tidemark_upstream_catalog_bytes"), bytes);
    let below = (bytes - 1).to_string();
    let (server, metrics) = bridge(200, 1024, &["--upstream-catalog-bytes-per-core", &below]);
    let init = post(&server, &[], INIT);
    assert_eq!(init.status, 503, "{}", init.text());
    assert!(init.header("Retry-After").is_some(), "Retry-After");
    let error = &init.json()["error"];
    assert_eq!(error["code"], -32603, "{error}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains("--upstream-catalog-bytes-per-core"), "{message}");
    assert!(init.header("Mcp-Session-Id").is_none(), "no session");
    let text = scrape(&metrics);
    assert_eq!(metric(&text, "tidemark_limit_hits_total{limit=\"upstream_catalog_bytes\"}"), 1);
    assert_eq!(metric(&text, "tidemark_upstream_catalog_bytes"), 0, "nothing held");
}
