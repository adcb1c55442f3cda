//! A single-core, multi-waiter wake-up: `notify_all` wakes every task waiting at that moment.
//! Used for "a stream has new events" (its writer) and "the session's owed state changed"
//! (held POSTs); `Countdown` waits for a group of tasks. Core-local: `Rc`, no atomics.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// One waiter's place in a `Signal`. A waiter that gave up (its `Notified` dropped unfired)
/// gives its slot back: a task that waited once is not kept alive by the signal, and the list
/// never outgrows the most waiters at one time since it last had none. (Before, a waker stayed
/// until the next `notify_all`: on a signal that fires only at shutdown, an HTTP upstream
/// link's `stop`, every call's finished task stayed with it, ~5.6 KiB a call.)
enum Slot {
    /// Given back; `next` is the next free slot (`NO_SLOT` for none): the free slots form a
    /// list, so a waiter takes one in O(1) (issue 43 §2: every live stream waits on its core's
    /// drain signal once per event, and the first-free scan this replaces walked half of the
    /// core's streams each time, ~230 instructions an event at 200 streams, callgrind).
    Free { next: usize },
    /// Held by a `Notified`: its waker while pending, `None` once `notify_all` took it.
    Held(Option<Waker>),
}

/// The end of the free-slot list.
const NO_SLOT: usize = usize::MAX;

pub struct Signal {
    generation: Cell<u64>,
    slots: RefCell<Vec<Slot>>,
    /// The first free slot, `NO_SLOT` when none is.
    free: Cell<usize>,
    /// Slots held (by `Notified`s not yet dropped): at 0 the list is emptied.
    held: Cell<usize>,
}

impl Default for Signal {
    fn default() -> Signal {
        Signal {
            generation: Cell::new(0),
            slots: RefCell::new(Vec::new()),
            free: Cell::new(NO_SLOT),
            held: Cell::new(0),
        }
    }
}

impl Signal {
    /// Wakes every task waiting now. Each waker is woken with no borrow held (waking, or
    /// dropping a waker that frees a task, may drop a `Notified` of this signal), and nothing is
    /// allocated.
    pub fn notify_all(&self) {
        self.generation.set(self.generation.get().wrapping_add(1));
        let mut at = 0;
        loop {
            let waker = match self.slots.borrow_mut().get_mut(at) {
                Some(Slot::Held(waker)) => waker.take(),
                Some(Slot::Free { .. }) => None,
                None => break,
            };
            if let Some(waker) = waker {
                waker.wake();
            }
            at += 1;
        }
    }

    /// Completes at the next `notify_all` after this call.
    pub fn notified(&self) -> Notified<'_> {
        Notified { signal: self, generation: self.generation.get(), slot: None }
    }

    /// Slots held now (waiters that waited and are not dropped, and free ones between them).
    #[cfg(test)]
    pub(crate) fn slots_held(&self) -> usize {
        self.slots.borrow().len()
    }

    /// A slot holding `waker`: the free list's first, else a new one at the end. O(1).
    fn hold(&self, waker: Waker) -> usize {
        let mut slots = self.slots.borrow_mut();
        self.held.set(self.held.get() + 1);
        let at = self.free.get();
        match slots.get_mut(at) {
            Some(slot) => {
                let Slot::Free { next } = *slot else {
                    unreachable!("invariant: the free list holds only free slots")
                };
                self.free.set(next);
                *slot = Slot::Held(Some(waker));
                at
            }
            None => {
                slots.push(Slot::Held(Some(waker)));
                slots.len() - 1
            }
        }
    }
}

pub struct Notified<'a> {
    signal: &'a Signal,
    generation: u64,
    /// The slot this waiter holds, once it waited.
    slot: Option<usize>,
}

impl Future for Notified<'_> {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.signal.generation.get() != self.generation {
            return Poll::Ready(());
        }
        match self.slot {
            Some(at) => {
                if let Some(Slot::Held(held)) = self.signal.slots.borrow_mut().get_mut(at) {
                    if !held.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                        *held = Some(cx.waker().clone());
                    }
                }
            }
            None => self.slot = Some(self.signal.hold(cx.waker().clone())),
        }
        Poll::Pending
    }
}

impl Drop for Notified<'_> {
    fn drop(&mut self) {
        let Some(at) = self.slot else { return };
        let signal = self.signal;
        let old = {
            let mut slots = signal.slots.borrow_mut();
            let next = signal.free.get();
            let old = slots.get_mut(at).map(|slot| std::mem::replace(slot, Slot::Free { next }));
            signal.free.set(at);
            signal.held.set(signal.held.get() - 1);
            // The last waiter gone: the list goes, so a signal that once had many waiters
            // shrinks back (its capacity stays, as it did when trailing slots were popped).
            if signal.held.get() == 0 {
                slots.clear();
                signal.free.set(NO_SLOT);
            }
            old
        };
        // Dropped out of the borrow: dropping a waker may free a task.
        drop(old);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    /// A waker that counts its wakes; its `Arc`'s strong count says who still holds it.
    #[derive(Default)]
    struct Counting(AtomicUsize);

    impl Wake for Counting {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn poll_once(fut: &mut Notified<'_>, task: &Arc<Counting>) -> Poll<()> {
        let waker = Waker::from(task.clone());
        Pin::new(fut).poll(&mut Context::from_waker(&waker))
    }

    #[test]
    fn a_waiter_that_gives_up_leaves_nothing_in_the_signal() {
        // Goal: the leak an HTTP upstream link's `stop` showed (a signal that fires only at
        // shutdown, waited on beside a read by every call): a `Notified` dropped unfired takes
        // its waker out, so no task is kept alive and the slots never outgrow the waiters at
        // one time. Method: 1 000 tasks each wait and give up, two at a time.
        let signal = Signal::default();
        let tasks: Vec<Arc<Counting>> = (0..1000).map(|_| Arc::default()).collect();
        for pair in tasks.chunks(2) {
            let mut waits: Vec<Notified<'_>> = pair.iter().map(|_| signal.notified()).collect();
            for (wait, task) in waits.iter_mut().zip(pair) {
                assert!(poll_once(wait, task).is_pending());
            }
            assert_eq!(signal.slots.borrow().len(), 2, "one slot per waiter at one time");
        }
        assert_eq!(signal.slots.borrow().len(), 0, "every slot given back");
        assert!(tasks.iter().all(|t| Arc::strong_count(t) == 1), "no waker kept");
        signal.notify_all();
        assert!(tasks.iter().all(|t| t.0.load(Ordering::Relaxed) == 0), "none woken");
    }

    #[test]
    fn notify_all_wakes_each_pending_waiter_once_and_a_fired_slot_is_not_reused_early() {
        // Goal: the waiters pending at `notify_all` are woken once each and complete; one that
        // gave up before is not woken; a slot taken by `notify_all` stays its waiter's until
        // dropped (a new waiter gets another), so dropping the old one cannot clear the new.
        let signal = Signal::default();
        let (a, b, c) = (Arc::<Counting>::default(), Arc::default(), Arc::default());
        let (mut wa, mut wb) = (signal.notified(), signal.notified());
        assert!(poll_once(&mut wa, &a).is_pending());
        assert!(poll_once(&mut wa, &a).is_pending(), "polled again: the same slot");
        assert!(poll_once(&mut wb, &b).is_pending());
        drop(wb);
        signal.notify_all();
        assert_eq!((a.0.load(Ordering::Relaxed), b.0.load(Ordering::Relaxed)), (1, 0));
        let mut wc = signal.notified();
        assert!(poll_once(&mut wc, &c).is_pending(), "a new wait after the notify");
        assert!(poll_once(&mut wa, &a).is_ready(), "the notified waiter completes");
        drop(wa);
        signal.notify_all();
        assert_eq!(c.0.load(Ordering::Relaxed), 1, "the new waiter kept its waker");
        assert!(poll_once(&mut wc, &c).is_ready());
        drop(wc);
        assert_eq!(signal.slots.borrow().len(), 0);
    }

    #[test]
    fn a_new_waiter_takes_a_given_back_slot_without_a_scan() {
        // Goal: many waiters at once (a core's drain signal, waited on by every live stream)
        // leave and come back in any order; each comes back into a slot given back (the list
        // does not grow past the most waiters at one time), the last given back first, and
        // the list empties when the last waiter goes. Method: 100 waiters, every third gives
        // up and waits again, then all give up.
        let signal = Signal::default();
        let tasks: Vec<Arc<Counting>> = (0..100).map(|_| Arc::default()).collect();
        let mut waits: Vec<Notified<'_>> = tasks.iter().map(|_| signal.notified()).collect();
        for (wait, task) in waits.iter_mut().zip(&tasks) {
            assert!(poll_once(wait, task).is_pending());
        }
        for (i, task) in tasks.iter().enumerate().step_by(3) {
            waits[i] = signal.notified(); // the old one dropped: slot i given back
            assert!(poll_once(&mut waits[i], task).is_pending());
            assert_eq!(waits[i].slot, Some(i), "the slot just given back");
            assert_eq!(signal.slots.borrow().len(), 100, "no new slot");
        }
        signal.notify_all();
        assert!(tasks.iter().all(|t| t.0.load(Ordering::Relaxed) == 1), "each woken once");
        waits.truncate(1);
        assert_eq!(signal.slots.borrow().len(), 100, "one waiter left: the list stays");
        waits.clear();
        assert_eq!(signal.slots.borrow().len(), 0, "the last waiter gone: the list goes");
        assert!(tasks.iter().all(|t| Arc::strong_count(t) == 1), "no waker kept");
    }
}
