//! What the runtime asks of one core's endpoint besides requests: its periodic work
//! (`expire`, at each reaper tick) and whether a call still runs (`is_quiet`, at each drain
//! tick). Each era answers for its own state (`legacy::expire`, `modern::expire`), so the
//! runtime reaches into neither. Never: runs on the request path.

use std::time::Instant;

use super::Endpoint;

impl Endpoint {
    /// One reaper tick at `now`: each era expires what is due (tasks past their retention;
    /// owed streams, settled streams and idle sessions) and samples its gauges.
    pub(crate) fn expire(&self, now: Instant) {
        self.modern.expire(now);
        self.legacy.expire(now);
    }

    /// No call runs on this core in either era: no 2026-07-28 keyed call whose client dropped,
    /// no working task, no legacy request stream running.
    pub(crate) fn is_quiet(&self) -> bool {
        self.modern.is_quiet() && self.legacy.is_quiet()
    }
}
