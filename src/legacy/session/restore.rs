//! A session rebuilt from the durable mirror's image of it (`restore`): adoption's way back
//! from the store's records to a live `Session` (`legacy::adopt`). Its counterpart, the whole
//! image a session makes of itself, is `Session::image`.
//!
//! Never: serves a gap: an image whose events are not contiguous is refused
//! (`RestoreError::Gap`), and the adopter answers as for an unknown session.

use crate::durable::keys::StreamRecord;
use crate::durable::{SessionImage, SessionMirror};
use crate::legacy::replay::{EventSeq, StreamKey};

use super::{Run, Session, SessionId, StreamKind};

/// Why a session image could not be rebuilt (the adopter then answers as for an unknown
/// session, never with a gap).
#[derive(Debug, thiserror::Error)]
pub(crate) enum RestoreError {
    /// The image's events are not contiguous, or start past what its streams need.
    #[error("the stored events of session {0} have a gap at {1}")]
    Gap(String, u64),
    /// The image names a protocol revision this build does not serve.
    #[error("the stored session {0} has revision {1:?}")]
    Revision(String, String),
}

/// Rebuilds an adopted session from its image: the ring at the same sequence numbers, each
/// stream as it was mirrored; a stream whose call was still running when its node died ends
/// with `-31006` (outcome unknown), which is mirrored like any final. `dead` is the node that
/// ran it. The session is not durable until its first image is queued
/// (`Session::mirror_catch_up`).
pub(crate) fn restore(
    id: SessionId,
    image: &SessionImage,
    dead: u8,
    cfg: &crate::config::Config,
    mirror: SessionMirror,
) -> Result<Session, RestoreError> {
    let sid = image.sid.to_string();
    let version = super::LEGACY_VERSIONS
        .iter()
        .copied()
        .find(|v| *v == image.version)
        .ok_or_else(|| RestoreError::Revision(sid.clone(), image.version.clone()))?;
    let mut s = Session::new(id, image.tag, version, cfg);
    s.set_opener(image.subject.as_deref().map(Box::from), None);
    s.log_level = crate::provider::LogLevel::parse(&image.log).unwrap_or(s.log_level);
    // The store may hold a few entries more than the ring did (it trims in steps,
    // `durable::store::TRIM_SLACK_ENTRIES`): they are appended like the rest and the ring
    // evicts them as it did on the dead node, keeping every stream's counts exact.
    let start = image.events.first().map_or(image.next_seq, |e| e.seq).max(1);
    s.ring.resume_at(EventSeq(start));
    for (key, record) in &image.streams {
        insert_stream(&mut s, StreamKey(*key), record);
    }
    replay_events(&mut s, image).map_err(|seq| RestoreError::Gap(sid, seq))?;
    // Events the ring no longer holds: what each stream lost before the image.
    let oldest = s.ring.oldest().unwrap_or(s.ring.next_seq());
    for st in s.streams.values_mut() {
        if st.first < oldest {
            st.evicted_through = EventSeq(oldest.0 - 1);
        }
    }
    // The dead node may have issued ids past what the store held (the mirror is
    // asynchronous): this node's events take a tag of their own, so none of its ids is one the
    // dead node gave another event (`Session::retag`), the `-31006` finals below included.
    s.set_earlier_tags(&image.earlier_tags);
    s.retag(fresh_tag(image));
    for (key, record) in &image.streams {
        settle_stream(&mut s, StreamKey(*key), record, dead);
    }
    s.mirror = Some(Box::new(mirror));
    Ok(s)
}

/// A random event-id tag that none of the session's ids had before (its tag, the earlier
/// ones); without randomness, one derived from them, still distinct.
fn fresh_tag(image: &SessionImage) -> u32 {
    let taken = |t: u32| t == image.tag || image.earlier_tags.iter().any(|&(_, e)| e == t);
    let mut b = [0u8; 4];
    let mut candidate = match getrandom::fill(&mut b) {
        Ok(()) => u32::from_le_bytes(b),
        Err(_) => image.tag.rotate_left(16) ^ 0x5bd1_e995,
    };
    while taken(candidate) {
        candidate = candidate.wrapping_add(1);
    }
    candidate
}

/// Adds stream `key` as its `record` names it, running and detached.
fn insert_stream(s: &mut Session, key: StreamKey, record: &StreamRecord) {
    let kind =
        if record.kind == "standalone" { StreamKind::Standalone } else { StreamKind::Request };
    let request_id = record.rid.as_ref().map(|rid| crate::wire::jsonrpc::RawId::new(rid.as_str()));
    let idempotency_key = record.key.as_deref().map(Box::from);
    let fingerprint = record.fp;
    let progress_token = None;
    let opening = super::Opening { kind, request_id, fingerprint, idempotency_key, progress_token };
    s.insert_stream(key, opening, EventSeq(record.first), super::Writer::Detached);
    // Counted at once (a running, detached stream is owed): a later stream's end during the
    // replay below checks the session's counts across every stream.
    s.refresh(key);
    s.next_stream = s.next_stream.max(key.0.wrapping_add(1)).max(1);
}

/// Appends the image's events to the ring at their sequence numbers, ending each stream's run
/// at the final event its record names; `Err` with the first event that leaves a gap.
fn replay_events(s: &mut Session, image: &SessionImage) -> Result<(), u64> {
    for event in &image.events {
        if s.ring.next_seq().0 != event.seq {
            return Err(event.seq);
        }
        let key = StreamKey(event.stream);
        let before_final = s.streams.get(&key).map_or(EventSeq(0), |st| st.produced);
        let _ = s.append_to_ring(key, &event.data);
        let is_final =
            image.streams.iter().any(|(k, r)| *k == event.stream && r.final_seq == Some(event.seq));
        if is_final {
            s.end_run(key, Run::Finished { final_seq: EventSeq(event.seq), before_final });
        }
    }
    Ok(())
}

/// Ends what the replay left running as the record says: finished with a final the ring
/// evicted, or cut off by the dead node's end (`-31006`); marks settled streams delivered.
fn settle_stream(s: &mut Session, key: StreamKey, record: &StreamRecord, dead: u8) {
    let running =
        s.streams.get(&key).is_some_and(|st| st.kind == StreamKind::Request && st.is_running());
    if let (true, Some(final_seq)) = (running, record.final_seq) {
        // Finished, its final event already evicted from the ring.
        let before_final = EventSeq(final_seq.saturating_sub(1));
        s.end_run(key, Run::Finished { final_seq: EventSeq(final_seq), before_final });
        if record.settled {
            s.mark_all_delivered(key);
        }
    } else if running {
        let last = s.streams.get(&key).map(|st| st.produced).filter(|seq| seq.0 > record.first);
        let mut last_event = Vec::new();
        if let Some(seq) = last {
            s.push_event_id(&mut last_event, key, seq);
        }
        let last_event = std::str::from_utf8(&last_event).ok().filter(|t| !t.is_empty());
        let mut payload = Vec::with_capacity(192);
        let rid = s.streams.get(&key).and_then(|st| st.request_id.clone());
        crate::wire::push_outcome_unknown(&mut payload, rid.as_ref(), dead, last_event);
        let held = s.streams.get(&key).map_or(EventSeq(0), |st| st.produced);
        s.finish(key, bytes::Bytes::from(payload));
        s.rare_mut().cut_off.push((key, held));
    } else if record.settled {
        s.mark_all_delivered(key);
    }
}
