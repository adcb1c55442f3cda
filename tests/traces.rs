//! Goal: OpenTelemetry traces (`--otlp-endpoint`, issue 21 item 3) where a cargo test can
//! see them: the W3C `traceparent` parser takes exactly the values the Trace Context spec
//! allows (malformed ones start a new trace, never fail a request); with tracing off no
//! exporter thread exists and a request carrying a `traceparent` is served as any other; with
//! it on and no collector listening, requests are still answered (export is off the request
//! path) and the exporter is its own thread, not a worker; the tracing flags are checked at
//! start. The spans themselves, their attributes and parentage are checked against a real OTLP
//! receiver by `scripts/traces.sh`.
//! Method: the parser through `tidemark::fuzz_support`; the real binary on both drivers over
//! loopback, its threads read from `/proc/<pid>/task/*/comm` (the exporter is `tidemark-otlp`),
//! its counters from `/metrics`.

mod support;

use std::net::TcpListener;
use std::process::Command;

use support::{open_session, post, scrape, Server, DRIVERS, INIT};
use tidemark::fuzz_support::{TraceParent, TRACEPARENT_LEN};

const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[test]
fn a_valid_traceparent_is_parsed_and_written_back_as_it_came() {
    let parent = TraceParent::parse(VALID.as_bytes()).expect("valid");
    assert_eq!(parent.trace_id[0], 0x4b);
    assert_eq!(parent.span_id[7], 0xb7);
    assert!(parent.sampled);
    assert_eq!(parent.header_value(), VALID);
    assert_eq!(VALID.len(), TRACEPARENT_LEN);
    // Surrounding whitespace is the header's (OWS), not the value's.
    assert_eq!(TraceParent::parse(format!("  {VALID}\t").as_bytes()), Some(parent));
}

#[test]
fn the_sampled_flag_is_bit_zero_of_the_flags() {
    let flags = |f: &str| TraceParent::parse(format!("{}-{f}", &VALID[..52]).as_bytes());
    assert!(!flags("00").expect("valid").sampled);
    assert!(flags("01").expect("valid").sampled);
    assert!(flags("03").expect("valid").sampled);
    assert!(!flags("02").expect("valid").sampled);
}

#[test]
fn malformed_traceparents_are_refused() {
    let zero_trace = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
    let zero_span = "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01";
    let cases: [(&str, &str); 16] = [
        ("", "empty"),
        ("00", "version only"),
        (&VALID[..54], "one byte short"),
        ("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "uppercase hex"),
        ("00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", "not hex"),
        ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "version ff"),
        ("0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "version not hex"),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", "v00 with more"),
        ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", "later version, no dash"),
        ("00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "separator 1"),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01", "separator 2"),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7_01", "separator 3"),
        (zero_trace, "all-zero trace id"),
        (zero_span, "all-zero span id"),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g", "flags not hex"),
        ("00-4bf92f3577b34da6a3ce929d0e0e47-3600f067aa0ba902b7-01", "fields shifted"),
    ];
    for (value, why) in cases {
        assert_eq!(TraceParent::parse(value.as_bytes()), None, "{why}: {value:?}");
    }
    // Not UTF-8 at all.
    assert_eq!(TraceParent::parse(&[0xff; TRACEPARENT_LEN]), None);
}

#[test]
fn a_later_version_is_read_by_its_first_four_fields() {
    let later = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-holds";
    let parent = TraceParent::parse(later.as_bytes()).expect("a later version is accepted");
    assert_eq!(parent.header_value(), VALID, "we answer in version 00");
    let exact = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    assert!(TraceParent::parse(exact.as_bytes()).is_some());
}

/// The names of the process's threads.
fn threads_of(server: &Server) -> Vec<String> {
    let tasks = format!("/proc/{}/task", server.pid());
    std::fs::read_dir(tasks)
        .expect("the server's tasks")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_owned())
        .collect()
}

fn metric(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[test]
fn off_no_exporter_runs_and_a_traceparent_changes_nothing() {
    for driver in DRIVERS {
        let server = Server::with_admin(driver, &[]);
        let session = open_session(&server);
        let ping = r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#;
        let headers =
            [("Mcp-Session-Id", session.as_str()), ("MCP-Protocol-Version", "2025-11-25")];
        let plain = post(&server, &headers, ping);
        let mut traced = headers.to_vec();
        traced.push(("traceparent", VALID));
        let with_parent = post(&server, &traced, ping);
        assert_eq!(plain.status, 200, "{driver}");
        assert_eq!(with_parent.status, plain.status, "{driver}");
        assert_eq!(with_parent.body, plain.body, "{driver}: the same answer");
        let threads = threads_of(&server);
        assert!(!threads.iter().any(|t| t == "tidemark-otlp"), "{driver}: {threads:?}");
        let text = scrape(&server.metrics());
        assert_eq!(metric(&text, "tidemark_trace_spans_dropped_total"), Some(0), "{driver}");
    }
}

#[test]
fn on_without_a_collector_requests_are_answered_and_the_exporter_is_its_own_thread() {
    // A port nobody listens on: every export fails (connection refused), off the workers.
    let closed = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    let endpoint = format!("http://127.0.0.1:{port}/v1/traces");
    for driver in DRIVERS {
        let server = Server::with_admin(driver, &["--threads", "2", "--otlp-endpoint", &endpoint]);
        for _ in 0..20 {
            let answer = post(&server, &[("traceparent", VALID)], INIT);
            assert_eq!(answer.status, 200, "{driver}: {}", answer.text());
        }
        let threads = threads_of(&server);
        // The exporter, and any helper thread its HTTP client starts (Linux threads inherit
        // their creator's name).
        assert!(threads.iter().any(|t| t == "tidemark-otlp"), "{threads:?}");
        assert!(
            threads.iter().any(|t| t == "tidemark-0") && threads.iter().any(|t| t == "tidemark-1")
        );
    }
}

#[test]
fn the_tracing_flags_are_checked_at_start() {
    let refused = |args: &[&str], says: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_tidemark"))
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .output()
            .expect("run tidemark");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} started");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    };
    refused(&["--otlp-endpoint", "127.0.0.1:4318"], "--otlp-endpoint must be an http");
    refused(&["--otlp-endpoint", "ftp://x/v1/traces"], "--otlp-endpoint must be an http");
    refused(&["--otlp-sample-ratio", "1.5"], "--otlp-sample-ratio must be within 0 and 1");
    refused(&["--otlp-sample-ratio=-0.1"], "--otlp-sample-ratio must be within 0 and 1");
    refused(&["--otlp-queue-spans", "0"], "--otlp-queue-spans must be greater than zero");
    refused(&["--otlp-batch-spans", "0"], "--otlp-batch-spans must be greater than zero");
}
