//! OpenTelemetry traces (`--otlp-endpoint`): W3C `traceparent` (parsed and written), the
//! span of one request (kind SERVER) or one upstream call (kind CLIENT) while it runs, each
//! core's bounded queue of finished spans, and the exporter thread that POSTs them as OTLP/HTTP
//! JSON.
//!
//! A worker records a finished span with one push into its core's `ArrayQueue` (lock-free,
//! bounded by `--otlp-queue-spans`); a full queue drops the span and counts it
//! (`tidemark_trace_spans_dropped_total`). One exporter thread, not a worker, takes up to
//! `--otlp-batch-spans` at a time from every queue and sends them (blocking `ureq`).
//!
//! Off (no `--otlp-endpoint`): no span is made, no queue or thread exists, and the request
//! path only tests `Config::otlp_endpoint` (`runtime::conn`). Never: blocks a worker, or lets a
//! peer's header size a span beyond `ATTRIBUTE_VALUE_BYTES_MAX` per value.

use std::cell::{Cell, RefCell};
use std::fmt::Write as _;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_queue::ArrayQueue;

use crate::config::OTLP_EXPORT_TIMEOUT_SECS;
use crate::config::{Config, ATTRIBUTE_VALUE_BYTES_MAX, OTLP_EXPORT_INTERVAL_MS};
use crate::metrics::CoreMetrics;

/// Bytes of a version-00 `traceparent` value: `00-{32 hex}-{16 hex}-{2 hex}`.
pub const TRACEPARENT_LEN: usize = 55;

/// A W3C trace context (`traceparent`): whose trace a span is in, which span, and whether the
/// trace is sampled (flag bit 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceParent {
    /// The trace id (never all zero).
    pub trace_id: [u8; 16],
    /// The span id (never all zero).
    pub span_id: [u8; 8],
    /// The `sampled` flag: the caller recorded its span, so we record ours (parent-based).
    pub sampled: bool,
}

impl TraceParent {
    /// Parses a `traceparent` header value (W3C Trace Context §3.2): lowercase hex, version
    /// `ff` refused, version `00` exactly 55 bytes, a later version at least 55 bytes with a
    /// `-` after them (its extra fields ignored), all-zero ids refused. `None`: the peer's
    /// value is not one; the request then starts a trace of its own.
    pub fn parse(value: &[u8]) -> Option<TraceParent> {
        let value = value.trim_ascii();
        if value.len() < TRACEPARENT_LEN {
            return None;
        }
        let version = hex_into::<1>(&value[0..2])?[0];
        if version == 0xff || (version == 0 && value.len() != TRACEPARENT_LEN) {
            return None;
        }
        if value.len() > TRACEPARENT_LEN && value[TRACEPARENT_LEN] != b'-' {
            return None;
        }
        if value[2] != b'-' || value[35] != b'-' || value[52] != b'-' {
            return None;
        }
        let trace_id = hex_into::<16>(&value[3..35])?;
        let span_id = hex_into::<8>(&value[36..52])?;
        let flags = hex_into::<1>(&value[53..55])?[0];
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceParent { trace_id, span_id, sampled: flags & 1 == 1 })
    }

    /// The version-00 header value naming this span as the parent.
    pub fn header_value(&self) -> String {
        let mut out = String::with_capacity(TRACEPARENT_LEN);
        out.push_str("00-");
        push_hex(&mut out, &self.trace_id);
        out.push('-');
        push_hex(&mut out, &self.span_id);
        out.push_str(if self.sampled { "-01" } else { "-00" });
        out
    }
}

/// `N` bytes from `2N` lowercase hex digits.
fn hex_into<const N: usize>(digits: &[u8]) -> Option<[u8; N]> {
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    if digits.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, pair) in digits.chunks_exact(2).enumerate() {
        out[i] = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(out)
}

fn push_hex(out: &mut String, bytes: &[u8]) {
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
}

/// OTLP span kinds (`opentelemetry.proto.trace.v1.Span.SpanKind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SpanKind {
    /// A request a client sent us.
    Server = 2,
    /// A call we sent an upstream.
    Client = 3,
}

/// An attribute's value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum AttrValue {
    Str(String),
    Int(i64),
}

/// One span, from its start until `finish` queues it (then: a finished-span record).
#[derive(Debug)]
pub(crate) struct Span {
    /// This span's own trace id, span id and sampling decision.
    context: TraceParent,
    parent: Option<[u8; 8]>,
    kind: SpanKind,
    name: String,
    start_unix_nanos: u64,
    end_unix_nanos: u64,
    attributes: Vec<(&'static str, AttrValue)>,
    /// `Some`: the span's status is ERROR, with this description.
    error: Option<String>,
}

impl Span {
    /// A request's span (kind SERVER): the child of the client's `traceparent` when it sent a
    /// valid one (sampled as the client says), else the root of a new trace, sampled at this
    /// core's `--otlp-sample-ratio`. `name` until the era names it (the HTTP method).
    pub(crate) fn server(incoming: Option<&[u8]>, name: &str) -> Span {
        let parent = incoming.and_then(TraceParent::parse);
        let trace_id = match parent {
            Some(p) => p.trace_id,
            None => random_trace_id(),
        };
        let sampled = match parent {
            Some(p) => p.sampled,
            None => ratio_samples(&trace_id, this_core_ratio()),
        };
        let context = TraceParent { trace_id, span_id: random_span_id(), sampled };
        Span::new(context, parent.map(|p| p.span_id), SpanKind::Server, name)
    }

    /// A span in `parent`'s trace, its child (sampled as the parent is).
    pub(crate) fn child(parent: &TraceParent, kind: SpanKind, name: String) -> Span {
        let context = TraceParent { span_id: random_span_id(), ..*parent };
        Span::new(context, Some(parent.span_id), kind, &name)
    }

    fn new(context: TraceParent, parent: Option<[u8; 8]>, kind: SpanKind, name: &str) -> Span {
        Span {
            context,
            parent,
            kind,
            name: bounded(name),
            start_unix_nanos: unix_nanos(),
            end_unix_nanos: 0,
            attributes: Vec::with_capacity(8),
            error: None,
        }
    }

    /// This span as the parent of what it calls (the `traceparent` an upstream is sent).
    pub(crate) fn context(&self) -> TraceParent {
        self.context
    }

    /// The parent's span id (`None`: a root span).
    #[cfg(test)]
    pub(crate) fn parent(&self) -> Option<[u8; 8]> {
        self.parent
    }

    /// Renames the span (`{mcp.method.name} {target}` once the body is decoded).
    pub(crate) fn rename(&mut self, name: &str) {
        self.name = bounded(name);
    }

    /// Sets string attribute `key` (a value past `ATTRIBUTE_VALUE_BYTES_MAX` is cut there).
    pub(crate) fn set_str(&mut self, key: &'static str, value: &str) {
        self.set(key, AttrValue::Str(bounded(value)));
    }

    /// Sets integer attribute `key`.
    pub(crate) fn set_int(&mut self, key: &'static str, value: i64) {
        self.set(key, AttrValue::Int(value));
    }

    fn set(&mut self, key: &'static str, value: AttrValue) {
        match self.attributes.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.attributes.push((key, value)),
        }
    }

    /// Marks the span failed: `error.type` and an ERROR status described by `message`.
    pub(crate) fn fail(&mut self, error_type: &str, message: &str) {
        self.set_str("error.type", error_type);
        self.error = Some(bounded(message));
    }

    /// Ends the span now and queues it on this core for the exporter: not when the trace is
    /// unsampled or this thread is no tracing core; counted as dropped when the queue is full.
    pub(crate) fn finish(mut self) {
        if !self.context.sampled {
            return;
        }
        self.end_unix_nanos = unix_nanos().max(self.start_unix_nanos);
        TRACER.with(|tracer| {
            if let Some(tracer) = tracer.borrow().as_ref() {
                if tracer.queue.push(self).is_err() {
                    tracer.metrics.trace_spans_dropped_total.inc();
                }
            }
        });
    }
}

/// `value`, cut to at most `ATTRIBUTE_VALUE_BYTES_MAX` bytes on a character boundary.
fn bounded(value: &str) -> String {
    let mut end = value.len().min(ATTRIBUTE_VALUE_BYTES_MAX);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    value[..end].to_owned()
}

fn unix_nanos() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
}

/// Whether a root span of `trace_id` is sampled at `ratio` (0..=1): its last 8 bytes below
/// `ratio` of the u64 range (OpenTelemetry's TraceIdRatioBased), so every node that sees the
/// same trace id decides alike.
pub(crate) fn ratio_samples(trace_id: &[u8; 16], ratio: f64) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    let mut low = [0u8; 8];
    low.copy_from_slice(&trace_id[8..]);
    let bound = (ratio.max(0.0) * u64::MAX as f64) as u64;
    u64::from_be_bytes(low) < bound
}

/// One core's tracing: its queue, the counter of what the queue dropped, the sample ratio,
/// and the state of its id generator.
struct CoreTracer {
    queue: Arc<SpanQueue>,
    metrics: Arc<CoreMetrics>,
    ratio: f64,
}

/// A core's finished spans, waiting for the exporter.
pub(crate) type SpanQueue = ArrayQueue<Span>;

thread_local! {
    /// This worker's tracing (`enter_core`); `None` off the workers or with tracing off.
    static TRACER: RefCell<Option<Rc<CoreTracer>>> = const { RefCell::new(None) };
    /// SplitMix64 state of this thread's span and trace ids, seeded from the OS once.
    static ID_STATE: Cell<u64> = Cell::new(seed());
}

/// Makes this thread the tracing core writing `queue` (a worker, before it serves).
pub(crate) fn enter_core(queue: Arc<SpanQueue>, metrics: Arc<CoreMetrics>, ratio: f64) {
    TRACER.with(|t| *t.borrow_mut() = Some(Rc::new(CoreTracer { queue, metrics, ratio })));
}

fn this_core_ratio() -> f64 {
    TRACER.with(|t| t.borrow().as_ref().map_or(1.0, |t| t.ratio))
}

fn seed() -> u64 {
    let mut bytes = [0u8; 8];
    // Without OS randomness the ids are still unique per thread and start (time-seeded).
    if getrandom::fill(&mut bytes).is_err() {
        bytes = unix_nanos().to_ne_bytes();
    }
    u64::from_ne_bytes(bytes)
}

/// The next 64 random bits of this thread (SplitMix64: ids need uniqueness, not secrecy).
fn next_u64() -> u64 {
    ID_STATE.with(|state| {
        let s = state.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
        state.set(s);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

fn random_span_id() -> [u8; 8] {
    loop {
        let id = next_u64();
        if id != 0 {
            return id.to_be_bytes();
        }
    }
}

fn random_trace_id() -> [u8; 16] {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&random_span_id());
    id[8..].copy_from_slice(&next_u64().to_be_bytes());
    id
}

/// The exporter thread: started with the workers when `--otlp-endpoint` is set; dropping it
/// stops the thread after one last export of what the queues hold.
pub(crate) struct Exporter {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Exporter {
    /// One queue of `--otlp-queue-spans` per core, and the thread that empties them into
    /// `endpoint`. `Ok(None)`: tracing is off.
    pub(crate) fn start(cfg: &Config) -> std::io::Result<Option<(Exporter, Vec<Arc<SpanQueue>>)>> {
        let Some(endpoint) = cfg.trace.endpoint.clone() else { return Ok(None) };
        let queues: Vec<Arc<SpanQueue>> = (0..cfg.server.threads)
            .map(|_| Arc::new(ArrayQueue::new(cfg.trace.queue_spans)))
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let batch = Batcher {
            endpoint,
            queues: queues.clone(),
            batch_max: cfg.trace.batch_spans,
            agent: export_agent(),
            failing: false,
        };
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("tidemark-otlp".into())
            .spawn(move || batch.run(&flag))?;
        tracing::info!(endpoint = %cfg.trace.endpoint.as_deref().unwrap_or(""), "OTLP trace export on");
        Ok(Some((Exporter { stop, thread: Some(thread) }, queues)))
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

/// The exporter thread's state.
struct Batcher {
    endpoint: String,
    queues: Vec<Arc<SpanQueue>>,
    batch_max: usize,
    agent: ureq::Agent,
    /// The last export failed (logged once until one succeeds again).
    failing: bool,
}

impl Batcher {
    fn run(mut self, stop: &AtomicBool) {
        let interval = Duration::from_millis(OTLP_EXPORT_INTERVAL_MS);
        loop {
            let stopping = stop.load(Ordering::Acquire);
            let round = Instant::now();
            // Full batches go at once; a partial one waits for the interval.
            while self.export_one() == self.batch_max {}
            if stopping {
                return;
            }
            std::thread::park_timeout(interval.saturating_sub(round.elapsed()));
        }
    }

    /// Takes up to `batch_max` spans from the queues (round robin) and POSTs them; how many.
    fn export_one(&mut self) -> usize {
        let mut spans = Vec::new();
        'fill: loop {
            let before = spans.len();
            for queue in &self.queues {
                if spans.len() == self.batch_max {
                    break 'fill;
                }
                if let Some(span) = queue.pop() {
                    spans.push(span);
                }
            }
            if spans.len() == before {
                break;
            }
        }
        if spans.is_empty() {
            return 0;
        }
        let body = encode_request(&spans);
        let sent = self
            .agent
            .post(&self.endpoint)
            .header("Content-Type", "application/json")
            .send(body.as_bytes());
        match sent {
            Ok(response) if response.status().is_success() => {
                if std::mem::take(&mut self.failing) {
                    tracing::info!(endpoint = %self.endpoint, "OTLP export works again");
                }
            }
            outcome => {
                if !std::mem::replace(&mut self.failing, true) {
                    let why = match outcome {
                        Ok(r) => format!("HTTP status {}", r.status().as_u16()),
                        Err(e) => e.to_string(),
                    };
                    tracing::warn!(endpoint = %self.endpoint, error = %why, spans = spans.len(),
                        "OTLP export failed; spans of failed exports are lost (logged once until it works)");
                }
            }
        }
        spans.len()
    }
}

/// One client for the exporter: bounded in time, no redirects, statuses as values.
fn export_agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(OTLP_EXPORT_TIMEOUT_SECS)))
        .max_redirects(0)
        .http_status_as_error(false)
        .build()
        .into()
}

/// An `ExportTraceServiceRequest` in the OTLP/HTTP JSON encoding (ids as hex, kinds and
/// status codes as numbers, 64-bit times as decimal strings).
pub(crate) fn encode_request(spans: &[Span]) -> String {
    use serde_json::{json, Value};
    let attribute = |key: &str, value: &AttrValue| match value {
        AttrValue::Str(s) => json!({ "key": key, "value": { "stringValue": s } }),
        AttrValue::Int(i) => json!({ "key": key, "value": { "intValue": i.to_string() } }),
    };
    let hex = |bytes: &[u8]| {
        let mut s = String::with_capacity(bytes.len() * 2);
        push_hex(&mut s, bytes);
        s
    };
    let spans: Vec<Value> = spans
        .iter()
        .map(|span| {
            let mut out = json!({
                "traceId": hex(&span.context.trace_id),
                "spanId": hex(&span.context.span_id),
                "name": span.name,
                "kind": span.kind as i32,
                "startTimeUnixNano": span.start_unix_nanos.to_string(),
                "endTimeUnixNano": span.end_unix_nanos.to_string(),
                "attributes": span.attributes.iter().map(|(k, v)| attribute(k, v)).collect::<Vec<_>>(),
            });
            if let Some(parent) = span.parent {
                out["parentSpanId"] = Value::String(hex(&parent));
            }
            if let Some(message) = &span.error {
                // STATUS_CODE_ERROR
                out["status"] = json!({ "code": 2, "message": message });
            }
            out
        })
        .collect();
    let resource = json!({ "attributes": [
        attribute("service.name", &AttrValue::Str("tidemark".into())),
        attribute("service.version", &AttrValue::Str(env!("CARGO_PKG_VERSION").into())),
    ] });
    let scope = json!({ "name": "tidemark", "version": env!("CARGO_PKG_VERSION") });
    json!({ "resourceSpans": [{ "resource": resource, "scopeSpans": [{ "scope": scope, "spans": spans }] }] })
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &[u8] = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_round_trips() {
        let parent = TraceParent::parse(VALID).expect("valid");
        assert!(parent.sampled);
        assert_eq!(parent.span_id, [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]);
        assert_eq!(parent.header_value().as_bytes(), VALID);
    }

    #[test]
    fn the_ratio_decides_by_trace_id() {
        let mut low = [0u8; 16];
        assert!(ratio_samples(&low, 0.5));
        low[8] = 0xff;
        assert!(!ratio_samples(&low, 0.5));
        assert!(ratio_samples(&low, 1.0));
        assert!(!ratio_samples(&[0u8; 16], 0.0));
    }

    #[test]
    fn a_full_queue_drops_and_counts() {
        // Goal: at --otlp-queue-spans the next span is dropped and counted, not blocked on.
        let queue = Arc::new(ArrayQueue::new(2));
        let metrics = Arc::new(CoreMetrics::default());
        enter_core(queue.clone(), metrics.clone(), 1.0);
        for _ in 0..3 {
            Span::server(None, "POST").finish();
        }
        assert_eq!(queue.len(), 2);
        assert_eq!(metrics.trace_spans_dropped_total.get(), 1);
        TRACER.with(|t| *t.borrow_mut() = None);
    }

    #[test]
    fn unsampled_spans_are_not_queued_and_children_keep_the_trace() {
        let queue = Arc::new(ArrayQueue::new(4));
        enter_core(queue.clone(), Arc::new(CoreMetrics::default()), 1.0);
        let unsampled = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        let span = Span::server(Some(unsampled), "POST");
        let child = Span::child(&span.context(), SpanKind::Client, "tools/call x".into());
        assert_eq!(child.context().trace_id, span.context().trace_id);
        assert_eq!(child.parent(), Some(span.context().span_id));
        span.finish();
        child.finish();
        assert_eq!(queue.len(), 0);
        TRACER.with(|t| *t.borrow_mut() = None);
    }

    #[test]
    fn an_export_takes_at_most_a_batch_from_the_queues_round_robin() {
        // Goal: --otlp-batch-spans bounds one export; the queues are emptied in turns.
        // Method: a refused connection (nothing on port 1) fails each POST at once.
        let (a, b) = (Arc::new(ArrayQueue::new(8)), Arc::new(ArrayQueue::new(8)));
        for _ in 0..3 {
            let _ = a.push(Span::server(None, "POST"));
        }
        for _ in 0..2 {
            let _ = b.push(Span::server(None, "POST"));
        }
        let mut batcher = Batcher {
            endpoint: "http://127.0.0.1:1/v1/traces".into(),
            queues: vec![a.clone(), b.clone()],
            batch_max: 2,
            agent: export_agent(),
            failing: false,
        };
        assert_eq!(batcher.export_one(), 2);
        assert_eq!((a.len(), b.len()), (2, 1), "one from each queue");
        assert_eq!(batcher.export_one(), 2);
        assert_eq!(batcher.export_one(), 1);
        assert_eq!(batcher.export_one(), 0);
        assert!(batcher.failing);
    }

    #[test]
    fn attribute_values_stop_at_their_limit_on_a_character_boundary() {
        let mut span = Span::server(None, "POST");
        let long = "é".repeat(ATTRIBUTE_VALUE_BYTES_MAX);
        span.set_str("gen_ai.tool.name", &long);
        span.set_str("mcp.session.id", &"s".repeat(ATTRIBUTE_VALUE_BYTES_MAX));
        span.set_str("mcp.session.id", &"t".repeat(ATTRIBUTE_VALUE_BYTES_MAX + 1));
        let value = |key: &str| match span.attributes.iter().find(|(k, _)| *k == key) {
            Some((_, AttrValue::Str(s))) => s.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(value("gen_ai.tool.name").len(), ATTRIBUTE_VALUE_BYTES_MAX);
        assert_eq!(value("mcp.session.id"), "t".repeat(ATTRIBUTE_VALUE_BYTES_MAX));
        assert_eq!(span.attributes.len(), 2, "a key set twice is kept once");
    }

    #[test]
    fn the_json_encoding_names_ids_in_hex_and_kinds_as_numbers() {
        let mut span = Span::server(Some(VALID), "POST");
        span.rename("tools/call echo");
        span.set_str("mcp.method.name", "tools/call");
        span.fail("-32602", "bad params");
        let body = encode_request(&[span]);
        let v: serde_json::Value = serde_json::from_str(&body).expect("json");
        let s = &v["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
        assert_eq!(s["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(s["parentSpanId"], "00f067aa0ba902b7");
        assert_eq!(s["kind"], 2);
        assert_eq!(s["name"], "tools/call echo");
        assert_eq!(s["status"]["code"], 2);
    }
}
