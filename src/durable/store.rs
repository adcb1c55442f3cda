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

use super::keys::{self, StreamRecord};
use super::record::{EventImage, Record, SessionImage};
use crate::config::DurableUrl;

/// The store failed (unreachable, timed out, refused a command); the text says how.
#[derive(Debug, thiserror::Error)]
#[error("durable store: {0}")]
pub(crate) struct StoreError(pub(crate) String);

impl From<redis::RedisError> for StoreError {
    fn from(e: redis::RedisError) -> StoreError {
        StoreError(e.to_string())
    }
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
    /// Writes `records` in order, each session's keys with time to live `session_ttl`; all or
    /// an error (the caller then treats every session in the batch as not written).
    fn write(&mut self, records: &[&Record], session_ttl: Duration) -> Result<(), StoreError>;
    /// Marks sessions not durable (never adopted until rewritten).
    fn mark_not_durable(
        &mut self,
        sids: &[Arc<str>],
        session_ttl: Duration,
    ) -> Result<(), StoreError>;
    /// Sets this node's liveness lease to `boot` for `lease`.
    fn renew_lease(&mut self, node: u8, boot: &str, lease: Duration) -> Result<(), StoreError>;
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

/// Connects to the store `url` names, bounded by `timeout` (the one place an engine is
/// chosen: another engine adds its URL scheme here, nothing else changes).
pub(crate) fn connect(url: &DurableUrl, timeout: Duration) -> Result<Box<dyn Store>, StoreError> {
    Ok(Box::new(RedisStore::connect(url, timeout)?))
}

/// `Store` on one Redis connection.
pub(crate) struct RedisStore {
    connection: redis::Connection,
    /// Per session, the first sequence number of each `tm:ev` entry written (oldest first): an
    /// entry holds a run of events, so a trim keeps the entry holding the oldest kept event.
    /// At most one per event the ring holds; whole images reset it, a session's end drops it.
    starts: FastMap<Arc<str>, VecDeque<u64>>,
    /// Per session, when its keys' time to live was last renewed and which of its keys existed
    /// then: renewed at most every `TTL_RENEW_MS`, and at once when a batch makes a new key.
    expiry: FastMap<Arc<str>, Expiry>,
}

/// Renewing a session's three TTLs on every batch would cost Redis three commands per session
/// per batch; once a second is plenty against TTLs of minutes.
const TTL_RENEW_MS: u64 = 1_000;

/// A session's last TTL renewal.
struct Expiry {
    renewed: std::time::Instant,
    streams: bool,
    events: bool,
}

/// One step of a batch's pipeline: a record, or a session's run of consecutive events of the
/// batch written as one entry (a stream-heavy batch costs Redis one command per session, not
/// one per event).
enum Step<'a> {
    Record(&'a Record),
    Events(&'a Arc<str>, Vec<&'a EventImage>),
}

/// The batch as steps: each session's events gathered at the place of its first event (earlier
/// than the records between them, which only ever follow their events), a run broken by the
/// session's whole image or end, and by a gap in sequence numbers (never written together).
/// A stream's record appears once, at the place of its last change in the batch (a crash
/// mid-batch leaves its state from before the batch, never one ahead of its events).
fn plan<'a>(records: &[&'a Record]) -> Vec<Step<'a>> {
    let mut last_change: FastMap<(&'a str, u32), usize> = FastMap::default();
    for (index, record) in records.iter().enumerate() {
        if let Record::Stream { sid, key, .. } = record {
            last_change.insert((&**sid, *key), index);
        }
    }
    let mut steps: Vec<Step<'a>> = Vec::with_capacity(records.len());
    let mut open: FastMap<&'a str, usize> = FastMap::default();
    for (index, record) in records.iter().copied().enumerate() {
        match record {
            Record::Stream { sid, key, .. } if last_change.get(&(&**sid, *key)) != Some(&index) => {
            }
            Record::Event { sid, event, .. } => {
                if let Some(&index) = open.get(&**sid) {
                    if let Step::Events(_, events) = &mut steps[index] {
                        if events.last().is_some_and(|last| last.seq + 1 == event.seq) {
                            events.push(event);
                            continue;
                        }
                    }
                }
                open.insert(sid, steps.len());
                steps.push(Step::Events(sid, vec![event]));
            }
            Record::Session(image) => {
                open.remove(&*image.sid);
                steps.push(Step::Record(record));
            }
            Record::End { sid } => {
                open.remove(&**sid);
                steps.push(Step::Record(record));
            }
            _ => steps.push(Step::Record(record)),
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
        Ok(RedisStore { connection, starts: FastMap::default(), expiry: FastMap::default() })
    }
}

fn expire_session(pipe: &mut redis::Pipeline, sid: &str, ttl_ms: u64) {
    for key in [keys::session(sid), keys::streams(sid), keys::events(sid)] {
        pipe.cmd("PEXPIRE").arg(key).arg(ttl_ms).ignore();
    }
}

/// One `tm:ev` entry for a run of consecutive events: id of the first, then `s`, `d` per
/// event in order.
fn push_run(pipe: &mut redis::Pipeline, sid: &str, events: &[&EventImage]) {
    let Some(first) = events.first() else { return };
    let xadd = pipe.cmd("XADD").arg(keys::events(sid)).arg(keys::event_entry_id(first.seq));
    for event in events {
        xadd.arg("s").arg(event.stream).arg("d").arg(&event.data[..]);
    }
    xadd.ignore();
}

fn push_image(pipe: &mut redis::Pipeline, image: &SessionImage, starts: &mut VecDeque<u64>) {
    let sid = &*image.sid;
    pipe.cmd("DEL").arg(keys::session(sid)).arg(keys::streams(sid)).arg(keys::events(sid)).ignore();
    let hset = pipe.cmd("HSET").arg(keys::session(sid));
    hset.arg("owner")
        .arg(image.owner)
        .arg("tag")
        .arg(image.tag)
        .arg("rev")
        .arg(&image.version)
        .arg("client")
        .arg(&image.client)
        .arg("log")
        .arg(&image.log)
        .arg("next")
        .arg(image.next_seq)
        .arg("durable")
        .arg(1);
    if let Some(subject) = &image.subject {
        hset.arg("subject").arg(subject);
    }
    hset.ignore();
    for (key, record) in &image.streams {
        pipe.cmd("HSET").arg(keys::streams(sid)).arg(*key).arg(stream_json(record)).ignore();
    }
    for run in image.events.chunks(IMAGE_RUN_EVENTS) {
        let run: Vec<&EventImage> = run.iter().collect();
        starts.push_back(run[0].seq);
        push_run(pipe, sid, &run);
    }
}

/// Events per `tm:ev` entry of a whole image (an entry's fields are one command's arguments).
const IMAGE_RUN_EVENTS: usize = 256;

fn stream_json(record: &StreamRecord) -> String {
    serde_json::to_string(record).unwrap_or_default()
}

impl RedisStore {
    fn push_events(&mut self, pipe: &mut redis::Pipeline, sid: &Arc<str>, events: &[&EventImage]) {
        if let Some(first) = events.first() {
            self.starts.entry(sid.clone()).or_default().push_back(first.seq);
            push_run(pipe, sid, events);
        }
    }

    /// Trims the entries wholly before `first_kept`: the one holding it stays.
    fn push_trim(&mut self, pipe: &mut redis::Pipeline, sid: &str, first_kept: u64) {
        let Some(starts) = self.starts.get_mut(sid) else { return };
        while starts.len() >= 2 && starts[1] <= first_kept {
            starts.pop_front();
        }
        if let Some(&oldest) = starts.front() {
            pipe.cmd("XTRIM")
                .arg(keys::events(sid))
                .arg("MINID")
                .arg(keys::event_entry_id(oldest))
                .ignore();
        }
    }
}

impl Store for RedisStore {
    fn write(&mut self, records: &[&Record], session_ttl: Duration) -> Result<(), StoreError> {
        let ttl_ms = session_ttl.as_millis().max(1) as u64;
        let mut pipe = redis::pipe();
        // Each session written in this batch: whether it made its streams or events key.
        let mut touched: FastMap<&Arc<str>, (bool, bool)> = FastMap::default();
        let mut ended: Vec<&str> = Vec::new();
        let mut trims: Vec<(&str, u64)> = Vec::new();
        for step in plan(records) {
            let record = match step {
                Step::Events(sid, events) => {
                    self.push_events(&mut pipe, sid, &events);
                    touched.entry(sid).or_default().1 = true;
                    continue;
                }
                Step::Record(record) => record,
            };
            match record {
                Record::Session(image) => {
                    let starts = self.starts.entry(image.sid.clone()).or_default();
                    starts.clear();
                    push_image(&mut pipe, image, starts);
                }
                Record::Stream { sid, key, record } => {
                    pipe.cmd("HSET")
                        .arg(keys::streams(sid))
                        .arg(*key)
                        .arg(stream_json(record))
                        .ignore();
                }
                Record::StreamGone { sid, key } => {
                    pipe.cmd("HDEL").arg(keys::streams(sid)).arg(*key).ignore();
                }
                // Grouped by `plan`.
                Record::Event { .. } => {}
                Record::Trim { sid, first_kept } => {
                    match trims.iter_mut().find(|(s, _)| *s == &**sid) {
                        Some((_, kept)) => *kept = (*kept).max(*first_kept),
                        None => trims.push((sid, *first_kept)),
                    }
                }
                Record::End { sid } => {
                    pipe.cmd("DEL")
                        .arg(keys::session(sid))
                        .arg(keys::streams(sid))
                        .arg(keys::events(sid))
                        .ignore();
                    self.starts.remove(sid);
                    trims.retain(|(s, _)| *s != &**sid);
                    ended.push(sid);
                }
                Record::Task { id, node, subject, detailed, running, ttl_ms } => {
                    let key = keys::task(id);
                    let hset = pipe.cmd("HSET").arg(&key);
                    hset.arg("node").arg(*node).arg("detailed").arg(detailed);
                    hset.arg("state").arg(if *running { "running" } else { "done" });
                    if let Some(subject) = subject {
                        hset.arg("subject").arg(subject);
                    }
                    hset.ignore();
                    pipe.cmd("PEXPIRE").arg(&key).arg(*ttl_ms).ignore();
                }
                Record::Keyed { name, fingerprint, node, response, ttl_ms } => {
                    let hset = pipe.cmd("HSET").arg(name);
                    hset.arg("fp").arg(fingerprint.to_string()).arg("node").arg(*node);
                    match response {
                        Some(response) => {
                            hset.arg("state").arg("done").arg("result").arg(&response[..])
                        }
                        None => hset.arg("state").arg("running"),
                    };
                    hset.ignore();
                    pipe.cmd("PEXPIRE").arg(name).arg(*ttl_ms).ignore();
                }
            }
            if let Some(sid) = record.session() {
                let made = touched.entry(sid).or_default();
                match record {
                    Record::Stream { .. } => made.0 = true,
                    Record::Session(image) => {
                        self.expiry.remove(sid);
                        made.0 |= !image.streams.is_empty();
                        made.1 |= !image.events.is_empty();
                    }
                    _ => {}
                }
            }
        }
        for (sid, first_kept) in trims {
            self.push_trim(&mut pipe, sid, first_kept);
        }
        let now = std::time::Instant::now();
        for (sid, (streams, events)) in touched {
            if ended.contains(&&**sid) {
                self.expiry.remove(sid);
                continue;
            }
            let due = match self.expiry.get(sid) {
                None => true,
                Some(e) => {
                    (streams && !e.streams)
                        || (events && !e.events)
                        || now.duration_since(e.renewed) >= Duration::from_millis(TTL_RENEW_MS)
                }
            };
            if due {
                expire_session(&mut pipe, sid, ttl_ms);
                let e = self.expiry.entry(sid.clone()).or_insert(Expiry {
                    renewed: now,
                    streams,
                    events,
                });
                e.renewed = now;
                e.streams |= streams;
                e.events |= events;
            }
        }
        pipe.query::<()>(&mut self.connection)?;
        Ok(())
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

    fn renew_lease(&mut self, node: u8, boot: &str, lease: Duration) -> Result<(), StoreError> {
        redis::cmd("SET")
            .arg(keys::lease(node))
            .arg(boot)
            .arg("PX")
            .arg(lease.as_millis().max(1) as u64)
            .query::<()>(&mut self.connection)?;
        Ok(())
    }

    fn claim(&mut self, sid: &str, me: u8) -> Result<Claim, StoreError> {
        let fields: HashMap<String, Vec<u8>> =
            redis::cmd("HGETALL").arg(keys::session(sid)).query(&mut self.connection)?;
        let text = |name: &str| fields.get(name).and_then(|v| std::str::from_utf8(v).ok());
        let Some(owner) = text("owner").and_then(|o| o.parse::<u8>().ok()) else {
            return Ok(Claim::Absent);
        };
        if text("durable") != Some("1") {
            return Ok(Claim::NotDurable);
        }
        let won: i64 = redis::cmd("EVAL")
            .arg(keys::ADOPT_SCRIPT)
            .arg(2)
            .arg(keys::session(sid))
            .arg(keys::lease(owner))
            .arg(owner)
            .arg(me)
            .query(&mut self.connection)?;
        if won != 1 {
            return Ok(if self.lease_alive(owner)? {
                Claim::OwnerAlive(owner)
            } else {
                Claim::Taken(owner)
            });
        }
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
        Ok(Claim::Won(Box::new(image)))
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
            event: EventImage { seq, stream: 1, data: Bytes::new() },
            at: std::time::Instant::now(),
        }
    }

    fn stream(sid: &Arc<str>, key: u32, first: u64) -> Record {
        let record = StreamRecord {
            kind: "post".into(),
            rid: None,
            fp: "0".into(),
            key: None,
            first,
            final_seq: None,
            settled: false,
        };
        Record::Stream { sid: sid.clone(), key, record: Box::new(record) }
    }

    fn shape(steps: &[Step<'_>]) -> Vec<String> {
        steps
            .iter()
            .map(|step| match step {
                Step::Events(sid, events) => {
                    let seqs: Vec<String> = events.iter().map(|e| e.seq.to_string()).collect();
                    format!("{sid}:{}", seqs.join(","))
                }
                Step::Record(Record::Stream { sid, record, .. }) => {
                    format!("{sid}:st{}", record.first)
                }
                Step::Record(Record::End { sid }) => format!("{sid}:end"),
                Step::Record(_) => "other".into(),
            })
            .collect()
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
            shape(&plan(&refs)),
            ["a:1,2", "b:7,8", "a:st2", "a:4", "b:end", "b:9"],
            "runs of consecutive events at their first event; stream a/1 once, at its last change"
        );
    }
}
