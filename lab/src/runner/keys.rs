//! One pace per origin inside one batch (SPEC §4.2), against two real
//! servers, through polite's [`Client`] on any runtime: lab A answers its
//! first request 429 with `Retry-After: 5`, lab B is healthy (200 after
//! 150 ms). A mixed batch finishes B's items without waiting for A's
//! cool-down, and A's items are sent again only after A's five seconds, as
//! A's own log shows. Written once; each adapter's `tests/batch_keys.rs`
//! runs [`a_429_from_one_origin_never_holds_back_another`] on its runtime.

use std::time::{Duration, Instant};

use bytes::Bytes;
use polite_client::{BatchOrder, Client, Config, Runtime, Transport};

use crate::{Fault, Lab, LabConfig, LogStats, PathMatch, Step};

/// `Err(message)` unless `cond`.
macro_rules! ensure {
    ($cond:expr, $($why:tt)+) => {
        if !$cond {
            return Err(format!($($why)+));
        }
    };
}

fn get(url: String) -> Result<http::Request<Bytes>, String> {
    http::Request::get(url)
        .body(Bytes::new())
        .map_err(|e| e.to_string())
}

/// The scenario above through `Client::<R, T>` with `transport` and the
/// default config; `Err` says what went wrong.
///
/// # Errors
///
/// A lab that cannot start, an item that failed, B's items held back
/// (2.5 s or more for two rounds of 150 ms), or A asked again inside its
/// cool-down.
pub async fn a_429_from_one_origin_never_holds_back_another<R, T>(
    transport: T,
) -> Result<(), String>
where
    R: Runtime,
    T: Transport,
    T::Sending: Unpin,
{
    let start = |config: LabConfig| Lab::start(config).map_err(|e| format!("lab: {e}"));
    let a = start(LabConfig::default().script(
        "/items/a",
        vec![Step::with_retry_after(429, Duration::from_secs(5))],
    ))?;
    let b = start(LabConfig::default().fault(
        PathMatch::prefix("/items"),
        Fault::Slow(Duration::from_millis(150)),
    ))?;
    // A first (its 429 comes back long before any of B's answers), then
    // A and B mixed: 3 items for A, 6 for B, in a window of 4 × 4 items.
    let mut requests = vec![get(a.url("/items/a"))?];
    let mut is_a = vec![true];
    for i in 0..8 {
        let for_a = i % 4 == 3;
        is_a.push(for_a);
        requests.push(get(if for_a {
            a.url("/items/a")
        } else {
            b.url(&format!("/items/{i}"))
        })?);
    }
    let client =
        Client::<R, T>::with_transport(transport, Config::default()).map_err(|e| e.to_string())?;
    let started = Instant::now();
    let mut stream = client
        .batch_stream(requests, BatchOrder::Completion)
        .map_err(|e| e.to_string())?;
    let mut b_done = None;
    let mut ended = 0;
    let mut b_left = is_a.iter().filter(|a| !**a).count();
    while let Some((i, result)) = R::settle(stream.next_result()).await {
        ensure!(result.is_ok(), "item {i}: {result:?}");
        ended += 1;
        if !is_a[i] {
            b_left -= 1;
            if b_left == 0 {
                b_done = Some(started.elapsed());
            }
        }
        ensure!(
            started.elapsed() < Duration::from_secs(20),
            "the batch ran over 20 s"
        );
    }
    ensure!(ended == is_a.len(), "{ended} of {} items ended", is_a.len());
    // B's six items, 150 ms each at concurrency 4: two rounds, far below A's 5 s.
    let Some(b_done) = b_done else {
        return Err("B's items never all ended".into());
    };
    eprintln!("B's items all ended after {b_done:?}");
    ensure!(
        b_done < Duration::from_millis(2500),
        "B's items waited {b_done:?} (for A's cool-down?)"
    );
    ensure!(b.log().len() == 6, "B saw {} requests", b.log().len());
    // A: one 429, then every later request at least 5 s after it was answered.
    let log = a.log();
    ensure!(log.count_429() == 1, "{log:?}");
    ensure!(
        log.len() == 4,
        "A saw {} requests: each A item once, the 429'd one twice",
        log.len()
    );
    let Some(answered) = log[0].completed else {
        return Err("A's first request has no completion time".into());
    };
    for e in &log[1..] {
        ensure!(
            e.arrived >= answered + Duration::from_secs(5),
            "A asked again {:?} after its 429",
            e.arrived - answered
        );
    }
    Ok(())
}
