//! The lab's hostile checks (written once, in `polite_lab::runner::hostile`)
//! through `polite_async_io::Client` and its HTTP/1.1 transport, on smol:
//! a 2 GiB body, redirect loops and chains, a 307 after a PUT, cross-origin
//! redirects, a refused connection, an unsendable URL, an answer head over
//! the limit, extension methods. Counted at the server.

use polite_async_io::{AsyncIo, Http1Transport};

fn run(name: &str) {
    if let Err(report) = smol::block_on(polite_lab::runner::hostile::run::<AsyncIo, _>(
        name,
        Http1Transport::new,
    )) {
        panic!("{name}: {report}");
    }
}

polite_lab::hostile_tests!(run);
