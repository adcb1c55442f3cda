//! Goal: the stream lifecycle (`Run` × `Writer` and its cursors) keeps CONTRACT §4's bookkeeping
//! exact through any sequence of transitions: the owed and replaying counts the POST decision
//! reads, each stream's state, the `Last-Event-ID` hint rule, epochs (a superseded writer changes
//! nothing), dropped and finished streams refusing appends, and resume positions across ring
//! evictions (a gap exactly when events after the cursor were evicted, never a silent skip).
//!
//! Method: a proptest state machine. Random sequences of up to 60 transitions drive one `Session`
//! built with `Config::test_min()` (16 events, 4096 bytes, 4 streams, so evictions and a full
//! stream table happen) and, in lockstep, a small model written from CONTRACT §3–§4 and the
//! methods' docs, not from their code. After every step every observable of the session is
//! compared with the model: counters, each stream's state and cursors, the hint, the ring's
//! extent, the id/fingerprint/key maps, `overdue`, `is_idle`, `final_payload`. Writers are driven
//! both through the raw transitions (`attach*`, `wrote` + `caught_up`, `detach`, `park`) and
//! through the real writer bookkeeping (`stream::fill_batch` + `stream::after_send`), whose
//! output (event ids, gap report) is checked too. The session's own `debug_check_counts`
//! (a recount after every transition, debug builds) panics on drift; proptest shrinks that too.
//! Where the model deliberately follows the code rather than the docs, it says so: one inherent
//! limit (an evicted event of another stream reads as a gap, in `Model::resume_start`). The bug
//! this test found (`caught_up` judged by any writer's progress) has a regression test at the end.
//! Not covered: server→client requests (`pending_client`), the clock in `overdue` beyond "zero
//! grace", `is_expired`, the dedup `Rewrite`, and the standalone stream's own retention.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;
use proptest::prelude::*;

use super::*;
use crate::config::Config;
use crate::legacy::stream::{after_send, fill_batch, Batch, Cursor, OBSERVER_EPOCH};

/// `Config::test_min()`'s limits, which the model reproduces (asserted in `session`).
const EVENTS_MAX: usize = 16;
const BYTES_MAX: usize = 4096;
const STREAMS_MAX: usize = 4;
/// One byte more than the ring holds: the append ends the request (`fail_oversize`).
const OVERSIZE: usize = BYTES_MAX + 1;

fn session() -> Session {
    let cfg = Config::test_min();
    assert_eq!(
        (
            cfg.sessions.replay_events_max,
            cfg.sessions.replay_bytes_max,
            cfg.sessions.streams_per_session_max
        ),
        (EVENTS_MAX, BYTES_MAX, STREAMS_MAX),
        "the model assumes test_min's limits"
    );
    Session::new(SessionId { node: 0, core: 0, random: 7 }, 0xabcd, LEGACY_VERSIONS[0], &cfg)
}

/// A payload of `len` letters (no newline, no space, so SSE framing stays one `data:` line and
/// event ids are the only `id: ` lines) identifying the event it becomes.
fn payload(tag: u64, len: usize) -> Bytes {
    Bytes::from(vec![b'a' + (tag % 26) as u8; len])
}

// ---------------------------------------------------------------------------------------------
// The model.

/// One stream as the model sees it.
struct MStream {
    key: StreamKey,
    kind: StreamKind,
    request_id: Option<RawId>,
    alive: bool,
    first: EventSeq,
    /// Every event ever appended to the stream, ascending (held or evicted).
    events: Vec<EventSeq>,
    run: Run,
    /// The final response's bytes, once finished.
    final_payload: Option<Bytes>,
    writer: Writer,
    next_epoch: u64,
    /// The current (or last) writer's position, as the conn writer keeps it.
    cursor: Cursor,
    /// Last event handed to the client's connection for good (owed/settled bookkeeping).
    delivered: EventSeq,
    /// Last event the client proved it holds: the furthest resume cursor.
    acknowledged: EventSeq,
    /// Last event any writer finished sending.
    written: EventSeq,
    /// Last event the *current* writer finished sending (or its resume cursor).
    sent: EventSeq,
    close_requested: bool,
    cancelled: bool,
    /// Position in the order request streams first settled (eviction order for room).
    settled_rank: Option<u64>,
}

impl MStream {
    fn produced(&self) -> EventSeq {
        self.events.last().copied().unwrap_or(EventSeq(0))
    }

    fn running(&self) -> bool {
        self.run == Run::Running
    }

    fn attached(&self) -> bool {
        matches!(self.writer, Writer::Attached { .. })
    }

    fn attached_by(&self, epoch: u64) -> bool {
        matches!(self.writer, Writer::Attached { epoch: e, .. } if e == epoch)
    }

    fn replaying(&self) -> bool {
        matches!(self.writer, Writer::Attached { replaying: true, .. })
    }

    /// CONTRACT §4: a request stream, not attached, not parked, not dropped, and running or
    /// not fully delivered.
    fn owed(&self) -> bool {
        self.alive
            && self.kind == StreamKind::Request
            && self.writer == Writer::Detached
            && self.run != Run::Dropped
            && (self.running() || self.delivered < self.produced())
    }

    fn settled(&self) -> bool {
        match self.run {
            Run::Running => false,
            Run::Dropped => true,
            Run::Finished { .. } => self.delivered >= self.produced(),
        }
    }

    fn final_seq(&self) -> Option<EventSeq> {
        match self.run {
            Run::Finished { final_seq, .. } => Some(final_seq),
            _ => None,
        }
    }
}

struct Model {
    /// Every stream ever opened; key `k` is at index `k - 1`.
    streams: Vec<MStream>,
    /// Held events (seq, payload length), oldest first: FIFO under both bounds.
    ring: VecDeque<(EventSeq, usize)>,
    ring_bytes: usize,
    /// Owner of every event ever appended: `owner[seq - 1]`.
    owner: Vec<StreamKey>,
    settled_so_far: u64,
    standalone: Option<StreamKey>,
    closed: bool,
    /// The latest stream opened with each request id / fingerprint / idempotency key.
    by_id: HashMap<RawId, StreamKey>,
    by_fp: HashMap<u64, StreamKey>,
    by_idem: HashMap<Box<str>, StreamKey>,
}

impl Model {
    fn new() -> Model {
        Model {
            streams: Vec::new(),
            ring: VecDeque::new(),
            ring_bytes: 0,
            owner: Vec::new(),
            settled_so_far: 0,
            standalone: None,
            closed: false,
            by_id: HashMap::new(),
            by_fp: HashMap::new(),
            by_idem: HashMap::new(),
        }
    }

    fn next_seq(&self) -> u64 {
        self.owner.len() as u64 + 1
    }

    fn head(&self) -> u64 {
        self.ring.front().map_or(self.next_seq(), |e| e.0 .0)
    }

    fn held(&self, seq: EventSeq) -> bool {
        seq.0 >= self.head() && seq.0 < self.next_seq()
    }

    fn owner_of(&self, seq: EventSeq) -> Option<StreamKey> {
        (seq.0 >= 1).then(|| self.owner.get(seq.0 as usize - 1).copied()).flatten()
    }

    fn get(&self, key: StreamKey) -> &MStream {
        &self.streams[key.0 as usize - 1]
    }

    fn get_mut(&mut self, key: StreamKey) -> &mut MStream {
        &mut self.streams[key.0 as usize - 1]
    }

    /// The stream, if it is still in the session.
    fn alive(&self, key: StreamKey) -> Option<&MStream> {
        self.streams.get((key.0 as usize).wrapping_sub(1)).filter(|s| s.alive)
    }

    fn alive_mut(&mut self, key: StreamKey) -> Option<&mut MStream> {
        self.streams.get_mut((key.0 as usize).wrapping_sub(1)).filter(|s| s.alive)
    }

    /// Last evicted event of the stream (0 = none): evictions are oldest-first, so its evicted
    /// events are exactly those below the ring's head.
    fn evicted_through(&self, key: StreamKey) -> EventSeq {
        let head = self.head();
        self.get(key).events.iter().rev().find(|e| e.0 < head).copied().unwrap_or(EventSeq(0))
    }

    fn ring_append(&mut self, key: StreamKey, len: usize) -> EventSeq {
        while self.ring.len() == EVENTS_MAX || self.ring_bytes + len > BYTES_MAX {
            let (_, old) = self.ring.pop_front().expect("an empty ring fits any payload");
            self.ring_bytes -= old;
        }
        let seq = EventSeq(self.next_seq());
        self.owner.push(key);
        self.ring.push_back((seq, len));
        self.ring_bytes += len;
        self.get_mut(key).events.push(seq);
        seq
    }

    fn open(
        &mut self,
        kind: StreamKind,
        request_id: Option<RawId>,
        fp: u64,
        idem: Option<Box<str>>,
    ) -> Result<StreamKey, OpenError> {
        if self.streams.iter().filter(|s| s.alive).count() >= STREAMS_MAX {
            // The oldest settled request stream no writer is re-reading makes room.
            let victim = self
                .streams
                .iter()
                .filter(|s| s.alive && s.kind == StreamKind::Request && !s.attached())
                .filter_map(|s| s.settled_rank.map(|r| (r, s.key)))
                .min();
            match victim {
                Some((_, k)) => self.remove(k),
                None => return Err(OpenError::TooManyStreams),
            }
        }
        let key = StreamKey(self.streams.len() as u32 + 1);
        if let Some(id) = &request_id {
            self.by_id.insert(id.clone(), key);
        }
        if kind == StreamKind::Request {
            self.by_fp.insert(fp, key);
        }
        if let Some(k) = idem {
            self.by_idem.insert(k, key);
        }
        if kind == StreamKind::Standalone {
            self.standalone = Some(key);
        }
        self.streams.push(MStream {
            key,
            kind,
            request_id,
            alive: true,
            first: EventSeq(0),
            events: Vec::new(),
            run: Run::Running,
            final_payload: None,
            writer: Writer::Detached,
            next_epoch: 1,
            cursor: Cursor::after(EventSeq(0)),
            delivered: EventSeq(0),
            acknowledged: EventSeq(0),
            written: EventSeq(0),
            sent: EventSeq(0),
            close_requested: false,
            cancelled: false,
            settled_rank: None,
        });
        let priming = self.ring_append(key, 0);
        self.get_mut(key).first = priming;
        Ok(key)
    }

    fn remove(&mut self, key: StreamKey) {
        if let Some(s) = self.alive_mut(key) {
            s.alive = false;
        }
        if self.standalone == Some(key) {
            self.standalone = None;
        }
    }

    fn append(&mut self, key: StreamKey, len: usize) -> Result<EventSeq, AppendError> {
        if !self.alive(key).is_some_and(MStream::running) {
            return Err(AppendError::Closed);
        }
        if len > BYTES_MAX {
            self.fail_oversize(key, len);
            return Err(AppendError::TooLarge { event_bytes: len, replay_bytes: BYTES_MAX });
        }
        Ok(self.ring_append(key, len))
    }

    fn finish(&mut self, key: StreamKey, content: Bytes) {
        if !self.alive(key).is_some_and(MStream::running) {
            return;
        }
        if content.len() > BYTES_MAX {
            return self.fail_oversize(key, content.len());
        }
        let before_final = self.get(key).produced();
        let final_seq = self.ring_append(key, content.len());
        let s = self.get_mut(key);
        s.run = Run::Finished { final_seq, before_final };
        s.final_payload = Some(content);
    }

    /// The request ends with the -32603 error naming `--replay-bytes`, and its tool is stopped.
    fn fail_oversize(&mut self, key: StreamKey, event_bytes: usize) {
        let mut error = Vec::new();
        let id = self.get(key).request_id.clone();
        crate::wire::push_oversize_error(&mut error, id.as_ref(), event_bytes, BYTES_MAX);
        assert!(error.len() <= BYTES_MAX, "the error itself fits test_min's ring");
        let before_final = self.get(key).produced();
        let final_seq = self.ring_append(key, error.len());
        let s = self.get_mut(key);
        s.run = Run::Finished { final_seq, before_final };
        s.final_payload = Some(Bytes::from(error));
        s.cancelled = true;
    }

    fn attach(&mut self, key: StreamKey, replaying: bool, cursor: Cursor) -> Option<u64> {
        let s = self.alive_mut(key)?;
        let epoch = s.next_epoch;
        s.next_epoch += 1;
        s.writer = Writer::Attached { epoch, replaying };
        s.cursor = cursor;
        s.sent = cursor.after;
        Some(epoch)
    }

    fn attach_resume(&mut self, key: StreamKey, after: EventSeq) -> Option<u64> {
        self.mark_delivered(key, after);
        if let Some(s) = self.alive_mut(key) {
            s.acknowledged = s.acknowledged.max(after);
        }
        let s = self.alive(key)?;
        let backlog = s.produced() > after || !s.running();
        self.attach(key, backlog, Cursor::after(after))
    }

    fn detach(&mut self, key: StreamKey, epoch: u64) {
        if let Some(s) = self.alive_mut(key).filter(|s| s.attached_by(epoch)) {
            s.writer = Writer::Detached;
        }
    }

    fn park(&mut self, key: StreamKey, epoch: u64) {
        if let Some(s) = self.alive_mut(key).filter(|s| s.attached_by(epoch)) {
            s.writer = Writer::Parked;
        }
    }

    fn wrote(&mut self, key: StreamKey, epoch: u64, seq: EventSeq) {
        if let Some(s) = self.alive_mut(key).filter(|s| s.attached_by(epoch)) {
            s.written = s.written.max(seq);
            s.sent = s.sent.max(seq);
        }
    }

    /// The writer with `epoch` has sent everything produced: it no longer replays.
    fn caught_up(&mut self, key: StreamKey, epoch: u64) {
        if let Some(s) = self.alive_mut(key).filter(|s| s.attached_by(epoch) && s.replaying()) {
            if s.produced() <= s.sent {
                s.writer = Writer::Attached { epoch, replaying: false };
            }
        }
    }

    fn mark_delivered(&mut self, key: StreamKey, seq: EventSeq) {
        if let Some(s) = self.alive_mut(key) {
            s.delivered = s.delivered.max(seq);
        }
    }

    fn mark_all_delivered(&mut self, key: StreamKey) {
        if let Some(produced) = self.alive(key).map(MStream::produced) {
            self.mark_delivered(key, produced);
        }
    }

    fn drop_stream(&mut self, key: StreamKey) {
        if let Some(s) = self.alive_mut(key) {
            s.cancelled = true;
            s.run = Run::Dropped;
        }
    }

    fn close(&mut self) {
        self.closed = true;
        for s in self.streams.iter_mut().filter(|s| s.alive) {
            s.cancelled = true;
        }
    }

    /// Where a resume of `key` from `after` starts, from the model's history of the ring.
    fn resume_start(&self, key: StreamKey, after: EventSeq) -> Result<ResumeStart, CursorError> {
        let s = self.alive(key).ok_or(CursorError::Foreign)?;
        let owner = self.owner_of(after);
        if after < s.first || (self.held(after) && owner != Some(key)) {
            return Err(CursorError::Foreign);
        }
        if after > s.produced() {
            return Err(CursorError::Future);
        }
        let evicted_through = self.evicted_through(key);
        if owner == Some(key) {
            // An event of this stream: a gap exactly when one of its later events was evicted.
            if evicted_through > after {
                return Ok(ResumeStart::Gap { lost_to: evicted_through });
            }
            return Ok(match s.events.iter().find(|e| **e > after) {
                Some(&next) => ResumeStart::From(next),
                None => ResumeStart::Caught,
            });
        }
        // Another stream's evicted event within this stream's span: the ring no longer knows
        // whose it was, so one before this stream's evictions reads as a gap (still explicit).
        if after < evicted_through {
            return Ok(ResumeStart::Gap { lost_to: evicted_through });
        }
        Err(CursorError::Foreign)
    }

    /// What `stream::fill_batch` must do: the batch, and the events it writes.
    fn fill_batch(
        &mut self,
        key: StreamKey,
        epoch: u64,
        cursor: &mut Cursor,
        one_event: bool,
    ) -> (Batch, Vec<EventSeq>, Option<EventSeq>) {
        let mut written = Vec::new();
        // An observer (a deduplicated retry reading alongside a live owner) may always read.
        let reader =
            epoch == OBSERVER_EPOCH || self.alive(key).is_some_and(|s| s.attached_by(epoch));
        if self.closed || !self.alive(key).is_some_and(|_| reader) {
            return (Batch::Superseded, written, None);
        }
        let evicted_through = self.evicted_through(key);
        let s = self.get(key);
        let start = match cursor.from.take() {
            Some(seq) if self.held(seq) && self.owner_of(seq) == Some(key) => {
                ResumeStart::From(seq)
            }
            Some(seq) => ResumeStart::Gap { lost_to: evicted_through.max(seq) },
            None => self
                .resume_start(key, cursor.after)
                .unwrap_or(ResumeStart::Gap { lost_to: s.produced() }),
        };
        match start {
            ResumeStart::Gap { lost_to } => return (Batch::Gap, written, Some(lost_to)),
            ResumeStart::Caught => {}
            ResumeStart::From(first) => {
                for &seq in s.events.iter().filter(|e| **e >= first) {
                    written.push(seq);
                    cursor.after = seq;
                    if one_event {
                        break;
                    }
                }
            }
        }
        let batch = if s.final_seq().is_some_and(|f| cursor.after >= f) {
            Batch::Ended
        } else if s.run == Run::Dropped {
            Batch::Dropped
        } else if std::mem::take(&mut self.get_mut(key).close_requested) {
            Batch::Park
        } else {
            Batch::More
        };
        (batch, written, None)
    }

    /// What `stream::after_send` must do.
    fn after_send(&mut self, key: StreamKey, epoch: u64, after: EventSeq, batch: Batch) {
        if !self.alive(key).is_some_and(|s| s.attached_by(epoch)) {
            // An observer or a superseded writer: its client holds the whole stream once it
            // was sent the end; the owner's state is untouched.
            if batch == Batch::Ended {
                self.mark_all_delivered(key);
            }
            return;
        }
        self.wrote(key, epoch, after);
        match batch {
            Batch::Ended => {
                self.mark_all_delivered(key);
                self.detach(key, epoch);
            }
            Batch::Dropped | Batch::Gap | Batch::Cut => self.detach(key, epoch),
            Batch::Park => self.park(key, epoch),
            Batch::More | Batch::Superseded => self.caught_up(key, epoch),
        }
    }

    /// Ranks request streams in the order they first settled; settling is permanent.
    fn note_settled(&mut self) -> Result<(), TestCaseError> {
        let mut newly = 0;
        for s in self.streams.iter_mut().filter(|s| s.alive) {
            if s.settled_rank.is_some() {
                prop_assert!(s.settled(), "stream {:?} settled, then unsettled", s.key);
            } else if s.kind == StreamKind::Request && s.settled() {
                s.settled_rank = Some(self.settled_so_far);
                self.settled_so_far += 1;
                newly += 1;
            }
        }
        prop_assert!(newly <= 1, "the model's settle order is ambiguous");
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Operations.

/// Which epoch a writer transition names.
#[derive(Clone, Copy, Debug)]
enum Ep {
    /// The attached writer's (or, when none, the last issued: stale).
    Current,
    /// The one issued before the last: stale.
    Previous,
    /// Not issued yet.
    Future,
    /// Never issued.
    Zero,
}

/// A resume cursor: one of the stream's own events (index), or any sequence number.
#[derive(Clone, Copy, Debug)]
enum Cur {
    Own(u16),
    Any(u16),
}

#[derive(Clone, Debug)]
enum Op {
    /// A POSTed request opens its stream (ids, fingerprints and keys repeat now and then).
    Open {
        id: u8,
        fp: u8,
        idem: Option<u8>,
    },
    /// A GET without Last-Event-ID: the standalone stream, attached, with a fresh priming event.
    Standalone,
    /// A tool's message.
    Produce {
        pick: u16,
        len: usize,
    },
    /// Many small messages: evictions by event count.
    Burst {
        pick: u16,
        n: usize,
    },
    /// A large message: evictions by bytes.
    Big {
        pick: u16,
        len: usize,
    },
    /// A message larger than the ring: the request ends with an error.
    Oversize {
        pick: u16,
    },
    Finish {
        pick: u16,
        len: usize,
    },
    /// `attach_fresh` (a new POST's answer) or `attach` (a dedup hit's replay).
    Attach {
        pick: u16,
        fresh: bool,
    },
    /// GET + Last-Event-ID: `resume_start` validates, then `attach_resume`.
    AttachResume {
        pick: u16,
        cursor: Cur,
    },
    Detach {
        pick: u16,
        epoch: Ep,
    },
    Park {
        pick: u16,
        epoch: Ep,
    },
    /// A writer reports progress, then asks whether it caught up.
    WroteCaughtUp {
        pick: u16,
        epoch: Ep,
        upto: u16,
    },
    /// One batch of the real writer: `fill_batch`, then `after_send`.
    Write {
        pick: u16,
        epoch: Ep,
        one_event: bool,
    },
    /// SEP-1699: a tool asks to close the connection (or a writer takes the request).
    RequestClose {
        pick: u16,
        take: bool,
    },
    MarkDelivered {
        pick: u16,
        upto: u16,
    },
    MarkAllDelivered {
        pick: u16,
    },
    /// notifications/cancelled or the reaper: `drop_stream`.
    Cancel {
        pick: u16,
    },
    /// Retention over: `remove_stream`.
    Remove {
        pick: u16,
    },
    /// `resume_start` from every sequence number there is (and one beyond).
    Resume {
        pick: u16,
    },
    /// DELETE or expiry.
    Close,
}

fn op() -> impl Strategy<Value = Op> {
    let pick = any::<u16>;
    let epoch = || {
        prop_oneof![
            4 => Just(Ep::Current),
            1 => Just(Ep::Previous),
            1 => Just(Ep::Future),
            1 => Just(Ep::Zero),
        ]
    };
    let cursor = prop_oneof![
        6 => any::<u16>().prop_map(Cur::Own),
        1 => any::<u16>().prop_map(Cur::Any),
    ];
    // Weights are out of ~190, so `Close` (1) ends about a quarter of the sessions.
    prop_oneof![
        12 => (0u8..6, 0u8..4, proptest::option::of(0u8..3))
            .prop_map(|(id, fp, idem)| Op::Open { id, fp, idem }),
        4 => Just(Op::Standalone),
        20 => (pick(), 1usize..=64).prop_map(|(pick, len)| Op::Produce { pick, len }),
        4 => (pick(), 4usize..=20).prop_map(|(pick, n)| Op::Burst { pick, n }),
        4 => (pick(), 300usize..=2500).prop_map(|(pick, len)| Op::Big { pick, len }),
        2 => pick().prop_map(|pick| Op::Oversize { pick }),
        12 => (pick(), 1usize..=64, 0u8..16).prop_map(|(pick, len, oversize)| Op::Finish {
            pick,
            len: if oversize == 0 { OVERSIZE } else { len },
        }),
        12 => (pick(), any::<bool>()).prop_map(|(pick, fresh)| Op::Attach { pick, fresh }),
        16 => (pick(), cursor).prop_map(|(pick, cursor)| Op::AttachResume { pick, cursor }),
        12 => (pick(), epoch()).prop_map(|(pick, epoch)| Op::Detach { pick, epoch }),
        4 => (pick(), epoch()).prop_map(|(pick, epoch)| Op::Park { pick, epoch }),
        12 => (pick(), epoch(), any::<u16>())
            .prop_map(|(pick, epoch, upto)| Op::WroteCaughtUp { pick, epoch, upto }),
        32 => (pick(), epoch(), any::<bool>())
            .prop_map(|(pick, epoch, one_event)| Op::Write { pick, epoch, one_event }),
        6 => (pick(), any::<bool>()).prop_map(|(pick, take)| Op::RequestClose { pick, take }),
        4 => (pick(), any::<u16>()).prop_map(|(pick, upto)| Op::MarkDelivered { pick, upto }),
        4 => pick().prop_map(|pick| Op::MarkAllDelivered { pick }),
        6 => pick().prop_map(|pick| Op::Cancel { pick }),
        4 => pick().prop_map(|pick| Op::Remove { pick }),
        8 => pick().prop_map(|pick| Op::Resume { pick }),
        1 => Just(Op::Close),
    ]
}

/// A stream to act on: usually one still in the session, sometimes any ever opened (so the
/// transitions on removed streams are exercised too).
fn pick(m: &Model, p: u16) -> Option<StreamKey> {
    let alive: Vec<StreamKey> = m.streams.iter().filter(|s| s.alive).map(|s| s.key).collect();
    if !p.is_multiple_of(8) && !alive.is_empty() {
        Some(alive[usize::from(p / 8) % alive.len()])
    } else if m.streams.is_empty() {
        None
    } else {
        Some(m.streams[usize::from(p) % m.streams.len()].key)
    }
}

/// For writer transitions: usually a stream a writer holds (else any, as `pick`).
fn pick_attached(m: &Model, p: u16) -> Option<StreamKey> {
    let attached: Vec<StreamKey> =
        m.streams.iter().filter(|s| s.alive && s.attached()).map(|s| s.key).collect();
    if !p.is_multiple_of(4) && !attached.is_empty() {
        Some(attached[usize::from(p / 4) % attached.len()])
    } else {
        pick(m, p)
    }
}

fn epoch_of(m: &Model, key: StreamKey, ep: Ep) -> u64 {
    let s = m.get(key);
    let last = s.next_epoch - 1;
    match (ep, s.writer) {
        (Ep::Current, Writer::Attached { epoch, .. }) => epoch,
        (Ep::Current, _) => last,
        (Ep::Previous, _) => last.saturating_sub(1),
        (Ep::Future, _) => s.next_epoch,
        (Ep::Zero, _) => 0,
    }
}

fn append_both(
    s: &mut Session,
    m: &mut Model,
    key: StreamKey,
    len: usize,
) -> Result<(), TestCaseError> {
    let was_open = m.alive(key).is_some_and(MStream::running);
    let got = s.append(key, payload(m.next_seq(), len));
    let expected = m.append(key, len);
    prop_assert_eq!(got, expected);
    if !was_open {
        // Finished, dropped or removed: nothing more belongs on the stream.
        prop_assert_eq!(got, Err(AppendError::Closed));
    }
    Ok(())
}

fn step(s: &mut Session, m: &mut Model, op: &Op) -> Result<(), TestCaseError> {
    let Some(key) = (match *op {
        Op::Open { id, fp, idem } => {
            let id = RawId::from(id.to_string());
            let idem: Option<Box<str>> = idem.map(|k| format!("key-{k}").into());
            let got = s.open_stream(
                StreamKind::Request,
                Some(id.clone()),
                u64::from(fp),
                idem.clone(),
                None,
            );
            let expected = m.open(StreamKind::Request, Some(id), u64::from(fp), idem);
            prop_assert_eq!(got, expected);
            return Ok(());
        }
        Op::Standalone => return standalone(s, m),
        Op::Close => {
            s.close();
            m.close();
            return Ok(());
        }
        Op::Produce { pick: p, .. }
        | Op::Burst { pick: p, .. }
        | Op::Big { pick: p, .. }
        | Op::Oversize { pick: p }
        | Op::Finish { pick: p, .. }
        | Op::Attach { pick: p, .. }
        | Op::AttachResume { pick: p, .. }
        | Op::RequestClose { pick: p, .. }
        | Op::MarkDelivered { pick: p, .. }
        | Op::MarkAllDelivered { pick: p }
        | Op::Cancel { pick: p }
        | Op::Remove { pick: p }
        | Op::Resume { pick: p } => pick(m, p),
        Op::Detach { pick: p, .. }
        | Op::Park { pick: p, .. }
        | Op::WroteCaughtUp { pick: p, .. }
        | Op::Write { pick: p, .. } => pick_attached(m, p),
    }) else {
        return Ok(());
    };
    match *op {
        Op::Open { .. } | Op::Standalone | Op::Close => unreachable!("handled above"),
        Op::Produce { len, .. } | Op::Big { len, .. } => append_both(s, m, key, len)?,
        Op::Burst { n, .. } => {
            for i in 0..n {
                append_both(s, m, key, 1 + i % 8)?;
            }
        }
        Op::Oversize { .. } => append_both(s, m, key, OVERSIZE)?,
        Op::Finish { len, .. } => {
            let before = m.alive(key).map(|st| (st.run, st.produced()));
            let content = payload(m.next_seq(), len);
            s.finish(key, content.clone());
            m.finish(key, content);
            if let Some((run @ (Run::Finished { .. } | Run::Dropped), produced)) = before {
                // Finish on an ended stream is ignored.
                let st = s.stream(key).expect("alive");
                prop_assert_eq!((st.run(), st.produced()), (run, produced));
            }
        }
        Op::Attach { fresh: true, .. } => {
            let first = m.get(key).first;
            let expected =
                m.attach(key, false, Cursor::from(EventSeq(0), Some(first))).map(|e| (e, first));
            prop_assert_eq!(s.attach_fresh(key), expected);
        }
        Op::Attach { fresh: false, .. } => {
            // As a dedup hit does: from the first event if it is still held.
            let first = m.get(key).first;
            let from = (m.held(first) && m.owner_of(first) == Some(key)).then_some(first);
            let expected = m.attach(key, false, Cursor::from(first, from));
            prop_assert_eq!(s.attach(key), expected);
        }
        Op::AttachResume { cursor, .. } => {
            let events = &m.get(key).events;
            let after = match cursor {
                Cur::Own(i) => events[usize::from(i) % events.len()],
                Cur::Any(x) => EventSeq(u64::from(x) % (m.next_seq() + 2)),
            };
            // As `legacy::resume` does: a cursor `resume_start` refuses is a 400, no attach.
            let start = s.resume_start(key, after);
            prop_assert_eq!(start, m.resume_start(key, after), "resume_start({:?})", after);
            if start.is_ok() {
                let expected = m.attach_resume(key, after);
                prop_assert_eq!(s.attach_resume(key, after), expected);
            }
        }
        Op::Detach { epoch, .. } | Op::Park { epoch, .. } => {
            let e = epoch_of(m, key, epoch);
            let before = s.stream(key).map(StreamState::writer);
            let current = m.alive(key).is_some_and(|st| st.attached_by(e));
            if matches!(op, Op::Detach { .. }) {
                s.detach(key, e);
                m.detach(key, e);
            } else {
                s.park(key, e);
                m.park(key, e);
            }
            if !current {
                // A stale (or never issued) epoch cannot let go of the current writer.
                prop_assert_eq!(s.stream(key).map(StreamState::writer), before);
            }
        }
        Op::WroteCaughtUp { epoch, upto, .. } => {
            let e = epoch_of(m, key, epoch);
            let st = m.get(key);
            // A writer only ever writes events after the position it started from.
            let from = if st.attached_by(e) { st.sent } else { EventSeq(0) };
            let candidates: Vec<EventSeq> =
                st.events.iter().copied().filter(|seq| *seq >= from).collect();
            if let Some(&seq) = candidates.get(usize::from(upto) % candidates.len().max(1)) {
                s.wrote(key, e, seq);
                m.wrote(key, e, seq);
            }
            let cursor = m.get(key).sent;
            s.caught_up(key, e, cursor);
            m.caught_up(key, e);
        }
        Op::Write { epoch, one_event, .. } => write(s, m, key, epoch, one_event)?,
        Op::RequestClose { take: false, .. } => {
            s.request_close(key);
            if let Some(st) = m.alive_mut(key) {
                st.close_requested = true;
            }
        }
        Op::RequestClose { take: true, .. } => {
            let expected =
                m.alive_mut(key).is_some_and(|st| std::mem::take(&mut st.close_requested));
            prop_assert_eq!(s.take_close_request(key), expected);
        }
        Op::MarkDelivered { upto, .. } => {
            let events = &m.get(key).events;
            let seq = events[usize::from(upto) % events.len()];
            s.mark_delivered(key, seq);
            m.mark_delivered(key, seq);
        }
        Op::MarkAllDelivered { .. } => {
            s.mark_all_delivered(key);
            m.mark_all_delivered(key);
        }
        Op::Cancel { .. } => {
            s.drop_stream(key);
            m.drop_stream(key);
        }
        Op::Remove { .. } => {
            s.remove_stream(key);
            m.remove(key);
        }
        Op::Resume { .. } => {
            for seq in (0..=m.next_seq() + 1).map(EventSeq) {
                prop_assert_eq!(
                    s.resume_start(key, seq),
                    m.resume_start(key, seq),
                    "resume_start({:?}, {:?})",
                    key,
                    seq
                );
            }
        }
    }
    Ok(())
}

/// `legacy::standalone`: the standalone stream (opened if none), attached, with its own
/// priming event for this connection.
fn standalone(s: &mut Session, m: &mut Model) -> Result<(), TestCaseError> {
    let got = match s.standalone() {
        Some(k) => Ok(k),
        None => s.open_stream(StreamKind::Standalone, None, 0, None, None),
    };
    let expected = match m.standalone {
        Some(k) => Ok(k),
        None => m.open(StreamKind::Standalone, None, 0, None),
    };
    prop_assert_eq!(got, expected);
    let Ok(key) = got else { return Ok(()) };
    let epoch = s.attach(key);
    let expected = m.attach(key, false, Cursor::after(EventSeq(0)));
    prop_assert_eq!(epoch, expected);
    let priming = s.append(key, Bytes::new());
    prop_assert_eq!(priming, m.append(key, 0));
    m.get_mut(key).cursor = Cursor::from(EventSeq(0), priming.ok());
    Ok(())
}

/// One batch of the real writer holding `epoch` (the current writer's cursor, or a stale
/// writer's): `fill_batch` against the model, its SSE output, then `after_send`.
fn write(
    s: &mut Session,
    m: &mut Model,
    key: StreamKey,
    ep: Ep,
    one_event: bool,
) -> Result<(), TestCaseError> {
    let epoch = epoch_of(m, key, ep);
    let current = m.alive(key).is_some_and(|st| st.attached_by(epoch));
    let start = if current { m.get(key).cursor } else { Cursor::after(m.get(key).first) };
    let (mut cursor, mut expected_cursor) = (start, start);
    let mut out = Vec::new();
    let budget = if one_event { 1 } else { usize::MAX };
    let batch = fill_batch(s, key, epoch, &mut cursor, None, 1000, &mut out, budget);
    let (expected, events, lost_to) = m.fill_batch(key, epoch, &mut expected_cursor, one_event);
    prop_assert_eq!(batch, expected);
    prop_assert_eq!(cursor.after, expected_cursor.after);
    prop_assert_eq!(cursor.from, expected_cursor.from);
    let mut ids = Vec::new();
    for line in out.split(|&b| b == b'\n') {
        if let Some(id) = line.strip_prefix(b"id: ") {
            let (tag, stream, seq) = parse_event_id(id).expect("our own event id parses");
            prop_assert_eq!((tag, stream), (s.tag, key), "an event of another stream");
            ids.push(seq);
        }
    }
    prop_assert_eq!(ids, events, "events written");
    match lost_to {
        Some(lost_to) => {
            let text = String::from_utf8_lossy(&out);
            let at = text.find("\"lostTo\":\"").expect("a gap names lostTo") + 10;
            let end = at + text[at..].find('"').expect("closing quote");
            let parsed = parse_event_id(text[at..end].as_bytes()).map(|p| p.2);
            prop_assert_eq!(parsed, Some(lost_to), "lostTo");
        }
        None => prop_assert!(!String::from_utf8_lossy(&out).contains("lostTo")),
    }
    after_send(s, key, epoch, cursor.after, batch);
    m.after_send(key, epoch, expected_cursor.after, expected);
    if let Some(st) = m.alive_mut(key).filter(|st| st.attached_by(epoch)) {
        st.cursor = expected_cursor;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The comparison after every step.

fn check(s: &Session, m: &Model) -> Result<(), TestCaseError> {
    let owed = m.streams.iter().filter(|st| st.owed()).count();
    let replaying = m.streams.iter().filter(|st| st.alive && st.replaying()).count();
    prop_assert_eq!(s.owed_count(), owed, "owed count");
    prop_assert_eq!(s.replaying_count(), replaying, "replaying count");
    prop_assert_eq!(s.owes(), owed > 0 || replaying > 0);
    prop_assert_eq!(s.streams().count(), m.streams.iter().filter(|st| st.alive).count());
    prop_assert_eq!(s.standalone(), m.standalone);
    prop_assert_eq!(s.closed, m.closed);

    prop_assert_eq!(s.ring.len(), m.ring.len());
    prop_assert_eq!(s.ring.bytes(), m.ring_bytes);
    prop_assert_eq!(s.ring.next_seq(), EventSeq(m.next_seq()));
    prop_assert_eq!(s.ring.oldest(), m.ring.front().map(|e| e.0));

    for st in &m.streams {
        match s.stream(st.key) {
            None => prop_assert!(!st.alive, "stream {:?} vanished", st.key),
            Some(got) => {
                prop_assert!(st.alive, "stream {:?} was removed", st.key);
                check_stream(s, m, st, got)?;
            }
        }
    }

    for (id, k) in &m.by_id {
        let expected = m.alive(*k).map(|st| st.key);
        prop_assert_eq!(s.by_request_id(id).map(|st| st.key), expected, "by_request_id");
    }
    for (fp, k) in &m.by_fp {
        let expected = m.alive(*k).map(|st| st.key);
        prop_assert_eq!(s.by_fingerprint(*fp).map(|st| st.key), expected, "by_fingerprint");
    }
    for (idem, k) in &m.by_idem {
        let expected = m.alive(*k).map(|st| st.key);
        let got = s.by_idempotency_key(idem).map(|st| st.key);
        prop_assert_eq!(got, expected, "by_idempotency_key");
    }

    // With no grace at all, the reaper would abandon exactly the owed streams and forget
    // exactly the settled request streams no writer is on.
    let (mut abandoned, mut expired) = s.overdue(Instant::now(), Duration::ZERO, Duration::ZERO);
    abandoned.sort();
    expired.sort();
    let owed_keys: Vec<StreamKey> =
        m.streams.iter().filter(|st| st.owed()).map(|st| st.key).collect();
    let settled_keys: Vec<StreamKey> = m
        .streams
        .iter()
        .filter(|st| st.alive && st.kind == StreamKind::Request && !st.attached() && st.settled())
        .map(|st| st.key)
        .collect();
    prop_assert_eq!(abandoned, owed_keys, "overdue: abandoned");
    prop_assert_eq!(expired, settled_keys, "overdue: expired");
    let idle = !m
        .streams
        .iter()
        .any(|st| st.alive && (st.attached() || (st.kind == StreamKind::Request && st.running())));
    prop_assert_eq!(s.is_idle(), idle);
    Ok(())
}

fn check_stream(
    s: &Session,
    m: &Model,
    st: &MStream,
    got: &StreamState,
) -> Result<(), TestCaseError> {
    let key = st.key;
    prop_assert_eq!(got.key, key);
    prop_assert_eq!(&got.kind, &st.kind);
    prop_assert_eq!(&got.request_id, &st.request_id);
    prop_assert_eq!(got.first, st.first, "first of {:?}", key);
    prop_assert_eq!(got.run(), st.run, "run of {:?}", key);
    prop_assert_eq!(got.writer(), st.writer, "writer of {:?}", key);
    prop_assert_eq!(got.produced(), st.produced(), "produced of {:?}", key);
    prop_assert_eq!(got.delivered(), st.delivered, "delivered of {:?}", key);
    prop_assert_eq!(got.written(), st.written, "written of {:?}", key);
    prop_assert_eq!(got.final_seq(), st.final_seq(), "final_seq of {:?}", key);
    prop_assert_eq!(got.evicted_through(), m.evicted_through(key), "evicted of {:?}", key);
    prop_assert_eq!(got.is_owed(), st.owed(), "owed: {:?}", key);
    prop_assert_eq!(got.is_settled(), st.settled(), "settled: {:?}", key);
    prop_assert_eq!(got.is_running(), st.running());
    prop_assert_eq!(got.is_dropped(), st.run == Run::Dropped);
    prop_assert_eq!(got.is_attached(), st.attached());
    prop_assert_eq!(got.is_parked(), st.writer == Writer::Parked);
    prop_assert_eq!(got.is_replaying(), st.replaying());
    prop_assert_eq!(got.is_cancelled(), st.cancelled, "cancelled: {:?}", key);
    if st.run == Run::Dropped {
        prop_assert!(!got.is_owed(), "a dropped stream never owes");
    }
    prop_assert!(st.delivered <= st.produced(), "the model's client holds only produced events");

    let expected_payload = match st.run {
        Run::Running => None,
        Run::Dropped => Some(None),
        Run::Finished { final_seq, .. } => {
            Some(st.final_payload.clone().filter(|_| m.held(final_seq)))
        }
    };
    prop_assert_eq!(
        s.final_payload(key).map(|p| p.map(Bytes::copy_from_slice)),
        expected_payload,
        "final_payload of {:?}",
        key
    );

    // The hint rule (CONTRACT §4): the last event the client is known to hold (its furthest
    // resume cursor: a written event is not a held one), else the priming event; the event
    // before the final one when that is the final one.
    let hint = got.resume_hint();
    let known = st.acknowledged.max(st.first);
    let expected = match st.run {
        Run::Finished { final_seq, before_final } if known >= final_seq => {
            prop_assert_eq!(st.events.iter().rev().find(|e| **e < final_seq), Some(&before_final));
            before_final.max(st.first)
        }
        _ => known,
    };
    prop_assert_eq!(hint, expected, "resume_hint of {:?}", key);
    prop_assert!(hint >= st.first, "hint before the stream's first event");
    prop_assert!(hint <= known, "hint after what the client is known to hold");
    if let Some(final_seq) = st.final_seq() {
        prop_assert!(hint < final_seq, "hint at or after the final event");
    }
    // A GET from the hint is served: every event after it, or an explicit gap.
    let from_hint = s.resume_start(key, hint);
    prop_assert!(from_hint.is_ok(), "GET from the hint refused: {:?}", from_hint);
    prop_assert_eq!(from_hint, m.resume_start(key, hint));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    // Goal and method: the module doc.
    #[test]
    fn lifecycle_matches_model(ops in proptest::collection::vec(op(), 1..=60)) {
        let mut s = session();
        let mut m = Model::new();
        check(&s, &m)?;
        for (i, op) in ops.iter().enumerate() {
            let at = |e: TestCaseError| TestCaseError::fail(format!("step {i} {op:?}: {e}"));
            step(&mut s, &mut m, op).map_err(at)?;
            m.note_settled().map_err(at)?;
            check(&s, &m).map_err(at)?;
        }
    }
}

// Goal: a writer resuming from before where an earlier writer of the same stream got is not
// caught up (and a POST held behind its replay stays held) until it has sent the backlog
// itself. Method: the shortest sequence the state machine found, written out.
#[test]
fn caught_up_is_judged_by_the_writers_own_cursor() {
    let mut s = session();
    let k = s.open_stream(StreamKind::Request, Some(RawId::new("1")), 1, None, None).unwrap();
    let first = s.stream(k).unwrap().first;
    let a = s.append(k, Bytes::from_static(b"a")).unwrap();
    let b = s.append(k, Bytes::from_static(b"b")).unwrap();
    // A first connection sends everything, then dies (events in its socket buffer are lost).
    let (old, _) = s.attach_fresh(k).unwrap();
    s.wrote(k, old, b);
    s.detach(k, old);
    // The client resumes from the priming event: a backlog of `a` and `b` to replay.
    let new = s.attach_resume(k, first).unwrap();
    assert!(s.stream(k).unwrap().is_replaying());
    // The new writer's first batch carries only `a`.
    s.wrote(k, new, a);
    s.caught_up(k, new, a);
    assert!(s.stream(k).unwrap().is_replaying(), "`b` is not sent yet: still replaying");
    assert!(s.owes(), "a new POST must stay held until the replay is flushed");
}
