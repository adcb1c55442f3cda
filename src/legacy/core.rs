//! The legacy era's state on one core (`LegacyCore`): the shared `crate::core::Core` and what
//! only the session era keeps per core, the sessions this core owns and their replay rings'
//! bytes together; and the one place a session ends (`end_session`). Built by
//! `endpoint::Endpoint::new`; read by `legacy` (its reaper tick: `expire`, which `runtime`'s
//! reaper asks through the endpoint). Never: touches a socket, or anything of the modern era.

use std::cell::RefCell;
use std::rc::Rc;

use super::session::{self, SessionId};
use crate::core::Core;

/// The legacy era's state on one core: the shared `Core` (its config, registry and metrics,
/// read through `Deref`) and what only this era has: the sessions this core owns and their
/// replay rings' bytes together.
pub(crate) struct LegacyCore {
    shared: Rc<Core>,
    pub(crate) sessions: RefCell<session::SessionTable>,
    /// What every session of this core adds up to: replay-ring bytes (`--core-buffer-bytes`),
    /// owed and live request streams.
    pub(crate) tally: Rc<session::CoreTally>,
    /// Sessions being adopted from the durable store right now, each with the signal its other
    /// requests wait on (`adopt`); a handful at most.
    pub(crate) adopting: RefCell<Vec<(SessionId, Rc<crate::signal::Signal>)>>,
    /// Session ids the durable store said it lacks, for a second (`adopt`): their requests
    /// get the 404 without asking the store again.
    pub(crate) store_misses: RefCell<crate::durable::Misses<SessionId>>,
}

impl LegacyCore {
    /// The legacy state of core `shared`, with no session yet.
    pub(crate) fn new(shared: Rc<Core>) -> LegacyCore {
        super::replay::set_spare_pages_max(shared.cfg.sessions.replay_spare_pages_max, true);
        let sessions = RefCell::new(session::SessionTable::with_timeouts(
            shared.cfg.sessions.sessions_per_core_max,
            &shared.cfg.sessions,
        ));
        LegacyCore {
            shared,
            sessions,
            tally: Rc::default(),
            adopting: RefCell::default(),
            store_misses: RefCell::default(),
        }
    }
}

impl std::ops::Deref for LegacyCore {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.shared
    }
}

/// Why a session ended (for its counter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SessionEnd {
    /// The client sent DELETE.
    Deleted,
    /// Idle past `--session-idle-secs` (found by a request or the reaper).
    Expired,
}

/// Ends a session: removes it from the core's table (which closes it: writers stop, tools are
/// cancelled) and counts it. The one place a session ends.
pub(crate) fn end_session(core: &LegacyCore, id: &SessionId, why: SessionEnd) {
    let removed = core.sessions.borrow_mut().remove(id);
    if let Some(session) = removed {
        session.borrow_mut().mirror_end();
        let reference = session.borrow().reference();
        let (level_info, reason) = match why {
            SessionEnd::Expired => (true, "idle past --session-idle-secs"),
            SessionEnd::Deleted => (false, "DELETE"),
        };
        if level_info {
            crate::logging::limited!(
                crate::logging::Kind::Session,
                tracing::Level::INFO,
                session = %id.to_header(),
                core = id.core,
                node = id.node,
                reason,
                culprit = "peer",
                "session expired"
            );
        } else {
            crate::logging::limited!(
                crate::logging::Kind::Session,
                tracing::Level::DEBUG,
                session = %id.to_header(),
                core = id.core,
                node = id.node,
                reason,
                culprit = "peer",
                "session deleted"
            );
        }
        core.registry.close_session(reference);
        match why {
            SessionEnd::Deleted => core.metrics.sessions_deleted_total.inc(),
            SessionEnd::Expired => core.metrics.sessions_expired_total.inc(),
        }
        core.metrics.sessions_active.sub(1);
    }
}
