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
//! Keys are scoped by the client's `clientInfo` (name and version, length-prefixed: `ScopedKey`;
//! requests without one share one scope; a key that is not UTF-8 is refused) and kept per core
//! in a bounded table (`--max-idempotency-keys-per-core`), finished ones for
//! `--stream-retention-secs`. A request carrying a key and no earlier name (a `tasks/*` task,
//! a session: `endpoint::owner`) is handed to the core that owns the key (`endpoint::owner::
//! key_core`), so
//! every retry meets its record whichever core accepted it.
//!
//! Owns: `KeyTable`, `Record`, `ScopedKey`, the keyed call's detached task. Never: touches a
//! socket.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, RandomState};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::fasthash::FastMap;
use crate::signal::Signal;
use crate::wire::jsonrpc::RawId;

use std::net::IpAddr;
use std::sync::Arc;

use crate::metrics::CoreMetrics;
use crate::provider::ProviderError;

use super::call::{render_outcome, CallJob, KeyBytes, ModernSink, RecordLimit, SinkSetup};

/// A keyed call: running, or finished with its answer.
pub(crate) struct Record {
    /// Method, tool name and canonical arguments of the call that took the key.
    pub fingerprint: u64,
    /// The original request's progress token (retries' notifications are rewritten to theirs).
    pub progress_token: Option<Box<str>>,
    pub sink: Rc<ModernSink>,
    /// The final response (with the original request's id) and its HTTP status, once done.
    outcome: RefCell<Option<(Bytes, crate::wire::Status)>>,
    /// The original request's id (the final response is rewritten to each retry's).
    pub id: RawId,
    pub finished_at: std::cell::Cell<Option<Instant>>,
    /// Woken when the outcome is set.
    pub done: Signal,
    /// Who started it: the client whose share of running keyed calls it counts against.
    client: Client,
    /// Where the outcome's bytes are counted (released when the record is freed).
    bytes: Rc<KeyBytes>,
}

/// Who a keyed call's share (`--max-running-keyed-calls-per-client`) counts against: the
/// authorized subject when authorization is on (one user behind many addresses is one client,
/// and users behind one NAT are not), else the connection's peer address.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Client {
    Subject(Rc<str>),
    Peer(Option<IpAddr>),
}

impl Record {
    pub(crate) fn new(
        fingerprint: u64,
        progress_token: Option<Box<str>>,
        sink: Rc<ModernSink>,
        id: RawId,
        client: Client,
        bytes: Rc<KeyBytes>,
    ) -> Record {
        Record {
            fingerprint,
            progress_token,
            sink,
            outcome: RefCell::new(None),
            id,
            finished_at: std::cell::Cell::new(None),
            done: Signal::default(),
            client,
            bytes,
        }
    }

    /// The final response and its status, once the call ended.
    pub(crate) fn outcome(&self) -> Option<(Bytes, crate::wire::Status)> {
        self.outcome.borrow().clone()
    }

    /// Ends the record with `body` (its bytes counted in the core's budget) and wakes readers.
    fn finish(&self, body: Bytes, status: crate::wire::Status) {
        self.bytes.take(body.len());
        let earlier = self.outcome.borrow_mut().replace((body, status));
        debug_assert!(earlier.is_none(), "invariant: a record ends once");
        self.finished_at.set(Some(Instant::now()));
        self.done.notify_all();
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        if let Some((body, _)) = self.outcome.get_mut() {
            self.bytes.release(body.len());
        }
    }
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

/// Why a new keyed call found no room (each a 503 or 429 with `Retry-After`).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Full {
    /// `--max-idempotency-keys-per-core` records, every one running.
    Keys,
    /// `--idempotency-bytes-per-core` held by running calls (finished ones were evicted).
    Bytes,
    /// This client already runs `--max-running-keyed-calls-per-client` keyed calls here.
    ClientShare,
}

/// The limits of one core's key table (from `Config`).
pub(crate) struct KeyLimits {
    pub keys_max: usize,
    pub running_per_client_max: usize,
    pub call_max: Duration,
}

/// One core's keyed calls, oldest first for eviction, inside a count, a byte budget
/// (`KeyBytes`, shared with the calls' recordings) and a per-client share of running calls.
pub(crate) struct KeyTable {
    /// Keyed by the client's own `Idempotency-Key` (scoped): a per-process random SipHash key,
    /// not the unkeyed fast hash, so no client can build keys that collide in one bucket and
    /// make every keyed lookup on the core scan them (one client never takes the table's
    /// speed from the others).
    by_key: HashMap<Box<str>, Rc<Record>, RandomState>,
    order: VecDeque<Box<str>>,
    limits: KeyLimits,
    bytes: Rc<KeyBytes>,
    /// Running keyed calls per client (entries at zero are removed).
    running: FastMap<Client, usize>,
    metrics: Arc<CoreMetrics>,
}

impl KeyTable {
    pub(crate) fn new(limits: KeyLimits, bytes_max: usize, metrics: Arc<CoreMetrics>) -> KeyTable {
        KeyTable {
            by_key: HashMap::with_hasher(RandomState::new()),
            order: VecDeque::new(),
            limits,
            bytes: Rc::new(KeyBytes::new(bytes_max, metrics.clone())),
            running: FastMap::default(),
            metrics,
        }
    }

    /// Whether a keyed call of this core still runs (what a drain waits for: its client may
    /// have dropped, and its answer must be recorded for the re-issue).
    pub(crate) fn any_running(&self) -> bool {
        !self.running.is_empty()
    }

    /// The budget a new keyed call's recording draws on.
    pub(crate) fn bytes(&self) -> Rc<KeyBytes> {
        self.bytes.clone()
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

    /// Keeps `record` under `scoped_key` as a running call. At the count limit the oldest
    /// finished record goes; with the byte budget full, finished records go oldest first until
    /// a byte fits. `Err` when that is not enough, or when the record's client already runs its
    /// share: nothing was kept.
    pub(crate) fn insert(&mut self, scoped_key: Box<str>, record: Rc<Record>) -> Result<(), Full> {
        let running = self.running.get(&record.client).copied().unwrap_or(0);
        if running >= self.limits.running_per_client_max {
            return Err(Full::ClientShare);
        }
        self.order.retain(|k| self.by_key.contains_key(k));
        if self.by_key.len() >= self.limits.keys_max && !self.evict_finished(None) {
            return Err(Full::Keys);
        }
        if self.bytes.full() {
            let bytes = self.bytes.clone();
            while bytes.full() && self.evict_finished(None) {}
            if bytes.full() {
                return Err(Full::Bytes);
            }
        }
        *self.running.entry(record.client.clone()).or_insert(0) += 1;
        self.order.push_back(scoped_key.clone());
        self.by_key.insert(scoped_key, record);
        Ok(())
    }

    /// Forgets the oldest finished record other than `keep`'s; false when there is none.
    fn evict_finished(&mut self, keep: Option<&str>) -> bool {
        let victim = self.order.iter().position(|k| {
            Some(&**k) != keep && self.by_key.get(k).is_some_and(|r| r.finished_at.get().is_some())
        });
        let Some(victim) = victim else { return false };
        if let Some(k) = self.order.remove(victim) {
            self.by_key.remove(&k);
        }
        true
    }

    /// `record` (under `scoped_key`) ended: its client's share is freed, and when its answer
    /// put the core over its byte budget, finished records go oldest first; if the answer
    /// alone still does not fit, the key keeps a small record in its place whose answer says
    /// so (readers already holding `record` still get the whole answer; a retry is told, and
    /// the tool never runs twice).
    fn ended(&mut self, scoped_key: &str, record: &Rc<Record>) {
        if let Some(n) = self.running.get_mut(&record.client) {
            *n -= 1;
            if *n == 0 {
                self.running.remove(&record.client);
            }
        }
        let bytes = self.bytes.clone();
        while bytes.over() && self.evict_finished(Some(scoped_key)) {}
        let still_ours = self.by_key.get(scoped_key).is_some_and(|r| Rc::ptr_eq(r, record));
        if !(bytes.over() && still_ours) {
            return;
        }
        // Only an answer larger than the stand-in's is replaced: a small one stays, so what a
        // core holds past its budget is at most one stand-in's bytes per record.
        let held = record.outcome().map_or(0, |(body, _)| body.len());
        let stand_in = not_retained(record, held, self.bytes.clone());
        if stand_in.outcome().is_some_and(|(body, _)| body.len() < held) {
            self.metrics.keyed_answers_not_retained_total.inc();
            self.by_key.insert(scoped_key.into(), Rc::new(stand_in));
        }
    }

    /// Forgets a record (an input-required round: the next round must run).
    pub(crate) fn remove(&mut self, scoped_key: &str) {
        self.by_key.remove(scoped_key);
    }
}

/// The record a key keeps instead of `record`, whose `held`-byte answer did not fit the
/// core's budget: the same call (fingerprint, id), finished, answering -32603.
fn not_retained(record: &Record, held: usize, bytes: Rc<KeyBytes>) -> Record {
    let message = format!(
        "this call ran once; its answer ({held} bytes) did not fit --idempotency-bytes-per-core \
         and was delivered only to the requests reading it then: not run again"
    );
    let sink = Rc::new(ModernSink::new(SinkSetup {
        progress_token: None,
        log_level: None,
        client_capabilities: serde_json::Value::Null,
        answers: serde_json::Map::new(),
        record: Some(RecordLimit { max: 0, core: bytes.clone() }),
        input_requests_max: 1,
        pending_max: 1,
    }));
    let mut body = Vec::with_capacity(256);
    let status = render_outcome(&record.id, Err(ProviderError::Internal(message)), &mut body);
    let id = record.id.clone();
    let stand_in = Record::new(record.fingerprint, None, sink, id, record.client.clone(), bytes);
    stand_in.finish(Bytes::from(body), status);
    stand_in
}

/// Runs a keyed call detached from any connection, for at most `--keyed-call-max-secs`; its
/// record gets the outcome. A round that ends asking for input is forgotten once answered, so
/// the client's next round runs.
pub(crate) fn spawn(
    table: Rc<RefCell<KeyTable>>,
    scoped_key: Box<str>,
    record: Rc<Record>,
    mut job: CallJob,
    mirror: Option<super::durable::KeyedMirror>,
) {
    monoio::spawn(async move {
        let limit = table.borrow().limits.call_max;
        if monoio::time::timeout(limit, job.settle()).await.is_err() {
            table.borrow().metrics.keyed_calls_timed_out_total.inc();
            let message = format!(
                "keyed call cancelled: it ran longer than --keyed-call-max-secs ({} s)",
                limit.as_secs()
            );
            job.give_up(ProviderError::Internal(message));
        }
        let input_round = !job.has_outcome() && record.sink.input_needed();
        let mut body = Vec::with_capacity(256);
        let status = job.finish(&mut body);
        let body = Bytes::from(body);
        if let (Some(mirror), false) = (&mirror, input_round) {
            mirror.done(body.clone());
        }
        record.finish(body, status);
        let mut table = table.borrow_mut();
        table.ended(&scoped_key, &record);
        if input_round {
            table.remove(&scoped_key);
        }
    });
}

/// The key as the table keeps it: scoped by the authorized subject when authorization is on
/// (`s`: another subject with the same key meets nothing, CONTRACT §8), else by the client's
/// `clientInfo` name and version, so two clients that pick the same key do not meet (anyone
/// presenting the same `clientInfo` does).
/// Every part is length-prefixed (the name and version as their JSON text, so a non-string
/// value is not the string it prints as), so no two distinct (name, version, key) triples make
/// one scoped key, and no subject's scope is a `clientInfo`'s. A request without `clientInfo`
/// gets the one shared scope `-`, distinct from every `clientInfo` (even `{}`): such clients'
/// keys meet. Reads as its text.
pub(crate) struct ScopedKey(String);

impl ScopedKey {
    /// `key` scoped (above), written in the core's reused buffer: looking a retry up allocates
    /// nothing (issue 40 §1); the table takes a copy of its own (`to_boxed`) only when it keeps
    /// a new key. `None`: the key is not UTF-8 (the caller refuses it with
    /// `Refusal::BadIdempotencyKey`, never decodes it lossily).
    pub(crate) fn new(
        key: &[u8],
        subject: Option<&str>,
        client_info: Option<&crate::provider::Value>,
    ) -> Option<ScopedKey> {
        let key = std::str::from_utf8(key).ok()?;
        // Taken, not borrowed: a request holding its key across an await (`durable::recover`)
        // leaves the next request on this core an empty buffer of its own, never a shared one.
        let mut text = SCOPED_KEY_SCRATCH.with(|scratch| scratch.take());
        text.clear();
        write_scoped(&mut text, key, subject, client_info);
        Some(ScopedKey(text))
    }

    /// The key as the table and its records keep it.
    pub(crate) fn to_boxed(&self) -> Box<str> {
        self.0.as_str().into()
    }
}

impl std::ops::Deref for ScopedKey {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl Drop for ScopedKey {
    fn drop(&mut self) {
        if self.0.capacity() <= SCOPED_KEY_SCRATCH_KEEP_BYTES {
            let text = std::mem::take(&mut self.0);
            // `try_with`: the thread's locals may be gone while it exits.
            let _ = SCOPED_KEY_SCRATCH.try_with(|scratch| *scratch.borrow_mut() = text);
        }
    }
}

/// Bytes of capacity the core's scoped-key buffer (`ScopedKey`) keeps between requests; the
/// buffer of a longer key (a long `Idempotency-Key` or `clientInfo`) is let go, so one such key
/// does not stay resident.
pub(crate) const SCOPED_KEY_SCRATCH_KEEP_BYTES: usize = 1024;

thread_local! {
    /// The core's buffer a request's scoped key is written in (`ScopedKey`).
    static SCOPED_KEY_SCRATCH: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Writes the scoped key (`ScopedKey`) to `w`.
fn write_scoped(
    w: &mut impl std::fmt::Write,
    key: &str,
    subject: Option<&str>,
    client_info: Option<&crate::provider::Value>,
) {
    use std::fmt::Write as _;
    match (subject, client_info) {
        (Some(subject), _) => {
            let _ = write!(w, "s{}:{subject}", subject.len());
        }
        (None, None) => {
            let _ = w.write_char('-');
        }
        (None, Some(info)) => {
            let _ = w.write_char('c');
            for field in ["name", "version"] {
                // The field's JSON text (empty when absent), written without a copy.
                let text = info.get(field);
                let mut len = TextLen(0);
                if let Some(value) = text {
                    let _ = write!(len, "{value}");
                }
                let _ = write!(w, "{}:", len.0);
                if let Some(value) = text {
                    let _ = write!(w, "{value}");
                }
            }
        }
    }
    let _ = write!(w, "{}:{key}", key.len());
}

/// A `fmt::Write` that only counts the bytes written to it.
struct TextLen(usize);

impl std::fmt::Write for TextLen {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0 += s.len();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modern::call::SinkSetup;

    /// A scoped key's text, as the table keeps it.
    fn scoped(
        key: &[u8],
        subject: Option<&str>,
        client_info: Option<&crate::provider::Value>,
    ) -> Option<Box<str>> {
        ScopedKey::new(key, subject, client_info).map(|scoped| scoped.to_boxed())
    }

    #[test]
    fn the_scoped_key_buffer_is_kept_up_to_its_limit() {
        // Goal: `ScopedKey` reuses one buffer per core but keeps at most
        // `SCOPED_KEY_SCRATCH_KEEP_BYTES`. Method: a buffer at the limit, then a key past it.
        let capacity = || SCOPED_KEY_SCRATCH.with(|s| s.borrow().capacity());
        SCOPED_KEY_SCRATCH.with(|s| s.borrow_mut().reserve_exact(SCOPED_KEY_SCRATCH_KEEP_BYTES));
        assert_eq!(capacity(), SCOPED_KEY_SCRATCH_KEEP_BYTES);
        let key = ScopedKey::new(b"k", None, None).expect("UTF-8");
        assert_eq!((&*key, capacity()), ("-1:k", 0), "taken while in use");
        drop(key);
        assert_eq!(capacity(), SCOPED_KEY_SCRATCH_KEEP_BYTES, "kept at the limit, reused");
        let again = ScopedKey::new(b"k2", None, None).expect("UTF-8");
        assert_eq!(&*again, "-2:k2", "cleared between requests");
        drop(again);
        let past = "k".repeat(SCOPED_KEY_SCRATCH_KEEP_BYTES);
        drop(ScopedKey::new(past.as_bytes(), None, None));
        assert_eq!(capacity(), 0, "let go past the limit");
    }

    fn metrics() -> Arc<CoreMetrics> {
        Arc::new(CoreMetrics::default())
    }

    fn table(keys_max: usize, bytes_max: usize, share: usize) -> KeyTable {
        let limits = KeyLimits {
            keys_max,
            running_per_client_max: share,
            call_max: Duration::from_secs(60),
        };
        KeyTable::new(limits, bytes_max, metrics())
    }

    fn record_of(table: &KeyTable, fingerprint: u64, client: u8) -> Rc<Record> {
        let setup = SinkSetup {
            progress_token: None,
            log_level: None,
            client_capabilities: serde_json::json!({}),
            answers: serde_json::Map::new(),
            record: Some(RecordLimit { max: 1024, core: table.bytes() }),
            input_requests_max: 1,
            pending_max: 1024,
        };
        let client = Client::Peer(Some(IpAddr::from([127, 0, 0, client])));
        let sink = Rc::new(ModernSink::new(setup));
        Rc::new(Record::new(fingerprint, None, sink, RawId::new("1"), client, table.bytes()))
    }

    /// Inserts a record for `key` and, when `answer` is given, ends it with that many bytes.
    fn put(table: &mut KeyTable, key: &str, fingerprint: u64, answer: Option<usize>) -> Rc<Record> {
        let r = record_of(table, fingerprint, 1);
        table.insert(key.into(), r.clone()).expect("room");
        if let Some(n) = answer {
            end(table, key, &r, n);
        }
        r
    }

    fn end(table: &mut KeyTable, key: &str, r: &Rc<Record>, answer_bytes: usize) {
        r.finish(Bytes::from(vec![b'x'; answer_bytes]), crate::wire::Status::Ok);
        table.ended(key, r);
    }

    #[test]
    fn a_key_finds_its_call_refuses_another_and_expires_after_retention() {
        // Goal: CONTRACT §5's lookup: same call → its record, other call → refused, gone after
        // the retention. Method: one table, one key.
        let mut table = table(4, 1 << 20, 4);
        let hour = Duration::from_secs(3600);
        assert!(matches!(table.lookup("k", 1, hour), Lookup::Fresh));
        put(&mut table, "k", 1, Some(10));
        assert!(matches!(table.lookup("k", 1, hour), Lookup::Same(_)));
        assert!(matches!(table.lookup("k", 2, hour), Lookup::Other));
        std::thread::sleep(Duration::from_millis(5));
        assert!(matches!(table.lookup("k", 1, Duration::from_millis(1)), Lookup::Fresh));
    }

    #[test]
    fn at_the_limit_the_oldest_finished_key_goes_and_running_ones_never() {
        // Goal: --max-idempotency-keys-per-core at its limit. Method: a table of 2.
        let hour = Duration::from_secs(3600);
        let mut table = table(2, 1 << 20, 4);
        put(&mut table, "running", 1, None);
        put(&mut table, "old", 2, Some(10));
        put(&mut table, "new", 3, Some(10));
        assert!(matches!(table.lookup("old", 2, hour), Lookup::Fresh));
        assert!(matches!(table.lookup("running", 1, hour), Lookup::Same(_)));
        let mut full = super::tests::table(1, 1 << 20, 4);
        put(&mut full, "a", 1, None);
        let b = record_of(&full, 2, 2);
        assert_eq!(full.insert("b".into(), b).err(), Some(Full::Keys));
    }

    #[test]
    fn keys_are_scoped_by_client() {
        // Goal: two clients' equal keys differ (the core a key maps to: `endpoint::owner`'s tests).
        let a = serde_json::json!({"name": "a", "version": "1"});
        let b = serde_json::json!({"name": "b", "version": "1"});
        assert_ne!(scoped(b"k", None, Some(&a)), scoped(b"k", None, Some(&b)));
        assert_eq!(scoped(b"k", None, Some(&a)), scoped(b"k", None, Some(&a)));
        assert!(scoped(b"k", None, Some(&a)).is_some());
        // The exact text: records and the durable store hold it.
        assert_eq!(scoped(b"k", None, Some(&a)).as_deref(), Some(r#"c3:"a"3:"1"1:k"#));
        let named = serde_json::json!({"name": "a"});
        assert_eq!(scoped(b"k", None, Some(&named)).as_deref(), Some(r#"c3:"a"0:1:k"#));
        assert_eq!(scoped(b"key", Some("alice"), None).as_deref(), Some("s5:alice3:key"));
        assert_eq!(scoped(b"k", None, None).as_deref(), Some("-1:k"));
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
        assert_ne!(scoped(b"k", None, Some(&nul_a)), scoped(b"k", None, Some(&nul_b)));
        // The key's bytes too cannot shift into the version.
        let v1 = info("a".into(), "b".into());
        let v2 = info("a".into(), "b\0k".into());
        assert_ne!(scoped(b"k\0x", None, Some(&v1)), scoped(b"x", None, Some(&v2)));
        let empty = info("".into(), "".into());
        assert_ne!(scoped(b"k", None, None), scoped(b"k", None, Some(&empty)));
        assert_ne!(scoped(b"k", None, None), scoped(b"k", None, Some(&serde_json::json!({}))));
        assert_eq!(
            scoped(b"k", None, None),
            scoped(b"k", None, None),
            "no clientInfo: one shared scope"
        );
        // Authorized: the subject scopes the key, whatever clientInfo says.
        let alice = scoped(b"k", Some("alice"), Some(&v1));
        assert_eq!(alice, scoped(b"k", Some("alice"), Some(&v2)));
        assert_ne!(alice, scoped(b"k", Some("bob"), Some(&v1)));
        assert_ne!(alice, scoped(b"k", None, Some(&v1)));
        assert_ne!(scoped(b"k", Some("a"), None), scoped(b"k", None, None));
        let number = info(1.into(), "1".into());
        let string = info("1".into(), "1".into());
        assert_ne!(scoped(b"k", None, Some(&number)), scoped(b"k", None, Some(&string)));
        assert_eq!(scoped(b"k\xff", None, Some(&v1)), None);
        assert_eq!(scoped(b"k\xfe", None, None), None);
    }

    #[test]
    fn the_byte_budget_holds_at_n_and_evicts_the_oldest_finished_past_it() {
        // Goal: issue 17 item 2: keyed records had no byte budget (120 answers of 3 MiB took
        // 776 MiB). Method: a 100-byte budget; answers of exactly the budget, then one byte more.
        let hour = Duration::from_secs(3600);
        let mut table = table(16, 100, 16);
        put(&mut table, "a", 1, Some(60));
        put(&mut table, "b", 2, Some(40));
        assert_eq!(table.bytes().held(), 100, "at N: both kept");
        assert!(matches!(table.lookup("a", 1, hour), Lookup::Same(_)));
        // N + 1: a third answer of one byte sends the oldest finished record away.
        put(&mut table, "c", 3, Some(1));
        assert!(matches!(table.lookup("a", 1, hour), Lookup::Fresh), "oldest finished went");
        assert!(matches!(table.lookup("b", 2, hour), Lookup::Same(_)));
        assert_eq!(table.bytes().held(), 41);
    }

    #[test]
    fn running_calls_that_fill_the_budget_refuse_new_ones_and_drop_their_own_excess() {
        // Goal: a full budget of running calls' notifications refuses a new keyed call (503)
        // and drops further notifications (counted); nothing finished is left to evict.
        let mut table = table(16, 100, 16);
        let r = put(&mut table, "a", 1, None);
        let note = |n: usize| r.sink.push_for_test(n);
        note(100);
        assert_eq!(table.bytes().held(), 100);
        note(1);
        assert_eq!(table.bytes().held(), 100, "past the budget: dropped");
        assert_eq!(table.metrics.keyed_events_dropped_total.get(), 1);
        let b = record_of(&table, 2, 2);
        assert_eq!(table.insert("b".into(), b).err(), Some(Full::Bytes));
        // The call's answer is never dropped, and ending frees the share; the bytes go when
        // the record is freed.
        end(&mut table, "a", &r, 10);
        assert_eq!(table.bytes().held(), 110, "a small answer is kept past the budget");
        drop(r);
        table.remove("a");
        assert_eq!(table.bytes().held(), 0, "every byte taken is released");
    }

    #[test]
    fn an_answer_larger_than_the_budget_is_delivered_but_a_retry_is_told_not_rerun() {
        // Goal: the tool never runs twice because its answer was too large to keep. Method: a
        // reader holds the record when it ends with 500 bytes against a budget of 100.
        let hour = Duration::from_secs(3600);
        let mut table = table(16, 100, 16);
        let reader = put(&mut table, "big", 7, Some(500));
        assert_eq!(reader.outcome().expect("ended").0.len(), 500, "the reader gets it all");
        let Lookup::Same(stand_in) = table.lookup("big", 7, hour) else {
            panic!("the key still names the call")
        };
        let (body, _) = stand_in.outcome().expect("finished");
        let text = String::from_utf8_lossy(&body);
        assert!(text.contains("-32603") && text.contains("--idempotency-bytes-per-core"), "{text}");
        assert_eq!(table.metrics.keyed_answers_not_retained_total.get(), 1);
        let stand_in_bytes = body.len();
        drop((reader, stand_in));
        assert_eq!(table.bytes().held(), stand_in_bytes, "freed with its last reader");
    }

    #[test]
    fn one_client_runs_at_most_its_share_and_others_still_run() {
        // Goal: issue 17 item 3: one client's calls that never finish filled the table and
        // every other client got 503. Method: a share of 2 in a table of 16.
        let mut table = table(16, 1 << 20, 2);
        for key in ["a1", "a2"] {
            let r = record_of(&table, 1, 1);
            table.insert(key.into(), r).expect("within the share");
        }
        let third = record_of(&table, 1, 1);
        assert_eq!(table.insert("a3".into(), third).err(), Some(Full::ClientShare));
        assert_eq!(table.metrics.limit_keyed_calls_per_client.get(), 0, "the caller counts");
        let other = record_of(&table, 1, 2);
        table.insert("b1".into(), other).expect("another client still runs");
        // A finished call frees its client's share.
        let Lookup::Same(a1) = table.lookup("a1", 1, Duration::from_secs(60)) else {
            panic!("a1 runs")
        };
        end(&mut table, "a1", &a1, 1);
        let again = record_of(&table, 1, 1);
        table.insert("a3".into(), again).expect("share freed");
    }
}
