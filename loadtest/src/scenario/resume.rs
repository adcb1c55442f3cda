//! `resume`: cut a `slow_counter` stream after k events and resume it with `GET` +
//! `Last-Event-ID`; report the resume latency (GET sent → final response received) by the number
//! of events the server had buffered for us (`--buffered`, cycled per iteration).
//!
//! The call runs with `delay_ms = 0`, so by the time the client cuts, the server has produced
//! all `k + b` progress notifications and the final response: exactly `b` events (+ the final
//! response) are waiting in its replay buffer. Correctness: every progress value exactly once
//! across both halves, one final response, and the resumed response ends after it.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use hdrhistogram::Histogram;

use crate::client::Conn;
use crate::jsonrpc;
use crate::scenario::flow::{self, Flow, Pace};
use crate::stats::{self, Live};
use crate::wire::PostTemplate;

#[derive(Clone, Debug)]
pub struct Settings {
    pub buffered: Vec<u64>,
    pub cut_after: u64,
    pub measure_from: Instant,
    pub end: Instant,
    /// Iterations per second across all workers; `None` = back to back.
    pub rate: Option<f64>,
}

pub struct Outcome {
    /// One histogram per `buffered` value, same order.
    pub hists: Vec<Histogram<u64>>,
    pub counters: BTreeMap<String, i64>,
    pub iterations: u64,
    pub last_error: Option<String>,
}

pub fn add(counters: &mut BTreeMap<String, i64>, key: &str, n: i64) {
    *counters.entry(key.to_owned()).or_insert(0) += n;
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
                for (h, o) in t.hists.iter_mut().zip(&r.hists) {
                    h.add(o).expect("invariant: same histogram bounds");
                }
                for (k, v) in r.counters {
                    add(&mut t.counters, &k, v);
                }
                t.iterations += r.iterations;
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
    let templates: Vec<PostTemplate> = s
        .buffered
        .iter()
        .map(|b| {
            let body = jsonrpc::slow_counter_body(s.cut_after + b, 0);
            PostTemplate::new(&flow.target, Some(&flow.session.id), &flow.session.version, &body)
        })
        .collect();
    let mut out = Outcome {
        hists: s.buffered.iter().map(|_| stats::new_histogram()).collect(),
        counters: BTreeMap::new(),
        iterations: 0,
        last_error: None,
    };
    let mut interval = stats::new_histogram();
    let mut published = Instant::now();
    let mut pace = Pace::new(rate, w as f64 / workers as f64);
    let mut conn: Option<Conn> = None;
    let mut k = w;
    let mut next_id = ((w as u64) + 1) << 40;
    while Instant::now() < s.end {
        pace.wait();
        let which = k % s.buffered.len();
        k += 1;
        next_id += 1;
        let started = Instant::now();
        let steps = s.cut_after + s.buffered[which];
        match iteration(
            flow,
            conn.take(),
            &templates[which],
            next_id,
            steps,
            s.cut_after,
            &mut out.counters,
        ) {
            Ok((latency, reusable)) => {
                conn = reusable;
                if started >= s.measure_from {
                    stats::record(&mut out.hists[which], latency);
                    stats::record(&mut interval, latency);
                    live.done.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(e) => {
                add(&mut out.counters, "errors.iteration", 1);
                live.errors.fetch_add(1, Ordering::Relaxed);
                out.last_error = Some(format!("{e:#}"));
            }
        }
        out.iterations += 1;
        if published.elapsed().as_secs() >= 1 {
            published = Instant::now();
            live.publish_interval(&mut interval);
        }
    }
    live.publish_interval(&mut interval);
    Ok(out)
}

/// One cut-and-resume. Returns the resume latency and the connection, when it can be reused.
fn iteration(
    flow: &Flow,
    conn: Option<Conn>,
    template: &PostTemplate,
    id: u64,
    steps: u64,
    cut_after: u64,
    counters: &mut BTreeMap<String, i64>,
) -> anyhow::Result<(std::time::Duration, Option<Conn>)> {
    let conn = match conn {
        Some(c) => c,
        None => flow.connect()?,
    };
    let cut = flow.post_and_cut(conn, &template.bytes(id), cut_after)?;
    let mut conn = flow.connect()?;
    let sent = Instant::now();
    let got = flow.exchange(&mut conn, &flow.get(&cut.last_id))?;
    if got.status != 200 {
        anyhow::bail!("resume answered HTTP {}", got.status);
    }
    let (lost, dup) = flow::lost_and_duplicated(steps, &cut.progress, &got.progress);
    add(counters, "lost_events", lost as i64);
    add(counters, "duplicate_events", dup as i64);
    add(counters, "missing_final", i64::from(got.finals == 0));
    add(counters, "duplicate_final", i64::from(got.finals.saturating_sub(1)));
    add(counters, "error_final", i64::from(got.error.is_some()));
    add(counters, "stream_not_ended", i64::from(!got.ended));
    let final_at =
        got.final_at.ok_or_else(|| anyhow::anyhow!("the resumed stream has no final response"))?;
    Ok((final_at - sent, got.ended.then_some(conn)))
}
