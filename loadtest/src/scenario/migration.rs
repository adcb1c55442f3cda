//! `migration`: the cost and the safety of CONTRACT §4. Each iteration starts a `slow_counter`
//! call (with a delay per step, so it is still running), cuts its stream after k events, then
//! alternately:
//! (a) resumes directly: `GET` + `Last-Event-ID` of the last event it processed;
//! (b) re-POSTs the identical request (same JSON-RPC id), expects `409` with
//!     `Mcp-Stream-Resumable: true` and a `Last-Event-ID` hint, and resumes with the hint
//!     (`--resume-with own` resumes from its own last id instead).
//! Each of (a) and (b) runs with a kept-alive connection (the worker's spare, already used for an
//! earlier re-POST or GET, so the server's task for it is parked in a read) and with a fresh one
//! (connected after the cut: its first request pays the server's accept), alternating
//! `(a, kept) (b, kept) (a, fresh) (b, fresh) …` in one run (`--connection` picks one mode).
//! Reported per mode: time from the cut to the final result for (a) and (b); the added
//! migration round trip, measured directly (re-POST sent → 409 read) and as b − a per
//! percentile; and the correctness counters, each of which must be 0: lost events, duplicate events, double
//! executions (a re-POST answered 200 runs the tool again; the tool's global counter, read
//! with `get_counter` before and after, must have grown by exactly the number of calls).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::client::Conn;
use crate::jsonrpc;
use crate::scenario::flow::{self, Flow, Pace};
use crate::scenario::resume::add;
use crate::stats::{self, Live};
use crate::wire::PostTemplate;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum ResumeWith {
    /// The server's `Last-Event-ID` hint from the 409.
    Hint,
    /// The last event id the client processed before the cut.
    Own,
}

/// Which connection the re-POST (b) and the direct resume (a) go out on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum ConnectionMode {
    /// The worker's spare connection, kept alive across iterations.
    Kept,
    /// A new connection after each cut.
    Fresh,
    /// Alternate kept and fresh in one run.
    Both,
}

impl ConnectionMode {
    /// The modes an iteration cycles through, in `Outcome::modes` order.
    fn cycle(self) -> &'static [Mode] {
        match self {
            ConnectionMode::Kept => &[Mode::Kept],
            ConnectionMode::Fresh => &[Mode::Fresh],
            ConnectionMode::Both => &[Mode::Kept, Mode::Fresh],
        }
    }
}

/// One iteration's connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Kept,
    Fresh,
}

impl Mode {
    /// The label of this mode's series and values.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Kept => "kept-alive",
            Mode::Fresh => "fresh connection",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Settings {
    pub connection: ConnectionMode,
    pub steps: u64,
    pub delay_ms: u64,
    pub cut_after: u64,
    pub resume_with: ResumeWith,
    pub measure_from: Instant,
    pub end: Instant,
    pub rate: Option<f64>,
}

/// The timings of one connection mode.
pub struct Timings {
    pub mode: Mode,
    /// (a) cut → final result, resuming directly.
    pub direct: Histogram<u64>,
    /// (b) cut → final result, through re-POST, 409 and the hint.
    pub via_409: Histogram<u64>,
    /// The 409 round trip alone (re-POST sent → 409 read).
    pub added: Histogram<u64>,
}

impl Timings {
    fn new(mode: Mode) -> Timings {
        Timings {
            mode,
            direct: stats::new_histogram(),
            via_409: stats::new_histogram(),
            added: stats::new_histogram(),
        }
    }

    fn add(&mut self, other: &Timings) {
        self.direct.add(&other.direct).expect("invariant: same histogram bounds");
        self.via_409.add(&other.via_409).expect("invariant: same histogram bounds");
        self.added.add(&other.added).expect("invariant: same histogram bounds");
    }
}

pub struct Outcome {
    /// One entry per mode of `Settings::connection`, in `ConnectionMode::cycle` order.
    pub modes: Vec<Timings>,
    pub counters: BTreeMap<String, i64>,
    /// First POSTs sent: each must execute the tool exactly once.
    pub calls: u64,
    pub last_error: Option<String>,
}

pub fn run(
    flows: Vec<Flow>,
    workers: usize,
    settings: Settings,
    lives: Vec<Arc<Live>>,
) -> anyhow::Result<Outcome> {
    let per_worker_rate = settings.rate.map(|r| r / workers as f64);
    let results = flow::run_workers(workers, move |w| {
        worker(&flows[w % flows.len()], w, workers, &settings, per_worker_rate, &lives[w])
    })?;
    let mut total: Option<Outcome> = None;
    for r in results {
        match &mut total {
            None => total = Some(r),
            Some(t) => {
                for (mine, theirs) in t.modes.iter_mut().zip(&r.modes) {
                    mine.add(theirs);
                }
                for (k, v) in r.counters {
                    add(&mut t.counters, &k, v);
                }
                t.calls += r.calls;
                t.last_error = t.last_error.take().or(r.last_error);
            }
        }
    }
    total.ok_or_else(|| anyhow::anyhow!("no workers"))
}

fn worker(
    flow: &Flow,
    w: usize,
    workers: usize,
    s: &Settings,
    rate: Option<f64>,
    live: &Live,
) -> anyhow::Result<Outcome> {
    let body = jsonrpc::slow_counter_body(s.steps, s.delay_ms);
    let template =
        PostTemplate::new(&flow.target, Some(&flow.session.id), &flow.session.version, &body);
    let cycle = s.connection.cycle();
    let mut out = Outcome {
        modes: cycle.iter().map(|m| Timings::new(*m)).collect(),
        counters: BTreeMap::new(),
        calls: 0,
        last_error: None,
    };
    for key in [
        "lost_events",
        "duplicate_events",
        "double_executions",
        "missing_final",
        "duplicate_final",
        "error_final",
        "stream_not_ended",
        "reposts_executed",
        "reposts_rejected_409",
        "hint_missing",
        "hint_differs_from_own",
        "resumable_header_missing",
        "kept_connection_opened",
    ] {
        out.counters.insert(key.to_owned(), 0);
    }
    let mut interval = stats::new_histogram();
    let mut published = Instant::now();
    let mut pace = Pace::new(rate, w as f64 / workers as f64);
    let mut conns = Conns { main: None, spare: None };
    // Even and odd workers start on different modes, so both run at every moment.
    let mut k = 2 * w as u64;
    let mut next_id = ((w as u64) + 1) << 40;
    while Instant::now() < s.end {
        pace.wait();
        let via_409 = k % 2 == 1;
        let slot = (k / 2) as usize % cycle.len();
        k += 1;
        next_id += 1;
        let started = Instant::now();
        let recorded = started >= s.measure_from;
        let request = template.bytes(next_id);
        let mode = cycle[slot];
        let result = iteration(flow, &mut conns, mode, &request, s, via_409, &mut out);
        match result {
            Ok(Some(timed)) => {
                if recorded && timed.warm {
                    let t = &mut out.modes[slot];
                    if let Some(added) = timed.added {
                        stats::record(&mut t.via_409, timed.total);
                        stats::record(&mut t.added, added);
                        stats::record(&mut interval, added);
                    } else {
                        stats::record(&mut t.direct, timed.total);
                    }
                    live.done.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(None) => {}
            Err(e) => {
                add(&mut out.counters, "errors.iteration", 1);
                live.errors.fetch_add(1, Ordering::Relaxed);
                out.last_error = Some(format!("{e:#}"));
            }
        }
        if published.elapsed().as_secs() >= 1 {
            published = Instant::now();
            live.publish_interval(&mut interval);
        }
    }
    live.publish_interval(&mut interval);
    Ok(out)
}

/// A worker's connections between iterations.
struct Conns {
    /// Reusable for the next call's first POST (a fresh-mode recovery's connection).
    main: Option<Conn>,
    /// The kept-alive connection kept-mode recoveries go out on.
    spare: Option<Conn>,
}

/// What one recovery took.
struct Timed {
    /// Cut → final result.
    total: Duration,
    /// The 409 round trip, for (b).
    added: Option<Duration>,
    /// The recovery went out on the connection its mode names (false: a kept-mode recovery
    /// that had to open its spare first, not timed).
    warm: bool,
}

/// The connection a recovery goes out on in `mode`, and whether it is the one the mode names.
fn recovery_conn(
    flow: &Flow,
    conns: &mut Conns,
    mode: Mode,
    out: &mut Outcome,
) -> anyhow::Result<(Conn, bool)> {
    match (mode, conns.spare.take()) {
        (Mode::Kept, Some(spare)) => Ok((spare, true)),
        (Mode::Kept, None) => {
            add(&mut out.counters, "kept_connection_opened", 1);
            Ok((flow.connect()?, false))
        }
        (Mode::Fresh, spare) => {
            conns.spare = spare;
            Ok((flow.connect()?, true))
        }
    }
}

/// One cut and recovery. `Ok(None)` when the re-POST was executed again (counted, nothing to
/// time).
fn iteration(
    flow: &Flow,
    conns: &mut Conns,
    mode: Mode,
    request: &[u8],
    s: &Settings,
    via_409: bool,
    out: &mut Outcome,
) -> anyhow::Result<Option<Timed>> {
    let conn = match conns.main.take() {
        Some(c) => c,
        None => flow.connect()?,
    };
    out.calls += 1;
    let cut = flow.post_and_cut(conn, request, s.cut_after)?;
    let (mut conn, warm) = recovery_conn(flow, conns, mode, out)?;
    let mut added = None;
    let mut resume_from = cut.last_id.clone();
    if via_409 {
        let sent = Instant::now();
        let answer = flow.exchange(&mut conn, request)?;
        match answer.status {
            409 => {
                let read = answer.final_at.unwrap_or_else(Instant::now);
                added = Some(read - sent);
                add(&mut out.counters, "reposts_rejected_409", 1);
                if let Some((code, _)) = &answer.error {
                    add(&mut out.counters, &format!("rejections.{code}"), 1);
                }
                add(&mut out.counters, "resumable_header_missing", i64::from(!answer.resumable));
                match &answer.last_event_id_hint {
                    None => add(&mut out.counters, "hint_missing", 1),
                    Some(hint) => {
                        add(
                            &mut out.counters,
                            "hint_differs_from_own",
                            i64::from(*hint != cut.last_id),
                        );
                        if s.resume_with == ResumeWith::Hint {
                            resume_from = hint.clone();
                        }
                    }
                }
                if !answer.ended {
                    conn = flow.connect()?;
                }
            }
            200 if answer.finals > 0 || answer.ended => {
                // The retry ran the tool a second time (what the SDKs do without a boundary):
                // the first call's tail is orphaned in the server's buffer.
                add(&mut out.counters, "reposts_executed", 1);
                add(&mut out.counters, "double_executions", 1);
                let (lost, _) = flow::lost_and_duplicated(s.steps, &cut.progress, &[]);
                add(&mut out.counters, "lost_events", lost as i64);
                return Ok(None);
            }
            status => anyhow::bail!("re-POST answered HTTP {status}"),
        }
    }
    let got = flow.exchange(&mut conn, &flow.get(&resume_from))?;
    if got.status != 200 {
        anyhow::bail!("resume answered HTTP {}", got.status);
    }
    // The 409 hint is the last event the server knows the client holds (often the priming
    // event), so the replay may repeat events the client already has, under the same ids: a
    // client that kept its ids skips those. A duplicate is a progress value delivered twice
    // under different ids, or twice in the resumed stream.
    let fresh: Vec<f64> = got
        .progress
        .iter()
        .zip(&got.progress_ids)
        .filter(|(_, id)| !cut.ids.contains(*id))
        .map(|(p, _)| *p)
        .collect();
    add(&mut out.counters, "known_events_replayed", (got.progress.len() - fresh.len()) as i64);
    let (lost, dup) = flow::lost_and_duplicated(s.steps, &cut.progress, &fresh);
    add(&mut out.counters, "lost_events", lost as i64);
    add(&mut out.counters, "duplicate_events", dup as i64);
    add(&mut out.counters, "missing_final", i64::from(got.finals == 0));
    add(&mut out.counters, "duplicate_final", i64::from(got.finals.saturating_sub(1)));
    add(&mut out.counters, "error_final", i64::from(got.error.is_some()));
    add(&mut out.counters, "stream_not_ended", i64::from(!got.ended));
    let final_at =
        got.final_at.ok_or_else(|| anyhow::anyhow!("the resumed stream has no final response"))?;
    if got.ended {
        match mode {
            Mode::Kept => conns.spare = Some(conn),
            Mode::Fresh => conns.main = Some(conn),
        }
    }
    Ok(Some(Timed { total: final_at - cut.at, added, warm }))
}
