//! polite in a reqwest-middleware stack: an existing
//! `client.get(url).send().await` call site, unchanged, against a loopback
//! lab that answers 503 with `Retry-After: 1` once, then 200. polite waits
//! the server's second and the call succeeds; a 404 comes back as a plain
//! reqwest call would return it; a call with its own 1 s budget against a
//! `Retry-After: 5` ends at once with the error.
//!
//! `cargo run -p polite-tokio --example middleware`

use std::time::{Duration, Instant};

use polite_lab::{Lab, LabConfig, Step};
use polite_tokio::{CallOptions, Client, Config, NoTransport, Observed, Outcome, PoliteMiddleware};
use reqwest_middleware::ClientBuilder;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let lab = Lab::start(
        LabConfig::default()
            .script(
                "/items/1",
                vec![
                    Step::with_retry_after(503, Duration::from_secs(1)),
                    Step::Normal,
                ],
            )
            .script("/missing", vec![Step::status(404)])
            .script(
                "/busy",
                vec![Step::with_retry_after(503, Duration::from_secs(5))],
            ),
    )?;

    // `PoliteMiddleware::new(Config::default())?` is all it takes; this one
    // is built from a client with an observer, to print each attempt.
    let polite = Client::with_transport(NoTransport, Config::default())?.observe(|seen| {
        if let Observed::Record(r) = seen {
            match r.next {
                Some(next) => println!(
                    "  attempt {}: {}, next in {:?}",
                    r.id.attempt, r.reply, next.delay
                ),
                None => println!("  attempt {}: {}", r.id.attempt, r.reply),
            }
        }
    });
    // Redirects followed by polite (a hop to another origin drops every
    // header the caller set), not by reqwest.
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let client = ClientBuilder::new(http)
        .with(PoliteMiddleware::from_client(polite))
        .build();

    let started = Instant::now();
    let response = client.get(lab.url("/items/1")).send().await?;
    println!(
        "{} after {:.1?}: {}",
        response.status(),
        started.elapsed(),
        response.text().await?
    );

    let missing = client.get(lab.url("/missing")).send().await?;
    println!(
        "{} (polite's outcome: {})",
        missing.status(),
        missing
            .extensions()
            .get::<Outcome>()
            .map_or("-".into(), ToString::to_string)
    );

    let started = Instant::now();
    let busy = client
        .get(lab.url("/busy"))
        .with_extension(CallOptions::new().timeout(Duration::from_secs(1)))
        .send()
        .await;
    match busy {
        Ok(r) => println!("{}", r.status()),
        Err(e) => println!("gave up after {:.1?}: {e}", started.elapsed()),
    }
    println!("the lab saw {} requests", lab.log().len());
    Ok(())
}
