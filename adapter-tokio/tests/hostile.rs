//! Answers that repeating cannot cure, against real loopback servers
//! (`polite_lab::hostile`): a 2 GiB body, redirect loops and chains, a 307
//! after a PUT, and redirects to another origin. Counted at the server.

use std::time::Duration;

use bytes::Bytes;
use polite_core::TransportErrorKind as K;
use polite_lab::hostile::{Hostile, Reply};
use polite_tokio::{Client, Config, Error, Outcome, RedirectPolicy, ReqwestTransport};

const GIB: u64 = 1 << 30;

fn client(redirects: RedirectPolicy) -> Client<ReqwestTransport> {
    let http = ReqwestTransport::default_client().unwrap();
    let config = Config {
        timeout: Duration::from_secs(20),
        redirects,
        ..Config::default()
    };
    Client::with_transport(ReqwestTransport::new(http), config).unwrap()
}

fn get(url: String) -> http::Request<Bytes> {
    http::Request::get(url)
        .header("x-api-key", "SECRET-KEY")
        .header("authorization", "Bearer SECRET-TOKEN")
        .body(Bytes::new())
        .unwrap()
}

fn permanent(e: &Error, kind: K) -> u32 {
    match e {
        Error::Transport {
            outcome, attempts, ..
        } => {
            assert_eq!(*outcome, Outcome::Permanent { cause: kind }, "{e}");
            assert!(std::error::Error::source(e).is_some());
            *attempts
        }
        other => panic!("expected a permanent {kind:?}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2_gib_chunked_body_is_one_request_cut_at_the_limit() {
    let server = Hostile::start(vec![("/huge", Reply::Chunked { total: 2 * GIB })]).unwrap();
    let e = client(RedirectPolicy::default())
        .send(get(server.url("/huge")))
        .await
        .unwrap_err();
    assert_eq!(permanent(&e, K::BodyTooLarge), 1);
    assert!(e.to_string().contains("16 MiB limit"), "{e}");
    assert_eq!(server.count("/huge"), 1);
    let pushed = server.body_bytes_sent();
    eprintln!(
        "tokio: 2 GiB chunked: 1 request, {} MiB pushed: {e}",
        pushed >> 20
    );
    assert!(pushed < 64 << 20, "{pushed} bytes pushed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_2_gib_body_is_refused_before_reading_it() {
    let server = Hostile::start(vec![("/big", Reply::Declared { length: 2 * GIB })]).unwrap();
    let e = client(RedirectPolicy::default())
        .send(get(server.url("/big")))
        .await
        .unwrap_err();
    assert_eq!(permanent(&e, K::BodyTooLarge), 1);
    assert_eq!(server.count("/big"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_loop_is_one_send_and_never_retried() {
    let server = Hostile::start(vec![
        ("/loop", Reply::redirect(302, "/loop")),
        ("/hop", Reply::Chain),
    ])
    .unwrap();
    let c = client(RedirectPolicy::default());
    let e = c.send(get(server.url("/loop"))).await.unwrap_err();
    assert_eq!(permanent(&e, K::TooManyRedirects), 1);
    assert_eq!(
        server.count("/loop"),
        1,
        "a loop back to itself is seen at once"
    );

    // An endless chain of fresh URLs: the first request and 10 hops.
    let e = c.send(get(server.url("/hop/0"))).await.unwrap_err();
    assert_eq!(permanent(&e, K::TooManyRedirects), 1);
    assert_eq!(server.count("/hop"), 11);
    assert!(e.to_string().contains("more than 10"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_307_after_a_put_is_followed_once_with_the_body_never_resent() {
    let server = Hostile::start(vec![
        ("/put", Reply::redirect(307, "/landing")),
        ("/landing", Reply::Body("landed".into())),
    ])
    .unwrap();
    let c = client(RedirectPolicy::default());
    for (method, key) in [("PUT", None), ("POST", Some("k-1"))] {
        let mut b = http::Request::builder()
            .method(method)
            .uri(server.url("/put"))
            .header("x-api-key", "SECRET-KEY");
        if let Some(k) = key {
            b = b.header("idempotency-key", k);
        }
        let resp = c
            .send(b.body(Bytes::from_static(b"payload")).unwrap())
            .await
            .unwrap();
        assert_eq!(resp.body().as_ref(), b"landed");
    }
    assert_eq!(
        server.count("/put"),
        2,
        "one PUT and one keyed POST, each once"
    );
    let landed: Vec<_> = server
        .seen()
        .into_iter()
        .filter(|s| s.path == "/landing")
        .collect();
    assert_eq!(landed.len(), 2);
    for (s, method) in landed.iter().zip(["PUT", "POST"]) {
        assert_eq!(s.method, method);
        assert_eq!(s.body, b"payload");
        assert_eq!(
            s.header("x-api-key"),
            Some("SECRET-KEY"),
            "same origin keeps headers"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cross_origin_redirect_never_carries_the_callers_headers() {
    let b = Hostile::start(vec![("/landing", Reply::Body("landed".into()))]).unwrap();
    let routes = [301, 302, 303, 307, 308]
        .map(|s| (s, format!("/r{s}"), Reply::redirect(s, b.url("/landing"))));
    let a = Hostile::start(
        routes
            .iter()
            .map(|(_, p, r)| (p.as_str(), r.clone()))
            .collect(),
    )
    .unwrap();
    let c = client(RedirectPolicy::default());
    for (status, path, _) in &routes {
        let resp = c.send(get(a.url(path))).await.unwrap();
        assert_eq!(resp.body().as_ref(), b"landed", "{status}");
    }
    assert_eq!(a.seen().len(), 5);
    assert!(a.seen().iter().all(|s| s.header("x-api-key").is_some()));
    assert_eq!(b.seen().len(), 5);
    for s in b.seen() {
        assert_eq!(s.header("x-api-key"), None, "{s:?}");
        assert_eq!(s.header("authorization"), None, "{s:?}");
    }

    // Same origin only: the redirect is the answer, B never hears of it.
    let before = b.seen().len();
    let resp = client(RedirectPolicy::same_origin(10))
        .send(get(a.url("/r302")))
        .await
        .unwrap();
    assert_eq!(resp.status(), 302);
    assert_eq!(b.seen().len(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transport_error_keeps_its_source_attempts_and_time() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let http = ReqwestTransport::default_client().unwrap();
    let mut config = Config {
        timeout: Duration::from_secs(20),
        ..Config::default()
    };
    config.retry.max_retries.transport = 1;
    config.retry.backoff.base = Duration::from_millis(1);
    let c = Client::with_transport(ReqwestTransport::new(http), config).unwrap();
    let e = c
        .send(get(format!("http://127.0.0.1:{port}/x?token=SECRET")))
        .await
        .unwrap_err();
    let Error::Transport {
        outcome,
        error,
        attempts,
        elapsed,
    } = &e
    else {
        panic!("{e:?}")
    };
    assert!(
        matches!(
            outcome,
            Outcome::RetriesExhausted {
                last: polite_core::Reply::Transport(K::Refused),
                ..
            }
        ),
        "{outcome:?} (classified from the source chain, not the text)"
    );
    assert_eq!(*attempts, 2);
    assert!(*elapsed < Duration::from_secs(20));
    let source = std::error::Error::source(error).expect("the reqwest error is kept");
    assert!(source.downcast_ref::<reqwest::Error>().is_some());
    // Neither the message nor the chain names the URL (credentials live there).
    let mut chain = e.to_string();
    let mut next = std::error::Error::source(&e);
    while let Some(s) = next {
        chain.push_str(&format!(" / {s}"));
        next = s.source();
    }
    assert!(!chain.contains("SECRET"), "{chain}");
    assert!(
        e.to_string()
            .starts_with("connection refused: transport retries exhausted (2 attempts in"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsendable_url_is_one_attempt_never_retried() {
    let e = client(RedirectPolicy::default())
        .send(get("ftp://127.0.0.1:9/x".into()))
        .await
        .unwrap_err();
    assert_eq!(permanent(&e, K::InvalidRequest), 1);
    assert!(!e.to_string().contains("ftp"), "no URL in the message: {e}");
}
