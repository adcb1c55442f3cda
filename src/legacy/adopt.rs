//! The legacy era's side of the durable mirror (`--durable`, CONTRACT §10): a new session's
//! mirror, the sessions the mirror thread lost, the write-ahead wait of a non-idempotent call,
//! and adoption: a request naming a session this core does not hold (its node died, the
//! balancer sent it to a backup) asks the store, which hands the session over only once its
//! owner's lease has expired and to one node; the session is rebuilt at its sequence numbers
//! and served as if it had always lived here.
//!
//! Never: waits on the store on a worker (the reader thread asks; a request waits at most
//! `ADOPTION_WAIT_MS` and is answered 503 + `Retry-After` past it), or serves a session whose
//! mirror had a gap.

use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::core::LegacyCore;
use super::session::restore::restore;
use super::session::{SessionId, SessionRc};
use crate::core::Request;
use crate::durable::SessionMirror;
use crate::durable::{Answer, Claim, Query};
use crate::provider::{Notifier, SessionStart};
use crate::wire::{Answer as WireAnswer, Refusal};

/// How long a request waits for the store to hand over a session before it is answered 503 +
/// `Retry-After` (the client retries; the adoption goes on).
pub(crate) const ADOPTION_WAIT_MS: u64 = 2_000;

/// Gives a new session its mirror and queues its first image.
pub(crate) fn mirror_new_session(
    core: &LegacyCore,
    session: &SessionRc,
    client: &crate::provider::Value,
) {
    let Some(tap) = core.mirror.clone() else { return };
    let mut s = session.borrow_mut();
    let name: Arc<str> = Arc::from(s.id.to_header());
    let client: Arc<str> = Arc::from(serde_json::to_string(client).unwrap_or_else(|_| "{}".into()));
    s.mirror = Some(Box::new(SessionMirror::new(tap, name, client)));
    s.mirror_catch_up();
}

/// The mirror thread could not write these sessions whole: they stop being durable until the
/// reaper rewrites them (`Session::mirror_catch_up`).
pub(crate) fn mirror_lost(core: &LegacyCore, lost: Vec<Arc<str>>) {
    for name in lost {
        let Some(id) = SessionId::parse(name.as_bytes()) else { continue };
        let found = core.sessions.borrow().get(&id);
        if let Some(session) = found {
            session.borrow_mut().mirror_lost();
        }
    }
}

/// Before a non-idempotent call of a durable session starts: waits (at most
/// `--durable-write-ahead-ms`) until the store holds the call's stream record, so a peer that
/// adopts the session after this node dies knows the call ran and never runs it again. Past
/// the wait the call starts anyway; the session stops being durable and the call is counted.
pub(crate) async fn write_ahead(core: &LegacyCore, session: &SessionRc) {
    let Some(tap) = core.mirror.clone() else { return };
    let ticket = session.borrow().mirror.as_deref().and_then(SessionMirror::ticket);
    let Some(ticket) = ticket else {
        if session.borrow().mirror.is_some() {
            tap.metrics.durable_write_ahead_unprotected_total.inc();
        }
        return;
    };
    let acked = monoio::time::timeout(tap.write_ahead, tap.written(ticket)).await.is_ok();
    let mut s = session.borrow_mut();
    if !acked {
        if let Some(name) = s.mirror.as_ref().map(|m| m.name.clone()) {
            tap.broke(name);
        }
        s.mirror_lost();
    }
    if !s.is_durable() {
        tap.metrics.durable_write_ahead_unprotected_total.inc();
    }
}

/// With `--durable`: a request naming a session this core does not hold asks the store first,
/// unless the store said it lacks that id within `durable::MISS_TTL` (`store_misses`, counted
/// as `outcome="cached_absent"`).
/// `Ok` when the request goes on (the session is here now, or the store does not have it: the
/// lookup then answers 404 as before); `Err` when it was answered here (503 + `Retry-After`:
/// the store is down or busy, or the owner is alive).
pub(crate) async fn adopt_if_absent(
    core: &Rc<LegacyCore>,
    req: &Request<'_>,
    out: &mut Vec<u8>,
) -> Result<(), bool> {
    let keep_alive = req.head.keep_alive;
    let Some(reader) = core.reader.clone() else { return Ok(()) };
    let Some(id) = req.header(&req.head.session_id).and_then(SessionId::parse) else {
        return Ok(());
    };
    if core.sessions.borrow().get(&id).is_some() {
        return Ok(());
    }
    // The store lacked it a moment ago: the lookup's 404, without asking again.
    if core.store_misses.borrow_mut().holds(&id, Instant::now()) {
        core.metrics.durable_adopt_cached_absent_total.inc();
        return Ok(());
    }
    // One adoption per session: a second request waits for the first one's.
    let waiting =
        core.adopting.borrow().iter().find(|(s, _)| *s == id).map(|(_, signal)| signal.clone());
    if let Some(signal) = waiting {
        let _ =
            monoio::time::timeout(Duration::from_millis(ADOPTION_WAIT_MS), signal.notified()).await;
        return Ok(());
    }
    let signal = Rc::new(crate::signal::Signal::default());
    core.adopting.borrow_mut().push((id, signal.clone()));
    let began = Instant::now();
    let outcome = claim(core, &reader, id, req).await;
    core.adopting.borrow_mut().retain(|(s, _)| *s != id);
    signal.notify_all();
    match outcome {
        Adopted::Here => {
            core.metrics.durable_adopted_total.inc();
            core.metrics.hist.adoption.observe_since(began);
            Ok(())
        }
        Adopted::Unknown => Ok(()),
        Adopted::Busy => {
            WireAnswer::Refused { refusal: Refusal::Unavailable, id: None }.render(out, keep_alive);
            Err(keep_alive)
        }
    }
}

enum Adopted {
    Here,
    Unknown,
    Busy,
}

async fn claim(
    core: &Rc<LegacyCore>,
    reader: &crate::durable::Reader,
    id: SessionId,
    req: &Request<'_>,
) -> Adopted {
    let m = &core.metrics;
    let Some(asked) = reader.ask(Query::Claim { sid: id.to_header() }) else {
        m.durable_adopt_failed_total.inc();
        return Adopted::Busy;
    };
    let Ok(answer) = monoio::time::timeout(Duration::from_millis(ADOPTION_WAIT_MS), asked).await
    else {
        m.durable_adopt_failed_total.inc();
        return Adopted::Busy;
    };
    let image = match answer {
        Answer::Claim(Claim::Won(image)) => image,
        Answer::Claim(Claim::Absent) => {
            m.durable_adopt_absent_total.inc();
            core.store_misses.borrow_mut().insert(id, Instant::now());
            return Adopted::Unknown;
        }
        Answer::Claim(Claim::NotDurable) => {
            m.durable_adopt_not_durable_total.inc();
            return Adopted::Unknown;
        }
        Answer::Claim(Claim::Taken(_)) => {
            m.durable_adopt_taken_total.inc();
            return Adopted::Unknown;
        }
        Answer::Claim(Claim::OwnerAlive(_)) => {
            m.durable_adopt_owner_alive_total.inc();
            return Adopted::Busy;
        }
        Answer::Failed(why) => {
            tracing::debug!(session = %id.to_header(), error = %why, "durable store not asked");
            m.durable_adopt_failed_total.inc();
            return Adopted::Busy;
        }
        Answer::Keyed(_) | Answer::Task(_) => {
            m.durable_adopt_failed_total.inc();
            return Adopted::Busy;
        }
    };
    let Some(tap) = core.mirror.clone() else { return Adopted::Unknown };
    if core.sessions.borrow().is_full() {
        m.limit_sessions.inc();
        return Adopted::Busy;
    }
    let client: crate::provider::Value =
        serde_json::from_str(&image.client).unwrap_or(crate::provider::Value::Null);
    let params = Arc::from(image.client.as_str());
    let mirror = SessionMirror::new(tap, image.sid.clone(), params);
    let mut session = match restore(id, &image, image.owner, &core.cfg, mirror) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(session = %id.to_header(), error = %e, "stored session not adopted");
            m.durable_adopt_not_durable_total.inc();
            return Adopted::Unknown;
        }
    };
    let subject = session.subject().map(Box::from);
    session.set_opener(subject, req.caller());
    session.count_bytes_in(core.tally.clone());
    let reference = session.reference();
    let version = session.version();
    let caller = session.caller().cloned();
    let session = core.sessions.borrow_mut().insert(session);
    let notifier = Notifier::new(Rc::new(super::context::SessionNotifier::new(
        &session,
        core.cfg.sessions.list_changed_min,
    )));
    let start = SessionStart {
        session: reference,
        protocol_version: version,
        client_params: client,
        notifier,
        caller,
    };
    // A bridged session's upstream child died with its node: a new one starts now.
    if let Err(e) = core.registry.open_session(&start).await {
        tracing::warn!(session = %id.to_header(), error = %e, "adopted session's providers did not open");
        core.sessions.borrow_mut().remove(&id);
        m.durable_adopt_failed_total.inc();
        return Adopted::Busy;
    }
    core.metrics.sessions_created_total.inc();
    core.metrics.sessions_active.inc();
    session.borrow_mut().mirror_catch_up();
    tracing::info!(session = %id.to_header(), from_node = id.node, "session adopted from the durable store");
    Adopted::Here
}
