//! Who serves a request: decided here, once, from all of its names, in one fixed order: its
//! task (a `tasks/*` method's `Mcp-Name`), then its session (`Mcp-Session-Id`), both read in
//! the owned-id layout of `wire::owned_id`, then its `Idempotency-Key` (`key_core`, a hash of
//! the key). Neither era is asked: the owner is read from the head alone. The first name that names a node and core decides; a later
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

use std::hash::Hasher;

use crate::core::Request;
use crate::wire::owned_id::{self, TASK_METHODS};
use crate::wire::param_headers;

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
/// it is adopted onto (`owned_id::fold_core`), where the store may hand it over.
pub(crate) fn owner(req: &Request<'_>, node: u8, here: u16, threads: u16, adopts: bool) -> Owner {
    let ours = |core: u16| core < threads;
    if let Some((task_node, core)) = task_named(req) {
        if task_node != node {
            return Owner::Misrouted(Misrouted::Task { node: task_node });
        }
        if ours(core) {
            return on(core, here);
        }
    }
    if let Some((session_node, core)) = session_named(req) {
        if session_node != node {
            if adopts {
                return on(owned_id::fold_core(core, threads), here);
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
        Some(key) => on(key_core(key, threads), here),
        None => Owner::Here,
    }
}

/// The node and core that hold the task a `tasks/*` request names in its `Mcp-Name` header (the
/// task id), whichever they are. A missing or foreign header names no core: the request is
/// served where its other names put it and its checks refuse it (-32020) or find no task
/// (-32602).
fn task_named(req: &Request<'_>) -> Option<(u8, u16)> {
    let method = req.header(&req.head.mcp_method)?;
    if !TASK_METHODS.iter().any(|m| m.as_bytes() == method) {
        return None;
    }
    let name = param_headers::decode(req.header(&req.head.mcp_name)?)?;
    let (node, core, _) = owned_id::parse(std::str::from_utf8(&name).ok()?.trim().as_bytes())?;
    Some((node, core))
}

/// The node and core of the session `Mcp-Session-Id` names (its first six digits).
fn session_named(req: &Request<'_>) -> Option<(u8, u16)> {
    owned_id::owner_prefix(req.header(&req.head.session_id)?)
}

/// The core that keeps the records of `key` (`modern::keyed`): its hash over the cores, stable
/// across processes, so a cluster's nodes agree when they share the key space. The hash is
/// `fasthash::StableHasher`, a function of the bytes this crate defines (std's `DefaultHasher`
/// was used before; std does not promise its output across Rust versions, so two builds could
/// have put one key on different cores). A client that picks keys landing on one core only
/// fills that core's keyed records, which `--idempotency-bytes-per-core` bounds.
pub(crate) fn key_core(key: &[u8], threads: u16) -> u16 {
    let mut h = crate::fasthash::StableHasher::default();
    h.write(key);
    (h.finish() % u64::from(threads.max(1))) as u16
}

fn on(core: u16, here: u16) -> Owner {
    if core == here {
        Owner::Here
    } else {
        Owner::Core(core)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_always_maps_to_the_same_core_in_range() {
        for threads in 1..8u16 {
            let core = key_core(b"some-key", threads);
            assert!(core < threads);
            assert_eq!(core, key_core(b"some-key", threads));
        }
    }

    /// Goal: keys a client numbers in sequence spread over the cores, not onto one. Method:
    /// 10 000 keys `key-N` over 2 and over 8 cores; each core gets within 10 % of its share.
    #[test]
    fn sequential_keys_spread_over_the_cores() {
        for threads in [2u16, 8] {
            let mut per_core = vec![0u32; usize::from(threads)];
            for n in 0..10_000 {
                per_core[usize::from(key_core(format!("key-{n}").as_bytes(), threads))] += 1;
            }
            let share = 10_000 / u32::from(threads);
            for &count in &per_core {
                assert!(count.abs_diff(share) <= share / 10, "{threads} cores: {per_core:?}");
            }
        }
    }
}
