//! A single-core, multi-waiter wake-up: `notify_all` wakes every task waiting at that moment.
//! Used for "a stream has new events" (its writer) and "the session's owed state changed"
//! (held POSTs); `Countdown` waits for a group of tasks. Core-local: `Rc`, no atomics.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

#[derive(Default)]
pub struct Signal {
    generation: Cell<u64>,
    waiters: RefCell<Vec<Waker>>,
}

impl Signal {
    pub fn notify_all(&self) {
        self.generation.set(self.generation.get().wrapping_add(1));
        let waiters = std::mem::take(&mut *self.waiters.borrow_mut());
        for w in waiters {
            w.wake();
        }
    }

    /// Completes at the next `notify_all` after this call.
    pub fn notified(&self) -> Notified<'_> {
        Notified { signal: self, generation: self.generation.get() }
    }
}

pub struct Notified<'a> {
    signal: &'a Signal,
    generation: u64,
}

impl Future for Notified<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.signal.generation.get() != self.generation {
            return Poll::Ready(());
        }
        let mut waiters = self.signal.waiters.borrow_mut();
        if !waiters.iter().any(|w| w.will_wake(cx.waker())) {
            waiters.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// Completes once `done` was called `n` times: a core-local wait for a group of tasks.
pub(crate) struct Countdown {
    left: Cell<usize>,
    signal: Signal,
}

impl Countdown {
    pub(crate) fn new(n: usize) -> Countdown {
        Countdown { left: Cell::new(n), signal: Signal::default() }
    }

    /// One of the `n` finished.
    pub(crate) fn done(&self) {
        self.left.set(self.left.get().saturating_sub(1));
        if self.left.get() == 0 {
            self.signal.notify_all();
        }
    }

    /// Waits until all `n` finished.
    pub(crate) async fn finished(&self) {
        loop {
            let notified = self.signal.notified();
            if self.left.get() == 0 {
                return;
            }
            notified.await;
        }
    }
}
