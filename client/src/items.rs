//! The maps a call keeps per item number: polite-core's [`ItemMap`]
//! (hashed by one multiply; item numbers are the call's own counters).

pub(crate) use polite_core::item_map::ItemMap;
