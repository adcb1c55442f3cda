//! `modern`: `tools/call echo` in the 2026-07-28 stateless era: no `initialize`, no session, no
//! event ids; every request carries the protocol version in its `MCP-Protocol-Version` header
//! and `_meta`, plus the `Mcp-Method` / `Mcp-Name` routing headers. The load itself is
//! `calls::Calls` on the engine's keep-alive connections, as for `echo`.
//!
//! Owns: the request, and the watch on the server that shows what the stateless path keeps:
//! its RSS sampled over the run (`--rss`), and its session gauge and counters read before and
//! after (`--metrics-url`).
//! Called by: `main::modern`.
//! Never: opens a session.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::jsonrpc;
use crate::procfs;
use crate::wire::{PostTemplate, Target, MODERN_PROTOCOL_VERSION};

/// The server's metrics read before and after the run: a gauge (`_active`) is reported as its
/// value after the run, a `_total` counter as its change over the run.
pub const SERVER_METRICS: [&str; 4] = [
    "tidemark_sessions_active",
    "tidemark_sessions_created_total",
    "tidemark_modern_requests_total",
    "tidemark_connections_active",
];

/// The one request every connection sends (`{id}` filled per request).
pub fn template(target: &Target, payload_bytes: usize) -> PostTemplate {
    let body = jsonrpc::modern_echo_body(&"x".repeat(payload_bytes), MODERN_PROTOCOL_VERSION);
    PostTemplate::with_headers(
        target,
        &[
            ("MCP-Protocol-Version", MODERN_PROTOCOL_VERSION),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "echo"),
        ],
        &body,
    )
}

/// Reads the server's RSS every `every` on its own thread until `finish`.
pub struct RssSampler {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Vec<(Instant, u64)>>,
}

impl RssSampler {
    pub fn start(pid: u32, every: Duration) -> RssSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut samples = Vec::new();
            let mut next = Instant::now();
            while !flag.load(Ordering::Relaxed) {
                let now = Instant::now();
                if now >= next {
                    if let Ok(rss) = procfs::rss_bytes(pid) {
                        samples.push((now, rss));
                    }
                    next += every;
                }
                std::thread::sleep(Duration::from_millis(20).min(every));
            }
            samples
        });
        RssSampler { stop, handle }
    }

    pub fn finish(self) -> Vec<(Instant, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

/// The RSS figures of a run: before the load, at the start and end of the measurement window,
/// the largest sample, and the growth over the window (end − start).
pub fn rss_values(
    samples: &[(Instant, u64)],
    before: u64,
    (measure_from, end): (Instant, Instant),
    values: &mut BTreeMap<String, f64>,
) {
    values.insert("server_rss_before_bytes".into(), before as f64);
    let window: Vec<u64> =
        samples.iter().filter(|(t, _)| *t >= measure_from && *t <= end).map(|s| s.1).collect();
    if let (Some(first), Some(last)) = (window.first(), window.last()) {
        values.insert("server_rss_measure_start_bytes".into(), *first as f64);
        values.insert("server_rss_measure_end_bytes".into(), *last as f64);
        values.insert("server_rss_growth_bytes".into(), *last as f64 - *first as f64);
    }
    if let Some(max) = samples.iter().map(|s| s.1).max() {
        values.insert("server_rss_max_bytes".into(), max as f64);
    }
    values.insert("server_rss_samples".into(), window.len() as f64);
}

/// One line for stderr: every sample in KiB with its time from `from` (negative: before it).
pub fn rss_line(samples: &[(Instant, u64)], from: Instant) -> String {
    let parts: Vec<String> = samples
        .iter()
        .map(|(t, rss)| {
            let at = if *t >= from {
                t.duration_since(from).as_secs_f64()
            } else {
                -from.duration_since(*t).as_secs_f64()
            };
            format!("{at:.1}s={}", rss / 1024)
        })
        .collect();
    format!("# server RSS KiB (time from the end of the warm-up): {}", parts.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_is_a_modern_echo_without_a_session() {
        let target = Target::parse("http://127.0.0.1:9/mcp").unwrap();
        let bytes = String::from_utf8(template(&target, 4).bytes(5)).unwrap();
        for header in [
            "MCP-Protocol-Version: 2026-07-28\r\n",
            "Mcp-Method: tools/call\r\n",
            "Mcp-Name: echo\r\n",
        ] {
            assert!(bytes.contains(header), "{header}: {bytes}");
        }
        assert!(!bytes.to_ascii_lowercase().contains("mcp-session-id"));
        let body: serde_json::Value =
            serde_json::from_str(bytes.split_once("\r\n\r\n").unwrap().1).unwrap();
        assert_eq!(body["id"], 5);
        assert_eq!(body["params"]["arguments"]["text"], "xxxx");
        let meta = &body["params"]["_meta"];
        assert_eq!(meta["io.modelcontextprotocol/protocolVersion"], "2026-07-28");
        assert!(meta["io.modelcontextprotocol/clientCapabilities"].is_object());
    }

    #[test]
    fn rss_growth_is_taken_over_the_window() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let samples = [(at(0), 100), (at(1000), 200), (at(2000), 260), (at(3000), 250)];
        let mut values = BTreeMap::new();
        rss_values(&samples, 90, (at(1000), at(2500)), &mut values);
        assert_eq!(values["server_rss_measure_start_bytes"], 200.0);
        assert_eq!(values["server_rss_measure_end_bytes"], 260.0);
        assert_eq!(values["server_rss_growth_bytes"], 60.0);
        assert_eq!(values["server_rss_max_bytes"], 260.0);
        assert_eq!(values["server_rss_samples"], 2.0);
    }
}
