//! The store on a Redis Cluster (`--durable redis+cluster://N1:PORT,…`, `ClusterStore`): the
//! slot map asked of the seed nodes (`CLUSTER SLOTS`, the first that answers) at each
//! connection, one `RedisStore` per primary, and every record sent to the primary of its slot.
//! The key schema puts every key of a session in one slot (`keys::SessionKey`'s hash tag), and a
//! keyed record or a task is one key, so a batch splits into one pipeline per shard, each in
//! the order the mirror gave, each closed by its own `WAIT` under `--durable-replicas`; the
//! shards' pipelines are all sent before any reply is read.
//!
//! Redirections: a read (adoption, a keyed record, a task, the lease) that gets `MOVED` reads
//! the slot map again and retries on the named primary (at most `--durable-cluster-redirects-max`
//! times, `ClusterLimits`); `ASK`
//! sends `ASKING` and the command once to the named node. A batch that gets either fails whole
//! like any store error: the mirror drops the store, connects again (a fresh slot map) and
//! rewrites the batch's sessions whole, so no redirected half of a session's batch is ever
//! written out of order. A primary that dies ends its shard's connection (an error: the store
//! is down until a connection finds every slot's primary again, the promoted replica named by
//! `CLUSTER SLOTS`).
//!
//! Adoption across shards: the owner's lease (`tm:lease:{NODE}`) is in its own slot, not the
//! session's, so the compare-and-set cannot check it atomically as on one server. The adopter
//! first runs `keys::CLAIM_SCRIPT` on the lease's shard (the lease absent: the claim noted in
//! `tm:claims:{NODE}`, same slot), then `keys::ADOPT_SCRIPT` on the session's shard; the owner,
//! renewing its lease after losing it, reads and empties its claims atomically with the
//! renewal (`keys::RENEW_SCRIPT`) and never writes a claimed session again. One node writes a
//! session, as on one server.
//!
//! Owns: the slot map and the routing. Never: sends a command for a slot to a node the map
//! does not name for it (but for `ASK`), or keeps a map past one connection's store.

use std::sync::Arc;
use std::time::Duration;

use super::keys;
use super::record::Record;
use super::store::{
    Claim, KeyedImage, RedisStore, Renewal, Replication, Store, StoreError, TaskImage,
};
use crate::config::{ClusterUrl, DurableUrl};

/// The cluster's own bounds (`--durable-cluster-redirects-max`, `--durable-claims-ttl-ms`):
/// the `MOVED` redirections one read follows before the store counts as down, and how long an
/// adopter's claim lives in `tm:claims:{NODE}` (`keys::CLAIM_SCRIPT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClusterLimits {
    pub(crate) redirects_max: usize,
    pub(crate) claims_ttl_ms: u64,
}

impl ClusterLimits {
    /// The section's values.
    pub(crate) fn of(cfg: &crate::config::DurableConfig) -> ClusterLimits {
        ClusterLimits {
            redirects_max: cfg.cluster_redirects_max,
            claims_ttl_ms: cfg.claims_ttl.as_millis() as u64,
        }
    }
}

/// Where a Redis Cluster node sends a command for a slot it does not serve.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Redirect {
    /// `MOVED SLOT HOST:PORT`: the slot's primary is that node now (the map is stale).
    Moved { slot: u16, host: String, port: u16 },
    /// `ASK SLOT HOST:PORT`: the slot is migrating; this one command goes there after `ASKING`.
    Ask { slot: u16, host: String, port: u16 },
}

impl Redirect {
    /// The redirection an error's text is (`MOVED 3999 127.0.0.1:6381`), `None` for any other
    /// error. An empty host (a node that does not know its address) is `default_host`.
    pub(crate) fn parse(text: &str, default_host: &str) -> Option<Redirect> {
        let mut words = text.split_ascii_whitespace();
        let kind = words.next()?;
        let slot = words.next()?.parse::<u16>().ok().filter(|&s| usize::from(s) < keys::SLOTS)?;
        let (host, port) = words.next()?.rsplit_once(':')?;
        if words.next().is_some() {
            return None;
        }
        let port = port.parse::<u16>().ok().filter(|&p| p != 0)?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let host = if host.is_empty() { default_host } else { host }.to_owned();
        match kind {
            "MOVED" => Some(Redirect::Moved { slot, host, port }),
            "ASK" => Some(Redirect::Ask { slot, host, port }),
            _ => None,
        }
    }
}

/// One `CLUSTER SLOTS` range: its first and last slot and its primary.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct SlotRange {
    pub(crate) first: u16,
    pub(crate) last: u16,
    pub(crate) host: String,
    pub(crate) port: u16,
}

/// The ranges of a `CLUSTER SLOTS` reply (`[first, last, [host, port, id…], replicas…]` each);
/// an empty host is `default_host` (the node asked). Why not, for a reply of another shape.
pub(crate) fn slot_ranges(
    reply: &[redis::Value],
    default_host: &str,
) -> Result<Vec<SlotRange>, String> {
    use redis::Value;
    let number = |v: &Value| match v {
        Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    };
    let mut ranges = Vec::with_capacity(reply.len());
    for range in reply {
        let Value::Array(parts) = range else { return Err("a slot range is not an array".into()) };
        let (Some(first), Some(last), Some(Value::Array(primary))) =
            (parts.first().and_then(number), parts.get(1).and_then(number), parts.get(2))
        else {
            return Err("a slot range without its slots and primary".into());
        };
        let host = match primary.first() {
            Some(Value::BulkString(host)) => String::from_utf8_lossy(host).into_owned(),
            _ => return Err("a primary without a host".into()),
        };
        let port = primary.get(1).and_then(number).ok_or("a primary without a port")?;
        if first > last || usize::from(last) >= keys::SLOTS {
            return Err(format!("slots {first}-{last} out of range"));
        }
        let host = if host.is_empty() || host == "?" { default_host.to_owned() } else { host };
        ranges.push(SlotRange { first, last, host, port });
    }
    Ok(ranges)
}

/// A slot no range has named yet.
const UNMAPPED: u16 = u16::MAX;

/// `Store` on a Redis Cluster: a `RedisStore` per primary and the slot map.
pub(crate) struct ClusterStore {
    seeds: Vec<(String, u16)>,
    /// Each slot's shard (an index into `shards`).
    slots: Vec<u16>,
    shards: Vec<Shard>,
    replication: Replication,
    limits: ClusterLimits,
    timeout: Duration,
}

/// One primary: its address, its store, and whether a batch of this round went to it.
struct Shard {
    host: String,
    port: u16,
    store: RedisStore,
    sent: bool,
}

impl ClusterStore {
    /// Reads the slot map from the first seed that answers and connects to every primary it
    /// names (each within `timeout`); also the primaries, sorted (what a failover changes).
    pub(crate) fn connect(
        url: &ClusterUrl,
        replication: Replication,
        limits: ClusterLimits,
        timeout: Duration,
    ) -> Result<(ClusterStore, String), StoreError> {
        let mut store = ClusterStore {
            seeds: url.seeds.clone(),
            slots: vec![UNMAPPED; keys::SLOTS],
            shards: Vec::new(),
            replication,
            limits,
            timeout,
        };
        store.map_slots(None)?;
        if let Some(slot) = store.slots.iter().position(|&s| s == UNMAPPED) {
            return Err(StoreError(format!("the cluster names no primary for slot {slot}")));
        }
        let mut primaries: Vec<String> =
            store.shards.iter().map(|s| format!("{}:{}", s.host, s.port)).collect();
        primaries.sort();
        Ok((store, primaries.join(",")))
    }

    /// Reads `CLUSTER SLOTS` from shard `first` if given, else from the seeds in turn, and
    /// maps every range to its primary's shard (connected when new).
    fn map_slots(&mut self, first: Option<usize>) -> Result<(), StoreError> {
        let asked = first.map(|i| {
            let shard = &mut self.shards[i];
            let reply = redis::cmd("CLUSTER").arg("SLOTS").query(&mut shard.store.connection);
            (reply.map_err(StoreError::from), shard.host.clone())
        });
        let (reply, host) = match asked {
            Some((Ok(reply), host)) => (reply, host),
            _ => self.ask_seeds()?,
        };
        let reply: Vec<redis::Value> = reply;
        for range in slot_ranges(&reply, &host).map_err(StoreError)? {
            let shard = self.shard(&range.host, range.port)? as u16;
            self.slots[usize::from(range.first)..=usize::from(range.last)].fill(shard);
        }
        Ok(())
    }

    /// `CLUSTER SLOTS` from the first seed that answers, and that seed's host.
    fn ask_seeds(&self) -> Result<(Vec<redis::Value>, String), StoreError> {
        let mut answers = Vec::with_capacity(self.seeds.len());
        for (host, port) in &self.seeds {
            let url = DurableUrl { host: host.clone(), port: *port, db: 0 };
            let asked = || -> Result<Vec<redis::Value>, StoreError> {
                let mut seed = RedisStore::connect(&url, self.timeout)?;
                Ok(redis::cmd("CLUSTER").arg("SLOTS").query(&mut seed.connection)?)
            };
            match asked() {
                Ok(reply) => return Ok((reply, host.clone())),
                Err(e) => answers.push(format!("{host}:{port}: {}", e.0)),
            }
        }
        Err(StoreError(format!("no cluster node gave its slot map: {}", answers.join("; "))))
    }

    /// The shard of primary `host:port`, connected if it is new.
    fn shard(&mut self, host: &str, port: u16) -> Result<usize, StoreError> {
        if let Some(i) = self.shards.iter().position(|s| s.host == host && s.port == port) {
            return Ok(i);
        }
        let url = DurableUrl { host: host.to_owned(), port, db: 0 };
        let mut store = RedisStore::connect(&url, self.timeout)?;
        store.set_replication(self.replication);
        self.shards.push(Shard { host: host.to_owned(), port, store, sent: false });
        Ok(self.shards.len() - 1)
    }

    /// Runs `op` on the primary of `slot`, following `MOVED` (the map read again) and `ASK`.
    fn on_slot<T>(
        &mut self,
        slot: u16,
        mut op: impl FnMut(&mut RedisStore) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut shard = usize::from(self.slots[usize::from(slot)]);
        let redirects_max = self.limits.redirects_max;
        for _ in 0..=redirects_max {
            let host = self.shards[shard].host.clone();
            let failed = match op(&mut self.shards[shard].store) {
                Ok(answer) => return Ok(answer),
                Err(e) => e,
            };
            match Redirect::parse(&failed.0, &host) {
                Some(Redirect::Moved { slot: moved, host, port }) => {
                    let named = self.shard(&host, port)?;
                    self.slots[usize::from(moved)] = named as u16;
                    // The rest of the map is likely stale too (a failover, a reshard).
                    let _ = self.map_slots(Some(named));
                    shard = usize::from(self.slots[usize::from(slot)]);
                }
                Some(Redirect::Ask { host, port, .. }) => {
                    let asked = self.shard(&host, port)?;
                    let store = &mut self.shards[asked].store;
                    redis::cmd("ASKING").query::<()>(&mut store.connection)?;
                    return op(store);
                }
                None => return Err(failed),
            }
        }
        Err(StoreError(format!(
            "slot {slot}: more than {redirects_max} redirections (--durable-cluster-redirects-max)"
        )))
    }

    /// The shard each of `slots` maps to.
    fn shard_of(&self, slot: u16) -> usize {
        usize::from(self.slots[usize::from(slot)])
    }
}

/// The slot a record's keys are in.
fn record_slot(record: &Record) -> u16 {
    match record {
        Record::Keyed { name, .. } => keys::slot(name.as_bytes()),
        Record::Task { id, .. } => keys::slot(keys::task(id).as_bytes()),
        other => other.session().map_or(0, |sid| keys::session_slot(sid)),
    }
}

impl Store for ClusterStore {
    fn send(&mut self, records: &[&Record], session_ttl: Duration) -> Result<(), StoreError> {
        self.receive()?;
        let mut groups: Vec<Vec<&Record>> = vec![Vec::new(); self.shards.len()];
        for &record in records {
            groups[self.shard_of(record_slot(record))].push(record);
        }
        for (shard, group) in self.shards.iter_mut().zip(&groups) {
            if !group.is_empty() {
                shard.sent = true;
                shard.store.send(group, session_ttl)?;
            }
        }
        Ok(())
    }

    fn receive(&mut self) -> Result<(), StoreError> {
        let mut first_error = None;
        for shard in &mut self.shards {
            if std::mem::take(&mut shard.sent) {
                if let Err(e) = shard.store.receive() {
                    first_error.get_or_insert(StoreError(format!(
                        "{}:{}: {}",
                        shard.host, shard.port, e.0
                    )));
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn mark_not_durable(
        &mut self,
        sids: &[Arc<str>],
        session_ttl: Duration,
    ) -> Result<(), StoreError> {
        let mut groups: Vec<Vec<Arc<str>>> = vec![Vec::new(); self.shards.len()];
        for sid in sids {
            groups[self.shard_of(keys::session_slot(sid))].push(sid.clone());
        }
        for (shard, group) in self.shards.iter_mut().zip(&groups) {
            if !group.is_empty() {
                shard.store.mark_not_durable(group, session_ttl)?;
            }
        }
        Ok(())
    }

    fn renew_lease(
        &mut self,
        node: u8,
        boot: &str,
        lease: Duration,
    ) -> Result<Renewal, StoreError> {
        let lease_ms = lease.as_millis().max(1) as u64;
        let (held, claimed): (String, Vec<String>) =
            self.on_slot(keys::slot(keys::lease(node).as_bytes()), |store| {
                Ok(redis::cmd("EVAL")
                    .arg(keys::RENEW_SCRIPT)
                    .arg(2)
                    .arg(keys::lease(node))
                    .arg(keys::claims(node))
                    .arg(boot)
                    .arg(lease_ms)
                    .query(&mut store.connection)?)
            })?;
        Ok(Renewal { unbroken: held == boot, claimed })
    }

    fn owners(&mut self, sids: &[Arc<str>]) -> Result<Vec<Option<u8>>, StoreError> {
        let mut groups: Vec<(Vec<usize>, Vec<Arc<str>>)> =
            vec![(Vec::new(), Vec::new()); self.shards.len()];
        for (at, sid) in sids.iter().enumerate() {
            let group = &mut groups[self.shard_of(keys::session_slot(sid))];
            group.0.push(at);
            group.1.push(sid.clone());
        }
        let mut owners = vec![None; sids.len()];
        for (shard, (places, group)) in self.shards.iter_mut().zip(&groups) {
            if group.is_empty() {
                continue;
            }
            for (&at, owner) in places.iter().zip(shard.store.owners(group)?) {
                owners[at] = owner;
            }
        }
        Ok(owners)
    }

    fn claim(&mut self, sid: &str, me: u8) -> Result<Claim, StoreError> {
        let slot = keys::session_slot(sid);
        let (owner, fields) = match self.on_slot(slot, |store| store.claim_read(sid))? {
            Ok(read) => read,
            Err(answer) => return Ok(answer),
        };
        let claims_ttl_ms = self.limits.claims_ttl_ms;
        let noted: i64 = self.on_slot(keys::slot(keys::lease(owner).as_bytes()), |store| {
            Ok(redis::cmd("EVAL")
                .arg(keys::CLAIM_SCRIPT)
                .arg(2)
                .arg(keys::lease(owner))
                .arg(keys::claims(owner))
                .arg(sid)
                .arg(claims_ttl_ms)
                .query(&mut store.connection)?)
        })?;
        if noted != 1 {
            return Ok(Claim::OwnerAlive(owner));
        }
        Ok(match self.on_slot(slot, |store| store.claim_set(sid, (owner, &fields), me, false))? {
            Some(image) => Claim::Won(image),
            None if self.lease_alive(owner)? => Claim::OwnerAlive(owner),
            None => Claim::Taken(owner),
        })
    }

    fn keyed(&mut self, name: &str) -> Result<Option<KeyedImage>, StoreError> {
        self.on_slot(keys::slot(name.as_bytes()), |store| store.keyed(name))
    }

    fn task(&mut self, id: &str) -> Result<Option<TaskImage>, StoreError> {
        self.on_slot(keys::slot(keys::task(id).as_bytes()), |store| store.task(id))
    }

    fn lease_alive(&mut self, node: u8) -> Result<bool, StoreError> {
        self.on_slot(keys::slot(keys::lease(node).as_bytes()), |store| store.lease_alive(node))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Value;

    #[test]
    fn moved_and_ask_are_read_with_their_slot_and_node_and_anything_else_is_not_a_redirect() {
        // Goal: the two redirections Redis Cluster sends are followed to the node they name
        // (an empty host is the node that answered; a v6 host in brackets), and no other error
        // text is ever taken for one.
        assert_eq!(
            Redirect::parse("MOVED 3999 127.0.0.1:6381", "x"),
            Some(Redirect::Moved { slot: 3999, host: "127.0.0.1".into(), port: 6381 })
        );
        assert_eq!(
            Redirect::parse("ASK 12739 [::1]:7002", "x"),
            Some(Redirect::Ask { slot: 12739, host: "::1".into(), port: 7002 })
        );
        assert_eq!(
            Redirect::parse("MOVED 0 :7000", "10.0.0.5"),
            Some(Redirect::Moved { slot: 0, host: "10.0.0.5".into(), port: 7000 })
        );
        for other in [
            "",
            "MOVED",
            "MOVED 3999",
            "MOVED 16384 h:1",
            "MOVED x h:1",
            "MOVED 1 h",
            "MOVED 1 h:0",
            "MOVED 1 h:1 extra",
            "CROSSSLOT Keys in request don't hash to the same slot",
            "CLUSTERDOWN The cluster is down",
            "moved 1 h:1",
        ] {
            assert_eq!(Redirect::parse(other, "x"), None, "{other:?}");
        }
    }

    fn range(first: i64, last: i64, host: &[u8], port: i64) -> Value {
        let primary = Value::Array(vec![
            Value::BulkString(host.to_vec()),
            Value::Int(port),
            Value::BulkString(b"id".to_vec()),
        ]);
        let replica = Value::Array(vec![Value::BulkString(b"r".to_vec()), Value::Int(1)]);
        Value::Array(vec![Value::Int(first), Value::Int(last), primary, replica])
    }

    #[test]
    fn a_cluster_slots_reply_maps_ranges_to_primaries_and_a_malformed_one_is_refused() {
        // Goal: every range of `CLUSTER SLOTS` names its primary (not a replica), an empty or
        // unknown host is the node asked, and a reply of another shape is an error, never a
        // partial map.
        let reply = [range(0, 5460, b"127.0.0.1", 7000), range(5461, 16383, b"", 7001)];
        let ranges = slot_ranges(&reply, "seed").expect("a map");
        assert_eq!(
            ranges,
            [
                SlotRange { first: 0, last: 5460, host: "127.0.0.1".into(), port: 7000 },
                SlotRange { first: 5461, last: 16383, host: "seed".into(), port: 7001 },
            ]
        );
        for bad in [
            vec![Value::Int(1)],
            vec![Value::Array(vec![Value::Int(0), Value::Int(1)])],
            vec![range(0, 16384, b"h", 1)],
            vec![range(9, 8, b"h", 1)],
            vec![range(0, 1, b"h", -1)],
        ] {
            assert!(slot_ranges(&bad, "seed").is_err(), "{bad:?}");
        }
    }

    #[test]
    fn each_record_is_routed_by_the_slot_of_its_keys() {
        // Goal: a session's records go where its keys are (the hash tag), a keyed record and a
        // task where their one key is.
        let sid: Arc<str> = Arc::from("0a".repeat(19).as_str());
        let end = Record::End { sid: sid.clone() };
        assert_eq!(record_slot(&end), keys::slot(keys::session(&sid).as_bytes()));
        let keyed = Record::Keyed {
            name: keys::keyed(None, "k{x}"),
            fingerprint: 1,
            node: 1,
            response: None,
            ttl_ms: 1,
        };
        assert_eq!(record_slot(&keyed), keys::slot(b"x"));
    }
}
