//! `https://` through `Http1Transport` against the lab in TLS mode
//! (self-signed certificates made at test time): certificates that are not
//! trusted or name another host are permanent errors sent once, redirects
//! between https and http origins are followed, and kept-alive TLS
//! connections are reused.

mod support;

use std::time::Duration;

use bytes::Bytes;
use polite_async_io::{Client, Config, Http1Transport, Outcome, rustls};
use polite_core::TransportErrorKind;
use polite_lab::{Lab, LabConfig, LogStats};
use support::TestCert;

fn get(url: &str) -> http::Request<Bytes> {
    http::Request::get(url).body(Bytes::new()).unwrap()
}

fn client(transport: Http1Transport) -> Client {
    let config = Config {
        timeout: Duration::from_secs(10),
        ..Config::default()
    };
    Client::with_transport(transport, config).unwrap()
}

/// Checks a call that failed on a rejected certificate: permanent (one
/// attempt, one connection at the lab, no request), and the cause named by
/// the message and kept as the rustls error in the source chain.
fn check_rejected(
    err: &polite_async_io::Error,
    lab: &polite_lab::LabHandle,
    expected: fn(&rustls::CertificateError) -> bool,
) {
    assert_eq!(
        err.outcome(),
        Some(Outcome::Permanent {
            cause: TransportErrorKind::Certificate
        }),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains("certificate"), "{message}");
    assert!(message.contains("1 attempt"), "{message}");
    match support::rustls_cause(err) {
        Some(rustls::Error::InvalidCertificate(cause)) => {
            assert!(expected(cause), "{cause:?}");
        }
        other => panic!("no rustls certificate error in the chain: {other:?} ({err:?})"),
    }
    assert_eq!(lab.connections(), 1, "one handshake attempt, never retried");
    assert_eq!(lab.log().len(), 0, "no request got through");
}

#[test]
fn a_certificate_nobody_trusts_is_permanent_and_tried_once() {
    let lab = TestCert::loopback().lab(LabConfig::default());
    // The default transport: Mozilla's roots (webpki-roots) do not hold a
    // self-signed test certificate.
    let err =
        smol::block_on(client(Http1Transport::new()).send(get(&lab.url("/items/a")))).unwrap_err();
    check_rejected(&err, &lab, |c| {
        matches!(c, rustls::CertificateError::UnknownIssuer)
    });

    // A transport trusting another certificate only.
    let lab = TestCert::loopback().lab(LabConfig::default());
    let stranger = TestCert::new(&["127.0.0.1"]);
    let c = client(support::transport(&stranger));
    let err = async_std::task::block_on(c.send(get(&lab.url("/items/a")))).unwrap_err();
    check_rejected(&err, &lab, |c| {
        matches!(
            c,
            rustls::CertificateError::UnknownIssuer | rustls::CertificateError::BadSignature
        )
    });
}

#[test]
fn a_certificate_for_another_host_is_permanent_and_tried_once() {
    // Trusted, but made out to another name than the URL's 127.0.0.1.
    let elsewhere = TestCert::new(&["api.example.test"]);
    let lab = elsewhere.lab(LabConfig::default());
    let c = client(support::transport(&elsewhere));
    let err = smol::block_on(c.send(get(&lab.url("/items/a")))).unwrap_err();
    check_rejected(&err, &lab, |c| {
        matches!(
            c,
            rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. }
        )
    });
}

#[test]
fn https_answers_come_back_whole_and_the_lab_says_https() {
    let cert = TestCert::loopback();
    let lab = cert.lab(LabConfig::default());
    assert!(lab.url("/").starts_with("https://127.0.0.1:"));
    let c = client(support::transport(cert));
    smol::block_on(async {
        let resp = c.send(get(&lab.url("/items/a"))).await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.body().as_ref(), br#"{"item":"a"}"#);
        let post = http::Request::post(lab.url("/items/k"))
            .body(Bytes::from_static(br#"{"name":"k"}"#))
            .unwrap();
        assert_eq!(c.send(post).await.unwrap().status(), 201);
        // `localhost` resolves (on the blocking pool) and is the SNI name.
        let local = lab.url("/items/b").replace("127.0.0.1", "localhost");
        assert_eq!(c.send(get(&local)).await.unwrap().status(), 200);
    });
    assert_eq!(lab.log().len(), 3);
    // 127.0.0.1 and localhost are two origins: two connections, not three.
    assert_eq!(lab.connections(), 2);
}

#[test]
fn redirects_from_https_to_https_and_to_http_are_followed() {
    let cert = TestCert::loopback();
    let from = cert.lab(LabConfig::default());
    let secure = cert.lab(LabConfig::default());
    let plain = Lab::start(LabConfig::default()).unwrap();
    let c = client(support::transport(cert));
    for (to, kind) in [(&secure, "https"), (&plain, "http")] {
        let target = to.url("/items/there");
        assert!(target.starts_with(&format!("{kind}://")));
        let url = from.url(&format!("/redirect?to={target}&status=302"));
        let req = http::Request::get(url)
            .header("authorization", "Bearer secret")
            .body(Bytes::new())
            .unwrap();
        let resp = smol::block_on(c.send(req)).unwrap();
        assert_eq!(resp.status(), 200, "{kind}");
        assert_eq!(resp.body().as_ref(), br#"{"item":"there"}"#, "{kind}");
        let log = to.log();
        assert_eq!(log.len(), 1, "{kind}");
        assert_eq!(log[0].path, "/items/there");
        assert!(
            !log[0].has_header("authorization"),
            "{kind}: a cross-origin hop drops the caller's headers"
        );
    }
    assert_eq!(from.log().count_status(302), 2);
    // A 307 keeps the method and body, https to https.
    let url = from.url(&format!(
        "/redirect?to={}&status=307",
        secure.url("/items/moved")
    ));
    let put = http::Request::put(url)
        .body(Bytes::from_static(b"{}"))
        .unwrap();
    assert_eq!(smol::block_on(c.send(put)).unwrap().status(), 200);
    let last = secure.log().pop().unwrap();
    assert_eq!(
        (last.method.as_str(), last.path.as_str()),
        ("PUT", "/items/moved")
    );
}

#[test]
fn a_thousand_sequential_https_gets_use_one_connection() {
    let cert = TestCert::loopback();
    let lab = cert.lab(LabConfig::default());
    let c = client(support::transport(cert));
    smol::block_on(async {
        for i in 0..1000 {
            let resp = c.send(get(&lab.url(&format!("/items/{i}")))).await.unwrap();
            assert_eq!(resp.status(), 200);
        }
    });
    assert_eq!(lab.log().len(), 1000);
    assert_eq!(lab.connections(), 1);
}

#[test]
fn a_thousand_sequential_http_gets_use_one_connection() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let c = client(Http1Transport::new());
    async_std::task::block_on(async {
        for i in 0..1000 {
            let resp = c.send(get(&lab.url(&format!("/items/{i}")))).await.unwrap();
            assert_eq!(resp.status(), 200);
        }
    });
    assert_eq!(lab.log().len(), 1000);
    assert_eq!(lab.connections(), 1);
}

#[test]
fn a_batch_at_concurrency_4_keeps_at_most_8_connections() {
    let cert = TestCert::loopback();
    for tls in [true, false] {
        let lab = if tls {
            cert.lab(LabConfig::default())
        } else {
            Lab::start(LabConfig::default()).unwrap()
        };
        let transport = if tls {
            support::transport(cert)
        } else {
            Http1Transport::new()
        };
        let config = Config {
            timeout: Duration::from_secs(30),
            concurrency: 4,
            ..Config::default()
        };
        let c = Client::with_transport(transport, config).unwrap();
        let requests = (0..400)
            .map(|i| get(&lab.url(&format!("/items/{i}"))))
            .collect();
        let results = smol::block_on(c.batch(requests)).unwrap();
        assert!(results.iter().all(Result::is_ok));
        assert_eq!(lab.log().len(), 400);
        let opened = lab.connections();
        assert!(opened <= 8, "tls {tls}: {opened} connections");
        assert!(lab.log().peak_in_flight() <= 4);
        eprintln!("batch of 400 at concurrency 4, tls {tls}: {opened} connections");
    }
}
