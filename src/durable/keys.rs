//! Every key name and entry id of the durable store (the schema is `durable`'s module doc), and
//! the one script that changes a session's owner.

use crate::digits::decimal;
use std::fmt::Write as _;

/// Prefix of every key, so the store can be shared with other programs.
pub(crate) const PREFIX: &str = "tm:";

/// `tm:lease:{NODE}`: a node's liveness lease. The node id is the key's hash tag (Redis
/// Cluster hashes only what is between the first `{` and the next `}`), so the lease and the
/// claims on it (`claims`) share a slot: one script reads and renews both.
pub(crate) fn lease(node: u8) -> String {
    format!("{PREFIX}lease:{{{node}}}")
}

/// `tm:claims:{NODE}`: in a Redis Cluster, the sessions adopters claimed while `NODE`'s lease
/// was absent (a set, `CLAIM_SCRIPT`); the node reads and empties it as it renews its lease
/// (`RENEW_SCRIPT`). Same slot as the lease.
pub(crate) fn claims(node: u8) -> String {
    format!("{PREFIX}claims:{{{node}}}")
}

/// What closes a session key's hash tag (`SessionKey::prefix` opens it).
pub(crate) const TAG_END: &str = "}";

/// A session's three keys, each its prefix then the session id as the key's hash tag (`{SID}`):
/// in a Redis Cluster every key of a session is in one slot, so a batch's commands for it go
/// to one shard in order and adoption's compare-and-set is single-slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SessionKey {
    /// `tm:s:{SID}`: the session's record (hash).
    Record,
    /// `tm:st:{SID}`: its request streams (hash: stream key → `StreamRecord` JSON).
    Streams,
    /// `tm:ev:{SID}`: its events (a Redis stream).
    Events,
}

impl SessionKey {
    /// What the key's name starts with (`PREFIX` first, the hash tag's `{` last); the session
    /// id and `TAG_END` follow.
    pub(crate) const fn prefix(self) -> &'static str {
        match self {
            SessionKey::Record => "tm:s:{",
            SessionKey::Streams => "tm:st:{",
            SessionKey::Events => "tm:ev:{",
        }
    }

    /// The key's name for session `sid`.
    pub(crate) fn name(self, sid: &str) -> String {
        let mut name = String::with_capacity(self.prefix().len() + sid.len() + 1);
        name.push_str(self.prefix());
        name.push_str(sid);
        name.push_str(TAG_END);
        name
    }
}

/// `tm:s:{SID}`: a session's record (hash).
pub(crate) fn session(sid: &str) -> String {
    SessionKey::Record.name(sid)
}

/// `tm:st:{SID}`: a session's request streams.
pub(crate) fn streams(sid: &str) -> String {
    SessionKey::Streams.name(sid)
}

/// `tm:ev:{SID}`: a session's events.
pub(crate) fn events(sid: &str) -> String {
    SessionKey::Events.name(sid)
}

/// `tm:k:SUBJ:KEY`: a 2026-07-28 `Idempotency-Key` record; the subject in hex (`-` without
/// one) so a subject's bytes can never forge another subject's key. One key, so always one
/// slot (a `{…}` in the client's key only chooses which: `slot` follows the same rule).
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

/// What a task's key starts with (then its id).
pub(crate) const TASK_PREFIX: &str = "tm:t:";

/// `tm:t:TASK`: a task's record (hash; one key, so one slot).
pub(crate) fn task(id: &str) -> String {
    format!("{TASK_PREFIX}{id}")
}

/// What follows the sequence number in a `tm:ev` entry id.
pub(crate) const EVENT_ENTRY_ID_SUFFIX: &str = "-1";

/// The entry id of ring event `seq` in `tm:ev:SID`: `SEQ-1` (a Redis stream id must be above
/// `0-0`, and the sequence part keeps the ring's order). The writer puts the same bytes
/// straight into its pipeline (`Pipeline::arg_u64_then` with `EVENT_ENTRY_ID_SUFFIX`).
#[cfg(test)]
pub(crate) fn event_entry_id(seq: u64) -> String {
    format!("{seq}{EVENT_ENTRY_ID_SUFFIX}")
}

/// The sequence number of an entry id made by `event_entry_id`; `None` for any other id.
pub(crate) fn event_seq(entry_id: &str) -> Option<u64> {
    entry_id.strip_suffix(EVENT_ENTRY_ID_SUFFIX)?.parse().ok()
}

/// The one field of a `tm:ev` entry: its run of events packed, per event its stream key and
/// its payload's length (each u32, little-endian) and then the payload. One field per run, not
/// two per event: Redis's cost of an entry grows with its fields, and a field per event made
/// the store cost about as much per streamed event as serving it.
pub(crate) const EVENT_RUN_FIELD: &str = "r";

/// Bytes `pack_event` adds to a payload.
pub(crate) const PACKED_EVENT_HEADER: usize = 8;

/// Appends one event to a packed run (`EVENT_RUN_FIELD`).
pub(crate) fn pack_event(out: &mut Vec<u8>, stream: u32, data: &[u8]) {
    out.extend_from_slice(&stream.to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(data);
}

/// The events of a packed run in order (stream key, payload); `None` when it is malformed.
pub(crate) fn unpack_events(mut run: &[u8]) -> Option<Vec<(u32, &[u8])>> {
    let mut events = Vec::new();
    while !run.is_empty() {
        let header = run.get(..PACKED_EVENT_HEADER)?;
        let stream = u32::from_le_bytes(header[..4].try_into().ok()?);
        let len = u32::from_le_bytes(header[4..].try_into().ok()?) as usize;
        let data = run.get(PACKED_EVENT_HEADER..PACKED_EVENT_HEADER.checked_add(len)?)?;
        events.push((stream, data));
        run = &run[PACKED_EVENT_HEADER + len..];
    }
    Some(events)
}

/// One request stream of a session, the value of its field in `tm:st:SID` (JSON). A worker
/// builds one per stream change, so it allocates only what it must copy (the request id and the
/// key): the kind is a literal and the fingerprint a number until it is written.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct StreamRecord {
    /// `post` (a request's stream) or `standalone` (the session's GET stream).
    pub(crate) kind: std::borrow::Cow<'static, str>,
    /// The JSON-RPC request id exactly as the client sent it (raw JSON text), if any.
    pub(crate) rid: Option<ShortText>,
    /// The request's fingerprint (method and params), written as a decimal string: JSON numbers
    /// past 2^53 are not exact in every reader.
    #[serde(with = "decimal_string")]
    pub(crate) fp: u64,
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

impl StreamRecord {
    /// Appends the record's JSON to `out`: exactly what `serde_json` writes for it (the reader
    /// deserializes it with serde), without serde's byte-by-byte escaping of strings that need
    /// none. Two records per call went through `format_escaped_str`, the mirror thread's
    /// largest function (callgrind, 2026-12-05: ~1 200 of its ~7 200 instructions per echo call).
    pub(crate) fn write_json(&self, out: &mut Vec<u8>) {
        let mut digits = [0u8; 20];
        out.extend_from_slice(b"{\"kind\":");
        json_str(out, &self.kind);
        out.extend_from_slice(b",\"rid\":");
        match &self.rid {
            Some(rid) => json_bytes(out, rid.as_bytes()),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"fp\":\"");
        out.extend_from_slice(decimal(self.fp, &mut digits));
        out.extend_from_slice(b"\",\"key\":");
        json_opt_str(out, self.key.as_deref());
        out.extend_from_slice(b",\"first\":");
        out.extend_from_slice(decimal(self.first, &mut digits));
        out.extend_from_slice(b",\"final\":");
        match self.final_seq {
            Some(seq) => out.extend_from_slice(decimal(seq, &mut digits)),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(if self.settled {
            b",\"settled\":true}"
        } else {
            b",\"settled\":false}"
        });
    }
}

/// Bytes of text a `ShortText` holds inline: request ids as clients send them (a number, a
/// UUID in quotes) fit.
pub(crate) const SHORT_TEXT_INLINE_BYTES: usize = 38;

/// A copy of a short text (a stream record's request id) that allocates only past
/// `SHORT_TEXT_INLINE_BYTES` and is copied and written as bytes: a quick call's records copied
/// its request id into a `String` three times (opening, final, settled), each checked as UTF-8
/// again and freed on the mirror thread (callgrind: ~700 of the worker's ~2 700 instructions
/// per durable echo call).
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum ShortText {
    /// `bytes[..len]` is the text (whole UTF-8: copied from a text entire).
    Inline {
        len: u8,
        bytes: [u8; SHORT_TEXT_INLINE_BYTES],
    },
    Heap(Box<[u8]>),
}

const _: () = assert!(SHORT_TEXT_INLINE_BYTES <= u8::MAX as usize);

impl ShortText {
    /// `utf8` copied, not checked again: the caller's bytes are UTF-8 (a `str`'s, or a request
    /// id's, which holds UTF-8 only).
    pub(crate) fn copy(utf8: &[u8]) -> ShortText {
        if utf8.len() > SHORT_TEXT_INLINE_BYTES {
            return ShortText::Heap(Box::from(utf8));
        }
        let mut bytes = [0; SHORT_TEXT_INLINE_BYTES];
        bytes[..utf8.len()].copy_from_slice(utf8);
        ShortText::Inline { len: utf8.len() as u8, bytes }
    }

    /// The text's bytes (UTF-8).
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            ShortText::Inline { len, bytes } => &bytes[..usize::from(*len)],
            ShortText::Heap(bytes) => bytes,
        }
    }

    /// The text (checked as UTF-8 once more: the crate has no `unsafe`; not on the mirror's
    /// path, which writes `as_bytes`).
    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).unwrap_or_default()
    }
}

impl From<&str> for ShortText {
    fn from(text: &str) -> ShortText {
        ShortText::copy(text.as_bytes())
    }
}

impl std::fmt::Debug for ShortText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl serde::Serialize for ShortText {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for ShortText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ShortText, D::Error> {
        let text = <std::borrow::Cow<'de, str> as serde::Deserialize>::deserialize(d)?;
        Ok(ShortText::from(&*text))
    }
}

/// `text` as a JSON string: copied between quotes when nothing in it needs an escape (the usual
/// request id or key), else written by `serde_json` (the same escapes it would write).
fn json_str(out: &mut Vec<u8>, text: &str) {
    json_bytes(out, text.as_bytes());
}

/// `json_str` of UTF-8 `text` given as bytes (a `ShortText`'s, not checked again on this path).
fn json_bytes(out: &mut Vec<u8>, text: &[u8]) {
    if text.iter().any(|&b| b == b'"' || b == b'\\' || b < 0x20) {
        // Writing a `str` into a `Vec` cannot fail; `text` is UTF-8 (its callers').
        let _ = serde_json::to_writer(&mut *out, std::str::from_utf8(text).unwrap_or_default());
        return;
    }
    out.push(b'"');
    out.extend_from_slice(text);
    out.push(b'"');
}

fn json_opt_str(out: &mut Vec<u8>, text: Option<&str>) {
    match text {
        Some(text) => json_str(out, text),
        None => out.extend_from_slice(b"null"),
    }
}

/// A `u64` as a JSON string of its decimal digits (`StreamRecord::fp`).
mod decimal_string {
    pub(super) fn serialize<S: serde::Serializer>(n: &u64, s: S) -> Result<S::Ok, S::Error> {
        let mut digits = [0u8; 20];
        let digits = crate::digits::decimal(*n, &mut digits);
        // ASCII digits are always UTF-8.
        s.serialize_str(std::str::from_utf8(digits).unwrap_or("0"))
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let text = <std::borrow::Cow<'de, str> as serde::Deserialize>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Adoption's compare-and-set, atomic in the store (a Lua script): `KEYS[1]` the session
/// (`tm:s:{SID}`), `KEYS[2]` its owner's lease (`tm:lease:{OLD}`); `ARGV[1]` the owner the
/// adopter saw, `ARGV[2]` the adopter. Returns 1 when the adopter owns the session afterwards
/// (it won, or had already won), 0 when another node owns it, the owner's lease is alive, or
/// the session's mirror is incomplete (`durable` = `0`). In a Redis Cluster the lease is in
/// another slot: the script gets the session alone (`KEYS[2]` is then nil and not read) and
/// `CLAIM_SCRIPT` checks the lease first, on the lease's shard.
pub(crate) const ADOPT_SCRIPT: &str = r"
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner == ARGV[2] then return 1 end
if owner ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[1], 'durable') == '0' then return 0 end
if KEYS[2] and redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'owner', ARGV[2])
return 1
";

/// A Redis Cluster adopter's first step, on the lease's shard: `KEYS[1]` the owner's lease,
/// `KEYS[2]` its claims (`claims`); `ARGV[1]` the session, `ARGV[2]` `--durable-claims-ttl-ms`. Returns 0
/// when the lease is alive; else notes the claim and returns 1, and the adopter runs
/// `ADOPT_SCRIPT` on the session's shard. The owner's renewal (`RENEW_SCRIPT`) is atomic with
/// these notes on the same shard: a claim is either before it (the renewing node reads it and
/// never writes that session again, whether or not the compare-and-set lands) or refused.
pub(crate) const CLAIM_SCRIPT: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1
";

/// A node's lease renewal in a Redis Cluster: `KEYS[1]` its lease, `KEYS[2]` its claims;
/// `ARGV[1]` its boot id, `ARGV[2]` the lease in ms. Returns the lease's value before (`''`
/// when absent) and the sessions claimed since the last renewal (emptied).
pub(crate) const RENEW_SCRIPT: &str = r"
local held = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local claimed = redis.call('SMEMBERS', KEYS[2])
redis.call('DEL', KEYS[2])
return {held or '', claimed}
";

/// Redis Cluster's slots (`CLUSTER SLOTS` ranges cover 0..SLOTS).
pub(crate) const SLOTS: usize = 16_384;

/// CRC16/XMODEM (polynomial 0x1021, initial 0), Redis Cluster's key hash, one table lookup per
/// byte.
const CRC16_TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut byte = 0;
    while byte < 256 {
        let mut crc = (byte as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
            bit += 1;
        }
        table[byte] = crc;
        byte += 1;
    }
    table
};

/// CRC16/XMODEM of `bytes`.
pub(crate) fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &b| (crc << 8) ^ CRC16_TABLE[usize::from(((crc >> 8) as u8) ^ b)])
}

/// The `tags` field of a session's record (`Session::tag_of`): each tag its events had before
/// an adoption, oldest first, as `UNTIL:TAG` in decimal, comma-separated.
pub(crate) fn write_earlier_tags(out: &mut Vec<u8>, tags: &[(u64, u32)]) {
    use std::io::Write as _;
    for (i, (until, tag)) in tags.iter().enumerate() {
        let comma = if i == 0 { "" } else { "," };
        let _ = write!(out, "{comma}{until}:{tag}");
    }
}

/// `write_earlier_tags` read back; a malformed entry is skipped (its events' ids then read as
/// unknown cursors, never as another event's).
pub(crate) fn parse_earlier_tags(text: &str) -> Vec<(u64, u32)> {
    let entry = |e: &str| {
        let (until, tag) = e.split_once(':')?;
        Some((until.parse().ok()?, tag.parse().ok()?))
    };
    text.split(',').filter_map(entry).collect()
}

/// The Redis Cluster slot of key `key`: the CRC16 of its hash tag (what lies between its first
/// `{` and the first `}` after it, when that is not empty), else of the whole key.
pub(crate) fn slot(key: &[u8]) -> u16 {
    let tag = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let close = key[open + 1..].iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &key[open + 1..open + 1 + close])
        })
        .unwrap_or(key);
    crc16(tag) % SLOTS as u16
}

/// The slot of every key of session `sid` (its hash tag is the id).
pub(crate) fn session_slot(sid: &str) -> u16 {
    crc16(sid.as_bytes()) % SLOTS as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_record_writes_its_fingerprint_as_a_decimal_string_and_reads_it_back() {
        // Goal: the JSON is what older builds wrote and read (`fp` a string, exact past 2^53),
        // so a peer of either build adopts the other's sessions.
        let record = StreamRecord {
            kind: "post".into(),
            rid: Some("\"a\"".into()),
            fp: u64::MAX,
            key: None,
            first: 3,
            final_seq: Some(9),
            settled: true,
        };
        let json = serde_json::to_string(&record).expect("serializes");
        assert_eq!(
            json,
            r#"{"kind":"post","rid":"\"a\"","fp":"18446744073709551615","key":null,"first":3,"final":9,"settled":true}"#
        );
        assert_eq!(serde_json::from_str::<StreamRecord>(&json).expect("reads back"), record);
        let older =
            r#"{"kind":"standalone","rid":null,"fp":"12","key":"k","first":1,"final":null}"#;
        let read: StreamRecord = serde_json::from_str(older).expect("an older record");
        assert_eq!((read.kind.as_ref(), read.fp, read.settled), ("standalone", 12, false));
        assert!(serde_json::from_str::<StreamRecord>(
            &json.replace("\"18446744073709551615\"", "\"x\"")
        )
        .is_err());
    }

    #[test]
    fn a_short_text_is_inline_up_to_its_limit_and_reads_back_the_same_past_it() {
        // Goal: a request id of up to `SHORT_TEXT_INLINE_BYTES` bytes costs no allocation; a
        // longer one is kept whole on the heap; both serialize as the plain string they hold.
        let at_limit = "\u{e9}".repeat(SHORT_TEXT_INLINE_BYTES / 2);
        let past = format!("{at_limit}x");
        for (text, inline) in [("", true), ("7", true), (&*at_limit, true), (&*past, false)] {
            let short = ShortText::from(text);
            assert_eq!(matches!(short, ShortText::Inline { .. }), inline, "{text}");
            assert_eq!(short.as_str(), text);
            let json = serde_json::to_string(&short).expect("serializes");
            assert_eq!(json, serde_json::to_string(text).expect("serializes"));
            assert_eq!(serde_json::from_str::<ShortText>(&json).expect("reads back"), short);
        }
    }

    #[test]
    fn a_stream_record_written_by_hand_is_exactly_what_serde_writes() {
        // Goal: `write_json` is a faster path to the same bytes, never a second format: every
        // field's cases (absent, plain, needing escapes, not ASCII, the largest numbers).
        let texts = [
            None,
            Some(""),
            Some("7"),
            Some("\"req-1\""),
            Some("a\\b\u{1}\n\t\u{7f}"),
            Some("ключ ✓ \u{1F600}"),
        ];
        let mut written = 0;
        for (i, rid) in texts.iter().enumerate() {
            for key in texts {
                for (first, final_seq) in [(0, None), (u64::MAX, Some(u64::MAX)), (41, Some(42))] {
                    let record = StreamRecord {
                        kind: if i % 2 == 0 { "post".into() } else { "standalone".into() },
                        rid: rid.map(ShortText::from),
                        fp: if i % 3 == 0 { u64::MAX } else { i as u64 },
                        key: key.map(str::to_owned),
                        first,
                        final_seq,
                        settled: i % 2 == 1,
                    };
                    let mut out = b"prefix".to_vec();
                    record.write_json(&mut out);
                    let expected = serde_json::to_vec(&record).expect("serializes");
                    assert_eq!(
                        String::from_utf8_lossy(&out[6..]),
                        String::from_utf8_lossy(&expected),
                        "{record:?}"
                    );
                    written += 1;
                }
            }
        }
        assert_eq!(written, texts.len() * texts.len() * 3);
    }

    #[test]
    fn key_names_follow_the_schema_and_entry_ids_round_trip() {
        // Goal: the names are exactly the documented ones (a reader in another process
        // builds them from the same functions), and no subject can forge another's key.
        let sid = "01000a".to_owned() + &"f".repeat(32);
        assert_eq!(lease(7), "tm:lease:{7}");
        assert_eq!(claims(7), "tm:claims:{7}");
        assert_eq!(session(&sid), format!("tm:s:{{{sid}}}"));
        assert_eq!(streams(&sid), format!("tm:st:{{{sid}}}"));
        assert_eq!(events(&sid), format!("tm:ev:{{{sid}}}"));
        assert_eq!(task("abc"), "tm:t:abc");
        for kind in [SessionKey::Record, SessionKey::Streams, SessionKey::Events] {
            assert!(kind.prefix().starts_with(PREFIX));
        }
        assert!(TASK_PREFIX.starts_with(PREFIX));
        assert_eq!(keyed(None, "k1"), "tm:k:-:k1");
        assert_eq!(keyed(Some("ab"), "k1"), "tm:k:6162:k1");
        assert_ne!(keyed(Some("a:b"), "c"), keyed(Some("a"), "b:c"));
        for seq in [0, 1, 41, u64::MAX] {
            assert_eq!(event_seq(&event_entry_id(seq)), Some(seq));
        }
        assert_eq!(event_seq("5-0"), None);
        let mut run = Vec::new();
        pack_event(&mut run, 3, b"");
        pack_event(&mut run, u32::MAX, b"data: {}");
        assert_eq!(run.len(), 2 * PACKED_EVENT_HEADER + 8);
        assert_eq!(unpack_events(&run), Some(vec![(3, &b""[..]), (u32::MAX, &b"data: {}"[..])]));
        assert_eq!(unpack_events(&run[..run.len() - 1]), None, "a cut run is malformed");
        assert_eq!(unpack_events(&[1, 0, 0]), None);
        assert_eq!(event_seq("x-1"), None);
    }

    #[test]
    fn slots_are_redis_clusters_crc16_of_the_hash_tag() {
        // Goal: the slot of a key is the one Redis Cluster computes (the CRC16 check value of
        // "123456789" is 0x31C3, slot 12739; the other figures are `CLUSTER KEYSLOT`'s on
        // Redis 7.0), the hash tag rules included, so a batch is sent to the shard that owns it.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot(b"123456789"), 12739);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"bar"), 5061);
        assert_eq!(slot(b""), 0);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(slot(b"foo{}{bar}"), 8363, "an empty tag: the whole key is hashed");
        assert_eq!(slot(b"foo{{bar}}zap"), 4015, "the first {{ to the first }} after it");
        assert_eq!(slot(b"{bar"), 4015);
        assert_eq!(slot(b"foo{bar}{zap}"), slot(b"bar"), "only the first tag");
        assert_eq!(slot(b"foo{bar"), 15278, "no }}: the whole key");
        // Every key of a session, and a lease with its claims, share a slot.
        let sid = "01000a".to_owned() + &"f".repeat(32);
        for key in [session(&sid), streams(&sid), events(&sid)] {
            assert_eq!(slot(key.as_bytes()), session_slot(&sid), "{key}");
        }
        assert_eq!(slot(lease(3).as_bytes()), slot(claims(3).as_bytes()));
        assert!((0..1000)
            .map(|n| session_slot(&format!("{n:038x}")))
            .all(|s| usize::from(s) < SLOTS));
    }

    #[test]
    fn earlier_tags_read_back_as_written() {
        let tags = [(12, 7), (4_000_000_000_000, u32::MAX)];
        let mut text = Vec::new();
        write_earlier_tags(&mut text, &tags);
        assert_eq!(text, b"12:7,4000000000000:4294967295");
        assert_eq!(parse_earlier_tags(std::str::from_utf8(&text).unwrap()), tags);
        assert_eq!(parse_earlier_tags("x:1,5:2,6"), [(5, 2)], "malformed entries skipped");
    }
}
