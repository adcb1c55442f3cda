//! The 2026-07-28 era's side of the durable mirror (`--durable`, CONTRACT §10): a keyed call's
//! record goes to the store before the tool runs and again with its final response, and a
//! fresh key this node does not hold is asked of the store first, so a re-issue that the
//! balancer sends to another node (the key's node died) gets the recorded outcome, or `-31006`
//! when the call was running there, and never runs the tool again.
//!
//! Never: waits on the store on a worker except through the reader thread or the mirror's
//! acknowledgement, each bounded.

use std::cell::RefCell;
use std::hash::RandomState;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::core::Core;
use crate::durable::{keys, Answer, CoreChange, CoreTap, Misses, Query};
use crate::wire::jsonrpc::RawId;

/// What the store said about a fresh key.
pub(crate) enum Recovered {
    /// Nothing recorded (or no store): the call runs here.
    Nothing,
    /// The same call finished elsewhere: its final response, with this request's id.
    Answered(Vec<u8>),
    /// The same call was running on a node that died: `-31006`, never run again.
    Unknown(Vec<u8>),
    /// Another call took the key (422 -31005).
    OtherCall,
    /// Its node is alive, or the store is busy: 503 + `Retry-After`.
    Busy,
}

/// How long a request waits for the store's answer about its key.
const LOOKUP_WAIT_MS: u64 = 1_000;

/// The store's name of a scoped key (the scope is inside it already).
pub(crate) fn store_name(scoped_key: &str) -> String {
    keys::keyed(None, scoped_key)
}

/// Asks the store about a key this core does not hold (`--durable`).
pub(crate) async fn recover(
    core: &Core,
    scoped_key: &str,
    fingerprint: u64,
    id: &RawId,
) -> Recovered {
    let Some(reader) = core.reader.clone() else { return Recovered::Nothing };
    let Some(asked) = reader.ask(Query::Keyed { name: store_name(scoped_key) }) else {
        return Recovered::Busy;
    };
    let answer = match monoio::time::timeout(Duration::from_millis(LOOKUP_WAIT_MS), asked).await {
        Ok(answer) => answer,
        Err(_) => return Recovered::Busy,
    };
    let found = match answer {
        Answer::Keyed(found) => found,
        // The store is down: the call runs unprotected against this node's death (counted
        // when its record cannot be written).
        Answer::Failed(why) => {
            tracing::debug!(error = %why, "durable store not asked about a key");
            return Recovered::Nothing;
        }
        Answer::Claim(_) | Answer::Task(_) => return Recovered::Nothing,
    };
    let Some((image, alive)) = found else { return Recovered::Nothing };
    if image.fingerprint != fingerprint {
        return Recovered::OtherCall;
    }
    core.metrics.durable_recovered_keyed_total.inc();
    match image.response {
        Some(response) => Recovered::Answered(with_id(&response, id)),
        None if alive => Recovered::Busy,
        None => {
            let mut body = Vec::with_capacity(192);
            crate::wire::push_outcome_unknown(&mut body, Some(id), image.node, None);
            Recovered::Unknown(body)
        }
    }
}

/// `response` (a JSON-RPC response) answering request `id` instead of the original's.
fn with_id(response: &[u8], id: &RawId) -> Vec<u8> {
    let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(response) else {
        return response.to_vec();
    };
    if let (Some(object), Ok(new_id)) = (value.as_object_mut(), serde_json::from_str(id.as_str())) {
        object.insert("id".into(), new_id);
    }
    serde_json::to_vec(&value).unwrap_or_else(|_| response.to_vec())
}

/// A keyed call's mirror: the record's store name and the core's tap.
pub(crate) struct KeyedMirror {
    tap: Rc<CoreTap>,
    name: String,
    fingerprint: u64,
    ttl_ms: u64,
}

impl KeyedMirror {
    /// The mirror of a keyed call on `core` (`None` without `--durable`).
    pub(crate) fn new(core: &Core, scoped_key: &str, fingerprint: u64) -> Option<KeyedMirror> {
        let tap = core.mirror.clone()?;
        let ttl = core.cfg.sessions.stream_retention + core.cfg.modern.keyed_call_max;
        Some(KeyedMirror {
            tap,
            name: store_name(scoped_key),
            fingerprint,
            ttl_ms: ttl.as_millis() as u64,
        })
    }

    fn push(&self, response: Option<Bytes>) -> Option<u64> {
        self.tap.observe(CoreChange::KeyRecorded {
            name: self.name.clone(),
            fingerprint: self.fingerprint,
            response,
            ttl_ms: self.ttl_ms,
        })
    }

    /// Before the tool runs: the store holds "running" (bounded wait; past it, counted).
    pub(crate) async fn running(&self) {
        let written = match (self.tap.is_up(), self.push(None)) {
            (true, Some(ticket)) => {
                monoio::time::timeout(self.tap.write_ahead, self.tap.written(ticket)).await.is_ok()
            }
            _ => false,
        };
        if !written {
            self.tap.metrics.durable_write_ahead_unprotected_total.inc();
        }
    }

    /// The call finished with `response`.
    pub(crate) fn done(&self, response: Bytes) {
        let _ = self.push(Some(response));
    }
}

/// With `--durable`: a `tasks/get` for a task this node does not hold (its node died; the
/// balancer sent the poll to a peer) answered from the store: its last mirrored state, or,
/// when it was still running on a node whose lease expired, the same task `failed` with
/// `-31006`. `None`: the store has no such task for this subject (the caller answers not found).
/// `misses` and `miss_keys` are `ModernCore`'s `task_misses` and `miss_keys` (taken apart so
/// this file depends on the shared `Core` only, not on `modern::core`: no import cycle).
pub(crate) async fn recover_task(
    core: &Core,
    (misses, miss_keys): (&RefCell<Misses<u64>>, &RandomState),
    subject: Option<&str>,
    task_id: &str,
) -> Option<Result<serde_json::Value, ()>> {
    let reader = core.reader.clone()?;
    // The store lacked this id a moment ago: not found, without asking again.
    let missed = std::hash::BuildHasher::hash_one(miss_keys, task_id);
    if misses.borrow_mut().holds(&missed, Instant::now()) {
        core.metrics.durable_task_cached_absent_total.inc();
        return None;
    }
    let Some(asked) = reader.ask(Query::Task { id: task_id.to_owned() }) else {
        return Some(Err(()));
    };
    let answer = monoio::time::timeout(Duration::from_millis(LOOKUP_WAIT_MS), asked).await.ok()?;
    if let Answer::Task(None) = answer {
        core.metrics.durable_task_absent_total.inc();
        misses.borrow_mut().insert(missed, Instant::now());
        return None;
    }
    let Answer::Task(Some((image, alive))) = answer else { return None };
    // Another subject's task is answered exactly as an unknown one (CONTRACT §8).
    if image.subject.as_deref() != subject {
        return None;
    }
    let mut detailed: serde_json::Value = serde_json::from_str(&image.detailed).ok()?;
    core.metrics.durable_recovered_tasks_total.inc();
    if image.running {
        if alive {
            return Some(Err(()));
        }
        let message = "outcome unknown: the node running this task stopped";
        let data = serde_json::json!({ "node": image.node });
        let error = crate::wire::error_object(
            crate::wire::Code::OutcomeUnknown.value(),
            message,
            Some(data),
        );
        if let Some(object) = detailed.as_object_mut() {
            object.insert("status".into(), "failed".into());
            object.insert("statusMessage".into(), message.into());
            object.remove("inputRequests");
            object.insert("error".into(), error);
        }
    }
    Some(Ok(detailed))
}
