//! The `requestState` of an `InputRequiredResult` (MCP 2026-07-28 MRTR): what the server needs
//! to finish a request on the client's retry, carried by the client and sealed so that it
//! cannot be forged, altered or replayed on another request.
//!
//! The state holds the answers of earlier rounds (a tool that asked twice gets both answers on
//! the last retry), an expiry, and a digest of the request it belongs to (method, name or uri,
//! canonical arguments), all under HMAC-SHA256 with a key drawn from the OS CSPRNG at start
//! (or given by `--request-state-key-file`, so that several nodes accept each other's state).
//! Text form: `base64url(payload) "." base64url(tag)`.
//!
//! A state is not single-use: within its lifetime the client may present it again, and the tool
//! runs again with the same answers (a record of spent states would have to be shared by every
//! node; at-most-once is the `Idempotency-Key`'s job). Each presentation is therefore new work
//! and meets `--rate-limit` like the call it continues (docs/rate-limits.md). The retry's
//! `inputResponses` are laid over the answers it carries (`modern::input_round`).
//!
//! Owns: sealing and opening. Never: decides what a tool asks.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::provider::Value;
use crate::wire::jsonrpc;
use crate::wire::WireValue;

/// Key length (HMAC-SHA256's block-size-sized keys need no hashing).
pub(crate) const KEY_BYTES: usize = 32;

static KEY: OnceLock<[u8; KEY_BYTES]> = OnceLock::new();

/// Sets the process's sealing key from key material (the bytes of `--request-state-key-file`,
/// hashed to the key); the first call wins. Without it a random key is drawn on first use.
pub(crate) fn set_key_material(material: &[u8]) {
    let _ = KEY.set(Sha256::digest(material).into());
}

fn key() -> &'static [u8; KEY_BYTES] {
    KEY.get_or_init(|| {
        let mut key = [0u8; KEY_BYTES];
        // A failing OS random source leaves a zero key: state is then still bound to its
        // request and expiry, only forgeable; the failure is logged once.
        if getrandom::fill(&mut key).is_err() {
            tracing::error!("OS random source failed: requestState key is not secret");
        }
        key
    })
}

/// Why a presented state is refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum StateError {
    /// Not our format, or the tag does not match (forged or altered).
    Tampered,
    /// Issued longer ago than the TTL.
    Expired,
    /// Issued for another request (method, name or arguments differ).
    OtherRequest,
}

impl StateError {
    pub(crate) fn message(&self) -> &'static str {
        match self {
            StateError::Tampered => "requestState failed integrity verification",
            StateError::Expired => "requestState expired: send the request again without it",
            StateError::OtherRequest => "requestState belongs to another request",
        }
    }
}

/// The digest a state is bound to: method, then the name or uri, then the canonical arguments
/// (`jsonrpc::canonical_params`; none: the empty text), then who asked (the authorized
/// subject, `s…`; `-` when authorization is off), so a state sealed for one subject is
/// "another request's" to every other (CONTRACT §8). Each part enters the digest after its
/// length (8 bytes, little-endian), so ("ab","c") and ("a","bc") differ.
///
/// The canonical arguments are streamed into the digest, never held as text: measured in a
/// first pass (the length goes first), written in a second, so a binding allocates nothing
/// (issue 40 §1). The digest is the one the text form gives (`a_binding_is_the_digest_it_was`):
/// a state sealed before this build, or by another node sharing `--request-state-key-file`,
/// still opens, and keyed calls' fingerprints (`modern::fingerprint_of`, the stable hash of this
/// digest) keep their values.
pub(crate) fn binding(
    method: &str,
    name: &str,
    arguments: Option<WireValue<'_>>,
    subject: Option<&str>,
) -> Binding {
    let mut h = Sha256::new();
    for part in [method, name] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    let mut len = ByteCount(0);
    if let Some(arguments) = arguments {
        jsonrpc::write_canonical_params(arguments, &mut len);
    }
    h.update((len.0 as u64).to_le_bytes());
    if let Some(arguments) = arguments {
        jsonrpc::write_canonical_params(arguments, &mut DigestWriter(&mut h));
    }
    // Who asked, as the part `s<subject>` or `-`, without building that string.
    let (mark, subject) = subject.map_or(("-", ""), |s| ("s", s));
    h.update(((mark.len() + subject.len()) as u64).to_le_bytes());
    h.update(mark.as_bytes());
    h.update(subject.as_bytes());
    let mut text = [0; BINDING_LEN];
    let written = URL_SAFE_NO_PAD.encode_slice(&h.finalize()[..16], &mut text);
    assert_eq!(written.ok(), Some(BINDING_LEN), "16 bytes are 22 base64 characters");
    Binding(text)
}

/// An `io::Write` that only counts the bytes written to it.
struct ByteCount(usize);

impl std::io::Write for ByteCount {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An `io::Write` that feeds what is written to it to a digest.
struct DigestWriter<'h>(&'h mut Sha256);

impl std::io::Write for DigestWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Characters of a binding: 16 digest bytes in URL-safe base64 without padding.
const BINDING_LEN: usize = 22;

/// A request binding (`binding`), its text held inline: computing one per call allocates
/// nothing (issue 40 §1). Reads as its text (`str`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Binding([u8; BINDING_LEN]);

impl std::ops::Deref for Binding {
    type Target = str;

    fn deref(&self) -> &str {
        // Base64 is ASCII.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl std::fmt::Debug for Binding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self)
    }
}

fn tag(payload: &[u8]) -> Vec<u8> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key()).expect("HMAC takes any key length");
    mac.update(payload);
    mac.finalize().into_bytes().to_vec()
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Seals the answers gathered so far for the request bound to `binding`.
pub(crate) fn seal(
    binding: &str,
    answers: &serde_json::Map<String, Value>,
    ttl: Duration,
) -> String {
    let expires = now_ms().saturating_add(ttl.as_millis() as u64);
    let payload = serde_json::json!({ "v": 1, "b": binding, "e": expires, "r": answers });
    let payload = serde_json::to_vec(&payload).unwrap_or_default();
    let mut text = URL_SAFE_NO_PAD.encode(&payload);
    text.push('.');
    text.push_str(&URL_SAFE_NO_PAD.encode(tag(&payload)));
    text
}

/// Opens a presented state: the earlier rounds' answers, if it is ours, unaltered, unexpired
/// and issued for this request.
pub(crate) fn open(
    text: &str,
    binding: &str,
) -> Result<serde_json::Map<String, Value>, StateError> {
    let (payload, presented) = text.split_once('.').ok_or(StateError::Tampered)?;
    let payload = URL_SAFE_NO_PAD.decode(payload).map_err(|_| StateError::Tampered)?;
    let presented = URL_SAFE_NO_PAD.decode(presented).map_err(|_| StateError::Tampered)?;
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key()).expect("HMAC takes any key length");
    mac.update(&payload);
    mac.verify_slice(&presented).map_err(|_| StateError::Tampered)?;
    let value: Value = serde_json::from_slice(&payload).map_err(|_| StateError::Tampered)?;
    if value.get("b").and_then(Value::as_str) != Some(binding) {
        return Err(StateError::OtherRequest);
    }
    if value.get("e").and_then(Value::as_u64).is_none_or(|e| e < now_ms()) {
        return Err(StateError::Expired);
    }
    match value.get("r") {
        Some(Value::Object(answers)) => Ok(answers.clone()),
        _ => Err(StateError::Tampered),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(text: &str) -> Option<WireValue<'static>> {
        Some(jsonrpc::leaked_value(text))
    }

    #[test]
    fn a_sealed_state_opens_only_unaltered_for_its_request_and_in_time() {
        // Goal: the MRTR requirements: integrity, binding to the request, expiry. Method:
        // seal one state, then present it altered, for another request, and expired.
        let b = binding("tools/call", "t", wire("{}"), None);
        let mut answers = serde_json::Map::new();
        answers.insert("step1".into(), serde_json::json!({"action":"accept"}));
        let text = seal(&b, &answers, Duration::from_secs(60));
        assert_eq!(open(&text, &b), Ok(answers.clone()));
        assert_eq!(open(&format!("{text}-TAMPERED"), &b), Err(StateError::Tampered));
        let (payload, tag) = text.split_once('.').expect("two parts");
        let mut forged = URL_SAFE_NO_PAD.decode(payload).expect("b64");
        forged[0] ^= 1;
        let forged = format!("{}.{tag}", URL_SAFE_NO_PAD.encode(forged));
        assert_eq!(open(&forged, &b), Err(StateError::Tampered));
        assert_eq!(open("no-dot", &b), Err(StateError::Tampered));
        let other = binding("tools/call", "t", wire(r#"{"a":1}"#), None);
        assert_eq!(open(&text, &other), Err(StateError::OtherRequest));
        let expired = seal(&b, &answers, Duration::ZERO);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(open(&expired, &b), Err(StateError::Expired));
    }

    /// Goal: a binding is the digest it always was (a state sealed before this build, or by
    /// another node, opens after it; keyed fingerprints keep their values), now that the
    /// canonical arguments are streamed into it. Method: the former construction (the
    /// canonical text built as a `String`, `who` as a `String`), compared over arguments with
    /// unordered and duplicate keys, a top-level `_meta`, escapes, characters cut by the
    /// encoder's blocks, none at all, and several subjects.
    #[test]
    fn a_binding_is_the_digest_it_was() {
        let former = |method: &str, name: &str, args: Option<&str>, subject: Option<&str>| {
            let mut canonical = String::new();
            if let Some(args) = args {
                jsonrpc::canonical_params(jsonrpc::leaked_value(args), &mut canonical);
            }
            let mut h = Sha256::new();
            let who = subject.map_or_else(|| "-".to_owned(), |s| format!("s{s}"));
            for part in [method, name, &canonical, &who] {
                h.update((part.len() as u64).to_le_bytes());
                h.update(part.as_bytes());
            }
            URL_SAFE_NO_PAD.encode(&h.finalize()[..16])
        };
        // A string the encoder writes in blocks, with a multi-byte character and an escape.
        let long = serde_json::json!(format!("{}\u{2603}\"{}", "0".repeat(47), "1".repeat(40)));
        let texts = [
            r#"{"text":"hi"}"#.to_owned(),
            r#"{"b":[1,2.5,null],"a":{"y":"ü","x":true},"_meta":{"progressToken":1}}"#.to_owned(),
            r#"{"d":1,"d":2}"#.to_owned(),
            r#""scalar""#.to_owned(),
            format!("{{{long}:{long}}}"),
        ];
        for subject in [None, Some(""), Some("alice"), Some("-")] {
            let now = binding("tools/call", "echo", None, subject);
            assert_eq!(&*now, former("tools/call", "echo", None, subject));
            for text in &texts {
                let now = binding("tools/call", "echo", wire(text), subject);
                assert_eq!(&*now, former("tools/call", "echo", Some(text), subject), "{text}");
            }
        }
    }

    #[test]
    fn bindings_separate_their_parts() {
        // Goal: ("ab","c") and ("a","bc") are different requests. Method: compare digests.
        assert_ne!(binding("ab", "c", None, None), binding("a", "bc", None, None));
        let b = || wire(r#"{"b":1}"#);
        assert_eq!(binding("m", "a", b(), None), binding("m", "a", b(), None));
        assert_ne!(binding("m", "a", b(), None), binding("m", "a", wire(r#"{"b":2}"#), None));
        // No arguments and `{}` are other requests' (the former text form: "" and "{}").
        assert_ne!(binding("m", "a", None, None), binding("m", "a", wire("{}"), None));
        // Another subject's state is another request's; none is no subject's.
        let alice = binding("m", "a", b(), Some("alice"));
        assert_ne!(alice, binding("m", "a", b(), Some("bob")));
        assert_ne!(alice, binding("m", "a", b(), None));
        assert_ne!(binding("m", "a", b(), Some("-")), binding("m", "a", b(), None));
    }
}
