//! Which core serves a request: decided here, once, from all of its names, in one fixed order:
//! its task (a `tasks/*` method's `Mcp-Name`, `modern::task_call::named_core`), then its session
//! (`Mcp-Session-Id`, `legacy::named_core`), then its `Idempotency-Key` (`modern::keyed::
//! owner_core`, a hash of the key). The first name that names a core we run decides; a later
//! one only when nothing earlier names a core. A request that names none is served where it
//! was accepted.
//!
//! The decision is a pure function of the request's head and the core count, so every core
//! computes the same owner: a request handed to its owner is served there, never handed on
//! (`runtime::conn` still refuses a second hand-off, should one ever be asked for).
//!
//! Called by `endpoint::route` before the era is chosen and before the body is decoded
//! (decoding works in place). Never: reads the body, or any core's state.

use crate::core::Request;
use crate::legacy;
use crate::modern::{keyed, task_call};

/// The core that owns `req`, when it is another one than `here` (then the connection moves
/// there, unanswered).
pub(crate) fn elsewhere(req: &Request<'_>, here: u16, threads: u16) -> Option<u16> {
    // One core: no request can belong elsewhere, and no name need be read.
    if threads <= 1 {
        return None;
    }
    let owner = owner(req, threads)?;
    (owner != here).then_some(owner)
}

/// The core `req`'s names choose (task, then session, then key); `None`: no name names a core
/// among the `threads` we run.
pub(crate) fn owner(req: &Request<'_>, threads: u16) -> Option<u16> {
    let ours = |core: u16| core < threads;
    if let Some(task) = task_call::named_core(req).filter(|&c| ours(c)) {
        return Some(task);
    }
    if let Some(session) = legacy::named_core(req).filter(|&c| ours(c)) {
        return Some(session);
    }
    let key = req.header(&req.head.idempotency_key)?;
    Some(keyed::owner_core(key, threads))
}
