//! One core's rate-limit buckets (`--rate-limit`): for each limit that applies to a request, a
//! token bucket kept as GCRA's one number (the bucket's "theoretical arrival time": the
//! instant at which it is full again), so a check is a map lookup, a compare and an add.
//!
//! Per core, as everything on the hot path: a client's connections may land on any core
//! (SO_REUSEPORT), so each core enforces `1/threads` of the rate, and the burst rounded up
//! (`ceil(burst / threads)`). Node-wide a client gets at most the rate (plus `threads - 1` of
//! burst); a client whose requests all land on one core gets `1/threads` of it. Exact shares
//! would need a shared counter (atomics across cores) or moving each client's requests to
//! one core, which sessions and keys already pin elsewhere (docs/rate-limits.md).
//!
//! Who a client is: its subject, else its peer address, an IPv6 peer by its
//! `--rate-ipv6-prefix` (one host commonly holds a whole /64, so its addresses are one client)
//! and an IPv4-mapped IPv6 peer (a dual-stack listener) as the IPv4 address it is.
//!
//! Bounded: at most `--rate-buckets-per-core` buckets, in a slab with an LRU list. When the
//! table is full, a new client always gets a bucket: the one of the `EVICT_PROBES` least
//! recently used that is closest to full is evicted. A full bucket carries nothing (a full
//! bucket and no bucket are the same state); one that is not full leaves its debt (its
//! full-again instant) in the shadow, a fixed array indexed by the key's hash that only ever
//! keeps the later of two instants. A new bucket starts from its key's shadow entry, capped
//! at "empty" for its own limit: so a client cannot reset its own bucket by flooding the table
//! with made-up identities (its debt is still in the shadow), and a new client that shares a
//! shadow entry with someone else's debt waits at most one interval of its own limit, never
//! longer. A refusal of a bucket made from the shadow is `Cause::Shadowed`.
//!
//! Called by `core` (`Core::rate_limited`) with the time and who asks; never reads a clock,
//! a socket or a request itself, and never allocates once the table is warm (the shadow is
//! allocated once, when the table first fills).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::{IpAddr, Ipv6Addr};

use crate::config::{Config, RateLimit, RateScope, RATE_BUCKETS_PER_CORE_MIN};
use crate::fasthash::FastMap;

/// The least recently used buckets looked at for the one closest to full when the table is at
/// its maximum: a bounded probe (O(1)); whichever is chosen, its debt is kept in the shadow.
const EVICT_PROBES: usize = 4;
/// The end of the LRU list.
const NONE: u32 = u32::MAX;
/// Buckets one request can need: its client's, its tool's, its upstream's (a scope is limited
/// at most once, so at most one of each kind applies).
const BUCKETS_PER_REQUEST_MAX: usize = 3;
// The table holds one request's buckets, so a request never has to evict one it holds.
const _: () = assert!(RATE_BUCKETS_PER_CORE_MIN >= BUCKETS_PER_REQUEST_MAX);

/// Who a request counts against.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Client<'a> {
    /// The subject of its token (authorization on).
    Subject(&'a str),
    /// Its connection's peer address (authorization off; `None`: the OS could not say, and
    /// all such requests share one bucket), counted by `peer_key`.
    Peer(Option<IpAddr>),
}

/// What kind of scope a limit is (the label of `tidemark_rate_limited_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `client`.
    Client,
    /// `tool:NAME`.
    Tool,
    /// `upstream:NAME`.
    Upstream,
}

/// Why a request was not let through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cause {
    /// The peer: its bucket of this limit is empty.
    Over,
    /// The peer had no bucket on this core (the table is at `--rate-buckets-per-core` and
    /// evicted it, or never held one), and the debt its key found in the shadow is over the
    /// limit: its own (an evicted client stays limited), or another client's sharing the
    /// shadow entry (the table's cost: a wait of at most one interval of this limit).
    Shadowed,
}

/// A refused request: which limit, why, and how long until it would pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Denied {
    /// The limit's index in `--rate-limit` order (`Limits::scope_text`).
    pub(crate) rule: usize,
    pub(crate) kind: Kind,
    pub(crate) cause: Cause,
    /// Nanoseconds until the request would pass (more than zero).
    pub(crate) wait_ns: u64,
}

impl Denied {
    /// `Retry-After`: whole seconds, rounded up (RFC 9110 §10.2.3), at least 1.
    pub(crate) fn retry_after_secs(&self) -> u64 {
        self.wait_ns.div_ceil(1_000_000_000).max(1)
    }

    /// `data.retryAfterMs`: milliseconds, rounded up, at least 1.
    pub(crate) fn retry_after_ms(&self) -> u64 {
        self.wait_ns.div_ceil(1_000_000).max(1)
    }
}

/// One limit as this core enforces it.
struct Rule {
    kind: Kind,
    /// The tool or provider name (empty for `client`).
    name: Box<str>,
    /// The scope as written (`tool:NAME`), for the 429's `data.scope`.
    text: Box<str>,
    /// Nanoseconds per request on this core: the limit's interval times the core count.
    interval_ns: u64,
    /// How far ahead of now the bucket's full time may be and still let a request through:
    /// `(burst on this core - 1) * interval_ns`.
    tolerance_ns: u64,
}

/// One bucket in the slab.
struct Slot {
    key: u64,
    /// When the bucket is full again (GCRA's theoretical arrival time), in nanoseconds.
    full_at_ns: u64,
    /// Neighbours in the LRU list (`NONE` at its ends).
    older: u32,
    newer: u32,
}

/// One core's limits and buckets.
pub(crate) struct Limits {
    rules: Vec<Rule>,
    /// True when some limit names a tool or an upstream (a `tools/call` then looks them up).
    pub(crate) names_calls: bool,
    /// Keys the map by a per-process random SipHash of (limit, client): a peer cannot make
    /// its identities collide with another's bucket.
    hasher: RandomState,
    index: FastMap<u64, u32>,
    slots: Vec<Slot>,
    max: usize,
    oldest: u32,
    newest: u32,
    /// The debts of evicted buckets (full-again instants), indexed by key modulo its length:
    /// empty until the table first fills, then `max` entries. An entry only ever takes the
    /// later of two instants, so no eviction lowers anyone's debt.
    shadow: Vec<u64>,
    /// `--rate-ipv6-prefix`: the leading bits of an IPv6 peer address that name one client.
    ipv6_prefix: u32,
}

impl Limits {
    /// The limits of `cfg` as one of `threads` cores enforces them.
    pub(crate) fn new(cfg: &Config, threads: u16) -> Limits {
        let threads = u64::from(threads.max(1));
        let rules: Vec<Rule> = cfg.rate.limits.iter().map(|l| rule(l, threads)).collect();
        let names_calls = rules.iter().any(|r| r.kind != Kind::Client);
        Limits {
            rules,
            names_calls,
            hasher: RandomState::new(),
            index: FastMap::default(),
            slots: Vec::new(),
            // The flag's check refuses fewer; a `Config` built in code gets the least too.
            max: cfg.rate.buckets_per_core_max.max(RATE_BUCKETS_PER_CORE_MIN),
            oldest: NONE,
            newest: NONE,
            shadow: Vec::new(),
            ipv6_prefix: cfg.rate.ipv6_prefix,
        }
    }

    /// True when no limit is configured: nothing is ever refused, nothing is looked up.
    pub(crate) fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Buckets held now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The scope of limit `rule`, as written in its flag.
    pub(crate) fn scope_text(&self, rule: usize) -> &str {
        self.rules.get(rule).map_or("", |r| &r.text)
    }

    /// Takes one token from every bucket of `client` that applies to this request (`call`:
    /// the tool's name and its provider's, for a `tools/call`), or none when any is empty
    /// (the longest wait is reported): a refused request costs no other limit a token.
    pub(crate) fn admit(
        &mut self,
        now_ns: u64,
        client: Client<'_>,
        call: Option<(&str, &str)>,
    ) -> Result<(), Denied> {
        let mut taken = [(0u32, 0u64); BUCKETS_PER_REQUEST_MAX];
        let mut count = 0usize;
        let mut worst: Option<Denied> = None;
        for i in 0..self.rules.len() {
            let rule = &self.rules[i];
            let applies = match (rule.kind, call) {
                (Kind::Client, _) => true,
                (Kind::Tool, Some((tool, _))) => *rule.name == *tool,
                (Kind::Upstream, Some((_, provider))) => *rule.name == *provider,
                (_, None) => false,
            };
            if !applies {
                continue;
            }
            let (kind, interval, tolerance) = (rule.kind, rule.interval_ns, rule.tolerance_ns);
            let key = self.key(i, kind, client);
            // A bucket is at most empty: `tolerance + interval` ahead of now.
            let ceiling = now_ns.saturating_add(tolerance).saturating_add(interval);
            let (slot, made) = self.slot_for(key, now_ns, ceiling, &taken[..count]);
            let full_at = self.slots[slot as usize].full_at_ns.max(now_ns);
            let verdict = if full_at - now_ns > tolerance {
                // A bucket made now is refused only for the debt the shadow gave it.
                let cause = if made { Cause::Shadowed } else { Cause::Over };
                Err(Denied { rule: i, kind, cause, wait_ns: full_at - now_ns - tolerance })
            } else {
                Ok((slot, full_at + interval))
            };
            match verdict {
                Ok(take) if count < BUCKETS_PER_REQUEST_MAX => {
                    taken[count] = take;
                    count += 1;
                }
                Ok(_) => debug_assert!(false, "invariant: at most one limit of each kind applies"),
                Err(d) => {
                    if worst.is_none_or(|w| d.wait_ns > w.wait_ns) {
                        worst = Some(d);
                    }
                }
            }
        }
        if let Some(denied) = worst {
            return Err(denied);
        }
        for &(slot, full_at) in &taken[..count] {
            self.slots[slot as usize].full_at_ns = full_at;
        }
        Ok(())
    }

    /// The key of `client`'s bucket of limit `rule` (one key for an `upstream:` limit).
    fn key(&self, rule: usize, kind: Kind, client: Client<'_>) -> u64 {
        match (kind, client) {
            (Kind::Upstream, _) => self.hasher.hash_one(rule),
            (_, Client::Subject(s)) => self.hasher.hash_one((rule, 0u8, s)),
            (_, Client::Peer(Some(ip))) => {
                self.hasher.hash_one((rule, 1u8, peer_key(ip, self.ipv6_prefix)))
            }
            (_, Client::Peer(None)) => self.hasher.hash_one((rule, 2u8)),
        }
    }

    /// The bucket of `key`, and whether it was made now: made from the debt its shadow entry
    /// holds (capped at `ceiling`, an empty bucket), in a free place or in place of the least
    /// full of the oldest buckets that are not `busy` (this request's), whose debt goes to
    /// the shadow.
    fn slot_for(
        &mut self,
        key: u64,
        now_ns: u64,
        ceiling: u64,
        busy: &[(u32, u64)],
    ) -> (u32, bool) {
        if let Some(&slot) = self.index.get(&key) {
            self.touch(slot);
            return (slot, false);
        }
        let shadowed = match self.shadow.len() {
            0 => now_ns,
            len => self.shadow[(key % len as u64) as usize].clamp(now_ns, ceiling),
        };
        if self.slots.len() < self.max {
            let slot = self.slots.len() as u32;
            self.slots.push(Slot { key, full_at_ns: shadowed, older: NONE, newer: NONE });
            self.link_newest(slot);
            self.index.insert(key, slot);
            return (slot, true);
        }
        let victim = self.victim(busy);
        let (old_key, old_full_at) = {
            let s = &self.slots[victim as usize];
            (s.key, s.full_at_ns)
        };
        if old_full_at > now_ns {
            if self.shadow.is_empty() {
                self.shadow = vec![0; self.max];
            }
            let len = self.shadow.len() as u64;
            let entry = &mut self.shadow[(old_key % len) as usize];
            *entry = (*entry).max(old_full_at);
        }
        self.index.remove(&old_key);
        let s = &mut self.slots[victim as usize];
        s.key = key;
        s.full_at_ns = shadowed;
        self.touch(victim);
        self.index.insert(key, victim);
        (victim, true)
    }

    /// Of the `EVICT_PROBES` least recently used buckets not in `busy`, the closest to full
    /// (the earliest full-again instant: the least debt to carry). The table holds at least
    /// `BUCKETS_PER_REQUEST_MAX` buckets and `busy` fewer, so one is always found.
    fn victim(&self, busy: &[(u32, u64)]) -> u32 {
        let (mut probe, mut looked) = (self.oldest, 0);
        let mut best: Option<u32> = None;
        while probe != NONE && looked < EVICT_PROBES {
            let s = &self.slots[probe as usize];
            if !busy.iter().any(|&(b, _)| b == probe) {
                looked += 1;
                if best.is_none_or(|b| s.full_at_ns < self.slots[b as usize].full_at_ns) {
                    best = Some(probe);
                }
            }
            probe = s.newer;
        }
        debug_assert!(best.is_some(), "invariant: the table holds more than one request's buckets");
        best.unwrap_or(self.oldest)
    }

    /// Moves `slot` to the newest end of the LRU list.
    fn touch(&mut self, slot: u32) {
        if self.newest == slot {
            return;
        }
        let (older, newer) = {
            let s = &self.slots[slot as usize];
            (s.older, s.newer)
        };
        if older == NONE {
            self.oldest = newer;
        } else {
            self.slots[older as usize].newer = newer;
        }
        if newer != NONE {
            self.slots[newer as usize].older = older;
        }
        self.link_newest(slot);
    }

    /// Puts an unlinked `slot` at the newest end.
    fn link_newest(&mut self, slot: u32) {
        let previous = self.newest;
        {
            let s = &mut self.slots[slot as usize];
            s.older = previous;
            s.newer = NONE;
        }
        if previous == NONE {
            self.oldest = slot;
        } else {
            self.slots[previous as usize].newer = slot;
        }
        self.newest = slot;
    }
}

/// A limit as one of `threads` cores enforces it: the interval times the cores, the burst
/// divided by them and rounded up.
fn rule(limit: &RateLimit, threads: u64) -> Rule {
    let (kind, name) = match &limit.scope {
        RateScope::Client => (Kind::Client, ""),
        RateScope::Tool(name) => (Kind::Tool, name.as_str()),
        RateScope::Upstream(name) => (Kind::Upstream, name.as_str()),
    };
    let interval_ns = limit.interval_ns().saturating_mul(threads).max(1);
    let burst = u64::from(limit.burst).div_ceil(threads).max(1);
    Rule {
        kind,
        name: Box::from(name),
        text: Box::from(limit.scope.text()),
        interval_ns,
        tolerance_ns: (burst - 1).saturating_mul(interval_ns),
    }
}

/// The address a peer is counted by: an IPv4 address whole (an IPv4-mapped IPv6 address,
/// as a dual-stack listener sees IPv4 peers, is the IPv4 address it maps), an IPv6 address
/// by its first `prefix` bits (`--rate-ipv6-prefix`, 1..=128), the rest zeroed: one host
/// commonly holds a whole /64 and could otherwise be a new client at every address.
pub(crate) fn peer_key(ip: IpAddr, prefix: u32) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => {
            // `checked_shl(128)` (prefix 0, refused by the flag's check) keeps nothing.
            let mask = u128::MAX.checked_shl(128 - prefix.min(128)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
        }
    }
}

#[cfg(test)]
mod tests;
