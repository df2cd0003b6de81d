//! `polite demo`: a loopback lab, a naive client and polite side by side.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use polite_blocking::{Client, Config, JsonJob, Throttle, UreqTransport};
use polite_lab::{
    Fault, JobState, Lab, LabConfig, LabHandle, LogStats, PathMatch, Quota, RetryAfterStyle,
};

use crate::request::Usage;

/// One row of the table.
struct Row {
    scenario: &'static str,
    client: &'static str,
    requests: usize,
    refused: usize,
    time: Duration,
    overshoot: Option<Duration>,
    result: String,
}

fn lab(config: LabConfig) -> Result<LabHandle, Usage> {
    Lab::start(config).map_err(|e| Usage(format!("cannot start the lab: {e}")))
}

fn polite(config: Config) -> Result<Client<UreqTransport>, Usage> {
    Client::with_transport(UreqTransport::default(), config).map_err(|e| Usage(e.to_string()))
}

fn get(url: String) -> http::Request<Bytes> {
    let mut r = http::Request::new(Bytes::new());
    if let Ok(u) = url.parse() {
        *r.uri_mut() = u;
    }
    r
}

/// A plain ureq agent, as people write it: no retries, maybe a timeout.
fn naive_agent(timeout: Option<Duration>) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(timeout)
        .build()
        .into()
}

fn naive_status(agent: &ureq::Agent, url: &str) -> Result<(u16, String), String> {
    let mut resp = agent.get(url).call().map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let body = resp.body_mut().read_to_string().unwrap_or_default();
    Ok((status, body))
}

/// A lab made from `config`, whose `/items/1` .. `/items/{n}` `threads`
/// threads take as fast as they can, one GET each, no retry.
fn naive_items(
    scenario: &'static str,
    client: &'static str,
    config: LabConfig,
    n: usize,
    threads: usize,
) -> Result<Row, Usage> {
    let lab = lab(config)?;
    let agent = naive_agent(Some(Duration::from_secs(10)));
    let next = Arc::new(AtomicUsize::new(1));
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            let (agent, next, lab) = (&agent, Arc::clone(&next), &lab);
            s.spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i > n {
                        break;
                    }
                    let _ = naive_status(agent, &lab.url(&format!("/items/{i}")));
                }
            });
        }
    });
    let time = start.elapsed();
    let log = lab.log();
    Ok(Row {
        scenario,
        client,
        requests: log.len(),
        refused: log.count_429(),
        time,
        overshoot: None,
        result: format!("{} of {n} ok", log.count_status(200)),
    })
}

/// A lab made from `config`, whose `/items/1` .. `/items/{n}` polite takes
/// in one `batch`.
fn polite_items(
    scenario: &'static str,
    client: &'static str,
    config: LabConfig,
    n: usize,
    polite_config: Config,
) -> Result<Row, Usage> {
    let lab = lab(config)?;
    let batcher = polite(polite_config)?;
    let start = Instant::now();
    let requests = (1..=n)
        .map(|i| get(lab.url(&format!("/items/{i}"))))
        .collect();
    let results = batcher.batch(requests).map_err(|e| Usage(e.to_string()))?;
    let time = start.elapsed();
    let ok = results.iter().filter(|r| r.is_ok()).count();
    let log = lab.log();
    Ok(Row {
        scenario,
        client,
        requests: log.len(),
        refused: log.count_429(),
        time,
        overshoot: None,
        result: format!("{ok} of {n} ok"),
    })
}

/// (a) SPEC §4: quota 3 per 500 ms, 15 ms service time, 8 requests, 2 in flight.
fn pacing(rows: &mut Vec<Row>) -> Result<(), Usage> {
    const SCENARIO: &str = "pacing: 8 requests, quota 3/500ms";
    let config = || {
        LabConfig::default()
            .quota(Quota::fixed(3, Duration::from_millis(500)))
            .fault(PathMatch::Any, Fault::Slow(Duration::from_millis(15)))
    };
    // Naive: two threads take the 8 URLs as fast as they can.
    rows.push(naive_items(SCENARIO, "naive, 2 in flight", config(), 8, 2)?);
    rows.push(polite_items(
        SCENARIO,
        "polite, 2 in flight + 3/650ms",
        config(),
        8,
        Config {
            timeout: Duration::from_secs(10),
            concurrency: 2,
            throttle: Some(Throttle::new(3, Duration::from_millis(650))),
            ..Config::default()
        },
    )?);
    Ok(())
}

/// (b) SPEC §4.1: a quota of 10 per second that answers bare 429s (no
/// Retry-After, no RateLimit headers), like nginx `limit_req`; 40 items,
/// 4 in flight.
fn nohints(rows: &mut Vec<Row>) -> Result<(), Usage> {
    const SCENARIO: &str = "no hints: 40 items, quota 10/s";
    let config = || {
        LabConfig::default()
            .quota(Quota::fixed(10, Duration::from_secs(1)))
            .retry_after_style(RetryAfterStyle::Omitted)
    };
    rows.push(naive_items(
        SCENARIO,
        "naive, 4 in flight",
        config(),
        40,
        4,
    )?);
    // `polite batch` with no flags: --rate auto, 4 in flight (the budget is
    // 30 s here, not the batch's 10 minutes, to keep the demo short).
    rows.push(polite_items(
        SCENARIO,
        "polite batch, no flags (auto)",
        config(),
        40,
        Config {
            timeout: Duration::from_secs(30),
            ..Config::default()
        },
    )?);
    Ok(())
}

/// (c) A job that ends 5.5 s after the first look.
fn wait(rows: &mut Vec<Row>) -> Result<(), Usage> {
    let finishes = Duration::from_millis(5500);
    let config = |long_poll: bool| {
        LabConfig::default()
            .job("j1", finishes, JobState::Passed)
            .long_poll(long_poll)
    };
    // Naive: poll every second.
    let naive = lab(config(true))?;
    let agent = naive_agent(Some(Duration::from_secs(10)));
    let start = Instant::now();
    let mut state = String::new();
    for _ in 0..30 {
        if let Ok((200, body)) = naive_status(&agent, &naive.url("/runs/j1"))
            && body.contains("\"passed\"")
        {
            state = "passed".into();
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let time = start.elapsed();
    rows.push(Row {
        scenario: "wait: job ends at 5.5s",
        client: "naive, poll every 1s",
        requests: naive.log().len(),
        refused: naive.log().count_429(),
        time,
        overshoot: None,
        result: format!("{state}, seen {:.0?} late", time.saturating_sub(finishes)),
    });

    for (long_poll, name) in [
        (true, "polite, long poll"),
        (false, "polite, server w/o long poll"),
    ] {
        let lab = lab(config(long_poll))?;
        let client = polite(Config {
            timeout: Duration::from_secs(30),
            ..Config::default()
        })?;
        let start = Instant::now();
        let done = client.wait(get(lab.url("/runs/j1")), &mut JsonJob::new("status"));
        let time = start.elapsed();
        rows.push(Row {
            scenario: "wait: job ends at 5.5s",
            client: name,
            requests: lab.log().len(),
            refused: lab.log().count_429(),
            time,
            overshoot: None,
            result: match done {
                Ok(d) => format!(
                    "{}, seen {:.0?} late",
                    d.state,
                    time.saturating_sub(finishes)
                ),
                Err(e) => e.to_string(),
            },
        });
    }
    Ok(())
}

/// (d) A server that accepts and never answers; the caller's budget is 3 s.
fn hang(rows: &mut Vec<Row>) -> Result<(), Usage> {
    let budget = Duration::from_secs(3);
    let config = || LabConfig::default().fault(PathMatch::Any, Fault::Hang);
    // Naive: "timeout 3 s" per attempt, 3 attempts (a common configuration).
    let naive = lab(config())?;
    let agent = naive_agent(Some(budget));
    let start = Instant::now();
    let mut last = String::new();
    for _ in 0..3 {
        match naive_status(&agent, &naive.url("/items/1")) {
            Ok((s, _)) => {
                last = format!("HTTP {s}");
                break;
            }
            Err(e) if e.contains("timeout") => last = "gave up: 3 timeouts".into(),
            Err(e) => last = format!("error: {}", e.chars().take(40).collect::<String>()),
        }
    }
    let time = start.elapsed();
    rows.push(Row {
        scenario: "hang: 3s budget",
        client: "naive, 3s timeout x 3 tries",
        requests: naive.log().len(),
        refused: 0,
        time,
        overshoot: Some(time.saturating_sub(budget)),
        result: last,
    });

    let lab = lab(config())?;
    let client = polite(Config {
        timeout: budget,
        ..Config::default()
    })?;
    let start = Instant::now();
    let result = client.send(get(lab.url("/items/1")));
    let time = start.elapsed();
    rows.push(Row {
        scenario: "hang: 3s budget",
        client: "polite, --timeout 3s",
        requests: lab.log().len(),
        refused: 0,
        time,
        overshoot: Some(time.saturating_sub(budget)),
        result: match result {
            Ok(r) => format!("HTTP {}", r.status()),
            Err(e) => e.to_string(),
        },
    });
    Ok(())
}

fn print(rows: &[Row]) {
    println!(
        "{:<34} {:<31} {:>8} {:>5} {:>9} {:>9}  result",
        "scenario", "client", "requests", "429s", "time", "overshoot"
    );
    println!("{}", "-".repeat(120));
    let mut last = "";
    for r in rows {
        let scenario = if r.scenario == last { "" } else { r.scenario };
        last = r.scenario;
        println!(
            "{:<34} {:<31} {:>8} {:>5} {:>9} {:>9}  {}",
            scenario,
            r.client,
            r.requests,
            r.refused,
            format!("{:.2?}", r.time),
            r.overshoot
                .map_or_else(|| "-".to_owned(), |o| format!("{o:.2?}")),
            r.result
        );
    }
}

/// Runs the demo (all parts, or one).
pub(crate) fn run(only: Option<&str>) -> Result<u8, Usage> {
    type Part = fn(&mut Vec<Row>) -> Result<(), Usage>;
    let parts: [(&str, Part); 4] = [
        ("pacing", pacing),
        ("nohints", nohints),
        ("wait", wait),
        ("hang", hang),
    ];
    if let Some(o) = only
        && !parts.iter().any(|(n, _)| *n == o)
    {
        return Err(Usage(format!(
            "--only: {} is not one of pacing, nohints, wait, hang",
            crate::redact::echo(crate::redact::Input::Text, o)
        )));
    }
    println!(
        "polite demo: a loopback lab server (127.0.0.1), a naive client and polite, side by side.\n"
    );
    let mut rows = Vec::new();
    for (name, part) in parts {
        if only.is_none_or(|o| o == name) {
            eprintln!("running {name} ...");
            part(&mut rows)?;
        }
    }
    println!();
    print(&rows);
    Ok(crate::exit::OK)
}
