//! The mirror thread: drains every core's `MirrorQueue` in pipelined batches into the store,
//! renews this node's lease every third of `--durable-lease-ms`, measures the lag from ring
//! append to the store's acknowledgement, and keeps the one rule of the mirror: per session the
//! store holds a gap-free prefix. A session is written only while its last whole image was
//! written in the current connection's epoch; a record it cannot write (the store failed, or
//! the session's image is older than the epoch) puts the session on its core's `lost` list,
//! and the core rewrites it whole when the store is back.
//!
//! One batch is in flight at a time: the thread sends a batch, lingers, and reads its replies
//! at its next wake-up, when they have arrived, so a batch costs one wake-up of this thread (on
//! a vCPU it shares with a worker, each wake-up preempts the worker: that was most of what the
//! mirror cost a node). A call waiting for a record (`CoreTap::written`) hurries the thread,
//! which then reads the replies at once.
//!
//! A lease found expired at its renewal (the node was paused or cut off past it) fences the
//! node from the sessions peers adopted meanwhile (`lease_lost`): the store's owner of each is
//! read, and those of another node are disowned, never written again.
//!
//! Never: blocks a worker (it only pops their queues), writes a record of a session after a
//! gap in it, or writes a session the store names another node the owner of after a lease
//! loss.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::queue::{Drain, MirrorState, Queued};
use super::record::Record;
use super::store::{self, Store};
use crate::config::DurableConfig;
use crate::fasthash::{FastMap, FastSet};
use crate::metrics::DurableStats;

/// How long the thread waits for the store to connect or answer one batch; past it the store
/// counts as down (sessions then stop being durable: never a worker's wait).
pub(crate) const STORE_TIMEOUT_MS: u64 = 1_000;
/// The longest the thread sleeps with nothing queued before it looks again: the bound on a
/// record whose push raced with the thread's falling asleep (the worker's wake-up check is a
/// plain load, `queue`'s doc). An idle node wakes the thread this often, which costs nothing
/// measurable.
pub(crate) const IDLE_RECHECK_MS: u64 = 5;
/// With `--durable-writer core` the thread has no queue to look at: it sleeps until the lease
/// is due, a core reports a broken session (which wakes it), or this long (the bound on a wake-up
/// that raced with its falling asleep).
const PER_CORE_RECHECK_MS: u64 = 50;
/// Pause after the store failed (a connection refused, or one that connects but refuses the
/// writes: Redis at `maxmemory`, or refusing writes after a failed save) before the next
/// connection: never a loop of connections, each a new epoch and a log line.
pub(crate) const RECONNECT_PAUSE_MS: u64 = 200;

/// The mirror thread; dropping it stops the thread after it wrote what the queues hold.
pub(crate) struct Mirror {
    stop: Arc<AtomicBool>,
    state: Arc<MirrorState>,
    thread: Option<JoinHandle<()>>,
}

impl Mirror {
    /// Starts the thread writing `queues` (one per core) for node `node`.
    pub(crate) fn start(
        cfg: &DurableConfig,
        node: u8,
        session_ttl: Duration,
        queues: Vec<Drain>,
        shared: Vec<Arc<super::queue::MirrorQueue>>,
        state: Arc<MirrorState>,
        stats: Arc<DurableStats>,
    ) -> std::io::Result<Mirror> {
        let stop = Arc::new(AtomicBool::new(false));
        let writer = Writer {
            cfg: cfg.clone(),
            node,
            boot: boot_id(),
            session_ttl,
            queues,
            shared,
            state: state.clone(),
            stats,
            store: None,
            written_epoch: FastMap::default(),
            unmarked: HashSet::new(),
            lease_due: Instant::now(),
            lease_held: false,
            fenced_epoch: None,
            disowned: FastSet::default(),
            reconnect_at: Instant::now(),
            down_logged: false,
            primary: None,
            in_flight: None,
            spare: Vec::new(),
            spare_writable: Vec::new(),
        };
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("tidemark-mirror".into())
            .spawn(move || writer.run(&flag))?;
        let _ = state.thread.set(thread.thread().clone());
        Ok(Mirror { stop, state, thread: Some(thread) })
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
        self.state.up.store(false, Ordering::Release);
    }
}

/// The mirror's rule for one queued record in a batch of `epoch`, the thread's and each core's
/// writer's: `None` when it is written, `Some(sid)` when it is skipped because its session's
/// whole image was not written in this epoch (the session is then reported lost). An image
/// marks its session written in `epoch`; an end forgets it.
pub(super) fn skipped_in_epoch<'r>(
    written_epoch: &mut FastMap<Arc<str>, u64>,
    record: &'r Record,
    epoch: u64,
) -> Option<&'r Arc<str>> {
    match record {
        Record::Session(image) => {
            written_epoch.insert(image.sid.clone(), epoch);
            None
        }
        Record::End { sid } => {
            written_epoch.remove(sid);
            None
        }
        _ => record.session().filter(|sid| written_epoch.get(*sid) != Some(&epoch)),
    }
}

/// True for a record of a session in `disowned`: the adopter's now, so it is dropped, and not
/// reported lost (its core would only send its image again). Its end forgets it. The thread's
/// and each core's writer's.
pub(super) fn drops_disowned(disowned: &mut FastSet<Arc<str>>, record: &Record) -> bool {
    let Some(sid) = record.session().filter(|sid| disowned.contains(*sid)) else {
        return false;
    };
    if matches!(record, Record::End { .. }) {
        let sid = sid.clone();
        disowned.remove(&sid);
    }
    true
}

/// A batch of `written` records the store acknowledged at `acked_at`: counted, and the lag of
/// each event among `records` (what it took) observed. The thread's and each core's writer's.
pub(super) fn count_written<'a>(
    stats: &DurableStats,
    written: usize,
    records: impl Iterator<Item = &'a Record>,
    acked_at: Instant,
) {
    stats.records_written_total.add_shared(written as u64);
    stats.batches_total.add_shared(u64::from(written > 0));
    for record in records {
        let at = match record {
            Record::Event { at, .. } => at,
            Record::Run { run, .. } => &run.at,
            _ => continue,
        };
        let lag = acked_at.duration_since(*at).as_nanos();
        stats.lag.observe_shared(u64::try_from(lag).unwrap_or(u64::MAX));
    }
}

/// 16 hex digits, new at each start: the lease's value, so a restarted node's lease is its own.
fn boot_id() -> String {
    let mut bytes = [0u8; 8];
    let _ = getrandom::fill(&mut bytes);
    format!("{:016x}", u64::from_le_bytes(bytes))
}

struct Writer {
    cfg: DurableConfig,
    node: u8,
    boot: String,
    session_ttl: Duration,
    /// Each core's ring, in core order (none with `--durable-writer core`: each core drains
    /// its own).
    queues: Vec<Drain>,
    /// Each core's shared queue state (its lists of broken sessions), in core order.
    shared: Vec<Arc<super::queue::MirrorQueue>>,
    state: Arc<MirrorState>,
    stats: Arc<DurableStats>,
    store: Option<Box<dyn Store>>,
    /// The epoch in which each session's whole image was last written; a session not here (or
    /// older) is not written until its core sends a new image.
    written_epoch: FastMap<Arc<str>, u64>,
    /// Sessions to mark not durable in the store as soon as it answers.
    unmarked: HashSet<Arc<str>>,
    lease_due: Instant,
    /// True once this boot held its lease: a later renewal that finds it expired (or another
    /// boot's) means peers took this node for dead meanwhile (`lease_lost`).
    lease_held: bool,
    /// The epoch begun when the lease was found lost: in it, a session's image is written only
    /// once the store says no other node owns the session (a peer may have adopted it).
    fenced_epoch: Option<u64>,
    /// Sessions a peer adopted while this node's lease was lost: nothing of theirs is written
    /// again (not their events, their end, or `durable` `0`), so the adopter's copy stays whole.
    disowned: FastSet<Arc<str>>,
    /// No connection before this (`RECONNECT_PAUSE_MS` after the store last failed).
    reconnect_at: Instant,
    /// The store's failure was logged and its recovery was not (once per outage).
    down_logged: bool,
    /// The primaries the last connection reached: with Sentinel or a Cluster, others are a
    /// failover.
    primary: Option<String>,
    /// The batch sent and not yet answered (at most one).
    in_flight: Option<InFlight>,
    /// The last batch's emptied list, kept so a batch allocates none.
    spare: Vec<(usize, Queued)>,
    /// The last batch's emptied list of the records it wrote (`store::recycle`), likewise.
    spare_writable: Vec<&'static Record>,
}

/// A batch sent to the store, kept until its answer: the records (their tickets are acked and
/// their sessions lost by the answer), the sessions skipped as not whole in this epoch, and how
/// many records it wrote.
struct InFlight {
    taken: Vec<(usize, Queued)>,
    skipped: FastSet<(usize, Arc<str>)>,
    written: usize,
}

impl Writer {
    fn run(mut self, stop: &AtomicBool) {
        let renew_every = self.cfg.lease / 3;
        loop {
            let stopping = stop.load(Ordering::Acquire);
            if self.store.is_none() && (Instant::now() < self.reconnect_at || !self.connect()) {
                self.drop_queued();
                if stopping {
                    return;
                }
                // An unpark (a waiting call's hurry) ends the sleep early, not the pause.
                std::thread::park_timeout(
                    self.reconnect_at.saturating_duration_since(Instant::now()),
                );
                continue;
            }
            // The batch sent at the last wake: its replies have normally arrived by now, so this
            // read does not sleep (a wake-up of this thread per batch, not two: on a vCPU it
            // shares with a worker each wake-up preempts the worker).
            self.finish_in_flight();
            if self.store.is_none() {
                continue;
            }
            if Instant::now() >= self.lease_due {
                if self.renew_lease() {
                    self.lease_due = Instant::now() + renew_every;
                    self.accepting();
                }
                continue;
            }
            self.collect_broken();
            if !self.unmarked.is_empty() && !self.unmarked_owned() {
                continue;
            }
            let disowned = &self.disowned;
            self.unmarked.retain(|sid| !disowned.contains(sid));
            if !self.unmarked.is_empty() {
                let sids: Vec<Arc<str>> = self.unmarked.drain().collect();
                let ttl = self.session_ttl;
                if !self.with_store(|store, _, _| store.mark_not_durable(&sids, ttl)) {
                    self.unmarked.extend(sids);
                }
                continue;
            }
            let written = self.write_batch();
            if written == self.cfg.batch_records_max {
                continue;
            }
            if stopping {
                self.finish_in_flight();
                return;
            }
            if written > 0 && self.should_linger() {
                // Not `sleeping`: a push does not wake the thread, only `hurry` or the time.
                std::thread::park_timeout(self.cfg.linger);
                continue;
            }
            if written == 0 {
                self.state.sleeping.store(true, Ordering::SeqCst);
                std::sync::atomic::fence(Ordering::SeqCst);
                if self.queues.iter().any(|q| q.len() > 0) {
                    self.state.sleeping.store(false, Ordering::Release);
                    continue;
                }
                // A push that raced with the flag may not have woken the thread (the worker reads
                // the flag without a fence: `queue`'s doc): the sleep is bounded.
                let until_lease = self.lease_due.saturating_duration_since(Instant::now());
                let recheck = match self.queues.is_empty() {
                    // Per-core writers: only a broken list (which wakes it) or the lease.
                    true => PER_CORE_RECHECK_MS,
                    false => IDLE_RECHECK_MS,
                };
                std::thread::park_timeout(until_lease.min(Duration::from_millis(recheck)));
                self.state.sleeping.store(false, Ordering::Release);
            }
        }
    }

    /// After a batch that did not fill: whether to let records gather before the next
    /// (`--durable-linger-us`): not when a call waits for a record, not once half a batch is queued.
    fn should_linger(&self) -> bool {
        if self.cfg.linger.is_zero() || self.state.urgent.swap(false, Ordering::AcqRel) {
            return false;
        }
        let queued: usize = self.queues.iter().map(Drain::len).sum();
        queued < self.cfg.batch_records_max / 2
    }

    /// Connects and starts a new epoch; false when the store is unreachable.
    fn connect(&mut self) -> bool {
        let replication = store::Replication::of(&self.cfg);
        match super::engine::connect(
            &self.cfg.url,
            replication,
            super::cluster::ClusterLimits::of(&self.cfg),
            Duration::from_millis(STORE_TIMEOUT_MS),
        ) {
            Ok((store, primary, url)) => {
                self.store = Some(store);
                self.followed(primary);
                // Before the new epoch: a core's writer that sees the epoch sees its primary.
                self.publish_primary(url.as_ref());
                // Whatever the store held may be gone (it restarted): every session is written
                // whole again before anything more of it.
                self.written_epoch.clear();
                self.state.epoch.fetch_add(1, Ordering::AcqRel);
                // Up once the lease, written next, is taken (`accepting`).
                self.lease_due = Instant::now();
                if !self.down_logged {
                    tracing::info!(store = %self.cfg.url, "durable mirror connected");
                }
                true
            }
            Err(e) => {
                self.went_down(&e.to_string());
                false
            }
        }
    }

    /// Per-core writers: where they connect from now on (resolved here, never on a worker).
    fn publish_primary(&self, url: Option<&crate::config::DurableUrl>) {
        if !self.state.per_core.load(Ordering::Relaxed) {
            return;
        }
        use std::net::ToSocketAddrs;
        let addr = url.and_then(|url| {
            let mut addrs = (url.host.as_str(), url.port).to_socket_addrs().ok()?;
            Some((addrs.next()?, url.db))
        });
        *self.state.primary.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = addr;
        self.state.primary_generation.fetch_add(1, Ordering::AcqRel);
    }

    /// The connection reached `primary`: other servers than the last one's are a failover the
    /// sentinels or the cluster made (counted and logged; a single server's address never
    /// changes).
    fn followed(&mut self, primary: String) {
        if self.primary.as_ref().is_some_and(|was| *was != primary) {
            self.stats.failovers_total.add_shared(1);
            tracing::warn!(store = %self.cfg.url, primary = %primary,
                "durable store's primary moved (a failover): sessions are rewritten whole on the new one");
        }
        self.primary = Some(primary);
    }

    /// The store took a write (the lease) on this connection: up, if it was not. Logged here,
    /// not at each connection a store that refuses writes accepts.
    fn accepting(&mut self) {
        if self.state.up.swap(true, Ordering::AcqRel) {
            return;
        }
        self.stats.up.set(1);
        if std::mem::take(&mut self.down_logged) {
            tracing::info!(store = %self.cfg.url, "durable store reachable again: sessions are rewritten whole");
        }
    }

    fn went_down(&mut self, why: &str) {
        self.store = None;
        self.reconnect_at = Instant::now() + Duration::from_millis(RECONNECT_PAUSE_MS);
        self.state.up.store(false, Ordering::Release);
        self.stats.up.set(0);
        self.stats.store_errors_total.add_shared(1);
        if !std::mem::replace(&mut self.down_logged, true) {
            tracing::warn!(store = %self.cfg.url, error = why,
                "durable store down (unreachable, refusing writes, or fewer replicas than --durable-replicas): this node keeps serving; its sessions are not durable until it is back (logged once)");
        }
    }

    /// Runs `op` on the store; on failure the store counts as down. Whether it succeeded.
    fn with_store(
        &mut self,
        op: impl FnOnce(&mut dyn Store, u8, &str) -> Result<(), super::store::StoreError>,
    ) -> bool {
        let Some(store) = self.store.as_mut() else { return false };
        match op(store.as_mut(), self.node, &self.boot) {
            Ok(()) => true,
            Err(e) => {
                self.went_down(&e.0);
                false
            }
        }
    }

    /// Renews the lease (true when the store took it); a lease found expired after this boot
    /// held it starts a fenced epoch (`lease_lost`).
    fn renew_lease(&mut self) -> bool {
        let (lease, mut renewal) = (self.cfg.lease, store::Renewal::default());
        // Before the renewal is sent: the lease lives at least until this plus its length.
        let sent_ns = super::queue::monotonic_ns();
        let renewed = self.with_store(|store, node, boot| {
            renewal = store.renew_lease(node, boot, lease)?;
            Ok(())
        });
        if renewed && self.lease_held && !renewal.unbroken {
            self.lease_lost(renewal.claimed);
        }
        if renewed {
            // After `lease_lost`'s new epoch: a core's writer that sees this sees that.
            let until = sent_ns.saturating_add(lease.as_nanos() as u64);
            self.state.lease_until_ns.store(until, Ordering::Release);
        }
        self.lease_held |= renewed;
        renewed
    }

    /// This node was paused, or cut off from the store, past its lease: peers may have adopted
    /// its sessions meanwhile (issue 38: a resumed owner wrote a running call's events into its
    /// adopted session's store copy). Its lease is its own again, so no adoption can start now:
    /// the sessions it writes are checked once, and for the rest of the epoch each image before
    /// it is written; a session the store names another node's owner of is disowned.
    /// In a Redis Cluster an adopter's compare-and-set runs on another shard than the lease, so
    /// it may land after this check: the sessions adopters `claimed` while the lease was absent
    /// (read atomically with the renewal) are disowned whatever the store names their owner now.
    fn lease_lost(&mut self, claimed: Vec<String>) {
        tracing::warn!(node = self.node, lease_ms = self.cfg.lease.as_millis() as u64,
            claimed = claimed.len(),
            "durable lease found expired (paused or cut off from the store past --durable-lease-ms): sessions a peer adopted meanwhile are no longer written");
        if self.state.per_core.load(Ordering::Relaxed) {
            // The cores know which sessions they wrote, not this thread: each checks the
            // owners of those before its next batch (`fences` moved) and, for the rest of the
            // epoch, each image before it writes it (`writer`). One server or Sentinel: no
            // claims. Published before the renewed lease (`lease_until_ns`), which a core
            // reads first.
            let epoch = self.state.epoch.load(Ordering::Acquire);
            self.fenced_epoch = Some(epoch);
            self.state.fenced_epoch.store(epoch, Ordering::Release);
            self.state.fences.fetch_add(1, Ordering::AcqRel);
            return;
        }
        self.fenced_epoch = Some(self.state.epoch.load(Ordering::Acquire));
        for sid in claimed {
            let sid: Arc<str> = Arc::from(sid);
            self.written_epoch.remove(&sid);
            self.disowned.insert(sid);
        }
        let sids: Vec<Arc<str>> = self.written_epoch.keys().cloned().collect();
        // Written before, now without a record: adopted and ended by the adopter.
        self.disown_adopted(sids, false);
    }

    /// In a fenced epoch, the images in `taken` are checked (`disown_adopted`). False when the
    /// store failed (it is then down).
    fn fence(&mut self, taken: &[(usize, Queued)], epoch: u64) -> bool {
        if self.fenced_epoch != Some(epoch) {
            return true;
        }
        let sids: Vec<Arc<str>> = (taken.iter())
            .filter_map(|(_, q)| match &q.record {
                Record::Session(image) => Some(image.sid.clone()),
                _ => None,
            })
            .collect();
        // An image without a record is a new session's (or one the store lost): written.
        self.disown_adopted(sids, true)
    }

    /// Asks the store who owns `sids` and disowns each whose record names another node (or,
    /// unless `absent_is_ours`, has no record). False when the store failed (it is then down).
    fn disown_adopted(&mut self, sids: Vec<Arc<str>>, absent_is_ours: bool) -> bool {
        if sids.is_empty() {
            return true;
        }
        let mut owners = Vec::new();
        if !self.with_store(|store, _, _| {
            owners = store.owners(&sids)?;
            Ok(())
        }) {
            return false;
        }
        for (sid, owner) in sids.into_iter().zip(owners) {
            if owner == Some(self.node) || (owner.is_none() && absent_is_ours) {
                continue;
            }
            tracing::warn!(session = %&sid[..sid.len().min(8)], owner = ?owner,
                "session adopted by a peer while this node's lease was lost: no longer mirrored");
            self.written_epoch.remove(&sid);
            self.disowned.insert(sid);
        }
        true
    }

    /// Per-core writers, in a fenced epoch: the cores reported broken sessions this thread
    /// never wrote, some of which a peer may have adopted while the lease was lost; each the
    /// store names another node the owner of is disowned before any is marked not durable (a
    /// `durable` = `0` would spoil the adopter's copy). False when the store failed.
    fn unmarked_owned(&mut self) -> bool {
        let epoch = self.state.epoch.load(Ordering::Acquire);
        if !self.state.per_core.load(Ordering::Relaxed) || self.fenced_epoch != Some(epoch) {
            return true;
        }
        let sids: Vec<Arc<str>> =
            self.unmarked.iter().filter(|sid| !self.disowned.contains(*sid)).cloned().collect();
        self.disown_adopted(sids, false)
    }

    fn collect_broken(&mut self) {
        for queue in &self.shared {
            for sid in queue.take_broken() {
                self.written_epoch.remove(&sid);
                self.unmarked.insert(sid);
            }
        }
    }

    /// The store is down: what is queued cannot be written; its sessions are lost (their cores
    /// rewrite them later) and the queues stay inside their bounds.
    fn drop_queued(&mut self) {
        for drain in &mut self.queues {
            let mut last = 0;
            let mut lost: HashSet<Arc<str>> = HashSet::new();
            while let Some(queued) = drain.pop() {
                last = queued.ticket;
                self.stats.records_dropped_total.add_shared(1);
                if let Some(sid) = queued.record.session() {
                    lost.insert(sid.clone());
                }
            }
            for sid in lost {
                drain.queue.lose(sid.clone());
                self.unmarked.insert(sid);
            }
            drain.queue.ack(last);
        }
    }

    /// Takes up to a batch from the queues (round robin) and sends it, leaving it in flight
    /// (`finish_in_flight` reads the store's answer); how many were taken. A batch ends at
    /// `--durable-batch-records` records or once it holds `--durable-batch-bytes` (it takes at
    /// least one record).
    fn write_batch(&mut self) -> usize {
        if self.store.is_none() {
            return 0;
        }
        let batch_max = self.cfg.batch_records_max;
        let mut taken = std::mem::take(&mut self.spare);
        let mut bytes = 0;
        'fill: loop {
            let before = taken.len();
            for (core, drain) in self.queues.iter_mut().enumerate() {
                if taken.len() == batch_max || bytes >= self.cfg.batch_bytes_max {
                    break 'fill;
                }
                if let Some(queued) = drain.pop() {
                    bytes += queued.bytes;
                    taken.push((core, queued));
                }
            }
            if taken.len() == before {
                break;
            }
        }
        let count = taken.len();
        if count == 0 {
            self.spare = taken;
            return 0;
        }
        let epoch = self.state.epoch.load(Ordering::Acquire);
        if !self.fence(&taken, epoch) {
            self.in_flight = Some(InFlight { taken, skipped: FastSet::default(), written: 0 });
            self.settle_in_flight(Err(super::store::StoreError("owner check failed".into())));
            return count;
        }
        let mut writable: Vec<&Record> = store::recycle(std::mem::take(&mut self.spare_writable));
        let mut skipped: FastSet<(usize, Arc<str>)> = FastSet::default();
        for (core, queued) in &taken {
            if drops_disowned(&mut self.disowned, &queued.record) {
                continue;
            }
            match skipped_in_epoch(&mut self.written_epoch, &queued.record, epoch) {
                Some(sid) => {
                    skipped.insert((*core, sid.clone()));
                }
                None => writable.push(&queued.record),
            }
        }
        let outcome = match self.store.as_mut() {
            Some(store) => store.send(&writable, self.session_ttl),
            None => Err(super::store::StoreError("not connected".into())),
        };
        let written = writable.len();
        self.spare_writable = store::recycle(writable);
        self.in_flight = Some(InFlight { taken, skipped, written });
        if let Err(e) = outcome {
            self.settle_in_flight(Err(e));
        }
        count
    }

    /// Reads the store's answer to the batch in flight (blocking, bounded by the store's
    /// timeout), then settles it.
    fn finish_in_flight(&mut self) {
        if self.in_flight.is_none() {
            return;
        }
        let outcome = match self.store.as_mut() {
            Some(store) => store.receive(),
            None => Err(super::store::StoreError("not connected".into())),
        };
        self.settle_in_flight(outcome);
    }

    /// The batch in flight was written (`Ok`) or not: counts it, observes the lag, marks the
    /// sessions it could not write lost, and acks every ticket it took.
    fn settle_in_flight(&mut self, outcome: Result<(), super::store::StoreError>) {
        let Some(InFlight { mut taken, mut skipped, written }) = self.in_flight.take() else {
            return;
        };
        let acked_at = Instant::now();
        match outcome {
            Ok(()) => {
                let records = taken.iter().map(|(_, queued)| &queued.record);
                count_written(&self.stats, written, records, acked_at);
            }
            Err(e) => {
                if e.unreplicated() {
                    self.stats.batches_unreplicated_total.add_shared(1);
                }
                for (core, queued) in &taken {
                    if let Some(sid) = queued.record.session() {
                        self.written_epoch.remove(sid);
                        skipped.insert((*core, sid.clone()));
                        self.unmarked.insert(sid.clone());
                    }
                }
                self.stats.records_dropped_total.add_shared(taken.len() as u64);
                self.went_down(&e.0);
            }
        }
        for (core, sid) in skipped {
            self.queues[core].queue.lose(sid);
        }
        let mut last = vec![0u64; self.queues.len()];
        for (core, queued) in taken.drain(..) {
            last[core] = last[core].max(queued.ticket);
            if let Record::Run { run, .. } = queued.record {
                self.queues[core].recycle(run.packed);
            }
        }
        for (core, ticket) in last.into_iter().enumerate() {
            self.queues[core].queue.ack(ticket);
        }
        self.spare = taken;
    }
}
