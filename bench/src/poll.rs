//! Requests and detection latency of a wait for a remote job that ends at
//! t ≈ 6 s (scaled down from minutes), in real time on loopback:
//!
//! * polite-tokio `wait`, lab with long poll (`?waitSeconds=N`);
//! * polite-tokio `wait`, lab *without* long poll (400 `VALIDATION_ERROR`:
//!   polite falls back to backoff polls 2 s, 4 s, 8 s, 15 s, ... ±20 %);
//! * a fixed 1 s poll loop built with `backon` (`ConstantBuilder` + `retry`
//!   on tokio + reqwest, retrying while the job is `running`).
//!
//! Run `i` of each variant waits for its own job that turns `passed`
//! `6 s + i × 0.1 s` after its first request (so the job's end falls at a
//! different phase of a 1 s poll grid each time); all runs of all variants
//! run at once. Detection latency = when the caller has the terminal state −
//! when the job turned terminal (from the lab's log: first request + the
//! job's duration). The limit is 1 request and 0 ms.

use std::time::{Duration, Instant};

use backon::{ConstantBuilder, Retryable as _};
use polite_lab::{JobState, LabConfig, LabHandle, LogStats as _};
use polite_tokio::{Client, Config, JsonJob, ReqwestTransport};

use crate::stats::{Dist, Table, median, num, ratio};
use crate::{Size, get, lab, signed_ms};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    LongPoll,
    Fallback,
    Fixed1s,
}

impl Variant {
    const ALL: [Variant; 3] = [Variant::LongPoll, Variant::Fallback, Variant::Fixed1s];

    fn name(self) -> &'static str {
        match self {
            Variant::LongPoll => "polite `wait`, long poll",
            Variant::Fallback => "polite `wait`, backoff fallback (no long poll)",
            Variant::Fixed1s => "backon fixed 1 s poll loop (reqwest)",
        }
    }

    fn job(self, i: usize) -> String {
        let prefix = match self {
            Variant::LongPoll => "lp",
            Variant::Fallback => "bo",
            Variant::Fixed1s => "fx",
        };
        format!("{prefix}{i}")
    }
}

#[derive(Debug)]
enum PeerError {
    Running,
    Failed,
}

/// One GET of the job; `Err(Running)` while it runs (backon retries that).
async fn peer_poll_once(http: reqwest::Client, url: String) -> Result<String, PeerError> {
    let resp = http
        .get(&url)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .map_err(|_| PeerError::Failed)?;
    let body = resp.bytes().await.map_err(|_| PeerError::Failed)?;
    let v: serde_json::Value = serde_json::from_slice(&body).map_err(|_| PeerError::Failed)?;
    match v.get("status").and_then(serde_json::Value::as_str) {
        Some("running") => Err(PeerError::Running),
        Some(state) => Ok(state.to_owned()),
        None => Err(PeerError::Failed),
    }
}

/// The backon loop a user would write: poll every second while running.
async fn peer_wait(http: reqwest::Client, url: String, max_polls: usize) -> bool {
    let poll = || peer_poll_once(http.clone(), url.clone());
    poll.retry(
        ConstantBuilder::default()
            .with_delay(Duration::from_secs(1))
            .with_max_times(max_polls),
    )
    .when(|e| matches!(e, PeerError::Running))
    .await
    .is_ok_and(|s| s == "passed")
}

async fn polite_wait(http: reqwest::Client, url: String, timeout: Duration, seed: u64) -> bool {
    let config = Config {
        timeout,
        seed: Some(seed),
        ..Config::default()
    };
    let client = Client::with_transport(ReqwestTransport::new(http), config).expect("valid config");
    client
        .wait(get(&url), &mut JsonJob::new("status"))
        .await
        .is_ok_and(|done| done.state == "passed")
}

/// Runs the suite.
#[must_use]
pub fn run(size: Size) -> Vec<Table> {
    let reps = size.pick(10, 2);
    let job = size.pick(Duration::from_secs(6), Duration::from_millis(300));
    let phase = size.pick(Duration::from_millis(100), Duration::from_millis(50));
    let timeout = size.pick(Duration::from_secs(30), Duration::from_secs(5));
    let finishes = |i: usize| job + phase * u32::try_from(i).unwrap_or(0);

    let make_lab = |v: Variant| {
        let mut c = LabConfig::default().long_poll(v != Variant::Fallback);
        for i in 0..reps {
            c = c.job(v.job(i), finishes(i), JobState::Passed);
        }
        lab(c)
    };
    let labs: Vec<(Variant, LabHandle)> = Variant::ALL.iter().map(|&v| (v, make_lab(v))).collect();

    let rt = crate::tokio_runtime();
    let ends: Vec<(Variant, usize, Instant, bool)> = rt.block_on(async {
        let http = crate::reqwest_client();
        let mut set = tokio::task::JoinSet::new();
        for (v, lab) in &labs {
            for i in 0..reps {
                let (v, url, http) = (*v, lab.url(&format!("/runs/{}", v.job(i))), http.clone());
                let bound = timeout + Duration::from_secs(10);
                set.spawn(async move {
                    let work = async {
                        match v {
                            Variant::LongPoll | Variant::Fallback => {
                                polite_wait(http, url, timeout, i as u64).await
                            }
                            Variant::Fixed1s => peer_wait(http, url, 60).await,
                        }
                    };
                    let ok = tokio::time::timeout(bound, work).await.unwrap_or(false);
                    (v, i, Instant::now(), ok)
                });
            }
        }
        let mut ends = Vec::new();
        while let Some(r) = set.join_next().await {
            ends.push(r.expect("task"));
        }
        ends
    });

    let mut t = Table::new(
        &format!(
            "Waiting for a job that ends at t ≈ {:.1} s ({} runs per variant, all at once)",
            job.as_secs_f64(),
            reps
        ),
        &[
            "variant",
            "requests p50",
            "requests max",
            "latency p50 ms",
            "latency p90 ms",
            "latency max ms",
            "requests vs polite long poll",
            "ok",
        ],
    );
    t.row(vec![
        "**limit**".into(),
        "1".into(),
        "1".into(),
        "0".into(),
        "0".into(),
        "0".into(),
        "–".into(),
        "–".into(),
    ]);
    let mut base_requests = f64::NAN;
    for (v, lab) in &labs {
        let log = lab.log();
        let mut requests = Vec::new();
        let mut latency = Vec::new();
        let mut ok = 0;
        for &(ev, i, end, good) in ends.iter().filter(|e| e.0 == *v) {
            debug_assert_eq!(ev, *v);
            let entries = log.for_job(&v.job(i));
            requests.push(entries.len() as f64);
            if let Some(first) = entries.first() {
                latency.push(signed_ms(end, first.arrived + finishes(i)));
            }
            ok += usize::from(good);
        }
        let r = Dist::of(requests.iter().copied());
        let l = Dist::of(latency);
        if *v == Variant::LongPoll {
            base_requests = r.p50;
        }
        t.row(vec![
            v.name().into(),
            num(r.p50, 0),
            num(r.max, 0),
            num(l.p50, 1),
            num(l.p90, 1),
            num(l.max, 1),
            ratio(median(requests), base_requests),
            format!("{ok}/{reps}"),
        ]);
    }
    t.note(format!(
        "Run i's job turns `passed` {} s + i × {} ms after its first request. Latency: when the \
         caller has the state − when the job turned terminal. Timeout per wait {} s.",
        job.as_secs_f64(),
        phase.as_millis(),
        timeout.as_secs()
    ));
    vec![t]
}
