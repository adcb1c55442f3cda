//! The `--durable redis://HOST:PORT[/DB]` flag's value (`DurableUrl`), parsed at start-up.
//!
//! Owns: `DurableUrl` and why a value is refused. Never: opens a connection.

use std::fmt;

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
