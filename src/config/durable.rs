//! The durable section (`--durable*`, CONTRACT §10): the mirror's bounds as limits, its
//! settings, validation and flags; the store's URL (one server, a Sentinel set or a Cluster) is
//! `durable_url`'s. Owned here, on the
//! ground floor, so `Config` imports nothing of the crate; `durable` reads them. Never: opens
//! a connection.

use std::time::Duration;

use super::durable_url::DurableStore;
use super::error::{at_most, nonzero, ConfigError};

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
/// How long a graceful stop waits for each core's writer (`--durable-writer core`) to write
/// the records it still has queued (`--durable-stop-write-ms`; 0: not at all). Each of the
/// writer's round trips is bounded by the store's 1 s answer bound and a failed one drops the
/// rest at once, and a healthy store takes a full queue in milliseconds: three round trips'
/// bound covers a connection, a slow batch and the next. Past it the process exits with the
/// rest unwritten (the store still holds a gap-free prefix: an adopter ends the tail with
/// `-31006`).
pub(crate) const DURABLE_STOP_WRITE_MS: u64 = 3_000;
/// The longest `--durable-stop-write-ms`: a stop that waits longer outlives what an
/// orchestrator grants a stopping process (Kubernetes' default grace is 30 s).
pub(crate) const DURABLE_STOP_WRITE_MS_MAX: u64 = 30_000;
/// The longest linger: past it the lag would outgrow what a crash may lose comfortably.
pub(crate) const DURABLE_LINGER_US_MAX: u64 = 100_000;
/// How long a non-idempotent `tools/call` of a durable session waits for the store to
/// acknowledge its stream record before the tool starts (`--durable-write-ahead-ms`): the
/// record is what stops a peer that adopts the session from running the call again. Past it
/// the call starts anyway, the session stops being durable, and it is counted.
pub(crate) const DURABLE_WRITE_AHEAD_MS: u64 = 250;
/// Replicas that must hold a mirror batch before it counts as written (`--durable-replicas`;
/// 0: the primary's acknowledgement, as without the flag). Past this a value is refused: no
/// deployment runs more replicas of one primary.
pub(crate) const DURABLE_REPLICAS_MAX: u32 = 16;
/// The longest a batch's `WAIT` for its replicas may take: `--durable-write-ahead-ms` bounds it,
/// and at most this, so its answer comes inside the store's answer bound
/// (`durable::mirror::STORE_TIMEOUT_MS`, 1000 ms) and a slow replica reads as not enough
/// replicas, not as a store that is down.
pub(crate) const DURABLE_REPLICAS_WAIT_MS_MAX: u64 = 500;
/// Redirections (`MOVED`) one Redis Cluster read follows before the store counts as down
/// (`--durable-cluster-redirects-max`): a slot moving more than this while one command is
/// asked is a cluster in a reshard storm; the mirror reconnects (a fresh slot map) instead.
/// 0: none is followed (every `MOVED` is a store error and a fresh map).
pub(crate) const DURABLE_CLUSTER_REDIRECTS_MAX: usize = 3;
/// The most `--durable-cluster-redirects-max` takes: each redirection is a round trip and a
/// slot map read inside one store answer bound (`durable::mirror::STORE_TIMEOUT_MS`).
pub(crate) const DURABLE_CLUSTER_REDIRECTS_MOST: usize = 16;
/// How long an adopter's claim on a Redis Cluster lives in `tm:claims:{NODE}` when that node
/// never renews its lease again (`--durable-claims-ttl-ms`): far past any adopter's
/// compare-and-set in flight, so a node that comes back reads every claim that may still land.
pub(crate) const DURABLE_CLAIMS_TTL_MS: u64 = 60_000;
/// The shortest claim: under two store answer bounds (`durable::mirror::STORE_TIMEOUT_MS`,
/// 1000 ms) a claim could expire before the compare-and-set that follows it lands, and a
/// resumed owner would not read it.
pub(crate) const DURABLE_CLAIMS_TTL_MS_MIN: u64 = 2_000;
/// The longest claim: an hour; past it a claim outlives every lease and only fills the store.
pub(crate) const DURABLE_CLAIMS_TTL_MS_MAX: u64 = 3_600_000;
/// Store lookups (adoptions, keyed records and tasks of other nodes) waiting at once on this
/// node (`--durable-adoptions-max`); past it a request is answered 503 + `Retry-After`.
pub(crate) const DURABLE_ADOPTIONS_MAX: usize = 256;

/// The durable mirror's settings (`--durable*`); `Config::durable` is `None` when it is off.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DurableConfig {
    /// The store (`--durable`): one server, the primary the sentinels name, or a Cluster.
    pub url: DurableStore,
    /// Replicas that must acknowledge a batch (`--durable-replicas`; 0: the primary alone).
    pub replicas: u32,
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
    /// A graceful stop's wait for each core's writer (`--durable-stop-write-ms`).
    pub stop_write: Duration,
    /// Store lookups waiting at once (`--durable-adoptions-max`).
    pub adoptions_max: usize,
    /// `MOVED` redirections one Redis Cluster read follows (`--durable-cluster-redirects-max`).
    pub cluster_redirects_max: usize,
    /// How long a Redis Cluster adopter's claim lives (`--durable-claims-ttl-ms`).
    pub claims_ttl: Duration,
    /// Who writes the records to the store (`--durable-writer`).
    pub writer: DurableWriter,
}

/// Who writes a core's records to the store (`--durable-writer`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum DurableWriter {
    /// The mirror thread drains every core's queue (the lease, fencing and reads stay on it
    /// in either mode).
    Thread,
    /// Each worker writes its own core's records over its own io_uring connection, as a task
    /// of its runtime: no mirror thread wakes per batch (the default: the cheaper node,
    /// docs/reliability.md). One server and Sentinel; a Redis Cluster store keeps the thread.
    #[default]
    Core,
}

impl DurableConfig {
    /// The section of the parsed flags: `None` without `--durable`.
    pub(crate) fn from_flags(flags: DurableFlags) -> Result<Option<DurableConfig>, ConfigError> {
        let Some(url) = flags.durable.as_deref().map(DurableStore::parse).transpose()? else {
            return Ok(None);
        };
        Ok(Some(DurableConfig {
            url,
            replicas: flags.durable_replicas,
            lease: Duration::from_millis(flags.durable_lease_ms),
            queue_records_max: flags.durable_queue_records,
            queue_bytes_max: flags.durable_queue_bytes,
            batch_records_max: flags.durable_batch_records,
            batch_bytes_max: flags.durable_batch_bytes,
            linger: Duration::from_micros(flags.durable_linger_us),
            write_ahead: Duration::from_millis(flags.durable_write_ahead_ms),
            stop_write: Duration::from_millis(flags.durable_stop_write_ms),
            adoptions_max: flags.durable_adoptions_max,
            cluster_redirects_max: flags.durable_cluster_redirects_max,
            claims_ttl: Duration::from_millis(flags.durable_claims_ttl_ms),
            writer: flags.durable_writer,
        }))
    }

    /// Checks the section's values.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let lease_ms = self.lease.as_millis() as u64;
        if lease_ms < DURABLE_LEASE_MS_MIN {
            return Err(ConfigError::DurableLeaseTooShort(lease_ms, DURABLE_LEASE_MS_MIN));
        }
        let linger_us = self.linger.as_micros() as u64;
        if linger_us > DURABLE_LINGER_US_MAX {
            return Err(ConfigError::DurableLingerTooLong(linger_us, DURABLE_LINGER_US_MAX));
        }
        let stop_write_ms = self.stop_write.as_millis() as u64;
        if stop_write_ms > DURABLE_STOP_WRITE_MS_MAX {
            return Err(ConfigError::AboveMost(
                "durable-stop-write-ms",
                stop_write_ms as usize,
                DURABLE_STOP_WRITE_MS_MAX as usize,
            ));
        }
        if self.replicas > DURABLE_REPLICAS_MAX {
            return Err(ConfigError::DurableReplicasTooMany(self.replicas, DURABLE_REPLICAS_MAX));
        }
        let claims_ttl_ms = self.claims_ttl.as_millis() as u64;
        if !(DURABLE_CLAIMS_TTL_MS_MIN..=DURABLE_CLAIMS_TTL_MS_MAX).contains(&claims_ttl_ms) {
            return Err(ConfigError::DurableClaimsTtlOutOfRange(
                claims_ttl_ms,
                DURABLE_CLAIMS_TTL_MS_MIN,
                DURABLE_CLAIMS_TTL_MS_MAX,
            ));
        }
        at_most(&[(
            "durable-cluster-redirects-max",
            self.cluster_redirects_max,
            DURABLE_CLUSTER_REDIRECTS_MOST,
        )])?;
        nonzero(&[
            ("durable-queue-records", self.queue_records_max as u128),
            ("durable-queue-bytes", self.queue_bytes_max as u128),
            ("durable-batch-records", self.batch_records_max as u128),
            ("durable-batch-bytes", self.batch_bytes_max as u128),
            ("durable-adoptions-max", self.adoptions_max as u128),
        ])
    }
}

/// The command line's flags of this section: `--durable*`. `cli` flattens them into its `Flags` in
/// `--help`'s order (a section's flags may come in several runs).
#[derive(clap::Args)]
pub(crate) struct DurableFlags {
    /// Mirror sessions, streams, events, keyed records and tasks to this Redis 7 / Valkey
    /// server, redis://HOST:PORT[/DB], or to the primary the sentinels name,
    /// redis+sentinel://S1:PORT,S2:PORT,.../MASTER_NAME[/DB] (found again after a failover),
    /// or to a Redis Cluster, redis+cluster://N1:PORT,N2:PORT,... (each session's keys in one
    /// slot; the slot map asked of the nodes, again after a failover), so a peer node can adopt them if this one dies (docs/reliability.md). Off by default.
    #[arg(long, value_name = "URL")]
    pub(crate) durable: Option<String>,
    /// Replicas that must hold a mirror batch (Redis WAIT, bounded by
    /// --durable-write-ahead-ms, at most 500 ms) before it counts as written, so a primary's
    /// death loses nothing counted written; fewer acknowledging: the store counts as down.
    /// 0: the primary's acknowledgement. At most 16.
    #[arg(long, default_value_t = 0)]
    pub(crate) durable_replicas: u32,
    /// Lifetime of this node's liveness lease in the durable store; a peer adopts this
    /// node's sessions only after it has expired.
    #[arg(long, default_value_t = DURABLE_LEASE_MS)]
    pub(crate) durable_lease_ms: u64,
    /// Mirror records one core may queue for the store; past it the record's session is
    /// marked not durable (a worker never waits).
    #[arg(long, default_value_t = DURABLE_QUEUE_RECORDS)]
    pub(crate) durable_queue_records: usize,
    /// Bytes of mirror records one core may queue for the store.
    #[arg(long, default_value_t = DURABLE_QUEUE_BYTES)]
    pub(crate) durable_queue_bytes: usize,
    /// Records the mirror's writer (the thread, or each core with --durable-writer core)
    /// writes to the store in one pipelined batch.
    #[arg(long, default_value_t = DURABLE_BATCH_RECORDS)]
    pub(crate) durable_batch_records: usize,
    /// Bytes of records the mirror's writer writes to the store in one pipelined batch (a
    /// batch takes at least one record).
    #[arg(long, default_value_t = DURABLE_BATCH_BYTES)]
    pub(crate) durable_batch_bytes: usize,
    /// Microseconds the mirror's writer lets records gather after a batch that did not fill
    /// before it writes the next (0: at once): fewer, fuller batches cost the node less per
    /// record; a record a call waits for cuts it short. At most 100000.
    #[arg(long, default_value_t = DURABLE_LINGER_US)]
    pub(crate) durable_linger_us: u64,
    /// How long a non-idempotent tools/call of a durable session waits for the store to
    /// acknowledge its record before the tool starts (so an adopting peer never runs it
    /// again); past it the call starts, the session stops being durable, and it is counted.
    #[arg(long, default_value_t = DURABLE_WRITE_AHEAD_MS)]
    pub(crate) durable_write_ahead_ms: u64,
    /// How long a graceful stop waits for each core's writer (--durable-writer core) to write
    /// the records it still has queued, so a peer adopting after a rolling restart replays the
    /// whole tail (0: no wait). At most 30000.
    #[arg(long, default_value_t = DURABLE_STOP_WRITE_MS)]
    pub(crate) durable_stop_write_ms: u64,
    /// Store lookups (adoptions of a dead node's sessions, its keyed records and tasks)
    /// waiting at once on this node; past it the request gets 503 + Retry-After.
    #[arg(long, default_value_t = DURABLE_ADOPTIONS_MAX)]
    pub(crate) durable_adoptions_max: usize,
    /// Redis Cluster only: MOVED redirections one store read follows (the slot map read again
    /// each time) before the store counts as down and the mirror connects again with a fresh
    /// map. 0: none. At most 16.
    #[arg(long, default_value_t = DURABLE_CLUSTER_REDIRECTS_MAX)]
    pub(crate) durable_cluster_redirects_max: usize,
    /// Redis Cluster only: how long an adopter's claim on a dead node's session stays in the
    /// store for that node to read if it comes back (it then writes that session no more).
    /// 2000 to 3600000.
    #[arg(long, default_value_t = DURABLE_CLAIMS_TTL_MS)]
    pub(crate) durable_claims_ttl_ms: u64,
    /// Who writes each core's mirror records to the store: `core` (each worker writes its own
    /// over io_uring, and a graceful stop writes what is queued; one server or Sentinel: a
    /// Redis Cluster store keeps the thread) or `thread` (the mirror thread drains every
    /// core's queue).
    #[arg(long, value_enum, default_value_t = DurableWriter::Core)]
    pub(crate) durable_writer: DurableWriter,
}
