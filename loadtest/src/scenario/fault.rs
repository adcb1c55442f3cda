//! `fault`: the randomized fault test (issue 11 §8). Many sessions, `slow_counter` calls with
//! progress, and every call's connections cut at random points, each cut recovered at random;
//! afterwards, per call, every progress value must have arrived once and in order with one
//! result, and globally the tool's execution counter must have risen by exactly the number of
//! calls.
//!
//! A call, with the choices drawn from its own generator (`Rng::for_call(seed, call)`, so a
//! failed call reruns alone with `--seed S --first-call C --calls 1`):
//! - keyed or not: a keyed call sends the same `Idempotency-Key` on every POST, from the first;
//! - a per-step delay from `--delay-ms` (0: the whole answer is written at once; > 0: the call
//!   is still running at most cuts);
//! - 1 to `--max-cuts` cuts. The first request is always cut; later ones (resumes, re-POSTs)
//!   with probability 1/2 while cuts are left. A cut point is, with equal chance: before the
//!   first event (right after sending, nothing read; after the head; after the first event,
//!   the priming event of a POST), mid-stream (after 2..=steps+1 events) or after the final
//!   response but before the end of the response. A cut is a FIN (unread bytes discarded,
//!   shutdown, close) or an RST (SO_LINGER 0, close), half each. A cut point the response
//!   never reaches (a short replay, a 409) is no cut and costs nothing.
//! - after each cut (or an unplanned drop), a recovery, half each:
//!   (a) `GET` + `Last-Event-ID` = the client's cursor (the last *new* event it processed,
//!   priming included); with no cursor (nothing processed) it re-POSTs instead;
//!   (b, unkeyed calls) re-POST the same request (same JSON-RPC id) → `409` `-31001` (owed) or
//!   `-31002` (settled) with a `Last-Event-ID` hint → `GET` from the hint;
//!   (c, keyed calls) re-POST with the key → the original stream, replayed from its first event.
//!   Every documented answer is handled: `409 -31004` (held too long while another stream was
//!   owed: the listed streams of calls that already completed are resumed and drained, as the
//!   `--max-held-per-session` row of docs/flags.md ("resume first") asks, those of running
//!   calls left to their workers; then the same POST again), a held POST answered later, a
//!   re-POST that runs because the server never saw the original (nothing had been received),
//!   a `-31003` gap (counted as lost).
//!
//! The checks. Events are deduplicated by event id (a resume from a hint may repeat events the
//! client has, under the same ids, and that is allowed); an id seen again must carry the same
//! message, and within one response a known id must not follow a new one. A progress value
//! arriving under a second id is *duplicated*; one arriving after a higher value or after the
//! result is *out of order*; values never received by the time the call ends are *lost*. Every
//! call must end with exactly one result (under one id) carrying its JSON-RPC id, and a response
//! that ends normally. A hint naming an event the client never received (other than the
//! stream's priming event, `data.owedStreams[].firstEventId`) breaks CONTRACT §4's hint rule and
//! is counted (`hint_not_held`), and so is a `-31004` naming a stream of a completed call,
//! whose end was written on a live connection (`phantom_owed`: CONTRACT §4 says it is not
//! owed). Globally: `get_counter` before and after, executions − calls must be 0 both ways,
//! and the results' counter values must be distinct and in range.
//!
//! JSON-RPC ids are `CALL_ID_BASE + call` and each call's arguments carry a `nonce` (the
//! demo tool ignores it): no two calls have the same method+params, so CONTRACT §4's
//! same-params retry rule never ties one call to another even when sessions are shared
//! (`--sessions` < `--connections`).
//!
//! `--concurrent-callers` (issue 17 item 8): every session has exactly two workers calling at
//! once, and the nonce is the same for all calls, so two concurrent calls of a session (new ids,
//! their own progress tokens) are identical whenever they drew the same delay. A re-POST may
//! then be matched by params to the other caller's owed stream: on a `409 -31001` whose
//! `data.matchedBy` is `"params"` and whose `owedStreams[0].requestId` is not its own, the
//! caller re-sends its call with a fresh `Idempotency-Key` (a new call by CONTRACT §4 step 2;
//! from then on the call is keyed) and never follows that hint. An event of another call (a
//! progress of another token, a response to another id) is counted as a *foreign event*; a
//! client that followed the hint of a params match would read them.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::io::{Read as _, Write as _};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use hdrhistogram::Histogram;
use serde_json::Value;

use crate::client::{self, Conn, ReadEnd, Session};
use crate::scenario::flow;
use crate::scenario::resume::add;
use crate::stats::{self, Live};
use crate::wire::{self, BodyKind, Head, Target};

/// JSON-RPC id of call `c` is `CALL_ID_BASE + c` (the probe session uses 1 and 2).
pub(crate) const CALL_ID_BASE: u64 = 1_000_000;
/// Requests one call may send before it is given up as incomplete.
pub(crate) const ATTEMPTS_MAX: u32 = 48;
/// Pause before re-POSTing after `409 -31004` (held too long while another stream was owed).
pub(crate) const HELD_BACKOFF: Duration = Duration::from_millis(20);
/// Pause before trying again after a failed connect.
pub(crate) const CONNECT_BACKOFF: Duration = Duration::from_millis(50);
/// Most connect failures in a row before a call gives up.
pub(crate) const CONNECTS_FAILED_MAX: u32 = 20;

/// SplitMix64: tiny, fast, and the same sequence on every machine for a seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// Call `call`'s own generator: its choices do not depend on the worker that runs it or on
    /// the other calls, so a failed call reruns alone with the same seed.
    pub fn for_call(seed: u64, call: u64) -> Rng {
        let mut rng = Rng(seed ^ call.wrapping_mul(0xD1B5_4A32_D192_ED03));
        rng.next();
        rng
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }

    pub fn coin(&mut self) -> bool {
        self.next() >> 63 == 1
    }
}

/// A seed from the clock and the pid, for runs that do not pass `--seed`.
pub fn clock_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut rng = Rng(nanos ^ u64::from(std::process::id()) << 32);
    rng.next()
}

#[derive(Clone, Debug)]
pub struct Settings {
    pub target: Target,
    pub timeout: Duration,
    pub calls: u64,
    pub first_call: u64,
    pub seed: u64,
    pub max_cuts: u32,
    pub steps: u64,
    pub delays_ms: Vec<u64>,
    /// Traces of failed calls to keep.
    pub traces: usize,
    /// Every call's trace goes here too, when set (`trace_writer` writes them to a file).
    pub trace_to: Option<mpsc::Sender<String>>,
    /// Two workers per session, issuing calls that may be identical (module doc).
    pub concurrent_callers: bool,
    /// Bridged runs: faults between the server and its upstream (`fault_bridge`).
    pub upstream: Option<Arc<dyn UpstreamFaults>>,
}

/// Faults a bridged run injects between tidemark and its upstream, one call in `every()`, once
/// the call has received a drawn number of progress values (so the upstream has started it).
/// Such a call may end with the bridge's `-32603` (CONTRACT §7): counted as `upstream_failed`,
/// not as lost.
pub(crate) trait UpstreamFaults: Send + Sync + std::fmt::Debug {
    /// One call in this many gets an upstream fault.
    fn every(&self) -> u64;
    /// Before the call's first POST: what `inject` needs (the session's child pid), or why the
    /// fault cannot be prepared.
    fn prepare(&self, session: &Session) -> Result<u64, String>;
    /// Injects the fault now; says what it did (for the trace).
    fn inject(&self, handle: u64) -> String;
    /// After the call: waits until the server has seen the fault's effect (a killed child
    /// reaped), so the session's next call is not the one that meets it.
    fn settle(&self, handle: u64);
}

/// A call's planned upstream fault.
struct PlannedUpstreamFault {
    after_progress: u64,
    handle: u64,
    fired: bool,
}

pub struct Outcome {
    pub counters: BTreeMap<String, i64>,
    /// The counter value each completed call's result reported.
    pub results: Vec<u64>,
    /// A call's first POST sent → the call complete.
    pub latency: Histogram<u64>,
    /// Traces of the first failed calls.
    pub failed: Vec<String>,
    /// Traces of the first calls that passed but were held too long or slow.
    pub notes: Vec<String>,
}

impl Outcome {
    fn new() -> Outcome {
        Outcome {
            counters: BTreeMap::new(),
            results: Vec::new(),
            latency: stats::new_histogram(),
            failed: Vec::new(),
            notes: Vec::new(),
        }
    }

    fn merge(&mut self, other: Outcome, traces: usize) {
        for (k, v) in other.counters {
            add(&mut self.counters, &k, v);
        }
        self.results.extend(other.results);
        self.latency.add(&other.latency).expect("invariant: same histogram bounds");
        for t in other.failed {
            if self.failed.len() < traces {
                self.failed.push(t);
            }
        }
        for t in other.notes {
            if self.notes.len() < traces {
                self.notes.push(t);
            }
        }
    }
}

/// Opens `count` sessions, each on a fresh connection, so that the server's SO_REUSEPORT
/// listeners spread them over its cores (a session lives on the core that accepted its
/// `initialize`).
pub fn open_sessions(
    target: &Target,
    count: usize,
    timeout: Duration,
) -> anyhow::Result<Vec<Session>> {
    (0..count)
        .map(|i| {
            let mut conn = Conn::connect(target, timeout)?;
            client::open_session(&mut conn, target, i as u64 + 1)
                .with_context(|| format!("opening session {i}"))
        })
        .collect()
}

/// Sessions by owner: the first 4 characters of each id (tidemark writes its owner core
/// there in hex; for another server this is just a prefix).
pub fn sessions_by_owner(sessions: &[Session]) -> BTreeMap<String, i64> {
    let mut by = BTreeMap::new();
    for s in sessions {
        let owner: String = s.id.chars().take(4).collect();
        add(&mut by, &format!("sessions.owner_{owner}"), 1);
    }
    by
}

/// A legacy call (a `RunCall`).
pub(crate) fn legacy_call(
    s: &Settings,
    session: &Session,
    call: u64,
    completed: &Completed,
    conn: &mut Option<Conn>,
) -> CallReport {
    Call::new(s, session, call, completed).run(conn)
}

/// Runs one call (settings, its session, its index, which calls completed, the worker's
/// kept-alive connection): a legacy call here, a 2026-07-28 keyed one in `fault_modern`.
pub(crate) type RunCall = fn(&Settings, &Session, u64, &Completed, &mut Option<Conn>) -> CallReport;

/// Runs every call on `workers` threads, each call by `run_call`. Worker `w` runs calls
/// `first + w`, `first + w + workers`, …, cycling through its own sessions (`w`, `w + workers`,
/// … when there are at least as many sessions as workers; else it shares session `w %
/// sessions`).
pub(crate) fn run_with(
    sessions: Vec<Session>,
    workers: usize,
    settings: Settings,
    lives: Vec<Arc<Live>>,
    run_call: RunCall,
) -> anyhow::Result<Outcome> {
    if sessions.is_empty() {
        bail!("no sessions");
    }
    let sessions = Arc::new(sessions);
    let settings = Arc::new(settings);
    let traces = settings.traces;
    let completed: Completed =
        Arc::new((0..settings.calls).map(|_| AtomicBool::new(false)).collect());
    let results = flow::run_workers(workers, {
        let settings = settings.clone();
        move |w| {
            let mine: Vec<Session> = if settings.concurrent_callers {
                vec![sessions[(w / 2) % sessions.len()].clone()]
            } else if sessions.len() >= workers {
                sessions.iter().skip(w).step_by(workers).cloned().collect()
            } else {
                vec![sessions[w % sessions.len()].clone()]
            };
            Ok(worker(&mine, w, workers, &settings, &completed, &lives[w], run_call))
        }
    })?;
    let mut total = Outcome::new();
    for r in results {
        total.merge(r, traces);
    }
    Ok(total)
}

/// Which calls have completed so far (all workers), by call index − `--first-call`.
pub(crate) type Completed = Arc<Vec<AtomicBool>>;

/// Whether the call with JSON-RPC id `request` has completed.
fn is_completed(completed: &Completed, s: &Settings, request: u64) -> bool {
    request
        .checked_sub(CALL_ID_BASE + s.first_call)
        .and_then(|i| completed.get(usize::try_from(i).ok()?))
        .is_some_and(|done| done.load(Ordering::Relaxed))
}

/// Writes the traces sent to it into `path` until every sender is gone.
pub fn trace_writer(
    path: &std::path::Path,
) -> anyhow::Result<(mpsc::Sender<String>, std::thread::JoinHandle<()>)> {
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let (tx, rx) = mpsc::channel::<String>();
    let handle = std::thread::Builder::new().name("fault-traces".into()).spawn(move || {
        let mut out = std::io::BufWriter::new(file);
        for trace in rx {
            let _ = out.write_all(trace.as_bytes());
        }
        let _ = out.flush();
    })?;
    Ok((tx, handle))
}

fn worker(
    sessions: &[Session],
    w: usize,
    workers: usize,
    s: &Settings,
    completed: &Completed,
    live: &Live,
    run_call: RunCall,
) -> Outcome {
    let mut out = Outcome::new();
    let mut interval = stats::new_histogram();
    let mut published = Instant::now();
    let mut conn: Option<Conn> = None;
    let end = s.first_call + s.calls;
    let mut call = s.first_call + w as u64;
    let mut k = 0usize;
    while call < end {
        let session = &sessions[k % sessions.len()];
        k += 1;
        let started = Instant::now();
        let report = run_call(s, session, call, completed, &mut conn);
        if report.complete {
            completed[(call - s.first_call) as usize].store(true, Ordering::Relaxed);
        }
        let took = started.elapsed();
        for (key, v) in report.counters {
            add(&mut out.counters, &key, v);
        }
        if let Some(value) = report.result {
            out.results.push(value);
        }
        if report.ok {
            stats::record(&mut out.latency, took);
            stats::record(&mut interval, took);
            live.done.fetch_add(1, Ordering::Relaxed);
        } else {
            live.errors.fetch_add(1, Ordering::Relaxed);
            if out.failed.len() < s.traces {
                out.failed.push(report.trace.clone());
            }
        }
        if let Some(to) = &s.trace_to {
            let _ = to.send(report.trace.clone());
        }
        if report.note && out.notes.len() < s.traces {
            out.notes.push(report.trace.clone());
        }
        if published.elapsed() >= Duration::from_secs(1) {
            published = Instant::now();
            live.publish_interval(&mut interval);
        }
        call += workers as u64;
    }
    live.publish_interval(&mut interval);
    out
}

/// What a call's next request is.
#[derive(Clone, Debug)]
enum Next {
    /// The call's POST (the same bytes every time: same id, and the key when keyed).
    Post,
    /// `GET` + `Last-Event-ID`.
    Get(Vec<u8>),
}

/// Where a response is cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CutAt {
    /// Right after sending the request: nothing read, not even the head.
    Sent,
    /// Right after processing this many events (0: the head and maybe some bytes were read,
    /// no event processed).
    Events(u64),
    /// Right after processing the final response, before the end of the response.
    AfterResult,
}

impl CutAt {
    pub(crate) fn name(self) -> &'static str {
        match self {
            CutAt::Sent => "sent",
            CutAt::Events(0) => "head",
            CutAt::Events(1) => "first_event",
            CutAt::Events(_) => "mid",
            CutAt::AfterResult => "after_result",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum How {
    Fin,
    Rst,
}

/// How one request's answer ended.
pub(crate) enum Exchange {
    /// Cut as planned.
    Cut,
    /// Read to its end.
    Complete { head: Head, body: Vec<u8> },
    /// The connection broke before the end (`timeout`: nothing arrived for `--timeout`).
    Broken { timeout: bool, error: String },
    /// No connection could be opened.
    NoConnection(String),
}

/// What one event carried (events are deduplicated by id; an id seen again must carry the
/// same thing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Carried {
    Priming,
    Progress(u64),
    /// The final result: the counter value it reports and a hash of the whole message.
    Result(Option<u64>, u64),
    Other(u64),
}

/// A message as the checks see it.
pub(crate) enum Msg {
    Carried(Carried),
    /// `-31003`: events were evicted before we got them.
    Gap(String),
    /// Any other final error (JSON-RPC error, or a result with `isError`).
    Error(String),
    /// A message of another call: a progress of another token, a response to another id.
    Foreign(String),
    /// Not what this call can receive (bad JSON, a value out of range).
    Bad(String),
}

/// Whether a final error (its JSON text) is the bridge's `-32603` for a failed upstream.
fn is_upstream_failure(error: &str) -> bool {
    serde_json::from_str::<Value>(error).is_ok_and(|v| v["error"]["code"].as_i64() == Some(-32603))
}

fn hash_of(data: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    data.hash(&mut h);
    h.finish()
}

pub(crate) fn classify(data: &[u8], request_id: u64, steps: u64) -> Msg {
    if data.is_empty() {
        return Msg::Carried(Carried::Priming);
    }
    let text = || String::from_utf8_lossy(data).into_owned();
    let Ok(v) = serde_json::from_slice::<Value>(data) else {
        return Msg::Bad(format!("not JSON: {}", text()));
    };
    if let Some(method) = v.get("method").and_then(Value::as_str) {
        if method != "notifications/progress" {
            return Msg::Carried(Carried::Other(hash_of(data)));
        }
        let params = &v["params"];
        if params["progressToken"].as_u64() != Some(request_id) {
            return Msg::Foreign(format!("progress of another token: {}", text()));
        }
        let value = params["progress"].as_f64().unwrap_or(f64::NAN);
        if !(value >= 1.0 && value <= steps as f64 && value.fract() == 0.0) {
            return Msg::Bad(format!("progress value out of range: {}", text()));
        }
        return Msg::Carried(Carried::Progress(value as u64));
    }
    if v["id"].as_u64() != Some(request_id) {
        return Msg::Foreign(format!("response for another id: {}", text()));
    }
    if let Some(error) = v.get("error") {
        if error["code"].as_i64() == Some(-31003) {
            return Msg::Gap(text());
        }
        return Msg::Error(text());
    }
    let Some(result) = v.get("result") else {
        return Msg::Bad(format!("neither request nor response: {}", text()));
    };
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        return Msg::Error(text());
    }
    let value = result["content"][0]["text"].as_str().and_then(|t| t.trim().parse().ok());
    Msg::Carried(Carried::Result(value, hash_of(data)))
}

/// What one call has received, deduplicated by event id, and what went wrong.
struct Received {
    request_id: u64,
    steps: u64,
    seen: HashMap<Vec<u8>, Carried>,
    /// The id of the last new event processed: where a careful client resumes.
    cursor: Option<Vec<u8>>,
    /// Ids of the priming events received (two: the request ran as two streams).
    primings: Vec<Vec<u8>>,
    /// `values[v - 1]`: progress value `v` arrived.
    values: Vec<bool>,
    highest: u64,
    result: Option<Option<u64>>,
    gap: Option<String>,
    error: Option<String>,
    duplicated: u64,
    out_of_order: u64,
    id_reused: u64,
    /// Events of another call received (`Msg::Foreign`), and the first of them.
    foreign: u64,
    first_foreign: Option<String>,
    bad: Vec<String>,
    known_replayed: u64,
    without_id: u64,
}

/// One response's events as a trace line, and whether a new event has come yet.
#[derive(Default)]
struct ResponseLog {
    saw_new: bool,
    /// The first event: (known before, what it carried).
    first: Option<(bool, Carried)>,
    text: String,
}

impl Received {
    fn new(request_id: u64, steps: u64) -> Received {
        Received {
            request_id,
            steps,
            seen: HashMap::new(),
            cursor: None,
            primings: Vec::new(),
            values: vec![false; steps as usize],
            highest: 0,
            result: None,
            gap: None,
            error: None,
            duplicated: 0,
            out_of_order: 0,
            id_reused: 0,
            foreign: 0,
            first_foreign: None,
            bad: Vec::new(),
            known_replayed: 0,
            without_id: 0,
        }
    }

    /// Processes one event; true when it is a final response (result or error).
    fn on_event(&mut self, id: &[u8], data: &[u8], log: &mut ResponseLog) -> bool {
        let shown = String::from_utf8_lossy(id);
        let carried = match classify(data, self.request_id, self.steps) {
            Msg::Carried(c) => c,
            Msg::Gap(text) => {
                let _ = write!(log.text, " GAP@{shown}");
                self.gap.get_or_insert(text);
                return false;
            }
            Msg::Error(text) => {
                let _ = write!(log.text, " ERROR@{shown}");
                self.error.get_or_insert(text);
                return true;
            }
            Msg::Foreign(text) => {
                let _ = write!(log.text, " FOREIGN@{shown}");
                self.first_foreign.get_or_insert(text);
                self.foreign += 1;
                return false;
            }
            Msg::Bad(text) => {
                let _ = write!(log.text, " BAD@{shown}");
                self.bad.push(text);
                return false;
            }
        };
        let is_final = matches!(carried, Carried::Result(..));
        let token = match carried {
            Carried::Priming => "π".to_owned(),
            Carried::Progress(v) => v.to_string(),
            Carried::Result(v, _) => format!("R={}", v.map_or("?".to_owned(), |v| v.to_string())),
            Carried::Other(_) => "other".to_owned(),
        };
        if id.is_empty() {
            self.without_id += 1;
        } else if let Some(prev) = self.seen.get(id) {
            // A repeat of an event we hold (a resume from an earlier hint, a keyed replay).
            if *prev != carried {
                self.id_reused += 1;
                let _ = write!(log.text, " ID-REUSED");
            }
            if log.saw_new {
                self.out_of_order += 1;
                let _ = write!(log.text, " OLD-AFTER-NEW");
            }
            self.known_replayed += 1;
            log.first.get_or_insert((true, carried));
            let _ = write!(log.text, " ({token}@{shown})");
            return is_final;
        } else {
            self.seen.insert(id.to_vec(), carried);
        }
        log.first.get_or_insert((false, carried));
        log.saw_new = true;
        let _ = write!(log.text, " {token}@{shown}");
        if !id.is_empty() {
            self.cursor = Some(id.to_vec());
        }
        match carried {
            Carried::Priming => self.primings.push(id.to_vec()),
            Carried::Progress(v) => {
                let slot = &mut self.values[(v - 1) as usize];
                if *slot {
                    self.duplicated += 1;
                    let _ = write!(log.text, "[DUPLICATE]");
                } else {
                    *slot = true;
                    if v < self.highest || self.result.is_some() {
                        self.out_of_order += 1;
                        let _ = write!(log.text, "[OUT-OF-ORDER]");
                    }
                }
                self.highest = self.highest.max(v);
            }
            Carried::Result(value, _) => {
                if self.result.is_some() {
                    self.duplicated += 1;
                    let _ = write!(log.text, "[SECOND-RESULT]");
                } else {
                    self.result = Some(value);
                    let missing = self.missing();
                    if missing > 0 {
                        let _ = write!(log.text, "[{missing} MISSING]");
                    }
                }
            }
            Carried::Other(_) => {}
        }
        is_final
    }

    fn missing(&self) -> u64 {
        self.values.iter().filter(|v| !**v).count() as u64
    }

    fn holds(&self, id: &[u8]) -> bool {
        self.seen.contains_key(id)
    }
}

/// The POST of a call's `body` on `session`, with `Idempotency-Key: key` when keyed.
fn post_of(s: &Settings, session: &Session, body: &str, key: Option<&str>) -> Vec<u8> {
    let headers: Vec<(&str, &str)> = key.map(|k| ("Idempotency-Key", k)).into_iter().collect();
    wire::post_request(&s.target, &session.id, &session.version, body.as_bytes(), &headers)
}

/// A call that passed but took longer than this is traced as a note.
pub(crate) const SLOW_CALL: Duration = Duration::from_secs(1);

/// What a finished call reports to its worker.
pub(crate) struct CallReport {
    pub ok: bool,
    /// The call ended: its result arrived and a response of it ended normally.
    pub complete: bool,
    /// Passed, but worth a look: held too long (`-31004`) or slow.
    pub note: bool,
    pub result: Option<u64>,
    pub counters: BTreeMap<String, i64>,
    pub trace: String,
}

struct Call<'a> {
    s: &'a Settings,
    completed: &'a Completed,
    session: &'a Session,
    index: u64,
    rng: Rng,
    keyed: bool,
    /// The call's JSON-RPC request, for a re-send under a fresh key.
    body: String,
    post: Vec<u8>,
    got: Received,
    counters: BTreeMap<String, i64>,
    trace: String,
    hint_not_held: u64,
    hint_missing: u64,
    resumable_missing: u64,
    ran_again: u64,
    timeouts: u64,
    held_too_long: u64,
    phantom_owed: u64,
    /// Drawn upstream fault, if any (bridged runs); prepared when the call starts.
    upstream: Option<PlannedUpstreamFault>,
    /// The call ended with the bridge's `-32603` (bridged runs only).
    upstream_failed: bool,
    started: Instant,
}

impl<'a> Call<'a> {
    fn new(
        s: &'a Settings,
        session: &'a Session,
        index: u64,
        completed: &'a Completed,
    ) -> Call<'a> {
        let mut rng = Rng::for_call(s.seed, index);
        let keyed = rng.coin();
        let delay = s.delays_ms[rng.below(s.delays_ms.len() as u64) as usize];
        let upstream = s.upstream.as_ref().filter(|f| rng.below(f.every().max(1)) == 0).map(|_| {
            PlannedUpstreamFault { after_progress: 1 + rng.below(s.steps), handle: 0, fired: false }
        });
        let id = CALL_ID_BASE + index;
        // Concurrent callers share one nonce, so that their calls may be identical.
        let nonce = if s.concurrent_callers { 0 } else { index };
        let body = format!(
            concat!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"slow_counter","#,
                r#""arguments":{{"steps":{steps},"delay_ms":{delay},"nonce":{index}}},"#,
                r#""_meta":{{"progressToken":{id}}}}}}}"#
            ),
            id = id,
            steps = s.steps,
            delay = delay,
            index = nonce
        );
        let key = keyed.then(|| format!("fault-{:016x}-{index}", s.seed));
        let post = post_of(s, session, &body, key.as_deref());
        let mut trace = String::new();
        let _ = writeln!(
            trace,
            "call {index} (seed {}): session {} id {id} {} delay_ms {delay} steps {}",
            s.seed,
            session.id,
            if keyed { "keyed" } else { "unkeyed" },
            s.steps
        );
        let mut counters = BTreeMap::new();
        add(&mut counters, "calls", 1);
        add(&mut counters, if keyed { "calls.keyed" } else { "calls.unkeyed" }, 1);
        add(&mut counters, &format!("calls.delay_ms_{delay}"), 1);
        Call {
            s,
            completed,
            session,
            index,
            rng,
            keyed,
            body,
            post,
            got: Received::new(id, s.steps),
            counters,
            trace,
            hint_not_held: 0,
            hint_missing: 0,
            resumable_missing: 0,
            ran_again: 0,
            timeouts: 0,
            held_too_long: 0,
            phantom_owed: 0,
            upstream,
            upstream_failed: false,
            started: Instant::now(),
        }
    }

    fn count(&mut self, key: &str) {
        add(&mut self.counters, key, 1);
    }

    fn run(mut self, slot: &mut Option<Conn>) -> CallReport {
        let mut cuts_left = if self.s.max_cuts == 0 {
            0
        } else {
            1 + self.rng.below(u64::from(self.s.max_cuts)) as u32
        };
        self.prepare_upstream_fault();
        let mut next = Next::Post;
        let mut posts = 0u32;
        let mut connect_failures = 0u32;
        let mut attempts = 0u32;
        let verdict: Result<(), String> = loop {
            if attempts == ATTEMPTS_MAX {
                break Err(format!("gave up after {ATTEMPTS_MAX} requests"));
            }
            attempts += 1;
            let (request, label) = match &next {
                Next::Post => {
                    let label = if posts == 0 { "post" } else { "repost" };
                    (self.post.clone(), label)
                }
                Next::Get(from) => {
                    let from = String::from_utf8_lossy(from).into_owned();
                    let bytes = wire::get_request(
                        &self.s.target,
                        &self.session.id,
                        &self.session.version,
                        Some(&from),
                    );
                    (bytes, "get")
                }
            };
            let plan = (cuts_left > 0 && (attempts == 1 || self.rng.coin()))
                .then(|| plan_cut(&mut self.rng, self.s.steps));
            match &next {
                Next::Post => {
                    let _ = write!(self.trace, "  {label}");
                }
                Next::Get(from) => {
                    let _ = write!(self.trace, "  get from {}", String::from_utf8_lossy(from));
                }
            }
            if let Some((at, how)) = plan {
                let _ = write!(self.trace, " [cut {} {how:?}]", at.name());
            }
            let primings_before = self.got.primings.len();
            let (exchange, log) = self.exchange(slot, &request, plan);
            let _ = write!(self.trace, " →{}", log.text);
            if matches!(next, Next::Post) && !matches!(exchange, Exchange::NoConnection(_)) {
                posts += 1;
            }
            match exchange {
                unanswered @ (Exchange::NoConnection(_)
                | Exchange::Cut
                | Exchange::Broken { .. }) => {
                    let tally = (&mut self.counters, &mut self.trace, &mut self.timeouts);
                    match after_unanswered(unanswered, plan, tally, &mut connect_failures) {
                        Unanswered::NoConnection => attempts -= 1,
                        Unanswered::GiveUp(e) => break Err(e),
                        Unanswered::Cut => {
                            cuts_left -= 1;
                            self.count(&format!("cuts.on_{label}"));
                            next = self.recover();
                        }
                        Unanswered::Dropped => next = self.recover(),
                    }
                }
                Exchange::Complete { head, body } => {
                    match self.answer(label, &head, &body, &log, primings_before) {
                        Ok(Some(n)) => next = n,
                        Ok(None) => break Ok(()),
                        Err(e) => break Err(e),
                    }
                }
            }
        };
        if let (Some(fault), Some(faults)) = (&self.upstream, &self.s.upstream) {
            if fault.fired {
                faults.settle(fault.handle);
            }
        }
        self.finish(verdict)
    }

    fn prepare_upstream_fault(&mut self) {
        let (Some(fault), Some(faults)) = (&mut self.upstream, &self.s.upstream) else {
            return;
        };
        match faults.prepare(self.session) {
            Ok(handle) => {
                fault.handle = handle;
                let _ = writeln!(
                    self.trace,
                    "  upstream fault after progress {} (handle {handle})",
                    fault.after_progress
                );
                add(&mut self.counters, "upstream_faults.planned", 1);
            }
            Err(e) => {
                let _ = writeln!(self.trace, "  upstream fault not prepared: {e}");
                add(&mut self.counters, "upstream_faults.not_prepared", 1);
                self.upstream = None;
            }
        }
    }

    /// The recovery after a cut or a drop: (a) GET from the cursor, or a re-POST (b or c).
    fn recover(&mut self) -> Next {
        if self.rng.coin() {
            if let Some(cursor) = self.got.cursor.clone() {
                self.count("recover.get_cursor");
                return Next::Get(cursor);
            }
            self.count("recover.get_without_cursor_reposts");
            return Next::Post;
        }
        self.count(if self.keyed { "recover.key_retry" } else { "recover.repost_hint" });
        Next::Post
    }

    /// Sends `request` and reads its answer, cutting it as planned; a bridged call's upstream
    /// fault fires once the planned number of progress values has arrived.
    fn exchange(
        &mut self,
        slot: &mut Option<Conn>,
        request: &[u8],
        plan: Option<(CutAt, How)>,
    ) -> (Exchange, ResponseLog) {
        let mut log = ResponseLog::default();
        let (got, upstream) = (&mut self.got, &mut self.upstream);
        let exchange = exchange(self.s, slot, request, plan, |id, data| {
            let is_final = got.on_event(id, data, &mut log);
            if let (Some(fault), Some(faults)) = (upstream.as_mut(), &self.s.upstream) {
                if !fault.fired && got.highest >= fault.after_progress {
                    fault.fired = true;
                    let what = faults.inject(fault.handle);
                    let _ = write!(log.text, " [upstream fault: {what}]");
                }
            }
            is_final
        });
        (exchange, log)
    }

    /// A complete answer: `Ok(None)` when the call is done, `Ok(Some(next))` to go on.
    fn answer(
        &mut self,
        label: &str,
        head: &Head,
        body: &[u8],
        log: &ResponseLog,
        primings_before: usize,
    ) -> Result<Option<Next>, String> {
        let body_text = String::from_utf8_lossy(body).into_owned();
        if head.status == 200 && head.kind == BodyKind::Sse {
            let _ = write!(self.trace, " | end");
            self.count(&format!("answers.{label}.200_sse"));
            if label == "repost" {
                // A re-POST answered with a stream: the keyed replay (its first event is the
                // priming event we hold), or a run (a new priming event).
                let kind = match log.first {
                    Some((true, Carried::Priming)) => "replayed",
                    Some((false, Carried::Priming)) if primings_before > 0 => "ran_again",
                    Some((false, Carried::Priming)) => "ran_fresh",
                    _ => "other",
                };
                if kind == "ran_again" {
                    self.ran_again += 1;
                }
                self.count(&format!("reposts.{kind}"));
            }
            if let Some(gap) = self.got.gap.clone() {
                let _ = writeln!(self.trace);
                return Err(format!("-31003 gap: {gap}"));
            }
            if let Some(error) = self.got.error.clone() {
                if self.s.upstream.is_some() && is_upstream_failure(&error) {
                    // CONTRACT §7: the bridge's final answer for a call whose upstream failed.
                    self.upstream_failed = true;
                    let _ = writeln!(self.trace, " | upstream failed");
                    return Ok(None);
                }
                let _ = writeln!(self.trace);
                return Err(format!("final error: {error}"));
            }
            if self.got.result.is_some() {
                let _ = writeln!(self.trace, " | done");
                return Ok(None);
            }
            let _ = writeln!(self.trace, " without a result");
            self.count("ended_without_result");
            return Ok(Some(self.recover()));
        }
        self.count(&format!("answers.{label}.{}", head.status));
        if head.status != 409 {
            let _ = writeln!(self.trace, " HTTP {}: {body_text}", head.status);
            return Err(format!("{label} answered HTTP {}: {body_text}", head.status));
        }
        let value: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let code = value["error"]["code"].as_i64().unwrap_or(0);
        self.count(&format!("answers.{label}.409_{code}"));
        if !head.resumable {
            self.resumable_missing += 1;
        }
        let owed = &value["error"]["data"]["owedStreams"][0];
        let _ = write!(
            self.trace,
            " 409 {code} hint {} (owed: request {} last {} first {} written {} inFlight {})",
            head.last_event_id.as_deref().unwrap_or("-"),
            owed["requestId"],
            owed["lastEventId"],
            owed["firstEventId"],
            owed["lastWrittenEventId"],
            owed["inFlight"]
        );
        let matched_by = value["error"]["data"]["matchedBy"].as_str();
        let other_call = owed["requestId"].as_u64() != Some(self.got.request_id);
        match code {
            -31001 if matched_by == Some("params") && other_call => {
                // Another call that looks like ours: ours is new (the server holds no stream
                // of its id), so it is sent again as a new call, under a key of its own.
                let _ = writeln!(self.trace, " matched by params: re-sent with a fresh key");
                self.count("rekeyed");
                self.rekey();
                Ok(Some(Next::Post))
            }
            -31001 | -31002 => {
                let hint = match &head.last_event_id {
                    Some(h) => h.clone(),
                    None => {
                        self.hint_missing += 1;
                        match owed["lastEventId"].as_str() {
                            Some(h) => h.to_owned(),
                            None => {
                                let _ = writeln!(self.trace);
                                return Err(format!("409 without a hint: {body_text}"));
                            }
                        }
                    }
                };
                let is_priming = owed["firstEventId"].as_str() == Some(hint.as_str());
                if !is_priming && !self.got.holds(hint.as_bytes()) {
                    // CONTRACT §4: the hint is never later than what the client is known
                    // to hold. Following it skips events this client never received.
                    self.hint_not_held += 1;
                    self.count(&format!("hint_not_held.{code}"));
                    let _ = write!(self.trace, " HINT-NOT-HELD");
                }
                let _ = writeln!(self.trace);
                Ok(Some(Next::Get(hint.into_bytes())))
            }
            -31004 => {
                // Nothing ran. "Resume first": the owed streams of calls that already completed
                // (ours: nobody else will) are drained; those of calls still running belong to
                // their workers, who resume them. Then the same POST again.
                self.held_too_long += 1;
                let owed: Vec<(u64, String)> = value["error"]["data"]["owedStreams"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|o| {
                                Some((o["requestId"].as_u64()?, o["lastEventId"].as_str()?.into()))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                for (request, last) in owed {
                    if is_completed(self.completed, self.s, request) {
                        // CONTRACT §4: a stream whose final response and end were written on
                        // a live connection (the client read them: its call completed) is not
                        // owed. The server says it is.
                        self.phantom_owed += 1;
                        let drained = self.drain(&last);
                        let _ = write!(
                            self.trace,
                            " PHANTOM-OWED(request {request}: drained from {last}: {drained})"
                        );
                    }
                }
                let _ = writeln!(self.trace, " (held too long: re-POST)");
                std::thread::sleep(HELD_BACKOFF);
                Ok(Some(Next::Post))
            }
            _ => {
                let _ = writeln!(self.trace, ": {body_text}");
                Err(format!("unexpected 409: {body_text}"))
            }
        }
    }

    /// Makes the call keyed under a key no earlier call used (CONTRACT §4 step 2: a key the
    /// session has not seen is a new call); every later POST of the call carries it.
    fn rekey(&mut self) {
        let key = format!("fault-{:016x}-{}-fresh", self.s.seed, self.index);
        self.post = post_of(self.s, self.session, &self.body, Some(&key));
        self.keyed = true;
    }

    /// Resumes another (completed) call's stream from `last` and reads it to its end,
    /// discarding its events; says how it went.
    fn drain(&self, last: &str) -> String {
        let request =
            wire::get_request(&self.s.target, &self.session.id, &self.session.version, Some(last));
        let run = || -> anyhow::Result<String> {
            let mut conn = Conn::connect(&self.s.target, self.s.timeout)?;
            conn.send(&request)?;
            let mut events = 0u64;
            match conn.read(|_| {
                events += 1;
                false
            })? {
                ReadEnd::Complete { head, .. } => {
                    Ok(format!("HTTP {}, {events} events", head.status))
                }
                ReadEnd::Stopped { .. } => unreachable!("the callback never stops"),
            }
        };
        run().unwrap_or_else(|e| format!("{e:#}"))
    }

    fn finish(mut self, verdict: Result<(), String>) -> CallReport {
        let got = &self.got;
        let ended = verdict.is_ok() || got.gap.is_some();
        // A call whose upstream failed ends with the -32603 in place of the rest.
        let lost = if ended && !self.upstream_failed { got.missing() } else { 0 };
        let result = got.result.flatten();
        let mut problems = Vec::new();
        if let Err(e) = &verdict {
            problems.push(e.clone());
        }
        let checks = [
            ("lost", lost),
            ("gaps", u64::from(got.gap.is_some())),
            ("duplicated", got.duplicated),
            ("out_of_order", got.out_of_order),
            ("id_reused", got.id_reused),
            ("foreign_events", got.foreign),
            ("bad_messages", got.bad.len() as u64),
            ("events_without_id", got.without_id),
            ("hint_not_held", self.hint_not_held),
            ("hint_missing", self.hint_missing),
            ("resumable_header_missing", self.resumable_missing),
            ("ran_again", self.ran_again),
            ("second_priming", got.primings.len().saturating_sub(1) as u64),
            ("timeouts", self.timeouts),
            ("phantom_owed", self.phantom_owed),
            (
                "result_without_value",
                u64::from(verdict.is_ok() && !self.upstream_failed && result.is_none()),
            ),
        ];
        if self.upstream_failed {
            add(&mut self.counters, "upstream_failed", 1);
            let before = got.highest == 0;
            add(&mut self.counters, "upstream_failed_before_progress", i64::from(before));
        }
        if self.upstream.as_ref().is_some_and(|f| f.fired) {
            add(&mut self.counters, "upstream_faults.injected", 1);
        }
        let (known, bad) = (got.known_replayed, got.bad.clone());
        for (name, n) in checks {
            add(&mut self.counters, name, n as i64);
            if n != 0 {
                problems.push(format!("{name} = {n}"));
            }
        }
        for b in bad.into_iter().chain(got.first_foreign.clone()) {
            problems.push(b);
        }
        add(&mut self.counters, "known_events_replayed", known as i64);
        let complete = verdict.is_ok();
        add(&mut self.counters, "completed", i64::from(complete));
        add(&mut self.counters, "incomplete", i64::from(!complete && self.got.gap.is_none()));
        let ok = problems.is_empty();
        add(&mut self.counters, "calls_failed", i64::from(!ok));
        let took = self.started.elapsed();
        let note = ok && (self.held_too_long > 0 || took >= SLOW_CALL);
        add(&mut self.counters, "calls_slow", i64::from(took >= SLOW_CALL));
        add(&mut self.counters, "calls_held_too_long", i64::from(self.held_too_long > 0));
        let mut trace = std::mem::take(&mut self.trace);
        if !ok {
            let _ = writeln!(trace, "  FAILED (call {}): {}", self.index, problems.join("; "));
        } else if note {
            let _ = writeln!(
                trace,
                "  NOTE (call {}): passed in {:.3}s, {} answer(s) -31004",
                self.index,
                took.as_secs_f64(),
                self.held_too_long
            );
        }
        CallReport { ok, complete, note, result, counters: self.counters, trace }
    }
}

/// Sends `request` on the worker's kept-alive connection (or a new one) and reads its answer,
/// cutting it as planned; `on_event(id, data)` sees every event and says whether it was the
/// final response.
pub(crate) fn exchange(
    s: &Settings,
    slot: &mut Option<Conn>,
    request: &[u8],
    plan: Option<(CutAt, How)>,
    mut on_event: impl FnMut(&[u8], &[u8]) -> bool,
) -> Exchange {
    let reused = slot.is_some();
    let mut conn = match slot.take() {
        Some(c) => c,
        None => match Conn::connect(&s.target, s.timeout) {
            Ok(c) => c,
            Err(e) => return Exchange::NoConnection(format!("{e:#}")),
        },
    };
    if let Err(e) = conn.send(request) {
        if !reused {
            return Exchange::Broken { timeout: false, error: format!("{e:#}") };
        }
        // A kept-alive connection the server closed meanwhile: once more, on a new one.
        conn = match Conn::connect(&s.target, s.timeout) {
            Ok(c) => c,
            Err(e) => return Exchange::NoConnection(format!("{e:#}")),
        };
        if let Err(e) = conn.send(request) {
            return Exchange::Broken { timeout: false, error: format!("{e:#}") };
        }
    }
    let cut = |conn: Conn, how: How| match how {
        How::Fin => conn.close_fin(),
        How::Rst => conn.cut(true),
    };
    if let Some((CutAt::Sent, how)) = plan {
        cut(conn, how);
        return Exchange::Cut;
    }
    let at = plan.map(|(at, _)| at);
    let mut processed = 0u64;
    let read = conn.read(|ev| {
        if let Some(CutAt::Events(k)) = at {
            if processed >= k {
                return true;
            }
        }
        let is_final = on_event(ev.id, ev.data);
        processed += 1;
        match at {
            Some(CutAt::Events(k)) => processed >= k,
            Some(CutAt::AfterResult) => is_final,
            _ => false,
        }
    });
    match read {
        Ok(ReadEnd::Stopped { .. }) => {
            let how = plan.map_or(How::Fin, |(_, how)| how);
            cut(conn, how);
            Exchange::Cut
        }
        Ok(ReadEnd::Complete { head, body }) => {
            if !head.close {
                *slot = Some(conn);
            }
            Exchange::Complete { head, body }
        }
        Err(e) => {
            let timeout = e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>().is_some_and(|io| {
                    matches!(
                        io.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    )
                })
            });
            Exchange::Broken { timeout, error: format!("{e:#}") }
        }
    }
}

/// How a request without a complete answer goes on.
pub(crate) enum Unanswered {
    /// No connection: the same request again after `CONNECT_BACKOFF` (not an attempt).
    NoConnection,
    /// Cut as planned: recover.
    Cut,
    /// The connection broke (or timed out): recover.
    Dropped,
    /// Too many connect failures in a row.
    GiveUp(String),
}

/// Counts and traces a request without a complete answer the same way on every path
/// (`tally`: the call's counters, trace and timeouts); sleeps before a reconnect.
pub(crate) fn after_unanswered(
    exchange: Exchange,
    plan: Option<(CutAt, How)>,
    tally: (&mut BTreeMap<String, i64>, &mut String, &mut u64),
    connect_failures: &mut u32,
) -> Unanswered {
    let (counters, trace, timeouts) = tally;
    match exchange {
        Exchange::NoConnection(e) => {
            let _ = writeln!(trace, " no connection: {e}");
            add(counters, "errors.connect", 1);
            *connect_failures += 1;
            if *connect_failures >= CONNECTS_FAILED_MAX {
                return Unanswered::GiveUp(format!("cannot connect: {e}"));
            }
            std::thread::sleep(CONNECT_BACKOFF);
            Unanswered::NoConnection
        }
        Exchange::Cut => {
            let (at, how) = plan.expect("invariant: a cut was planned");
            let _ = writeln!(trace, " | cut");
            add(counters, "cuts", 1);
            add(counters, &format!("cuts.{}", if how == How::Fin { "fin" } else { "rst" }), 1);
            add(counters, &format!("cuts.at_{}", at.name()), 1);
            Unanswered::Cut
        }
        Exchange::Broken { timeout, error } => {
            let _ = writeln!(trace, " | broken: {error}");
            if timeout {
                *timeouts += 1;
            } else {
                add(counters, "unplanned_drops", 1);
            }
            Unanswered::Dropped
        }
        Exchange::Complete { .. } => unreachable!("invariant: only unanswered exchanges"),
    }
}

/// A cut: before the first event, mid-stream (of a call with `steps` progress values) or after
/// the result, a third each; FIN or RST, half each.
pub(crate) fn plan_cut(rng: &mut Rng, steps: u64) -> (CutAt, How) {
    let at = match rng.below(3) {
        0 => match rng.below(3) {
            0 => CutAt::Sent,
            1 => CutAt::Events(0),
            _ => CutAt::Events(1),
        },
        1 => CutAt::Events(2 + rng.below(steps.max(1))),
        _ => CutAt::AfterResult,
    };
    let how = if rng.coin() { How::Fin } else { How::Rst };
    (at, how)
}

/// The server's Prometheus counters (`name{labels} value` lines) from `url`.
pub fn scrape_metrics(url: &str, timeout: Duration) -> anyhow::Result<BTreeMap<String, f64>> {
    let target = Target::parse(url)?;
    let mut stream = std::net::TcpStream::connect_timeout(&target.addr, timeout)
        .with_context(|| format!("connecting to {url}"))?;
    stream.set_read_timeout(Some(timeout))?;
    write!(
        stream,
        "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        target.path, target.authority
    )?;
    let mut text = String::new();
    stream.read_to_string(&mut text).with_context(|| format!("reading {url}"))?;
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let mut out = BTreeMap::new();
    for line in body.lines().filter(|l| !l.starts_with('#')) {
        if let Some((name, value)) = line.rsplit_once(' ') {
            if let Ok(v) = value.trim().parse::<f64>() {
                out.insert(name.to_owned(), v);
            }
        }
    }
    Ok(out)
}

/// The migration-boundary counters of the server worth reporting next to the client's.
pub const SERVER_COUNTERS: [&str; 9] = [
    "tidemark_migrations_rejected_total{reason=\"retry_of_owed\"}",
    "tidemark_migrations_rejected_total{reason=\"id_reused\"}",
    "tidemark_migrations_rejected_total{reason=\"held_too_long\"}",
    "tidemark_migrations_rejected_total{reason=\"idempotency_key_reused\"}",
    "tidemark_posts_held_total",
    "tidemark_dedup_hits_total",
    "tidemark_replays_total",
    "tidemark_gaps_total",
    "tidemark_owed_abandoned_total",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(v: u64) -> Vec<u8> {
        format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":7,"progress":{v},"total":3}}}}"#
        )
        .into_bytes()
    }

    fn result(n: u64) -> Vec<u8> {
        format!(
            r#"{{"jsonrpc":"2.0","id":7,"result":{{"content":[{{"type":"text","text":"{n}"}}]}}}}"#
        )
        .into_bytes()
    }

    /// Feeds (id, data) events as one response; returns the log text.
    fn feed(got: &mut Received, events: &[(&str, Vec<u8>)]) -> String {
        let mut log = ResponseLog::default();
        for (id, data) in events {
            got.on_event(id.as_bytes(), data, &mut log);
        }
        log.text
    }

    #[test]
    fn a_replay_from_an_earlier_hint_is_deduplicated() {
        let mut got = Received::new(7, 3);
        feed(&mut got, &[("a-1-1", Vec::new()), ("a-1-2", progress(1)), ("a-1-3", progress(2))]);
        assert_eq!(got.cursor.as_deref(), Some(&b"a-1-3"[..]));
        // GET from the priming event: 1 and 2 again under their ids, then the rest.
        feed(
            &mut got,
            &[
                ("a-1-2", progress(1)),
                ("a-1-3", progress(2)),
                ("a-1-4", progress(3)),
                ("a-1-5", result(9)),
            ],
        );
        assert_eq!((got.duplicated, got.out_of_order, got.id_reused, got.missing()), (0, 0, 0, 0));
        assert_eq!(got.known_replayed, 2);
        assert_eq!(got.result, Some(Some(9)));
    }

    #[test]
    fn a_value_under_a_new_id_is_a_duplicate_and_a_skip_is_lost() {
        let mut got = Received::new(7, 3);
        feed(&mut got, &[("a-1-1", Vec::new()), ("a-1-2", progress(1))]);
        // A second execution: its own priming event and progress from 1 again.
        feed(&mut got, &[("a-2-9", Vec::new()), ("a-2-10", progress(1))]);
        assert_eq!(got.duplicated, 1);
        assert_eq!(got.primings.len(), 2);
        // The known defect: the hint skips 2 and 3, the GET returns only the result.
        let mut got = Received::new(7, 3);
        feed(&mut got, &[("a-1-1", Vec::new()), ("a-1-2", progress(1))]);
        let text = feed(&mut got, &[("a-1-5", result(4))]);
        assert_eq!(got.missing(), 2);
        assert!(text.contains("2 MISSING"), "{text}");
    }

    #[test]
    fn order_violations() {
        let mut got = Received::new(7, 3);
        feed(&mut got, &[("a-1-2", progress(2)), ("a-1-1", progress(1))]);
        assert_eq!(got.out_of_order, 1);
        let mut got = Received::new(7, 3);
        feed(&mut got, &[("a-1-2", progress(1))]);
        // A known event after a new one in the same response.
        feed(&mut got, &[("a-1-3", progress(2)), ("a-1-2", progress(1))]);
        assert_eq!(got.out_of_order, 1);
        // The same id with another message.
        feed(&mut got, &[("a-1-3", progress(3))]);
        assert_eq!(got.id_reused, 1);
    }

    #[test]
    fn gaps_errors_and_foreign_messages_are_classified() {
        let gap = br#"{"jsonrpc":"2.0","id":7,"error":{"code":-31003,"message":"lost","data":{}}}"#;
        assert!(matches!(classify(gap, 7, 3), Msg::Gap(_)));
        let other = br#"{"jsonrpc":"2.0","id":8,"result":{}}"#;
        assert!(matches!(classify(other, 7, 3), Msg::Foreign(_)));
        let other_token = br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":8,"progress":1}}"#;
        assert!(matches!(classify(other_token, 7, 3), Msg::Foreign(_)));
        assert!(matches!(classify(&progress(4), 7, 3), Msg::Bad(_)));
        assert!(matches!(classify(&result(5), 7, 3), Msg::Carried(Carried::Result(Some(5), _))));
        assert!(matches!(classify(b"", 7, 3), Msg::Carried(Carried::Priming)));
    }

    #[test]
    fn rng_is_deterministic_per_call_and_roughly_uniform() {
        let a: Vec<u64> = (0..8).map(|_| Rng::for_call(42, 3).next()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        assert_ne!(Rng::for_call(42, 3).next(), Rng::for_call(42, 4).next());
        let mut rng = Rng::for_call(1, 1);
        let mut buckets = [0u32; 3];
        for _ in 0..30_000 {
            buckets[rng.below(3) as usize] += 1;
        }
        assert!(buckets.iter().all(|b| (9_000..11_000).contains(b)), "{buckets:?}");
    }
}
