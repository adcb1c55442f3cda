//! Who serves a request: decided here, once, from all of its names, in one fixed order: its
//! task (a `tasks/*` method's `Mcp-Name`, `modern::task_call::named_owner`), then its session
//! (`Mcp-Session-Id`, `legacy::named_owner`), then its `Idempotency-Key` (`modern::keyed::
//! owner_core`, a hash of the key). The first name that names a node and core decides; a later
//! one only when nothing earlier names one. A task or session of another node (`--node-id`, the
//! ids' first two hex digits) is `Misrouted`: the balancer in front sent it to the wrong node,
//! and the request is answered here as naming an unknown one. A task or session of this node
//! naming a core we do not run names nothing. A request that names none is served where it was
//! accepted.
//!
//! The decision is a pure function of the request's head, the node id and the core count, so
//! every core computes the same owner: a request handed to its owner is served there, never
//! handed on (`runtime::conn` still refuses a second hand-off, should one ever be asked for).
//!
//! Called by `endpoint::route` before the era is chosen and before the body is decoded
//! (decoding works in place). Never: reads the body, or any core's state.

use crate::core::Request;
use crate::legacy;
use crate::modern::{keyed, task_call};

/// Where a request is served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Owner {
    /// On this core (no name, or its names choose this core).
    Here,
    /// On another core of this node: the connection moves there, unanswered.
    Core(u16),
    /// Its first name is a task or session of another node: answered here as unknown.
    Misrouted(Misrouted),
}

/// The name that was misrouted, and the node it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Misrouted {
    /// A `tasks/*` request's `Mcp-Name`.
    Task { node: u8 },
    /// `Mcp-Session-Id`.
    Session { node: u8 },
}

/// Where `req` is served, accepted on core `here` of node `node` running `threads` cores.
/// `adopts` (`--durable`): a session of another node is not misrouted but served on the core
/// it is adopted onto (`legacy::adopted_core`), where the store may hand it over.
pub(crate) fn owner(req: &Request<'_>, node: u8, here: u16, threads: u16, adopts: bool) -> Owner {
    let ours = |core: u16| core < threads;
    if let Some((task_node, core)) = task_call::named_owner(req) {
        if task_node != node {
            return Owner::Misrouted(Misrouted::Task { node: task_node });
        }
        if ours(core) {
            return on(core, here);
        }
    }
    if let Some((session_node, core)) = legacy::named_owner(req) {
        if session_node != node {
            if adopts {
                return on(legacy::adopted_core(core, threads), here);
            }
            return Owner::Misrouted(Misrouted::Session { node: session_node });
        }
        if ours(core) {
            return on(core, here);
        }
    }
    // One core: no key can belong elsewhere, and the key need not be hashed.
    if threads <= 1 {
        return Owner::Here;
    }
    match req.header(&req.head.idempotency_key) {
        Some(key) => on(keyed::owner_core(key, threads), here),
        None => Owner::Here,
    }
}

fn on(core: u16, here: u16) -> Owner {
    if core == here {
        Owner::Here
    } else {
        Owner::Core(core)
    }
}
