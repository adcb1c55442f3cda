//! The durable mirror (`--durable redis://…`, CONTRACT §10). This module owns the store's key
//! schema: every key name, entry id and field encoding is made by a function of `keys`, so the
//! writer (each core's records, drained by the mirror thread, or with `--durable-writer core`
//! by a task on the core itself: `writer`) and the reader (a peer adopting a dead node's
//! sessions) can never disagree on a byte.
//!
//! ## The schema (Redis 7 / Valkey)
//! All keys start with `tm:`. `SID` is a session id as on the wire (38 hex digits), `NODE` a
//! node id in decimal. A name's `{…}` is its Redis Cluster hash tag (only what is inside is
//! hashed to the slot): every key of a session is in its id's slot, a lease and its claims in
//! the node's (`keys::slot`). The braces are part of the name on one server too, so every store
//! kind holds the same keys. (Builds before the Cluster store named the session keys and the
//! lease without braces: a node of such a build and one of this build do not adopt each other's
//! sessions; upgrade every node while none dies.)
//!
//! | key | type | what |
//! | --- | --- | --- |
//! | `tm:lease:{NODE}` | string | the node's liveness lease: its boot id (16 hex digits), `SET … PX lease`; renewed every third of `--durable-lease-ms` by the mirror thread; absent = the node is dead |
//! | `tm:claims:{NODE}` | set | Redis Cluster only: the sessions adopters claimed while the node's lease was absent (`keys::CLAIM_SCRIPT`), read and deleted by the node's next renewal (`keys::RENEW_SCRIPT`), expiring after `--durable-claims-ttl-ms` (60 s) |
//! | `tm:s:{SID}` | hash | the session: `owner` (node id in decimal, changed only by `ADOPT_SCRIPT`), `tag` (the session's event-id tag, decimal u32), `rev` (protocol version), `subject` (absent without authorization), `client` (the client's `initialize` params: capabilities, clientInfo; JSON), `log` (the logging level), `next` (the sequence number the ring's next event takes, for a ring that holds none), `tags` (the event-id tags before each adoption whose events the ring may still hold, `UNTIL:TAG,…`; absent for a session never adopted), `durable` (`1`, or `0` while the mirror of this session is incomplete: never adopted then) |
//! | `tm:st:{SID}` | hash | one field per request stream, the stream key in decimal → `StreamRecord` JSON |
//! | `tm:ev:{SID}` | stream | the ring's events in runs: one entry per run of consecutive events a batch wrote, id `event_entry_id(first seq)` = `SEQ-1`, one field `r` (`keys::EVENT_RUN_FIELD`): the run packed, per event its stream key and payload length (u32 little-endian each) then the payload exactly as it was appended to the ring, a progress notification's opening included (the ring itself keeps that opening apart; the n-th is event SEQ+n; entries of older builds have fields `s`, `d` per event instead, still read). A stream's final event is the one its `StreamRecord` names. Trimmed with `XTRIM … MINID` of the entry holding the ring's oldest event, once the entries before it reach `store::TRIM_SLACK_ENTRIES` (32) or `store::TRIM_SLACK_BYTES` (64 KiB): the store holds at most that much past the ring per session |
//! | `tm:k:SUBJ:KEY` | hash | a 2026-07-28 `Idempotency-Key` record: `SUBJ` the subject's bytes in hex (`-` without one), `KEY` the header as sent; fields `fp` (the params fingerprint, decimal u64), `state` (`running` or `done`), `node`, `result` (the final JSON-RPC response, when done) |
//! | `tm:t:TASK` | hash | a task (tasks extension), `TASK` its id as on the wire: `node`, `subject` (absent without authorization), `detailed` (its `DetailedTask` JSON when last mirrored: created, finished), `state` (`running` or `done`) |
//!
//! Invariant the writer keeps: per session the store holds a gap-free prefix of the ring. When a
//! record of a session cannot be queued or written, the session is marked not durable
//! (`durable` = `0` when the store is reachable) and nothing more of it is written until a whole
//! rewrite of it succeeds. A reader therefore never replays a silent gap: events the store lacks
//! end their stream with `-31006` (outcome unknown).
//!
//! Every key of a session carries the session's TTL (`PEXPIRE`: `--session-idle-secs` plus
//! `--stream-retention-secs`, renewed on each write), keyed records and tasks their own
//! retention, so the store's memory is bounded by the node's own limits.

mod cluster;
mod engine;
pub(crate) mod keys;
mod link;
mod mirror;
mod misses;
pub(crate) mod queue;
mod reader;
pub(crate) mod record;
mod resp;
mod sentinel;
mod session;
pub(crate) mod store;
mod writer;

use std::sync::Arc;

pub(crate) use misses::Misses;
pub(crate) use queue::{CoreChange, CoreTap};
pub(crate) use reader::{Answer, Query, Reader};
pub(crate) use record::{EventImage, SessionImage};
pub(crate) use session::{SessionChange, SessionMirror};
pub(crate) use store::Claim;
pub(crate) use writer::CoreWriter;

use crate::config::Config;
use crate::metrics::DurableStats;

/// A core's shared queue state, its end of the ring, and (`--durable-writer core`) the other.
type CoreEnds = (Arc<queue::MirrorQueue>, queue::WorkerEnd, Option<queue::Drain>);

/// The node's durable mirror (`--durable`): the mirror thread, the reader thread, and one queue
/// per core (drained by the thread, or with `--durable-writer core` by the core's own writer). Dropping it stops both threads (the mirror after writing what is queued).
pub(crate) struct Durable {
    // Dropped first: the mirror's last write before the reader goes.
    _mirror: mirror::Mirror,
    reader: Arc<Reader>,
    /// Each core's shared queue state and its end of the ring (and with `--durable-writer
    /// core` the ring's other end), until `for_core` hands them over.
    cores: Vec<Option<CoreEnds>>,
    /// `--durable-writer core` (not for a Redis Cluster): each core's writer's settings.
    per_core: Option<writer::WriterLimits>,
    state: Arc<queue::MirrorState>,
    /// The mirror thread's figures, for `/metrics`.
    pub(crate) stats: Arc<DurableStats>,
    cfg: crate::config::DurableConfig,
    node: u8,
}

impl Durable {
    /// Starts the mirror for `cfg` (`Ok(None)` when `--durable` is off).
    pub(crate) fn start(cfg: &Config) -> std::io::Result<Option<Durable>> {
        let Some(durable) = cfg.durable.clone() else { return Ok(None) };
        let session_ttl = cfg.sessions.session_idle + cfg.sessions.stream_retention;
        let per_core = Self::per_core(&durable, cfg.server.node_id, session_ttl);
        let (mut cores, mut drains, mut shared) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..cfg.server.threads {
            let (queue, producer, drain) =
                queue::channel(durable.queue_records_max, durable.queue_bytes_max);
            shared.push(queue.clone());
            match per_core {
                Some(_) => cores.push(Some((queue, producer, Some(drain)))),
                None => {
                    cores.push(Some((queue, producer, None)));
                    drains.push(drain);
                }
            }
        }
        let state = Arc::new(queue::MirrorState::default());
        state.per_core.store(per_core.is_some(), std::sync::atomic::Ordering::Release);
        let stats = Arc::new(DurableStats::default());
        let _ = stats.queues.set(Box::new(queue::Levels(shared.clone())));
        let mirror = mirror::Mirror::start(
            &durable,
            cfg.server.node_id,
            session_ttl,
            drains,
            shared,
            state.clone(),
            stats.clone(),
        )?;
        let reader = Reader::start(&durable, cfg.server.node_id)?;
        tracing::info!(store = %durable.url, lease_ms = durable.lease.as_millis() as u64, "durable mirror on");
        Ok(Some(Durable {
            _mirror: mirror,
            reader,
            cores,
            per_core,
            state,
            stats,
            cfg: durable,
            node: cfg.server.node_id,
        }))
    }

    /// `--durable-writer core`'s settings for each core's writer; `None` for the thread's writer
    /// (chosen, or a Redis Cluster store: its batches split per shard stay on the thread).
    fn per_core(
        cfg: &crate::config::DurableConfig,
        node: u8,
        session_ttl: std::time::Duration,
    ) -> Option<writer::WriterLimits> {
        if cfg.writer != crate::config::DurableWriter::Core {
            return None;
        }
        if matches!(cfg.url, crate::config::DurableStore::Cluster(_)) {
            tracing::info!("a Redis Cluster store: the mirror thread writes the batches (--durable-writer core covers one server and Sentinel)");
            return None;
        }
        Some(writer::WriterLimits {
            node,
            session_ttl,
            batch_records_max: cfg.batch_records_max,
            batch_bytes_max: cfg.batch_bytes_max,
            replication: store::Replication::of(cfg),
            linger: cfg.linger,
        })
    }

    /// Core `index`'s handles: its queue's tap and the shared reader (once per core).
    pub(crate) fn for_core(&mut self, index: usize) -> CoreDurable {
        let (queue, producer, drain) =
            self.cores[index].take().expect("each core's ring is handed over once");
        let writer =
            drain.zip(self.per_core).map(|(drain, limits)| (drain, limits, self.stats.clone()));
        CoreDurable {
            queue,
            producer,
            writer,
            state: self.state.clone(),
            reader: self.reader.clone(),
            node: self.node,
            write_ahead: self.cfg.write_ahead,
            stop_write: self.cfg.stop_write,
        }
    }
}

impl Drop for Durable {
    fn drop(&mut self) {
        self.reader.stop();
    }
}

/// What a worker thread receives to build its `CoreTap` on (`Send`; the tap itself is not).
pub(crate) struct CoreDurable {
    queue: Arc<queue::MirrorQueue>,
    producer: queue::WorkerEnd,
    /// `--durable-writer core`: the ring's other end and what the core's writer needs.
    writer: Option<(queue::Drain, writer::WriterLimits, Arc<DurableStats>)>,
    state: Arc<queue::MirrorState>,
    /// The node's reader thread.
    pub(crate) reader: Arc<Reader>,
    node: u8,
    write_ahead: std::time::Duration,
    stop_write: std::time::Duration,
}

impl std::fmt::Debug for CoreDurable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoreDurable").field("node", &self.node).finish_non_exhaustive()
    }
}

impl CoreDurable {
    /// The worker's tap on its queue, counting into `metrics`. With `--durable-writer core` it
    /// also spawns the core's writer task (`CoreWriter::run`) on the calling runtime.
    pub(crate) fn tap(self, metrics: Arc<crate::metrics::CoreMetrics>) -> CoreTap {
        let mut tap = CoreTap::new(
            self.queue,
            self.producer,
            self.state.clone(),
            self.node,
            self.write_ahead,
            self.stop_write,
            metrics,
        );
        if let Some((drain, limits, stats)) = self.writer {
            let wake = std::rc::Rc::new(queue::WriterWake::default());
            tap.writer_wake = Some(wake.clone());
            monoio::spawn(CoreWriter::new(drain, self.state, stats, limits, wake).run());
        }
        tap
    }
}
