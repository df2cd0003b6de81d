//! Refusing to retry a transport error kind (`RetryPolicy::retried_transport`)
//! against a real server: the lab resets the connection once, then answers.

use std::time::Duration;

use bytes::Bytes;
use polite_blocking::{Client, Config, Outcome, TransportErrorKind, TransportKinds};
use polite_lab::{Lab, LabConfig, Step};

fn get(url: String) -> http::Request<Bytes> {
    http::Request::get(url).body(Bytes::new()).unwrap()
}

fn lab() -> polite_lab::LabHandle {
    Lab::start(LabConfig::default().script("/items/r", vec![Step::Reset, Step::Normal])).unwrap()
}

#[test]
fn a_reset_is_retried_by_default() {
    let lab = lab();
    let answer = Client::new().send(get(lab.url("/items/r"))).unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(lab.log().len(), 2);
}

#[test]
fn a_kind_left_out_of_the_policy_ends_the_call_after_one_send() {
    let lab = lab();
    let mut config = Config {
        timeout: Duration::from_secs(10),
        ..Config::default()
    };
    config.retry.retried_transport = TransportKinds::RETRYABLE.without(TransportErrorKind::Reset);
    let client = Client::with_config(config).unwrap();
    let err = client.send(get(lab.url("/items/r"))).unwrap_err();
    assert_eq!(
        err.outcome(),
        Some(Outcome::Permanent {
            cause: TransportErrorKind::Reset
        })
    );
    assert_eq!(lab.log().len(), 1, "sent once");
}

/// ureq sends any method once told to (extension methods), and then writes
/// the request's version as given: the transport refuses a version other
/// than HTTP/1.x itself, permanently, before anything is sent.
#[test]
fn a_request_of_another_http_version_is_invalid_and_never_sent() {
    use polite_blocking::{Transport, UreqTransport, block_on};
    use polite_lab::hostile::{Hostile, Reply};
    use std::time::Instant;

    let server = Hostile::start(vec![("/x", Reply::Body("ok".into()))]).unwrap();
    let t = UreqTransport::default();
    let req = http::Request::get(server.url("/x"))
        .version(http::Version::HTTP_2)
        .body(Bytes::new())
        .unwrap();
    let e = block_on(t.send(req, Instant::now() + Duration::from_secs(5))).unwrap_err();
    assert_eq!(e.kind(), TransportErrorKind::InvalidRequest);
    assert!(std::error::Error::source(&e).is_some());
    assert!(server.seen().is_empty(), "{:?}", server.seen());
}

/// ureq refuses methods it does not know for the version unless told
/// otherwise: the transport tells it, so `PURGE`, `PROPFIND` (with a body)
/// and `get` (not `GET`) reach the server as given, once.
#[test]
fn extension_methods_reach_the_server_as_given() {
    use polite_lab::hostile::{Hostile, Reply};

    let server = Hostile::start(vec![("/echo", Reply::Body("ok".into()))]).unwrap();
    let client = Client::new();
    for (method, body) in [("PURGE", ""), ("PROPFIND", "<propfind/>"), ("get", "")] {
        let req = http::Request::builder()
            .method(method)
            .uri(server.url("/echo"))
            .header("idempotency-key", "k")
            .body(Bytes::from(body))
            .unwrap();
        let answer = client.send(req).unwrap_or_else(|e| panic!("{method}: {e}"));
        assert_eq!(answer.status(), 200, "{method}");
    }
    let seen: Vec<_> = server
        .seen()
        .into_iter()
        .map(|s| (s.method, String::from_utf8_lossy(&s.body).into_owned()))
        .collect();
    assert_eq!(
        seen,
        [
            ("PURGE".to_owned(), String::new()),
            ("PROPFIND".to_owned(), "<propfind/>".to_owned()),
            ("get".to_owned(), String::new()),
        ]
    );
}

/// An answer that is not valid HTTP (a control byte in a header value, a
/// garbage status line) is `InvalidAnswer`, as on every adapter, with
/// ureq's protocol error (its parser's) as the source.
#[test]
fn an_answer_that_is_not_http_is_an_invalid_answer_with_ureqs_protocol_error() {
    use polite_blocking::{Transport, UreqTransport, block_on};
    use polite_lab::hostile::{Hostile, Reply};

    let server = Hostile::start(vec![
        (
            "/ctl",
            Reply::Raw(
                b"HTTP/1.1 503 X\r\nRetry-After: 1\x01\r\nContent-Length: 0\r\n\r\n".to_vec(),
            ),
        ),
        (
            "/garbage",
            Reply::Raw(b"HTTP/1.1 ?!? Nope\r\nContent-Length: 0\r\n\r\n".to_vec()),
        ),
    ])
    .unwrap();
    let t = UreqTransport::default();
    for path in ["/ctl", "/garbage"] {
        let req = http::Request::get(server.url(path))
            .body(Bytes::new())
            .unwrap();
        let e =
            block_on(t.send(req, std::time::Instant::now() + Duration::from_secs(5))).unwrap_err();
        assert_eq!(e.kind(), TransportErrorKind::InvalidAnswer, "{path}: {e}");
        let source = std::error::Error::source(&e).expect("the parser's error is kept");
        assert!(
            matches!(
                source.downcast_ref::<ureq::Error>(),
                Some(ureq::Error::Protocol(_))
            ),
            "{path}: {source:?}"
        );
    }
}
