//! The lab's adapter conformance suite (written once, in polite-lab and
//! polite-client) against polite-tokio's clock and reqwest transport, on
//! loopback in real time.

use polite_tokio::{ReqwestTransport, TokioClock};

fn run(name: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let transport = ReqwestTransport::new(reqwest::Client::new());
    if let Err(report) = rt.block_on(polite_client::conformance::run(
        name,
        transport,
        TokioClock::new,
    )) {
        panic!("{report}");
    }
}

polite_client::conformance_tests!(run);
