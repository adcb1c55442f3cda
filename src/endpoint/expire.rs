//! What the runtime asks of one core's endpoint besides requests: its periodic work
//! (`expire`, in bounded steps at each reaper tick, then `sample`) and whether a call still runs (`is_quiet`, at each drain
//! tick). Each era answers for its own state (`legacy::expire`, `modern::expire`), so the
//! runtime reaches into neither. Never: runs on the request path.

use std::time::Instant;

use super::Endpoint;

impl Endpoint {
    /// One step of a reaper tick at `now`: each era expires what is due (tasks past their
    /// retention; owed streams, settled streams and idle sessions, a bounded batch of them).
    /// `None`: no legacy session was due (an idle tick); else whether more is due (the runtime
    /// calls again after a pause).
    pub(crate) fn expire(&self, now: Instant) -> Option<bool> {
        self.modern.expire(now);
        self.legacy.expire(now)
    }

    /// The end of a reaper tick: the gauges cheaper to sample than to keep on every change.
    pub(crate) fn sample(&self) {
        self.modern.sample();
        self.legacy.sample();
    }

    /// No call runs on this core in either era: no 2026-07-28 keyed call whose client dropped,
    /// no working task, no legacy request stream running.
    pub(crate) fn is_quiet(&self) -> bool {
        self.modern.is_quiet() && self.legacy.is_quiet()
    }
}
