//! The lab's adapter conformance suite (written once, in polite-lab and
//! polite-client) against polite-async-std's clock and HTTP/1.1 transport,
//! executed on async-std's executor, on loopback in real time.

use polite_async_std::{AsyncIoClock, Http1Transport};

fn run(name: &str) {
    let result = async_std::task::block_on(polite_client::conformance::run(
        name,
        Http1Transport::new(),
        AsyncIoClock::new,
    ));
    if let Err(report) = result {
        panic!("{report}");
    }
}

polite_client::conformance_tests!(run);
