//! The store behind the mirror (`Store`), small enough that another engine (NATS JetStream, a
//! SQL table) can follow without touching the protocol paths; `RedisStore` is the one there is
//! (Redis 7 or Valkey, the schema in `durable`'s module doc). Every call is blocking and
//! bounded by the connection's timeouts: only the mirror and reader threads call it, never a
//! worker.

use std::collections::HashMap;
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
}

impl RedisStore {
    /// Connects to `url` within `timeout`; every command is bounded by `timeout` too.
    pub(crate) fn connect(url: &DurableUrl, timeout: Duration) -> Result<RedisStore, StoreError> {
        let client = redis::Client::open(url.to_string().as_str())?;
        let connection = client.get_connection_with_timeout(timeout)?;
        connection.set_read_timeout(Some(timeout))?;
        connection.set_write_timeout(Some(timeout))?;
        Ok(RedisStore { connection })
    }
}

fn expire_session(pipe: &mut redis::Pipeline, sid: &str, ttl_ms: u64) {
    for key in [keys::session(sid), keys::streams(sid), keys::events(sid)] {
        pipe.cmd("PEXPIRE").arg(key).arg(ttl_ms).ignore();
    }
}

fn push_event(pipe: &mut redis::Pipeline, sid: &str, event: &EventImage) {
    pipe.cmd("XADD")
        .arg(keys::events(sid))
        .arg(keys::event_entry_id(event.seq))
        .arg("s")
        .arg(event.stream)
        .arg("d")
        .arg(&event.data[..])
        .ignore();
}

fn push_image(pipe: &mut redis::Pipeline, image: &SessionImage) {
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
    for event in &image.events {
        push_event(pipe, sid, event);
    }
}

fn stream_json(record: &StreamRecord) -> String {
    serde_json::to_string(record).unwrap_or_default()
}

impl Store for RedisStore {
    fn write(&mut self, records: &[&Record], session_ttl: Duration) -> Result<(), StoreError> {
        let ttl_ms = session_ttl.as_millis().max(1) as u64;
        let mut pipe = redis::pipe();
        let mut touched: Vec<&str> = Vec::new();
        let mut ended: Vec<&str> = Vec::new();
        for record in records {
            match record {
                Record::Session(image) => push_image(&mut pipe, image),
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
                Record::Event { sid, event, .. } => push_event(&mut pipe, sid, event),
                Record::Trim { sid, first_kept } => {
                    pipe.cmd("XTRIM")
                        .arg(keys::events(sid))
                        .arg("MINID")
                        .arg(keys::event_entry_id(*first_kept))
                        .ignore();
                }
                Record::End { sid } => {
                    pipe.cmd("DEL")
                        .arg(keys::session(sid))
                        .arg(keys::streams(sid))
                        .arg(keys::events(sid))
                        .ignore();
                    ended.push(sid);
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
                if !touched.contains(&&**sid) {
                    touched.push(sid);
                }
            }
        }
        for sid in touched.into_iter().filter(|sid| !ended.contains(sid)) {
            expire_session(&mut pipe, sid, ttl_ms);
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
            let seq = keys::event_seq(&id).ok_or_else(|| StoreError(format!("event id {id}")))?;
            let mut stream = None;
            let mut data = Bytes::new();
            for (name, value) in fields {
                match name.as_str() {
                    "s" => stream = std::str::from_utf8(&value).ok().and_then(|s| s.parse().ok()),
                    "d" => data = Bytes::from(value),
                    _ => {}
                }
            }
            let stream = stream.ok_or_else(|| StoreError(format!("event {id} names no stream")))?;
            image.events.push(EventImage { seq, stream, data });
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

    fn lease_alive(&mut self, node: u8) -> Result<bool, StoreError> {
        let n: i64 = redis::cmd("EXISTS").arg(keys::lease(node)).query(&mut self.connection)?;
        Ok(n == 1)
    }
}
