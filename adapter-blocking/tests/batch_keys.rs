//! One pace per origin inside one batch (SPEC §4.2), written once in
//! `polite_lab::runner::keys`: a 429 with `Retry-After: 5` from lab A never
//! holds back the batch's items for lab B. Through `polite_blocking::Client`
//! and its ureq transport.

use polite_blocking::{Threads, UreqTransport, block_on};

#[test]
fn a_429_from_one_origin_never_holds_back_the_batch_items_of_another() {
    if let Err(report) = block_on(
        polite_lab::runner::keys::a_429_from_one_origin_never_holds_back_another::<Threads, _>(
            UreqTransport::default(),
        ),
    ) {
        panic!("{report}");
    }
}
