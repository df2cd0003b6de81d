//! Tests of the lab itself, from the outside, with a plain blocking HTTP client.

#[path = "../common/mod.rs"]
mod common;

mod endpoints;
mod faults;
mod lifecycle;
mod log;
mod quotas;
mod redis;
