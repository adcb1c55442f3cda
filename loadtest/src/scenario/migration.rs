//! `migration`: the cost and the safety of CONTRACT §4. Each iteration starts a `slow_counter`
//! call (with a delay per step, so it is still running), cuts its stream after k events, then
//! alternately:
//! (a) resumes directly: `GET` + `Last-Event-ID` of the last event it processed;
//! (b) re-POSTs the identical request (same JSON-RPC id), expects `409` with
//!     `Mcp-Stream-Resumable: true` and a `Last-Event-ID` hint, and resumes with the hint
//!     (`--resume-with own` resumes from its own last id instead).
//! Reported: time from the cut to the final result for (a) and (b); the added migration round
//! trip, measured directly (re-POST sent → 409 read) and as b − a per percentile; and the
//! correctness counters, each of which must be 0: lost events, duplicate events, double
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

#[derive(Clone, Debug)]
pub struct Settings {
    pub steps: u64,
    pub delay_ms: u64,
    pub cut_after: u64,
    pub resume_with: ResumeWith,
    pub measure_from: Instant,
    pub end: Instant,
    pub rate: Option<f64>,
}

pub struct Outcome {
    /// (a) cut → final result, resuming directly.
    pub direct: Histogram<u64>,
    /// (b) cut → final result, through re-POST, 409 and the hint.
    pub via_409: Histogram<u64>,
    /// The 409 round trip alone (re-POST sent → 409 read).
    pub added: Histogram<u64>,
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
                t.direct.add(&r.direct).expect("invariant: same histogram bounds");
                t.via_409.add(&r.via_409).expect("invariant: same histogram bounds");
                t.added.add(&r.added).expect("invariant: same histogram bounds");
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
    let mut out = Outcome {
        direct: stats::new_histogram(),
        via_409: stats::new_histogram(),
        added: stats::new_histogram(),
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
    ] {
        out.counters.insert(key.to_owned(), 0);
    }
    let mut interval = stats::new_histogram();
    let mut published = Instant::now();
    let mut pace = Pace::new(rate, w as f64 / workers as f64);
    let mut conn: Option<Conn> = None;
    let mut k = w as u64;
    let mut next_id = ((w as u64) + 1) << 40;
    while Instant::now() < s.end {
        pace.wait();
        let via_409 = k % 2 == 1;
        k += 1;
        next_id += 1;
        let started = Instant::now();
        let recorded = started >= s.measure_from;
        let request = template.bytes(next_id);
        let result = iteration(flow, conn.take(), &request, s, via_409, &mut out);
        match result {
            Ok(Some((total, added, reusable))) => {
                conn = reusable;
                if recorded {
                    if let Some(added) = added {
                        stats::record(&mut out.via_409, total);
                        stats::record(&mut out.added, added);
                        stats::record(&mut interval, added);
                    } else {
                        stats::record(&mut out.direct, total);
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

/// One cut and recovery. `Ok(Some((cut → final, Some(409 round trip) for (b), connection)))`;
/// `Ok(None)` when the re-POST was executed again (counted, nothing to time).
#[allow(clippy::type_complexity)]
fn iteration(
    flow: &Flow,
    conn: Option<Conn>,
    request: &[u8],
    s: &Settings,
    via_409: bool,
    out: &mut Outcome,
) -> anyhow::Result<Option<(Duration, Option<Duration>, Option<Conn>)>> {
    let conn = match conn {
        Some(c) => c,
        None => flow.connect()?,
    };
    out.calls += 1;
    let cut = flow.post_and_cut(conn, request, s.cut_after)?;
    let mut conn = flow.connect()?;
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
    Ok(Some((final_at - cut.at, added, got.ended.then_some(conn))))
}
