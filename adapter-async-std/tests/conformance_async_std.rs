//! The lab's adapter conformance suite (written once, in polite-lab)
//! through `polite_async_io::Client`, executed on async-std's executor,
//! on loopback in real time.

use polite_async_io::{AsyncIo, Http1Transport};

fn run(name: &str) {
    let result = async_std::task::block_on(polite_lab::runner::run::<AsyncIo, _>(
        name,
        Http1Transport::new(),
    ));
    if let Err(report) = result {
        panic!("{report}");
    }
}

polite_lab::conformance_tests!(run);
