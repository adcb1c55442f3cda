//! The `--rate-limit SCOPE=RATE[/BURST]` flag's value (`RateLimit`: a scope, a rate and a
//! burst) and the bounds of the per-core bucket table, parsed and checked at start-up. Owned
//! here, on the ground floor, so `Config` imports nothing of the crate; `ratelimit` reads them.
//! Never: keeps a bucket or reads a clock.

use std::time::Duration;

/// Rate limits one server takes (`--rate-limit`, repeatable). Each is looked at per request
/// (a scan for the tool and upstream scopes), so the number is kept small; past it the
/// server refuses to start.
pub(crate) const RATE_LIMITS_MAX: usize = 32;
/// Token buckets one core keeps (`--rate-buckets-per-core`): one per client per `client` or
/// `tool:NAME` limit, one per `upstream:NAME` limit. At about 40 bytes a bucket plus its map
/// entry and 8 of shadow, 65 536 are a few MiB per core. Past it the bucket closest to full of
/// the oldest is evicted and its debt kept in the shadow: a new client is never refused for
/// the table (at most one interval of its limit, counted as
/// `tidemark_limit_hits_total{limit="rate_buckets"}`), and an evicted one stays limited.
pub(crate) const RATE_BUCKETS_PER_CORE_MAX: usize = 65_536;
/// The least `--rate-buckets-per-core`: the buckets one request can need (its client's, its
/// tool's, its upstream's), so that a request never evicts a bucket it holds.
pub(crate) const RATE_BUCKETS_PER_CORE_MIN: usize = 3;
/// The leading bits of an IPv6 peer address that name one client (`--rate-ipv6-prefix`,
/// authorization off): a /64 is what one host, or one customer, commonly holds, so a host
/// cannot be a new client at each of its 2^64 addresses. IPv4 addresses count whole.
pub(crate) const RATE_IPV6_PREFIX_DEFAULT: u32 = 64;
/// The longest IPv6 prefix: 128 bits, a client per address.
pub(crate) const RATE_IPV6_PREFIX_MAX: u32 = 128;
/// The largest count of one rate (`1000000/s`): more is not a limit worth a bucket.
pub(crate) const RATE_COUNT_MAX: u32 = 1_000_000;
/// The largest burst: a burst is a count of requests let through at once.
pub(crate) const RATE_BURST_MAX: u32 = 1_000_000;

/// Whose requests one limit counts.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RateScope {
    /// `client`: every request of one client (its token's subject when authorization is on,
    /// else its peer IP address), a bucket per client.
    Client,
    /// `tool:NAME`: one client's `tools/call`s of tool `NAME` (its listed name, e.g.
    /// `up__search` behind a bridge), a bucket per client.
    Tool(String),
    /// `upstream:NAME`: every client's `tools/call`s into provider `NAME` together (an
    /// `--upstream NAME=…`, or `demo`/`conformance`), one bucket: the upstream's capacity.
    Upstream(String),
}

impl RateScope {
    /// The scope as written in the flag (`client`, `tool:NAME`, `upstream:NAME`).
    pub fn text(&self) -> String {
        match self {
            RateScope::Client => "client".to_owned(),
            RateScope::Tool(name) => format!("tool:{name}"),
            RateScope::Upstream(name) => format!("upstream:{name}"),
        }
    }
}

/// One `--rate-limit` flag: `count` requests per `period`, with bursts of up to `burst`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimit {
    /// Whose requests it counts.
    pub scope: RateScope,
    /// Requests per `period` (`10` of `10/s`).
    pub count: u32,
    /// One second, minute or hour (`s`, `m`, `h`).
    pub period: Duration,
    /// Requests let through at once from a full bucket (`/BURST`; default: one second's worth
    /// of the rate, at least 1).
    pub burst: u32,
}

/// Why a `--rate-limit` value is not usable; each carries the value as given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RateLimitError {
    /// Not `SCOPE=RATE[/BURST]` with a known scope.
    #[error("--rate-limit {0:?}: expected SCOPE=COUNT/UNIT[/BURST] with SCOPE client, tool:NAME or upstream:NAME and UNIT s, m or h (e.g. client=10/s/20)")]
    Syntax(String),
    /// A count or burst of zero or past `RATE_COUNT_MAX` / `RATE_BURST_MAX`.
    #[error("--rate-limit {0:?}: the count must be 1..={RATE_COUNT_MAX} and the burst 1..={RATE_BURST_MAX} (zero never means unlimited)")]
    OutOfRange(String),
    /// The same scope twice.
    #[error("--rate-limit {0:?}: this scope is limited twice")]
    Duplicate(String),
    /// More than `RATE_LIMITS_MAX` flags.
    #[error("--rate-limit: at most {RATE_LIMITS_MAX} limits, got {0}")]
    TooMany(usize),
    /// A `--rate-buckets-per-core` under `RATE_BUCKETS_PER_CORE_MIN`.
    #[error("--rate-buckets-per-core must be at least {RATE_BUCKETS_PER_CORE_MIN} (the buckets one request can need), got {0}")]
    TooFewBuckets(usize),
    /// A `--rate-ipv6-prefix` of 0 (every IPv6 peer one client) or past `RATE_IPV6_PREFIX_MAX`.
    #[error(
        "--rate-ipv6-prefix must be 1..={RATE_IPV6_PREFIX_MAX} (bits of an IPv6 address), got {0}"
    )]
    Ipv6Prefix(u32),
}

impl RateLimit {
    /// Parses one `--rate-limit` value: `client=10/s`, `tool:search=600/m/5`.
    pub fn parse(text: &str) -> Result<RateLimit, RateLimitError> {
        let syntax = || RateLimitError::Syntax(text.to_owned());
        let (scope, rate) = text.split_once('=').ok_or_else(syntax)?;
        let scope = match scope.split_once(':') {
            None if scope == "client" => RateScope::Client,
            Some(("tool", name)) if !name.is_empty() => RateScope::Tool(name.to_owned()),
            Some(("upstream", name)) if !name.is_empty() => RateScope::Upstream(name.to_owned()),
            _ => return Err(syntax()),
        };
        let mut parts = rate.split('/');
        let count = parts.next().ok_or_else(syntax)?;
        let unit = parts.next().ok_or_else(syntax)?;
        let burst = parts.next();
        if parts.next().is_some() {
            return Err(syntax());
        }
        let count: u32 = decimal(count).ok_or_else(syntax)?;
        let period = match unit {
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            "h" => Duration::from_secs(3600),
            _ => return Err(syntax()),
        };
        let per_second = u64::from(count).div_ceil(period.as_secs());
        let burst = match burst {
            Some(b) => decimal(b).ok_or_else(syntax)?,
            None => u32::try_from(per_second.max(1)).unwrap_or(u32::MAX),
        };
        if count == 0 || count > RATE_COUNT_MAX || burst == 0 || burst > RATE_BURST_MAX {
            return Err(RateLimitError::OutOfRange(text.to_owned()));
        }
        Ok(RateLimit { scope, count, period, burst })
    }

    /// Checks the bucket table's flags: at least `RATE_BUCKETS_PER_CORE_MIN` buckets, an IPv6
    /// prefix of 1..=`RATE_IPV6_PREFIX_MAX` bits.
    pub(crate) fn check_table(buckets: usize, ipv6_prefix: u32) -> Result<(), RateLimitError> {
        if buckets < RATE_BUCKETS_PER_CORE_MIN {
            return Err(RateLimitError::TooFewBuckets(buckets));
        }
        if ipv6_prefix == 0 || ipv6_prefix > RATE_IPV6_PREFIX_MAX {
            return Err(RateLimitError::Ipv6Prefix(ipv6_prefix));
        }
        Ok(())
    }

    /// Checks a set of limits: at most `RATE_LIMITS_MAX`, no scope twice.
    pub(crate) fn check_set(limits: &[RateLimit]) -> Result<(), RateLimitError> {
        if limits.len() > RATE_LIMITS_MAX {
            return Err(RateLimitError::TooMany(limits.len()));
        }
        for (i, limit) in limits.iter().enumerate() {
            if limits[..i].iter().any(|l| l.scope == limit.scope) {
                return Err(RateLimitError::Duplicate(limit.scope.text()));
            }
        }
        Ok(())
    }

    /// The time one request's token takes to come back (`period / count`), in nanoseconds.
    pub(crate) fn interval_ns(&self) -> u64 {
        (self.period.as_nanos() / u128::from(self.count.max(1))) as u64
    }
}

/// A plain decimal (no sign, no spaces).
fn decimal(text: &str) -> Option<u32> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_rates_and_bursts_parse() {
        // Goal: every documented form parses to what the docs say; the default burst is one
        // second's worth of the rate, at least 1.
        let l = RateLimit::parse("client=10/s").expect("parses");
        assert_eq!((l.scope, l.count, l.period.as_secs(), l.burst), (RateScope::Client, 10, 1, 10));
        let l = RateLimit::parse("tool:up__search=600/m/5").expect("parses");
        assert_eq!(l.scope, RateScope::Tool("up__search".into()));
        assert_eq!((l.count, l.period.as_secs(), l.burst), (600, 60, 5));
        let l = RateLimit::parse("upstream:up=60/h").expect("parses");
        assert_eq!((l.scope, l.burst), (RateScope::Upstream("up".into()), 1));
        assert_eq!(RateLimit::parse("client=90/m").expect("parses").burst, 2);
        assert_eq!(RateLimit::parse("client=3/s").expect("parses").interval_ns(), 333_333_333);
    }

    #[test]
    fn malformed_zero_and_duplicate_limits_are_refused() {
        for bad in [
            "client",
            "client=",
            "client=10",
            "client=10/d",
            "client=-1/s",
            "client=1/s/2/3",
            "tool:=1/s",
            "tool=1/s",
            "session=1/s",
            "client= 1/s",
            "client=1/s/x",
        ] {
            assert!(
                matches!(RateLimit::parse(bad), Err(RateLimitError::Syntax(_))),
                "{bad} is a syntax error"
            );
        }
        for bad in ["client=0/s", "client=1/s/0", "client=1000001/s", "client=1/s/1000001"] {
            assert!(matches!(RateLimit::parse(bad), Err(RateLimitError::OutOfRange(_))), "{bad}");
        }
        assert!(RateLimit::parse("client=1000000/s/1000000").is_ok(), "the maxima are valid");
        let two =
            [RateLimit::parse("client=1/s").unwrap(), RateLimit::parse("client=2/s").unwrap()];
        assert_eq!(RateLimit::check_set(&two), Err(RateLimitError::Duplicate("client".into())));
        let many: Vec<RateLimit> = (0..=RATE_LIMITS_MAX)
            .map(|i| RateLimit::parse(&format!("tool:t{i}=1/s")).unwrap())
            .collect();
        assert_eq!(RateLimit::check_set(&many[..RATE_LIMITS_MAX]), Ok(()));
        assert_eq!(RateLimit::check_set(&many), Err(RateLimitError::TooMany(RATE_LIMITS_MAX + 1)));
    }

    #[test]
    fn the_table_needs_3_buckets_and_an_ipv6_prefix_of_1_to_128_bits() {
        // Goal: each bound passes at its end and is refused one past it (a prefix of zero
        // would make every IPv6 peer one client).
        let check = RateLimit::check_table;
        for good in [1, RATE_IPV6_PREFIX_DEFAULT, RATE_IPV6_PREFIX_MAX] {
            assert_eq!(check(RATE_BUCKETS_PER_CORE_MIN, good), Ok(()), "{good}");
        }
        for bad in [0, RATE_IPV6_PREFIX_MAX + 1, u32::MAX] {
            assert_eq!(check(RATE_BUCKETS_PER_CORE_MAX, bad), Err(RateLimitError::Ipv6Prefix(bad)));
        }
        let few = RATE_BUCKETS_PER_CORE_MIN - 1;
        assert_eq!(check(few, 64), Err(RateLimitError::TooFewBuckets(few)));
    }
}
