//! `ping`, `echo` and `stream`: one request, one answer, on established sessions.
//!
//! Owns: the `Workload` that writes a templated request and judges its answer: HTTP 200, a final
//! JSON-RPC response with the request's id and no error, and for `stream` exactly `steps`
//! progress notifications before it.
//! Called by: `main` through `engine::run`, one instance per load thread.

use std::sync::atomic::{AtomicI64, Ordering};
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
}

impl Calls {
    pub fn new(
        templates: Vec<PostTemplate>,
        steps: Option<u32>,
        budget: Option<Arc<AtomicI64>>,
    ) -> Calls {
        assert!(!templates.is_empty());
        Calls { templates, steps, budget, classifier: Classifier::default() }
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
