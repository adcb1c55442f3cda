//! A session's handle on the durable mirror (`SessionMirror`): the core's tap, the session's
//! name as the store knows it, the epoch its whole image was last queued in. Kept by each
//! era's session (the legacy `Session`); what goes into records is the era's.

use std::rc::Rc;
use std::sync::Arc;

use super::queue::CoreTap;

/// What a durable session keeps of the mirror.
pub(crate) struct SessionMirror {
    pub(crate) tap: Rc<CoreTap>,
    /// `Mcp-Session-Id`, shared by every record.
    pub(crate) name: Arc<str>,
    /// The client's `initialize` params (JSON), for whole images.
    pub(crate) client: Arc<str>,
    /// The store epoch in which the whole image was last queued; 0: not durable.
    pub(crate) epoch: u64,
    /// The ticket of the last record queued (what a write-ahead waits for).
    pub(crate) last_ticket: u64,
}

impl SessionMirror {
    /// A session not yet written (its first image makes it durable).
    pub(crate) fn new(tap: Rc<CoreTap>, name: Arc<str>, client: Arc<str>) -> SessionMirror {
        SessionMirror { tap, name, client, epoch: 0, last_ticket: 0 }
    }

    /// Its whole image was queued in the current epoch and the store is up.
    pub(crate) fn is_durable(&self) -> bool {
        self.epoch != 0 && self.epoch == self.tap.epoch() && self.tap.is_up()
    }
}
