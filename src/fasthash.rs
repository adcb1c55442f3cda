//! A multiply-rotate hasher (the FxHash construction) for the per-session maps and the per-core
//! session table, where SipHash's cost dominated the migration decision (issue 4 bench).
//!
//! Why a non-DoS-resistant hash is acceptable here: the session table is keyed by 128 bits
//! from the OS CSPRNG that a peer cannot choose, and every per-session map is bounded by
//! `--max-streams-per-session`, so a peer who crafts colliding request ids or idempotency keys
//! degrades only its own session's lookups, and only to a scan of at most that many entries.
//! The built-in tool sets' name tables hold only their own fixed names, so a peer's name is a
//! lookup, never an insert, and probes no longer than any other miss. A table shared by a
//! core's clients and keyed by what they choose (the 2026-07-28 keyed calls' `by_key`) takes a
//! randomly keyed SipHash instead: there one client's collisions would slow every other's.
//!
//! Also here: `StableHasher`, a fixed, documented hash for what is stored and compared by
//! another process (the params fingerprint), and the hashers of keys that need no mixing
//! (`SequenceMap`: numbers handed out in sequence; `HashedKeyMap`: a finished hash).

use std::hash::{BuildHasherDefault, Hasher};

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

#[derive(Default, Clone, Copy)]
pub(crate) struct FastHasher {
    hash: u64,
}

impl FastHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            self.add(tail_word(rest) ^ ((rest.len() as u64) << 59));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_u128(&mut self, i: u128) {
        self.add(i as u64);
        self.add((i >> 64) as u64);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    /// The state's full 128-bit product with `SEED`, its halves folded: every bit of the
    /// result depends on every bit of the state. The state alone is a product whose low bits
    /// depend only on the factors' low bits, and hashbrown takes a bucket from the low bits,
    /// so keys differing only in their last bytes shared a bucket: the load's request ids
    /// (`1099511627776`, `…777`, …) a bucket per hundred, a miss in `by_request_id` probing ~7
    /// groups of the 256 retained streams (~160 instructions; the fold is two).
    #[inline]
    fn finish(&self) -> u64 {
        let product = u128::from(self.hash) * u128::from(SEED);
        (product as u64) ^ ((product >> 64) as u64)
    }
}

/// The hasher of a map keyed by 128 bits from the OS CSPRNG (the per-core session table): such
/// a key is already uniform, so its hash is its two halves folded (one XOR) instead of two
/// multiply rounds; the migration decision's session lookup is the hot user (issue 40 §5).
///
/// Why this is safe against a peer: a peer names any key it likes in a lookup, but only the
/// server inserts, and only CSPRNG keys, so stored keys stay uniformly spread and a crafted
/// lookup probes no longer than a random one.
#[derive(Default, Clone, Copy)]
pub(crate) struct RandomKeyHasher {
    hash: u64,
}

impl Hasher for RandomKeyHasher {
    /// Not reached by `RandomKeyMap`'s `u128` keys; mixes like `FastHasher` all the same.
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut h = FastHasher { hash: self.hash };
        h.write(bytes);
        self.hash = h.finish();
    }

    #[inline]
    fn write_u128(&mut self, i: u128) {
        self.hash ^= (i as u64) ^ ((i >> 64) as u64);
    }

    /// 64 of the CSPRNG bits (`RandomWordMap`): already uniform, taken as they are.
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.hash ^= i;
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

/// `HashMap` keyed by CSPRNG `u128`s, with `RandomKeyHasher`.
pub(crate) type RandomKeyMap<V> =
    std::collections::HashMap<u128, V, BuildHasherDefault<RandomKeyHasher>>;

/// `HashMap` keyed by 64 CSPRNG bits (the session table: the low half of a session id's
/// random part), with `RandomKeyHasher`.
pub(crate) type RandomWordMap<V> =
    std::collections::HashMap<u64, V, BuildHasherDefault<RandomKeyHasher>>;

/// The 1 to 7 bytes after a string's whole words as one word, read with fixed-size loads (two
/// overlapping 4-byte ones from 4 bytes on, else the first, middle and last byte), not a
/// variable-length copy: a request id such as `"12345"` is all tail, and the copy was a `memcpy`
/// call on the migration decision's path. Every byte lands in the word, so for a given length
/// (mixed in by the caller) distinct tails give distinct words.
#[inline]
fn tail_word(rest: &[u8]) -> u64 {
    let n = rest.len();
    if n >= 4 {
        let (mut lo, mut hi) = ([0u8; 4], [0u8; 4]);
        lo.copy_from_slice(&rest[..4]);
        hi.copy_from_slice(&rest[n - 4..]);
        u64::from(u32::from_le_bytes(lo)) | u64::from(u32::from_le_bytes(hi)) << 32
    } else {
        u64::from(rest[0]) | u64::from(rest[n / 2]) << 8 | u64::from(rest[n - 1]) << 16
    }
}

/// The hasher of a map keyed by numbers the server hands out in sequence (a session's stream
/// keys): one multiply by an odd constant (Fibonacci hashing), where `FastHasher` does a round
/// and a 128-bit fold (one multiply more on the migration decision's stream probe).
/// hashbrown takes the bucket from the low bits, and the low `n` bits of `k * odd` are a
/// bijection of the low `n` bits of `k`, so consecutive keys fill distinct buckets; the top
/// seven bits (hashbrown's tag) are well mixed. No peer chooses these keys.
#[derive(Default, Clone, Copy)]
pub(crate) struct SequenceHasher(u64);

impl Hasher for SequenceHasher {
    /// Not reached by `SequenceMap`'s integer keys; a multiply a byte all the same.
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(STABLE_MUL);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// `HashMap` keyed by numbers the server hands out in sequence, with `SequenceHasher`.
pub(crate) type SequenceMap<K, V> =
    std::collections::HashMap<K, V, BuildHasherDefault<SequenceHasher>>;

/// `HashMap` keyed by a 64-bit hash the server computed with a full final mix (the params
/// fingerprint, `StableHasher`): taken as it is (`RandomKeyHasher`'s `write_u64`), one
/// multiply round and a fold fewer on the migration decision's retry probe. A peer that
/// crafts params whose fingerprints share low bits (the stable hash is not collision-resistant)
/// slows only its own session's map, bounded by `--max-streams-per-session`.
pub(crate) type HashedKeyMap<V> =
    std::collections::HashMap<u64, V, BuildHasherDefault<RandomKeyHasher>>;

/// The stable hash: a fixed function of a byte string, written here so that no toolchain or
/// dependency update can change it. Its users store its output: the params fingerprint
/// (`legacy::decision::fingerprint`, `modern`'s keyed calls) is kept in the durable mirror's
/// records (`tm:k:…` field `fp`, the stream records) and compared by a retry that another
/// process, perhaps another build, answers. std's `DefaultHasher` was used before; std does not
/// promise its output across Rust versions. `tests::stable_hash_known_answers` pins the values.
///
/// The function, over the bytes written in order (however they are split between `write`s):
/// `h = STABLE_SEED`; for each whole 8-byte little-endian word `w`, `h = (h.rotl(5) ^ w) *
/// STABLE_MUL` (mod 2^64); then the same round with the last 0 to 7 bytes as a zero-padded
/// word, then with the total length; the result is the 128-bit product `h * STABLE_MUL` with
/// its halves XORed. Each round is a bijection of `h` for a given word and of the word for a
/// given `h`, so two inputs of one length that differ in a single word never collide; it is
/// not collision-resistant against a chosen input, which is why it keys only what a client
/// can confuse for itself (its own session's retries, its own scoped key's record).
/// About three instructions a word; std's SipHash took ~340 instructions for echo's params.
#[derive(Clone, Copy)]
pub(crate) struct StableHasher {
    hash: u64,
    /// The bytes after the last whole word, little-endian in the low `pending_len` bytes.
    pending: u64,
    pending_len: u32,
    len: u64,
}

const STABLE_SEED: u64 = 0x243f_6a88_85a3_08d3;
/// 2^64 divided by the golden ratio, odd: `SequenceHasher`'s multiplier too.
const STABLE_MUL: u64 = 0x9e37_79b9_7f4a_7c15;

impl Default for StableHasher {
    fn default() -> StableHasher {
        StableHasher { hash: STABLE_SEED, pending: 0, pending_len: 0, len: 0 }
    }
}

impl StableHasher {
    #[inline]
    fn round(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(STABLE_MUL);
    }

    /// Moves up to a word's worth of `bytes` into `pending`; returns what is left.
    #[inline]
    fn fill_pending<'b>(&mut self, bytes: &'b [u8]) -> &'b [u8] {
        let take = bytes.len().min(8 - self.pending_len as usize);
        for (i, &b) in bytes[..take].iter().enumerate() {
            self.pending |= u64::from(b) << (8 * (self.pending_len as usize + i));
        }
        self.pending_len += take as u32;
        &bytes[take..]
    }
}

impl StableHasher {
    /// A whole word of the byte stream (its eight little-endian bytes): the same hash as
    /// `write` of those bytes, one round when the stream is at a word boundary (an encoding
    /// written in whole words, the params fingerprint's, always is).
    #[inline]
    pub(crate) fn write_word(&mut self, word: u64) {
        if self.pending_len == 0 {
            self.len = self.len.wrapping_add(8);
            self.round(word);
        } else {
            self.write(&word.to_le_bytes());
        }
    }

    /// `bytes` and then zeros up to the next multiple of eight bytes: the same hash as `write`
    /// of that padded text, in whole words (no byte-by-byte handling but the last word's).
    /// At a word boundary (the fingerprint's encoding always is) one round a word and the
    /// boundary checked once; the last 1 to 7 bytes read with fixed-size loads
    /// (`padded_tail_word`), not byte by byte: echo's five strings 482 → 389 instructions
    /// (callgrind, issue 40's sixth step).
    #[inline]
    pub(crate) fn write_padded(&mut self, bytes: &[u8]) {
        if self.pending_len != 0 {
            self.write(bytes);
            let pad = (8 - bytes.len() % 8) % 8;
            self.write(&[0u8; 8][..pad]);
            return;
        }
        let mut words = bytes.chunks_exact(8);
        for c in &mut words {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.round(u64::from_le_bytes(w));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            self.round(padded_tail_word(rest));
        }
        // Lossless: a slice's length fits in u64.
        self.len = self.len.wrapping_add(bytes.len().next_multiple_of(8) as u64);
    }
}

/// The 1 to 7 bytes `rest` as the little-endian word they make when zero-padded to eight,
/// read with fixed-size loads (two overlapping 4-byte ones from 4 bytes on, else the first,
/// middle and last byte; an overlapping byte lands on itself, so OR keeps the word exact).
#[inline]
fn padded_tail_word(rest: &[u8]) -> u64 {
    let n = rest.len();
    if n >= 4 {
        let (mut lo, mut hi) = ([0u8; 4], [0u8; 4]);
        lo.copy_from_slice(&rest[..4]);
        hi.copy_from_slice(&rest[n - 4..]);
        u64::from(u32::from_le_bytes(lo)) | u64::from(u32::from_le_bytes(hi)) << (8 * (n - 4))
    } else {
        u64::from(rest[0])
            | u64::from(rest[n / 2]) << (8 * (n / 2))
            | u64::from(rest[n - 1]) << (8 * (n - 1))
    }
}

/// The stable hash of `bytes` (`StableHasher`).
pub(crate) fn stable_hash(bytes: &[u8]) -> u64 {
    let mut h = StableHasher::default();
    h.write(bytes);
    h.finish()
}

impl Hasher for StableHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        self.len = self.len.wrapping_add(bytes.len() as u64);
        let mut rest = bytes;
        if self.pending_len > 0 {
            rest = self.fill_pending(rest);
            if self.pending_len < 8 {
                return;
            }
            let word = std::mem::take(&mut self.pending);
            self.pending_len = 0;
            self.round(word);
        }
        let mut words = rest.chunks_exact(8);
        for c in &mut words {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.round(u64::from_le_bytes(w));
        }
        self.fill_pending(words.remainder());
    }

    // The integer writes are their little-endian bytes (std's defaults take the native order,
    // which would make the hash depend on the machine).
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.write(&[i]);
    }

    fn write_u32(&mut self, i: u32) {
        self.write(&i.to_le_bytes());
    }

    fn write_u64(&mut self, i: u64) {
        self.write(&i.to_le_bytes());
    }

    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        let mut end = *self;
        end.round(self.pending);
        end.round(self.len);
        let product = u128::from(end.hash) * u128::from(STABLE_MUL);
        (product as u64) ^ ((product >> 64) as u64)
    }
}

/// `HashMap` with `FastHasher`.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// A set over the same hasher.
pub(crate) type FastSet<K> = std::collections::HashSet<K, BuildHasherDefault<FastHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, Hash};

    fn h<T: Hash>(t: T) -> u64 {
        BuildHasherDefault::<FastHasher>::default().hash_one(t)
    }

    #[test]
    fn distinguishes_short_strings_and_lengths() {
        assert_ne!(h("1"), h("2"));
        assert_ne!(h("a"), h("a\0"));
        assert_ne!(h(1u128), h(1u128 << 64));
        let mut m: FastMap<String, u32> = FastMap::default();
        for i in 0..1000 {
            m.insert(i.to_string(), i);
        }
        assert!((0..1000).all(|i| m.get(&i.to_string()) == Some(&i)));
    }

    /// Goal: keys that differ only in their last bytes (consecutive request ids) spread over
    /// the low bits hashbrown takes a bucket from, instead of sharing one bucket per hundred.
    #[test]
    fn consecutive_ids_spread_over_buckets() {
        let buckets: FastSet<u64> = (0..256u64)
            .map(|n| ((1u64 << 40) + n).to_string())
            .map(|id| h(id.as_bytes()) & 255)
            .collect();
        assert!(buckets.len() >= 128, "256 ids in {} of 256 buckets", buckets.len());
    }

    /// Goal: consecutive stream keys fill distinct buckets of a power-of-two table (the low
    /// bits of the product are a bijection of the key's low bits).
    #[test]
    fn sequence_keys_fill_distinct_buckets() {
        let h = |k: u32| BuildHasherDefault::<SequenceHasher>::default().hash_one(k);
        let buckets: FastSet<u64> = (1000..1256u32).map(|k| h(k) & 255).collect();
        assert_eq!(buckets.len(), 256);
    }

    /// Goal: a random key's fold keeps both halves (a key differing in either half hashes
    /// apart) and the map finds every key.
    #[test]
    fn random_keys_fold_both_halves() {
        let h = |k: u128| BuildHasherDefault::<RandomKeyHasher>::default().hash_one(k);
        assert_ne!(h(1), h(2));
        assert_ne!(h(1), h(1 << 64 | 1));
        let mut m: RandomKeyMap<u32> = RandomKeyMap::default();
        let key = |i: u32| u128::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835);
        for i in 0..1000 {
            m.insert(key(i), i);
        }
        assert!((0..1000).all(|i| m.get(&key(i)) == Some(&i)));
    }

    /// Goal: the stable hash cannot move (the durable mirror stores it). Method: known answers
    /// computed by a separate implementation of the documented function (a few lines of
    /// Python, not this code); a change here changes stored fingerprints and must say so in
    /// docs/reliability.md.
    #[test]
    fn stable_hash_known_answers() {
        let answers = [
            (&b""[..], 0x35a4_41a5_4fd0_6575),
            (b"a", 0x1505_0bb6_fc92_862f),
            (b"tools/call", 0xb514_5cac_a630_12c5),
            (b"{\"arguments\":{\"text\":\"hi\"},\"name\":\"echo\"}", 0xec30_f56e_f822_5fa6),
        ];
        for (bytes, answer) in answers {
            assert_eq!(stable_hash(bytes), answer, "{:?}", String::from_utf8_lossy(bytes));
        }
    }

    /// Goal: the hash is of the bytes, not of how they are split between writes (the canonical
    /// form reaches it in pieces). Method: every split of a 40-byte text into three writes.
    #[test]
    fn stable_hash_streams() {
        let text: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(37)).collect();
        let whole = stable_hash(&text);
        for a in 0..=text.len() {
            for b in a..=text.len() {
                let mut h = StableHasher::default();
                h.write(&text[..a]);
                h.write(&text[a..b]);
                h.write(&text[b..]);
                assert_eq!(h.finish(), whole, "split at {a} and {b}");
            }
        }
        let mut by_words = StableHasher::default();
        by_words.write_word(0x0807_0605_0403_0201);
        by_words.write_padded(b"abc");
        let mut padded = b"\x01\x02\x03\x04\x05\x06\x07\x08abc".to_vec();
        padded.resize(16, 0);
        assert_eq!(by_words.finish(), stable_hash(&padded));
        // Every length of padded text, from a word boundary and from inside a word.
        for len in 0..=24 {
            let text = &text[..len];
            let mut padded = text.to_vec();
            padded.resize(len.next_multiple_of(8), 0);
            let mut fast = StableHasher::default();
            fast.write_padded(text);
            assert_eq!(fast.finish(), stable_hash(&padded), "{len} bytes at a boundary");
            let mut inside = StableHasher::default();
            inside.write(b"abc");
            inside.write_padded(text);
            padded.splice(0..0, *b"abc");
            assert_eq!(inside.finish(), stable_hash(&padded), "{len} bytes after 3");
        }
        assert_ne!(stable_hash(b"a"), stable_hash(b"a\0"));
        assert_ne!(stable_hash(b""), stable_hash(b"\0"));
    }
}
