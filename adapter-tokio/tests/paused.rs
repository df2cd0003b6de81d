//! polite-tokio on paused tokio time with an in-memory transport: long waits
//! complete instantly and match the core simulator step for step.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::Fake;
use polite_core::policy::Jitter;
use polite_core::{Method, Outcome, RequestId, RequestInfo, RetryMachine, RetryPolicy, SplitMix64};
use polite_testing::{Scripted, Simulator};
use polite_tokio::{BoxSending, CancellationToken, Client, Config, Error, Transport};

fn get() -> http::Request<Bytes> {
    http::Request::get("http://127.0.0.1:9/items/1")
        .body(Bytes::new())
        .unwrap()
}

fn quiet_policy() -> RetryPolicy {
    let mut p = RetryPolicy::default();
    p.backoff.jitter = Jitter::None;
    p.max_retries.rate_limited = 10;
    p
}

#[tokio::test(start_paused = true)]
async fn an_hour_of_waiting_runs_instantly_and_matches_the_core_simulator() {
    let script = [
        (503, None),
        (429, Some("50")),
        (503, None),
        (429, Some("59")),
        (429, Some("45")),
        (502, None),
        (200, None),
    ];
    let latency = Duration::from_millis(20);
    let fake = Fake::new(&script, latency);
    let config = Config {
        retry: quiet_policy(),
        timeout: Duration::from_secs(3600),
        ..Config::default()
    };
    let client = Client::with_transport(fake.clone(), config).unwrap();
    let wall = std::time::Instant::now();
    let t0 = tokio::time::Instant::now().into_std();
    let resp = client.send(get()).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        wall.elapsed() < Duration::from_secs(5),
        "paused time runs instantly"
    );

    // The core simulator, same policy and script, same latencies.
    let machine = RetryMachine::new(
        quiet_policy(),
        RequestInfo::new(RequestId(1), Method::Get),
        SplitMix64::new(0),
        t0,
        Duration::from_secs(3600),
    )
    .unwrap();
    let replies = script.iter().map(|(s, ra)| {
        let r = Scripted::status(*s).after(latency);
        match ra {
            Some(v) => r.retry_after(*v),
            None => r,
        }
    });
    let trace = Simulator::new(t0).replies(replies).run(machine).unwrap();
    assert_eq!(trace.outcome, Outcome::Succeeded { status: 200 });
    let expected: Vec<Duration> = trace.sends().map(|(t, _)| t - t0).collect();
    let actual: Vec<Duration> = fake.sends().iter().map(|t| *t - t0).collect();
    assert_eq!(actual, expected);
    assert!(*actual.last().unwrap() > Duration::from_secs(150));
}

#[tokio::test(start_paused = true)]
async fn cancel_during_a_30s_backoff_returns_at_once() {
    let fake = Fake::new(&[(503, Some("30")), (200, None)], Duration::from_millis(5));
    let config = Config {
        timeout: Duration::from_secs(120),
        ..Config::default()
    };
    let client = Client::with_transport(fake.clone(), config).unwrap();
    let token = CancellationToken::new();
    let t0 = tokio::time::Instant::now();
    let canceller = {
        let token = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(3)).await;
            token.cancel();
        })
    };
    let err = client.send_cancellable(get(), &token).await.unwrap_err();
    canceller.await.unwrap();
    assert_eq!(err.outcome(), Some(Outcome::Cancelled));
    // Returned when the cancel came (3 s), not at the end of the 30 s wait.
    assert_eq!(t0.elapsed(), Duration::from_secs(3));
    assert_eq!(fake.sends().len(), 1);
}

/// SPEC §2.3 through polite-tokio's own token: a `CancellationToken`
/// cancelled before the call sends nothing at all (send, wait and batch),
/// and each ends `Cancelled` at once.
#[tokio::test(start_paused = true)]
async fn a_token_cancelled_before_the_call_sends_nothing() {
    let fake = Fake::new(&[(200, None)], Duration::from_millis(5));
    let client = Client::with_transport(fake.clone(), Config::default()).unwrap();
    let token = CancellationToken::new();
    token.cancel();
    let t0 = tokio::time::Instant::now();
    let err = client.send_cancellable(get(), &token).await.unwrap_err();
    assert_eq!(err.outcome(), Some(Outcome::Cancelled));
    let mut job = polite_tokio::JsonJob::new("status");
    let err = client
        .wait_cancellable(get(), &mut job, &token)
        .await
        .unwrap_err();
    assert_eq!(err.outcome(), Some(Outcome::Cancelled));
    let items = client
        .batch_cancellable(vec![get(), get()], &token)
        .await
        .unwrap();
    assert!(
        items
            .iter()
            .all(|r| r.as_ref().unwrap_err().outcome() == Some(Outcome::Cancelled))
    );
    assert_eq!(t0.elapsed(), Duration::ZERO);
    assert!(fake.sends().is_empty(), "{:?}", fake.sends());
}

#[tokio::test(start_paused = true)]
async fn a_hanging_server_is_aborted_by_the_deadline() {
    let fake = Fake::new(&[], Duration::ZERO); // every send hangs
    let config = Config {
        timeout: Duration::from_secs(3),
        ..Config::default()
    };
    let client = Client::with_transport(fake, config).unwrap();
    let t0 = tokio::time::Instant::now();
    let err = client.send(get()).await.unwrap_err();
    assert_eq!(err.outcome(), Some(Outcome::TimedOut { needed: None }));
    assert!(t0.elapsed() <= Duration::from_secs(3) + Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn final_answers_come_back_with_the_error() {
    let fake = Fake::new(&[(404, None)], Duration::from_millis(5));
    let client = Client::with_transport(fake, Config::default()).unwrap();
    let err = client.send(get()).await.unwrap_err();
    assert_eq!(err.outcome(), Some(Outcome::NotRetryable { status: 404 }));
    assert_eq!(err.response().map(|r| r.status().as_u16()), Some(404));
    assert!(matches!(err, Error::Outcome { .. }));
}

#[tokio::test(start_paused = true)]
async fn a_post_without_idempotency_key_is_sent_once() {
    let fake = Fake::new(
        &[(503, None), (503, None), (201, None)],
        Duration::from_millis(5),
    );
    let client = Client::with_transport(fake.clone(), Config::default()).unwrap();
    let post = http::Request::post("http://127.0.0.1:9/items")
        .body(Bytes::from_static(b"{}"))
        .unwrap();
    let err = client.send(post).await.unwrap_err();
    assert!(matches!(err.outcome(), Some(Outcome::NotReplayable { .. })));
    assert_eq!(fake.sends().len(), 1);
    // With a key, it is retried.
    let keyed = http::Request::post("http://127.0.0.1:9/items")
        .header("Idempotency-Key", "abc")
        .body(Bytes::from_static(b"{}"))
        .unwrap();
    let resp = client.send(keyed).await.unwrap();
    assert_eq!(resp.status(), 201);
    assert_eq!(fake.sends().len(), 3);
}

/// A job server in tokio time: honours `waitSeconds` (answers when the job
/// is done or the wait elapses), and records every poll's wait parameter.
type Polls = Vec<(tokio::time::Instant, Option<u64>)>;

#[derive(Clone)]
struct JobServer {
    done_at: tokio::time::Instant,
    polls: Arc<Mutex<Polls>>,
}

impl Transport for JobServer {
    type Sending = BoxSending;
    fn send(&self, request: http::Request<Bytes>, _abort_at: Instant) -> BoxSending {
        let now = tokio::time::Instant::now();
        let wait = request.uri().query().and_then(|q| {
            q.split('&')
                .find_map(|kv| kv.strip_prefix("waitSeconds="))
                .and_then(|v| v.parse::<u64>().ok())
        });
        self.polls.lock().unwrap().push((now, wait));
        let done_at = self.done_at;
        Box::pin(async move {
            let held = now + Duration::from_secs(wait.unwrap_or(0));
            tokio::time::sleep_until(held.min(done_at.max(now))).await;
            let state = if tokio::time::Instant::now() >= done_at {
                "passed"
            } else {
                "running"
            };
            Ok(http::Response::new(Bytes::from(format!(
                r#"{{"status":"{state}"}}"#
            ))))
        })
    }
}

#[tokio::test(start_paused = true)]
async fn an_hour_of_long_polls_runs_instantly_with_one_request_per_25s() {
    let t0 = tokio::time::Instant::now();
    let done_at = t0 + Duration::from_secs(50 * 60);
    let server = JobServer {
        done_at,
        polls: Arc::default(),
    };
    let config = Config {
        timeout: Duration::from_secs(3600),
        ..Config::default()
    };
    let client = Client::with_transport(server.clone(), config).unwrap();
    let wall = std::time::Instant::now();
    let done = client
        .wait(
            http::Request::get("http://127.0.0.1:9/runs/1")
                .body(Bytes::new())
                .unwrap(),
            &mut polite_tokio::JsonJob::new("status"),
        )
        .await
        .unwrap();
    assert_eq!(done.state, "passed");
    assert!(
        wall.elapsed() < Duration::from_secs(5),
        "paused time runs instantly"
    );
    // Seen the instant the job ended (virtual time), with one long poll per 25 s.
    assert_eq!(tokio::time::Instant::now(), done_at);
    let polls = server.polls.lock().unwrap();
    assert_eq!(polls.len(), 3000 / 25, "{} polls", polls.len());
    for (at, wait) in polls.iter() {
        let remaining = (t0 + Duration::from_secs(3600)).saturating_duration_since(*at);
        assert!(
            wait.is_some_and(|w| w <= 25 && w <= remaining.as_secs()),
            "{wait:?}"
        );
    }
}
