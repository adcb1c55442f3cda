//! One core's way to the mirror thread: a bounded single-producer single-consumer ring of
//! records (`channel`: the worker's `CoreTap` pushes, the thread's `Drain` pops), and
//! `MirrorQueue` beside it (shared: the ring's byte count, the tickets the thread has dealt
//! with, and the two short lists of sessions whose mirror broke). `CoreTap` numbers records,
//! refuses one that would pass a bound, and waits for a ticket's write.
//!
//! Why a single-producer ring (`rtrb`) and not a multi-producer queue: each core's records have
//! one producer (its worker) and one consumer (the mirror thread); the multi-producer queue's
//! pop spun (`pause`) while a push it raced with was half done, which on a VM whose worker and
//! mirror thread share a vCPU was the mirror thread's largest single cost. This ring's push and
//! pop are wait-free.
//!
//! Why no locked instruction on a push: a `lock`ed add or an exchange is a full fence, which
//! waits for the record's stores into its (cold) ring slot to land; on the worker that fence was
//! most of a push's cost (perf annotate, 2026-12-05). The byte count is two monotonic counters,
//! each written by one side with a plain store, and the wake-up reads the thread's `sleeping`
//! flag before it exchanges it. The price: a push that races with the thread's falling asleep
//! may not wake it; the thread then sleeps at most `IDLE_RECHECK_MS` (a call waiting for a
//! record hurries it regardless).
//!
//! Never: blocks or waits on the worker except in `CoreTap::written`, which a caller awaits
//! with its own bound; a full queue refuses at once.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
#[allow(clippy::disallowed_types, reason = "the failure lists only (see MirrorQueue)")]
use std::sync::Mutex;
use std::time::Duration;

use atomic_waker::AtomicWaker;

use super::record::Record;
use crate::signal::Signal;

/// A record and its ticket (its core's running number), as queued.
#[derive(Debug)]
pub(crate) struct Queued {
    pub(crate) ticket: u64,
    pub(crate) bytes: usize,
    pub(crate) record: Record,
}

/// State shared by every core and the mirror thread.
#[derive(Debug, Default)]
pub(crate) struct MirrorState {
    /// Bumped by the mirror thread each time it (re)connects to the store: a session is
    /// durable only while its last whole image was written in the current epoch (a store that
    /// restarted may have lost anything written before).
    pub(crate) epoch: AtomicU64,
    /// The mirror thread is connected and its last write succeeded.
    pub(crate) up: AtomicBool,
    /// The mirror thread is parked waiting for records (a push unparks it).
    pub(crate) sleeping: AtomicBool,
    /// A call waits for a record (write-ahead): the thread writes at once instead of
    /// lingering (`--durable-linger-us`).
    pub(crate) urgent: AtomicBool,
    /// The mirror thread, for `unpark` (set once it runs).
    pub(crate) thread: std::sync::OnceLock<std::thread::Thread>,
    /// `--durable-writer core`: each core writes its own records (`writer`), the thread only
    /// renews the lease, fences and marks sessions not durable.
    pub(crate) per_core: AtomicBool,
    /// Per-core writers: the store's primary the thread's last connection reached (its address
    /// and database), published before the epoch it starts; `primary_generation` moves with
    /// each, so a core's writer connects again after a failover.
    #[allow(
        clippy::disallowed_types,
        reason = "read only when a core's writer (re)connects, never per record"
    )]
    pub(crate) primary: Mutex<Option<(std::net::SocketAddr, u32)>>,
    pub(crate) primary_generation: AtomicU64,
    /// Per-core writers: until when (`monotonic_ns`) the lease the thread renewed last holds
    /// for sure. Past it a core writes nothing (the node may have been paused past its lease,
    /// and peers may have adopted its sessions) until the thread renewed it, found out whether
    /// it was lost and, if so, began a fenced epoch: the thread did the same by renewing
    /// before its next batch.
    pub(crate) lease_until_ns: AtomicU64,
    /// Per-core writers: the epoch the thread began when it found its lease lost (0: none);
    /// in it every session's image is written only once the store names no other owner.
    pub(crate) fenced_epoch: AtomicU64,
    /// Per-core writers: how many times the thread found the lease lost; a core that has not
    /// seen the last checks the owners of every session it wrote before it writes more.
    pub(crate) fences: AtomicU64,
}

/// Nanoseconds on a monotonic clock since the process's first call (`lease_until_ns`).
pub(crate) fn monotonic_ns() -> u64 {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    u64::try_from(ORIGIN.get_or_init(std::time::Instant::now).elapsed().as_nanos())
        .unwrap_or(u64::MAX)
}

impl MirrorState {
    /// Wakes the mirror thread if it sleeps (one plain load on the hot path otherwise: see the
    /// module doc for the race this leaves and its bound).
    pub(crate) fn wake(&self) {
        if self.sleeping.load(Ordering::Acquire) && self.sleeping.swap(false, Ordering::AcqRel) {
            if let Some(thread) = self.thread.get() {
                thread.unpark();
            }
        }
    }

    /// Wakes the mirror thread whether it sleeps or lingers: a call waits for a record (a
    /// core's own writer never lingers: nothing to hurry).
    pub(crate) fn hurry(&self) {
        if self.per_core.load(Ordering::Relaxed) {
            return;
        }
        self.urgent.store(true, Ordering::Release);
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }
}

/// One core's ring of records for the mirror thread: what the worker and the thread share.
#[derive(Debug)]
pub(crate) struct MirrorQueue {
    /// Charged bytes ever pushed (the worker's store only) and ever popped (the thread's only):
    /// queued = pushed - popped, with no read-modify-write on either side.
    pushed_bytes: AtomicUsize,
    popped_bytes: AtomicUsize,
    bytes_max: usize,
    /// The ticket of the last record pushed (the worker's store only: the core's running
    /// number, so also how many it ever queued) and of the last popped (the drain's only):
    /// queued = pushed - popped, read at a scrape (`Levels`).
    pushed_ticket: AtomicU64,
    popped_ticket: AtomicU64,
    /// The highest ticket the mirror thread has dealt with (written, or given up on: its
    /// session is then in `lost` before this moves past it).
    acked: AtomicU64,
    /// Wakes the core's ack pump (`CoreTap::pump`).
    waker: AtomicWaker,
    /// Mirror → core: sessions some of whose records were not written (the store failed or
    /// the session was not whole there); the core rewrites them. A lock, not a queue: taken
    /// only when the mirror failed, and a list that must never drop an entry.
    #[allow(
        clippy::disallowed_types,
        reason = "touched only on mirror failures, never per request"
    )]
    lost: Mutex<Vec<Arc<str>>>,
    /// Core → mirror: sessions the core stopped mirroring (its queue was full): the thread
    /// marks them `durable` = `0` in the store, so they are never adopted with a gap.
    #[allow(
        clippy::disallowed_types,
        reason = "touched only on mirror failures, never per request"
    )]
    broken: Mutex<Vec<Arc<str>>>,
}

/// Emptied run buffers (`Record::Run`) the mirror thread hands back to each core, so a burst of
/// progress reuses its packing buffers instead of allocating on the worker and freeing on the
/// mirror thread (a cross-thread free of a large block made the worker's allocator take fresh,
/// zeroed pages). At most this many per core wait; more are freed.
pub(crate) const SPARE_RUN_BUFFERS: usize = 16;
/// A run buffer larger than this is freed, not handed back: spares hold at most
/// `SPARE_RUN_BUFFERS` times this per core.
pub(crate) const SPARE_RUN_BUFFER_BYTES_MAX: usize = 128 * 1024;

/// The worker's ends of its core's rings: records out, spare run buffers back.
#[derive(Debug)]
pub(crate) struct WorkerEnd {
    records: rtrb::Producer<Queued>,
    spares: rtrb::Consumer<Vec<u8>>,
}

/// One core's ring of at most `records_max` records and `bytes_max` charged bytes: the shared
/// part, the worker's end (for its `CoreTap`) and the mirror thread's.
pub(crate) fn channel(
    records_max: usize,
    bytes_max: usize,
) -> (Arc<MirrorQueue>, WorkerEnd, Drain) {
    let (producer, consumer) = rtrb::RingBuffer::new(records_max.max(1));
    let (spares_back, spares) = rtrb::RingBuffer::new(SPARE_RUN_BUFFERS);
    #[allow(clippy::disallowed_types, reason = "the failure lists only (see the fields)")]
    let queue = Arc::new(MirrorQueue {
        pushed_bytes: AtomicUsize::new(0),
        popped_bytes: AtomicUsize::new(0),
        bytes_max,
        pushed_ticket: AtomicU64::new(0),
        popped_ticket: AtomicU64::new(0),
        acked: AtomicU64::new(0),
        waker: AtomicWaker::new(),
        lost: Mutex::default(),
        broken: Mutex::default(),
    });
    (
        queue.clone(),
        WorkerEnd { records: producer, spares },
        Drain { queue, consumer, spares: spares_back },
    )
}

/// The mirror thread's end of one core's ring.
#[derive(Debug)]
pub(crate) struct Drain {
    pub(crate) queue: Arc<MirrorQueue>,
    consumer: rtrb::Consumer<Queued>,
    spares: rtrb::Producer<Vec<u8>>,
}

impl Drain {
    /// Takes the oldest record.
    pub(crate) fn pop(&mut self) -> Option<Queued> {
        let queued = self.consumer.pop().ok()?;
        // This thread is the counter's only writer: a plain store, no locked instruction.
        let popped = self.queue.popped_bytes.load(Ordering::Relaxed);
        self.queue.popped_bytes.store(popped.wrapping_add(queued.bytes), Ordering::Release);
        self.queue.popped_ticket.store(queued.ticket, Ordering::Release);
        Some(queued)
    }

    /// Records queued now.
    pub(crate) fn len(&self) -> usize {
        self.consumer.slots()
    }

    /// Hands a written run's buffer back to the core (emptied), or frees it when the core has
    /// enough spares or it grew past `SPARE_RUN_BUFFER_BYTES_MAX`.
    pub(crate) fn recycle(&mut self, mut buffer: Vec<u8>) {
        if buffer.capacity() <= SPARE_RUN_BUFFER_BYTES_MAX {
            buffer.clear();
            let _ = self.spares.push(buffer);
        }
    }
}

impl MirrorQueue {
    /// Charged bytes queued now.
    pub(crate) fn bytes(&self) -> usize {
        // Popped first: read the other way round, a pop between the loads could count bytes
        // popped but never pushed (and wrap).
        let popped = self.popped_bytes.load(Ordering::Acquire);
        self.pushed_bytes.load(Ordering::Acquire).wrapping_sub(popped)
    }

    /// Records queued now (popped first, as in `bytes`: a push is counted before its record
    /// is visible, so pushed is never behind popped).
    pub(crate) fn records(&self) -> usize {
        let popped = self.popped_ticket.load(Ordering::Acquire);
        self.pushed_ticket.load(Ordering::Acquire).wrapping_sub(popped) as usize
    }

    /// The mirror thread has dealt with every ticket up to `ticket`; wakes the core.
    pub(crate) fn ack(&self, ticket: u64) {
        if ticket > self.acked.load(Ordering::Acquire) {
            self.acked.store(ticket, Ordering::Release);
            self.waker.wake();
        }
    }

    /// The mirror thread could not write `sid` whole: the core learns it before the ticket
    /// moves on (the caller acks after, and names each session once per pass; a repeat across
    /// passes is harmless: the core's marking is idempotent).
    pub(crate) fn lose(&self, sid: Arc<str>) {
        self.lost.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(sid);
    }

    /// A core's writer could not write `sids`: the thread marks them not durable in the store.
    pub(crate) fn broke_all(&self, sids: impl IntoIterator<Item = Arc<str>>) {
        self.broken.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend(sids);
    }

    /// The sessions the core stopped mirroring since the last call (mirror thread).
    pub(crate) fn take_broken(&self) -> Vec<Arc<str>> {
        std::mem::take(&mut *self.broken.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

/// Every core's queue, summed at a scrape (`metrics::QueueLevels`).
pub(crate) struct Levels(pub(crate) Vec<Arc<MirrorQueue>>);

impl crate::metrics::QueueLevels for Levels {
    fn levels(&self) -> (u64, u64) {
        let records = self.0.iter().map(|q| q.records() as u64).sum();
        (records, self.0.iter().map(|q| q.bytes() as u64).sum())
    }
}

/// Why a record was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// `--durable-queue-records` or `--durable-queue-bytes` reached.
    Full,
}

/// A worker's handle on its queue (core-local).
pub(crate) struct CoreTap {
    pub(crate) queue: Arc<MirrorQueue>,
    /// The worker's ends of the rings.
    producer: RefCell<WorkerEnd>,
    pub(crate) state: Arc<MirrorState>,
    /// This node (`--node-id`), the owner every record names.
    pub(crate) node: u8,
    /// How long a non-idempotent call waits for its stream record (`--durable-write-ahead-ms`).
    pub(crate) write_ahead: Duration,
    /// A graceful stop's wait for the core's writer (`--durable-stop-write-ms`).
    stop_write: Duration,
    /// The core's counters (not durable marks, refused records).
    pub(crate) metrics: Arc<crate::metrics::CoreMetrics>,
    /// Notified by the core's ack pump whenever the thread acked more.
    acked_signal: Rc<Signal>,
    /// `--durable-writer core`: the core's writer task waits on it for records.
    pub(crate) writer_wake: Option<Rc<WriterWake>>,
}

/// How a core wakes its own writer (`--durable-writer core`, `writer`).
#[derive(Default)]
pub(crate) struct WriterWake {
    /// A record was queued.
    pub(crate) records: Signal,
    /// A call waits for a record: the writer stops lingering (`--durable-linger-us`).
    pub(crate) hurry: Signal,
    /// Set with `hurry`, taken by the writer: a wait that began before it lingered counts.
    pub(crate) urgent: Cell<bool>,
}

/// A change of a core's state outside any legacy session, as the mirror hears it
/// (`CoreTap::observe`): the 2026-07-28 era's keyed calls and tasks. Each becomes one record
/// owned by this node.
#[derive(Debug)]
pub(crate) enum CoreChange {
    /// An `Idempotency-Key` call was recorded: its store name (`keys`), its params'
    /// fingerprint, its final response once it finished (`None`: it runs), its retention.
    KeyRecorded { name: String, fingerprint: u64, response: Option<bytes::Bytes>, ttl_ms: u64 },
    /// A task changed (created, finished): `detailed` is its `DetailedTask` JSON, `subject` the
    /// one that may read it, `ttl_ms` its retention.
    TaskChanged {
        id: String,
        subject: Option<String>,
        detailed: String,
        running: bool,
        ttl_ms: u64,
    },
}

impl CoreTap {
    /// Hears one change of the core (see `CoreChange`): queued without waiting. The ticket
    /// (what a write-ahead waits for); `None` when the queue is full.
    pub(crate) fn observe(&self, change: CoreChange) -> Option<u64> {
        let node = self.node;
        let record = match change {
            CoreChange::KeyRecorded { name, fingerprint, response, ttl_ms } => {
                Record::Keyed { name, fingerprint, node, response, ttl_ms }
            }
            CoreChange::TaskChanged { id, subject, detailed, running, ttl_ms } => {
                Record::Task { id, node, subject, detailed, running, ttl_ms }
            }
        };
        self.push(record).ok()
    }

    /// The handle of the core whose queue is `queue`.
    pub(crate) fn new(
        queue: Arc<MirrorQueue>,
        producer: WorkerEnd,
        state: Arc<MirrorState>,
        node: u8,
        write_ahead: Duration,
        stop_write: Duration,
        metrics: Arc<crate::metrics::CoreMetrics>,
    ) -> CoreTap {
        CoreTap {
            queue,
            producer: RefCell::new(producer),
            state,
            node,
            write_ahead,
            stop_write,
            metrics,
            acked_signal: Rc::default(),
            writer_wake: None,
        }
    }

    /// The store's current epoch (a session whose image is older is not durable).
    pub(crate) fn epoch(&self) -> u64 {
        self.state.epoch.load(Ordering::Acquire)
    }

    /// The mirror thread is connected and writing.
    pub(crate) fn is_up(&self) -> bool {
        self.state.up.load(Ordering::Acquire)
    }

    /// Queues `record`; its ticket, or `Refused::Full` without waiting.
    pub(crate) fn push(&self, record: Record) -> Result<u64, Refused> {
        let bytes = record.charged_bytes();
        let queue = &self.queue;
        // The worker is the only writer of `pushed_bytes`: its own value needs no fence.
        let pushed = queue.pushed_bytes.load(Ordering::Relaxed);
        let queued = pushed.wrapping_sub(queue.popped_bytes.load(Ordering::Acquire));
        if queued + bytes > queue.bytes_max {
            self.metrics.durable_records_refused_total.inc();
            return Err(Refused::Full);
        }
        // The worker is the only writer of `pushed_ticket` too.
        let ticket = queue.pushed_ticket.load(Ordering::Relaxed) + 1;
        // Counted before the record is visible, so a pop never takes a count below zero.
        queue.pushed_bytes.store(pushed.wrapping_add(bytes), Ordering::Release);
        queue.pushed_ticket.store(ticket, Ordering::Release);
        if let Err(rtrb::PushError::Full(_)) =
            self.producer.borrow_mut().records.push(Queued { ticket, bytes, record })
        {
            queue.pushed_bytes.store(pushed, Ordering::Release);
            queue.pushed_ticket.store(ticket - 1, Ordering::Release);
            self.metrics.durable_records_refused_total.inc();
            return Err(Refused::Full);
        }
        match &self.writer_wake {
            Some(writer) => writer.records.notify_all(),
            None => self.state.wake(),
        }
        Ok(ticket)
    }

    /// Whether the store has `bytes` more room in this core's queue now.
    pub(crate) fn has_room(&self, bytes: usize) -> bool {
        self.queue.bytes() + bytes <= self.queue.bytes_max
            && self.producer.borrow().records.slots() > 0
    }

    /// An empty buffer to pack a run of events into: one the mirror thread handed back, or a
    /// new one of `capacity`.
    pub(crate) fn run_buffer(&self, capacity: usize) -> Vec<u8> {
        self.producer.borrow_mut().spares.pop().unwrap_or_else(|_| Vec::with_capacity(capacity))
    }

    /// Tells the mirror thread this core stopped mirroring `sid`.
    pub(crate) fn broke(&self, sid: Arc<str>) {
        self.queue.broken.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(sid);
        self.state.wake();
    }

    /// Sessions whose records the thread could not write since the last call.
    pub(crate) fn take_lost(&self) -> Vec<Arc<str>> {
        std::mem::take(
            &mut *self.queue.lost.lock().unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Completes once the thread dealt with `ticket` (the caller bounds the wait). Whether it
    /// was written: the session is not in `take_lost` (the pump applies that list first).
    pub(crate) async fn written(&self, ticket: u64) {
        if self.queue.acked.load(Ordering::Acquire) < ticket {
            match &self.writer_wake {
                Some(writer) => {
                    writer.urgent.set(true);
                    writer.hurry.notify_all();
                }
                None => self.state.hurry(),
            }
        }
        loop {
            let notified = self.acked_signal.notified();
            if self.queue.acked.load(Ordering::Acquire) >= ticket {
                return;
            }
            notified.await;
        }
    }

    /// A graceful stop, after the core's drain: with `--durable-writer core` waits until the
    /// core's writer dealt with every record queued (written, or given up on with the store
    /// down), at most `--durable-stop-write-ms`, so a peer adopting after a rolling restart replays
    /// the whole tail; the mirror thread writes what it holds before the node's lease stops
    /// being renewed (`Server`'s workers end before the mirror). With the thread's writer
    /// nothing to do here: the thread writes what is queued as it stops.
    pub(crate) async fn write_queued_at_stop(&self) {
        if self.writer_wake.is_none() {
            return;
        }
        let last = self.queue.pushed_ticket.load(Ordering::Relaxed);
        if monoio::time::timeout(self.stop_write, self.written(last)).await.is_err() {
            tracing::warn!(
                records = self.queue.records(),
                "graceful stop: the durable store did not take this core's queued records within {} ms (--durable-stop-write-ms); a peer adopting their sessions replays them up to what the store holds",
                self.stop_write.as_millis()
            );
        }
    }

    /// The core's ack pump, one task per core: waits for the thread's wake-ups and passes
    /// them on to the waiters of `written`, after `on_lost` applied the lost sessions.
    pub(crate) async fn pump(self: Rc<Self>, on_lost: impl Fn(Vec<Arc<str>>)) {
        let mut seen = 0;
        loop {
            AckChanged { queue: &self.queue, seen }.await;
            seen = self.queue.acked.load(Ordering::Acquire);
            let lost = self.take_lost();
            if !lost.is_empty() {
                on_lost(lost);
            }
            self.acked_signal.notify_all();
        }
    }
}

/// Completes when the queue's acked ticket moved past `seen`.
struct AckChanged<'a> {
    queue: &'a MirrorQueue,
    seen: u64,
}

impl std::future::Future for AckChanged<'_> {
    type Output = ();

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if self.queue.acked.load(Ordering::Acquire) > self.seen {
            return std::task::Poll::Ready(());
        }
        self.queue.waker.register(cx.waker());
        if self.queue.acked.load(Ordering::Acquire) > self.seen {
            return std::task::Poll::Ready(());
        }
        std::task::Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_buffers_come_back_emptied_up_to_the_spare_bounds() {
        // Goal: a written run's buffer returns to its core with its capacity (no allocation for
        // the next burst), empty; past `SPARE_RUN_BUFFERS` or `SPARE_RUN_BUFFER_BYTES_MAX` it is
        // freed instead, so the spares stay bounded.
        let (_queue, mut worker, mut drain) = channel(8, 1 << 20);
        let mut used = Vec::with_capacity(64 * 1024);
        used.extend_from_slice(b"packed events");
        drain.recycle(used);
        drain.recycle(Vec::with_capacity(SPARE_RUN_BUFFER_BYTES_MAX + 1));
        let back = worker.spares.pop().expect("the run buffer came back");
        assert!(back.is_empty() && back.capacity() >= 64 * 1024, "{}", back.capacity());
        assert!(worker.spares.pop().is_err(), "the oversized buffer was freed, not handed back");
        for _ in 0..SPARE_RUN_BUFFERS + 4 {
            drain.recycle(Vec::with_capacity(16));
        }
        let mut kept = 0;
        while worker.spares.pop().is_ok() {
            kept += 1;
        }
        assert_eq!(kept, SPARE_RUN_BUFFERS, "at most the bound waits; the rest are freed");
    }
}
