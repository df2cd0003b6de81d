//! The lab's hostile checks (written once, in `polite_lab::runner::hostile`)
//! through `polite_tokio::Client` and its reqwest transport: a 2 GiB body,
//! redirect loops and chains, a 307 after a PUT, cross-origin redirects, a
//! refused connection, an unsendable URL, an answer head over hyper's
//! limit, extension methods. Counted at the server. Plus what
//! only reqwest can show: its own error kept as the source.

use bytes::Bytes;
use polite_core::TransportErrorKind as K;
use polite_tokio::{Client, Config, Error, ReqwestTransport, Tokio};

fn run(name: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let transport = || ReqwestTransport::new(ReqwestTransport::default_client().expect("a client"));
    if let Err(report) = rt.block_on(polite_lab::runner::hostile::run::<Tokio, _>(
        name, transport,
    )) {
        panic!("{name}: {report}");
    }
}

polite_lab::hostile_tests!(run);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_source_of_a_transport_error_is_reqwests_own() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut config = Config::default();
    config.retry.max_retries.transport = 0;
    let c = Client::with_config(config).unwrap();
    let req = http::Request::get(format!("http://127.0.0.1:{port}/x"))
        .body(Bytes::new())
        .unwrap();
    let e = c.send(req).await.unwrap_err();
    let Error::Transport { error, .. } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(error.kind(), K::Refused, "classified from the source chain");
    let source = std::error::Error::source(error).expect("the reqwest error is kept");
    assert!(
        source.downcast_ref::<reqwest::Error>().is_some(),
        "{source:?}"
    );
}

/// An answer that is not valid HTTP (a control byte in a header value, a
/// garbage status line) is `InvalidAnswer`, never `Reset`, with hyper's
/// parse error in the source chain (under reqwest's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_is_not_http_is_an_invalid_answer_with_hypers_parse_error() {
    use polite_client::Transport;
    use polite_lab::hostile::{Hostile, Reply};
    use std::time::{Duration, Instant};

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
    let t = ReqwestTransport::new(ReqwestTransport::default_client().unwrap());
    for path in ["/ctl", "/garbage"] {
        let req = http::Request::get(server.url(path))
            .body(Bytes::new())
            .unwrap();
        let e = t
            .send(req, Instant::now() + Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), K::InvalidAnswer, "{path}: {e}");
        let mut next = std::error::Error::source(&e);
        let mut parse = false;
        while let Some(s) = next {
            parse |= s
                .downcast_ref::<hyper::Error>()
                .is_some_and(hyper::Error::is_parse);
            next = s.source();
        }
        assert!(parse, "{path}: no hyper parse error in {e:?}");
    }
}
