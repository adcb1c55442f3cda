//! Upstreams changed without a restart (SIGHUP), on one core: the core's reload inbox, which
//! `server` fills with the new upstream set from any thread, and the core task that applies
//! it. An upstream whose fingerprint (its name, spec and per-upstream settings) is unchanged
//! keeps its provider, links and children; a new or changed one gets a provider built on this
//! core; one no longer in the set is retired: unlisted and unroutable at once, it finishes the
//! calls it runs, then is stopped (its children with it), at most `--upstream-timeout-secs`
//! later. Running sessions are opened on the added providers and told
//! `notifications/tools/list_changed` once their tables hold the new set.
//!
//! Never: decides whether a set is acceptable (`server` refused a bad or colliding one whole
//! before sending it), or blocks the sending thread (the inbox holds the latest set only).

use std::future::poll_fn;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use atomic_waker::AtomicWaker;

use crate::endpoint::Endpoint;
use crate::provider::Provider;

/// Builds one core's instance of a provider (called once on each worker thread, so the
/// provider itself need not be `Send`).
pub(crate) type ProviderFactory = Arc<dyn Fn() -> Rc<dyn Provider> + Send + Sync>;

/// How often a retired provider is looked at for calls still running.
const RETIRE_TICK: Duration = Duration::from_millis(50);

/// One provider of a core's list as the server describes it.
#[derive(Clone)]
pub(crate) struct ProviderSlot {
    pub factory: ProviderFactory,
    /// `Some`: an upstream a reload may replace, named by everything its provider is built
    /// from (two slots with one fingerprint are the same upstream, kept as it is); `None`: a
    /// built-in set or an embedding program's provider, fixed for the process's life.
    pub fingerprint: Option<Arc<str>>,
}

/// The latest upstream set for one core; a newer one sent before the core took the last
/// replaces it (only the newest matters).
#[derive(Default)]
pub(crate) struct ReloadInbox {
    next: arc_swap::ArcSwapOption<Vec<ProviderSlot>>,
    waker: AtomicWaker,
}

impl ReloadInbox {
    /// From the signal thread: the upstreams this core is to serve, in order.
    pub(crate) fn send(&self, upstreams: Arc<Vec<ProviderSlot>>) {
        self.next.store(Some(upstreams));
        self.waker.wake();
    }

    fn take(&self) -> Option<Arc<Vec<ProviderSlot>>> {
        self.next.swap(None)
    }

    async fn recv(&self) -> Arc<Vec<ProviderSlot>> {
        poll_fn(|cx| {
            if let Some(set) = self.take() {
                return Poll::Ready(set);
            }
            self.waker.register(cx.waker());
            match self.take() {
                Some(set) => Poll::Ready(set),
                None => Poll::Pending,
            }
        })
        .await
    }
}

/// A provider this core runs, with the fingerprint it was built for.
#[derive(Clone)]
pub(crate) struct Held {
    pub provider: Rc<dyn Provider>,
    pub fingerprint: Option<Arc<str>>,
}

/// The core task: applies every upstream set the inbox receives, in turn, until the core ends.
/// A draining core keeps its set (its sessions are finishing).
pub(crate) async fn follow(core: Rc<Endpoint>, inbox: Arc<ReloadInbox>, mut held: Vec<Held>) {
    loop {
        let upstreams = inbox.recv().await;
        if core.draining.get() {
            continue;
        }
        held = apply(&core, &upstreams, held).await;
    }
}

/// The provider list of `upstreams` after the fixed providers of `held`, each kept when `held`
/// has its fingerprint, else built here; the registry's list replaced by it; the running
/// sessions opened on what it added; the removed providers retired.
async fn apply(core: &Rc<Endpoint>, upstreams: &[ProviderSlot], held: Vec<Held>) -> Vec<Held> {
    let mut next: Vec<Held> = held.iter().filter(|h| h.fingerprint.is_none()).cloned().collect();
    for slot in upstreams {
        let kept =
            held.iter().find(|h| h.fingerprint.is_some() && h.fingerprint == slot.fingerprint);
        next.push(match kept {
            Some(kept) => kept.clone(),
            None => Held { provider: (slot.factory)(), fingerprint: slot.fingerprint.clone() },
        });
    }
    drop(held);
    let replaced = core.registry.replace(next.iter().map(|h| h.provider.clone()).collect());
    let added: Rc<[Rc<dyn Provider>]> = replaced.added.into();
    // Every running session is opened on the added providers (concurrently: a per-session
    // upstream starts a child for each), keeping its old table meanwhile; then the core's
    // tools are listed and each session's table rebuilt over them, and its client told.
    let opening = Rc::new(crate::signal::Countdown::new(replaced.starts.len()));
    for start in &replaced.starts {
        let (core, added, opening, start) =
            (core.clone(), added.clone(), opening.clone(), start.clone());
        monoio::spawn(async move {
            core.registry.open_added(&start, &added).await;
            opening.done();
        });
    }
    opening.finished().await;
    core.registry.relist_after_replace(&added).await;
    for start in replaced.starts {
        let core = core.clone();
        monoio::spawn(async move { core.registry.caught_up(&start).await });
    }
    let patience = core.cfg.upstream.timeout;
    for provider in replaced.removed {
        monoio::spawn(retire(core.clone(), provider, patience));
    }
    tracing::info!(
        core = core.index,
        upstreams = upstreams.len(),
        added = added.len(),
        "upstream set applied"
    );
    next
}

/// Stops `provider` once no call holds it any more (its routes are gone from every table, so
/// only running calls do), or after `patience` with calls still running (they then end with
/// its connections).
async fn retire(core: Rc<Endpoint>, provider: Rc<dyn Provider>, patience: Duration) {
    let deadline = Instant::now() + patience;
    // The registry's retiring list holds one reference, this task another.
    while Rc::strong_count(&provider) > 2 && Instant::now() < deadline {
        monoio::time::sleep(RETIRE_TICK).await;
    }
    let running = Rc::strong_count(&provider) > 2;
    if running {
        tracing::warn!(
            provider = provider.name(),
            "removed upstream stopped with calls still running (--upstream-timeout-secs passed)"
        );
    } else {
        tracing::info!(provider = provider.name(), "removed upstream stopped: its calls finished");
    }
    provider.stop();
    core.registry.retired(&provider);
}
