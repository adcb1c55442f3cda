//! The rate section: the `--rate-limit`s and the per-core bucket table's bounds
//! (`--rate-buckets-per-core`, `--rate-ipv6-prefix`); defaults, validation and flags. The
//! value of one `--rate-limit` and the limits are `rate_limit`'s.
//!
//! Owns: `RateConfig` and its flags. Never: keeps a bucket.

use super::error::{nonzero, ConfigError};
use super::rate_limit::{RateLimit, RATE_BUCKETS_PER_CORE_MAX, RATE_IPV6_PREFIX_DEFAULT};

/// Rate limits (`--rate-limit`) and the per-core bucket table's bounds.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RateConfig {
    /// Token-bucket rate limits (`--rate-limit`, at most `RATE_LIMITS_MAX`; none by default).
    pub limits: Vec<RateLimit>,
    /// `--rate-buckets-per-core` (`RATE_BUCKETS_PER_CORE_MAX`).
    pub buckets_per_core_max: usize,
    /// `--rate-ipv6-prefix` (`RATE_IPV6_PREFIX_DEFAULT`, 1..=`RATE_IPV6_PREFIX_MAX`): the
    /// leading bits of an IPv6 peer address that name one client.
    pub ipv6_prefix: u32,
}

impl Default for RateConfig {
    fn default() -> Self {
        RateConfig {
            limits: Vec::new(),
            buckets_per_core_max: RATE_BUCKETS_PER_CORE_MAX,
            ipv6_prefix: RATE_IPV6_PREFIX_DEFAULT,
        }
    }
}

impl RateConfig {
    /// The section of the parsed flags: each `--rate-limit` parsed.
    pub(crate) fn from_flags(flags: RateFlags) -> Result<RateConfig, ConfigError> {
        Ok(RateConfig {
            limits: flags
                .rate_limit
                .iter()
                .map(|r| RateLimit::parse(r))
                .collect::<Result<_, _>>()?,
            buckets_per_core_max: flags.rate_buckets_per_core,
            ipv6_prefix: flags.rate_ipv6_prefix,
        })
    }

    /// Checks the section's values.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        nonzero(&[("rate-buckets-per-core", self.buckets_per_core_max as u128)])?;
        RateLimit::check_set(&self.limits)?;
        RateLimit::check_table(self.buckets_per_core_max, self.ipv6_prefix)?;
        Ok(())
    }
}

/// The command line's flags of this section: `--rate-*`. `cli` flattens them into its `Flags` in
/// `--help`'s order (a section's flags may come in several runs).
#[derive(clap::Args)]
pub(crate) struct RateFlags {
    /// A token-bucket rate limit, SCOPE=COUNT/UNIT[/BURST] (repeatable): SCOPE client (per
    /// subject, else peer IP), tool:NAME (per client) or upstream:NAME (all clients); UNIT s,
    /// m or h; e.g. client=10/s/20. Over it: 429 + Retry-After (docs/rate-limits.md).
    #[arg(long)]
    pub(crate) rate_limit: Vec<String>,
    /// Rate-limit buckets one core keeps; past it the oldest bucket closest to full is
    /// evicted and its debt remembered, so a new client waits at most one interval.
    #[arg(long, default_value_t = RATE_BUCKETS_PER_CORE_MAX)]
    pub(crate) rate_buckets_per_core: usize,
    /// Leading bits of an IPv6 peer address that name one client for rate limits and the
    /// running keyed-call share (1..=128; authorization off): a host's /64 is one by default.
    #[arg(long, default_value_t = RATE_IPV6_PREFIX_DEFAULT)]
    pub(crate) rate_ipv6_prefix: u32,
}
