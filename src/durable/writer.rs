//! The per-core writer (`--durable-writer core`): a task on each worker's runtime that takes
//! the core's queued records, encodes them (`store::BatchEncoder`, the same commands the mirror
//! thread writes), sends them over its own io_uring connection to the store's primary and
//! counts the replies (`link::read_reply`), then acks the tickets and reports the sessions it
//! could not write, exactly as the mirror thread does (`queue::MirrorQueue::ack`, `lose`). No
//! mirror thread wakes per batch: on a vCPU shared with the worker those wake-ups preempted
//! the worker, and the thread's loopback sends were most of what the mirror cost a call.
//!
//! What stays on the mirror thread: the connection that defines the epoch, the lease and its
//! renewal, the fencing read after a lease loss (it publishes a fenced epoch: `fenced_epoch`),
//! marking sessions not durable, Sentinel discovery (it publishes the primary's address,
//! resolved, before the epoch it starts: a core never resolves a name). A Redis Cluster store
//! keeps the thread's writer (`Durable::start`).
//!
//! The mirror's rules, kept here per core (a session's records only ever reach its core's
//! writer): per session a gap-free prefix in the store (a record of a session is written only
//! while its whole image was written in the current epoch on this connection; a connection
//! made anew forgets every session, as a new epoch does); a session whose record could not be
//! written is lost (its core rewrites it whole) and, when it had been written, reported broken
//! (the thread marks it `durable` = `0`); one batch in flight; a batch of at most
//! `--durable-batch-records` records and `--durable-batch-bytes` bytes; in a fenced epoch an
//! image is written only after the store named no other owner of its session, and a session
//! it names another's owner of is disowned: nothing of it is written again.
//!
//! At a graceful stop the core, after its drain, waits (at most `--durable-stop-write-ms`) until
//! this task dealt with every record it queued (`CoreTap::write_queued_at_stop`), as the thread
//! writes its queues before it stops: the node's lease is renewed until both are done.
//!
//! Never: blocks the worker (every wait is an awaited io_uring operation bounded by
//! `mirror::STORE_TIMEOUT_MS`), resolves a host name, or lingers (records gather while a batch
//! is in flight: one batch per round trip under load, one record's batch when idle).

use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use monoio::buf::IoBufMut;
use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::TcpStream;

use super::keys::SessionKey;
use super::link::{self, Reply};
use super::mirror::{self, RECONNECT_PAUSE_MS, STORE_TIMEOUT_MS};
use super::queue::{Drain, MirrorState, Queued, WriterWake};
use super::record::Record;
use super::resp::Pipeline;
use super::store::{self, BatchEncoder, Replication};
use crate::fasthash::{FastMap, FastSet};
use crate::metrics::DurableStats;

/// How often a writer looks again while the node's lease may have lapsed and the thread is
/// renewing it: short against the lease (`--durable-lease-ms`, at least 300 ms), and a lapse
/// is rare (a store stalled or a node paused past a third of the lease).
const LEASE_RECHECK_MS: u64 = 2;

/// One core's writer; `run` is its task.
pub(crate) struct CoreWriter {
    /// This node (`--node-id`).
    node: u8,
    drain: Drain,
    state: Arc<MirrorState>,
    stats: Arc<DurableStats>,
    encoder: BatchEncoder,
    session_ttl: Duration,
    batch_records_max: usize,
    batch_bytes_max: usize,
    /// Notified by the core's `CoreTap::push` (and `written`'s hurry).
    wake: Rc<WriterWake>,
    /// `--durable-linger-us`.
    linger: Duration,
    /// The `MirrorState::fences` whose owner check this writer did.
    fences_seen: u64,
    conn: Option<Conn>,
    /// No connection before this (`RECONNECT_PAUSE_MS` after the store last failed).
    reconnect_at: Instant,
    /// The epoch in which each session's whole image was last written on this connection.
    written_epoch: FastMap<Arc<str>, u64>,
    /// Sessions a peer adopted while the node's lease was lost (`fenced_epoch`).
    disowned: FastSet<Arc<str>>,
    /// The batch's records (kept, so a batch allocates no list).
    taken: Vec<Queued>,
    /// The batch's records it writes, likewise (`store::recycle`).
    spare_writable: Vec<&'static Record>,
}

/// The writer's connection to the primary.
struct Conn {
    stream: TcpStream,
    /// The `MirrorState::primary_generation` it was made for.
    generation: u64,
    /// Received bytes: `buf[at..]` not yet read as replies.
    buf: Vec<u8>,
    at: usize,
}

/// The writer's settings, from `DurableConfig`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WriterLimits {
    pub(crate) node: u8,
    pub(crate) session_ttl: Duration,
    pub(crate) batch_records_max: usize,
    pub(crate) batch_bytes_max: usize,
    pub(crate) replication: Replication,
    pub(crate) linger: Duration,
}

impl CoreWriter {
    pub(crate) fn new(
        drain: Drain,
        state: Arc<MirrorState>,
        stats: Arc<DurableStats>,
        limits: WriterLimits,
        wake: Rc<WriterWake>,
    ) -> CoreWriter {
        CoreWriter {
            node: limits.node,
            drain,
            state,
            stats,
            encoder: BatchEncoder::new(limits.replication),
            session_ttl: limits.session_ttl,
            batch_records_max: limits.batch_records_max.max(1),
            batch_bytes_max: limits.batch_bytes_max,
            wake,
            linger: limits.linger,
            fences_seen: 0,
            conn: None,
            reconnect_at: Instant::now(),
            written_epoch: FastMap::default(),
            disowned: FastSet::default(),
            taken: Vec::new(),
            spare_writable: Vec::new(),
        }
    }

    /// The task: a batch whenever records are queued, one in flight at a time; after a batch
    /// that did not fill, records gather for `--durable-linger-us` unless a call waits for one
    /// (as on the mirror thread: fewer, fuller batches cost less per record).
    pub(crate) async fn run(mut self) {
        loop {
            if self.drain.len() == 0 {
                let notified = self.wake.records.notified();
                if self.drain.len() == 0 {
                    notified.await;
                    continue;
                }
            }
            let taken = self.write_batch().await;
            if taken < self.batch_records_max && self.should_linger() {
                let hurried = self.wake.hurry.notified();
                monoio::select! {
                    () = monoio::time::sleep(self.linger) => {}
                    () = hurried => {}
                }
            }
        }
    }

    /// As `Writer::should_linger` on the thread: not when a call waits for a record, not once
    /// half a batch is queued.
    fn should_linger(&self) -> bool {
        if self.linger.is_zero() || self.wake.urgent.replace(false) {
            return false;
        }
        self.drain.len() < self.batch_records_max / 2
    }

    /// Writes what is queued now (at most a batch), or drops it when the store is down.
    /// While the node's lease may have lapsed (`MirrorState::lease_until_ns`: paused, or the
    /// store stalled) nothing is written until the thread renewed it and, if it was lost,
    /// published the fencing; a store the thread found down drops what is queued (its sessions
    /// are rewritten once it is back).
    async fn write_batch(&mut self) -> usize {
        // The lease first: the epoch and the fencing it read are at least as new as it.
        let lease_until = self.state.lease_until_ns.load(Ordering::Acquire);
        let epoch = self.state.epoch.load(Ordering::Acquire);
        if super::queue::monotonic_ns() >= lease_until && self.state.up.load(Ordering::Acquire) {
            // The thread is renewing it (a store that stalls past it, a paused node): the
            // records wait in the queue, within its bounds, as they wait for the thread's
            // renewal with its writer; a store found down drops them (below).
            monoio::time::sleep(Duration::from_millis(LEASE_RECHECK_MS)).await;
            return 0;
        }
        if super::queue::monotonic_ns() >= lease_until || !self.connected().await {
            self.drop_queued();
            return 0;
        }
        let mut bytes = 0;
        while self.taken.len() < self.batch_records_max && bytes < self.batch_bytes_max {
            let Some(queued) = self.drain.pop() else { break };
            bytes += queued.bytes;
            self.taken.push(queued);
        }
        let taken = self.taken.len();
        if taken == 0 {
            return 0;
        }
        if self.state.fenced_epoch.load(Ordering::Acquire) == epoch {
            if let Err(why) = self.fence().await {
                self.settle(Err(why), FastSet::default(), 0);
                return taken;
            }
        }
        let mut skipped: FastSet<Arc<str>> = FastSet::default();
        let mut writable: Vec<&Record> = store::recycle(std::mem::take(&mut self.spare_writable));
        for queued in &self.taken {
            let record = &queued.record;
            if mirror::drops_disowned(&mut self.disowned, record) {
                continue;
            }
            match mirror::skipped_in_epoch(&mut self.written_epoch, record, epoch) {
                Some(sid) => {
                    skipped.insert(sid.clone());
                }
                None => writable.push(record),
            }
        }
        let waiting = self.encoder.encode(&writable, self.session_ttl);
        let written = writable.len();
        self.spare_writable = store::recycle(writable);
        let outcome = self.send_encoded(waiting).await;
        self.settle(outcome, skipped, written);
        taken
    }

    /// Sends the encoded batch and reads its replies (the last a `WAIT`'s count when
    /// `waiting`).
    async fn send_encoded(&mut self, waiting: bool) -> Result<(), String> {
        let pipe = self.encoder.pipeline();
        if pipe.is_empty() {
            return Ok(());
        }
        let replies = pipe.commands();
        let bytes = pipe.take_bytes();
        let replication = self.encoder.replication();
        let (bytes, outcome) = self.round_trip(bytes, replies, |_, _| {}).await;
        self.encoder.pipeline().give_back(bytes);
        let last = outcome?;
        if waiting {
            replication.held(last.unwrap_or(0)).map_err(|e| e.0)?;
        }
        Ok(())
    }

    /// In a fenced epoch: once per lease loss the sessions this core wrote, then the sessions
    /// whose images the batch holds, are checked (`disown_adopted`).
    async fn fence(&mut self) -> Result<(), String> {
        let fences = self.state.fences.load(Ordering::Acquire);
        if fences != self.fences_seen {
            // The lease was found lost: the sessions written before, now without a record
            // in the store, were adopted and ended by the adopter.
            let written: Vec<Arc<str>> = self.written_epoch.keys().cloned().collect();
            self.disown_adopted(written, false).await?;
            self.fences_seen = fences;
        }
        let sids: Vec<Arc<str>> = (self.taken.iter())
            .filter_map(|q| match &q.record {
                Record::Session(image) if !self.disowned.contains(&image.sid) => {
                    Some(image.sid.clone())
                }
                _ => None,
            })
            .collect();
        // An image without a record is a new session's (or one the store lost): written.
        self.disown_adopted(sids, true).await
    }

    /// Asks the store who owns `sids` and disowns each whose record names another node (or,
    /// unless `absent_is_ours`, has no record).
    async fn disown_adopted(
        &mut self,
        sids: Vec<Arc<str>>,
        absent_is_ours: bool,
    ) -> Result<(), String> {
        if sids.is_empty() {
            return Ok(());
        }
        let mut pipe = Pipeline::default();
        for sid in &sids {
            pipe.command(3).arg(b"HGET").arg_key(SessionKey::Record, sid).arg(b"owner");
        }
        let node = Some(self.node);
        let mut owners: Vec<Option<u8>> = vec![None; sids.len()];
        let (_, outcome) = self
            .round_trip(pipe.take_bytes(), sids.len(), |index, reply| {
                owners[index] = link::bulk(reply)
                    .and_then(|digits| std::str::from_utf8(digits).ok()?.parse().ok());
            })
            .await;
        outcome?;
        for (sid, owner) in sids.into_iter().zip(owners) {
            if owner == node || (owner.is_none() && absent_is_ours) {
                continue;
            }
            tracing::warn!(session = %&sid[..sid.len().min(8)], owner = ?owner,
                "session adopted by a peer while this node's lease was lost: no longer mirrored");
            self.written_epoch.remove(&sid);
            self.disowned.insert(sid);
        }
        Ok(())
    }

    /// The batch was written (`Ok`) or not: counts it, observes the lag, reports the sessions
    /// it could not write, and acks every ticket it took.
    fn settle(
        &mut self,
        outcome: Result<(), String>,
        mut skipped: FastSet<Arc<str>>,
        written: usize,
    ) {
        let acked_at = Instant::now();
        match outcome {
            Ok(()) => {
                let records = self.taken.iter().map(|queued| &queued.record);
                mirror::count_written(&self.stats, written, records, acked_at);
            }
            Err(why) => {
                if why.starts_with(store::UNREPLICATED) {
                    self.stats.batches_unreplicated_total.add_shared(1);
                }
                let mut broken = Vec::new();
                for queued in &self.taken {
                    let Some(sid) = queued.record.session() else { continue };
                    if self.disowned.contains(sid) {
                        continue;
                    }
                    // Written whole before on this connection: the store may hold part of
                    // what followed, so it is marked not durable there.
                    if self.written_epoch.remove(sid).is_some() {
                        broken.push(sid.clone());
                    }
                    skipped.insert(sid.clone());
                }
                self.stats.records_dropped_total.add_shared(self.taken.len() as u64);
                self.went_down(&why);
                if !broken.is_empty() {
                    self.drain.queue.broke_all(broken);
                    self.state.wake();
                }
            }
        }
        self.finish(skipped);
    }

    /// Reports `lost` sessions, then acks every ticket taken (the core applies the lost list
    /// before it wakes the waiters), and hands run buffers back.
    fn finish(&mut self, lost: FastSet<Arc<str>>) {
        for sid in lost {
            self.drain.queue.lose(sid);
        }
        let mut last = 0;
        for queued in self.taken.drain(..) {
            last = last.max(queued.ticket);
            if let Record::Run { run, .. } = queued.record {
                self.drain.recycle(run.packed);
            }
        }
        self.drain.queue.ack(last);
    }

    /// The store is down: what is queued cannot be written; its sessions are lost (the core
    /// rewrites them later) and the queue stays inside its bounds.
    fn drop_queued(&mut self) {
        let mut lost = FastSet::default();
        while let Some(queued) = self.drain.pop() {
            self.stats.records_dropped_total.add_shared(1);
            if let Some(sid) = queued.record.session() {
                if !self.disowned.contains(sid) {
                    lost.insert(sid.clone());
                }
            }
            self.taken.push(queued);
        }
        let broken: Vec<Arc<str>> = lost.iter().cloned().collect();
        if !broken.is_empty() {
            self.drain.queue.broke_all(broken);
            self.state.wake();
        }
        self.finish(lost);
    }

    fn went_down(&mut self, why: &str) {
        if self.conn.take().is_some() {
            tracing::warn!(error = why, "a core's durable writer lost the store: its sessions are rewritten whole once it is back");
        }
        self.stats.store_errors_total.add_shared(1);
        self.reconnect_at = Instant::now() + Duration::from_millis(RECONNECT_PAUSE_MS);
        // Whatever the store held may be gone: every session is written whole again first.
        self.written_epoch.clear();
    }

    /// Whether a connection to the primary the thread named last is open (made now if not,
    /// unless the store failed within `RECONNECT_PAUSE_MS`).
    async fn connected(&mut self) -> bool {
        let generation = self.state.primary_generation.load(Ordering::Acquire);
        match &self.conn {
            Some(conn) if conn.generation == generation => return true,
            Some(_) => {
                // A failover (or the thread's new connection): this one may reach the old primary.
                self.conn = None;
                self.written_epoch.clear();
            }
            None => {}
        }
        if !self.state.up.load(Ordering::Acquire) || Instant::now() < self.reconnect_at {
            return false;
        }
        let primary = *self.state.primary.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some((addr, db)) = primary else { return false };
        let timeout = Duration::from_millis(STORE_TIMEOUT_MS);
        let stream = match monoio::time::timeout(timeout, TcpStream::connect_addr(addr)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                self.went_down(&e.to_string());
                return false;
            }
            Err(_) => {
                self.went_down("connection timed out");
                return false;
            }
        };
        let _ = stream.set_nodelay(true);
        let buf = Vec::with_capacity(link::READ_CHUNK_BYTES);
        self.conn = Some(Conn { stream, generation, buf, at: 0 });
        self.written_epoch.clear();
        if db != 0 {
            let mut select = Pipeline::default();
            select.command(2).arg(b"SELECT").arg_u64(u64::from(db));
            let (_, outcome) = self.round_trip(select.take_bytes(), 1, |_, _| {}).await;
            if let Err(why) = outcome {
                self.went_down(&why);
                return false;
            }
        }
        true
    }

    /// Sends `bytes` and reads `replies` replies, handing each to `each` (its index and
    /// bytes); the first refusal is the error (the connection stays in step), any other
    /// failure drops the connection. The buffer back, and the last reply's integer value.
    async fn round_trip(
        &mut self,
        bytes: Vec<u8>,
        replies: usize,
        mut each: impl FnMut(usize, &[u8]),
    ) -> (Vec<u8>, Result<Option<i64>, String>) {
        let timeout = Duration::from_millis(STORE_TIMEOUT_MS);
        let Some(conn) = self.conn.as_mut() else {
            return (bytes, Err("not connected".into()));
        };
        let bytes = match monoio::time::timeout(timeout, conn.stream.write_all(bytes)).await {
            Ok((Ok(_), bytes)) => bytes,
            Ok((Err(e), bytes)) => return (bytes, Err(format!("durable store connection: {e}"))),
            Err(_) => return (Vec::new(), Err("durable store write timed out".into())),
        };
        let outcome = read_replies(conn, replies, timeout, &mut each).await;
        (bytes, outcome)
    }
}

/// Reads `replies` replies on `conn` (see `CoreWriter::round_trip`).
async fn read_replies(
    conn: &mut Conn,
    replies: usize,
    timeout: Duration,
    each: &mut impl FnMut(usize, &[u8]),
) -> Result<Option<i64>, String> {
    let (mut read, mut last, mut refused) = (0, None, None);
    while read < replies {
        match link::read_reply(&conn.buf[conn.at..], 0).map_err(|e| e.0)? {
            Reply::Whole { consumed, error } => {
                let reply = &conn.buf[conn.at..conn.at + consumed];
                each(read, reply);
                if read + 1 == replies {
                    last = link::integer(reply);
                }
                if let (None, Some((from, to))) = (&refused, error) {
                    refused = Some(String::from_utf8_lossy(&reply[from..to]).into_owned());
                }
                conn.at += consumed;
                read += 1;
            }
            Reply::Partial => {
                if conn.buf.len() - conn.at > link::REPLY_BYTES_MAX {
                    return Err("the store sent a reply longer than the mirror reads".into());
                }
                if conn.at > 0 {
                    conn.buf.drain(..conn.at);
                    conn.at = 0;
                }
                if conn.buf.capacity() - conn.buf.len() < link::READ_CHUNK_BYTES / 2 {
                    conn.buf.reserve(link::READ_CHUNK_BYTES);
                }
                let owned = std::mem::take(&mut conn.buf);
                let len = owned.len();
                let (result, slice) =
                    match monoio::time::timeout(timeout, conn.stream.read(owned.slice_mut(len..)))
                        .await
                    {
                        Ok(done) => done,
                        Err(_) => return Err("durable store read timed out".into()),
                    };
                conn.buf = slice.into_inner();
                match result {
                    Ok(0) => return Err("the durable store closed the connection".into()),
                    Ok(_) => {}
                    Err(e) => return Err(format!("durable store connection: {e}")),
                }
            }
        }
    }
    if conn.at == conn.buf.len() {
        conn.buf.clear();
        conn.at = 0;
        // A reply that grew the buffer does not keep it grown.
        if conn.buf.capacity() > 2 * link::READ_CHUNK_BYTES {
            conn.buf = Vec::with_capacity(link::READ_CHUNK_BYTES);
        }
    }
    match refused {
        Some(why) => Err(why),
        None => Ok(last),
    }
}
