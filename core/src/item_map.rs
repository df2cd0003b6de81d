//! [`ItemMap`]: a map keyed by item number (a batch's items in progress,
//! their last answers, slots and planned delays), hashed by one multiply
//! instead of SipHash. Item numbers are a call's own counters, never chosen
//! by a server or a caller, so a hash that resists chosen keys buys nothing
//! here; in a batch of small answers SipHash was a visible share of a
//! client's CPU.
//!
//! ```
//! use polite_core::item_map::ItemMap;
//! let mut last: ItemMap<u32, &str> = ItemMap::default();
//! last.insert(7, "503");
//! last.insert(7, "200");
//! assert_eq!(last.get(&7), Some(&"200"));
//! assert_eq!(last.len(), 1);
//! ```

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A map keyed by item (or slot) number, hashed by [`ItemHasher`].
pub type ItemMap<K, V> = HashMap<K, V, BuildHasherDefault<ItemHasher>>;

/// 2^64 / φ, odd: multiplying by it spreads consecutive numbers over both
/// the low bits (the bucket) and the high bits (hashbrown's tag).
const SPREAD: u64 = 0x9E37_79B9_7F4A_7C15;

/// Fibonacci hashing of integer keys: `(state ^ key) * 2^64/φ`.
///
/// ```
/// use std::hash::{BuildHasher, BuildHasherDefault};
/// use polite_core::item_map::ItemHasher;
/// let b = BuildHasherDefault::<ItemHasher>::default();
/// assert_ne!(b.hash_one(1u32), b.hash_one(2u32));
/// assert_eq!(b.hash_one(7u32), b.hash_one(7usize));
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct ItemHasher(u64);

impl Hasher for ItemHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(SPREAD);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(SPREAD);
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn consecutive_items_spread_over_buckets_and_tags() {
        let b = BuildHasherDefault::<ItemHasher>::default();
        let hashes: Vec<u64> = (0u32..1024).map(|i| b.hash_one(i)).collect();
        let mut low: Vec<u64> = hashes.iter().map(|h| h & 1023).collect();
        low.sort_unstable();
        low.dedup();
        assert_eq!(low.len(), 1024, "the low 10 bits are a permutation");
        let mut tags: Vec<u64> = hashes.iter().map(|h| h >> 57).collect();
        tags.sort_unstable();
        tags.dedup();
        assert!(tags.len() > 100, "{} distinct tags", tags.len());
        // The same key, written as u32 or usize, hashes alike.
        assert_eq!(b.hash_one(7u32), b.hash_one(7usize));
        let mut m: ItemMap<u32, u32> = ItemMap::default();
        for i in 0..10_000 {
            m.insert(i, i * 2);
        }
        assert!((0..10_000).all(|i| m.get(&i) == Some(&(i * 2))));
    }
}
