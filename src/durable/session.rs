//! A legacy session's observer on the durable mirror (`SessionMirror`): the session reports
//! each change (`SessionChange`: a transition began or ended, an event appended, a stream
//! opened, ended or settled, a stream gone, a tool's poll began or ended) through one call,
//! `observe`, and this module turns the changes into the records the mirror thread writes,
//! joining those that belong together (an event with its stream's record, a tool's burst of
//! events into one run, a quick call's opening with its final event). It also keeps the
//! session's handle: the core's tap, its name as the store knows it, the epoch its whole image
//! was last queued in. The session (`legacy::session`) holds it as an `Option`: without
//! `--durable` there is none, and a change costs the session one `None` check, no call.
//!
//! Never: waits (a full queue makes the session not durable at once), or queues anything of a
//! session that is not durable, so the store only ever holds a gap-free prefix of it.

use std::rc::Rc;
use std::sync::Arc;

use super::keys::StreamRecord;
use super::queue::CoreTap;
use super::record::{EventImage, PackedRun, Record, SessionImage};

/// A change of a legacy session, as its mirror hears it (`SessionMirror::observe`). Stream
/// keys and sequence numbers are the session's, as plain numbers.
#[derive(Debug)]
pub(crate) enum SessionChange<'a> {
    /// A transition began that appends an event and then changes that event's stream
    /// (opening a stream, finishing a run): the event waits for the stream's record, so one
    /// record carries both (and a stream evicted for room meanwhile).
    TransitionBegan,
    /// That transition ended: a removal or an event no stream record took is queued alone
    /// now, in that order, before anything else of the session.
    TransitionEnded,
    /// The stream being opened is a quick call's (`legacy::request`: its first poll follows
    /// with nothing awaited between): its opening waits until that poll ends
    /// (`PollEnded`), so a call the poll finishes costs one record (`Record::Event::primed`).
    QuickOpening,
    /// The ring appended event `seq` on `stream`; `first_kept` is the ring's oldest event when
    /// the append evicted older ones. The payload lies in the ring's buffer: a gathered event
    /// is packed into its run, one queued alone is copied.
    EventAppended { stream: u32, seq: u64, payload: &'a [u8], first_kept: Option<u64> },
    /// Stream `key` opened, ended its run, or settled: its record as it is now.
    StreamChanged { key: u32, record: StreamRecord },
    /// Stream `key` left the session.
    StreamGone { key: u32 },
    /// A tool's future is about to be polled (`legacy::stream`): the events it appends gather
    /// into one record (`Record::Run`) instead of one each.
    PollBegan,
    /// That poll ended: the gathered events are queued now, and a quick call's opening
    /// (`QuickOpening`), joined with its final event or not.
    PollEnded,
}

/// What a durable session keeps of the mirror.
pub(crate) struct SessionMirror {
    pub(crate) tap: Rc<CoreTap>,
    /// Set when a record could not be queued and the session stopped being durable, until
    /// `observe` reports it (the session logs it: this floor has no logging).
    lost_now: bool,
    /// `Mcp-Session-Id`, shared by every record.
    pub(crate) name: Arc<str>,
    /// The client's `initialize` params (JSON), for whole images.
    pub(crate) client: Arc<str>,
    /// The store epoch in which the whole image was last queued; 0: not durable.
    pub(crate) epoch: u64,
    /// The ticket of the last record queued (what a write-ahead waits for).
    pub(crate) last_ticket: u64,
    /// While set, the session's next ring event is held here instead of queued, for the
    /// stream record that follows it within the same call to carry (`Record::Event::then`).
    pub(crate) hold_event: bool,
    /// The event held, until a stream record takes it or the holder releases it.
    pub(crate) held: Option<HeldEvent>,
    /// A stream removed while an event was held for (`hold_event`): the record that takes the
    /// event carries its removal (`Record::Event::gone`).
    pub(crate) gone: Option<u32>,
    /// While set (a tool's poll), ring events gather into `run` instead of being queued one by
    /// one; the poll's end queues the run, and so does any other record of the session first.
    pub(crate) gathering: bool,
    /// The events gathered and not queued yet.
    pub(crate) run: Option<PackedRun>,
    /// While set (a quick call's open and first poll, no wait between them), the session's
    /// next event record is kept in `deferred` instead of queued, so the call's final event
    /// joins it (`Record::Event::primed`); any other record of the session queues it first.
    pub(crate) deferring: bool,
    /// The event record deferred, until the deferral ends or another record comes.
    pub(crate) deferred: Option<Record>,
}

/// A gathered run is queued once it holds this many events or `RUN_BYTES_MAX` packed bytes, so
/// one tool's burst neither delays its first events nor makes one record (and one store entry)
/// larger than an image's run (`store::IMAGE_RUN_EVENTS`).
pub(crate) const RUN_EVENTS_MAX: u32 = 256;
/// See `RUN_EVENTS_MAX`.
pub(crate) const RUN_BYTES_MAX: usize = 64 * 1024;

/// A ring event not queued yet (see `SessionMirror::hold_event`).
#[derive(Debug)]
pub(crate) struct HeldEvent {
    pub(crate) event: EventImage,
    pub(crate) at: std::time::Instant,
    pub(crate) first_kept: Option<u64>,
}

impl SessionMirror {
    /// A session not yet written (its first image makes it durable).
    pub(crate) fn new(tap: Rc<CoreTap>, name: Arc<str>, client: Arc<str>) -> SessionMirror {
        SessionMirror {
            tap,
            lost_now: false,
            name,
            client,
            epoch: 0,
            last_ticket: 0,
            hold_event: false,
            held: None,
            gone: None,
            gathering: false,
            run: None,
            deferring: false,
            deferred: None,
        }
    }

    /// Its whole image was queued in the current epoch and the store is up.
    pub(crate) fn is_durable(&self) -> bool {
        self.epoch != 0 && self.epoch == self.tap.epoch() && self.tap.is_up()
    }

    /// The ticket of the last record queued while the session is durable (`None` otherwise):
    /// what a write-ahead waits for.
    pub(crate) fn ticket(&self) -> Option<u64> {
        (self.is_durable() && self.last_ticket != 0).then_some(self.last_ticket)
    }

    /// Hears one change of the session (see `SessionChange`). Whether the session stopped
    /// being durable on it (its queue was full), for the session to log.
    pub(crate) fn observe(&mut self, change: SessionChange<'_>) -> bool {
        match change {
            SessionChange::TransitionBegan => self.hold_event = true,
            SessionChange::TransitionEnded => self.release(),
            SessionChange::QuickOpening => self.deferring = true,
            // Nothing of a session that is not durable is queued.
            SessionChange::EventAppended { .. } if !self.is_durable() => {}
            SessionChange::EventAppended { stream, seq, payload, first_kept } => {
                if self.gathering && !self.hold_event {
                    self.gather_event(stream, seq, payload, first_kept);
                } else {
                    let data = bytes::Bytes::copy_from_slice(payload);
                    self.event(stream, seq, data, first_kept);
                }
            }
            SessionChange::StreamChanged { key, record } => self.stream(key, record),
            SessionChange::StreamGone { key } => self.stream_gone(key),
            SessionChange::PollBegan => self.gathering = true,
            SessionChange::PollEnded => {
                self.gathering = false;
                self.flush_run();
                self.undefer();
            }
        }
        std::mem::take(&mut self.lost_now)
    }

    /// Queues `record` for a durable session (after the events it gathered: they came first);
    /// a full queue makes it not durable. The ticket.
    fn push(&mut self, make: impl FnOnce(&Arc<str>) -> Record) -> Option<u64> {
        self.flush_pending();
        self.push_now(make)
    }

    /// Queues what the session gathered or set aside and no record took (a run of events, a
    /// stream's removal), in the order it happened.
    fn flush_pending(&mut self) {
        self.flush_run();
        if let Some(key) = self.gone.take() {
            self.push_now(|sid| Record::StreamGone { sid: sid.clone(), key });
        }
    }

    /// Stream `key` left the session: its record goes from the store, along with the next
    /// record when an event is held for one (`open_stream` evicting for room).
    fn stream_gone(&mut self, key: u32) {
        if self.hold_event && self.gone.is_none() {
            self.gone = Some(key);
            return;
        }
        self.push(|sid| Record::StreamGone { sid: sid.clone(), key });
    }

    fn push_now(&mut self, make: impl FnOnce(&Arc<str>) -> Record) -> Option<u64> {
        if !self.is_durable() {
            return None;
        }
        let record = make(&self.name);
        if !self.deferring {
            return self.push_queued(record);
        }
        let record = join_deferred(&mut self.deferred, record)?;
        // Not one to defer or join: the deferred record goes first, then this one.
        if let Some(earlier) = self.deferred.take() {
            self.push_queued(earlier);
        }
        self.push_queued(record)
    }

    /// Queues `record` of a durable session (`push_now` after any deferral).
    fn push_queued(&mut self, record: Record) -> Option<u64> {
        if !self.is_durable() {
            return None;
        }
        match self.tap.push(record) {
            Ok(ticket) => {
                self.last_ticket = ticket;
                Some(ticket)
            }
            Err(_) => {
                self.tap.broke(self.name.clone());
                self.lost_now |= self.lost();
                None
            }
        }
    }

    /// The mirror lost some of this session (or its queue was full): not durable until the
    /// core rewrites it whole (`catch_up`). Whether it was durable until now (the session then
    /// logs that it is not).
    pub(crate) fn lost(&mut self) -> bool {
        // Whatever it gathered or holds is in the ring, so in the image that will replace it.
        self.run = None;
        self.held = None;
        self.gone = None;
        self.deferred = None;
        if self.epoch == 0 {
            return false;
        }
        self.epoch = 0;
        self.tap.metrics.durable_sessions_marked_not_durable_total.inc();
        true
    }

    /// Stream `key` changed to `record`: one record with the event held for it, if any.
    fn stream(&mut self, key: u32, record: StreamRecord) {
        match self.held.take() {
            // The event this change follows on the same stream: one record for both.
            Some(held) if held.event.stream == key => {
                let gone = self.gone.take();
                self.push_event(held, Some(record), gone);
            }
            held => {
                if let Some(held) = held {
                    self.push_event(held, None, None);
                }
                self.push(|sid| Record::Stream { sid: sid.clone(), key, record: Box::new(record) });
            }
        }
    }

    /// Ends a quick call's deferral (`QuickOpening`): the deferred record, joined or not, is
    /// queued now.
    fn undefer(&mut self) {
        self.deferring = false;
        if let Some(record) = self.deferred.take() {
            self.push_queued(record);
        }
    }

    /// Ends a transition's hold: a removal or an event no stream record took is queued alone
    /// now, in that order, before anything else of the session.
    fn release(&mut self) {
        self.hold_event = false;
        match self.held.take() {
            // `push` queues the pending removal first.
            Some(held) => self.push_event(held, None, None),
            None => self.flush_pending(),
        }
    }

    /// Packs event `seq` (just appended on `stream`) into the session's gathered run, which is
    /// queued first when it does not end right before `seq` or is full.
    fn gather_event(&mut self, stream: u32, seq: u64, payload: &[u8], first_kept: Option<u64>) {
        let full = self.run.as_ref().is_some_and(|run| {
            run.first_seq + u64::from(run.count) != seq
                || run.count >= RUN_EVENTS_MAX
                || run.packed.len() >= RUN_BYTES_MAX
        });
        if full {
            self.flush_run();
        }
        let tap = &self.tap;
        let run = self.run.get_or_insert_with(|| PackedRun {
            first_seq: seq,
            count: 0,
            packed: tap.run_buffer(RUN_BUFFER_BYTES),
            payload_bytes: 0,
            at: std::time::Instant::now(),
            first_kept: None,
        });
        super::keys::pack_event(&mut run.packed, stream, payload);
        run.count += 1;
        run.payload_bytes += payload.len();
        run.first_kept = run.first_kept.max(first_kept);
    }

    /// Queues the gathered run, if any.
    fn flush_run(&mut self) {
        let Some(run) = self.run.take() else { return };
        self.push_now(|sid| Record::Run { sid: sid.clone(), run });
    }

    /// Queues a held event's record, carrying the stream record `then` that follows it and the
    /// removal `gone` it takes along, if any.
    fn push_event(&mut self, held: HeldEvent, then: Option<StreamRecord>, gone: Option<u32>) {
        let HeldEvent { event, at, first_kept } = held;
        let then = then.map(Box::new);
        self.push(|sid| Record::Event {
            sid: sid.clone(),
            primed: false,
            event,
            at,
            first_kept,
            then,
            gone,
        });
    }

    /// The ring appended `seq` on `stream` with `data`: held for the stream record that
    /// follows within the transition, or queued now.
    fn event(&mut self, stream: u32, seq: u64, data: bytes::Bytes, first_kept: Option<u64>) {
        let at = std::time::Instant::now();
        let held = HeldEvent { event: EventImage { seq, stream, data }, at, first_kept };
        if self.hold_event && self.held.is_none() {
            self.held = Some(held);
        } else {
            self.push_event(held, None, None);
        }
    }

    /// Queues the whole session (`image` makes it from its name, its client's params and its
    /// owner) when it is not durable and the store is up and has room: the reaper's tick, and
    /// a new or adopted session's first write. Whether it is durable now.
    pub(crate) fn catch_up(
        &mut self,
        image: impl FnOnce(&Arc<str>, &str, u8) -> SessionImage,
    ) -> bool {
        if self.is_durable() {
            return true;
        }
        let tap = self.tap.clone();
        if !tap.is_up() {
            return false;
        }
        let epoch = tap.epoch();
        let record = Record::Session(Box::new(image(&self.name, &self.client, tap.node)));
        if !tap.has_room(record.charged_bytes()) {
            return false;
        }
        let Ok(ticket) = tap.push(record) else { return false };
        self.epoch = epoch;
        self.last_ticket = ticket;
        // The image holds whatever a deferred record would have written.
        self.deferred = None;
        true
    }

    /// Ends the session's mirror (DELETE or expiry): its keys go from the store.
    pub(crate) fn end(self) {
        // Even a session that is not durable has its keys removed (they may hold a prefix).
        let _ = self.tap.push(Record::End { sid: self.name.clone() });
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
