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
