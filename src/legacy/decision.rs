//! The migration decision loop of one request on a session (CONTRACT §4): what the request
//! is (`classify`: its tool, idempotency and fingerprint), the decision itself over the
//! session's O(1) facts (`facts`, `migration::decide`), holding a POST while the session owes
//! a stream (`decide`, bounded by `--max-held-per-session` and `--owed-wait-ms`), and the 409
//! answer with its `owedStreams` data and `Last-Event-ID` hint (`conflict`).
//! Called by `legacy` for each request of a session, single or batched. Never: runs a tool or
//! writes a stream; keeps no session borrow across an await.

use std::hash::Hasher;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use simd_json::prelude::*;

use super::core::LegacyCore;
use super::migration::{self, Decision, Facts, KeyMatch, MatchedBy};
use super::replay::StreamKey;
use super::session::{Session, SessionRc, StreamState, EVENT_ID_LEN_MAX};
use crate::config::MigrationPolicy;
use crate::core::{reply, Outcome};
use crate::dispatch::ToolRoute;
use crate::metrics::CoreMetrics;
use crate::wire::jsonrpc::{self, ParamsTop, RawId};
use crate::wire::{Answer, Code, OwedStream, WireValue};

/// What the decision and the answer need to know about a request, computed once.
pub(super) struct Classified<'v> {
    /// The tool a `tools/call` names (`None` for other methods).
    pub(super) tool: Option<ToolRoute>,
    pub(super) idempotent: bool,
    pub(super) fingerprint: u64,
    /// The params' members read after the decision (`arguments`, `_meta`), found by the
    /// fingerprint's pass.
    pub(super) top: ParamsTop<'v>,
}

/// How a request that may not run yet ends (CONTRACT §4 steps 1–4).
pub(super) enum Verdict {
    Run,
    /// 409 with its code and resume hint.
    Conflict(Refused),
    KeyReused,
    Deduplicated(StreamKey),
}

/// A 409 of the migration boundary (CONTRACT §4 steps 2–4).
pub(super) struct Refused {
    /// The stream whose hint the answer gives; `None`: every owed or replaying stream.
    pub(super) key: Option<StreamKey>,
    pub(super) code: Code,
    /// How step 2 matched the retry: `Some` exactly for -31001.
    pub(super) matched_by: Option<MatchedBy>,
}

impl Refused {
    /// A refusal that matched no retry (-31002, -31004).
    fn verdict(key: Option<StreamKey>, code: Code) -> Verdict {
        Verdict::Conflict(Refused { key, code, matched_by: None })
    }
}

/// The migration decision for one request, holding it while the session owes a stream (step
/// 4) up to `--owed-wait-ms`. Counts what it decides.
pub(super) async fn decide(
    core: &Rc<LegacyCore>,
    session: &SessionRc,
    id: &RawId,
    class: &Classified<'_>,
    idempotency_key: Option<&str>,
) -> Verdict {
    // Read at the first hold (where the wait starts: nothing is awaited before it), not per
    // request: most requests run at once, and a clock read is ~60 instructions (callgrind).
    let mut deadline: Option<Instant> = None;
    let mut held: Option<HeldSlot> = None;
    loop {
        let decision = {
            let s = session.borrow();
            let policy = core.cfg.sessions.migration_policy;
            migration::decide(facts(
                policy,
                &s,
                id,
                class.fingerprint,
                idempotency_key,
                class.idempotent,
            ))
        };
        match decision {
            Decision::Fresh => return Verdict::Run,
            Decision::Hold => {
                if held.is_none() {
                    // A held POST keeps its request (body and parse) in memory: at most
                    // `--max-held-per-session` wait at once, later ones learn to resume first.
                    let max = core.cfg.sessions.held_per_session_max;
                    let Some(slot) = HeldSlot::take(session, max, &core.metrics) else {
                        core.metrics.limit_held.inc();
                        let why = "held_limit (--max-held-per-session)";
                        log_decision(session, id, why, None, Some(Code::HeldTooLong));
                        return Refused::verdict(None, Code::HeldTooLong);
                    };
                    held = Some(slot);
                    core.metrics.posts_held_total.inc();
                    log_decision(session, id, "hold (the session owes a stream)", None, None);
                }
                let signal = session.borrow_mut().owed_signal();
                let now = Instant::now();
                let deadline = *deadline.get_or_insert(now + core.cfg.sessions.owed_wait);
                let timed_out = now >= deadline
                    || monoio::time::timeout(deadline - now, signal.notified()).await.is_err();
                if timed_out && session.borrow().owes() {
                    core.metrics.rejected_held_too_long.inc();
                    let why = "held_too_long (--owed-wait-ms)";
                    log_decision(session, id, why, None, Some(Code::HeldTooLong));
                    return Refused::verdict(None, Code::HeldTooLong);
                }
            }
            Decision::RetryOfOwed(key, matched_by) => {
                core.metrics.rejected_owed.inc();
                let why = match matched_by {
                    MatchedBy::Id => "retry_of_owed (matched by id)",
                    MatchedBy::Params => "retry_of_owed (matched by params)",
                };
                log_decision(session, id, why, Some(key), Some(Code::StreamOwed));
                let (key, code, matched_by) = (Some(key), Code::StreamOwed, Some(matched_by));
                return Verdict::Conflict(Refused { key, code, matched_by });
            }
            Decision::IdReused(key) => {
                core.metrics.rejected_id_reused.inc();
                log_decision(session, id, "id_reused", Some(key), Some(Code::RequestIdReused));
                return Refused::verdict(Some(key), Code::RequestIdReused);
            }
            Decision::KeyReused => {
                core.metrics.rejected_key_reused.inc();
                log_decision(session, id, "key_reused (other params)", None, None);
                return Verdict::KeyReused;
            }
            Decision::Deduplicated(key) => {
                core.metrics.dedup_hits_total.inc();
                log_decision(session, id, "deduplicated (Idempotency-Key)", Some(key), None);
                return Verdict::Deduplicated(key);
            }
        }
    }
}

/// A migration decision other than fresh, at info (rate-limited): the session, the request,
/// the stream it names and why. The client's request is the culprit: it retried, reused an
/// id or a key, or came while the session owed a stream.
fn log_decision(
    session: &SessionRc,
    id: &RawId,
    reason: &str,
    stream: Option<StreamKey>,
    code: Option<Code>,
) {
    // A 409 is answered at once: its line is written after the answer (issue 40 §5: the
    // write to stderr was ~30 µs of the round trip's p99). A held request waits anyway.
    let line = || {
        crate::logging::limited!(
            crate::logging::Kind::Migration,
            tracing::Level::INFO,
            session = %session.borrow().id.to_header(),
            core = session.borrow().id.core,
            node = session.borrow().id.node,
            request_id = crate::logging::clip(id.as_str()),
            stream = stream.map(|k| k.0),
            code = code.map(Code::value),
            status = code.map(|_| 409u16),
            reason,
            culprit = "peer",
            "migration decision"
        );
    };
    if code.is_some() {
        crate::logging::deferred(line);
    } else {
        line();
    }
}

/// One of a session's `--max-held-per-session` places for a POST held at the migration
/// boundary; given back when dropped (the request ran or was refused), and the wait counted
/// then (`tidemark_post_held_seconds`).
struct HeldSlot {
    session: SessionRc,
    since: Instant,
    metrics: Arc<CoreMetrics>,
}

impl HeldSlot {
    fn take(session: &SessionRc, max: usize, metrics: &Arc<CoreMetrics>) -> Option<HeldSlot> {
        let mut s = session.borrow_mut();
        if s.held_posts >= max {
            return None;
        }
        s.held_posts += 1;
        let (session, metrics) = (session.clone(), metrics.clone());
        Some(HeldSlot { session, since: Instant::now(), metrics })
    }
}

impl Drop for HeldSlot {
    fn drop(&mut self) {
        self.metrics.hist.post_held.observe_since(self.since);
        // Dropped when `decide` returns: no borrow of the session is live then.
        match self.session.try_borrow_mut() {
            Ok(mut s) => s.held_posts -= 1,
            Err(_) => debug_assert!(false, "invariant: no session borrow outlives decide"),
        }
    }
}

/// The tool, idempotency and fingerprint of a request; `Err` is the error answer of a
/// `tools/call` that names no tool we serve (given without a decision: nothing can run).
pub(super) async fn classify<'v>(
    core: &Rc<LegacyCore>,
    session: crate::provider::SessionRef,
    method: &str,
    params: &WireValue<'v>,
) -> Result<Classified<'v>, (Code, String)> {
    let (fingerprint, top) = fingerprint_and_top(method, params);
    if method != "tools/call" {
        let idempotent = migration::method_is_idempotent(method);
        return Ok(Classified { tool: None, idempotent, fingerprint, top });
    }
    let Some(name) = top.name.and_then(ValueIntoString::into_string) else {
        return Err((Code::InvalidParams, "tools/call needs a string name".to_owned()));
    };
    core.registry.refresh_if_stale(session).await;
    match core.registry.tool(session, name) {
        Some(route) => {
            let idempotent = route.safe_to_repeat;
            Ok(Classified { tool: Some(route), idempotent, fingerprint, top })
        }
        None => Err((Code::InvalidParams, format!("unknown tool: {name}"))),
    }
}

/// Hash of method + canonical params (key order and top-level `_meta` ignored): the stable
/// hash (`fasthash::StableHasher`) of the fingerprint encoding (`jsonrpc::hash_params`) of
/// `method` as a string and then of the params, fed to the hasher as it is made. Stored by the
/// durable mirror, so it must not change for the same params: a test pins a known answer.
pub fn fingerprint(method: &str, params: &WireValue<'_>) -> u64 {
    fingerprint_and_top(method, params).0
}

/// `fingerprint`, with the params' members its pass found (`jsonrpc::ParamsTop`).
fn fingerprint_and_top<'v>(method: &str, params: &WireValue<'v>) -> (u64, ParamsTop<'v>) {
    let mut h = crate::fasthash::StableHasher::default();
    jsonrpc::hash_str(method, &mut h);
    let top = jsonrpc::hash_params(*params, &mut h);
    (h.finish(), top)
}

/// Gathers the facts for the decision from the session's maps and counters (all O(1)). A
/// retry by params is looked up only where step 2 reads it (strict policy, no idempotency
/// key, an id the session has not seen): one probe fewer for the others, such as the
/// retry matched by id that a re-POST is.
pub fn facts(
    policy: MigrationPolicy,
    s: &Session,
    id: &RawId,
    fp: u64,
    key: Option<&str>,
    idempotent: bool,
) -> Facts {
    let key = match key.map(|k| s.by_idempotency_key(k)) {
        None => KeyMatch::None,
        Some(None) => KeyMatch::Unseen,
        Some(Some(st)) if st.fingerprint == fp => KeyMatch::SameRequest(st.key),
        Some(Some(_)) => KeyMatch::OtherRequest,
    };
    let strict = policy == MigrationPolicy::Strict;
    let by_id = s.by_request_id(id);
    let retry_by_params = if strict && key == KeyMatch::None && by_id.is_none() {
        s.by_fingerprint(fp)
            .filter(|st| st.is_owed() || (st.is_parked() && !st.is_settled()))
            .map(|st| st.key)
    } else {
        None
    };
    Facts {
        strict,
        key,
        retry_by_id: by_id.filter(|st| !st.is_settled()).map(|st| st.key),
        retry_by_params,
        reused_id_of: by_id.filter(|st| st.is_settled()).map(|st| st.key),
        idempotent,
        session_owes: s.owes(),
    }
}

/// The streams a conflict lists in its `owedStreams`: the refusal's stream alone (for a -31001
/// the matched one, so `owedStreams[0].requestId` names it), or every owed or replaying
/// stream.
fn listed<'s>(s: &'s Session, refused: &Refused) -> impl Iterator<Item = &'s StreamState> {
    let named = refused.key.and_then(|k| s.stream(k));
    let owed =
        refused.key.is_none().then(|| s.streams().filter(|st| st.is_owed() || st.is_replaying()));
    named.into_iter().chain(owed.into_iter().flatten())
}

/// Hands each listed stream (`listed`) of a conflict to `emit`, its event ids on this stack.
pub(super) fn owed_streams(s: &Session, refused: &Refused, emit: &mut dyn FnMut(OwedStream<'_>)) {
    let mut ids = [[0; EVENT_ID_LEN_MAX]; 3];
    for st in listed(s, refused) {
        let [last, first, written] = &mut ids;
        let last_len = s.event_id_into(last, st.key, st.resume_hint());
        let first_len = s.event_id_into(first, st.key, st.first);
        let seq = st.written().max(st.first);
        let written_len = s.event_id_into(written, st.key, seq);
        emit(OwedStream {
            request_id: st.request_id.as_ref(),
            last_event_id: &last[..last_len],
            first_event_id: &first[..first_len],
            last_written_event_id: &written[..written_len],
            in_flight: st.is_running(),
        });
    }
}

/// 409 with the resume hint (CONTRACT §4 steps 2–4): `data` its `owedStreams`, `matchedBy`
/// when the retry matched (-31001); `Last-Event-ID` where the first listed stream resumes.
/// Written straight into `out`.
pub(super) fn conflict<J>(
    session: &SessionRc,
    refused: &Refused,
    id: &RawId,
    out: &mut Vec<u8>,
    keep_alive: bool,
) -> Outcome<J> {
    let s = session.borrow();
    let mut hint = [0; EVENT_ID_LEN_MAX];
    let hint_len = listed(&s, refused)
        .next()
        .map_or(0, |st| s.event_id_into(&mut hint, st.key, st.resume_hint()));
    let body_at = out.len();
    let matched_by = refused.matched_by.map(MatchedBy::as_str);
    crate::wire::push_conflict(out, id, refused.code, matched_by, |emit| {
        owed_streams(&s, refused, emit)
    });
    let hint = (hint_len > 0).then_some(&hint[..hint_len]);
    reply(out, Answer::Conflict { body_at, hint }, keep_alive)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: a fingerprint is a fixed number for given params (the durable mirror stores it,
    /// and a retry answered by another build compares it), whatever the key order and a
    /// top-level `_meta`. Method: the answer computed by a separate implementation of the
    /// documented functions (`fasthash::StableHasher` over `jsonrpc::hash_params`' words for
    /// `tools/call` and `{"arguments":{"text":"hi"},"name":"echo"}`).
    #[test]
    fn a_fingerprint_is_a_known_number() {
        let mut body =
            br#"{"name":"echo","_meta":{"progressToken":7},"arguments":{"text":"hi"}}"#.to_vec();
        let tape = simd_json::to_tape(&mut body).expect("json");
        assert_eq!(fingerprint("tools/call", &tape.as_value()), 0xdca1_8d75_ae8b_ffc0);
    }
}
