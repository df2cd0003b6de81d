//! One pace per origin inside one batch (SPEC §4.2), written once in
//! `polite_lab::runner::keys`: a 429 with `Retry-After: 5` from lab A never
//! holds back the batch's items for lab B. Through `polite_tokio::Client`
//! and its reqwest transport.

use polite_tokio::{ReqwestTransport, Tokio};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_from_one_origin_never_holds_back_the_batch_items_of_another() {
    let transport = ReqwestTransport::new(ReqwestTransport::default_client().expect("a client"));
    if let Err(report) = polite_lab::runner::keys::a_429_from_one_origin_never_holds_back_another::<
        Tokio,
        _,
    >(transport)
    .await
    {
        panic!("{report}");
    }
}
