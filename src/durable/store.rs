//! The store behind the mirror (`Store`), small enough that another engine (NATS JetStream, a
//! SQL table) can follow without touching the protocol paths; `RedisStore` is the one there is
//! (Redis 7 or Valkey, the schema in `durable`'s module doc). Every call is blocking and
//! bounded by the connection's timeouts: only the mirror and reader threads call it, never a
//! worker.

use std::collections::{HashMap, VecDeque};

// The per-batch and per-session maps are keyed by tidemark's random session ids and small
// indices, never by a client's text: the fast hasher's reasoning (`fasthash`) holds.
use crate::fasthash::FastMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::keys::{self, SessionKey, StreamRecord};
use super::link::Link;
use super::record::{EventImage, Record, SessionImage};
use super::resp::Pipeline;
use crate::config::DurableUrl;

/// The store failed (unreachable, timed out, refused a command); the text says how.
#[derive(Debug, thiserror::Error)]
#[error("durable store: {0}")]
pub(crate) struct StoreError(pub(crate) String);

/// How a `StoreError` for a batch fewer replicas acknowledged than `--durable-replicas` begins.
pub(super) const UNREPLICATED: &str = "not replicated: ";

impl StoreError {
    /// True when the store took the batch but fewer replicas than `--durable-replicas` did.
    pub(crate) fn unreplicated(&self) -> bool {
        self.0.starts_with(UNREPLICATED)
    }
}

impl From<super::link::LinkError> for StoreError {
    fn from(e: super::link::LinkError) -> StoreError {
        StoreError(e.0)
    }
}

impl From<redis::RedisError> for StoreError {
    /// A Redis Cluster redirection keeps the server's own words (`MOVED 3999 HOST:PORT`), as
    /// `link` keeps them, so `cluster::Redirect::parse` reads either.
    fn from(e: redis::RedisError) -> StoreError {
        match (e.code(), e.detail()) {
            (Some(code @ ("MOVED" | "ASK")), Some(detail)) => {
                StoreError(format!("{code} {detail}"))
            }
            _ => StoreError(e.to_string()),
        }
    }
}

/// A session record's fields as `HGETALL` reads them.
pub(super) type Fields = HashMap<String, Vec<u8>>;

/// A lease renewal's outcome (`Store::renew_lease`).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Renewal {
    /// The lease it replaced was this boot's (held without a break).
    pub(crate) unbroken: bool,
    /// Sessions a Redis Cluster adopter claimed while the lease was absent (`keys::CLAIM_SCRIPT`):
    /// the node never writes them again. Always empty on one server, where adoption checks
    /// the lease atomically with the owner.
    pub(crate) claimed: Vec<String>,
}

/// One `XRANGE` entry: its id and its field-value pairs.
type StoredEntry = (String, Vec<(String, Vec<u8>)>);

/// A task as the store holds it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct TaskImage {
    pub(crate) node: u8,
    pub(crate) subject: Option<String>,
    /// Its `DetailedTask` JSON when last mirrored.
    pub(crate) detailed: String,
    pub(crate) running: bool,
}

/// What adoption's compare-and-set found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Claim {
    /// The session is ours now (or already was); its image as the store holds it.
    Won(Box<SessionImage>),
    /// The store holds no such session (never mirrored, ended, or expired).
    Absent,
    /// Its mirror is incomplete (`durable` = `0`): never adopted.
    NotDurable,
    /// Its owner's lease is alive: the owner serves it.
    OwnerAlive(u8),
    /// Another node owns it now (it adopted first).
    Taken(u8),
}

/// A 2026-07-28 keyed record as the store holds it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct KeyedImage {
    pub(crate) fingerprint: u64,
    pub(crate) node: u8,
    /// The final JSON-RPC response once the call finished.
    pub(crate) response: Option<Bytes>,
}

/// A durable store: what the mirror thread writes and an adopter reads.
pub(crate) trait Store: Send {
    /// Sends `records` in order, each session's keys with time to live `session_ttl`, without
    /// waiting for the store's answer: at most one batch is in flight, and `receive` tells
    /// whether it was written. An error here or there: the caller treats every session in the
    /// batch as not written (and drops the store).
    fn send(&mut self, records: &[&Record], session_ttl: Duration) -> Result<(), StoreError>;
    /// Waits for the answer to the batch `send` sent (at once when there is none): all written,
    /// or an error.
    fn receive(&mut self) -> Result<(), StoreError>;
    /// Marks sessions not durable (never adopted until rewritten).
    fn mark_not_durable(
        &mut self,
        sids: &[Arc<str>],
        session_ttl: Duration,
    ) -> Result<(), StoreError>;
    /// Sets this node's liveness lease to `boot` for `lease`: whether the lease it replaced was
    /// this boot's (held without a break, else it had expired or was another's), and what was
    /// claimed meanwhile.
    fn renew_lease(&mut self, node: u8, boot: &str, lease: Duration)
        -> Result<Renewal, StoreError>;
    /// Each session's owner as the store holds it (`None`: no record).
    fn owners(&mut self, sids: &[Arc<str>]) -> Result<Vec<Option<u8>>, StoreError>;
    /// Takes session `sid` for node `me` if its owner's lease has expired (atomically: one
    /// node wins), and reads it.
    fn claim(&mut self, sid: &str, me: u8) -> Result<Claim, StoreError>;
    /// Reads the keyed record `name` (`keys::keyed`).
    fn keyed(&mut self, name: &str) -> Result<Option<KeyedImage>, StoreError>;
    /// Reads task `id`.
    fn task(&mut self, id: &str) -> Result<Option<TaskImage>, StoreError>;
    /// Whether `node`'s lease is alive.
    fn lease_alive(&mut self, node: u8) -> Result<bool, StoreError>;
}

/// What the store's replicas must acknowledge (`--durable-replicas`): `replicas` of them,
/// each write's `WAIT` bounded by `wait_ms`. `replicas` 0: the primary's acknowledgement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Replication {
    pub(crate) replicas: u32,
    pub(crate) wait_ms: u64,
}

impl Replication {
    /// `Err` (`StoreError::unreplicated`) when `held`, a `WAIT`'s answer, is short of
    /// `--durable-replicas`.
    pub(crate) fn held(&self, held: i64) -> Result<(), StoreError> {
        let wanted = self.replicas;
        if held >= i64::from(wanted) {
            return Ok(());
        }
        Err(StoreError(format!(
            "{UNREPLICATED}{held} of the {wanted} replicas --durable-replicas asks for acknowledged within {} ms",
            self.wait_ms
        )))
    }

    /// `--durable-replicas`, its `WAIT` bounded by `--durable-write-ahead-ms` (at least 1 ms:
    /// `WAIT … 0` never returns; at most `DURABLE_REPLICAS_WAIT_MS_MAX`).
    pub(crate) fn of(cfg: &crate::config::DurableConfig) -> Replication {
        let wait_ms = (cfg.write_ahead.as_millis() as u64)
            .clamp(1, crate::config::DURABLE_REPLICAS_WAIT_MS_MAX);
        Replication { replicas: cfg.replicas, wait_ms }
    }
}

/// `Store` on one Redis connection.
pub(crate) struct RedisStore {
    /// Everything but the batches (the lease, adoption, reads); a Redis Cluster's store runs
    /// its own scripts on it (`cluster`).
    pub(super) connection: redis::Connection,
    /// The batches' own connection (`link`), made at the first batch: only the mirror
    /// thread's store writes batches.
    batches: Option<Link>,
    /// Replies the batch sent last still owes (`receive` reads them).
    owed_replies: usize,
    url: DurableUrl,
    timeout: Duration,
    /// The batches' encoding (what the store remembers of each session it wrote).
    encoder: BatchEncoder,
    /// The replicas each batch (and adoption) waits for (`--durable-replicas`).
    replication: Replication,
    /// The batch in flight ends with `WAIT`: its last reply is how many replicas hold it.
    waiting: bool,
}

/// A batch's encoding, without I/O: the records of a batch into one `Pipeline` of commands
/// (`encode`), and what that needs to remember of each session between batches. The mirror
/// thread's `RedisStore` and each core's writer (`writer`) own one each: a session's records
/// only ever pass through one of them (its core's, or the thread's).
#[derive(Default)]
pub(crate) struct BatchEncoder {
    /// Per session, each `tm:ev` entry written (oldest first): an entry holds a run of events,
    /// so a trim keeps the entry holding the oldest kept event. At most one per event the ring
    /// holds plus the trim's slack; whole images reset it, a session's end drops it.
    entries: FastMap<Arc<str>, VecDeque<Entry>>,
    /// Per session, when its keys' time to live was last renewed and which of its keys existed
    /// then: renewed at most every `TTL_RENEW_MS`, and at once when a batch makes a new key.
    expiry: FastMap<Arc<str>, Expiry>,
    /// The batch being encoded (kept, so its buffer is not allocated per batch).
    pipe: Pipeline,
    /// The batch's working lists and maps (kept, likewise).
    scratch: BatchScratch,
    /// The replicas each batch waits for (`--durable-replicas`).
    replication: Replication,
}

/// A batch's working lists and maps, kept across batches: allocated per batch, the plan's
/// list of steps (tens of KiB) took fresh pages from the allocator about every batch, and
/// zeroing them (huge pages) was 30 % of the mirror thread's time in a profile (perf, dwarf
/// call graphs, 2026-12-07: `clear_page_erms` under `RedisStore::send`). The lists hold
/// borrows of one batch's records: each is emptied and handed to the next batch by `recycle`.
#[derive(Default)]
struct BatchScratch {
    /// `plan`: each stream's last change in the batch.
    last_change: FastMap<(usize, u32), usize>,
    /// `plan`: each session's open run of events (its step's index).
    open: FastMap<usize, usize>,
    steps: Vec<Step<'static>>,
    touched_at: FastMap<usize, usize>,
    touched: Vec<(&'static Arc<str>, bool, bool)>,
    ended: Vec<usize>,
    trims: Vec<(&'static Arc<str>, u64)>,
    /// `StreamChanges`.
    changes: Vec<(&'static Arc<str>, usize, u32, Option<&'static StreamRecord>)>,
    gone: crate::fasthash::FastSet<(usize, u32)>,
}

/// `list` emptied, as a list of another lifetime's borrows: the same allocation (the standard
/// library collects a `Vec`'s own iterator in place when the two types' layouts match, as a
/// type's and its other lifetime's always do; `recycled_lists_keep_their_allocation`).
pub(super) fn recycle<T, U>(mut list: Vec<T>) -> Vec<U> {
    list.clear();
    list.into_iter().map(|_| unreachable!("the list was emptied")).collect()
}

/// Renewing a session's three TTLs on every batch would cost Redis three commands per session
/// per batch; once a second is plenty against TTLs of minutes.
const TTL_RENEW_MS: u64 = 1_000;

/// A session's `tm:ev` entries the ring no longer needs are trimmed once there are this many
/// of them, or `TRIM_SLACK_BYTES` of their events, not at every eviction: an exact `XTRIM` per
/// evicted event was the store's dearest command (it rewrites the entry's node each time), and
/// the slack bounds what the store holds past the ring per session.
pub(crate) const TRIM_SLACK_ENTRIES: usize = 32;
/// See `TRIM_SLACK_ENTRIES`.
pub(crate) const TRIM_SLACK_BYTES: usize = 64 * 1024;

/// One `tm:ev` entry as the writer remembers it.
#[derive(Clone, Copy, Debug)]
struct Entry {
    /// The sequence number of its first event (its id is `keys::event_entry_id` of it).
    first: u64,
    /// Its events' payload bytes.
    bytes: usize,
}

/// A session's last TTL renewal.
struct Expiry {
    renewed: std::time::Instant,
    streams: bool,
    events: bool,
}

/// A record's session, named by its `Arc`'s address: within one batch every record of a session
/// shares one `Arc` (`SessionMirror::name`), and comparing addresses costs nothing where
/// hashing and comparing 38 hex digits per record did.
fn same_session(sid: &Arc<str>) -> usize {
    Arc::as_ptr(sid).cast::<u8>() as usize
}

/// One step of a batch's pipeline: a record, a stream's state, or a session's run of
/// consecutive events of the batch written as one entry (a stream-heavy batch costs Redis one
/// command per session, not one per event).
enum Step<'a> {
    Record(&'a Record),
    /// A stream's record (from `Record::Stream`, or an event's `then`).
    Stream(&'a Arc<str>, u32, &'a StreamRecord),
    /// A stream's removal (`Record::StreamGone`, or an event's `gone`).
    Gone(&'a Arc<str>, u32),
    /// A run of consecutive events (its pieces in order, the sequence number after the last),
    /// and the ring's first kept event once it evicted as it appended them.
    Events {
        sid: &'a Arc<str>,
        pieces: Pieces<'a>,
        next: u64,
        first_kept: Option<u64>,
    },
}

/// Part of a run: one event, or events a worker already packed (`Record::Run`).
enum Piece<'a> {
    One(&'a EventImage),
    /// A stream's empty priming event (`Record::Event::primed`).
    Priming {
        seq: u64,
        stream: u32,
    },
    Packed {
        first: u64,
        packed: &'a [u8],
        payload_bytes: usize,
    },
}

/// A run's pieces in order: the first two inline (a quick call's priming and final event, or one
/// packed run: what nearly every step of a batch holds), any more on the heap, so a batch of
/// quick calls allocates no list per session (it was one allocation per echo call on the
/// mirror thread).
#[derive(Default)]
struct Pieces<'a> {
    inline: [Option<Piece<'a>>; 2],
    more: Vec<Piece<'a>>,
}

impl<'a> Pieces<'a> {
    fn push(&mut self, piece: Piece<'a>) {
        match self.inline.iter_mut().find(|slot| slot.is_none()) {
            Some(slot) => *slot = Some(piece),
            None => self.more.push(piece),
        }
    }

    /// Appends a record's piece and its second (a primed event's), when there are.
    fn extend(&mut self, piece: Option<Piece<'a>>, second: Option<Piece<'a>>) {
        for piece in piece.into_iter().chain(second) {
            self.push(piece);
        }
    }

    fn iter(&self) -> impl Iterator<Item = &Piece<'a>> {
        self.inline.iter().flatten().chain(&self.more)
    }
}

impl Piece<'_> {
    fn first(&self) -> u64 {
        match self {
            Piece::One(event) => event.seq,
            Piece::Priming { seq, .. } => *seq,
            Piece::Packed { first, .. } => *first,
        }
    }
}

/// A record's events as pieces of a run (a primed event's priming first): the pieces, the sequence
/// number after them, and the ring's first kept event.
fn pieces(record: &Record) -> Option<(Piece<'_>, Option<Piece<'_>>, u64, Option<u64>)> {
    match record {
        Record::Event { primed: true, event, first_kept, .. } => Some((
            Piece::Priming { seq: event.seq - 1, stream: event.stream },
            Some(Piece::One(event)),
            event.seq + 1,
            *first_kept,
        )),
        Record::Event { event, first_kept, .. } => {
            Some((Piece::One(event), None, event.seq + 1, *first_kept))
        }
        Record::Run { run, .. } => Some((
            Piece::Packed {
                first: run.first_seq,
                packed: &run.packed,
                payload_bytes: run.payload_bytes,
            },
            None,
            run.first_seq + u64::from(run.count),
            run.first_kept,
        )),
        _ => None,
    }
}

/// The stream a record changes, if it changes one: its session, key and new record.
fn stream_change(record: &Record) -> Option<(&Arc<str>, u32, &StreamRecord)> {
    match record {
        Record::Stream { sid, key, record } => Some((sid, *key, record)),
        Record::Event { sid, event, then: Some(record), .. } => Some((sid, event.stream, record)),
        _ => None,
    }
}

/// The batch as steps: each session's events gathered at the place of its first event (earlier
/// than the records between them, which only ever follow their events), a run broken by the
/// session's whole image or end, and by a gap in sequence numbers (never written together).
/// A stream's record appears once, at the place of its last change in the batch (a crash
/// mid-batch leaves its state from before the batch, never one ahead of its events).
fn plan<'a>(records: &[&'a Record], scratch: &mut BatchScratch) -> Vec<Step<'a>> {
    let BatchScratch { last_change, open, steps, .. } = scratch;
    last_change.clear();
    open.clear();
    for (index, record) in records.iter().enumerate() {
        if let Some((sid, key, _)) = stream_change(record) {
            last_change.insert((same_session(sid), key), index);
        }
    }
    let mut steps: Vec<Step<'a>> = recycle(std::mem::take(steps));
    steps.reserve(records.len());
    for (index, record) in records.iter().copied().enumerate() {
        match record {
            Record::Event { sid, .. } | Record::Run { sid, .. } => {
                if let Record::Event { gone: Some(key), .. } = record {
                    steps.push(Step::Gone(sid, *key));
                }
                let Some((piece, mut second, after, first_kept)) = pieces(record) else { continue };
                let first = piece.first();
                let mut piece = Some(piece);
                if let Some(&at) = open.get(&same_session(sid)) {
                    if let Step::Events { pieces, next, first_kept: kept, .. } = &mut steps[at] {
                        if *next == first {
                            pieces.extend(piece.take(), second.take());
                            *next = after;
                            *kept = (*kept).max(first_kept);
                        }
                    }
                }
                if let Some(piece) = piece {
                    open.insert(same_session(sid), steps.len());
                    let mut pieces = Pieces::default();
                    pieces.extend(Some(piece), second);
                    steps.push(Step::Events { sid, pieces, next: after, first_kept });
                }
            }
            Record::Session(image) => {
                open.remove(&same_session(&image.sid));
                steps.push(Step::Record(record));
            }
            Record::End { sid } => {
                open.remove(&same_session(sid));
                steps.push(Step::Record(record));
            }
            Record::StreamGone { sid, key } => steps.push(Step::Gone(sid, *key)),
            Record::Stream { .. } => {}
            _ => steps.push(Step::Record(record)),
        }
        if let Some((sid, key, stream)) = stream_change(record) {
            if last_change.get(&(same_session(sid), key)) == Some(&index) {
                steps.push(Step::Stream(sid, key, stream));
            }
        }
    }
    steps
}

impl RedisStore {
    /// Connects to `url` within `timeout`; every command is bounded by `timeout` too.
    pub(crate) fn connect(url: &DurableUrl, timeout: Duration) -> Result<RedisStore, StoreError> {
        let client = redis::Client::open(url.to_string().as_str())?;
        let connection = client.get_connection_with_timeout(timeout)?;
        connection.set_read_timeout(Some(timeout))?;
        connection.set_write_timeout(Some(timeout))?;
        Ok(RedisStore {
            connection,
            batches: None,
            owed_replies: 0,
            url: url.clone(),
            timeout,
            encoder: BatchEncoder::default(),
            replication: Replication::default(),
            waiting: false,
        })
    }

    /// `--durable-replicas` for this store's batches and adoptions.
    pub(super) fn set_replication(&mut self, replication: Replication) {
        self.replication = replication;
        self.encoder.replication = replication;
    }

    /// Adoption's first read: the session's record and its owner, or the answer already
    /// (`Absent`, `NotDurable`).
    pub(super) fn claim_read(
        &mut self,
        sid: &str,
    ) -> Result<Result<(u8, Fields), Claim>, StoreError> {
        let fields: Fields =
            redis::cmd("HGETALL").arg(keys::session(sid)).query(&mut self.connection)?;
        let text = |name: &str| fields.get(name).and_then(|v| std::str::from_utf8(v).ok());
        let Some(owner) = text("owner").and_then(|o| o.parse::<u8>().ok()) else {
            return Ok(Err(Claim::Absent));
        };
        if text("durable") != Some("1") {
            return Ok(Err(Claim::NotDurable));
        }
        Ok(Ok((owner, fields)))
    }

    /// Adoption's compare-and-set (`keys::ADOPT_SCRIPT`, the owner's lease checked in it when
    /// `with_lease`, on one server), replicated as `--durable-replicas` asks, then the session
    /// read whole; `None` when the adopter lost.
    pub(super) fn claim_set(
        &mut self,
        sid: &str,
        (owner, fields): (u8, &Fields),
        me: u8,
        with_lease: bool,
    ) -> Result<Option<Box<SessionImage>>, StoreError> {
        let mut script = redis::cmd("EVAL");
        script.arg(keys::ADOPT_SCRIPT).arg(if with_lease { 2 } else { 1 }).arg(keys::session(sid));
        if with_lease {
            script.arg(keys::lease(owner));
        }
        let won: i64 = script.arg(owner).arg(me).query(&mut self.connection)?;
        if won != 1 {
            return Ok(None);
        }
        if self.replication.replicas > 0 {
            // The new owner must survive the primary's death, or two nodes could adopt.
            let held: i64 = redis::cmd("WAIT")
                .arg(self.replication.replicas)
                .arg(self.replication.wait_ms)
                .query(&mut self.connection)?;
            self.replicated(held)?;
        }
        self.read_image(sid, owner, fields).map(|image| Some(Box::new(image)))
    }

    /// The session adoption won, as the store holds it: `fields` its record (`claim_read`),
    /// then its streams and events.
    fn read_image(
        &mut self,
        sid: &str,
        owner: u8,
        fields: &Fields,
    ) -> Result<SessionImage, StoreError> {
        let text = |name: &str| fields.get(name).and_then(|v| std::str::from_utf8(v).ok());
        let streams: HashMap<String, String> =
            redis::cmd("HGETALL").arg(keys::streams(sid)).query(&mut self.connection)?;
        let entries: Vec<StoredEntry> = redis::cmd("XRANGE")
            .arg(keys::events(sid))
            .arg("-")
            .arg("+")
            .query(&mut self.connection)?;
        let mut image = SessionImage {
            sid: Arc::from(sid),
            // The node it is taken from: an adopter ends that node's running calls in its name.
            owner,
            tag: text("tag").and_then(|t| t.parse().ok()).unwrap_or(0),
            earlier_tags: text("tags").map(keys::parse_earlier_tags).unwrap_or_default(),
            version: text("rev").unwrap_or("").to_owned(),
            subject: text("subject").map(str::to_owned),
            client: text("client").unwrap_or("{}").to_owned(),
            log: text("log").unwrap_or("info").to_owned(),
            streams: Vec::with_capacity(streams.len()),
            events: Vec::with_capacity(entries.len()),
            next_seq: text("next").and_then(|t| t.parse().ok()).unwrap_or(1),
        };
        for (key, json) in streams {
            let (Ok(key), Ok(record)) = (key.parse::<u32>(), serde_json::from_str(&json)) else {
                return Err(StoreError(format!("session {sid}: stream {key} unreadable")));
            };
            image.streams.push((key, record));
        }
        image.streams.sort_by_key(|(key, _)| *key);
        for (id, fields) in entries {
            let mut seq =
                keys::event_seq(&id).ok_or_else(|| StoreError(format!("event id {id}")))?;
            let mut stream = None;
            for (name, value) in fields {
                match name.as_str() {
                    keys::EVENT_RUN_FIELD => {
                        let run = keys::unpack_events(&value)
                            .ok_or_else(|| StoreError(format!("entry {id}: a malformed run")))?;
                        for (stream, data) in run {
                            let data = Bytes::copy_from_slice(data);
                            image.events.push(EventImage { seq, stream, data });
                            seq += 1;
                        }
                    }
                    // Entries written before runs were packed: `s`, `d` per event.
                    "s" => stream = std::str::from_utf8(&value).ok().and_then(|s| s.parse().ok()),
                    "d" => {
                        let stream = stream.take().ok_or_else(|| {
                            StoreError(format!("entry {id}: data without a stream"))
                        })?;
                        image.events.push(EventImage { seq, stream, data: Bytes::from(value) });
                        seq += 1;
                    }
                    _ => {}
                }
            }
        }
        if let Some(last) = image.events.last() {
            image.next_seq = image.next_seq.max(last.seq + 1);
        }
        Ok(image)
    }

    fn replicated(&self, held: i64) -> Result<(), StoreError> {
        self.replication.held(held)
    }

    /// Sends the encoded batch; its replies are owed until `receive`.
    fn send_pipeline(&mut self, waiting: bool) -> Result<(), StoreError> {
        if self.encoder.pipe.is_empty() {
            return Ok(());
        }
        let link = match &mut self.batches {
            Some(link) => link,
            None => self.batches.insert(Link::connect(&self.url, self.timeout)?),
        };
        self.waiting = waiting;
        let sent = link.send(self.encoder.pipe.bytes());
        self.owed_replies = self.encoder.pipe.commands();
        self.encoder.pipe.clear();
        Ok(sent?)
    }
}

impl BatchEncoder {
    /// An encoder whose batches wait for `replication`.
    pub(crate) fn new(replication: Replication) -> BatchEncoder {
        BatchEncoder { replication, ..BatchEncoder::default() }
    }

    /// The encoded batch (`encode`).
    pub(crate) fn pipeline(&mut self) -> &mut Pipeline {
        &mut self.pipe
    }

    /// What `--durable-replicas` asks of each batch.
    pub(crate) fn replication(&self) -> Replication {
        self.replication
    }

    /// Encodes one step of a batch (`plan`), noting the sessions it touched, ended and trims.
    fn push_step<'a>(
        &mut self,
        step: &Step<'a>,
        touched: &mut Touched<'a, '_>,
        changes: &mut StreamChanges<'a, '_>,
        ended: &mut Vec<usize>,
        trims: &mut Vec<(&'a Arc<str>, u64)>,
    ) {
        let pipe = &mut self.pipe;
        let record = match step {
            Step::Events { sid, pieces, first_kept, .. } => {
                if let Some(entry) = push_run(pipe, sid, pieces) {
                    self.entries.entry((*sid).clone()).or_default().push_back(entry);
                }
                if let Some(first_kept) = first_kept {
                    note_trim(trims, sid, *first_kept);
                }
                touched.mark(sid).2 = true;
                return;
            }
            Step::Stream(sid, key, record) => {
                changes.defer(pipe, sid, *key, Some(record));
                touched.mark(sid).1 = true;
                return;
            }
            Step::Gone(sid, key) => {
                changes.defer(pipe, sid, *key, None);
                touched.mark(sid);
                return;
            }
            Step::Record(record) => *record,
        };
        // A session's image or end, in its place: after the stream changes before it.
        changes.flush(pipe);
        match record {
            Record::Session(image) => {
                let entries = self.entries.entry(image.sid.clone()).or_default();
                entries.clear();
                push_image(pipe, image, entries);
            }
            // Steps of their own (`Step::Stream`, `Step::Gone`, `Step::Events`).
            Record::Stream { .. }
            | Record::StreamGone { .. }
            | Record::Event { .. }
            | Record::Run { .. } => {}
            Record::End { sid } => {
                delete_session(pipe, sid);
                self.entries.remove(sid);
                trims.retain(|(s, _)| !Arc::ptr_eq(s, sid));
                ended.push(same_session(sid));
            }
            Record::Task { .. } => push_task(pipe, record),
            Record::Keyed { .. } => push_keyed(pipe, record),
        }
        if let Some(sid) = record.session() {
            let made = touched.mark(sid);
            if let Record::Session(image) = record {
                self.expiry.remove(sid);
                made.1 |= !image.streams.is_empty();
                made.2 |= !image.events.is_empty();
            }
        }
    }

    /// Encodes `records` (in order) as one batch into the pipeline, emptied first; a batch
    /// that writes anything closes with `WAIT` when `--durable-replicas` asks for replicas.
    /// Whether it does (its last reply is then the count of replicas holding the batch).
    pub(crate) fn encode(&mut self, records: &[&Record], session_ttl: Duration) -> bool {
        let ttl_ms = session_ttl.as_millis().max(1) as u64;
        self.pipe.clear();
        let mut scratch = std::mem::take(&mut self.scratch);
        let steps = plan(records, &mut scratch);
        let BatchScratch {
            touched_at,
            touched: scratch_touched,
            ended,
            trims: scratch_trims,
            changes: scratch_changes,
            gone,
            ..
        } = &mut scratch;
        touched_at.clear();
        ended.clear();
        gone.clear();
        let list = recycle(std::mem::take(scratch_touched));
        let mut touched = Touched { at: touched_at, list };
        let mut changes = StreamChanges { list: recycle(std::mem::take(scratch_changes)), gone };
        let mut trims: Vec<(&Arc<str>, u64)> = recycle(std::mem::take(scratch_trims));
        for step in &steps {
            self.push_step(step, &mut touched, &mut changes, ended, &mut trims);
        }
        changes.flush(&mut self.pipe);
        *scratch_changes = recycle(changes.list);
        for &(sid, first_kept) in &trims {
            if let Some(entries) = self.entries.get_mut(sid) {
                push_trim(&mut self.pipe, sid, entries, first_kept);
            }
        }
        push_expiries(&mut self.pipe, &mut self.expiry, &touched.list, ended, ttl_ms);
        *scratch_touched = recycle(touched.list);
        *scratch_trims = recycle(trims);
        scratch.steps = recycle(steps);
        self.scratch = scratch;
        if self.pipe.is_empty() || self.replication.replicas == 0 {
            return false;
        }
        // After everything the batch wrote: how many replicas hold all of it.
        self.pipe
            .command(3)
            .arg(b"WAIT")
            .arg_u64(u64::from(self.replication.replicas))
            .arg_u64(self.replication.wait_ms);
        true
    }
}

fn expire_session(pipe: &mut Pipeline, sid: &str, ttl_ms: u64) {
    for kind in [SessionKey::Record, SessionKey::Streams, SessionKey::Events] {
        pipe.command(3).arg(b"PEXPIRE").arg_key(kind, sid).arg_u64(ttl_ms);
    }
}

/// `DEL` of a session's three keys.
fn delete_session(pipe: &mut Pipeline, sid: &str) {
    pipe.command(4).arg(b"DEL");
    for kind in [SessionKey::Record, SessionKey::Streams, SessionKey::Events] {
        pipe.arg_key(kind, sid);
    }
}

/// One `tm:ev` entry for a run of consecutive events: id of the first, the run packed in its
/// one field (`keys::EVENT_RUN_FIELD`). What it remembers of the entry.
fn push_run(pipe: &mut Pipeline, sid: &str, pieces: &Pieces<'_>) -> Option<Entry> {
    let first = pieces.iter().next()?.first();
    let (mut packed_bytes, mut bytes) = (0, 0);
    for piece in pieces.iter() {
        match piece {
            Piece::One(event) => {
                packed_bytes += keys::PACKED_EVENT_HEADER + event.data.len();
                bytes += event.data.len();
            }
            Piece::Priming { .. } => packed_bytes += keys::PACKED_EVENT_HEADER,
            Piece::Packed { packed, payload_bytes, .. } => {
                packed_bytes += packed.len();
                bytes += payload_bytes;
            }
        }
    }
    pipe.command(5)
        .arg(b"XADD")
        .arg_key(SessionKey::Events, sid)
        .arg_u64_then(first, keys::EVENT_ENTRY_ID_SUFFIX.as_bytes())
        .arg(keys::EVENT_RUN_FIELD.as_bytes())
        .arg_sized(packed_bytes, |out| {
            for piece in pieces.iter() {
                match piece {
                    Piece::One(event) => keys::pack_event(out, event.stream, &event.data),
                    Piece::Priming { stream, .. } => keys::pack_event(out, *stream, b""),
                    Piece::Packed { packed, .. } => out.extend_from_slice(packed),
                }
            }
        });
    Some(Entry { first, bytes })
}

/// A batch's changes to its sessions' stream tables (`tm:st`), written per session as one
/// `HSET` of every stream record and one `HDEL` of every removal (`flush`) instead of a
/// command each: a quick call both opens a stream and evicts an old one, so at about two calls
/// per session and batch this halves the store's commands per call and saves their repeated
/// key names (the mirror's bytes, and the store's CPU, which shares the load's in
/// `scripts/durable-cost.sh`).
///
/// Order: within a session a record is written before the removals (`plan` names each
/// stream's record once, at its last change; a stream's removal follows its record), and both
/// only later than the steps they followed, never earlier: a stream's record is never ahead of
/// its events. A removal then a new record of the same key flushes first, so the two keep
/// their order. Anything else of the session (its image, its end) flushes first too (`send`).
struct StreamChanges<'a, 's> {
    /// Each change: its session, its place in the batch, the stream's key, its new record
    /// (`None`: removed).
    list: Vec<(&'a Arc<str>, usize, u32, Option<&'a StreamRecord>)>,
    /// The removals in `list`, by `same_session` and key.
    gone: &'s mut crate::fasthash::FastSet<(usize, u32)>,
}

impl<'a> StreamChanges<'a, '_> {
    /// Notes `sid`'s stream `key` changed to `record` (or was removed).
    fn defer(
        &mut self,
        pipe: &mut Pipeline,
        sid: &'a Arc<str>,
        key: u32,
        record: Option<&'a StreamRecord>,
    ) {
        let at = (same_session(sid), key);
        match record {
            Some(_) if self.gone.contains(&at) => self.flush(pipe),
            Some(_) => {}
            None => {
                self.gone.insert(at);
            }
        }
        self.list.push((sid, self.list.len(), key, record));
    }

    /// Writes what was noted: per session an `HSET` of its records, then an `HDEL` of its
    /// removals.
    fn flush(&mut self, pipe: &mut Pipeline) {
        self.list.sort_unstable_by_key(|&(sid, at, ..)| (same_session(sid), at));
        for group in self.list.chunk_by(|a, b| Arc::ptr_eq(a.0, b.0)) {
            let sid = group[0].0;
            let records = group.iter().filter(|change| change.3.is_some()).count();
            if records > 0 {
                pipe.command(2 + 2 * records).arg(b"HSET").arg_key(SessionKey::Streams, sid);
                for &(_, _, key, record) in group {
                    if let Some(record) = record {
                        pipe.arg_u64(u64::from(key)).arg_written(|out| record.write_json(out));
                    }
                }
            }
            if records < group.len() {
                pipe.command(2 + group.len() - records)
                    .arg(b"HDEL")
                    .arg_key(SessionKey::Streams, sid);
                for &(_, _, key, _) in group.iter().filter(|change| change.3.is_none()) {
                    pipe.arg_u64(u64::from(key));
                }
            }
        }
        self.list.clear();
        self.gone.clear();
    }
}

/// `HSET tm:st:SID KEY JSON`.
fn push_stream(pipe: &mut Pipeline, sid: &str, key: u32, record: &StreamRecord) {
    pipe.command(4)
        .arg(b"HSET")
        .arg_key(SessionKey::Streams, sid)
        .arg_u64(u64::from(key))
        .arg_written(|out| record.write_json(out));
}

/// The session's whole image, in one `MULTI`/`EXEC`: its keys deleted, then its record with
/// `durable` `0`, its streams and its events, and only then `durable` `1`. The primary applies
/// it at once and a replica takes it whole or not at all, so an image cut short (the node or
/// the primary dying mid-send) leaves the session as it was, never a replica that took the
/// `DEL` alone. The `durable` markers stay as a second line: were an image ever applied in
/// part, `ADOPT_SCRIPT` refuses `durable` `0`. A command failing inside the `EXEC` (a key of
/// the session's name holding another type) is the batch's error like any refusal (`Link`
/// reads the errors nested in the `EXEC` reply): the store counts as down and the session is
/// written whole again.
fn push_image(pipe: &mut Pipeline, image: &SessionImage, entries: &mut VecDeque<Entry>) {
    let sid = &*image.sid;
    pipe.command(1).arg(b"MULTI");
    delete_session(pipe, sid);
    let optional =
        2 * (usize::from(image.subject.is_some()) + usize::from(!image.earlier_tags.is_empty()));
    pipe.command(16 + optional)
        .arg(b"HSET")
        .arg_key(SessionKey::Record, sid)
        .arg(b"owner")
        .arg_u64(u64::from(image.owner))
        .arg(b"tag")
        .arg_u64(u64::from(image.tag))
        .arg(b"rev")
        .arg(image.version.as_bytes())
        .arg(b"client")
        .arg(image.client.as_bytes())
        .arg(b"log")
        .arg(image.log.as_bytes())
        .arg(b"next")
        .arg_u64(image.next_seq)
        .arg(b"durable")
        .arg(b"0");
    if let Some(subject) = &image.subject {
        pipe.arg(b"subject").arg(subject.as_bytes());
    }
    if !image.earlier_tags.is_empty() {
        pipe.arg(b"tags").arg_written(|out| keys::write_earlier_tags(out, &image.earlier_tags));
    }
    for (key, record) in &image.streams {
        push_stream(pipe, sid, *key, record);
    }
    for run in image.events.chunks(IMAGE_RUN_EVENTS) {
        let mut pieces = Pieces::default();
        for event in run {
            pieces.push(Piece::One(event));
        }
        entries.extend(push_run(pipe, sid, &pieces));
    }
    pipe.command(4).arg(b"HSET").arg_key(SessionKey::Record, sid).arg(b"durable").arg(b"1");
    pipe.command(1).arg(b"EXEC");
}

/// Events per `tm:ev` entry of a whole image (bounds one entry's packed field).
const IMAGE_RUN_EVENTS: usize = 256;

/// Trims a session's entries wholly before `first_kept` (the one holding it stays) once they
/// reach the slack (`TRIM_SLACK_ENTRIES`, `TRIM_SLACK_BYTES`).
fn push_trim(pipe: &mut Pipeline, sid: &str, entries: &mut VecDeque<Entry>, first_kept: u64) {
    let (mut spent, mut bytes) = (0, 0);
    while spent + 1 < entries.len() && entries[spent + 1].first <= first_kept {
        bytes += entries[spent].bytes;
        spent += 1;
    }
    if spent < TRIM_SLACK_ENTRIES && bytes < TRIM_SLACK_BYTES {
        return;
    }
    entries.drain(..spent);
    if let Some(oldest) = entries.front() {
        pipe.command(4)
            .arg(b"XTRIM")
            .arg_key(SessionKey::Events, sid)
            .arg(b"MINID")
            .arg_u64_then(oldest.first, keys::EVENT_ENTRY_ID_SUFFIX.as_bytes());
    }
}

/// What a batch learnt of each session it wrote (`RedisStore::send`): its name, whether the
/// batch made its streams key, its events key; `at` finds a session's entry by `same_session`.
/// Both kept across batches (`BatchScratch`).
struct Touched<'a, 's> {
    at: &'s mut FastMap<usize, usize>,
    list: Vec<(&'a Arc<str>, bool, bool)>,
}

impl<'a> Touched<'a, '_> {
    /// `sid`'s entry, made on its first step of the batch.
    fn mark(&mut self, sid: &'a Arc<str>) -> &mut (&'a Arc<str>, bool, bool) {
        let list = &mut self.list;
        let at = *self.at.entry(same_session(sid)).or_insert_with(|| {
            list.push((sid, false, false));
            list.len() - 1
        });
        &mut list[at]
    }
}

/// Keeps, per session of a batch, the highest first kept event its records name (one trim
/// per session and batch, `push_trim`).
fn note_trim<'a>(trims: &mut Vec<(&'a Arc<str>, u64)>, sid: &'a Arc<str>, first_kept: u64) {
    match trims.iter_mut().find(|(s, _)| Arc::ptr_eq(s, sid)) {
        Some((_, kept)) => *kept = (*kept).max(first_kept),
        None => trims.push((sid, first_kept)),
    }
}

/// A task's record (`Record::Task`): its hash and its retention.
fn push_task(pipe: &mut Pipeline, record: &Record) {
    let Record::Task { id, node, subject, detailed, running, ttl_ms } = record else { return };
    pipe.command(if subject.is_some() { 10 } else { 8 })
        .arg(b"HSET")
        .arg_parts(&[keys::TASK_PREFIX.as_bytes(), id.as_bytes()])
        .arg(b"node")
        .arg_u64(u64::from(*node))
        .arg(b"detailed")
        .arg(detailed.as_bytes())
        .arg(b"state")
        .arg(if *running { b"running" } else { b"done" });
    if let Some(subject) = subject {
        pipe.arg(b"subject").arg(subject.as_bytes());
    }
    pipe.command(3)
        .arg(b"PEXPIRE")
        .arg_parts(&[keys::TASK_PREFIX.as_bytes(), id.as_bytes()])
        .arg_u64(*ttl_ms);
}

/// A keyed call's record (`Record::Keyed`): its hash and its retention.
fn push_keyed(pipe: &mut Pipeline, record: &Record) {
    let Record::Keyed { name, fingerprint, node, response, ttl_ms } = record else { return };
    pipe.command(if response.is_some() { 10 } else { 8 })
        .arg(b"HSET")
        .arg(name.as_bytes())
        .arg(b"fp")
        .arg_u64(*fingerprint)
        .arg(b"node")
        .arg_u64(u64::from(*node))
        .arg(b"state");
    match response {
        Some(response) => pipe.arg(b"done").arg(b"result").arg(response),
        None => pipe.arg(b"running"),
    };
    pipe.command(3).arg(b"PEXPIRE").arg(name.as_bytes()).arg_u64(*ttl_ms);
}

/// Renews the time to live of each session the batch touched when it is due (`TTL_RENEW_MS`,
/// or a key the batch made), and forgets the sessions it ended (`ended`).
fn push_expiries(
    pipe: &mut Pipeline,
    expiry: &mut FastMap<Arc<str>, Expiry>,
    touched: &[(&Arc<str>, bool, bool)],
    ended: &[usize],
    ttl_ms: u64,
) {
    let now = std::time::Instant::now();
    for &(sid, streams, events) in touched {
        if ended.contains(&same_session(sid)) {
            expiry.remove(sid);
            continue;
        }
        let due = match expiry.get(sid) {
            None => true,
            Some(e) => {
                (streams && !e.streams)
                    || (events && !e.events)
                    || now.duration_since(e.renewed) >= Duration::from_millis(TTL_RENEW_MS)
            }
        };
        if due {
            expire_session(pipe, sid, ttl_ms);
            let e = expiry.entry(sid.clone()).or_insert(Expiry { renewed: now, streams, events });
            e.renewed = now;
            e.streams |= streams;
            e.events |= events;
        }
    }
}

impl Store for RedisStore {
    fn receive(&mut self) -> Result<(), StoreError> {
        let owed = std::mem::take(&mut self.owed_replies);
        let waiting = std::mem::take(&mut self.waiting);
        let last = match &mut self.batches {
            Some(link) if owed > 0 => link.receive(owed)?,
            _ => return Ok(()),
        };
        if waiting {
            self.replicated(last.unwrap_or(0))?;
        }
        Ok(())
    }

    fn send(&mut self, records: &[&Record], session_ttl: Duration) -> Result<(), StoreError> {
        if self.owed_replies > 0 {
            self.receive()?;
        }
        let waiting = self.encoder.encode(records, session_ttl);
        self.send_pipeline(waiting)
    }

    fn mark_not_durable(
        &mut self,
        sids: &[Arc<str>],
        session_ttl: Duration,
    ) -> Result<(), StoreError> {
        let mut pipe = redis::pipe();
        for sid in sids {
            pipe.cmd("HSET").arg(keys::session(sid)).arg("durable").arg(0).ignore();
            pipe.cmd("PEXPIRE")
                .arg(keys::session(sid))
                .arg(session_ttl.as_millis().max(1) as u64)
                .ignore();
        }
        pipe.query::<()>(&mut self.connection)?;
        Ok(())
    }

    fn renew_lease(
        &mut self,
        node: u8,
        boot: &str,
        lease: Duration,
    ) -> Result<Renewal, StoreError> {
        // GET then SET in one pipeline (not `SET … GET`, which needs Redis 6.2): only this
        // node writes its lease, so nothing comes between the two.
        let (held,): (Option<String>,) = redis::pipe()
            .cmd("GET")
            .arg(keys::lease(node))
            .cmd("SET")
            .arg(keys::lease(node))
            .arg(boot)
            .arg("PX")
            .arg(lease.as_millis().max(1) as u64)
            .ignore()
            .query(&mut self.connection)?;
        Ok(Renewal { unbroken: held.as_deref() == Some(boot), claimed: Vec::new() })
    }

    fn owners(&mut self, sids: &[Arc<str>]) -> Result<Vec<Option<u8>>, StoreError> {
        let mut pipe = redis::pipe();
        for sid in sids {
            pipe.cmd("HGET").arg(keys::session(sid)).arg("owner");
        }
        let owners: Vec<Option<String>> = pipe.query(&mut self.connection)?;
        Ok(owners.into_iter().map(|o| o.and_then(|o| o.parse().ok())).collect())
    }

    fn claim(&mut self, sid: &str, me: u8) -> Result<Claim, StoreError> {
        let (owner, fields) = match self.claim_read(sid)? {
            Ok(read) => read,
            Err(answer) => return Ok(answer),
        };
        Ok(match self.claim_set(sid, (owner, &fields), me, true)? {
            Some(image) => Claim::Won(image),
            None if self.lease_alive(owner)? => Claim::OwnerAlive(owner),
            None => Claim::Taken(owner),
        })
    }

    fn keyed(&mut self, name: &str) -> Result<Option<KeyedImage>, StoreError> {
        let fields: HashMap<String, Vec<u8>> =
            redis::cmd("HGETALL").arg(name).query(&mut self.connection)?;
        let text = |field: &str| fields.get(field).and_then(|v| std::str::from_utf8(v).ok());
        let (Some(fingerprint), Some(node)) =
            (text("fp").and_then(|f| f.parse().ok()), text("node").and_then(|n| n.parse().ok()))
        else {
            return Ok(None);
        };
        let response = match text("state") {
            Some("done") => fields.get("result").map(|r| Bytes::from(r.clone())),
            _ => None,
        };
        Ok(Some(KeyedImage { fingerprint, node, response }))
    }

    fn task(&mut self, id: &str) -> Result<Option<TaskImage>, StoreError> {
        let fields: HashMap<String, String> =
            redis::cmd("HGETALL").arg(keys::task(id)).query(&mut self.connection)?;
        let (Some(node), Some(detailed)) =
            (fields.get("node").and_then(|n| n.parse().ok()), fields.get("detailed"))
        else {
            return Ok(None);
        };
        Ok(Some(TaskImage {
            node,
            subject: fields.get("subject").cloned(),
            detailed: detailed.clone(),
            running: fields.get("state").map(String::as_str) == Some("running"),
        }))
    }

    fn lease_alive(&mut self, node: u8) -> Result<bool, StoreError> {
        let n: i64 = redis::cmd("EXISTS").arg(keys::lease(node)).query(&mut self.connection)?;
        Ok(n == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(sid: &Arc<str>, seq: u64) -> Record {
        Record::Event {
            sid: sid.clone(),
            primed: false,
            event: EventImage { seq, stream: 1, data: Bytes::new() },
            at: std::time::Instant::now(),
            first_kept: None,
            then: None,
            gone: None,
        }
    }

    /// An open `post` stream's record from event `first`.
    fn open_stream(first: u64) -> StreamRecord {
        StreamRecord {
            kind: "post".into(),
            rid: None,
            fp: 0,
            key: None,
            first,
            final_seq: None,
            settled: false,
        }
    }

    fn stream(sid: &Arc<str>, key: u32, first: u64) -> Record {
        Record::Stream { sid: sid.clone(), key, record: Box::new(open_stream(first)) }
    }

    #[test]
    fn a_batchs_stream_changes_are_one_hset_and_one_hdel_per_session_in_order() {
        // Goal: a session's stream records and removals of a batch cost the store one command
        // each, records before removals; a removal then a new record of the same key keep
        // their order (flushed in between), and sessions never mix.
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        let (one, two) = (open_stream(1), open_stream(2));
        let mut gone = crate::fasthash::FastSet::default();
        let mut changes = StreamChanges { list: Vec::new(), gone: &mut gone };
        let mut pipe = Pipeline::default();
        changes.defer(&mut pipe, &a, 5, Some(&one));
        changes.defer(&mut pipe, &b, 3, None);
        changes.defer(&mut pipe, &a, 1, None);
        changes.defer(&mut pipe, &a, 6, Some(&two));
        assert!(pipe.is_empty(), "nothing written before the flush");
        changes.defer(&mut pipe, &a, 1, Some(&one));
        changes.flush(&mut pipe);
        let text = String::from_utf8_lossy(pipe.bytes()).replace("\r\n", " ");
        let commands: Vec<String> = text
            .split('*')
            .filter(|c| !c.is_empty())
            .map(|c| {
                let words: Vec<&str> = c.split(' ').filter(|w| !w.starts_with('$')).collect();
                let key =
                    |w: &str| if w.starts_with('{') { "REC".to_string() } else { w.to_string() };
                words[1..]
                    .iter()
                    .filter(|w| !w.is_empty())
                    .map(|w| key(w))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        let (hset_a, hdel_a, hdel_b) =
            ("HSET tm:st:{a} 5 REC 6 REC", "HDEL tm:st:{a} 1", "HDEL tm:st:{b} 3");
        let mut first = vec![hset_a.to_string(), hdel_a.to_string()];
        let mut other = vec![hdel_b.to_string()];
        if commands[0] == hdel_b {
            std::mem::swap(&mut first, &mut other);
        }
        let mut expected = [first, other].concat();
        expected.push("HSET tm:st:{a} 1 REC".into());
        assert_eq!(commands, expected, "{text}");
        assert_eq!(pipe.commands(), 4);
    }

    #[test]
    fn recycled_lists_keep_their_allocation() {
        // Goal: a batch's working lists (`BatchScratch`) reuse the last batch's memory, whatever
        // the lifetime of the borrows they held: no allocation per batch on the mirror thread.
        let sid: Arc<str> = Arc::from("a");
        let mut list: Vec<(&Arc<str>, u64)> = Vec::with_capacity(300);
        list.push((&sid, 1));
        let at = list.as_ptr() as usize;
        let kept: Vec<(&'static Arc<str>, u64)> = recycle(list);
        assert_eq!((kept.as_ptr() as usize, kept.capacity(), kept.len()), (at, 300, 0));
        let steps: Vec<Step<'static>> = Vec::with_capacity(64);
        let at = steps.as_ptr() as usize;
        let again: Vec<Step<'_>> = recycle(steps);
        assert_eq!((again.as_ptr() as usize, again.capacity()), (at, 64));
    }

    #[test]
    fn an_image_is_marked_durable_only_after_its_streams_and_events() {
        let sid: Arc<str> = Arc::from("0001-image");
        let image = SessionImage {
            sid: sid.clone(),
            owner: 1,
            tag: 7,
            earlier_tags: Vec::new(),
            version: "2025-11-25".into(),
            subject: None,
            client: "{}".into(),
            log: "info".into(),
            streams: vec![(1, open_stream(1))],
            events: vec![EventImage { seq: 1, stream: 1, data: Bytes::from_static(b"e1") }],
            next_seq: 2,
        };
        let mut pipe = Pipeline::default();
        push_image(&mut pipe, &image, &mut VecDeque::new());
        let text = String::from_utf8_lossy(pipe.bytes()).into_owned();
        // Where `needle` first occurs at or after `from`.
        let at = |from: usize, needle: &str| {
            from + text[from..].find(needle).unwrap_or_else(|| panic!("{needle} in {text}"))
        };
        let not_yet = at(0, "$7\r\ndurable\r\n$1\r\n0\r\n");
        let stream = at(not_yet, "tm:st:");
        let event = at(stream, "XADD");
        let marked = at(event, "$7\r\ndurable\r\n$1\r\n1\r\n");
        assert!(!text[..marked].contains("durable\r\n$1\r\n1"), "{text}");
        assert!(text.starts_with("*1\r\n$5\r\nMULTI\r\n"), "one transaction: {text}");
        let after = text[marked..].matches("\r\n*").count();
        assert_eq!(after, 1, "durable 1 is the last command before EXEC: {text}");
        assert!(text.ends_with("EXEC\r\n"), "{text}");
    }

    fn shape(steps: &[Step<'_>]) -> Vec<String> {
        steps
            .iter()
            .map(|step| match step {
                Step::Events { sid, pieces, .. } => {
                    let seqs: Vec<String> = pieces
                        .iter()
                        .map(|p| match p {
                            Piece::One(e) => e.seq.to_string(),
                            Piece::Priming { seq, .. } => format!("i{seq}"),
                            Piece::Packed { first, .. } => format!("p{first}"),
                        })
                        .collect();
                    format!("{sid}:{}", seqs.join(","))
                }
                Step::Stream(sid, _, record) => format!("{sid}:st{}", record.first),
                Step::Gone(sid, key) => format!("{sid}:gone{key}"),
                Step::Record(Record::End { sid }) => format!("{sid}:end"),
                Step::Record(_) => "other".into(),
            })
            .collect()
    }

    fn packed(sid: &Arc<str>, first_seq: u64, count: u32) -> Record {
        let mut packed = Vec::new();
        for n in 0..count {
            keys::pack_event(&mut packed, 1, format!("e{}", u64::from(n) + first_seq).as_bytes());
        }
        let run = crate::durable::record::PackedRun {
            first_seq,
            count,
            payload_bytes: packed.len() - count as usize * keys::PACKED_EVENT_HEADER,
            packed,
            at: std::time::Instant::now(),
            first_kept: None,
        };
        Record::Run { sid: sid.clone(), run }
    }

    #[test]
    fn gathered_runs_and_an_events_stream_record_join_the_plan_in_order() {
        // Goal: a worker's packed run continues a run of single events (and the next event
        // continues it) when the sequence numbers meet, never across a gap; an event that
        // carries its stream's record puts that record after the event, once, at its last
        // change; the entry written packs every event in order.
        let a: Arc<str> = Arc::from("a");
        let mut opened = event(&a, 1);
        if let Record::Event { then, gone, .. } = &mut opened {
            *gone = Some(7);
            *then = Some(Box::new(match stream(&a, 1, 1) {
                Record::Stream { record, .. } => *record,
                _ => unreachable!("a stream record"),
            }));
        }
        let records = [opened, packed(&a, 2, 3), event(&a, 5), packed(&a, 7, 2), stream(&a, 1, 9)];
        let refs: Vec<&Record> = records.iter().collect();
        let steps = plan(&refs, &mut BatchScratch::default());
        assert_eq!(
            shape(&steps),
            ["a:gone7", "a:1,p2,5", "a:p7", "a:st9"],
            "the removal first; 7 does not follow 5"
        );
        let Step::Events { pieces, .. } = &steps[1] else { panic!("the run after the removal") };
        let mut pipe = Pipeline::default();
        let entry = push_run(&mut pipe, "a", pieces).expect("an entry");
        assert_eq!((entry.first, entry.bytes), (1, 6), "events 1..=5: '' e2 e3 e4 and e5's ''");
        let text = String::from_utf8_lossy(pipe.bytes()).into_owned();
        let order: Vec<usize> = ["e2", "e3", "e4"].iter().filter_map(|e| text.find(e)).collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]) && order.len() == 3, "{text:?}");
    }

    #[test]
    fn a_primed_event_writes_its_priming_event_first_in_the_same_entry() {
        // Goal: a quick call's one record (`Record::Event::primed`: its priming event and its
        // final one) is written as the two records were: the evicted stream's removal, then
        // one entry holding the priming event and the final (and what follows without a gap),
        // then the stream's record.
        let a: Arc<str> = Arc::from("a");
        let mut quick = event(&a, 2);
        if let Record::Event { primed, event, then, gone, .. } = &mut quick {
            *primed = true;
            event.data = Bytes::from_static(b"final");
            *gone = Some(7);
            *then = Some(Box::new(open_stream(1)));
        }
        let records = [quick, event(&a, 3)];
        let refs: Vec<&Record> = records.iter().collect();
        let steps = plan(&refs, &mut BatchScratch::default());
        assert_eq!(shape(&steps), ["a:gone7", "a:i1,2,3", "a:st1"]);
        let Step::Events { pieces, .. } = &steps[1] else { panic!("the run after the removal") };
        let mut pipe = Pipeline::default();
        let entry = push_run(&mut pipe, "a", pieces).expect("an entry");
        assert_eq!((entry.first, entry.bytes), (1, 5), "events 1..=3: '', 'final', ''");
        let mut packed = Vec::new();
        for data in [&b""[..], b"final", b""] {
            keys::pack_event(&mut packed, 1, data);
        }
        let written = pipe.bytes().windows(packed.len()).any(|w| w == packed.as_slice());
        assert!(written, "the entry packs the priming event, the final, the next, in order");
    }

    #[test]
    fn a_batch_writes_each_sessions_runs_of_events_once_and_each_stream_at_its_last_change() {
        // Goal: the grouping that makes a stream-heavy batch cheap never reorders a stream's
        // record ahead of its events, never joins events across a gap or a session's end, and
        // keeps only a stream's last state.
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        let records = [
            stream(&a, 1, 1),
            event(&a, 1),
            event(&b, 7),
            event(&a, 2),
            stream(&a, 1, 2),
            event(&a, 4),
            event(&b, 8),
            Record::End { sid: b.clone() },
            event(&b, 9),
        ];
        let refs: Vec<&Record> = records.iter().collect();
        assert_eq!(
            shape(&plan(&refs, &mut BatchScratch::default())),
            ["a:1,2", "b:7,8", "a:st2", "a:4", "b:end", "b:9"],
            "runs of consecutive events at their first event; stream a/1 once, at its last change"
        );
    }
}
