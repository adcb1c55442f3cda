//! The modern era's periodic work on one core, asked by `endpoint::Endpoint::expire` at each of
//! the runtime's reaper ticks: tasks past `--task-retention-secs` are deleted (the store's
//! `expire`: O(due), in creation order) and `tidemark_tasks_active` is sampled. And whether a
//! call still runs here (`is_quiet`, for the drain). Never: touches a keyed call's record.

use std::time::Instant;

use super::core::ModernCore;

impl ModernCore {
    /// One reaper step at `now`: the tasks due are deleted (a tool still running cancelled).
    pub(crate) fn expire(&self, now: Instant) {
        self.tasks.expire(now);
    }

    /// Samples `tidemark_tasks_active`, once a reaper tick.
    pub(crate) fn sample(&self) {
        self.metrics.tasks_active.set(self.tasks.len() as u64);
    }

    /// No keyed call whose client dropped and no working task runs on this core. Tasks
    /// waiting for input are not waited for: their clients cannot reconnect to a draining
    /// server.
    pub(crate) fn is_quiet(&self) -> bool {
        !(self.keys.borrow().any_running() || self.tasks.any_working())
    }
}
