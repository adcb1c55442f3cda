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
}
