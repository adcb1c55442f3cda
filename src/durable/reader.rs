//! The reader thread: a core that needs something only the store knows (a session of a dead
//! node to adopt, a keyed record or task another node recorded) queues a `Query` here and
//! awaits its `Answer` without blocking; one thread with its own connection asks the store.
//! The queue is bounded (`--durable-adoptions-max`): past it a query is refused at once (the
//! client gets 503 + `Retry-After`), so a flood of unknown names cannot take the store from
//! the mirror or one core's clients from another's.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use atomic_waker::AtomicWaker;
use crossbeam_queue::ArrayQueue;

use super::mirror::STORE_TIMEOUT_MS;
use super::store::{self, Claim, KeyedImage, Store, StoreError, TaskImage};
use crate::config::DurableConfig;

/// What a core asks the store.
#[derive(Debug)]
pub(crate) enum Query {
    /// Adopt session `sid` (its owner's lease expired) for this node.
    Claim { sid: String },
    /// The keyed record `name` and whether its node's lease is alive.
    Keyed { name: String },
    /// Task `id` and whether its node's lease is alive.
    Task { id: String },
}

/// The store's answer.
#[derive(Debug)]
pub(crate) enum Answer {
    Claim(Claim),
    Keyed(Option<(KeyedImage, bool)>),
    Task(Option<(TaskImage, bool)>),
    /// The store could not be asked (down, timed out).
    Failed(String),
}

/// One pending query: its answer slot (one place, lock-free) and the waker of the task
/// awaiting it.
#[derive(Debug)]
pub(crate) struct Pending {
    answer: ArrayQueue<Answer>,
    waker: AtomicWaker,
}

impl Pending {
    fn new() -> Pending {
        Pending { answer: ArrayQueue::new(1), waker: AtomicWaker::new() }
    }

    fn set(&self, answer: Answer) {
        let _ = self.answer.push(answer);
        self.waker.wake();
    }
}

/// Completes with the answer of a queued query.
pub(crate) struct Awaited(Arc<Pending>);

impl Future for Awaited {
    type Output = Answer;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Answer> {
        if let Some(answer) = self.0.answer.pop() {
            return Poll::Ready(answer);
        }
        self.0.waker.register(cx.waker());
        match self.0.answer.pop() {
            Some(answer) => Poll::Ready(answer),
            None => Poll::Pending,
        }
    }
}

/// The queue every core asks through, and the thread answering it.
pub(crate) struct Reader {
    jobs: Arc<ArrayQueue<(Query, Arc<Pending>)>>,
    thread: std::thread::Thread,
    stop: Arc<AtomicBool>,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader").field("queued", &self.jobs.len()).finish()
    }
}

impl Reader {
    /// Starts the reader thread for node `node`.
    pub(crate) fn start(cfg: &DurableConfig, node: u8) -> std::io::Result<Arc<Reader>> {
        let jobs: Arc<ArrayQueue<(Query, Arc<Pending>)>> =
            Arc::new(ArrayQueue::new(cfg.adoptions_max.max(1)));
        let stop = Arc::new(AtomicBool::new(false));
        let (queue, flag, url) = (jobs.clone(), stop.clone(), cfg.url.clone());
        let replication = store::Replication::of(cfg);
        let limits = super::cluster::ClusterLimits::of(cfg);
        let handle =
            std::thread::Builder::new().name("tidemark-adopt".into()).spawn(move || {
                let mut store: Option<Box<dyn Store>> = None;
                let timeout = Duration::from_millis(STORE_TIMEOUT_MS);
                while !flag.load(Ordering::Acquire) {
                    let Some((query, pending)) = queue.pop() else {
                        std::thread::park_timeout(Duration::from_millis(100));
                        continue;
                    };
                    if store.is_none() {
                        // With Sentinel, the primary of now: a failover is followed here.
                        store = super::engine::connect(&url, replication, limits, timeout)
                            .ok()
                            .map(|(s, _, _)| s);
                    }
                    let Some(connected) = store.as_mut() else {
                        pending.set(Answer::Failed("store unreachable".into()));
                        continue;
                    };
                    match ask(connected.as_mut(), query, node) {
                        Ok(answer) => pending.set(answer),
                        Err(e) => {
                            store = None;
                            pending.set(Answer::Failed(e.0));
                        }
                    }
                }
            })?;
        let thread = handle.thread().clone();
        Ok(Arc::new(Reader { jobs, thread, stop }))
    }

    /// Queues `query`; `None` when `--durable-adoptions-max` queries wait already.
    pub(crate) fn ask(&self, query: Query) -> Option<Awaited> {
        let pending = Arc::new(Pending::new());
        self.jobs.push((query, pending.clone())).ok()?;
        self.thread.unpark();
        Some(Awaited(pending))
    }

    /// Stops the thread (at shutdown; it ends after the query it is asking, if any).
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

fn ask(store: &mut dyn Store, query: Query, node: u8) -> Result<Answer, StoreError> {
    Ok(match query {
        Query::Claim { sid } => Answer::Claim(store.claim(&sid, node)?),
        Query::Task { id } => Answer::Task(match store.task(&id)? {
            Some(image) => {
                let alive = image.node != node && store.lease_alive(image.node)?;
                Some((image, alive))
            }
            None => None,
        }),
        Query::Keyed { name } => Answer::Keyed(match store.keyed(&name)? {
            Some(image) => {
                let alive = image.node != node && store.lease_alive(image.node)?;
                Some((image, alive))
            }
            None => None,
        }),
    })
}
