//! The lab's adapter conformance suite (written once, in polite-lab and
//! polite-client) against polite-blocking's clock, `block_on` and ureq
//! transport, on loopback in real time.

use polite_blocking::{ThreadClock, UreqTransport, block_on};

fn run(name: &str) {
    let transport = UreqTransport::default();
    if let Err(report) = block_on(polite_client::conformance::run(
        name,
        transport,
        ThreadClock::new,
    )) {
        panic!("{report}");
    }
}

polite_client::conformance_tests!(run);
