//! `sessions`: open K sessions (`initialize` + `notifications/initialized`) and leave them idle;
//! report the server's resident memory per session, read from `/proc/PID/status`.
//!
//! Owns: the session-opening `Workload`. The memory accounting is in `main` (before/after).
//! Note: the answer to `initialize` is judged by status and `Mcp-Session-Id` only; the session
//! is then used once, by the `initialized` notification, which must be accepted (2xx).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use crate::engine::{Answer, ConnState, Outcome, Step, Workload};
use crate::jsonrpc::{self, Classifier, Kind};
use crate::stats::ErrorKind;
use crate::wire::{Head, PostTemplate, Target};

const INITIALIZE: u8 = 0;
const INITIALIZED: u8 = 1;

pub struct OpenSessions {
    /// Sessions still to open, shared by all load threads.
    remaining: Arc<AtomicI64>,
    initialize: PostTemplate,
    target: Target,
    version: String,
    classifier: Classifier,
}

impl OpenSessions {
    pub fn new(remaining: Arc<AtomicI64>, target: &Target, version: &str) -> OpenSessions {
        let body = jsonrpc::initialize_body(version);
        OpenSessions {
            remaining,
            initialize: PostTemplate::new(target, None, version, &body),
            target: target.clone(),
            version: version.to_owned(),
            classifier: Classifier::default(),
        }
    }
}

impl Workload for OpenSessions {
    fn begin(&mut self, _conn: &mut ConnState, id: u64, out: &mut Vec<u8>) -> Option<Step> {
        if self.remaining.fetch_sub(1, Ordering::Relaxed) <= 0 {
            return None;
        }
        self.initialize.write(id, out);
        Some(Step::new(INITIALIZE, id))
    }

    fn on_event(&mut self, step: &mut Step, data: &[u8]) {
        if let Kind::Response { ok } = self.classifier.kind(data) {
            step.answer = if ok { Answer::Ok } else { Answer::Failed(ErrorKind::Rpc) };
        }
    }

    fn on_response(
        &mut self,
        mut step: Step,
        head: &Head,
        body: &[u8],
        _conn: &mut ConnState,
        id: u64,
        out: &mut Vec<u8>,
    ) -> Outcome {
        if step.tag == INITIALIZED {
            return Outcome::Done(if (200..300).contains(&head.status) {
                Ok(0)
            } else {
                Err(ErrorKind::Status)
            });
        }
        if head.status != 200 {
            return Outcome::Done(Err(ErrorKind::Status));
        }
        if !body.is_empty() {
            self.on_event(&mut step, body);
        }
        match (step.answer, &head.session_id) {
            (Answer::Ok, Some(session)) => {
                let notify = PostTemplate::new(
                    &self.target,
                    Some(session),
                    &self.version,
                    jsonrpc::INITIALIZED_BODY,
                );
                notify.write(id, out);
                Outcome::Next(Step::new(INITIALIZED, id))
            }
            (Answer::Failed(kind), _) => Outcome::Done(Err(kind)),
            _ => Outcome::Done(Err(ErrorKind::Incomplete)),
        }
    }
}
