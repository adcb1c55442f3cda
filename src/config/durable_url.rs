//! The `--durable` flag's value, parsed at start-up: one server, `redis://HOST:PORT[/DB]`
//! (`DurableUrl`), or the primary a set of sentinels names,
//! `redis+sentinel://S1:PORT,S2:PORT,…/MASTER_NAME[/DB]` (`SentinelUrl`), or a Redis Cluster
//! found through any of its nodes, `redis+cluster://N1:PORT,N2:PORT,…` (`ClusterUrl`);
//! `DurableStore` is one of them.
//!
//! Owns: those values and why one is refused. Never: opens a connection.

use std::fmt;

/// Most sentinels one `redis+sentinel://` value may name: a deployment runs three or five, and
/// each lookup may try every one in turn (each bounded by the store's timeout).
pub(crate) const SENTINELS_MAX: usize = 16;

/// Most seed nodes one `redis+cluster://` value may name: the cluster names the rest itself
/// (`CLUSTER SLOTS`), and each connection may try every seed in turn.
pub(crate) const CLUSTER_SEEDS_MAX: usize = 16;

/// Where the durable mirror lives (`--durable`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DurableStore {
    /// One Redis 7 / Valkey server.
    Redis(DurableUrl),
    /// The primary the sentinels name, found again after a failover.
    Sentinel(SentinelUrl),
    /// A Redis Cluster: each slot's primary, from the slot map its nodes publish.
    Cluster(ClusterUrl),
}

/// A Redis Cluster: `redis+cluster://N1:PORT,N2:PORT,…`, nodes asked in turn for the slot map
/// (a cluster has database 0 only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterUrl {
    /// The seed nodes: host and port each.
    pub seeds: Vec<(String, u16)>,
}

/// Why a `redis+cluster://` value was refused: the value, and what is wrong with it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("--durable redis+cluster://N1:PORT,N2:PORT,…: {1}, got {0:?}")]
pub struct ClusterUrlError(pub String, pub String);

impl ClusterUrl {
    const SCHEME: &'static str = "redis+cluster://";

    /// Parses `redis+cluster://N1:PORT,…` (a trailing `/` allowed); each refusal says why.
    pub fn parse(text: &str) -> Result<ClusterUrl, ClusterUrlError> {
        let bad = |why: &str| ClusterUrlError(text.to_owned(), why.to_owned());
        let rest = text.strip_prefix(Self::SCHEME).ok_or_else(|| bad("not redis+cluster://"))?;
        let hosts = rest.strip_suffix('/').unwrap_or(rest);
        if hosts.contains('/') {
            return Err(bad("a cluster has no database or name to give after /"));
        }
        let mut seeds = Vec::new();
        for authority in hosts.split(',') {
            let seed = host_port(authority)
                .ok_or_else(|| bad(&format!("node {authority:?} is not HOST:PORT")))?;
            seeds.push(seed);
        }
        if seeds.len() > CLUSTER_SEEDS_MAX {
            return Err(bad(&format!("more than {CLUSTER_SEEDS_MAX} nodes")));
        }
        Ok(ClusterUrl { seeds })
    }
}

impl fmt::Display for ClusterUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(Self::SCHEME)?;
        write_hosts(f, &self.seeds)
    }
}

/// `H1:P1,H2:P2,…`, a v6 host in brackets.
fn write_hosts(f: &mut fmt::Formatter<'_>, hosts: &[(String, u16)]) -> fmt::Result {
    for (i, (host, port)) in hosts.iter().enumerate() {
        let comma = if i == 0 { "" } else { "," };
        if host.contains(':') {
            write!(f, "{comma}[{host}]:{port}")?;
        } else {
            write!(f, "{comma}{host}:{port}")?;
        }
    }
    Ok(())
}

/// A Sentinel-managed store: `redis+sentinel://S1:PORT,S2:PORT,…/MASTER_NAME[/DB]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentinelUrl {
    /// The sentinels, asked in turn: host and port each.
    pub sentinels: Vec<(String, u16)>,
    /// The name the sentinels monitor the primary under (`sentinel monitor NAME …`).
    pub master: String,
    /// The logical database (`SELECT`) on the primary, 0 unless given.
    pub db: u32,
}

/// Why a `redis+sentinel://` value was refused: the value, and what is wrong with it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("--durable redis+sentinel://S1:PORT,S2:PORT,…/MASTER_NAME[/DB]: {1}, got {0:?}")]
pub struct SentinelUrlError(pub String, pub String);

impl DurableStore {
    /// Parses any shape (`redis://` exactly as `DurableUrl::parse` does).
    pub fn parse(text: &str) -> Result<DurableStore, DurableUrlError> {
        if text.starts_with(ClusterUrl::SCHEME) {
            return ClusterUrl::parse(text)
                .map(DurableStore::Cluster)
                .map_err(|e| DurableUrlError(e.to_string()));
        }
        if text.starts_with(SentinelUrl::SCHEME) {
            return SentinelUrl::parse(text)
                .map(DurableStore::Sentinel)
                .map_err(|e| DurableUrlError(e.to_string()));
        }
        DurableUrl::parse(text).map(DurableStore::Redis)
    }
}

impl fmt::Display for DurableStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DurableStore::Redis(url) => url.fmt(f),
            DurableStore::Sentinel(url) => url.fmt(f),
            DurableStore::Cluster(url) => url.fmt(f),
        }
    }
}

/// `HOST:PORT` (a v6 address in brackets) of a URL's authority, or why not.
fn host_port(authority: &str) -> Option<(String, u16)> {
    if authority.contains('@') || authority.contains('?') {
        return None;
    }
    let (host, port) = authority.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = port.parse::<u16>().ok()?;
    (!host.is_empty() && port != 0).then(|| (host.to_owned(), port))
}

impl SentinelUrl {
    const SCHEME: &'static str = "redis+sentinel://";

    /// Parses `redis+sentinel://S1:PORT,…/MASTER_NAME[/DB]`; each refusal says what is wrong.
    pub fn parse(text: &str) -> Result<SentinelUrl, SentinelUrlError> {
        let bad = |why: &str| SentinelUrlError(text.to_owned(), why.to_owned());
        let rest = text.strip_prefix(Self::SCHEME).ok_or_else(|| bad("not redis+sentinel://"))?;
        let (hosts, path) = rest.split_once('/').ok_or_else(|| bad("no /MASTER_NAME"))?;
        let (master, db) = match path.split_once('/') {
            None | Some((_, "")) => (path.trim_end_matches('/'), 0),
            Some((master, db)) => {
                (master, db.parse::<u32>().map_err(|_| bad("the database is not a number"))?)
            }
        };
        if master.is_empty() {
            return Err(bad("no MASTER_NAME"));
        }
        if !master.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) {
            return Err(bad("MASTER_NAME may hold letters, digits, '-', '_' and '.' only"));
        }
        let mut sentinels = Vec::new();
        for authority in hosts.split(',') {
            let sentinel = host_port(authority)
                .ok_or_else(|| bad(&format!("sentinel {authority:?} is not HOST:PORT")))?;
            sentinels.push(sentinel);
        }
        if sentinels.len() > SENTINELS_MAX {
            return Err(bad(&format!("more than {SENTINELS_MAX} sentinels")));
        }
        Ok(SentinelUrl { sentinels, master: master.to_owned(), db })
    }
}

impl fmt::Display for SentinelUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(Self::SCHEME)?;
        write_hosts(f, &self.sentinels)?;
        write!(f, "/{}/{}", self.master, self.db)
    }
}

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
#[error("{0}")]
pub struct DurableUrlError(pub String);

impl DurableUrl {
    /// Parses `redis://HOST:PORT[/DB]`; user info, TLS (`rediss://`) and query strings are
    /// refused rather than half-supported.
    pub fn parse(text: &str) -> Result<DurableUrl, DurableUrlError> {
        let bad = || {
            DurableUrlError(format!(
                "--durable must be redis://HOST:PORT[/DB], \
                 redis+sentinel://S1:PORT,S2:PORT,…/MASTER_NAME[/DB] or \
                 redis+cluster://N1:PORT,N2:PORT,…, got {text:?}"
            ))
        };
        let rest = text.strip_prefix("redis://").ok_or_else(bad)?;
        let (authority, db) = match rest.split_once('/') {
            Some((authority, "")) => (authority, 0),
            Some((authority, db)) => (authority, db.parse::<u32>().map_err(|_| bad())?),
            None => (rest, 0),
        };
        let (host, port) = host_port(authority).ok_or_else(bad)?;
        Ok(DurableUrl { host, port, db })
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

    #[test]
    fn sentinel_urls_parse_and_each_refusal_says_why() {
        // Goal: the Sentinel shape parses (v6 sentinels, a database, a trailing slash); every
        // malformed value is refused at start-up with what is wrong named; `redis://` values
        // still parse as one server.
        let store = DurableStore::parse("redis+sentinel://10.0.0.1:26379,[::1]:26380/mymaster/2");
        let Ok(DurableStore::Sentinel(url)) = store else { panic!("{store:?}") };
        assert_eq!(url.sentinels, [("10.0.0.1".to_owned(), 26379), ("::1".to_owned(), 26380)]);
        assert_eq!((url.master.as_str(), url.db), ("mymaster", 2));
        assert_eq!(url.to_string(), "redis+sentinel://10.0.0.1:26379,[::1]:26380/mymaster/2");
        let one = SentinelUrl::parse("redis+sentinel://s1:26379/tm.primary/").expect("parses");
        assert_eq!((one.sentinels.len(), one.master.as_str(), one.db), (1, "tm.primary", 0));
        assert!(matches!(DurableStore::parse("redis://h:6379"), Ok(DurableStore::Redis(_))));
        let too_many = format!("redis+sentinel://{}/m", vec!["s:1"; SENTINELS_MAX + 1].join(","));
        for (bad, why) in [
            ("redis+sentinel://s1:26379", "no /MASTER_NAME"),
            ("redis+sentinel://s1:26379/", "no MASTER_NAME"),
            ("redis+sentinel:///m", "sentinel \"\" is not HOST:PORT"),
            ("redis+sentinel://s1:26379,/m", "sentinel \"\" is not HOST:PORT"),
            ("redis+sentinel://s1/m", "sentinel \"s1\" is not HOST:PORT"),
            ("redis+sentinel://s1:0/m", "is not HOST:PORT"),
            ("redis+sentinel://u:p@s1:26379/m", "is not HOST:PORT"),
            ("redis+sentinel://s1:26379/m/x", "the database is not a number"),
            ("redis+sentinel://s1:26379/m y", "MASTER_NAME may hold"),
            (too_many.as_str(), "more than 16 sentinels"),
        ] {
            let refused = DurableStore::parse(bad).expect_err(bad).to_string();
            assert!(refused.contains(why) && refused.contains(bad), "{bad:?}: {refused}");
            assert!(refused.starts_with("--durable redis+sentinel://"), "{refused}");
        }
    }

    #[test]
    fn cluster_urls_parse_and_each_refusal_says_why() {
        // Goal: the Cluster shape parses (v6 nodes, a trailing slash) and prints back; every
        // malformed value is refused at start-up with what is wrong named.
        let store = DurableStore::parse("redis+cluster://10.0.0.1:7000,[::1]:7001,n3:7002/");
        let Ok(DurableStore::Cluster(url)) = store else { panic!("{store:?}") };
        assert_eq!(url.seeds.len(), 3);
        assert_eq!(url.seeds[1], ("::1".to_owned(), 7001));
        assert_eq!(url.to_string(), "redis+cluster://10.0.0.1:7000,[::1]:7001,n3:7002");
        let most = format!("redis+cluster://{}", vec!["n:1"; CLUSTER_SEEDS_MAX].join(","));
        assert!(ClusterUrl::parse(&most).is_ok(), "{CLUSTER_SEEDS_MAX} nodes at the limit");
        let too_many = format!("redis+cluster://{}", vec!["n:1"; CLUSTER_SEEDS_MAX + 1].join(","));
        for (bad, why) in [
            ("redis+cluster://", "node \"\" is not HOST:PORT"),
            ("redis+cluster://n1:7000,", "node \"\" is not HOST:PORT"),
            ("redis+cluster://n1", "node \"n1\" is not HOST:PORT"),
            ("redis+cluster://u:p@n1:7000", "is not HOST:PORT"),
            ("redis+cluster://n1:7000/0", "no database"),
            (too_many.as_str(), "more than 16 nodes"),
        ] {
            let refused = DurableStore::parse(bad).expect_err(bad).to_string();
            assert!(refused.contains(why) && refused.contains(bad), "{bad:?}: {refused}");
            assert!(refused.starts_with("--durable redis+cluster://"), "{refused}");
        }
    }
}
