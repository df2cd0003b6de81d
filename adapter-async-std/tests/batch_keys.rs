//! One pace per origin inside one batch (SPEC §4.2), written once in
//! `polite_lab::runner::keys`: a 429 with `Retry-After: 5` from lab A never
//! holds back the batch's items for lab B. Through `polite_async_io::Client`
//! and its own HTTP/1.1 transport, on smol.

use polite_async_io::{AsyncIo, Http1Transport};

#[test]
fn a_429_from_one_origin_never_holds_back_the_batch_items_of_another() {
    if let Err(report) = smol::block_on(
        polite_lab::runner::keys::a_429_from_one_origin_never_holds_back_another::<AsyncIo, _>(
            Http1Transport::new(),
        ),
    ) {
        panic!("{report}");
    }
}
