//! The `--durable redis://HOST:PORT[/DB]` flag's value (`DurableUrl`) and the bounds of the
//! durable mirror (CONTRACT §10), parsed and checked at start-up. Owned here, on the ground
//! floor, so `Config` imports nothing of the crate; `durable` reads them. Never: opens a
//! connection.

use std::fmt;
use std::time::Duration;

/// How long a node's liveness lease lives in the store (`--durable-lease-ms`). The mirror
/// thread renews it every third of this; a peer adopts a node's sessions once it has expired,
/// so this is the shortest time before a dead node's sessions can be served again.
pub(crate) const DURABLE_LEASE_MS: u64 = 3_000;
/// The shortest lease: under it a busy store's round trip would let a live node's lease lapse.
pub(crate) const DURABLE_LEASE_MS_MIN: u64 = 300;
/// Mirror records one core may have queued for the mirror thread (`--durable-queue-records`).
/// Past it a record is not queued and its session is marked not durable (never a wait).
pub(crate) const DURABLE_QUEUE_RECORDS: usize = 65_536;
/// Bytes of mirror records one core may have queued (`--durable-queue-bytes`): event payloads
/// dominate, so this, not the record count, is the usual bound.
pub(crate) const DURABLE_QUEUE_BYTES: usize = 64 << 20;
/// Records the mirror thread writes in one pipelined batch (`--durable-batch-records`). A
/// non-idempotent call waits for its record behind what is queued, one batch round trip at a
/// time, so larger batches shorten that wait: 2048 streamed a median 18 % more events/s than
/// 512 under write-ahead load (4 alternating rounds on the 2-vCPU VM, docs/reliability.md).
pub(crate) const DURABLE_BATCH_RECORDS: usize = 2048;
/// Bytes of records in one pipelined batch (`--durable-batch-bytes`; a batch takes at least
/// one record): with the record count, what keeps one batch's answer inside the store's
/// answer bound (`mirror::STORE_TIMEOUT_MS`) when the records carry large events.
pub(crate) const DURABLE_BATCH_BYTES: usize = 4 << 20;
/// How long the mirror thread lets records gather after a batch that did not fill before it
/// writes the next (`--durable-linger-us`; 0: at once). A batch's round trip costs the node
/// about the same whatever it holds (two system calls, the loopback or network stack, two
/// wake-ups), so under a steady load fewer, fuller batches cost less per record, and a
/// stream's open, finish and settle then often land in one batch as one write. A record that
/// a call waits for (write-ahead) cuts the linger short: only the mirror lag grows, by at most
/// this.
pub(crate) const DURABLE_LINGER_US: u64 = 1_000;
/// The longest linger: past it the lag would outgrow what a crash may lose comfortably.
pub(crate) const DURABLE_LINGER_US_MAX: u64 = 100_000;
/// How long a non-idempotent `tools/call` of a durable session waits for the store to
/// acknowledge its stream record before the tool starts (`--durable-write-ahead-ms`): the
/// record is what stops a peer that adopts the session from running the call again. Past it
/// the call starts anyway, the session stops being durable, and it is counted.
pub(crate) const DURABLE_WRITE_AHEAD_MS: u64 = 250;
/// Store lookups (adoptions, keyed records and tasks of other nodes) waiting at once on this
/// node (`--durable-adoptions-max`); past it a request is answered 503 + `Retry-After`.
pub(crate) const DURABLE_ADOPTIONS_MAX: usize = 256;

/// Where the durable mirror lives: a Redis 7 (or Valkey) server, `redis://HOST:PORT[/DB]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DurableUrl {
    /// The host name or address.
    pub host: String,
    /// The TCP port.
    pub port: u16,
    /// The logical database (`SELECT`), 0 unless given.
    pub db: u32,
}

/// Why a `--durable` value was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("--durable must be redis://HOST:PORT[/DB], got {0:?}")]
pub struct DurableUrlError(pub String);

impl DurableUrl {
    /// Parses `redis://HOST:PORT[/DB]`; user info, TLS (`rediss://`) and query strings are
    /// refused rather than half-supported.
    pub fn parse(text: &str) -> Result<DurableUrl, DurableUrlError> {
        let bad = || DurableUrlError(text.to_owned());
        let rest = text.strip_prefix("redis://").ok_or_else(bad)?;
        let (authority, db) = match rest.split_once('/') {
            Some((authority, "")) => (authority, 0),
            Some((authority, db)) => (authority, db.parse::<u32>().map_err(|_| bad())?),
            None => (rest, 0),
        };
        if authority.contains('@') || authority.contains('?') {
            return Err(bad());
        }
        let (host, port) = authority.rsplit_once(':').ok_or_else(bad)?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port = port.parse::<u16>().map_err(|_| bad())?;
        if host.is_empty() || port == 0 {
            return Err(bad());
        }
        Ok(DurableUrl { host: host.to_owned(), port, db })
    }
}

impl fmt::Display for DurableUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "redis://[{}]:{}/{}", self.host, self.port, self.db)
        } else {
            write!(f, "redis://{}:{}/{}", self.host, self.port, self.db)
        }
    }
}

/// The durable mirror's settings (`--durable*`); `Config::durable` is `None` when it is off.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DurableConfig {
    /// The store (`--durable`).
    pub url: DurableUrl,
    /// This node's liveness lease (`--durable-lease-ms`).
    pub lease: Duration,
    /// Records one core may have queued (`--durable-queue-records`).
    pub queue_records_max: usize,
    /// Bytes one core may have queued (`--durable-queue-bytes`).
    pub queue_bytes_max: usize,
    /// Records per pipelined write (`--durable-batch-records`).
    pub batch_records_max: usize,
    /// Bytes of records per pipelined write (`--durable-batch-bytes`).
    pub batch_bytes_max: usize,
    /// How long records gather after a batch that did not fill (`--durable-linger-us`).
    pub linger: Duration,
    /// A non-idempotent call's wait for its record (`--durable-write-ahead-ms`).
    pub write_ahead: Duration,
    /// Store lookups waiting at once (`--durable-adoptions-max`).
    pub adoptions_max: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durable_urls_parse_and_bad_ones_are_refused() {
        // Goal: the one accepted shape parses (with and without a database); every other
        // shape is refused with the value named, never half-understood.
        let url = DurableUrl::parse("redis://127.0.0.1:6379").expect("parses");
        assert_eq!(url, DurableUrl { host: "127.0.0.1".into(), port: 6379, db: 0 });
        let url = DurableUrl::parse("redis://cache.internal:6380/3").expect("parses");
        assert_eq!((url.host.as_str(), url.port, url.db), ("cache.internal", 6380, 3));
        assert_eq!(DurableUrl::parse("redis://[::1]:6379/").expect("v6").host, "::1");
        assert_eq!(url.to_string(), "redis://cache.internal:6380/3");
        for bad in [
            "",
            "redis://",
            "redis://host",
            "redis://host:0",
            "redis://host:99999",
            "redis://user:pw@host:6379",
            "rediss://host:6379",
            "http://host:6379",
            "redis://host:6379/x",
            "redis://:6379",
        ] {
            assert!(DurableUrl::parse(bad).is_err(), "{bad:?} accepted");
        }
    }
}
