//! [`ItemMap`]: a map keyed by item number (a batch's items in progress,
//! their last answers, slots and planned delays), hashed by one multiply
//! instead of SipHash; [`ItemSlots`]: the same with its first entry held
//! inline, for what a call of one item (`send`, `wait`) keeps per item.
//! Item numbers are a call's own counters, never chosen by a server or a
//! caller, so a hash that resists chosen keys buys nothing here; in a batch
//! of small answers SipHash was a visible share of a client's CPU.
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
use std::hash::{BuildHasherDefault, Hash, Hasher};

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

/// An [`ItemMap`] whose first entry is held inline: a call of one item
/// (`send`, `wait`) never allocates the hash table (a table of one entry
/// takes four buckets and their control bytes); a batch's other items go
/// to the table. An item is in one place at most: the inline slot is
/// filled only while the table is empty.
///
/// ```
/// use polite_core::item_map::ItemSlots;
/// let mut sends: ItemSlots<u32, u32> = ItemSlots::default();
/// *sends.get_or_insert_with(0, || 0) += 1;
/// *sends.get_or_insert_with(0, || 0) += 1;
/// assert_eq!(sends.get(&0), Some(&2));
/// sends.insert(5, 1); // a second item: the table
/// assert_eq!(sends.remove(&0), Some(2));
/// assert_eq!(sends.into_iter().collect::<Vec<_>>(), [(5, 1)]);
/// ```
#[derive(Clone, Debug)]
pub struct ItemSlots<K, V> {
    first: Option<(K, V)>,
    more: ItemMap<K, V>,
}

impl<K, V> Default for ItemSlots<K, V> {
    fn default() -> Self {
        ItemSlots {
            first: None,
            more: ItemMap::default(),
        }
    }
}

impl<K: Copy + Eq + Hash, V> ItemSlots<K, V> {
    /// Whether the inline slot holds `key`, or is free for it.
    fn inline_for(&self, key: K) -> bool {
        match &self.first {
            Some((k, _)) => *k == key,
            None => self.more.is_empty(),
        }
    }

    /// Sets `key`'s value (replacing any earlier one).
    pub fn insert(&mut self, key: K, value: V) {
        if self.inline_for(key) {
            self.first = Some((key, value));
        } else {
            self.more.insert(key, value);
        }
    }

    /// `key`'s value, made by `make` when it has none.
    pub fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        if self.inline_for(key) {
            &mut self.first.get_or_insert_with(|| (key, make())).1
        } else {
            self.more.entry(key).or_insert_with(make)
        }
    }

    /// `key`'s value.
    #[must_use]
    pub fn get(&self, key: &K) -> Option<&V> {
        match &self.first {
            Some((k, v)) if k == key => Some(v),
            _ if self.more.is_empty() => None,
            _ => self.more.get(key),
        }
    }

    /// `key`'s value, to change it.
    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        match &mut self.first {
            Some((k, v)) if k == key => Some(v),
            _ if self.more.is_empty() => None,
            _ => self.more.get_mut(key),
        }
    }

    /// Takes `key`'s value out.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        match &self.first {
            Some((k, _)) if k == key => self.first.take().map(|(_, v)| v),
            _ if self.more.is_empty() => None,
            _ => self.more.remove(key),
        }
    }

    /// Whether no item has a value.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.first.is_none() && self.more.is_empty()
    }
}

impl<K, V> IntoIterator for ItemSlots<K, V> {
    type Item = (K, V);
    type IntoIter =
        std::iter::Chain<std::option::IntoIter<(K, V)>, std::collections::hash_map::IntoIter<K, V>>;

    /// Every item with its value, in no particular order.
    fn into_iter(self) -> Self::IntoIter {
        self.first.into_iter().chain(self.more)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::hash::BuildHasher;

    proptest! {
        /// `ItemSlots` holds what a plain map holds, for any order of
        /// inserts, updates and removes over a few items (so that the
        /// inline slot is taken, freed and taken again while the table
        /// holds others).
        #[test]
        fn item_slots_are_a_map(ops in proptest::collection::vec((0u8..4, 0u32..4, any::<u16>()), 0..64)) {
            let mut slots: ItemSlots<u32, u16> = ItemSlots::default();
            let mut model: ItemMap<u32, u16> = ItemMap::default();
            for (op, item, value) in ops {
                match op {
                    0 => {
                        slots.insert(item, value);
                        model.insert(item, value);
                    }
                    1 => {
                        *slots.get_or_insert_with(item, || value) ^= 1;
                        *model.entry(item).or_insert(value) ^= 1;
                    }
                    2 => prop_assert_eq!(slots.remove(&item), model.remove(&item)),
                    _ => {
                        if let Some(v) = slots.get_mut(&item) {
                            *v = v.wrapping_add(value);
                        }
                        if let Some(v) = model.get_mut(&item) {
                            *v = v.wrapping_add(value);
                        }
                    }
                }
                prop_assert_eq!(slots.get(&item), model.get(&item));
                prop_assert_eq!(slots.is_empty(), model.is_empty());
            }
            let mut got: Vec<(u32, u16)> = slots.into_iter().collect();
            let mut want: Vec<(u32, u16)> = model.into_iter().collect();
            got.sort_unstable();
            want.sort_unstable();
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn one_item_needs_no_table() {
        let mut slots: ItemSlots<u32, &str> = ItemSlots::default();
        slots.insert(0, "503");
        slots.insert(0, "429");
        *slots.get_or_insert_with(0, || "x") = "200";
        assert_eq!(slots.more.capacity(), 0);
        assert_eq!(slots.remove(&0), Some("200"));
        assert!(slots.is_empty());
    }

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
