//! A multiply-rotate hasher (the FxHash construction) for the per-session maps and the per-core
//! session table, where SipHash's cost dominated the migration decision (issue 4 bench).
//!
//! Why a non-DoS-resistant hash is acceptable here: the session table is keyed by 128 bits
//! from the OS CSPRNG that a peer cannot choose, and every per-session map is bounded by
//! `--max-streams-per-session`, so a peer who crafts colliding request ids or idempotency keys
//! degrades only its own session's lookups, and only to a scan of at most that many entries.

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
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 59));
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

    #[inline]
    fn finish(&self) -> u64 {
        self.hash
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
}
