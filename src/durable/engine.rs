//! Which store engine a `--durable` value names, connected (`connect`): the one place an engine
//! is chosen, so another engine (NATS JetStream, a SQL table) adds its URL scheme here and
//! nothing else changes. Owns: the choice. Never: keeps a connection itself (the mirror and
//! reader threads hold what it returns, and call it again at every reconnection, which is how
//! a failover is followed).

use std::time::Duration;

use super::cluster::{ClusterLimits, ClusterStore};
use super::sentinel::{is_primary, primary};
use super::store::{RedisStore, Replication, Store, StoreError};
use crate::config::{DurableStore, DurableUrl};

/// A connected store, the primaries it reached, and the one primary's address (not a Cluster).
pub(crate) type Connected = (Box<dyn Store>, String, Option<DurableUrl>);

/// Connects to the store `target` names, bounded by `timeout` (the one place an engine is
/// chosen: another engine adds its URL scheme here, nothing else changes): one server, the
/// primary the sentinels name now, refused unless it says it is a primary, or every primary of
/// a Redis Cluster (within `limits`). Also the primaries it connected to (what a failover
/// changes), and the one primary's address unless it is a Cluster (where a core's writer
/// connects, `--durable-writer core`).
pub(crate) fn connect(
    target: &DurableStore,
    replication: Replication,
    limits: ClusterLimits,
    timeout: Duration,
) -> Result<Connected, StoreError> {
    let (url, named) = match target {
        DurableStore::Redis(url) => (url.clone(), false),
        DurableStore::Sentinel(sentinels) => (primary(sentinels).map_err(StoreError)?, true),
        DurableStore::Cluster(seeds) => {
            let (store, primaries) = ClusterStore::connect(seeds, replication, limits, timeout)?;
            return Ok((Box::new(store), primaries, None));
        }
    };
    let mut store = RedisStore::connect(&url, timeout)?;
    store.set_replication(replication);
    if named && !is_primary(&mut store.connection)? {
        return Err(StoreError(format!("{url}, named by the sentinels, is not a primary (yet)")));
    }
    let primary = url.to_string();
    Ok((Box::new(store), primary, Some(url)))
}
