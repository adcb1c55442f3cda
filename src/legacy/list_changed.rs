//! Coalescing of a session's `notifications/{tools,prompts,resources}/list_changed` (issue 38,
//! finding 10): an upstream that says its list changed 2000 times a second had each client told
//! 2000 times, each a replayable event of its GET stream and each an invitation to re-list. Per
//! session and kind, at most one is sent per `--list-changed-min-ms`; one that arrives inside
//! the window is not lost but becomes one trailing notification at the window's end, so the
//! last change is always announced, and after it happened. A list change says only "list
//! again" (MCP 2025-11-25, server/tools "List Changed Notification"): one stands for many.
//!
//! Owns: the per-kind windows (`Windows`) and the decision (`Window::offer`, pure). Called by:
//! `context::SessionNotifier`, which appends what passes and spawns the trailing send. Never:
//! delays or drops any other notification.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// The list-changed methods, by kind index.
pub(crate) const METHODS: [&str; 3] = [
    "notifications/tools/list_changed",
    "notifications/prompts/list_changed",
    "notifications/resources/list_changed",
];

/// The kind index of a list-changed `method`; `None` for every other method.
pub(crate) fn kind_of(method: &str) -> Option<usize> {
    METHODS.iter().position(|m| *m == method)
}

/// What to do with one list change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Send it now (the window since the last one sent is over).
    Send,
    /// Inside the window: send one at `Instant` (nothing is scheduled yet).
    Trail(Instant),
    /// Inside the window with a trailing send scheduled already: it stands for this one.
    Coalesce,
}

/// One kind's window in one session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Window {
    /// When the last one was sent (`None`: never).
    sent: Option<Instant>,
    /// True exactly while a trailing send is scheduled.
    trailing: bool,
}

impl Window {
    /// The verdict on a change at `now` with windows of `min`, and the window updated for it.
    pub(crate) fn offer(&mut self, now: Instant, min: Duration) -> Verdict {
        if self.trailing {
            return Verdict::Coalesce;
        }
        match self.sent.map(|sent| sent + min) {
            Some(open_until) if now < open_until => {
                self.trailing = true;
                Verdict::Trail(open_until)
            }
            _ => {
                self.sent = Some(now);
                Verdict::Send
            }
        }
    }

    /// The trailing send went out at `now`: a new window starts.
    pub(crate) fn trailed(&mut self, now: Instant) {
        assert!(self.trailing, "invariant: a trailing send was scheduled");
        *self = Window { sent: Some(now), trailing: false };
    }
}

/// A session's windows, one per kind.
#[derive(Default)]
pub(crate) struct Windows([Cell<Window>; 3]);

impl Windows {
    /// `Window::offer` for kind `kind`.
    pub(crate) fn offer(&self, kind: usize, now: Instant, min: Duration) -> Verdict {
        let mut window = self.0[kind].get();
        let verdict = window.offer(now, min);
        self.0[kind].set(window);
        verdict
    }

    /// `Window::trailed` for kind `kind`.
    pub(crate) fn trailed(&self, kind: usize, now: Instant) {
        let mut window = self.0[kind].get();
        window.trailed(now);
        self.0[kind].set(window);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_per_window_then_one_trailing_then_a_new_window() {
        // Goal: the first change goes at once; changes inside the window make one trailing
        // send at the window's end; after it, the window starts again from the trailing send;
        // a change at exactly the window's end (the limit) goes at once.
        let (t0, min) = (Instant::now(), Duration::from_millis(250));
        let mut w = Window::default();
        assert_eq!(w.offer(t0, min), Verdict::Send);
        assert_eq!(w.offer(t0 + Duration::from_millis(1), min), Verdict::Trail(t0 + min));
        for ms in [2, 100, 249] {
            assert_eq!(w.offer(t0 + Duration::from_millis(ms), min), Verdict::Coalesce);
        }
        w.trailed(t0 + min);
        assert_eq!(
            w.offer(t0 + min + Duration::from_millis(10), min),
            Verdict::Trail(t0 + 2 * min)
        );
        w.trailed(t0 + 2 * min);
        assert_eq!(w.offer(t0 + 3 * min, min), Verdict::Send, "at the limit: a new window");
        assert_eq!(
            w.offer(t0 + 4 * min - Duration::from_nanos(1), min),
            Verdict::Trail(t0 + 4 * min)
        );
    }

    #[test]
    fn kinds_have_windows_of_their_own_and_other_methods_none() {
        let (t0, min) = (Instant::now(), Duration::from_millis(250));
        let windows = Windows::default();
        for kind in 0..3 {
            assert_eq!(windows.offer(kind, t0, min), Verdict::Send, "{kind}");
        }
        assert_eq!(kind_of("notifications/prompts/list_changed"), Some(1));
        assert_eq!(kind_of("notifications/resources/updated"), None);
        assert_eq!(kind_of("notifications/message"), None);
    }
}
