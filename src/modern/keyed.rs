//! Exactly-once `tools/call` in the 2026-07-28 era: tidemark's `Idempotency-Key` extension
//! (CONTRACT §5). MCP 2026-07-28 has no resumption: a client whose response stream dropped
//! re-issues the call with a new id, and a non-idempotent tool runs again. With the header, the
//! first request with a key runs detached from its connection (a drop does not cancel it: the
//! key says the client will come back); a retry with the same key and the same call (method,
//! tool name, canonical arguments) gets that execution's outcome, the progress it produced
//! and then the final result, with the retry's id and progress token; a retry while it still
//! runs waits for it up to `--owed-wait-ms` (then 409 -31004); the same key with another call
//! is 422 -31005. Without the header: plain spec behaviour (`call`).
//!
//! Keys are scoped by the client's `clientInfo` (name and version, length-prefixed: `scoped`;
//! requests without one share one scope; a key that is not UTF-8 is refused) and kept per core
//! in a bounded table (`--max-idempotency-keys-per-core`), finished ones for
//! `--stream-retention-secs`. A request carrying a key and no earlier name (a `tasks/*` task,
//! a session: `endpoint::owner`) is handed to the core that owns the key (`owner_core`), so
//! every retry meets its record whichever core accepted it.
//!
//! Owns: `KeyTable`, `Record`, the keyed call's detached task. Never: touches a socket.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::fasthash::FastMap;
use crate::signal::Signal;
use crate::wire::jsonrpc::RawId;

use super::call::{CallJob, ModernSink};

/// The core that keeps the records of `key` (its hash over the cores; stable across
/// processes, so a cluster's nodes agree when they share the key space).
pub(crate) fn owner_core(key: &[u8], threads: u16) -> u16 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    (h.finish() % u64::from(threads.max(1))) as u16
}

/// A keyed call: running, or finished with its answer.
pub(crate) struct Record {
    /// Method, tool name and canonical arguments of the call that took the key.
    pub fingerprint: u64,
    /// The original request's progress token (retries' notifications are rewritten to theirs).
    pub progress_token: Option<Box<str>>,
    pub sink: Rc<ModernSink>,
    /// The final response (with the original request's id) and its HTTP status, once done.
    pub outcome: RefCell<Option<(Bytes, crate::wire::Status)>>,
    /// The original request's id (the final response is rewritten to each retry's).
    pub id: RawId,
    pub finished_at: std::cell::Cell<Option<Instant>>,
    /// Woken when the outcome is set.
    pub done: Signal,
}

/// What a keyed request finds.
pub(crate) enum Lookup {
    /// No record: this request takes the key.
    Fresh,
    /// The same call took it: answer from its record.
    Same(Rc<Record>),
    /// Another call took it: 422.
    Other,
}

/// One core's keyed calls, oldest first for eviction.
pub(crate) struct KeyTable {
    by_key: FastMap<Box<str>, Rc<Record>>,
    order: VecDeque<Box<str>>,
    max: usize,
}

impl KeyTable {
    pub(crate) fn new(max: usize) -> KeyTable {
        KeyTable { by_key: FastMap::default(), order: VecDeque::new(), max }
    }

    /// The record of `scoped_key`, forgetting it first when it finished longer ago than
    /// `retention`.
    pub(crate) fn lookup(
        &mut self,
        scoped_key: &str,
        fingerprint: u64,
        retention: Duration,
    ) -> Lookup {
        let expired = self
            .by_key
            .get(scoped_key)
            .is_some_and(|r| r.finished_at.get().is_some_and(|at| at.elapsed() > retention));
        if expired {
            self.by_key.remove(scoped_key);
        }
        match self.by_key.get(scoped_key) {
            None => Lookup::Fresh,
            Some(r) if r.fingerprint == fingerprint => Lookup::Same(r.clone()),
            Some(_) => Lookup::Other,
        }
    }

    /// Keeps `record` under `scoped_key`. At the limit the oldest finished record goes; when
    /// every record is still running, `Err` (the caller refuses with 503).
    pub(crate) fn insert(&mut self, scoped_key: Box<str>, record: Rc<Record>) -> Result<(), ()> {
        self.order.retain(|k| self.by_key.contains_key(k));
        if self.by_key.len() >= self.max {
            let victim = self
                .order
                .iter()
                .position(|k| self.by_key.get(k).is_some_and(|r| r.finished_at.get().is_some()));
            let Some(victim) = victim else { return Err(()) };
            if let Some(k) = self.order.remove(victim) {
                self.by_key.remove(&k);
            }
        }
        self.order.push_back(scoped_key.clone());
        self.by_key.insert(scoped_key, record);
        Ok(())
    }

    /// Forgets a record (an input-required round: the next round must run).
    pub(crate) fn remove(&mut self, scoped_key: &str) {
        self.by_key.remove(scoped_key);
    }
}

/// Runs a keyed call detached from any connection; its record gets the outcome. A round that
/// ends asking for input is forgotten once answered, so the client's next round runs.
pub(crate) fn spawn(
    table: Rc<RefCell<KeyTable>>,
    scoped_key: Box<str>,
    record: Rc<Record>,
    mut job: CallJob,
) {
    monoio::spawn(async move {
        job.settle().await;
        let input_round = !job.has_outcome() && record.sink.input_needed();
        let mut body = Vec::with_capacity(256);
        let status = job.finish(&mut body);
        *record.outcome.borrow_mut() = Some((Bytes::from(body), status));
        record.finished_at.set(Some(Instant::now()));
        record.done.notify_all();
        if input_round {
            table.borrow_mut().remove(&scoped_key);
        }
    });
}

/// The key as the table keeps it: scoped by the client's `clientInfo` name and version (no
/// authorization exists yet to scope it by), so two clients that pick the same key do not meet.
/// Every part is length-prefixed (the name and version as their JSON text, so a non-string
/// value is not the string it prints as), so no two distinct (name, version, key) triples make
/// one scoped key. A request without `clientInfo` gets the one shared scope `-`, distinct from
/// every `clientInfo` (even `{}`): such clients' keys meet. `None`: the key is not UTF-8 (the
/// caller refuses it with `Refusal::BadIdempotencyKey`, never decodes it lossily).
pub(crate) fn scoped(key: &[u8], client_info: Option<&crate::provider::Value>) -> Option<Box<str>> {
    use std::fmt::Write;
    let key = std::str::from_utf8(key).ok()?;
    let mut scoped = String::with_capacity(key.len() + 32);
    match client_info {
        None => scoped.push('-'),
        Some(info) => {
            scoped.push('c');
            for field in ["name", "version"] {
                let text = info.get(field).map(|v| v.to_string()).unwrap_or_default();
                let _ = write!(scoped, "{}:{text}", text.len());
            }
        }
    }
    let _ = write!(scoped, "{}:{key}", key.len());
    Some(scoped.into_boxed_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modern::call::SinkSetup;

    fn record(fingerprint: u64, finished: bool) -> Rc<Record> {
        let setup = SinkSetup {
            progress_token: None,
            log_level: None,
            client_capabilities: serde_json::json!({}),
            answers: serde_json::Map::new(),
            record: Some(1024),
            pending_max: 1024,
        };
        Rc::new(Record {
            fingerprint,
            progress_token: None,
            sink: Rc::new(ModernSink::new(setup)),
            outcome: RefCell::new(None),
            id: RawId("1".into()),
            finished_at: std::cell::Cell::new(finished.then(Instant::now)),
            done: Signal::default(),
        })
    }

    #[test]
    fn a_key_finds_its_call_refuses_another_and_expires_after_retention() {
        // Goal: CONTRACT §5's lookup: same call → its record, other call → refused, gone after
        // the retention. Method: one table, one key.
        let mut table = KeyTable::new(4);
        let hour = Duration::from_secs(3600);
        assert!(matches!(table.lookup("k", 1, hour), Lookup::Fresh));
        table.insert("k".into(), record(1, true)).expect("room");
        assert!(matches!(table.lookup("k", 1, hour), Lookup::Same(_)));
        assert!(matches!(table.lookup("k", 2, hour), Lookup::Other));
        std::thread::sleep(Duration::from_millis(5));
        assert!(matches!(table.lookup("k", 1, Duration::from_millis(1)), Lookup::Fresh));
    }

    #[test]
    fn at_the_limit_the_oldest_finished_key_goes_and_running_ones_never() {
        // Goal: --max-idempotency-keys-per-core at its limit. Method: a table of 2.
        let hour = Duration::from_secs(3600);
        let mut table = KeyTable::new(2);
        table.insert("running".into(), record(1, false)).expect("room");
        table.insert("old".into(), record(2, true)).expect("room");
        table.insert("new".into(), record(3, true)).expect("evicts the oldest finished");
        assert!(matches!(table.lookup("old", 2, hour), Lookup::Fresh));
        assert!(matches!(table.lookup("running", 1, hour), Lookup::Same(_)));
        let mut full = KeyTable::new(1);
        full.insert("a".into(), record(1, false)).expect("room");
        assert!(full.insert("b".into(), record(2, false)).is_err());
    }

    #[test]
    fn keys_are_scoped_by_client_and_owned_by_one_core() {
        // Goal: two clients' equal keys differ; a key always maps to the same core in range.
        let a = serde_json::json!({"name": "a", "version": "1"});
        let b = serde_json::json!({"name": "b", "version": "1"});
        assert_ne!(scoped(b"k", Some(&a)), scoped(b"k", Some(&b)));
        assert_eq!(scoped(b"k", Some(&a)), scoped(b"k", Some(&a)));
        assert!(scoped(b"k", Some(&a)).is_some());
        for threads in 1..8u16 {
            let core = owner_core(b"some-key", threads);
            assert!(core < threads);
            assert_eq!(core, owner_core(b"some-key", threads));
        }
    }

    #[test]
    fn no_two_distinct_triples_share_a_scope_and_non_utf8_keys_have_none() {
        // Goal: issue 17 item 4: parts joined by a separator collided (`("a\0b","c")` and
        // `("a","b\0c")` were one client), a key was decoded lossily (`k\xff` = `k\xfe`), and
        // a missing clientInfo was `{"name":"","version":""}`. Method: those pairs, plus
        // non-string fields against the strings they print as.
        let info = |name: serde_json::Value, version: serde_json::Value| serde_json::json!({ "name": name, "version": version });
        let nul_a = info("a\0b".into(), "c".into());
        let nul_b = info("a".into(), "b\0c".into());
        assert_ne!(scoped(b"k", Some(&nul_a)), scoped(b"k", Some(&nul_b)));
        // The key's bytes too cannot shift into the version.
        let v1 = info("a".into(), "b".into());
        let v2 = info("a".into(), "b\0k".into());
        assert_ne!(scoped(b"k\0x", Some(&v1)), scoped(b"x", Some(&v2)));
        let empty = info("".into(), "".into());
        assert_ne!(scoped(b"k", None), scoped(b"k", Some(&empty)));
        assert_ne!(scoped(b"k", None), scoped(b"k", Some(&serde_json::json!({}))));
        assert_eq!(scoped(b"k", None), scoped(b"k", None), "no clientInfo: one shared scope");
        let number = info(1.into(), "1".into());
        let string = info("1".into(), "1".into());
        assert_ne!(scoped(b"k", Some(&number)), scoped(b"k", Some(&string)));
        assert_eq!(scoped(b"k\xff", Some(&v1)), None);
        assert_eq!(scoped(b"k\xfe", None), None);
    }
}
