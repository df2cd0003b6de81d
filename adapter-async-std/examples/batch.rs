//! A paced batch on smol: 20 requests to a loopback lab that allows 5 per
//! 500 ms and answers a bare 429 past that (no `Retry-After`, no
//! `RateLimit` headers). polite's adaptive pace learns the rate from the
//! refusals; every item ends inside the one deadline. Ctrl-C cancels what
//! is left.
//!
//! `cargo run -p polite-async-io --example batch`

use std::time::{Duration, Instant};

use bytes::Bytes;
use polite_async_io::{CancelToken, Client, Config, cancel_on_ctrl_c};
use polite_lab::{Lab, LabConfig, LogStats, Quota, RetryAfterStyle};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let lab = Lab::start(
        LabConfig::default()
            .quota(Quota::fixed(5, Duration::from_millis(500)))
            .retry_after_style(RetryAfterStyle::Omitted)
            .ratelimit_headers(false),
    )?;
    let client = Client::with_config(Config {
        timeout: Duration::from_secs(60),
        ..Config::default()
    })?;
    let token = cancel_on_ctrl_c(CancelToken::new())?;
    let requests = (0..20)
        .map(|i| http::Request::get(lab.url(&format!("/items/{i}"))).body(Bytes::new()))
        .collect::<Result<Vec<_>, _>>()?;
    let started = Instant::now();
    let results = smol::block_on(client.batch_cancellable(requests, &token))?;
    let ok = results.iter().filter(|r| r.is_ok()).count();
    println!(
        "{ok}/{} succeeded in {:.1?}; the server saw {} requests, {} × 429",
        results.len(),
        started.elapsed(),
        lab.log().len(),
        lab.log().count_429()
    );
    Ok(())
}
