//! The maps a call keeps per item number: polite-core's [`ItemMap`]
//! (hashed by one multiply; item numbers are the call's own counters) and
//! [`ItemSlots`] (the same, its first entry inline: a call of one item
//! allocates no table).

pub(crate) use polite_core::item_map::{ItemMap, ItemSlots};
