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
    /// While set, the session's next ring event is held here instead of queued, for the
    /// stream record that follows it within the same call to carry (`Record::Event::then`).
    pub(crate) hold_event: bool,
    /// The event held, until a stream record takes it or the holder releases it.
    pub(crate) held: Option<HeldEvent>,
    /// A stream removed while an event was held for (`hold_event`): the record that takes the
    /// event carries its removal (`Record::Event::gone`).
    pub(crate) gone: Option<u32>,
    /// While set (a tool's poll), ring events gather into `run` instead of being queued one by
    /// one; the poll's end queues the run, and so does any other record of the session first.
    pub(crate) gathering: bool,
    /// The events gathered and not queued yet.
    pub(crate) run: Option<super::record::PackedRun>,
    /// While set (a quick call's open and first poll, no wait between them), the session's
    /// next event record is kept in `deferred` instead of queued, so the call's final event
    /// joins it (`Record::Event::primed`); any other record of the session queues it first.
    pub(crate) deferring: bool,
    /// The event record deferred, until the deferral ends or another record comes.
    pub(crate) deferred: Option<super::record::Record>,
}

/// A gathered run is queued once it holds this many events or `RUN_BYTES_MAX` packed bytes, so
/// one tool's burst neither delays its first events nor makes one record (and one store entry)
/// larger than an image's run (`store::IMAGE_RUN_EVENTS`).
pub(crate) const RUN_EVENTS_MAX: u32 = 256;
/// See `RUN_EVENTS_MAX`.
pub(crate) const RUN_BYTES_MAX: usize = 64 * 1024;

/// A ring event not queued yet (see `SessionMirror::hold_event`).
#[derive(Debug)]
pub(crate) struct HeldEvent {
    pub(crate) event: super::record::EventImage,
    pub(crate) at: std::time::Instant,
    pub(crate) first_kept: Option<u64>,
}

impl SessionMirror {
    /// A session not yet written (its first image makes it durable).
    pub(crate) fn new(tap: Rc<CoreTap>, name: Arc<str>, client: Arc<str>) -> SessionMirror {
        SessionMirror {
            tap,
            name,
            client,
            epoch: 0,
            last_ticket: 0,
            hold_event: false,
            held: None,
            gone: None,
            gathering: false,
            run: None,
            deferring: false,
            deferred: None,
        }
    }

    /// Its whole image was queued in the current epoch and the store is up.
    pub(crate) fn is_durable(&self) -> bool {
        self.epoch != 0 && self.epoch == self.tap.epoch() && self.tap.is_up()
    }
}
