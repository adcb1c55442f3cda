//! Finding the store's primary (`--durable redis+sentinel://…`): the sentinels are asked in
//! turn, `SENTINEL get-master-addr-by-name`, each within `SENTINEL_TIMEOUT_MS`, and the address
//! the first that knows one names is the primary to connect to; `is_primary` then asks that
//! server itself (`ROLE`), since a sentinel may still name a primary it is about to replace.
//!
//! Owns: the lookup. Never: keeps an address past one connection. The mirror and reader
//! threads ask again at every (re)connection, and a connection ends at any error, a write
//! refused with `READONLY` by a demoted primary included, so a failover is followed at the
//! next connection without a restart. (The sentinels' `+switch-master` announcements are not
//! subscribed to: a dead primary already ends the connection, a demoted one refuses the next
//! write, and a subscription would be a third connection per thread for no earlier switch.)

use std::time::Duration;

use crate::config::{DurableUrl, SentinelUrl};

/// How long one sentinel may take to connect and answer before the next is asked: a sentinel
/// on a dead host costs the lookup this, not the store's whole answer bound.
pub(crate) const SENTINEL_TIMEOUT_MS: u64 = 300;

/// The primary the sentinels of `url` name (the first that names one), with `url`'s database;
/// an error says what each sentinel answered (`store`, which calls this file and is not
/// imported by it, makes it a `StoreError`).
pub(crate) fn primary(url: &SentinelUrl) -> Result<DurableUrl, String> {
    let timeout = Duration::from_millis(SENTINEL_TIMEOUT_MS);
    let mut answers = Vec::with_capacity(url.sentinels.len());
    for (host, port) in &url.sentinels {
        let sentinel = DurableUrl { host: host.clone(), port: *port, db: 0 };
        match ask(&sentinel, &url.master, timeout) {
            Ok(Some((host, port))) => return Ok(DurableUrl { host, port, db: url.db }),
            Ok(None) => answers.push(format!("{host}:{port} knows no primary {:?}", url.master)),
            Err(e) => answers.push(format!("{host}:{port}: {e}")),
        }
    }
    Err(format!("no sentinel named the primary: {}", answers.join("; ")))
}

/// One sentinel's answer: the primary's host and port, or `None` when it monitors no such name.
fn ask(
    sentinel: &DurableUrl,
    master: &str,
    timeout: Duration,
) -> Result<Option<(String, u16)>, String> {
    let asked = || -> redis::RedisResult<Option<(String, String)>> {
        let client = redis::Client::open(sentinel.to_string().as_str())?;
        let mut connection = client.get_connection_with_timeout(timeout)?;
        connection.set_read_timeout(Some(timeout))?;
        connection.set_write_timeout(Some(timeout))?;
        redis::cmd("SENTINEL").arg("get-master-addr-by-name").arg(master).query(&mut connection)
    };
    let Some((host, port)) = asked().map_err(|e| e.to_string())? else { return Ok(None) };
    let port = port
        .parse::<u16>()
        .map_err(|_| format!("a sentinel named port {port:?} for {master:?}"))?;
    Ok(Some((host, port)))
}

/// Whether the server on `connection` is a primary (`ROLE`'s first element is `master`).
pub(crate) fn is_primary(connection: &mut redis::Connection) -> redis::RedisResult<bool> {
    let role: Vec<redis::Value> = redis::cmd("ROLE").query(connection)?;
    Ok(matches!(role.first(), Some(redis::Value::BulkString(kind)) if kind == b"master"))
}
