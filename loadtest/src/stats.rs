//! Measurements: latency histograms, error counters, the live numbers behind the progress line,
//! and the run report (`--json`) with its text table.
//!
//! Owns: the histogram shape (nanoseconds, 3 significant digits, up to an hour), percentile
//! summaries and curves, `RunReport` (the JSON schema `report` and `plot` read back).
//! Called by: `engine` and the scenarios (recording), `main` (printing and writing).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Longest latency a histogram tracks (1 hour, in ns); longer values are clamped.
const LATENCY_NS_MAX: u64 = 3_600_000_000_000;

pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_NS_MAX, 3).expect("invariant: constant bounds are valid")
}

pub fn record(hist: &mut Histogram<u64>, latency: Duration) {
    let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX).clamp(1, LATENCY_NS_MAX);
    hist.record(ns).expect("invariant: value clamped to the histogram's range");
}

/// Why an operation failed. Indexes `Errors`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Connect failed or the connection broke.
    Io,
    /// No complete answer within `--timeout`.
    Timeout,
    /// An HTTP status other than the one expected.
    Status,
    /// Unparseable HTTP or SSE.
    Wire,
    /// A JSON-RPC error, or a tool result with `isError: true`.
    Rpc,
    /// A response whose JSON-RPC id is not the request's.
    WrongId,
    /// An answer without a final response, or with the wrong number of progress events.
    Incomplete,
    /// An `Mcp-Session-Id` on the answer to a stateless (2026-07-28) request.
    Session,
}

pub const ERROR_KINDS: [ErrorKind; 8] = [
    ErrorKind::Io,
    ErrorKind::Timeout,
    ErrorKind::Status,
    ErrorKind::Wire,
    ErrorKind::Rpc,
    ErrorKind::WrongId,
    ErrorKind::Incomplete,
    ErrorKind::Session,
];

impl ErrorKind {
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Io => "io",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Status => "http_status",
            ErrorKind::Wire => "wire",
            ErrorKind::Rpc => "jsonrpc_error",
            ErrorKind::WrongId => "wrong_id",
            ErrorKind::Incomplete => "incomplete",
            ErrorKind::Session => "session_in_stateless_answer",
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
pub struct Errors([u64; ERROR_KINDS.len()]);

impl Errors {
    pub fn add(&mut self, kind: ErrorKind, n: u64) {
        self.0[kind as usize] += n;
    }
    pub fn merge(&mut self, other: &Errors) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a += b;
        }
    }
    pub fn into_counters(self, counters: &mut BTreeMap<String, i64>) {
        for kind in ERROR_KINDS {
            counters.insert(format!("errors.{}", kind.name()), self.0[kind as usize] as i64);
        }
    }
}

/// Numbers a worker publishes for the progress line (relaxed atomics, one set per worker).
#[derive(Debug, Default)]
pub struct Live {
    pub done: AtomicU64,
    pub events: AtomicU64,
    pub errors: AtomicU64,
    /// Percentiles of the last published interval, in ns.
    pub p50_ns: AtomicU64,
    pub p99_ns: AtomicU64,
}

impl Live {
    /// Publishes an interval histogram and clears it.
    pub fn publish_interval(&self, interval: &mut Histogram<u64>) {
        if interval.is_empty() {
            return;
        }
        self.p50_ns.store(interval.value_at_quantile(0.5), Ordering::Relaxed);
        self.p99_ns.store(interval.value_at_quantile(0.99), Ordering::Relaxed);
        interval.reset();
    }
}

/// Prints one progress line per second on stderr until `stop` is set.
pub fn spawn_progress(
    name: &'static str,
    unit: &'static str,
    lives: Vec<Arc<Live>>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let start = Instant::now();
        let mut last = (0u64, 0u64, start);
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
            let now = Instant::now();
            if now.duration_since(last.2) < Duration::from_secs(1) {
                continue;
            }
            let sum = |f: fn(&Live) -> &AtomicU64| -> u64 {
                lives.iter().map(|l| f(l).load(Ordering::Relaxed)).sum()
            };
            let max = |f: fn(&Live) -> &AtomicU64| -> u64 {
                lives.iter().map(|l| f(l).load(Ordering::Relaxed)).max().unwrap_or(0)
            };
            let done = sum(|l| &l.done);
            let events = sum(|l| &l.events);
            let secs = now.duration_since(last.2).as_secs_f64();
            let mut line = format!(
                "[{:>6.1}s] {name:<9} {:>11} {unit}/s",
                now.duration_since(start).as_secs_f64(),
                thousands((done - last.0) as f64 / secs)
            );
            if events > 0 {
                let _ =
                    write!(line, " {:>13} events/s", thousands((events - last.1) as f64 / secs));
            }
            let _ = write!(
                line,
                "  p50 {:>8}  p99 {:>8}  errors {}",
                micros(max(|l| &l.p50_ns)),
                micros(max(|l| &l.p99_ns)),
                sum(|l| &l.errors)
            );
            eprintln!("{line}");
            last = (done, events, now);
        }
    })
}

fn micros(ns: u64) -> String {
    if ns == 0 {
        return "-".to_owned();
    }
    format!("{:.0}µs", ns as f64 / 1000.0)
}

/// Large values with thousands separators, small ones with decimals.
pub fn human(value: f64) -> String {
    if value.abs() >= 1000.0 {
        thousands(value)
    } else {
        format!("{value:.2}")
    }
}

/// `1234567.8` → `1,234,568`.
pub fn thousands(value: f64) -> String {
    if value <= -0.5 {
        return format!("-{}", thousands(-value));
    }
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A latency distribution in the report, in microseconds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Series {
    pub name: String,
    pub count: u64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    pub mean_us: f64,
    /// `[percentile, µs]` points, percentile in 0..100, dense in the tail: the plot's input.
    pub curve: Vec<[f64; 2]>,
}

impl Series {
    pub fn from_histogram(name: &str, hist: &Histogram<u64>) -> Series {
        let us = |ns: u64| ns as f64 / 1000.0;
        let mut curve = Vec::new();
        if !hist.is_empty() {
            // 1/(1-p) from 1 to 10^6, 20 points per decade, then the max.
            for step in 0..=120 {
                let tail = 10f64.powf(-(step as f64) / 20.0);
                let q = 1.0 - tail;
                curve.push([q * 100.0, us(hist.value_at_quantile(q))]);
                if tail * (hist.len() as f64) < 1.0 {
                    break;
                }
            }
            curve.push([100.0, us(hist.max())]);
        }
        Series {
            name: name.to_owned(),
            count: hist.len(),
            p50_us: us(hist.value_at_quantile(0.5)),
            p90_us: us(hist.value_at_quantile(0.9)),
            p99_us: us(hist.value_at_quantile(0.99)),
            p999_us: us(hist.value_at_quantile(0.999)),
            max_us: us(hist.max()),
            mean_us: hist.mean() / 1000.0,
            curve,
        }
    }
}

/// What one run produced; written by `--json`, read back by `report` and `plot`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunReport {
    pub tool: String,
    pub scenario: String,
    /// Free-form name of the server under test (`--label`), e.g. `tidemark` or `rmcp`.
    pub label: String,
    pub url: String,
    pub started_unix_s: u64,
    /// The flags of the run.
    pub config: serde_json::Value,
    /// Length of the measurement window (after warm-up), in seconds.
    pub measured_s: f64,
    /// Rates over the measurement window (`calls_per_s`, `events_per_s`, ...).
    pub throughput: BTreeMap<String, f64>,
    pub latency: Vec<Series>,
    /// Error and correctness counters.
    pub counters: BTreeMap<String, i64>,
    /// Other measured values (`rss_per_session_bytes`, ...).
    pub values: BTreeMap<String, f64>,
    /// False when a correctness counter that must be 0 was not.
    pub ok: bool,
    pub failures: Vec<String>,
}

impl RunReport {
    pub fn new(scenario: &str, label: &str, url: &str, config: serde_json::Value) -> RunReport {
        RunReport {
            tool: format!("tidemark-load {}", env!("CARGO_PKG_VERSION")),
            scenario: scenario.to_owned(),
            label: label.to_owned(),
            url: url.to_owned(),
            started_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            config,
            measured_s: 0.0,
            throughput: BTreeMap::new(),
            latency: Vec::new(),
            counters: BTreeMap::new(),
            values: BTreeMap::new(),
            ok: true,
            failures: Vec::new(),
        }
    }

    /// Marks the run failed when `counter` is not zero.
    pub fn require_zero(&mut self, counter: &str) {
        let value = self.counters.get(counter).copied().unwrap_or(0);
        if value != 0 {
            self.ok = false;
            self.failures.push(format!("{counter} = {value} (must be 0)"));
        }
    }

    /// The human-readable table printed at the end of a run.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\n== {} against {} ({})  measured {:.2} s",
            self.scenario, self.label, self.url, self.measured_s
        );
        for (name, rate) in &self.throughput {
            let _ = writeln!(out, "  {name:<34} {:>14}", thousands(*rate));
        }
        for (name, value) in &self.values {
            let _ = writeln!(out, "  {name:<34} {:>14}", human(*value));
        }
        if !self.latency.is_empty() {
            let _ = writeln!(
                out,
                "  {:<34} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}",
                "latency (µs)", "count", "p50", "p90", "p99", "p99.9", "max"
            );
            for s in &self.latency {
                let _ = writeln!(
                    out,
                    "  {:<34} {:>10} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
                    s.name, s.count, s.p50_us, s.p90_us, s.p99_us, s.p999_us, s.max_us
                );
            }
        }
        let nonzero: Vec<String> = self
            .counters
            .iter()
            .filter(|(k, v)| **v != 0 || !k.starts_with("errors."))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(
            out,
            "  counters: {}",
            if nonzero.is_empty() { "all 0".to_owned() } else { nonzero.join(" ") }
        );
        let _ = writeln!(
            out,
            "  result: {}",
            if self.ok { "OK".to_owned() } else { format!("FAILED: {}", self.failures.join("; ")) }
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0.4), "0");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1234567.8), "1,234,568");
        assert_eq!(thousands(-4096.0), "-4,096");
        assert_eq!(thousands(-0.2), "0");
    }

    #[test]
    fn series_curve_is_monotonic_and_ends_at_max() {
        let mut h = new_histogram();
        for v in 1..=10_000u64 {
            h.record(v * 1000).unwrap();
        }
        let s = Series::from_histogram("x", &h);
        assert!(s.curve.windows(2).all(|w| w[0][0] <= w[1][0] && w[0][1] <= w[1][1]));
        assert_eq!(s.curve.last().unwrap()[0], 100.0);
        assert!((s.p50_us - 5000.0).abs() / 5000.0 < 0.01);
    }
}
