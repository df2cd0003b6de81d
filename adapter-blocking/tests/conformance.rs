//! The lab's adapter conformance suite (written once, in polite-lab)
//! through `polite_blocking::Client` and its ureq transport, on loopback in
//! real time. Each call blocks; the runner's own future is driven by
//! `block_on`.

use polite_blocking::{Threads, UreqTransport, block_on};

fn run(name: &str) {
    let transport = UreqTransport::default();
    if let Err(report) = block_on(polite_lab::runner::run::<Threads, _>(name, transport)) {
        panic!("{report}");
    }
}

polite_lab::conformance_tests!(run);
