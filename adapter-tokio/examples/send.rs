//! One logical request on tokio against a loopback lab that answers 503
//! with `Retry-After: 1` once, then 200: polite waits the server's second
//! and succeeds; Ctrl-C cancels the call.
//!
//! `cargo run -p polite-tokio --example send`

use std::time::{Duration, Instant};

use bytes::Bytes;
use polite_lab::{Lab, LabConfig, Step};
use polite_tokio::{CancellationToken, Client, Observed, cancel_on_ctrl_c};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let lab = Lab::start(LabConfig::default().script(
        "/items/1",
        vec![
            Step::with_retry_after(503, Duration::from_secs(1)),
            Step::Normal,
        ],
    ))?;
    let client = Client::new().observe(|seen| {
        if let Observed::Record(r) = seen {
            match r.next {
                Some(next) => println!(
                    "attempt {}: {}, next in {:?}",
                    r.id.attempt, r.reply, next.delay
                ),
                None => println!("attempt {}: {}", r.id.attempt, r.reply),
            }
        }
    });
    let token = cancel_on_ctrl_c(CancellationToken::new())?;
    let started = Instant::now();
    let request = http::Request::get(lab.url("/items/1")).body(Bytes::new())?;
    let response = client.send_cancellable(request, &token).await?;
    println!(
        "{} after {:.1?}: {}",
        response.status(),
        started.elapsed(),
        String::from_utf8_lossy(response.body())
    );
    Ok(())
}
