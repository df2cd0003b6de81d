//! The lab's hostile checks (written once, in `polite_lab::runner::hostile`)
//! through `polite_blocking::Client` and its ureq transport: a 2 GiB body,
//! redirect loops and chains, a 307 after a PUT, cross-origin redirects, a
//! refused connection, an unsendable URL, an answer head over the limit,
//! extension methods. Counted at the server.

use polite_blocking::{Threads, UreqTransport, block_on};

fn run(name: &str) {
    if let Err(report) = block_on(polite_lab::runner::hostile::run::<Threads, _>(
        name,
        UreqTransport::default,
    )) {
        panic!("{name}: {report}");
    }
}

polite_lab::hostile_tests!(run);
