//! `ping`, `echo` and `stream`: one request, one answer, on established sessions; `modern`: the
//! same with stateless 2026-07-28 requests and no session at all.
//!
//! Owns: the `Workload` that writes a templated request and judges its answer: HTTP 200, a final
//! JSON-RPC response with the request's id and no error, and for `stream` exactly `steps`
//! progress notifications before it. For `modern` also the answer's form (`Stateless`): no
//! `Mcp-Session-Id` (an error), and how many answers came as JSON, as SSE, or with the
//! connection closed by the server (counted, so keep-alive and the JSON fast path show).
//! Called by: `main` through `engine::run`, one instance per load thread.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use crate::engine::{Answer, ConnState, Outcome, Step, Workload};
use crate::jsonrpc::{Classifier, Kind};
use crate::stats::ErrorKind;
use crate::wire::{BodyKind, Head, PostTemplate};

pub struct Calls {
    /// One template per session; connection `slot` uses `templates[slot % len]`.
    templates: Vec<PostTemplate>,
    /// Progress notifications every answer must carry (`stream`).
    steps: Option<u32>,
    /// Calls left to start across all threads (`--requests`); `None` = until the end of time.
    budget: Option<Arc<AtomicI64>>,
    classifier: Classifier,
    /// `modern`: the form of every answer is checked and counted here (shared by the threads).
    stateless: Option<Arc<Stateless>>,
}

/// How the answers of a stateless run came back, over all load threads (warm-up included).
#[derive(Debug, Default)]
pub struct Stateless {
    json: AtomicU64,
    sse: AtomicU64,
    /// Any other `Content-Type` (or none).
    other: AtomicU64,
    /// Answers with `Connection: close` (or delimited by the close): the connection is reopened.
    closed: AtomicU64,
}

impl Stateless {
    /// Into the run report's counters; `answers_*` are informational.
    pub fn add_counters(&self, counters: &mut BTreeMap<String, i64>) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed) as i64;
        counters.insert("answers_json".into(), get(&self.json));
        counters.insert("answers_sse".into(), get(&self.sse));
        counters.insert("answers_other".into(), get(&self.other));
        counters.insert("connections_closed_by_server".into(), get(&self.closed));
    }
}

impl Calls {
    pub fn new(
        templates: Vec<PostTemplate>,
        steps: Option<u32>,
        budget: Option<Arc<AtomicI64>>,
    ) -> Calls {
        assert!(!templates.is_empty());
        Calls { templates, steps, budget, classifier: Classifier::default(), stateless: None }
    }

    /// Judges answers as stateless ones (`modern`): a session id in one fails it.
    pub fn stateless(mut self, counts: Arc<Stateless>) -> Calls {
        self.stateless = Some(counts);
        self
    }

    fn judge(&self, step: &mut Step, data: &[u8]) {
        match self.classifier.kind(data) {
            Kind::Progress => step.events += 1,
            Kind::Response { ok: false } => step.answer = Answer::Failed(ErrorKind::Rpc),
            Kind::Response { ok: true } => {
                step.answer = if self.classifier.id(data) == Some(step.id) {
                    Answer::Ok
                } else {
                    Answer::Failed(ErrorKind::WrongId)
                };
            }
            Kind::Other => {}
        }
    }
}

impl Workload for Calls {
    fn begin(&mut self, conn: &mut ConnState, id: u64, out: &mut Vec<u8>) -> Option<Step> {
        if let Some(budget) = &self.budget {
            if budget.fetch_sub(1, Ordering::Relaxed) <= 0 {
                return None;
            }
        }
        self.templates[conn.slot % self.templates.len()].write(id, out);
        Some(Step::new(0, id))
    }

    fn on_event(&mut self, step: &mut Step, data: &[u8]) {
        self.judge(step, data);
    }

    fn on_response(
        &mut self,
        mut step: Step,
        head: &Head,
        body: &[u8],
        _conn: &mut ConnState,
        _id: u64,
        _out: &mut Vec<u8>,
    ) -> Outcome {
        if head.status != 200 {
            return Outcome::Done(Err(ErrorKind::Status));
        }
        if let Some(counts) = &self.stateless {
            let kind = match head.kind {
                BodyKind::Json => &counts.json,
                BodyKind::Sse => &counts.sse,
                BodyKind::Empty | BodyKind::Other => &counts.other,
            };
            kind.fetch_add(1, Ordering::Relaxed);
            if head.close {
                counts.closed.fetch_add(1, Ordering::Relaxed);
            }
            if head.session_id.is_some() {
                return Outcome::Done(Err(ErrorKind::Session));
            }
        }
        if head.kind != BodyKind::Sse && !body.is_empty() {
            self.judge(&mut step, body);
        }
        Outcome::Done(match step.answer {
            Answer::None => Err(ErrorKind::Incomplete),
            Answer::Failed(kind) => Err(kind),
            Answer::Ok if self.steps.is_some_and(|n| n != step.events) => {
                Err(ErrorKind::Incomplete)
            }
            Answer::Ok => Ok(step.events),
        })
    }
}
