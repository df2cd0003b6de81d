//! The lab's adapter conformance suite (written once, in polite-lab)
//! through `polite_tokio::Client` and its reqwest transport, on loopback in
//! real time.

use polite_tokio::{ReqwestTransport, Tokio};

fn run(name: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let transport = ReqwestTransport::new(reqwest::Client::new());
    if let Err(report) = rt.block_on(polite_lab::runner::run::<Tokio, _>(name, transport)) {
        panic!("{report}");
    }
}

polite_lab::conformance_tests!(run);
