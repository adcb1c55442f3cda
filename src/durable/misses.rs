//! A core's negative cache of the store: names (session ids) the store said it does not hold,
//! remembered for `MISS_TTL`, at most `MISSES_MAX` of them. A request naming one of them is
//! answered as the store answered (404) without asking again, so a client repeating a forged
//! or stale session id costs the store one command a second, not one per request (issue 38:
//! every forged id of another node cost one store command, unthrottled).
//!
//! Owned by one core (`legacy::LegacyCore` for session ids, `modern::ModernCore` for hashed
//! task ids), used only on the path of a session or task this core does not hold. A task
//! request stays on the core that accepted it, so a forged task id costs one lookup a second
//! per core; a session id's requests all reach its one core. Never: remembers a name the store holds, or grows past `MISSES_MAX` (the oldest
//! is forgotten first; a forgotten name only costs its next request a store lookup).

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::time::{Duration, Instant};

/// How long a miss is remembered. 1 s: long enough that a client (or an attacker) repeating
/// an id costs one store command a second; short enough that a session written to the store
/// just after a miss (a node's new session, mirrored a moment later) is found by a retry.
pub(crate) const MISS_TTL: Duration = Duration::from_secs(1);
/// Misses a core remembers at once: 1024 ids of 16 bytes plus a time each, about 64 KiB with
/// the map. Ids beyond it in one second push the oldest out; those are asked again.
pub(crate) const MISSES_MAX: usize = 1024;

/// Recently missed names, oldest first (every entry lives `MISS_TTL`, so the insertion order
/// is the expiry order); the map holds exactly the names of `order`.
pub(crate) struct Misses<K> {
    order: VecDeque<(K, Instant)>,
    /// Keyed by names a peer chooses: std's randomly keyed SipHash, so no one can make them
    /// collide.
    names: HashMap<K, Instant>,
}

impl<K: Eq + Hash + Copy> Default for Misses<K> {
    fn default() -> Self {
        Misses { order: VecDeque::new(), names: HashMap::new() }
    }
}

impl<K: Eq + Hash + Copy> Misses<K> {
    /// Whether `name` was missed within `MISS_TTL` of `now`.
    pub(crate) fn holds(&mut self, name: &K, now: Instant) -> bool {
        self.expire(now);
        self.names.contains_key(name)
    }

    /// Remembers that the store lacked `name` at `now`.
    pub(crate) fn insert(&mut self, name: K, now: Instant) {
        self.expire(now);
        if self.names.contains_key(&name) {
            return;
        }
        if self.order.len() == MISSES_MAX {
            if let Some((oldest, _)) = self.order.pop_front() {
                self.names.remove(&oldest);
            }
        }
        self.order.push_back((name, now));
        self.names.insert(name, now);
        debug_assert_eq!(self.order.len(), self.names.len());
    }

    fn expire(&mut self, now: Instant) {
        while let Some((name, at)) = self.order.front().copied() {
            if now.duration_since(at) < MISS_TTL {
                break;
            }
            self.order.pop_front();
            self.names.remove(&name);
        }
        assert!(self.order.len() <= MISSES_MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_miss_is_remembered_for_its_ttl_and_the_oldest_goes_first() {
        // Goal: TTL and bound at N and N+1. Method: numbers as names, times made up.
        let start = Instant::now();
        let mut misses = Misses::default();
        misses.insert(7u64, start);
        assert!(misses.holds(&7, start + MISS_TTL - Duration::from_millis(1)));
        assert!(!misses.holds(&7, start + MISS_TTL));
        for name in 0..MISSES_MAX as u64 {
            misses.insert(name, start + MISS_TTL);
        }
        assert!(misses.holds(&0, start + MISS_TTL));
        misses.insert(u64::MAX, start + MISS_TTL);
        assert!(!misses.holds(&0, start + MISS_TTL), "the oldest was forgotten");
        assert!(misses.holds(&1, start + MISS_TTL));
        assert!(misses.holds(&u64::MAX, start + MISS_TTL));
    }
}
