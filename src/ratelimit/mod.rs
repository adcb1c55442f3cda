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
//! Bounded: at most `--rate-buckets-per-core` buckets, in a slab with an LRU list. A new
//! bucket replaces one of the `EVICT_PROBES` least recently used only when that one is full
//! (idle long enough to have refilled): a full bucket and no bucket are the same state, so no
//! eviction ever gives anyone tokens back, however many identities a peer makes up. When none
//! of them is full, the new client waits (429) until the first will be.
//!
//! Called by `core` (`Core::rate_limited`) with the time and who asks; never reads a clock,
//! a socket or a request itself, and never allocates once the table is warm.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::IpAddr;

use crate::config::{Config, RateLimit, RateScope};
use crate::fasthash::FastMap;

/// The least recently used buckets looked at for a full one when the table is at its
/// maximum: a bounded probe (O(1)); beyond them the oldest are not known to be full.
const EVICT_PROBES: usize = 4;
/// The end of the LRU list.
const NONE: u32 = u32::MAX;
/// Buckets one request can need: its client's, its tool's, its upstream's (a scope is limited
/// at most once, so at most one of each kind applies).
const BUCKETS_PER_REQUEST_MAX: usize = 3;

/// Who a request counts against.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Client<'a> {
    /// The subject of its token (authorization on).
    Subject(&'a str),
    /// Its connection's peer address (authorization off; `None`: the OS could not say, and
    /// all such requests share one bucket).
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
    /// The peer (or many of them): it has no bucket, and the table is at
    /// `--rate-buckets-per-core` with none of the oldest full.
    TableFull,
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
}

impl Limits {
    /// The limits of `cfg` as one of `threads` cores enforces them.
    pub(crate) fn new(cfg: &Config, threads: u16) -> Limits {
        let threads = u64::from(threads.max(1));
        let rules: Vec<Rule> = cfg.rate_limits.iter().map(|l| rule(l, threads)).collect();
        let names_calls = rules.iter().any(|r| r.kind != Kind::Client);
        Limits {
            rules,
            names_calls,
            hasher: RandomState::new(),
            index: FastMap::default(),
            slots: Vec::new(),
            max: cfg.rate_buckets_per_core_max.max(1),
            oldest: NONE,
            newest: NONE,
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
            let key = match kind {
                Kind::Upstream => self.hasher.hash_one(i),
                Kind::Client | Kind::Tool => match client {
                    Client::Subject(s) => self.hasher.hash_one((i, 0u8, s)),
                    Client::Peer(Some(ip)) => self.hasher.hash_one((i, 1u8, ip)),
                    Client::Peer(None) => self.hasher.hash_one((i, 2u8)),
                },
            };
            let denied = |cause, wait_ns: u64| Denied { rule: i, kind, cause, wait_ns };
            let verdict = match self.slot_for(key, now_ns) {
                Err(wait) => Err(denied(Cause::TableFull, wait)),
                Ok(slot) => {
                    let full_at = self.slots[slot as usize].full_at_ns.max(now_ns);
                    if full_at - now_ns > tolerance {
                        Err(denied(Cause::Over, full_at - now_ns - tolerance))
                    } else {
                        Ok((slot, full_at + interval))
                    }
                }
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

    /// The bucket of `key`, made (full) when absent; `Err` with the nanoseconds until one of
    /// the oldest is full when the table is at its maximum and none is.
    fn slot_for(&mut self, key: u64, now_ns: u64) -> Result<u32, u64> {
        if let Some(&slot) = self.index.get(&key) {
            self.touch(slot);
            return Ok(slot);
        }
        if self.slots.len() < self.max {
            let slot = self.slots.len() as u32;
            self.slots.push(Slot { key, full_at_ns: now_ns, older: NONE, newer: NONE });
            self.link_newest(slot);
            self.index.insert(key, slot);
            return Ok(slot);
        }
        let (mut probe, mut wait) = (self.oldest, u64::MAX);
        for _ in 0..EVICT_PROBES {
            if probe == NONE {
                break;
            }
            let s = &self.slots[probe as usize];
            if s.full_at_ns <= now_ns {
                // Full: forgetting it gives its client nothing (a new bucket is full too).
                let old_key = s.key;
                self.index.remove(&old_key);
                let s = &mut self.slots[probe as usize];
                s.key = key;
                s.full_at_ns = now_ns;
                self.touch(probe);
                self.index.insert(key, probe);
                return Ok(probe);
            }
            wait = wait.min(s.full_at_ns - now_ns);
            probe = s.newer;
        }
        Err(wait)
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

#[cfg(test)]
mod tests;
