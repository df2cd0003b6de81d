//! `polite_client::Client` on a runtime of the test's own: virtual time
//! (sleeps advance a thread-local clock at once), calls that block, and a
//! scripted in-memory transport. What every adapter inherits: retries by
//! class, the observer, the shared pace across clones, cancel, the wait's
//! fallback notice, batch order, and configuration errors.

mod common;

use std::future::{Ready, ready};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Header, Script, Sim, get, now};
use polite_client::api::{
    Jitter, Outcome, Reply, RetryBucket, RetryClass, RetryCosts, RetryPolicy, TransportErrorKind,
};
use polite_client::{
    BatchOrder, CallOptions, CancelToken, Classifier, Client, Config, Error, HttpAnswer, JsonJob,
    Observed, PaceKey, Runtime, Session, Throttle, Transport, TransportError,
};

fn quiet() -> Config {
    let mut retry = RetryPolicy::default();
    retry.backoff.jitter = Jitter::None;
    Config {
        retry,
        seed: Some(1),
        ..Config::default()
    }
}

#[test]
fn send_retries_by_class_and_the_observer_sees_every_attempt() {
    let script = Script::of(&[
        (503, &[], ""),
        (429, &[("retry-after", "3")], ""),
        (200, &[], "hi"),
    ]);
    let records = Arc::new(AtomicUsize::new(0));
    let client: Client<Sim, Script> = Client::with_transport(script.clone(), quiet())
        .unwrap()
        .observe({
            let records = Arc::clone(&records);
            move |seen| {
                if let Observed::Record(_) = seen {
                    records.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    let t0 = now();
    let resp = client.send(get("/a")).unwrap();
    assert_eq!(resp.body().as_ref(), b"hi");
    assert_eq!(records.load(Ordering::Relaxed), 3);
    let sent = script.sent();
    assert_eq!(sent.len(), 3);
    // The third send waited out the server's 3 s, not less.
    assert!(
        sent[2].0 - sent[1].0 >= Duration::from_secs(3),
        "{:?}",
        sent[2].0 - t0
    );
}

#[test]
fn clones_share_the_pace_but_an_observer_belongs_to_its_client() {
    let script = Script::of(&[(429, &[("retry-after", "5")], ""), (200, &[], "")]);
    let plain: Client<Sim, Script> = Client::with_transport(script.clone(), quiet()).unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let watched = plain.clone().observe({
        let seen = Arc::clone(&seen);
        move |_| {
            seen.fetch_add(1, Ordering::Relaxed);
        }
    });
    // A 429 with Retry-After: 5 on the watched clone's call ...
    assert!(watched.send(get("/a")).is_ok());
    let after_watched = seen.load(Ordering::Relaxed);
    assert!(
        after_watched >= 2,
        "the watched client's records reach its observer"
    );
    // ... and the plain clone's next send still waits for the shared cool-down.
    let first = script.sent()[0].0;
    assert!(plain.send(get("/b")).is_ok());
    assert_eq!(
        seen.load(Ordering::Relaxed),
        after_watched,
        "not the plain clone's records"
    );
    let last = script.sent().last().unwrap().0;
    assert!(last - first >= Duration::from_secs(5), "{:?}", last - first);
}

#[test]
fn a_token_cancelled_before_the_call_sends_nothing() {
    let script = Script::default();
    let client: Client<Sim, Script> = Client::with_transport(script.clone(), quiet()).unwrap();
    let token = CancelToken::new();
    Sim::cancel(&token);
    let err = client.send_cancellable(get("/a"), &token).unwrap_err();
    assert_eq!(err.outcome(), Some(Outcome::Cancelled));
    let results = client
        .batch_cancellable(vec![get("/a"), get("/b")], &token)
        .unwrap();
    assert!(
        results
            .iter()
            .all(|r| r.as_ref().unwrap_err().outcome() == Some(Outcome::Cancelled))
    );
    assert!(script.sent().is_empty());
}

#[test]
fn wait_falls_back_once_with_one_notice_and_hands_back_the_state() {
    let script = Script::of(&[
        (400, &[], r#"{"code":"VALIDATION_ERROR"}"#),
        (200, &[], r#"{"status":"running"}"#),
        (200, &[], r#"{"status":"done"}"#),
    ]);
    let notices = Arc::new(AtomicUsize::new(0));
    let client: Client<Sim, Script> = Client::with_transport(script.clone(), quiet())
        .unwrap()
        .observe({
            let notices = Arc::clone(&notices);
            move |seen| {
                if let Observed::Notice(_) = seen {
                    notices.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    let done = client
        .wait(get("/runs/1"), &mut JsonJob::new("status"))
        .unwrap();
    assert_eq!(done.state, "done");
    assert_eq!(notices.load(Ordering::Relaxed), 1);
    let sent = script.sent();
    assert!(sent[0].1.contains("waitSeconds="), "{sent:?}");
    assert!(!sent[1].1.contains("waitSeconds="), "{sent:?}");
}

/// polite owns the wait parameter (SPEC §3: a long poll never asks for more
/// than the remaining budget): a `waitSeconds=999` the caller left in the
/// URL is dropped, the long poll carries polite's one value, and after
/// the fallback no poll carries any. The caller's other parameters stay,
/// in order.
#[test]
fn a_wait_parameter_in_the_callers_url_is_replaced_not_repeated() {
    let script = Script::of(&[
        (200, &[], r#"{"status":"running"}"#),
        (400, &[], r#"{"code":"VALIDATION_ERROR"}"#),
        (200, &[], r#"{"status":"done"}"#),
    ]);
    let client: Client<Sim, Script> = Client::with_transport(script.clone(), quiet()).unwrap();
    let done = client
        .wait(
            get("/runs/1?a=1&waitSeconds=999&b=2&waitSeconds"),
            &mut JsonJob::new("status"),
        )
        .unwrap();
    assert_eq!(done.state, "done");
    let sent = script.sent();
    assert_eq!(sent.len(), 3, "{sent:?}");
    let first = &sent[0].1;
    assert_eq!(first.matches("waitSeconds").count(), 1, "{first}");
    let secs: u64 = first
        .rsplit_once("waitSeconds=")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or_else(|| panic!("no value in {first}"));
    assert!(secs <= quiet().timeout.as_secs(), "{first}");
    assert!(first.contains("?a=1&b=2&waitSeconds="), "{first}");
    // After the fallback: none at all, the caller's 999 included.
    assert!(!sent[2].1.contains("waitSeconds"), "{sent:?}");
    assert!(sent[2].1.ends_with("/runs/1?a=1&b=2"), "{sent:?}");
}

/// A batch item's `CallOptions`: `one_shot_body` is honoured (a 503 ends
/// `NotReplayable` after one send), and an item's own `timeout` or `retry`,
/// which a batch cannot honour per item (one deadline, the client's rules),
/// ends that item `InvalidRequest` without a send, saying why, instead of
/// running it silently under rules it did not ask for.
#[test]
fn a_batch_honours_a_one_shot_body_and_refuses_per_item_timeout_or_retry() {
    let script = Script::of(&[(503, &[], "busy"), (200, &[], "hi")]);
    let client: Client<Sim, Script> = Client::with_transport(script.clone(), quiet()).unwrap();
    let with = |path: &str, options: CallOptions| {
        let mut r = get(path);
        r.extensions_mut().insert(options);
        r
    };
    let results = client
        .batch(vec![
            with("/once", CallOptions::new().sent_once()),
            with(
                "/timeout",
                CallOptions::new().timeout(Duration::from_secs(1)),
            ),
            with("/retry", CallOptions::new().retry(RetryPolicy::default())),
            with("/labelled", CallOptions::new().label("fine")),
        ])
        .unwrap();
    let once = results[0].as_ref().unwrap_err();
    assert!(
        matches!(once.outcome(), Some(Outcome::NotReplayable { .. })),
        "{once:?}"
    );
    for (i, field) in [(1, "`timeout`"), (2, "`retry`")] {
        let e = results[i].as_ref().unwrap_err();
        assert_eq!(
            e.outcome(),
            Some(Outcome::Permanent {
                cause: TransportErrorKind::InvalidRequest
            }),
            "{e:?}"
        );
        let why = std::error::Error::source(e)
            .and_then(std::error::Error::source)
            .map(ToString::to_string)
            .unwrap_or_default();
        assert!(
            why.contains(field) && why.contains("batch cannot honour"),
            "{why}"
        );
    }
    assert_eq!(results[3].as_ref().unwrap().body(), "hi");
    let sent: Vec<String> = script.sent().into_iter().map(|(_, uri)| uri).collect();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(
        sent.iter()
            .all(|u| u.ends_with("/once") || u.ends_with("/labelled")),
        "{sent:?}"
    );
}

/// A transport whose server answers only after the caller's session has
/// moved on (a logout while the request is in flight): it bumps the
/// session, then answers `status` with `body`.
#[derive(Clone)]
struct LogoutInFlight {
    session: Session,
    bump: bool,
    sends: Arc<AtomicUsize>,
}

impl Transport for LogoutInFlight {
    type Sending = Ready<Result<http::Response<Bytes>, TransportError>>;
    fn send(&self, _: http::Request<Bytes>, _: Instant) -> Self::Sending {
        self.sends.fetch_add(1, Ordering::Relaxed);
        if self.bump {
            self.session.bump();
        }
        ready(Ok(http::Response::new(Bytes::from_static(
            br#"{"status":"done","secret":"the old account's"}"#,
        ))))
    }
}

/// SPEC §2.3: an answer that arrives after the caller's session moved on
/// is dropped, not delivered, even a success: `send` and `wait` end
/// `Stale` with no answer handed back, after one send; the same calls with
/// the session unchanged succeed; a batch item with a session is refused
/// unsent, saying why.
#[test]
fn an_answer_for_an_earlier_session_generation_is_dropped_even_a_success() {
    let session = Session::new();
    let options = CallOptions::new().session(&session);
    let with_session = |path: &str| {
        let mut r = get(path);
        r.extensions_mut().insert(options.clone());
        r
    };
    for bump in [true, false] {
        let transport = LogoutInFlight {
            session: session.clone(),
            bump,
            sends: Arc::new(AtomicUsize::new(0)),
        };
        let sends = Arc::clone(&transport.sends);
        let client: Client<Sim, LogoutInFlight> =
            Client::with_transport(transport, quiet()).unwrap();
        let sent = client.send(with_session("/me"));
        let waited = client.wait(with_session("/runs/1"), &mut JsonJob::new("status"));
        if bump {
            for e in [sent.unwrap_err(), waited.unwrap_err()] {
                assert_eq!(e.outcome(), Some(Outcome::Stale), "{e:?}");
                assert!(
                    matches!(e, Error::Outcome { response: None, .. }),
                    "the stale answer is not handed back: {e:?}"
                );
            }
        } else {
            assert!(sent.is_ok());
            assert_eq!(waited.unwrap().state, "done");
        }
        assert_eq!(sends.load(Ordering::Relaxed), 2, "one send per call");
    }
    let client: Client<Sim, Script> = Client::with_transport(Script::default(), quiet()).unwrap();
    let refused = client.batch(vec![with_session("/a")]).unwrap();
    let why = refused[0]
        .as_ref()
        .err()
        .and_then(std::error::Error::source)
        .and_then(std::error::Error::source)
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(why.contains("`session`"), "{why}");
}

/// The transport is asked to keep exactly the answers polite holds while
/// another attempt goes out (the 503 during the retry, the pending states
/// during the next poll), never the answer the call ends with.
#[test]
fn the_transport_keeps_only_answers_held_across_another_attempt() {
    let script = Script::of(&[(503, &[], "busy"), (200, &[], "hi")]);
    let client: Client<Sim, Script> = Client::with_transport(script.clone(), quiet()).unwrap();
    assert_eq!(client.send(get("/a")).unwrap().body(), "hi");
    assert_eq!(script.kept(), [Bytes::from_static(b"busy")]);

    let script = Script::of(&[
        (200, &[], r#"{"status":"queued"}"#),
        (200, &[], r#"{"status":"running"}"#),
        (200, &[], r#"{"status":"done"}"#),
    ]);
    let client: Client<Sim, Script> = Client::with_transport(script.clone(), quiet()).unwrap();
    let done = client
        .wait(get("/runs/1"), &mut JsonJob::new("status"))
        .unwrap();
    assert_eq!(done.state, "done");
    assert_eq!(
        script.kept(),
        [
            Bytes::from_static(br#"{"status":"queued"}"#),
            Bytes::from_static(br#"{"status":"running"}"#)
        ]
    );

    let script = Script::of(&[(200, &[], "at once")]);
    let client: Client<Sim, Script> = Client::with_transport(script.clone(), quiet()).unwrap();
    assert_eq!(client.send(get("/a")).unwrap().body(), "at once");
    assert!(script.kept().is_empty());

    // A batch: both items' 503s are held during their backoff, the second
    // arriving before any other send: both are kept, once each.
    let script = Script::of(&[(503, &[], "a"), (503, &[], "b")]);
    let client: Client<Sim, Script> = Client::with_transport(script.clone(), quiet()).unwrap();
    let results = client.batch(vec![get("/a"), get("/b")]).unwrap();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let mut kept = script.kept();
    kept.sort();
    assert_eq!(kept, [Bytes::from_static(b"a"), Bytes::from_static(b"b")]);
}

#[test]
fn batch_results_come_back_in_input_order() {
    let script = Script::of(&[(404, &[], ""), (200, &[], "")]);
    let client: Client<Sim, Script> = Client::with_transport(
        script,
        Config {
            concurrency: 1,
            ..quiet()
        },
    )
    .unwrap();
    let results = client.batch(vec![get("/a"), get("/b")]).unwrap();
    assert_eq!(
        results[0].as_ref().unwrap_err().outcome(),
        Some(Outcome::NotRetryable { status: 404 })
    );
    assert!(results[1].is_ok());
}

#[test]
fn a_configuration_that_makes_no_sense_is_an_error_not_a_panic() {
    let bad_param = Config {
        wait: polite_client::WaitConfig {
            wait_param: "wait seconds",
            ..Default::default()
        },
        ..quiet()
    };
    let err = Client::<Sim, Script>::with_transport(Script::default(), bad_param).unwrap_err();
    assert!(err.to_string().contains("wait_param"), "{err}");
    let no_sends = Config {
        throttle: Some(Throttle::new(0, Duration::from_secs(1))),
        ..quiet()
    };
    assert!(Client::<Sim, Script>::with_transport(Script::default(), no_sends).is_err());
    // The runtime's own transport: Client::new() with the default configuration.
    let client = Client::<Sim, Script>::new();
    assert_eq!(client.config(), &Config::default());
}

#[test]
fn a_429_from_one_origin_never_holds_back_another() {
    let script = Script::of(&[
        (429, &[("retry-after", "5")], ""),
        (200, &[], ""),
        (200, &[], ""),
    ]);
    let mut config = quiet();
    config.retry.max_retries.rate_limited = 0; // the first call ends at its 429
    let client: Client<Sim, Script> = Client::with_transport(script.clone(), config).unwrap();
    let t0 = now();
    assert!(client.send(get("/a")).is_err());
    // Another origin goes at once ...
    let other = http::Request::get("http://127.0.0.2:9/b")
        .body(Bytes::new())
        .unwrap();
    assert!(client.send(other).is_ok());
    // ... the same origin waits out the server's 5 s.
    assert!(client.send(get("/c")).is_ok());
    let sent = script.sent();
    assert_eq!(sent[1].0, t0, "{sent:?}");
    assert!(sent[2].0 - t0 >= Duration::from_secs(5), "{sent:?}");
}

#[test]
fn call_options_override_the_budget_the_retry_rules_and_the_pace_key() {
    let script = Script::of(&[(503, &[("retry-after", "20")], ""), (200, &[], "")]);
    let client: Client<Sim, Script> = Client::with_transport(script.clone(), quiet()).unwrap();
    let mut request = get("/a");
    request
        .extensions_mut()
        .insert(CallOptions::new().timeout(Duration::from_secs(2)));
    let t0 = now();
    let err = client.send(request).unwrap_err();
    // The server's 20 s do not fit the call's own 2 s: it ends at once.
    assert_eq!(now(), t0, "{err}");
    assert_eq!(script.sent().len(), 1);

    let mut retry = quiet().retry;
    retry.max_retries.server_error = 0;
    let script = Script::of(&[(503, &[], ""), (200, &[], "")]);
    let client: Client<Sim, Script> = Client::with_transport(script.clone(), quiet()).unwrap();
    let mut request = get("/a");
    request
        .extensions_mut()
        .insert(CallOptions::new().retry(retry));
    assert!(client.send(request).is_err(), "no retry for this call");
    assert_eq!(script.sent().len(), 1);

    // A wait keeps its own retry rules too (the client's waits share one
    // policy; a call with its own rules gets its own), and the next wait
    // without options is back on the client's.
    let script = Script::of(&[
        (503, &[], ""),
        (503, &[], ""),
        (200, &[], r#"{"status":"passed"}"#),
    ]);
    let client: Client<Sim, Script> = Client::with_transport(script.clone(), quiet()).unwrap();
    let mut request = get("/job");
    request
        .extensions_mut()
        .insert(CallOptions::new().retry(retry));
    let mut job = JsonJob::new("status");
    assert!(
        client.wait(request, &mut job).is_err(),
        "no retry for this wait"
    );
    assert_eq!(script.sent().len(), 1);
    let done = client.wait(get("/job"), &mut job).unwrap();
    assert_eq!(done.state, "passed");
    assert_eq!(script.sent().len(), 3, "the client's rules retried the 503");

    // Calls to one origin under two keys do not share a cool-down.
    let script = Script::of(&[(429, &[("retry-after", "5")], ""), (200, &[], "")]);
    let mut config = quiet();
    config.retry.max_retries.rate_limited = 0;
    let client: Client<Sim, Script> = Client::with_transport(script.clone(), config).unwrap();
    let keyed = |key: &str| {
        let mut r = get("/a");
        r.extensions_mut()
            .insert(CallOptions::new().pace_key(PaceKey::new(key.to_owned())));
        r
    };
    let t0 = now();
    assert!(client.send(keyed("tenant-1")).is_err());
    assert!(client.send(keyed("tenant-2")).is_ok());
    assert_eq!(script.sent()[1].0, t0);
}

/// The client's retry rules are checked once, when it is built; a call's
/// own rules are still checked when the call starts: a bad one is that
/// call's `Error::Policy` (nothing sent), and the next call without rules
/// of its own runs on the client's.
#[test]
fn retry_rules_are_checked_when_the_client_is_built_and_a_call_s_own_when_it_starts() {
    let mut bad = quiet().retry;
    bad.backoff.base = Duration::ZERO;
    let config = Config {
        retry: bad,
        ..quiet()
    };
    let err = Client::<Sim, Script>::with_transport(Script::default(), config).unwrap_err();
    assert!(matches!(err, polite_client::Error::Policy(_)), "{err}");
    assert!(err.to_string().contains("backoff.base"), "{err}");

    let script = Script::of(&[(503, &[], ""), (200, &[], ""), (200, &[], "")]);
    let client: Client<Sim, Script> = Client::with_transport(script.clone(), quiet()).unwrap();
    let with_bad_rules = || {
        let mut request = get("/a");
        request
            .extensions_mut()
            .insert(CallOptions::new().retry(bad));
        request
    };
    let err = client.send(with_bad_rules()).unwrap_err();
    assert!(matches!(err, polite_client::Error::Policy(_)), "{err}");
    assert!(script.sent().is_empty(), "{:?}", script.sent());
    // Given beside the request (middleware's way) as well.
    let options = CallOptions::new().retry(bad);
    let err = client
        .send_via_with(&script, get("/a"), &options)
        .unwrap_err();
    assert!(matches!(err, polite_client::Error::Policy(_)), "{err}");
    assert!(script.sent().is_empty(), "{:?}", script.sent());
    // A wait's own rules too.
    let mut job = JsonJob::new("status");
    let err = client.wait(with_bad_rules(), &mut job).unwrap_err();
    assert!(matches!(err, polite_client::Error::Policy(_)), "{err}");
    assert!(script.sent().is_empty(), "{:?}", script.sent());
    // The client's own rules: the 503 is retried.
    assert!(client.send(get("/a")).is_ok());
    assert_eq!(script.sent().len(), 2);
    // A call's own good rules are its own: no retry of anything.
    let mut none = quiet().retry;
    none.max_retries.server_error = 0;
    let script = Script::of(&[(503, &[], ""), (200, &[], "")]);
    let client: Client<Sim, Script> = Client::with_transport(script.clone(), quiet()).unwrap();
    let options = CallOptions::new().retry(none);
    assert!(client.send_via_with(&script, get("/a"), &options).is_err());
    assert_eq!(script.sent().len(), 1);
}

#[test]
fn the_retry_budget_is_shared_by_the_calls_to_one_origin() {
    // 30 tokens: two server-error retries (14 each), then none.
    let config = Config {
        retry_budget: Some(RetryBucket::new(30, RetryCosts::default())),
        ..quiet()
    };
    let answers: Vec<(u16, &[Header], &str)> = vec![(503, &[], ""); 20];
    let script = Script::of(&answers);
    let client: Client<Sim, Script> = Client::with_transport(script.clone(), config).unwrap();
    let first = client.send(get("/a")).unwrap_err();
    assert_eq!(
        first.outcome(),
        Some(Outcome::RetryBudgetExhausted {
            class: RetryClass::ServerError,
            last: Reply::Status(503)
        })
    );
    assert_eq!(
        script.sent().len(),
        3,
        "one send and the two retries the bucket paid for"
    );
    // The next call to the same origin finds the bucket empty: one attempt.
    assert!(client.send(get("/b")).is_err());
    assert_eq!(script.sent().len(), 4);
    // Without a budget every retry the policy allows is made.
    let script = Script::of(&answers);
    let client: Client<Sim, Script> = Client::with_transport(
        script.clone(),
        Config {
            retry_budget: None,
            ..quiet()
        },
    )
    .unwrap();
    assert!(client.send(get("/a")).is_err());
    assert_eq!(script.sent().len(), 5, "the policy's 4 retries");
}

#[test]
fn the_clients_classifier_reads_every_answer_of_every_call() {
    // A 400 whose header says "Throttling" is a rate-limited answer; its
    // Retry-After is honoured like a 429's.
    let throttling = Classifier::new(|a: &HttpAnswer| {
        (a.0.headers().get("x-error").map(|v| v.as_bytes()) == Some(b"Throttling"))
            .then_some(RetryClass::RateLimited)
    });
    let script = Script::of(&[
        (400, &[("x-error", "Throttling"), ("retry-after", "2")], ""),
        (200, &[], "ok"),
    ]);
    let config = Config {
        classify: Some(throttling.clone()),
        ..quiet()
    };
    let client: Client<Sim, Script> = Client::with_transport(script.clone(), config).unwrap();
    assert!(client.send(get("/a")).is_ok());
    let sent = script.sent();
    assert_eq!(sent.len(), 2);
    assert!(sent[1].0 - sent[0].0 >= Duration::from_secs(2));
    // In a batch too.
    let script = Script::of(&[(400, &[("x-error", "Throttling")], ""), (200, &[], "ok")]);
    let config = Config {
        classify: Some(throttling),
        concurrency: 1,
        ..quiet()
    };
    let client: Client<Sim, Script> = Client::with_transport(script.clone(), config).unwrap();
    let results = client.batch(vec![get("/a")]).unwrap();
    assert!(results[0].is_ok());
    assert_eq!(script.sent().len(), 2);
}

/// A source that counts how far it has been read.
struct Counted {
    next: usize,
    total: usize,
    read: Arc<AtomicUsize>,
}

impl Iterator for Counted {
    type Item = http::Request<Bytes>;
    fn next(&mut self) -> Option<Self::Item> {
        (self.next < self.total).then(|| {
            self.next += 1;
            self.read.store(self.next, Ordering::Relaxed);
            get(&format!("/items/{}", self.next - 1))
        })
    }
}

#[test]
fn a_streaming_batch_reads_as_it_goes_and_hands_out_in_input_order() {
    // 20,000 items; every 7th answers 503 once (retried after a backoff),
    // so items end out of order. Input order comes out anyway, and the
    // source is never read more than a window ahead of the output.
    let answers: Vec<(u16, &[Header], &str)> = (0..20_000)
        .map(|i| {
            if i % 7 == 3 {
                (503, &[][..], "")
            } else {
                (200, &[][..], "ok")
            }
        })
        .collect();
    let script = Script::of(&answers);
    let config = Config {
        concurrency: 4,
        timeout: Duration::from_secs(100_000),
        retry_budget: None,
        ..quiet()
    };
    let client: Client<Sim, Script> = Client::with_transport(script, config).unwrap();
    let read = Arc::new(AtomicUsize::new(0));
    let source = Counted {
        next: 0,
        total: 20_000,
        read: Arc::clone(&read),
    };
    let mut stream = client.batch_stream(source, BatchOrder::Input).unwrap();
    let window = BatchOrder::window(4) as usize;
    let mut expected = 0;
    let mut ahead = 0;
    while let Some((i, result)) = stream.next_result() {
        assert_eq!(i, expected, "input order");
        assert!(result.is_ok(), "{i}: {result:?}");
        ahead = ahead.max(read.load(Ordering::Relaxed) - i);
        expected += 1;
    }
    assert_eq!(expected, 20_000, "every item exactly once");
    assert!(
        ahead <= window + 4,
        "read {ahead} items ahead of the output (window {window})"
    );
    assert!(
        stream.end().is_some_and(|o| o.is_success()),
        "{:?}",
        stream.end()
    );
}

/// Every send answers 200 at once, but those of `/items/0`: never
/// answered (until the batch's deadline ends it). Records each send's
/// virtual instant.
#[derive(Clone, Default)]
struct HangsOnItem0 {
    sent: Arc<Mutex<Vec<Instant>>>,
}

/// An answer now, or never.
struct NowOrNever(Option<Result<http::Response<Bytes>, TransportError>>);

impl std::future::Future for NowOrNever {
    type Output = Result<http::Response<Bytes>, TransportError>;
    fn poll(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        self.get_mut()
            .0
            .take()
            .map_or(std::task::Poll::Pending, std::task::Poll::Ready)
    }
}

impl Transport for HangsOnItem0 {
    type Sending = NowOrNever;
    fn send(&self, request: http::Request<Bytes>, _: Instant) -> NowOrNever {
        self.sent.lock().unwrap().push(now());
        if request.uri().path() == "/items/0" {
            return NowOrNever(None);
        }
        NowOrNever(Some(Ok(http::Response::new(Bytes::from_static(b"ok")))))
    }
}

#[test]
fn a_hanging_item_holds_back_no_other_item_in_completion_order() {
    // The user trial: one URL of a batch hangs. In completion order every
    // other item is pulled and sent while it hangs (before any time
    // passes), far past the window of 4 × 2 items, and succeeds; it ends
    // at the deadline, handed out last. (Virtual time jumps to the
    // deadline as soon as the drive waits, so when a result is taken says
    // little: the instants of the sends say when the items went.)
    const ITEMS: usize = 200;
    let config = Config {
        concurrency: 2,
        timeout: Duration::from_secs(600),
        retry_budget: None,
        ..quiet()
    };
    let server = HangsOnItem0::default();
    let client: Client<Sim, HangsOnItem0> = Client::with_transport(server.clone(), config).unwrap();
    let t0 = now();
    let source = (0..ITEMS).map(|i| get(&format!("/items/{i}")));
    let mut stream = client.batch_stream(source, BatchOrder::Completion).unwrap();
    let mut seen = Vec::new();
    while let Some((i, result)) = stream.next_result() {
        seen.push((i, now(), result.map(|r| r.status())));
    }
    assert_eq!(seen.len(), ITEMS, "every item exactly once");
    let sent = server.sent.lock().unwrap().clone();
    assert_eq!(sent.len(), ITEMS, "one send per item");
    assert!(sent.iter().all(|&t| t == t0), "a send waited for item 0");
    for (i, _, status) in &seen[..ITEMS - 1] {
        assert!(*i != 0, "item 0 ended before the others");
        assert_eq!(
            status.as_ref().ok(),
            Some(&http::StatusCode::OK),
            "item {i}"
        );
    }
    let (i, at, status) = &seen[ITEMS - 1];
    assert_eq!(*i, 0);
    assert!(*at >= t0 + Duration::from_secs(600), "item 0 ended early");
    assert_eq!(
        status.as_ref().unwrap_err().outcome(),
        Some(Outcome::TimedOut { needed: None })
    );
}

#[test]
fn a_cancelled_streaming_batch_hands_out_what_it_started_and_reads_no_more() {
    let client: Client<Sim, Script> = Client::with_transport(Script::default(), quiet()).unwrap();
    let read = Arc::new(AtomicUsize::new(0));
    let source = Counted {
        next: 0,
        total: 1_000_000,
        read: Arc::clone(&read),
    };
    let token = CancelToken::new();
    let mut stream = client
        .batch_stream_cancellable(source, BatchOrder::Completion, &token)
        .unwrap();
    let mut seen = 0;
    while let Some((_, result)) = stream.next_result() {
        seen += 1;
        if seen == 10 {
            Sim::cancel(&token);
        }
        if seen > 10 + 2 * 4 {
            // What was out before the cancel has been handed out: the rest
            // ended cancelled.
            assert_eq!(result.unwrap_err().outcome(), Some(Outcome::Cancelled));
        }
    }
    assert!(
        read.load(Ordering::Relaxed) < 100,
        "read {} of a million",
        read.load(Ordering::Relaxed)
    );
    assert_eq!(stream.end(), Some(Outcome::Cancelled));
}

#[test]
fn a_success_the_classifier_calls_busy_is_retried() {
    // This API answers 200 {"busy":true} when it wants you to come back.
    let busy = Classifier::new(|a: &HttpAnswer| {
        (a.0.status() == 200 && a.0.body().starts_with(br#"{"busy":true"#))
            .then_some(RetryClass::ServerError)
    });
    let script = Script::of(&[
        (200, &[], r#"{"busy":true}"#),
        (200, &[("retry-after", "3")], r#"{"busy":true}"#),
        (200, &[], r#"{"id":1}"#),
    ]);
    let config = Config {
        classify: Some(busy),
        ..quiet()
    };
    let client: Client<Sim, Script> = Client::with_transport(script.clone(), config).unwrap();
    let resp = client.send(get("/a")).unwrap();
    assert_eq!(resp.body().as_ref(), br#"{"id":1}"#);
    let sent = script.sent();
    assert_eq!(sent.len(), 3);
    assert!(
        sent[2].0 - sent[1].0 >= Duration::from_secs(3),
        "its Retry-After honoured"
    );
}

/// A transport whose every connection is refused: records each send's
/// virtual instant.
#[derive(Clone, Debug, Default)]
struct Refused {
    sent: Arc<Mutex<Vec<Instant>>>,
}

impl Transport for Refused {
    type Sending = Ready<Result<http::Response<Bytes>, TransportError>>;
    fn send(&self, _: http::Request<Bytes>, _: Instant) -> Self::Sending {
        self.sent.lock().unwrap().push(now());
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        ready(Err(
            TransportError::new(TransportErrorKind::Refused).with_source(io)
        ))
    }
}

/// SPEC §5: a call that ends on transport errors keeps the error (its
/// `source()`), the attempt count and the elapsed time — exactly what the
/// policy's schedule gives, not merely something under a bound.
#[test]
fn a_call_ended_by_transport_errors_keeps_its_attempts_and_elapsed_time() {
    // The default policy without jitter: 4 transport retries after
    // 250 ms, 500 ms, 1 s and 2 s (250 ms doubling, under the 4 s cap).
    let policy = quiet().retry;
    assert_eq!(policy.max_retries.transport, 4);
    assert_eq!(
        (
            policy.backoff.base,
            policy.backoff.multiplier,
            policy.backoff.cap
        ),
        (Duration::from_millis(250), 2, Duration::from_secs(4))
    );
    let schedule = Duration::from_millis(250 + 500 + 1000 + 2000);
    let gaps =
        |sent: &[Instant]| -> Vec<Duration> { sent.windows(2).map(|w| w[1] - w[0]).collect() };
    let hand_computed = [250, 500, 1000, 2000].map(Duration::from_millis);
    let check = |err: &Error, sent: &[Instant]| {
        let Error::Transport {
            outcome,
            error,
            attempts,
            elapsed,
        } = err
        else {
            panic!("want Error::Transport, got {err:?}")
        };
        assert_eq!(
            *outcome,
            Outcome::RetriesExhausted {
                class: RetryClass::Transport,
                last: Reply::Transport(TransportErrorKind::Refused)
            }
        );
        assert_eq!(error.kind(), TransportErrorKind::Refused);
        assert!(std::error::Error::source(error).is_some(), "{err:?}");
        assert_eq!(*attempts, 5, "the first send and 4 retries");
        assert_eq!(sent.len(), 5);
        assert_eq!(gaps(sent), hand_computed);
        assert_eq!(*elapsed, schedule, "{err}");
        assert!(err.to_string().ends_with("(5 attempts in 3.8s)"), "{err}");
    };

    let transport = Refused::default();
    let client: Client<Sim, Refused> = Client::with_transport(transport.clone(), quiet()).unwrap();
    let t0 = now();
    let err = client.send(get("/a")).unwrap_err();
    assert_eq!(now() - t0, schedule);
    check(&err, &transport.sent.lock().unwrap());

    // A batch item's error says the same.
    let transport = Refused::default();
    let client: Client<Sim, Refused> = Client::with_transport(transport.clone(), quiet()).unwrap();
    let results = client.batch(vec![get("/b")]).unwrap();
    check(
        results[0].as_ref().unwrap_err(),
        &transport.sent.lock().unwrap(),
    );
}
