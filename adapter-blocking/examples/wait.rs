//! Waiting for a remote job from a plain synchronous program: a loopback
//! lab runs job `j1` for 2 s; polite long-polls it (one request sees the
//! result as soon as it exists) and hands back the terminal state. Ctrl-C
//! cancels the wait.
//!
//! `cargo run -p polite-blocking --example wait`

use std::time::{Duration, Instant};

use bytes::Bytes;
use polite_blocking::{CancelToken, Client, JsonJob, cancel_on_ctrl_c};
use polite_lab::{JobState, Lab, LabConfig, LogStats};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let lab = Lab::start(LabConfig::default().job("j1", Duration::from_secs(2), JobState::Passed))?;
    let client = Client::new();
    let token = cancel_on_ctrl_c(CancelToken::new())?;
    let started = Instant::now();
    let job = http::Request::get(lab.url("/runs/j1")).body(Bytes::new())?;
    let done = client.wait_cancellable(job, &mut JsonJob::new("status"), &token)?;
    println!(
        "job ended {} after {:.1?}, {} request(s), {} × 429",
        done.state,
        started.elapsed(),
        lab.log().len(),
        lab.log().count_429()
    );
    Ok(())
}
