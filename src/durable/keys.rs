//! Every key name and entry id of the durable store (the schema is `durable`'s module doc), and
//! the one script that changes a session's owner.

use std::fmt::Write as _;

/// Prefix of every key, so the store can be shared with other programs.
pub(crate) const PREFIX: &str = "tm:";

/// `tm:lease:NODE`: a node's liveness lease.
pub(crate) fn lease(node: u8) -> String {
    format!("{PREFIX}lease:{node}")
}

/// `tm:s:SID`: a session's record (hash).
pub(crate) fn session(sid: &str) -> String {
    format!("{PREFIX}s:{sid}")
}

/// `tm:st:SID`: a session's request streams (hash: stream key → `StreamRecord` JSON).
pub(crate) fn streams(sid: &str) -> String {
    format!("{PREFIX}st:{sid}")
}

/// `tm:ev:SID`: a session's events (a Redis stream).
pub(crate) fn events(sid: &str) -> String {
    format!("{PREFIX}ev:{sid}")
}

/// `tm:k:SUBJ:KEY`: a 2026-07-28 `Idempotency-Key` record; the subject in hex (`-` without
/// one) so a subject's bytes can never forge another subject's key.
pub(crate) fn keyed(subject: Option<&str>, key: &str) -> String {
    let mut name =
        String::with_capacity(PREFIX.len() + 4 + key.len() + 2 * subject.map_or(1, str::len));
    name.push_str(PREFIX);
    name.push_str("k:");
    match subject {
        Some(subject) => subject.bytes().for_each(|b| {
            let _ = write!(name, "{b:02x}");
        }),
        None => name.push('-'),
    }
    name.push(':');
    name.push_str(key);
    name
}

/// `tm:t:TASK`: a task's record (hash).
pub(crate) fn task(id: &str) -> String {
    format!("{PREFIX}t:{id}")
}

/// The entry id of ring event `seq` in `tm:ev:SID`: `SEQ-1` (a Redis stream id must be above
/// `0-0`, and the sequence part keeps the ring's order).
pub(crate) fn event_entry_id(seq: u64) -> String {
    format!("{seq}-1")
}

/// The sequence number of an entry id made by `event_entry_id`; `None` for any other id.
pub(crate) fn event_seq(entry_id: &str) -> Option<u64> {
    entry_id.strip_suffix("-1")?.parse().ok()
}

/// One request stream of a session, the value of its field in `tm:st:SID` (JSON).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct StreamRecord {
    /// `post` (a request's stream) or `standalone` (the session's GET stream).
    pub(crate) kind: String,
    /// The JSON-RPC request id exactly as the client sent it (raw JSON text), if any.
    pub(crate) rid: Option<String>,
    /// The request's fingerprint (method and params), decimal u64 as a string: JSON numbers
    /// past 2^53 are not exact in every reader.
    pub(crate) fp: String,
    /// Its `Idempotency-Key`, if the client sent one.
    pub(crate) key: Option<String>,
    /// The ring sequence number of the stream's first event.
    pub(crate) first: u64,
    /// The sequence number of its final event once it has one (the call finished).
    #[serde(rename = "final")]
    pub(crate) final_seq: Option<u64>,
    /// Everything of it was delivered (it no longer owes the client anything).
    #[serde(default)]
    pub(crate) settled: bool,
}

/// Adoption's compare-and-set, atomic in the store (a Lua script): `KEYS[1]` the session
/// (`tm:s:SID`), `KEYS[2]` its owner's lease (`tm:lease:OLD`); `ARGV[1]` the owner the adopter
/// saw, `ARGV[2]` the adopter. Returns 1 when the adopter owns the session afterwards (it won,
/// or had already won), 0 when another node owns it, the owner's lease is alive, or the
/// session's mirror is incomplete (`durable` = `0`).
pub(crate) const ADOPT_SCRIPT: &str = r"
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner == ARGV[2] then return 1 end
if owner ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[1], 'durable') == '0' then return 0 end
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'owner', ARGV[2])
return 1
";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_names_follow_the_schema_and_entry_ids_round_trip() {
        // Goal: the names are exactly the documented ones (a reader in another process
        // builds them from the same functions), and no subject can forge another's key.
        let sid = "01000a".to_owned() + &"f".repeat(32);
        assert_eq!(lease(7), "tm:lease:7");
        assert_eq!(session(&sid), format!("tm:s:{sid}"));
        assert_eq!(streams(&sid), format!("tm:st:{sid}"));
        assert_eq!(events(&sid), format!("tm:ev:{sid}"));
        assert_eq!(task("abc"), "tm:t:abc");
        assert_eq!(keyed(None, "k1"), "tm:k:-:k1");
        assert_eq!(keyed(Some("ab"), "k1"), "tm:k:6162:k1");
        assert_ne!(keyed(Some("a:b"), "c"), keyed(Some("a"), "b:c"));
        for seq in [0, 1, 41, u64::MAX] {
            assert_eq!(event_seq(&event_entry_id(seq)), Some(seq));
        }
        assert_eq!(event_seq("5-0"), None);
        assert_eq!(event_seq("x-1"), None);
    }
}
