//! A session's part of the durable mirror (`--durable`, CONTRACT §10): the `Session` methods every transition calls to queue what changed, the
//! whole image a rewrite or an adopter's first write sends, and the marks of a session that
//! stopped being durable.
//!
//! Never: waits (a full queue makes the session not durable at once), or queues anything of a
//! session that is not durable, so the store only ever holds a gap-free prefix of it.

use std::sync::Arc;

use crate::durable::keys::StreamRecord;
use crate::durable::{
    EventImage, HeldEvent, PackedRun, Record, SessionImage, SessionMirror, RUN_BYTES_MAX,
    RUN_EVENTS_MAX,
};
use crate::legacy::replay::{EventSeq, StreamKey};

use super::{Run, Session, StreamKind, StreamState};

fn stream_record(s: &StreamState) -> StreamRecord {
    StreamRecord {
        kind: std::borrow::Cow::Borrowed(match s.kind {
            StreamKind::Request => "post",
            StreamKind::Standalone => "standalone",
        }),
        rid: s.request_id.as_ref().map(|id| id.0.clone()),
        fp: s.fingerprint,
        key: s.idempotency_key.as_deref().map(str::to_owned),
        first: s.first.0,
        final_seq: s.final_seq().map(|seq| seq.0),
        settled: s.is_settled(),
    }
}

impl Session {
    /// Whether the store holds this session whole right now (a peer could adopt it).
    pub(crate) fn is_durable(&self) -> bool {
        self.mirror.as_ref().is_some_and(SessionMirror::is_durable)
    }

    /// The ticket of the last record queued while the session is durable (`None` otherwise).
    pub(crate) fn mirror_ticket(&self) -> Option<u64> {
        self.mirror.as_ref().filter(|m| m.is_durable() && m.last_ticket != 0).map(|m| m.last_ticket)
    }

    /// Queues `record` for a durable session (after the events it gathered: they came first);
    /// a full queue makes it not durable. The ticket.
    pub(crate) fn mirror_push(&mut self, make: impl FnOnce(&Arc<str>) -> Record) -> Option<u64> {
        self.mirror_flush_pending();
        self.mirror_push_now(make)
    }

    /// Queues what the session gathered or set aside and no record took (a run of events, a
    /// stream's removal), in the order it happened.
    fn mirror_flush_pending(&mut self) {
        self.mirror_flush_run();
        if let Some(key) = self.mirror.as_mut().and_then(|m| m.gone.take()) {
            self.mirror_push_now(|sid| Record::StreamGone { sid: sid.clone(), key });
        }
    }

    /// Stream `key` left the session: its record goes from the store, along with the next
    /// record when an event is held for one (`open_stream` evicting for room).
    pub(super) fn mirror_stream_gone(&mut self, key: StreamKey) {
        if let Some(mirror) = self.mirror.as_mut().filter(|m| m.hold_event && m.gone.is_none()) {
            mirror.gone = Some(key.0);
            return;
        }
        self.mirror_push(|sid| Record::StreamGone { sid: sid.clone(), key: key.0 });
    }

    fn mirror_push_now(&mut self, make: impl FnOnce(&Arc<str>) -> Record) -> Option<u64> {
        let mirror = self.mirror.as_mut().filter(|m| m.is_durable())?;
        let record = make(&mirror.name);
        if !mirror.deferring {
            return self.mirror_push_queued(record);
        }
        let record = join_deferred(&mut mirror.deferred, record)?;
        // Not one to defer or join: the deferred record goes first, then this one.
        if let Some(earlier) = mirror.deferred.take() {
            self.mirror_push_queued(earlier);
        }
        self.mirror_push_queued(record)
    }

    /// Queues `record` of a durable session (`mirror_push_now` after any deferral).
    fn mirror_push_queued(&mut self, record: Record) -> Option<u64> {
        let mirror = self.mirror.as_mut().filter(|m| m.is_durable())?;
        match mirror.tap.push(record) {
            Ok(ticket) => {
                mirror.last_ticket = ticket;
                Some(ticket)
            }
            Err(_) => {
                let name = mirror.name.clone();
                mirror.tap.broke(name);
                self.mirror_lost();
                None
            }
        }
    }

    /// The mirror lost some of this session (or its queue was full): not durable until the
    /// core rewrites it whole.
    pub(crate) fn mirror_lost(&mut self) {
        let Some(mirror) = self.mirror.as_mut() else { return };
        // Whatever it gathered or holds is in the ring, so in the image that will replace it.
        mirror.run = None;
        mirror.held = None;
        mirror.gone = None;
        mirror.deferred = None;
        if mirror.epoch != 0 {
            mirror.epoch = 0;
            mirror.tap.metrics.durable_sessions_marked_not_durable_total.inc();
            crate::logging::limited!(
                crate::logging::Kind::Loss,
                tracing::Level::WARN,
                session = %self.id.to_header(),
                core = self.id.core,
                node = self.id.node,
                culprit = "us",
                reason = "durable store slow or down, or the core's mirror queue full",
                "session not durable until it is rewritten to the store"
            );
        }
    }

    pub(super) fn mirror_stream(&mut self, key: StreamKey) {
        // Without `--durable` every stream change calls this: no record is built for nothing.
        if self.mirror.is_none() {
            return;
        }
        let Some(record) = self.streams.get(&key).map(stream_record) else { return };
        let held = self.mirror.as_mut().and_then(|m| m.held.take());
        match held {
            // The event this change follows on the same stream: one record for both.
            Some(HeldEvent { event, at, first_kept }) if event.stream == key.0 => {
                let gone = self.mirror.as_mut().and_then(|m| m.gone.take());
                self.mirror_push(|sid| Record::Event {
                    sid: sid.clone(),
                    primed: false,
                    event,
                    at,
                    first_kept,
                    then: Some(Box::new(record)),
                    gone,
                });
            }
            held => {
                if let Some(held) = held {
                    self.mirror_push_event(held);
                }
                self.mirror_push(|sid| Record::Stream {
                    sid: sid.clone(),
                    key: key.0,
                    record: Box::new(record),
                });
            }
        }
    }

    /// From now until `mirror_undefer`, the session's next event record (a stream's opening)
    /// waits for the next one of the same stream (its final event) to join it: a quick call
    /// (`legacy::request`: open, first poll, nothing awaited between) costs the mirror one record
    /// for both. Never across a wait: the caller ends it before it awaits anything.
    pub(crate) fn mirror_defer(&mut self) {
        if let Some(mirror) = self.mirror.as_mut() {
            mirror.deferring = true;
        }
    }

    /// Ends `mirror_defer`: the deferred record, joined or not, is queued now.
    pub(crate) fn mirror_undefer(&mut self) {
        let Some(mirror) = self.mirror.as_mut() else { return };
        mirror.deferring = false;
        if let Some(record) = mirror.deferred.take() {
            self.mirror_push_queued(record);
        }
    }

    /// From now until `mirror_release`, the next ring event waits for the stream record that
    /// follows it (`open_stream`, `finish`: an event and its stream's change in one record).
    pub(super) fn mirror_hold(&mut self) {
        if let Some(mirror) = self.mirror.as_mut() {
            mirror.hold_event = true;
        }
    }

    /// Ends `mirror_hold`: a removal or an event no stream record took is queued alone now, in
    /// that order, before anything else of the session.
    pub(super) fn mirror_release(&mut self) {
        let Some(mirror) = self.mirror.as_mut() else { return };
        mirror.hold_event = false;
        match mirror.held.take() {
            // `mirror_push` queues the pending removal first.
            Some(held) => self.mirror_push_event(held),
            None => self.mirror_flush_pending(),
        }
    }

    /// While a tool's future is polled (`legacy::stream`), the events it appends gather into
    /// one record (`Record::Run`) instead of one each; `mirror_gathered` ends it.
    pub(crate) fn mirror_gather(&mut self) {
        if let Some(mirror) = self.mirror.as_mut() {
            mirror.gathering = true;
        }
    }

    /// Ends `mirror_gather`: the gathered events are queued now.
    pub(crate) fn mirror_gathered(&mut self) {
        if let Some(mirror) = self.mirror.as_mut() {
            mirror.gathering = false;
        }
        self.mirror_flush_run();
    }

    /// Whether the next ring event gathers into a run (a tool's poll, no event held).
    pub(super) fn mirror_gathers(&self) -> bool {
        self.mirror.as_ref().is_some_and(|m| m.gathering && !m.hold_event)
    }

    /// Packs ring event `seq` (just appended on `key`) into the session's gathered run, which
    /// is queued first when it does not end right before `seq` or is full.
    pub(super) fn mirror_gather_event(&mut self, key: StreamKey, seq: EventSeq, evicted: bool) {
        let first_kept = self.first_kept(seq, evicted);
        let full = self.mirror.as_ref().and_then(|m| m.run.as_ref()).is_some_and(|run| {
            run.first_seq + u64::from(run.count) != seq.0
                || run.count >= RUN_EVENTS_MAX
                || run.packed.len() >= RUN_BYTES_MAX
        });
        if full {
            self.mirror_flush_run();
        }
        let (Some(mirror), Some(event)) = (self.mirror.as_mut(), self.ring.get(seq)) else {
            return;
        };
        let tap = &mirror.tap;
        let run = mirror.run.get_or_insert_with(|| PackedRun {
            first_seq: seq.0,
            count: 0,
            packed: tap.run_buffer(RUN_BUFFER_BYTES),
            payload_bytes: 0,
            at: std::time::Instant::now(),
            first_kept: None,
        });
        crate::durable::keys::pack_event(&mut run.packed, key.0, event.payload);
        run.count += 1;
        run.payload_bytes += event.payload.len();
        run.first_kept = run.first_kept.max(first_kept);
    }

    /// Queues the gathered run, if any.
    fn mirror_flush_run(&mut self) {
        let Some(run) = self.mirror.as_mut().and_then(|m| m.run.take()) else { return };
        self.mirror_push_now(|sid| Record::Run { sid: sid.clone(), run });
    }

    /// The ring's first kept event when appending `seq` evicted older ones (`Record::Event`).
    fn first_kept(&self, seq: EventSeq, evicted: bool) -> Option<u64> {
        evicted.then(|| self.ring.oldest().map_or(seq.0, |s| s.0))
    }

    fn mirror_push_event(&mut self, held: HeldEvent) {
        let HeldEvent { event, at, first_kept } = held;
        self.mirror_push(|sid| Record::Event {
            sid: sid.clone(),
            primed: false,
            event,
            at,
            first_kept,
            then: None,
            gone: None,
        });
    }

    /// The whole session as the store should hold it, owned by `owner`.
    pub(crate) fn image(&self, owner: u8) -> Option<SessionImage> {
        let mirror = self.mirror.as_ref()?;
        let mut streams: Vec<(u32, StreamRecord)> =
            self.streams.values().map(|s| (s.key.0, stream_record(s))).collect();
        streams.sort_by_key(|(key, _)| *key);
        let events = match self.ring.oldest() {
            Some(first) => self
                .ring
                .iter_from(first)
                .map(|e| EventImage { seq: e.seq.0, stream: e.stream.0, data: e.payload.clone() })
                .collect(),
            None => Vec::new(),
        };
        Some(SessionImage {
            sid: mirror.name.clone(),
            owner,
            tag: self.tag,
            version: self.version.to_owned(),
            subject: self.subject.as_deref().map(str::to_owned),
            client: mirror.client.to_string(),
            log: self.log_level.as_str().to_owned(),
            streams,
            events,
            next_seq: self.ring.next_seq().0,
        })
    }

    /// Queues the whole session when it is not durable and the store is up and has room: the
    /// reaper's tick, and a new or adopted session's first write. Whether it is durable now.
    pub(crate) fn mirror_catch_up(&mut self) -> bool {
        let Some(mirror) = self.mirror.as_ref() else { return false };
        if mirror.is_durable() {
            return true;
        }
        let tap = mirror.tap.clone();
        if !tap.is_up() {
            return false;
        }
        let epoch = tap.epoch();
        let Some(image) = self.image(tap.node) else { return false };
        let record = Record::Session(Box::new(image));
        if !tap.has_room(record.charged_bytes()) {
            return false;
        }
        let Ok(ticket) = tap.push(record) else { return false };
        if let Some(mirror) = self.mirror.as_mut() {
            mirror.epoch = epoch;
            mirror.last_ticket = ticket;
            // The image holds whatever a deferred record would have written.
            mirror.deferred = None;
        }
        true
    }

    /// Ends the session's mirror (DELETE or expiry): its keys go from the store.
    pub(crate) fn mirror_end(&mut self) {
        if let Some(mirror) = self.mirror.take() {
            // Even a session that is not durable has its keys removed (they may hold a prefix).
            let _ = mirror.tap.push(Record::End { sid: mirror.name.clone() });
        }
    }

    /// The ring appended `seq` on `key` with `payload`.
    pub(super) fn mirror_event(
        &mut self,
        key: StreamKey,
        seq: EventSeq,
        payload: bytes::Bytes,
        evicted: bool,
    ) {
        let first_kept = self.first_kept(seq, evicted);
        let at = std::time::Instant::now();
        let held = HeldEvent {
            event: EventImage { seq: seq.0, stream: key.0, data: payload },
            at,
            first_kept,
        };
        match self.mirror.as_mut() {
            Some(mirror) if mirror.hold_event && mirror.held.is_none() => mirror.held = Some(held),
            _ => self.mirror_push_event(held),
        }
    }

    /// Whether the stream's end is to be mirrored (a finished run).
    pub(super) fn mirror_run_ended(&mut self, key: StreamKey, run: Run) {
        if matches!(run, Run::Finished { .. }) {
            self.mirror_stream(key);
        }
    }
}

/// Defers `record` into an empty `slot` when it opens a stream (its empty priming event with
/// the stream's record), or joins it to the deferred one when it is that stream's next event
/// with its record (the final: `Record::Event::primed`). What it gives back is to be queued now.
fn join_deferred(slot: &mut Option<Record>, record: Record) -> Option<Record> {
    let Some(deferred) = slot.take() else {
        if opens_a_stream(&record) {
            *slot = Some(record);
            return None;
        }
        return Some(record);
    };
    // Only an opening is ever deferred (`opens_a_stream`), and a joined record (`primed`)
    // takes nothing more.
    match (deferred, record) {
        (
            Record::Event { sid, primed: false, event: priming, at, first_kept, gone, .. },
            Record::Event {
                primed: false,
                event,
                first_kept: kept,
                then: then @ Some(_),
                gone: None,
                ..
            },
        ) if priming.stream == event.stream && priming.seq + 1 == event.seq => {
            *slot = Some(Record::Event {
                sid,
                primed: true,
                event,
                at,
                first_kept: first_kept.max(kept),
                then,
                gone,
            });
            None
        }
        (deferred, record) => {
            *slot = Some(deferred);
            Some(record)
        }
    }
}

/// An event record that opens a stream: its empty priming event with the stream's record.
fn opens_a_stream(record: &Record) -> bool {
    matches!(record, Record::Event { primed: false, event, then: Some(_), .. } if event.data.is_empty())
}

/// A new run buffer's first size (one that came back from the mirror thread keeps its own).
const RUN_BUFFER_BYTES: usize = 4096;

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

impl Session {
    /// Rebuilds an adopted session from its image: the ring at the same sequence numbers, each
    /// stream as it was mirrored; a stream whose call was still running when its node died
    /// ends with `-31006` (outcome unknown), which is mirrored like any final. `dead` is the
    /// node that ran it. The session is not durable until its first image is queued
    /// (`mirror_catch_up`).
    pub(crate) fn restore(
        id: super::SessionId,
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
        s.subject = image.subject.as_deref().map(Box::from);
        s.log_level = crate::provider::LogLevel::parse(&image.log).unwrap_or(s.log_level);
        // The store may hold a few entries more than the ring did (it trims in steps,
        // `durable::store::TRIM_SLACK_ENTRIES`): they are appended like the rest and the ring
        // evicts them as it did on the dead node, keeping every stream's counts exact.
        let start = image.events.first().map_or(image.next_seq, |e| e.seq).max(1);
        s.ring.resume_at(EventSeq(start));
        for (key, record) in &image.streams {
            let kind = if record.kind == "standalone" {
                StreamKind::Standalone
            } else {
                StreamKind::Request
            };
            let request_id =
                record.rid.as_ref().map(|rid| crate::wire::jsonrpc::RawId(rid.clone()));
            let fingerprint = record.fp;
            let idempotency_key = record.key.as_deref().map(Box::from);
            let key = StreamKey(*key);
            s.insert_stream(
                key,
                kind,
                request_id,
                fingerprint,
                idempotency_key,
                EventSeq(record.first),
            );
            // Counted at once (a running, detached stream is owed): a later stream's end during
            // the replay below checks the session's counts across every stream.
            s.refresh(key);
            s.next_stream = s.next_stream.max(key.0.wrapping_add(1)).max(1);
        }
        for event in &image.events {
            if s.ring.next_seq().0 != event.seq {
                return Err(RestoreError::Gap(sid, event.seq));
            }
            let key = StreamKey(event.stream);
            let before_final = s.streams.get(&key).map_or(EventSeq(0), |st| st.produced);
            let _ = s.append_to_ring(key, event.data.clone());
            let is_final = image
                .streams
                .iter()
                .any(|(k, r)| *k == event.stream && r.final_seq == Some(event.seq));
            if is_final {
                s.end_run(key, Run::Finished { final_seq: EventSeq(event.seq), before_final });
            }
        }
        // Events the ring no longer holds: what each stream lost before the image.
        let oldest = s.ring.oldest().unwrap_or(s.ring.next_seq());
        let keys: Vec<StreamKey> = s.streams.keys().copied().collect();
        for key in &keys {
            if let Some(st) = s.streams.get_mut(key) {
                if st.first < oldest {
                    st.evicted_through = EventSeq(oldest.0 - 1);
                }
            }
        }
        for (key, record) in &image.streams {
            let key = StreamKey(*key);
            let running = s
                .streams
                .get(&key)
                .is_some_and(|st| st.kind == StreamKind::Request && st.is_running());
            if let (true, Some(final_seq)) = (running, record.final_seq) {
                // Finished, its final event already evicted from the ring.
                let before_final = EventSeq(final_seq.saturating_sub(1));
                s.end_run(key, Run::Finished { final_seq: EventSeq(final_seq), before_final });
                if record.settled {
                    s.mark_all_delivered(key);
                }
            } else if running {
                let last =
                    s.streams.get(&key).map(|st| st.produced).filter(|seq| seq.0 > record.first);
                let mut last_event = Vec::new();
                if let Some(seq) = last {
                    s.push_event_id(&mut last_event, key, seq);
                }
                let last_event = std::str::from_utf8(&last_event).ok().filter(|t| !t.is_empty());
                let mut payload = Vec::with_capacity(192);
                let rid = s.streams.get(&key).and_then(|st| st.request_id.clone());
                crate::wire::push_outcome_unknown(&mut payload, rid.as_ref(), dead, last_event);
                s.finish(key, bytes::Bytes::from(payload));
            } else if record.settled {
                s.mark_all_delivered(key);
            }
        }
        s.mirror = Some(mirror);
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: u64, stream: u32, data: &'static [u8], then: bool) -> Record {
        Record::Event {
            sid: Arc::from("s"),
            primed: false,
            event: EventImage { seq, stream, data: bytes::Bytes::from_static(data) },
            at: std::time::Instant::now(),
            first_kept: None,
            then: then.then(|| {
                Box::new(StreamRecord {
                    kind: "post".into(),
                    rid: None,
                    fp: 0,
                    key: None,
                    first: seq,
                    final_seq: None,
                    settled: false,
                })
            }),
            gone: Some(9).filter(|_| data.is_empty()),
        }
    }

    #[test]
    fn a_quick_calls_opening_waits_for_its_final_event_and_nothing_else_joins_it() {
        // Goal: the deferred opening (priming event and stream record) takes its stream's next
        // event with its record as `primed`, keeping the opening's removal; anything else is
        // given back to be queued at once, and never joins.
        let mut slot = None;
        assert!(join_deferred(&mut slot, event(4, 2, b"", true)).is_none(), "the opening waits");
        assert!(join_deferred(&mut slot, event(5, 2, b"result", true)).is_none(), "joined");
        match &slot {
            Some(Record::Event { primed: true, event, gone: Some(9), then: Some(_), .. }) => {
                assert_eq!((event.seq, &event.data[..]), (5, &b"result"[..]));
            }
            other => panic!("one primed record: {other:?}"),
        }
        let back = join_deferred(&mut slot, event(6, 2, b"more", true));
        assert!(back.is_some() && slot.is_some(), "a joined record takes nothing more");

        let mut slot = None;
        assert!(join_deferred(&mut slot, event(4, 2, b"", true)).is_none());
        for other in [event(5, 3, b"x", true), event(6, 2, b"x", true), event(5, 2, b"x", false)] {
            assert!(join_deferred(&mut slot, other).is_some(), "another stream, a gap, no record");
            assert!(matches!(slot, Some(Record::Event { primed: false, .. })), "still deferred");
        }
        let mut empty = None;
        assert!(join_deferred(&mut empty, event(5, 2, b"x", true)).is_some(), "not an opening");
        assert!(empty.is_none());
    }
}
