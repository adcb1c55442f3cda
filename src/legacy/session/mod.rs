//! Sessions of the legacy era (MCP 2025-03-26 … 2025-11-25): per-session state, its request
//! streams and the bookkeeping the migration boundary reads (CONTRACT §4).
//!
//! Owns: `Session` (negotiated version, log level, replay ring, streams, the request-id,
//! fingerprint and idempotency-key maps, the owed count and replaying count) and `SessionTable`
//! (one per core). A stream's lifecycle (`Run` × `Writer` and its cursors) is private to this
//! module and changes only through `Session`'s transition methods, each of which ends in
//! `refresh`, which keeps the owed and replaying counts exact (recounted in debug builds), so
//! the POST decision reads counters in O(1) and never scans.
//! Never: does I/O or awaits; callers hold a `RefCell` borrow only between awaits.

pub(crate) mod id;
pub(crate) mod restore;
pub(crate) mod timers;

use crate::durable::keys::StreamRecord;
use crate::durable::{EventImage, SessionChange, SessionImage, SessionMirror};
use crate::fasthash::{FastMap, HashedKeyMap, RandomKeyMap, RandomWordMap, SequenceMap};
use std::cell::Cell;
use std::rc::Rc;
use std::time::Instant;

use crate::legacy::replay::{EventSeq, Evicted, Ring, StreamKey};
use crate::provider::{Caller, LogLevel};
use crate::signal::Signal;
use crate::wire::jsonrpc::RawId;
pub use id::SessionId;

/// A session as the core shares it among its connections, streams and tasks.
pub(crate) type SessionRc = Rc<std::cell::RefCell<Session>>;

pub use crate::wire::LEGACY_VERSIONS;

/// What kind of stream this is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamKind {
    /// The answer stream of one POSTed request.
    Request,
    /// The session's standalone GET stream; never owed.
    Standalone,
}

/// Where a stream's work is. Changes only through `Session`'s transition methods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Run {
    /// The request runs (the standalone stream is `Running` for its whole life).
    Running,
    /// The final response was appended as event `final_seq`; `before_final` is the stream's
    /// event just before it (so a hint can still fetch the final response).
    Finished { final_seq: EventSeq, before_final: EventSeq },
    /// Cancelled or abandoned: the tail is dropped, nothing more is appended or owed.
    Dropped,
}

/// Who writes a stream. Changes only through `Session`'s transition methods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Writer {
    /// No connection writes it.
    Detached,
    /// The writer holding `epoch` owns it (an older epoch must stop); `replaying` while that
    /// writer flushes a backlog (CONTRACT §4 step 4 holds new requests meanwhile).
    Attached { epoch: u64, replaying: bool },
    /// The server closed the connection on purpose (SEP-1699 polling): not owed; the client
    /// comes back with GET + Last-Event-ID.
    Parked,
}

/// One stream: its identity (public), and its lifecycle (`Run` × `Writer` and the cursors),
/// private to this module so that every change goes through a transition that keeps the
/// session's owed and replaying counts exact (CONTRACT §4: produced, delivered, attached,
/// in flight).
pub struct StreamState {
    pub key: StreamKey,
    pub kind: StreamKind,
    /// The request's id (`Request` streams).
    pub request_id: Option<RawId>,
    /// Hash of method + canonical params (without `_meta`).
    pub fingerprint: u64,
    pub idempotency_key: Option<Box<str>>,
    /// `_meta.progressToken` as JSON text, when the request had one: held inline like the
    /// request id (a string or an integer, MCP), so opening a stream copies it without
    /// allocating.
    pub progress_token: Option<RawId>,
    /// The stream's first event (its priming event).
    pub first: EventSeq,
    /// The stream's wake-ups, made by the first waiter (`signals`): most streams end before
    /// anyone waits (an instant call's is written whole at its first fill), so opening a
    /// stream allocates none, and a notify before any wait has no one to wake.
    signals: std::cell::OnceCell<Rc<StreamSignals>>,
    run: Run,
    writer: Writer,
    next_epoch: u64,
    /// Last event appended.
    produced: EventSeq,
    /// Last event handed to the client for good: a resume cursor, or everything once the end of
    /// the stream was written on a live connection (CONTRACT §4's `delivered`, which decides
    /// owed and settled).
    delivered: EventSeq,
    /// Last event the client *proved* it holds: its furthest resume cursor (`Last-Event-ID`).
    /// Written is not held (a socket that died loses what it buffered), so only this feeds the
    /// 409 hint.
    acknowledged: EventSeq,
    /// Last event a connection finished sending.
    written: EventSeq,
    /// This stream's held events after `written` (appended, not yet sent whole by any
    /// connection): what backpressure bounds while a client is attached.
    unwritten: Unwritten,
    /// A tool asked to close the connection (SEP-1699); the next writer batch acts on it.
    close_requested: bool,
    /// The tool was told to stop (cancel, session end); its outcome is ignored.
    cancelled: bool,
    /// Last event of this stream evicted from the ring (0 = none).
    evicted_through: EventSeq,
    /// Oldest event of this stream still in the ring.
    first_held: Option<EventSeq>,
    /// Counted in `Session::owed_count` (kept equal to `is_owed()` by `refresh`).
    owed_counted: bool,
    /// When it became owed (for `--owed-timeout-secs`).
    owed_since: Option<Instant>,
    /// When it first settled (for `--stream-retention-secs`).
    settled_at: Option<Instant>,
}

/// One stream's wake-ups, made together at the first wait on any of them.
#[derive(Default)]
pub struct StreamSignals {
    /// New events or state: the writer wakes on it.
    pub events: Signal,
    /// Fired when the stream is cancelled: the running tool stops.
    pub cancel: Signal,
    /// Woken when the stream may have room again for a paused producer (`Session::has_room`):
    /// its writer sent events, it detached, or its run ended.
    pub room: Signal,
}

impl StreamState {
    /// The stream's wake-ups, made at the first call; a waiter takes them, then awaits one
    /// (single-core: nothing is notified between its check and its wait).
    pub fn signals(&self) -> Rc<StreamSignals> {
        self.signals.get_or_init(Rc::default).clone()
    }

    /// Wakes the waiters of the signal `pick` names; none if no one ever waited.
    fn notify(&self, pick: impl FnOnce(&StreamSignals) -> &Signal) {
        if let Some(signals) = self.signals.get() {
            pick(signals).notify_all();
        }
    }

    /// CONTRACT §4: detached (not parked) and (running or not fully delivered); dropped and
    /// standalone streams never owe.
    pub fn is_owed(&self) -> bool {
        self.kind == StreamKind::Request
            && self.writer == Writer::Detached
            && self.run != Run::Dropped
            && (self.run == Run::Running || self.delivered < self.produced)
    }

    /// Finished or dropped, and nothing owed on it.
    pub fn is_settled(&self) -> bool {
        match self.run {
            Run::Running => false,
            Run::Dropped => true,
            Run::Finished { .. } => self.delivered >= self.produced,
        }
    }

    /// The request's work has not ended.
    pub fn is_running(&self) -> bool {
        self.run == Run::Running
    }

    pub fn is_dropped(&self) -> bool {
        self.run == Run::Dropped
    }

    /// A request stream a connection writes (counted in `CoreTally::live`).
    fn is_live(&self) -> bool {
        self.kind == StreamKind::Request && self.is_attached()
    }

    pub fn is_attached(&self) -> bool {
        matches!(self.writer, Writer::Attached { .. })
    }

    /// The writer holding `epoch` still owns the stream.
    pub fn is_attached_by(&self, epoch: u64) -> bool {
        matches!(self.writer, Writer::Attached { epoch: e, .. } if e == epoch)
    }

    pub fn is_parked(&self) -> bool {
        self.writer == Writer::Parked
    }

    pub fn is_replaying(&self) -> bool {
        matches!(self.writer, Writer::Attached { replaying: true, .. })
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled
    }

    pub fn run(&self) -> Run {
        self.run
    }

    pub fn writer(&self) -> Writer {
        self.writer
    }

    pub fn produced(&self) -> EventSeq {
        self.produced
    }

    pub fn delivered(&self) -> EventSeq {
        self.delivered
    }

    pub fn written(&self) -> EventSeq {
        self.written
    }

    /// The event carrying the final JSON-RPC response, once appended.
    pub fn final_seq(&self) -> Option<EventSeq> {
        match self.run {
            Run::Finished { final_seq, .. } => Some(final_seq),
            _ => None,
        }
    }

    pub fn evicted_through(&self) -> EventSeq {
        self.evicted_through
    }

    /// The `Last-Event-ID` to hint in a 409 (CONTRACT §4's hint rule): the last event the client
    /// is *known* to hold — its furthest resume cursor — else the stream's priming event, and
    /// never the final response itself, whatever the stream's state (running, finished, fully
    /// written, parked, settled). Not the last event *written*, nor "everything" once the end
    /// was written: events in a socket buffer when a connection dies never reach the client,
    /// and a client resuming after them would lose them silently. So a GET from any hint
    /// returns every event after the client's true last event (possibly repeating some it has,
    /// under the same ids) or an explicit -31003 gap; a client that kept its own last event id
    /// should resume from that and gets exactly what it lacks.
    pub fn resume_hint(&self) -> EventSeq {
        let hint = self.acknowledged.max(self.first);
        match self.run {
            Run::Finished { final_seq, before_final } if hint >= final_seq => {
                before_final.max(self.first)
            }
            _ => hint,
        }
    }
}

/// Bytes and events appended to a stream and not yet sent whole by any connection (or a sum of
/// them over streams); both only move by what was appended, sent or evicted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Unwritten {
    pub(crate) bytes: usize,
    pub(crate) events: usize,
}

impl Unwritten {
    fn add(&mut self, more: Unwritten) {
        self.bytes += more.bytes;
        self.events += more.events;
    }

    /// Panics on underflow: every event taken away was added before (our invariant).
    fn sub(&mut self, less: Unwritten) {
        self.bytes = self.bytes.checked_sub(less.bytes).expect("invariant: unwritten bytes");
        self.events = self.events.checked_sub(less.events).expect("invariant: unwritten events");
    }
}

/// Where a resume of a stream starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResumeStart {
    /// Write events from this one (inclusive).
    From(EventSeq),
    /// Nothing after the cursor yet; wait for the next append.
    Caught,
    /// Events after the cursor were evicted: report a gap.
    Gap {
        /// The last lost event: the gap reported runs from the cursor through it (`lostTo`).
        lost_to: EventSeq,
    },
}

/// Why a resume cursor is refused (the peer's fault) → 400.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CursorError {
    /// Not an event of this stream (malformed, another stream's or before it began).
    Foreign,
    /// Beyond the last event the stream produced.
    Future,
}

/// One session, owned by one core.
pub struct Session {
    /// The `Mcp-Session-Id` the client was given.
    pub id: SessionId,
    /// Random tag in every event id, so an id of another session is recognised as foreign:
    /// the tag of the events after the last adoption's (an adopter takes a new one, `retag`).
    pub tag: u32,
    /// The MCP revision negotiated at `initialize`: its index in `LEGACY_VERSIONS` (one byte
    /// where the `&'static str` took 16; `version()`).
    version: u8,
    /// Least severe log level sent to the client (`logging/setLevel`; `Info` at start).
    pub log_level: LogLevel,
    /// When a request last named this session; `--session-idle-secs` counts from it.
    pub last_active: Instant,
    /// The replay ring all streams of the session share (`--replay-events`, `--replay-bytes`).
    pub ring: Ring,
    /// Keyed by `next_stream`'s numbers: one multiply a probe (`SequenceMap`).
    streams: SequenceMap<StreamKey, StreamState>,
    next_stream: u32,
    by_request_id: FastMap<RawId, StreamKey>,
    /// The fingerprint is a finished hash: taken as it is (`HashedKeyMap`).
    by_fingerprint: HashedKeyMap<StreamKey>,
    /// Bounded by the streams a session retains (`streams_max`), so 32 bits.
    owed_count: u32,
    replaying_count: u32,
    standalone: Option<StreamKey>,
    /// Request streams in the order they settled: eviction for room takes the front, so a full
    /// stream table costs O(1) amortized per new stream, not a scan. May hold keys of streams
    /// already removed (skipped; compacted when it grows past twice the table).
    settled_order: std::collections::VecDeque<StreamKey>,
    /// What few sessions use (authorization, idempotency keys, server→client requests), boxed
    /// on first use: an idle session without them holds 8 bytes here.
    rare: Option<Box<Rare>>,
    /// DELETEd or expired: writers end, tools stop.
    pub closed: bool,
    /// POSTs held at the migration boundary right now (`--max-held-per-session`).
    pub held_posts: usize,
    /// Request streams retained at most (`--max-streams-per-session`; a flag past `u32::MAX`
    /// holds `u32::MAX`, far more than any session can open).
    streams_max: u32,
    /// `--max-pending-client-requests`: entries `pending_client` may hold (`pending_client_max`).
    pending_client_max: u32,
    /// The sum of `unwritten` over the attached streams: eviction is ring-wide, so what must
    /// fit the ring is what every reading client has not got yet, not one stream's part.
    attached_unwritten: Unwritten,
    /// What the sessions of this core add up to (ring bytes against `--core-buffer-bytes`,
    /// owed and live request streams); this session adds and removes its own part as it
    /// changes, and its remainder when dropped.
    tally: Rc<CoreTally>,
    /// The index of its entry on the core's timer wheel (`timers`; kept by `SessionTable`),
    /// `timers::NOT_ARMED` while it is off the wheel.
    pub(crate) timer_entry: u32,
    /// The observer of its changes: its part of the durable mirror (`--durable`). `None`
    /// when the mirror is off, and then a change costs this check and no call.
    pub(crate) mirror: Option<Box<SessionMirror>>,
}

/// The parts of a session few sessions use, in one box (`Session::rare`).
#[derive(Default)]
struct Rare {
    /// Woken whenever the owed or replaying count changes (held POSTs wait on it); made by
    /// the first POST held (`owed_signal`), so a session never held holds none.
    owed_signal: Option<Rc<Signal>>,
    /// The subject whose token opened the session (`None`: authorization is off). A request
    /// naming the session with another subject's token, or none, finds no session (CONTRACT
    /// §8: 404, as for an unknown id); a new token of the same subject continues it.
    subject: Option<Box<str>>,
    /// The opener's subject and `Authorization` value, for the session's calls through a
    /// shared upstream link (a per-session link has them from `SessionStart`).
    caller: Option<Caller>,
    /// Request streams by their `Idempotency-Key`.
    by_idempotency_key: FastMap<Box<str>, StreamKey>,
    /// Server→client requests awaiting the client's POSTed answer: id → (stream, slot).
    pending_client: FastMap<u64, PendingClientRequest>,
    /// The id the next server→client request gets, less one.
    client_requests_sent: u64,
    /// Streams adoption ended with `-31006`, each with the last of its events the store held
    /// (`cursor`).
    cut_off: Vec<(StreamKey, EventSeq)>,
    /// The tags of the session's event ids before each adoption still visible in its ring,
    /// oldest first: `(until, tag)`, the events below `until` (and at or above the previous
    /// entry's) carry `tag`; the session's own `tag` is for the rest (`tag_of`). An adopter
    /// takes a new tag (`retag`) because the dead node may have issued ids past what the store
    /// held: with the old tag the adopter's events would take those ids again, for other
    /// events (an event id names one event in a session).
    earlier_tags: Vec<(EventSeq, u32)>,
    /// Audited calls (`--audit-log`) whose run had not ended when their POST was answered:
    /// each gets its line when its run ends (`end_run`) or its stream goes.
    audited: Vec<(StreamKey, crate::audit::Pending)>,
}

/// The client's answer to a server→client request: its `result`, or its `error` object.
pub(crate) type ClientAnswer = Result<crate::provider::Value, crate::provider::Value>;

/// A server→client request waiting for its answer.
pub struct PendingClientRequest {
    /// The stream the request went out on; its end drops the request.
    pub stream: StreamKey,
    /// `Some` exactly when the client's answer has arrived.
    pub answer: Rc<std::cell::RefCell<Option<ClientAnswer>>>,
    /// Woken when `answer` is set.
    pub signal: Rc<Signal>,
}

/// The epoch of a stream's first writer (`Session::attach`); `stream::OBSERVER_EPOCH` (0) is
/// below every owner's.
pub(crate) const FIRST_EPOCH: u64 = 1;

/// Why a stream could not be opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenError {
    /// `--max-streams-per-session` reached and no settled stream to evict → 429.
    TooManyStreams,
}

/// Why an event was not appended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppendError {
    /// The stream is gone, dropped or finished: nothing more belongs on it (not an error of
    /// anyone's: a late message of a cancelled tool).
    Closed,
    /// Culprit: the producer against the operator's `--replay-bytes`: the event alone is larger
    /// than the ring. The request has been ended with an error (`fail_oversize`).
    TooLarge {
        /// Payload bytes of the refused event.
        event_bytes: usize,
        /// The ring's byte bound (`--replay-bytes`).
        replay_bytes: usize,
    },
}

impl Session {
    /// A fresh session: no streams, limits from `cfg`; its ring bytes join the core's total once
    /// `count_bytes_in` is called.
    pub fn new(
        id: SessionId,
        tag: u32,
        version: &'static str,
        cfg: &crate::config::Config,
    ) -> Session {
        Session {
            id,
            tag,
            version: version_index(version),
            log_level: LogLevel::Info,
            last_active: Instant::now(),
            ring: Ring::new(cfg.sessions.replay_events_max, cfg.sessions.replay_bytes_max),
            streams: SequenceMap::default(),
            next_stream: 1,
            by_request_id: FastMap::default(),
            by_fingerprint: HashedKeyMap::default(),
            owed_count: 0,
            replaying_count: 0,
            standalone: None,
            settled_order: std::collections::VecDeque::new(),
            rare: None,
            closed: false,
            held_posts: 0,
            streams_max: saturating_u32(cfg.sessions.streams_per_session_max),
            pending_client_max: saturating_u32(cfg.modern.client_requests_pending_max),
            attached_unwritten: Unwritten::default(),
            tally: Rc::default(),
            timer_entry: timers::NOT_ARMED,
            mirror: None,
        }
    }

    /// Counts this session's ring bytes and streams in `tally` (the core's totals) from now on.
    pub fn count_bytes_in(&mut self, tally: Rc<CoreTally>) {
        let part = self.part();
        self.tally.sub(part);
        tally.add(part);
        self.tally = tally;
    }

    /// This session's part of its core's tally.
    fn part(&self) -> [usize; 3] {
        let live = self.streams.values().filter(|s| s.is_live()).count();
        [self.ring.bytes(), self.owed_count as usize, live]
    }

    /// Streams owed to the client (CONTRACT §4: detached, not fully delivered); kept exact.
    pub fn owed_count(&self) -> usize {
        self.owed_count as usize
    }

    /// Streams a resume is replaying right now; kept exact.
    pub fn replaying_count(&self) -> usize {
        self.replaying_count as usize
    }

    /// The MCP revision negotiated at `initialize` (`"2025-11-25"`, …).
    pub fn version(&self) -> &'static str {
        LEGACY_VERSIONS[usize::from(self.version)]
    }

    /// `--max-pending-client-requests`: server→client requests that may await an answer.
    pub fn pending_client_max(&self) -> usize {
        self.pending_client_max as usize
    }

    /// True when a new request must wait (CONTRACT §4 step 4).
    #[inline]
    pub fn owes(&self) -> bool {
        self.owed_count > 0 || self.replaying_count > 0
    }

    /// The stream `key` names, if retained.
    #[inline]
    pub fn stream(&self, key: StreamKey) -> Option<&StreamState> {
        self.streams.get(&key)
    }

    /// Every retained stream, in no order.
    pub fn streams(&self) -> impl Iterator<Item = &StreamState> {
        self.streams.values()
    }

    /// The stream a request id names, if retained.
    #[inline]
    pub fn by_request_id(&self, id: &RawId) -> Option<&StreamState> {
        self.by_request_id.get(id).and_then(|k| self.streams.get(k))
    }

    /// The latest request stream whose method and params hash to `fp`, if retained.
    #[inline]
    pub fn by_fingerprint(&self, fp: u64) -> Option<&StreamState> {
        self.by_fingerprint.get(&fp).and_then(|k| self.streams.get(k))
    }

    /// The stream opened with `Idempotency-Key` `key`, if retained.
    pub fn by_idempotency_key(&self, key: &str) -> Option<&StreamState> {
        let rare = self.rare.as_deref()?;
        rare.by_idempotency_key.get(key).and_then(|k| self.streams.get(k))
    }

    /// Opens a stream and appends its priming event. Evicts the oldest settled stream when the
    /// table is full.
    pub fn open_stream(
        &mut self,
        kind: StreamKind,
        request_id: Option<RawId>,
        fingerprint: u64,
        idempotency_key: Option<Box<str>>,
        progress_token: Option<RawId>,
    ) -> Result<StreamKey, OpenError> {
        let opening = Opening { kind, request_id, fingerprint, idempotency_key, progress_token };
        self.open(opening, false, Writer::Detached).map(|(key, _)| key)
    }

    /// As `open_stream`, for a request's tool call whose first poll follows at once, nothing
    /// awaited between (`legacy::request`'s quick call): the mirror keeps the opening until
    /// that poll ends (`SessionChange::QuickOpening`), so a call it finishes costs one record.
    pub(crate) fn open_quick_stream(
        &mut self,
        request_id: RawId,
        fingerprint: u64,
        idempotency_key: Option<Box<str>>,
        progress_token: Option<RawId>,
    ) -> Result<StreamKey, OpenError> {
        let request_id = Some(request_id);
        let kind = StreamKind::Request;
        let opening = Opening { kind, request_id, fingerprint, idempotency_key, progress_token };
        self.open(opening, true, Writer::Detached).map(|(key, _)| key)
    }

    /// As `open_quick_stream`, for a quick call answered on SSE: the stream opens attached to
    /// the request's own writer, as `attach_fresh` right after the first poll would leave it
    /// (epoch `FIRST_EPOCH`, written from the priming event, returned with the key). Nothing
    /// is awaited between the opening and the writer taking the stream, so no one sees the
    /// difference but the counts: the stream is never owed (no owed count, clock read or
    /// owed signal up and down again, no second transition; callgrind, echo) and a tool that
    /// emits in its first poll is paced by the stream's room as in its later polls.
    pub(crate) fn open_quick_attached(
        &mut self,
        request_id: RawId,
        fingerprint: u64,
        idempotency_key: Option<Box<str>>,
        progress_token: Option<RawId>,
    ) -> Result<(StreamKey, u64, EventSeq), OpenError> {
        let request_id = Some(request_id);
        let kind = StreamKind::Request;
        let opening = Opening { kind, request_id, fingerprint, idempotency_key, progress_token };
        let writer = Writer::Attached { epoch: FIRST_EPOCH, replaying: false };
        let (key, first) = self.open(opening, true, writer)?;
        Ok((key, FIRST_EPOCH, first))
    }

    fn open(
        &mut self,
        opening: Opening,
        quick: bool,
        writer: Writer,
    ) -> Result<(StreamKey, EventSeq), OpenError> {
        // Held from here: the stream evicted for room and the priming event travel with the
        // new stream's record (one mirror record for the three).
        self.observe(SessionChange::TransitionBegan);
        if self.streams.len() >= self.streams_max as usize && !self.evict_one_settled() {
            self.observe(SessionChange::TransitionEnded);
            return Err(OpenError::TooManyStreams);
        }
        if quick {
            self.observe(SessionChange::QuickOpening);
        }
        let key = StreamKey(self.next_stream);
        self.next_stream = self.next_stream.wrapping_add(1).max(1);
        // The stream goes in whole, its priming event's number known before the append (the
        // ring numbers in sequence), so no field is set by a lookup after the insert.
        let first = self.ring.next_seq();
        self.insert_stream(key, opening, first, writer);
        // An empty priming event always fits the ring (the byte budget is never zero). What
        // `append` adds around the ring append is skipped: the run check (the stream was just
        // inserted running) and the wake-up (no one has waited on it yet).
        let priming = self.append_to_ring(key, &[]);
        debug_assert_eq!(priming, Some(first), "the ring numbers appends in sequence");
        self.refresh(key);
        self.observe_stream(key);
        self.observe(SessionChange::TransitionEnded);
        Ok((key, first))
    }

    /// Adds stream `key` (running, nothing appended, written by `writer`: detached, or its
    /// first writer `FIRST_EPOCH`) and its map entries.
    fn insert_stream(&mut self, key: StreamKey, opening: Opening, first: EventSeq, writer: Writer) {
        debug_assert!(matches!(
            writer,
            Writer::Detached | Writer::Attached { epoch: FIRST_EPOCH, replaying: false }
        ));
        let Opening { kind, request_id, fingerprint, idempotency_key, progress_token } = opening;
        if let Some(id) = &request_id {
            self.by_request_id.insert(id.clone(), key);
        }
        if kind == StreamKind::Request {
            self.by_fingerprint.insert(fingerprint, key);
        }
        if let Some(k) = &idempotency_key {
            self.rare_mut().by_idempotency_key.insert(k.clone(), key);
        }
        if kind == StreamKind::Standalone {
            self.standalone = Some(key);
        }
        let attached = writer != Writer::Detached;
        if attached && kind == StreamKind::Request {
            // `set_writer`'s count of live streams (nothing appended: no unwritten to add).
            self.tally.live.set(self.tally.live.get() + 1);
        }
        self.streams.insert(
            key,
            StreamState {
                key,
                kind,
                request_id,
                fingerprint,
                idempotency_key,
                progress_token,
                first,
                signals: std::cell::OnceCell::new(),
                run: Run::Running,
                writer,
                next_epoch: if attached { FIRST_EPOCH + 1 } else { FIRST_EPOCH },
                produced: EventSeq(0),
                delivered: EventSeq(0),
                acknowledged: EventSeq(0),
                written: EventSeq(0),
                unwritten: Unwritten::default(),
                close_requested: false,
                cancelled: false,
                evicted_through: EventSeq(0),
                first_held: None,
                owed_counted: false,
                owed_since: None,
                settled_at: None,
            },
        );
    }

    /// The providers' name for this session (`SessionRef`): stable for its life, unique
    /// among live sessions, and no secret (the `Mcp-Session-Id` cannot be derived from it).
    pub fn reference(&self) -> crate::provider::SessionRef {
        crate::provider::SessionRef::new(u64::from(self.tag) << 32 ^ (self.id.random as u64))
    }

    /// The standalone GET stream; `Some` exactly while one is retained.
    pub fn standalone(&self) -> Option<StreamKey> {
        self.standalone
    }

    fn evict_one_settled(&mut self) -> bool {
        let mut skipped = Vec::new();
        let mut evicted = false;
        while let Some(k) = self.settled_order.pop_front() {
            match self.streams.get(&k) {
                // Settled but being re-read by a resume right now: keep it, try the next.
                Some(st) if st.is_attached() => skipped.push(k),
                Some(_) => {
                    self.remove_stream(k);
                    evicted = true;
                    break;
                }
                None => {}
            }
        }
        for k in skipped.into_iter().rev() {
            self.settled_order.push_front(k);
        }
        evicted
    }

    /// Forgets a stream and its map entries (retention over, or evicted for room).
    pub fn remove_stream(&mut self, key: StreamKey) {
        let Some(s) = self.streams.remove(&key) else { return };
        if s.is_attached() {
            self.attached_unwritten.sub(s.unwritten);
        }
        if s.owed_counted {
            self.owed_count -= 1;
            self.tally.owed.set(self.tally.owed.get() - 1);
        }
        if s.is_live() {
            self.tally.live.set(self.tally.live.get() - 1);
        }
        if s.is_replaying() {
            self.replaying_count -= 1;
        }
        // One probe each: the entry is removed and put back in the rare case that it names a
        // newer stream (a later request reused the id or the params).
        if let Some(id) = s.request_id.as_ref() {
            if let Some((id, newer)) = self.by_request_id.remove_entry(id) {
                if newer != key {
                    self.by_request_id.insert(id, newer);
                }
            }
        }
        // A later request with the same params owns the entry as often as not (a client
        // repeating a call): looked at in place, one probe either way.
        if let std::collections::hash_map::Entry::Occupied(entry) =
            self.by_fingerprint.entry(s.fingerprint)
        {
            if *entry.get() == key {
                entry.remove();
            }
        }
        if let (Some(k), Some(rare)) = (&s.idempotency_key, self.rare.as_deref_mut()) {
            if rare.by_idempotency_key.get(k) == Some(&key) {
                rare.by_idempotency_key.remove(k);
            }
        }
        if self.standalone == Some(key) {
            self.standalone = None;
        }
        if let Some(rare) = self.rare.as_deref_mut() {
            rare.pending_client.retain(|_, p| p.stream != key);
            rare.cut_off.retain(|&(k, _)| k != key);
            if let Some(at) = rare.audited.iter().position(|(k, _)| *k == key) {
                rare.audited.swap_remove(at).1.end(crate::audit::Ending::Cancelled);
            }
        }
        self.observe(SessionChange::StreamGone { key: key.0 });
        s.notify(|w| &w.events);
        s.notify(|w| &w.cancel);
        s.notify(|w| &w.room);
        self.notify_owed();
        self.debug_check_counts();
    }

    /// Appends an event to a running stream; records evictions on the streams they hit. An
    /// event larger than the whole ring ends the request with an error instead
    /// (`AppendError::TooLarge`): never a silent drop, never a stream left waiting.
    /// The payload is copied into the ring.
    pub fn append(
        &mut self,
        key: StreamKey,
        payload: impl AsRef<[u8]>,
    ) -> Result<EventSeq, AppendError> {
        let payload = payload.as_ref();
        if self.streams.get(&key).is_none_or(|s| s.run != Run::Running) {
            return Err(AppendError::Closed);
        }
        let event_bytes = payload.len();
        let seq = match self.append_to_ring(key, payload) {
            Some(seq) => seq,
            None => {
                self.fail_oversize(key, event_bytes);
                return Err(AppendError::TooLarge {
                    event_bytes,
                    replay_bytes: self.ring.bytes_max(),
                });
            }
        };
        if let Some(s) = self.streams.get(&key) {
            s.notify(|w| &w.events);
        }
        self.refresh(key);
        Ok(seq)
    }

    /// The ring append itself; `None` when the payload alone exceeds the ring's byte budget.
    fn append_to_ring(&mut self, key: StreamKey, payload: &[u8]) -> Option<EventSeq> {
        let before = self.ring.bytes();
        let seq = self.append_to_ring_uncounted(key, payload);
        let after = self.ring.bytes();
        self.tally.ring_bytes.set(self.tally.ring_bytes.get() + after - before);
        seq
    }

    fn append_to_ring_uncounted(&mut self, key: StreamKey, payload: &[u8]) -> Option<EventSeq> {
        let bytes = payload.len();
        let mut evicted_any = false;
        let (streams, attached) = (&mut self.streams, &mut self.attached_unwritten);
        let id = self.id;
        let seq = self
            .ring
            .try_append(key, payload, |ev: Evicted| {
                evicted_any = true;
                if let Some(s) = streams.get_mut(&ev.stream) {
                    s.evicted_through = ev.seq;
                    s.first_held = ev.next_in_stream;
                    if ev.seq > s.written {
                        crate::logging::limited!(
                            crate::logging::Kind::Loss,
                            tracing::Level::WARN,
                            session = %id.to_header(),
                            stream = ev.stream.0,
                            seq = ev.seq.0,
                            core = id.core,
                            node = id.node,
                            owed = s.is_owed(),
                            culprit = "us",
                            reason = "replay ring full (--replay-bytes, --replay-events)",
                            "an event not yet delivered was evicted: the client gets a gap"
                        );
                        let lost = Unwritten { bytes: ev.bytes, events: 1 };
                        s.unwritten.sub(lost);
                        if s.is_attached() {
                            attached.sub(lost);
                        }
                    }
                }
            })
            .ok()?;
        if let Some(mirror) = self.mirror.as_mut() {
            // The appended bytes, copied: into its run for a gathered event, into its record
            // for one queued alone (the ring may hold them without their opening).
            if self.ring.get(seq).is_some() {
                let first_kept = evicted_any.then(|| self.ring.oldest().map_or(seq.0, |s| s.0));
                let stream = key.0;
                let appended =
                    SessionChange::EventAppended { stream, seq: seq.0, payload, first_kept };
                if mirror.observe(appended) {
                    log_not_durable(self.id);
                }
            }
        }
        let s = self.streams.get_mut(&key)?;
        s.produced = seq;
        let appended = Unwritten { bytes, events: 1 };
        s.unwritten.add(appended);
        if s.is_attached() {
            self.attached_unwritten.add(appended);
        }
        if s.first_held.is_none() {
            s.first_held = Some(seq);
        }
        Some(seq)
    }

    /// Appends the final response and ends the request (`Run::Finished`). Ignored when the
    /// stream already ended (cancelled, dropped, or failed earlier). The payload is copied into
    /// the ring.
    pub fn finish(&mut self, key: StreamKey, payload: impl AsRef<[u8]>) {
        let payload = payload.as_ref();
        if self.streams.get(&key).is_none_or(|s| s.run != Run::Running) {
            return;
        }
        let event_bytes = payload.len();
        let before_final = self.streams.get(&key).map_or(EventSeq(0), |s| s.produced);
        self.observe(SessionChange::TransitionBegan);
        match self.append_to_ring(key, payload) {
            Some(final_seq) => self.end_run(key, Run::Finished { final_seq, before_final }),
            None => self.fail_oversize(key, event_bytes),
        }
        self.observe(SessionChange::TransitionEnded);
    }

    /// Ends a request whose event (`event_bytes` long) cannot fit the ring at all: its final
    /// response becomes a -32603 error naming `--replay-bytes`, and its tool is told to stop.
    fn fail_oversize(&mut self, key: StreamKey, event_bytes: usize) {
        let Some(s) = self.streams.get(&key) else { return };
        let mut payload = Vec::with_capacity(192);
        let replay_bytes = self.ring.bytes_max();
        crate::wire::push_oversize_error(
            &mut payload,
            s.request_id.as_ref(),
            event_bytes,
            replay_bytes,
        );
        let before_final = s.produced;
        match self.append_to_ring(key, &payload) {
            Some(final_seq) => self.end_run(key, Run::Finished { final_seq, before_final }),
            // The error itself does not fit (a ring of a few bytes): end without a result.
            None => self.end_run(key, Run::Dropped),
        }
        self.cancel_tool(key);
    }

    /// The single place a run ends.
    fn end_run(&mut self, key: StreamKey, run: Run) {
        let Some(s) = self.streams.get_mut(&key) else { return };
        debug_assert!(s.run == Run::Running || run == Run::Dropped, "a run ends once");
        s.run = run;
        s.notify(|w| &w.events);
        s.notify(|w| &w.room);
        self.refresh(key);
        // A finished run is mirrored with its final event (a dropped one has no record).
        if matches!(run, Run::Finished { .. }) {
            self.observe_stream(key);
        }
        if let Some(rare) = self.rare.as_deref() {
            if !rare.audited.is_empty() {
                self.audit_ended(key);
            }
        }
    }

    /// Gives audited call `pending` (`--audit-log`) its line when the run of `key` ends: now
    /// when it has ended (an instant tool), else at its end (`end_run`).
    pub(crate) fn audit_at_end(&mut self, key: StreamKey, pending: crate::audit::Pending) {
        match self.final_payload(key) {
            Some(payload) => pending.end(audit_ending(payload)),
            None => self.rare_mut().audited.push((key, pending)),
        }
    }

    /// The line of the audited call on `key`, if any, from its final response.
    fn audit_ended(&mut self, key: StreamKey) {
        let Some(rare) = self.rare.as_deref_mut() else { return };
        let Some(at) = rare.audited.iter().position(|(k, _)| *k == key) else { return };
        let (_, pending) = rare.audited.swap_remove(at);
        let payload = self.final_payload(key).flatten();
        pending.end(audit_ending(payload));
    }

    /// Tells the running tool to stop (its outcome is ignored from now on).
    fn cancel_tool(&mut self, key: StreamKey) {
        if let Some(s) = self.streams.get_mut(&key) {
            s.cancelled = true;
            s.notify(|w| &w.cancel);
            s.notify(|w| &w.events);
            s.notify(|w| &w.room);
        }
    }

    /// Recomputes whether a stream is owed and settled, keeping the session's counters exact.
    /// Every transition ends here; it is O(1) (the debug recount is O(streams)).
    fn refresh(&mut self, key: StreamKey) {
        // The clock is read only on a change that records an instant (a call refreshes its
        // stream about five times and changes twice at most): ~40 instructions a read.
        let Some(s) = self.streams.get_mut(&key) else { return };
        let owed = s.is_owed();
        if owed != s.owed_counted {
            s.owed_counted = owed;
            if owed {
                self.owed_count += 1;
                self.tally.owed.set(self.tally.owed.get() + 1);
                s.owed_since = Some(Instant::now());
            } else {
                self.owed_count -= 1;
                self.tally.owed.set(self.tally.owed.get() - 1);
                s.owed_since = None;
            }
            // `notify_owed`, with the stream still borrowed.
            if let Some(signal) = self.rare.as_deref().and_then(|rare| rare.owed_signal.as_ref()) {
                signal.notify_all();
            }
        }
        // Settling is permanent (delivered never goes back), so retention counts from the first
        // time; a later resume of the settled stream does not extend it.
        let mut settled_now = false;
        if s.is_settled() && s.settled_at.is_none() {
            s.settled_at = Some(Instant::now());
            settled_now = s.kind == StreamKind::Request;
            if s.kind == StreamKind::Request {
                self.settled_order.push_back(key);
                if self.settled_order.len() > 2 * self.streams_max as usize {
                    let streams = &self.streams;
                    self.settled_order.retain(|k| streams.contains_key(k));
                }
            }
        }
        if settled_now {
            self.observe_stream(key);
        }
        self.debug_check_counts();
    }

    /// Recounts owed and replaying streams and compares with the counters (debug builds).
    fn debug_check_counts(&self) {
        if cfg!(debug_assertions) {
            let owed = self.streams.values().filter(|s| s.is_owed()).count();
            let replaying = self.streams.values().filter(|s| s.is_replaying()).count();
            assert_eq!(owed, self.owed_count(), "owed count drifted");
            assert_eq!(replaying, self.replaying_count(), "replaying count drifted");
            assert!(self.streams.values().all(|s| s.owed_counted == s.is_owed()));
            let mut attached = Unwritten::default();
            self.streams
                .values()
                .filter(|s| s.is_attached())
                .for_each(|s| attached.add(s.unwritten));
            assert_eq!(attached, self.attached_unwritten, "attached unwritten drifted");
        }
    }

    /// Sets the writer, keeping the replaying count exact.
    fn set_writer(&mut self, key: StreamKey, writer: Writer) {
        let Some(s) = self.streams.get_mut(&key) else { return };
        let was = s.is_replaying();
        let was_attached = s.is_attached();
        let was_live = s.is_live();
        s.writer = writer;
        match (was_live, s.is_live()) {
            (false, true) => self.tally.live.set(self.tally.live.get() + 1),
            (true, false) => self.tally.live.set(self.tally.live.get() - 1),
            _ => {}
        }
        match (was_attached, s.is_attached()) {
            (false, true) => self.attached_unwritten.add(s.unwritten),
            (true, false) => self.attached_unwritten.sub(s.unwritten),
            _ => {}
        }
        let now = s.is_replaying();
        s.notify(|w| &w.events);
        s.notify(|w| &w.room);
        if was != now {
            if now {
                self.replaying_count += 1;
            } else {
                self.replaying_count -= 1;
            }
            self.notify_owed();
        }
        self.refresh(key);
    }

    /// A writer takes over a stream; any older writer sees its epoch superseded and stops.
    pub fn attach(&mut self, key: StreamKey) -> Option<u64> {
        let s = self.streams.get_mut(&key)?;
        let epoch = s.next_epoch;
        s.next_epoch += 1;
        self.set_writer(key, Writer::Attached { epoch, replaying: false });
        Some(epoch)
    }

    /// The answer stream of a request just opened: attached, written from its priming event.
    pub fn attach_fresh(&mut self, key: StreamKey) -> Option<(u64, EventSeq)> {
        let epoch = self.attach(key)?;
        Some((epoch, self.streams.get(&key)?.first))
    }

    /// A resume (GET + Last-Event-ID `after`): the client holds everything up to `after`; the
    /// stream is attached, replaying while it has a backlog (CONTRACT §4 step 4).
    pub fn attach_resume(&mut self, key: StreamKey, after: EventSeq) -> Option<u64> {
        self.mark_delivered(key, after);
        let s = self.streams.get_mut(&key)?;
        s.acknowledged = s.acknowledged.max(after);
        let backlog = s.produced > after || s.run != Run::Running;
        let epoch = s.next_epoch;
        s.next_epoch += 1;
        self.set_writer(key, Writer::Attached { epoch, replaying: backlog });
        Some(epoch)
    }

    /// The writer with `epoch` let go (connection lost or done).
    pub fn detach(&mut self, key: StreamKey, epoch: u64) {
        if self.streams.get(&key).is_some_and(|s| s.is_attached_by(epoch)) {
            self.set_writer(key, Writer::Detached);
        }
    }

    /// The writer with `epoch` closed its connection on purpose (SEP-1699): parked, not owed.
    pub fn park(&mut self, key: StreamKey, epoch: u64) {
        if self.streams.get(&key).is_some_and(|s| s.is_attached_by(epoch)) {
            self.set_writer(key, Writer::Parked);
        }
    }

    /// The writer with `epoch`, whose cursor is at `after`, may have sent everything the
    /// stream produced: then it is no longer replaying. Its own cursor decides, not `written`
    /// (the furthest any writer got): a resume from before an earlier writer's last write is
    /// still replaying while it catches up (CONTRACT §4 step 4 holds new requests meanwhile).
    pub fn caught_up(&mut self, key: StreamKey, epoch: u64, after: EventSeq) {
        let Some(s) = self.streams.get(&key) else { return };
        if s.is_attached_by(epoch) && s.is_replaying() && s.produced <= after {
            self.set_writer(key, Writer::Attached { epoch, replaying: false });
        }
    }

    /// The writer with `epoch` finished sending everything up to `seq`: the events it sent
    /// for the first time leave the stream's unwritten count (O(events sent), O(1) when it
    /// sent all the stream produced), and a producer paused on the stream's room is woken.
    pub fn wrote(&mut self, key: StreamKey, epoch: u64, seq: EventSeq) {
        let Some(s) = self.streams.get(&key) else { return };
        if !s.is_attached_by(epoch) || seq <= s.written {
            return;
        }
        let sent = if seq >= s.produced {
            // Everything the stream holds after `written` is sent: that is its unwritten count
            // (evictions take theirs out as they happen), so no walk of the ring (every
            // stream's last send, an instant call's only one: four ring reads, callgrind).
            debug_assert_eq!(s.unwritten, self.sent_between(key, s.written, s.first_held, seq));
            s.unwritten
        } else {
            self.sent_between(key, s.written, s.first_held, seq)
        };
        let Some(s) = self.streams.get_mut(&key) else { return };
        s.written = seq;
        s.unwritten.sub(sent);
        self.attached_unwritten.sub(sent);
        s.notify(|w| &w.room);
        self.debug_check_counts();
    }

    /// What stream `key` holds after `written` up to `seq`: the events a writer sent for the
    /// first time. The first event after `written` is its successor when held, else the
    /// stream's oldest held event `first_held` (eviction is oldest-first, so everything held
    /// is after an evicted one).
    fn sent_between(
        &self,
        key: StreamKey,
        written: EventSeq,
        first_held: Option<EventSeq>,
        seq: EventSeq,
    ) -> Unwritten {
        let first = match self.ring.get(written) {
            Some(ev) if ev.stream == key => ev.next_in_stream,
            _ => first_held,
        };
        let mut sent = Unwritten::default();
        if let Some(first) = first {
            for ev in self.ring.iter_from(first).take_while(|ev| ev.seq <= seq) {
                sent.add(Unwritten { bytes: ev.len(), events: 1 });
            }
        }
        sent
    }

    /// False while stream `key` is attached and still running, and the attached streams of the
    /// session together hold their share of the ring in events not yet written
    /// (`config::UNWRITTEN_SHARE_DIVISOR`): its producer waits on the stream's `room` signal
    /// rather than evict what a reading client has not got. A stream that is detached (its
    /// client gone), parked, ended or removed always has room: eviction and the -31003 gap on
    /// resume are the answer there (CONTRACT §3). O(1).
    pub fn has_room(&self, key: StreamKey) -> bool {
        let Some(s) = self.streams.get(&key) else { return true };
        let (held, share) = (self.attached_unwritten, self.unwritten_share());
        self.closed
            || !s.is_attached()
            || !s.is_running()
            || (held.bytes < share.bytes && held.events < share.events)
    }

    /// The client holds everything up to `seq` of this stream.
    pub fn mark_delivered(&mut self, key: StreamKey, seq: EventSeq) {
        if let Some(s) = self.streams.get_mut(&key) {
            if seq > s.delivered {
                s.delivered = seq;
            }
        }
        self.refresh(key);
    }

    /// The client holds everything the stream produced (its final response was received).
    pub fn mark_all_delivered(&mut self, key: StreamKey) {
        if let Some(produced) = self.streams.get(&key).map(|s| s.produced) {
            self.mark_delivered(key, produced);
        }
    }

    /// The writer with `epoch` sent the stream's end (its final response) and the client holds
    /// all of it: `mark_all_delivered` then `detach` in one, with one `refresh` where the two
    /// made two and five stream probes (every instant call ends here). The same end state:
    /// while a writer is attached the stream is not owed, so the refresh between the two only
    /// settled it earlier, and nothing reads the writer of a settling stream's record.
    pub fn delivered_and_detach(&mut self, key: StreamKey, epoch: u64) {
        let Some(s) = self.streams.get_mut(&key) else { return };
        s.delivered = s.delivered.max(s.produced);
        if s.is_attached_by(epoch) {
            self.set_writer(key, Writer::Detached);
        } else {
            self.refresh(key);
        }
    }

    /// The final response of an ended request: `Some(Some(payload))` once finished, `Some(None)`
    /// when it ended without one (cancelled), `None` while it runs.
    pub fn final_payload(&self, key: StreamKey) -> Option<Option<&[u8]>> {
        let s = self.streams.get(&key)?;
        match s.run {
            Run::Running => None,
            Run::Dropped => Some(None),
            Run::Finished { final_seq, .. } => {
                // A final response opens with `{"jsonrpc":"2.0","id":`, so the ring holds it
                // whole (the assertion before `EVENT_ID_LEN_MAX`).
                Some(self.ring.get(final_seq).filter(|e| e.stream == key).and_then(|e| e.whole()))
            }
        }
    }

    /// SEP-1699: a tool asks to close the connection carrying its stream.
    pub fn request_close(&mut self, key: StreamKey) {
        if let Some(s) = self.streams.get_mut(&key) {
            s.close_requested = true;
            s.notify(|w| &w.events);
        }
    }

    /// True once per `request_close`: the writer ends its response and parks.
    pub fn take_close_request(&mut self, key: StreamKey) -> bool {
        self.streams.get_mut(&key).is_some_and(|s| std::mem::take(&mut s.close_requested))
    }

    /// Drops a stream's tail and stops its tool (cancelled, abandoned or session end).
    pub fn drop_stream(&mut self, key: StreamKey) {
        self.cancel_tool(key);
        if self.streams.get(&key).is_some_and(|s| s.run != Run::Dropped) {
            self.end_run(key, Run::Dropped);
        }
    }

    /// Where a writer (or a resume) whose client holds everything up to `after` continues.
    pub fn resume_start(
        &self,
        key: StreamKey,
        after: EventSeq,
    ) -> Result<ResumeStart, CursorError> {
        let s = self.streams.get(&key).ok_or(CursorError::Foreign)?;
        // Looked up once: every writer's batch asks (callgrind, a live stream's event).
        let held = self.ring.get(after);
        if after < s.first || held.is_some_and(|ev| ev.stream != key) {
            return Err(CursorError::Foreign);
        }
        if after > s.produced {
            return Err(CursorError::Future);
        }
        if after < s.evicted_through {
            return Ok(ResumeStart::Gap { lost_to: s.evicted_through });
        }
        let next = match held {
            Some(ev) if ev.stream == key => ev.next_in_stream,
            Some(_) => return Err(CursorError::Foreign),
            // Evicted (after == evicted_through): everything later of this stream is held.
            None if after == s.evicted_through => s.first_held,
            None => return Err(CursorError::Foreign),
        };
        Ok(match next {
            Some(seq) => ResumeStart::From(seq),
            None => ResumeStart::Caught,
        })
    }

    /// How many events of stream `key` a resume from `start` replays from the ring (walks
    /// them: a resume writes each of them anyway).
    pub fn replay_len(&self, key: StreamKey, start: ResumeStart) -> u64 {
        let ResumeStart::From(mut seq) = start else { return 0 };
        let mut events = 0;
        while let Some(ev) = self.ring.get(seq).filter(|ev| ev.stream == key) {
            events += 1;
            match ev.next_in_stream {
                Some(next) => seq = next,
                None => break,
            }
        }
        events
    }

    /// The `attached_unwritten` at which producers of attached streams are paused
    /// (`config::UNWRITTEN_SHARE_DIVISOR` of the ring's bounds, at least one each); derived
    /// from the ring, not stored, to keep the session small.
    fn unwritten_share(&self) -> Unwritten {
        let divisor = crate::config::UNWRITTEN_SHARE_DIVISOR;
        Unwritten {
            bytes: (self.ring.bytes_max() / divisor).max(1),
            events: (self.ring.events_max() / divisor).max(1),
        }
    }

    /// What a held POST waits on: woken whenever the owed or replaying count changes.
    pub fn owed_signal(&mut self) -> Rc<Signal> {
        self.rare_mut().owed_signal.get_or_insert_with(Rc::default).clone()
    }

    /// Wakes the held POSTs, if any was ever held.
    fn notify_owed(&self) {
        if let Some(signal) = self.rare.as_deref().and_then(|rare| rare.owed_signal.as_ref()) {
            signal.notify_all();
        }
    }

    /// The rare parts, boxed now if they were not yet.
    fn rare_mut(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    /// The subject whose token opened the session (`None`: authorization is off). A request
    /// naming the session with another subject's token, or none, finds no session (CONTRACT
    /// §8: 404, as for an unknown id); a new token of the same subject continues it.
    pub fn subject(&self) -> Option<&str> {
        self.rare.as_deref().and_then(|rare| rare.subject.as_deref())
    }

    /// The opener's subject and `Authorization` value, for the session's calls through a
    /// shared upstream link (a per-session link has them from `SessionStart`).
    pub fn caller(&self) -> Option<&Caller> {
        self.rare.as_deref().and_then(|rare| rare.caller.as_ref())
    }

    /// Records who opened the session (`subject()`, `caller()`); nothing is boxed when
    /// authorization is off (both `None`).
    pub fn set_opener(&mut self, subject: Option<Box<str>>, caller: Option<Caller>) {
        if subject.is_some() || caller.is_some() || self.rare.is_some() {
            let rare = self.rare_mut();
            rare.subject = subject;
            rare.caller = caller;
        }
    }

    /// Server→client requests awaiting their answer.
    pub fn pending_client_len(&self) -> usize {
        self.rare.as_deref().map_or(0, |rare| rare.pending_client.len())
    }

    /// Registers a server→client request and returns its id.
    pub fn add_pending_client(&mut self, pending: PendingClientRequest) -> u64 {
        let rare = self.rare_mut();
        rare.client_requests_sent += 1;
        let id = rare.client_requests_sent;
        rare.pending_client.insert(id, pending);
        id
    }

    /// Takes the server→client request `id` (its answer arrived).
    pub fn take_pending_client(&mut self, id: u64) -> Option<PendingClientRequest> {
        self.rare.as_deref_mut()?.pending_client.remove(&id)
    }

    /// Ends everything: writers stop, tools are cancelled (DELETE or expiry).
    pub fn close(&mut self) {
        self.closed = true;
        let keys: Vec<StreamKey> = self.streams.keys().copied().collect();
        for k in keys {
            self.cancel_tool(k);
        }
        self.notify_owed();
    }

    /// Keys of streams to act on at a reaper tick: (owed too long, settled past retention).
    pub fn overdue(
        &self,
        now: Instant,
        owed_timeout: std::time::Duration,
        retention: std::time::Duration,
    ) -> (Vec<StreamKey>, Vec<StreamKey>) {
        let mut abandoned = Vec::new();
        let mut expired = Vec::new();
        for s in self.streams.values() {
            if s.owed_since.is_some_and(|t| now.duration_since(t) >= owed_timeout) {
                abandoned.push(s.key);
            }
            if s.kind == StreamKind::Request
                && !s.is_attached()
                && s.settled_at.is_some_and(|t| now.duration_since(t) >= retention)
            {
                expired.push(s.key);
            }
        }
        (abandoned, expired)
    }

    /// The earliest instant a reaper tick may find something to do for this session (the
    /// timer wheel's invariant: never later than any deadline it has now or can get without a
    /// request, `timers`); at or before `now` means the next tick. Called after `overdue` and
    /// `is_expired` found nothing due. O(streams).
    pub(crate) fn next_deadline(
        &self,
        now: Instant,
        cfg: &crate::config::SessionsConfig,
    ) -> Instant {
        let idle_at = self.last_active + cfg.session_idle;
        // Past its idle time but busy: it ends the tick after its last stream lets go, which
        // only a tick notices (the cost of sessions a stream keeps past their idle time).
        let mut next = if idle_at <= now { now } else { idle_at };
        let soonest = now + cfg.owed_timeout.min(cfg.stream_retention);
        for s in self.streams.values() {
            if let Some(since) = s.owed_since {
                next = next.min(since + cfg.owed_timeout);
            }
            if s.kind != StreamKind::Request {
                continue;
            }
            next = next.min(match s.settled_at {
                // Retention runs only while detached: an attached stream past it ends the
                // tick after it detaches.
                Some(at) if s.is_attached() => (at + cfg.stream_retention).max(now),
                Some(at) => at + cfg.stream_retention,
                // It may owe or settle later without any request naming the session.
                None => soonest,
            });
        }
        next
    }

    /// Idle for `idle` and nothing running or attached: the session may be ended. The clock is
    /// compared first, so the stream scan runs only for sessions already past their idle time.
    pub fn is_expired(&self, now: Instant, idle: std::time::Duration) -> bool {
        now.duration_since(self.last_active) >= idle && self.is_idle()
    }

    /// No connection is writing any of its streams and no request runs. The standalone GET
    /// stream "runs" for its whole life, so it keeps a session alive only while attached: a
    /// client that opened a GET and left must not keep its session forever.
    pub fn is_idle(&self) -> bool {
        !self
            .streams
            .values()
            .any(|s| s.is_attached() || (s.kind == StreamKind::Request && s.is_running()))
    }

    /// Encodes the wire event id of `seq` on `stream`: `<tag>-<stream>-<seq>` in hex.
    pub fn push_event_id(&self, out: &mut Vec<u8>, stream: StreamKey, seq: EventSeq) {
        push_event_id(out, self.tag_of(seq), stream, seq);
    }

    /// Writes the wire event id of `seq` on `stream` into `out`; its length.
    #[inline]
    pub fn event_id_into(
        &self,
        out: &mut [u8; EVENT_ID_LEN_MAX],
        stream: StreamKey,
        seq: EventSeq,
    ) -> usize {
        event_id_into(out, self.tag_of(seq), stream, seq)
    }

    /// The tag of event `seq`'s id: the session's, or, for an event from before an adoption,
    /// the tag it had then (`Rare::earlier_tags`; none for a session never adopted).
    #[inline]
    pub fn tag_of(&self, seq: EventSeq) -> u32 {
        let earlier = self.rare.as_deref().map_or(&[][..], |rare| &rare.earlier_tags[..]);
        earlier.iter().find(|&&(until, _)| seq < until).map_or(self.tag, |&(_, tag)| tag)
    }

    /// Gives the events from the ring's next one on the id tag `tag` (adoption, `restore`);
    /// the events before keep theirs. A tag older than every retained stream's first event
    /// and the ring's oldest is forgotten (no client can name one of its events but as a
    /// cursor the session would refuse anyway), so the list never outgrows the adoptions
    /// whose streams the session still retains.
    pub(crate) fn retag(&mut self, tag: u32) {
        // The oldest id a client may still name: a retained stream's first event (evicted
        // events of it are answered with the gap notice, which needs their tag).
        let first = self.streams.values().map(|st| st.first).min();
        let oldest = first.into_iter().chain(self.ring.oldest()).min();
        let (until, before) = (self.ring.next_seq(), self.tag);
        let rare = self.rare_mut();
        rare.earlier_tags.retain(|&(end, _)| oldest.is_some_and(|o| end > o));
        rare.earlier_tags.push((until, before));
        self.tag = tag;
    }

    /// The tags before adoptions, as the store keeps them (`SessionImage::earlier_tags`).
    pub(crate) fn set_earlier_tags(&mut self, tags: &[(u64, u32)]) {
        if !tags.is_empty() {
            let rare = self.rare_mut();
            rare.earlier_tags = tags.iter().map(|&(until, tag)| (EventSeq(until), tag)).collect();
        }
    }

    /// The cursor a `Last-Event-ID` of stream `key` names (`tag`, `after` parsed from it), in
    /// this session's numbering; `None` when the session never issued it. An id with the tag
    /// of a node an adoption took the session from, past what the store held then, was issued
    /// by that node and never mirrored: the client holds every event of the stream the store
    /// held (a stream's events arrive in order), so the resume continues from the stream's
    /// last event below that adoption's first sequence number. For a stream the adoption
    /// ended with `-31006` the client gets that final, whose id (the adopter's tag) is new to
    /// it, also after later adoptions.
    pub fn cursor(&self, tag: u32, key: StreamKey, after: EventSeq) -> Option<EventSeq> {
        if tag == self.tag_of(after) {
            return Some(after);
        }
        let rare = self.rare.as_deref()?;
        let at = rare.earlier_tags.iter().position(|&(until, t)| t == tag && after >= until)?;
        if at + 1 == rare.earlier_tags.len() {
            // This node's own adoption: the cut-off point of each stream it ended is known.
            let &(_, held) = rare.cut_off.iter().find(|&&(k, _)| k == key)?;
            return Some(held);
        }
        self.stream_last_below(key, rare.earlier_tags[at].0)
    }

    /// The last event of stream `key` before sequence number `until` (held in the ring, or the
    /// last one evicted), or `None` when the stream has none there. Walks the stream's held
    /// events: only for a cursor of an earlier adoption (`cursor`), rare and bounded by the
    /// ring.
    fn stream_last_below(&self, key: StreamKey, until: EventSeq) -> Option<EventSeq> {
        let st = self.streams.get(&key)?;
        let evicted = st.evicted_through;
        let mut last = (evicted >= st.first && evicted < until).then_some(evicted);
        let mut next = st.first_held;
        while let Some(seq) = next.filter(|&seq| seq < until) {
            last = Some(seq);
            next = self.ring.get(seq).and_then(|ev| ev.next_in_stream);
        }
        last
    }

    /// Reports `change` to the session's observer, the durable mirror (none without
    /// `--durable`). Inlined: without a mirror it is one test, and a call makes about six
    /// (`open`, `finish`, a removal).
    #[inline]
    fn observe(&mut self, change: SessionChange<'_>) {
        if let Some(mirror) = self.mirror.as_mut() {
            if mirror.observe(change) {
                log_not_durable(self.id);
            }
        }
    }

    /// Reports stream `key`'s record as it is now (opened, finished, settled); built only
    /// when there is an observer.
    fn observe_stream(&mut self, key: StreamKey) {
        let Some(mirror) = self.mirror.as_mut() else { return };
        let Some(stream) = self.streams.get(&key) else { return };
        let changed = SessionChange::StreamChanged { key: key.0, record: stream_record(stream) };
        if mirror.observe(changed) {
            log_not_durable(self.id);
        }
    }

    /// Whether anything observes the session's changes (the durable mirror, `--durable`).
    pub(crate) fn is_observed(&self) -> bool {
        self.mirror.is_some()
    }

    /// A tool's future is about to be polled (`legacy::stream`); `poll_ended` follows before
    /// anything is awaited. The mirror gathers the events of the poll into one record.
    pub(crate) fn poll_began(&mut self) {
        self.observe(SessionChange::PollBegan);
    }

    /// The poll `poll_began` announced ended.
    pub(crate) fn poll_ended(&mut self) {
        self.observe(SessionChange::PollEnded);
    }

    /// Whether the store holds this session whole right now (a peer could adopt it).
    pub(crate) fn is_durable(&self) -> bool {
        self.mirror.as_deref().is_some_and(SessionMirror::is_durable)
    }

    /// The mirror lost some of this session (or its queue was full): not durable until the
    /// core rewrites it whole (`mirror_catch_up`).
    pub(crate) fn mirror_lost(&mut self) {
        if self.mirror.as_deref_mut().is_some_and(SessionMirror::lost) {
            log_not_durable(self.id);
        }
    }

    /// Queues the whole session when it is not durable and the store is up and has room: the
    /// reaper's tick, and a new or adopted session's first write. Whether it is durable now.
    pub(crate) fn mirror_catch_up(&mut self) -> bool {
        let Some(mut mirror) = self.mirror.take() else { return false };
        let durable = mirror.catch_up(|sid, client, owner| self.image(sid, client, owner));
        self.mirror = Some(mirror);
        durable
    }

    /// Ends the session's mirror (DELETE or expiry): its keys go from the store.
    pub(crate) fn mirror_end(&mut self) {
        if let Some(mirror) = self.mirror.take() {
            mirror.end();
        }
    }

    /// The whole session as the store should hold it under `sid`, owned by `owner`.
    fn image(&self, sid: &std::sync::Arc<str>, client: &str, owner: u8) -> SessionImage {
        let mut streams: Vec<(u32, StreamRecord)> =
            self.streams.values().map(|s| (s.key.0, stream_record(s))).collect();
        streams.sort_by_key(|(key, _)| *key);
        // Every event the ring holds, of every stream, in order: `iter_from` replays one
        // stream only, and an image missing another stream's events left the store with a gap
        // (a session rewritten after a store outage was then refused by its adopter).
        let events = match self.ring.oldest() {
            Some(first) => (first.0..self.ring.next_seq().0)
                .filter_map(|seq| self.ring.get(EventSeq(seq)))
                .map(|e| EventImage {
                    seq: e.seq.0,
                    stream: e.stream.0,
                    data: [e.prefix(), e.payload].concat().into(),
                })
                .collect(),
            None => Vec::new(),
        };
        SessionImage {
            sid: sid.clone(),
            owner,
            tag: self.tag,
            earlier_tags: self.rare.as_deref().map_or_else(Vec::new, |rare| {
                rare.earlier_tags.iter().map(|&(until, tag)| (until.0, tag)).collect()
            }),
            version: self.version().to_owned(),
            subject: self.subject().map(str::to_owned),
            client: client.to_owned(),
            log: self.log_level.as_str().to_owned(),
            streams,
            events,
            next_seq: self.ring.next_seq().0,
        }
    }
}

/// Session `id` stopped being durable: the store is slow or down, or the core's mirror queue
/// was full.
fn log_not_durable(id: SessionId) {
    crate::logging::limited!(
        crate::logging::Kind::Loss,
        tracing::Level::WARN,
        session = %id.to_header(),
        core = id.core,
        node = id.node,
        culprit = "us",
        reason = "durable store slow or down, or the core's mirror queue full",
        "session not durable until it is rewritten to the store"
    );
}

/// What `Session::open` opens (and `restore` puts back).
struct Opening {
    kind: StreamKind,
    request_id: Option<RawId>,
    fingerprint: u64,
    idempotency_key: Option<Box<str>>,
    progress_token: Option<RawId>,
}

/// A stream as the durable mirror's records describe it.
fn stream_record(s: &StreamState) -> StreamRecord {
    StreamRecord {
        kind: std::borrow::Cow::Borrowed(match s.kind {
            StreamKind::Request => "post",
            StreamKind::Standalone => "standalone",
        }),
        rid: s.request_id.as_ref().map(|id| crate::durable::keys::ShortText::copy(id.as_bytes())),
        fp: s.fingerprint,
        key: s.idempotency_key.as_deref().map(str::to_owned),
        first: s.first.0,
        final_seq: s.final_seq().map(|seq| seq.0),
        settled: s.is_settled(),
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // The ring's bytes and the streams leave the core's totals with the session.
        self.tally.sub(self.part());
    }
}

/// What the sessions of one core add up to, kept exact on every change (each session adds and
/// removes its own part), so that the reaper reads the gauges and walks no session.
#[derive(Debug, Default)]
pub struct CoreTally {
    /// Replay-ring bytes (`--core-buffer-bytes`, `tidemark_ring_bytes`).
    pub(crate) ring_bytes: Cell<usize>,
    /// Request streams owed (`tidemark_streams_owed`).
    pub(crate) owed: Cell<usize>,
    /// Request streams a connection writes (`tidemark_streams_live`).
    pub(crate) live: Cell<usize>,
}

impl CoreTally {
    fn add(&self, [bytes, owed, live]: [usize; 3]) {
        self.ring_bytes.set(self.ring_bytes.get() + bytes);
        self.owed.set(self.owed.get() + owed);
        self.live.set(self.live.get() + live);
    }

    fn sub(&self, [bytes, owed, live]: [usize; 3]) {
        self.ring_bytes.set(self.ring_bytes.get() - bytes);
        self.owed.set(self.owed.get() - owed);
        // Saturating: a unit test may set a stream's writer by hand, past `set_writer`.
        self.live.set(self.live.get().saturating_sub(live));
    }
}

// `final_payload` lends a final response from the ring as one slice: a final response opens
// with `RESPONSE_PREFIX`, which parts from the opening the ring does not store
// (`PROGRESS_PREFIX`) before either ends, so the ring always holds a final response whole.
const _: () = {
    use crate::wire::{jsonrpc::RESPONSE_PREFIX, notification::PROGRESS_PREFIX};
    let (response, elided) = (RESPONSE_PREFIX, PROGRESS_PREFIX);
    let mut at = 0;
    while at < response.len() && at < elided.len() && response[at] == elided[at] {
        at += 1;
    }
    assert!(at < response.len() && at < elided.len(), "a response could open as progress");
};

/// Longest wire event id: 8 + 1 + 8 + 1 + 16 hex digits and dashes.
pub(crate) const EVENT_ID_LEN_MAX: usize = 34;

/// `<tag:8 hex>-<stream hex>-<seq hex>`.
pub fn push_event_id(out: &mut Vec<u8>, tag: u32, stream: StreamKey, seq: EventSeq) {
    let mut id = [0u8; EVENT_ID_LEN_MAX];
    let n = event_id_into(&mut id, tag, stream, seq);
    out.extend_from_slice(&id[..n]);
}

/// Writes the wire event id into a stack buffer (no allocation on the SSE write path); returns
/// its length.
pub(crate) fn event_id_into(
    out: &mut [u8; EVENT_ID_LEN_MAX],
    tag: u32,
    stream: StreamKey,
    seq: EventSeq,
) -> usize {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out[..8].copy_from_slice(&hex8(tag));
    let mut n = 8;
    for value in [u64::from(stream.0), seq.0] {
        out[n] = b'-';
        n += 1;
        let digits = (64 - value.leading_zeros()).div_ceil(4).max(1);
        for i in (0..digits).rev() {
            out[n] = HEX[((value >> (i * 4)) & 15) as usize];
            n += 1;
        }
    }
    n
}

/// `tag`'s eight lower-case hex digits, most significant first, computed in one word (an
/// event id's tag always has eight; the digit loop cost ~40 instructions an id, two ids an
/// echo: callgrind): each nibble spread to a byte of its own, then made a digit, `a`–`f`
/// where it is 10 or more.
#[inline]
fn hex8(tag: u32) -> [u8; 8] {
    let mut v = u64::from(tag);
    v = (v | v << 16) & 0x0000_ffff_0000_ffff;
    v = (v | v << 8) & 0x00ff_00ff_00ff_00ff;
    v = (v | v << 4) & 0x0f0f_0f0f_0f0f_0f0f;
    // 1 in each byte whose nibble is 10 or more (adding 6 carries it into bit 4).
    let letters = ((v + 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101;
    (v + 0x3030_3030_3030_3030 + letters * u64::from(b'a' - b'0' - 10)).to_be_bytes()
}

/// Parses a wire event id into (tag, stream, seq); `None` when malformed.
pub fn parse_event_id(text: &[u8]) -> Option<(u32, StreamKey, EventSeq)> {
    let mut parts = text.split(|&b| b == b'-');
    let tag = parts.next().filter(|p| p.len() == 8).and_then(id::parse_hex)?;
    let stream = parts.next().filter(|p| p.len() <= 8).and_then(id::parse_hex)?;
    let seq = parts.next().filter(|p| p.len() <= 16).and_then(id::parse_hex)?;
    if parts.next().is_some() {
        return None;
    }
    Some((
        u32::try_from(tag).ok()?,
        StreamKey(u32::try_from(stream).ok()?),
        EventSeq(u64::try_from(seq).ok()?),
    ))
}

/// `version`'s index in `LEGACY_VERSIONS` (callers pass one of them; anything else is the
/// newest's, 0).
fn version_index(version: &str) -> u8 {
    let index = LEGACY_VERSIONS.iter().position(|v| *v == version);
    debug_assert!(index.is_some(), "not a legacy revision: {version}");
    index.and_then(|i| u8::try_from(i).ok()).unwrap_or(0)
}

/// A limit from the configuration as a session keeps it: 32 bits, saturating.
fn saturating_u32(limit: usize) -> u32 {
    u32::try_from(limit).unwrap_or(u32::MAX)
}

/// The sessions of one core, and when each must next be looked at (`timers`).
pub struct SessionTable {
    /// Keyed by the low 64 of the id's 128 random bits: a bucket of 16 bytes, where the whole
    /// `u128` (aligned to 16) made it 32 (about 20 B an idle session at 100 k). A lookup still
    /// compares the whole id. The key is CSPRNG bits, so its hash is the key itself
    /// (`RandomWordMap`), not a mix.
    sessions: RandomWordMap<SessionRc>,
    /// Sessions whose key a live session already had (one chance in 2^64 a pair), by their
    /// whole random part: empty in practice, so a lookup costs one `is_empty` more.
    collided: RandomKeyMap<SessionRc>,
    /// Live sessions at most (`--max-sessions-per-core`); `initialize` past it gets 503.
    pub max: usize,
    /// One entry per session: the reaper's work list (`legacy::expire`).
    pub(crate) timers: timers::SessionTimers,
}

/// `SessionTable`'s key of `id`: the low 64 random bits (truncation meant).
fn table_key(id: &SessionId) -> u64 {
    id.random as u64
}

impl SessionTable {
    /// An empty table holding at most `max` sessions, with the default timeouts.
    pub fn new(max: usize) -> SessionTable {
        let cfg = crate::config::SessionsConfig::default();
        SessionTable::with_timeouts(max, &cfg)
    }

    /// An empty table holding at most `max` sessions of the timeouts in `cfg`: how soon a new
    /// session, or a stream a request opens, can come due (`timers`).
    pub(crate) fn with_timeouts(max: usize, cfg: &crate::config::SessionsConfig) -> SessionTable {
        let soonest = cfg.owed_timeout.min(cfg.stream_retention).min(cfg.session_idle);
        SessionTable {
            sessions: RandomWordMap::default(),
            collided: RandomKeyMap::default(),
            max,
            timers: timers::SessionTimers::new(soonest),
        }
    }

    /// Live sessions.
    pub fn len(&self) -> usize {
        self.sessions.len() + self.collided.len()
    }

    /// No live session.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// At `max`: a new session must be refused.
    pub fn is_full(&self) -> bool {
        self.len() >= self.max
    }

    /// Adds `session` and returns the shared handle the table keeps. It is armed as a request
    /// arms it (`keep_close`): the reaper looks at it then and re-arms it at its deadline.
    pub fn insert(&mut self, mut session: Session) -> SessionRc {
        let (key, random) = (table_key(&session.id), session.id.random);
        session.timer_entry = self.timers.arm(random, self.timers.latest_after_request());
        let rc = Rc::new(std::cell::RefCell::new(session));
        match self.sessions.entry(key) {
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(rc.clone());
            }
            std::collections::hash_map::Entry::Occupied(_) => {
                self.collided.insert(random, rc.clone());
            }
        }
        rc
    }

    /// The session `id` names, whole id compared (core and random part).
    #[inline]
    pub fn get(&self, id: &SessionId) -> Option<SessionRc> {
        let named = |s: &&SessionRc| s.borrow().id == *id;
        let found = self.sessions.get(&table_key(id)).filter(named);
        if found.is_none() && !self.collided.is_empty() {
            return self.collided.get(&{ id.random }).filter(named).cloned();
        }
        found.cloned()
    }

    /// Takes the session out and closes it (writers end, tools stop).
    pub fn remove(&mut self, id: &SessionId) -> Option<SessionRc> {
        let key = table_key(id);
        let s = match self.sessions.get(&key) {
            Some(s) if s.borrow().id.random == id.random => self.sessions.remove(&key),
            _ => self.collided.remove(&{ id.random }),
        }?;
        let entry = s.borrow().timer_entry;
        self.timers.cancel(id.random, entry);
        s.borrow_mut().close();
        Some(s)
    }

    /// A handle to every live session, in no order.
    pub fn all(&self) -> Vec<SessionRc> {
        self.sessions.values().chain(self.collided.values()).cloned().collect()
    }

    /// The session whose table key is `random` (an entry the timer wheel gave back).
    pub(crate) fn by_key(&self, random: u128) -> Option<SessionRc> {
        let whole = |s: &&SessionRc| s.borrow().id.random == random;
        let found = self.sessions.get(&(random as u64)).filter(whole);
        if found.is_none() && !self.collided.is_empty() {
            return self.collided.get(&random).cloned();
        }
        found.cloned()
    }

    /// A request named `session`: a stream it opens may come due within the wheel's
    /// `soonest`, so an entry armed later than that is brought forward (once per such period;
    /// otherwise three loads and a compare). Allocates nothing: the entry it frees is the one
    /// it takes.
    pub(crate) fn keep_close(&mut self, session: &mut Session) {
        let latest = self.timers.latest_after_request();
        if self.timers.due(session.timer_entry) > latest {
            self.timers.cancel(session.id.random, session.timer_entry);
            session.timer_entry = self.timers.arm(session.id.random, latest);
        }
    }

    /// Puts `session`, just popped off the wheel by the reaper, back on it at tick `due`.
    pub(crate) fn rearm(&mut self, session: &mut Session, due: u32) {
        session.timer_entry = self.timers.arm(session.id.random, due);
    }
}

#[cfg(test)]
mod lifecycle_tests;

/// The audit trail's ending of a run from its final response (`None`: it ended without one).
fn audit_ending(payload: Option<&[u8]>) -> crate::audit::Ending {
    payload.map_or(crate::audit::Ending::Cancelled, crate::wire::jsonrpc::audit_ending)
}

#[cfg(test)]
mod tests;
