//! The retry stacks polite is compared with (the overhead and instructions
//! suites' retry peers) retry as a user of them would expect, as polite
//! does: a 503 is sent again, a 404 is not. A peer that did not retry would
//! make every ratio against it flattering.

use polite_bench::stacks::{Stacks, Via};
use polite_lab::{LabConfig, Step};

/// Every async client of the suites that retries.
const RETRYING: [Via; 6] = [
    Via::TokioSend,
    Via::Middleware,
    Via::Layer,
    Via::ReqwestBackon,
    Via::RetryMiddleware,
    Via::TowerRetry,
];

/// One GET through `via` against a lab whose first answer is `first`:
/// whether it ended 200, and how many requests the lab saw.
fn one_get(via: Via, first: u16) -> (bool, usize) {
    let lab = polite_bench::lab(
        LabConfig::default().script("/items/a", vec![Step::without_retry_after(first)]),
    );
    let url = lab.url("/items/a");
    let rt = polite_bench::tokio_current_thread();
    let ok = rt.block_on(async { Stacks::new(&url).get(via).await });
    (ok, lab.log().len())
}

#[test]
fn every_retry_stack_sends_a_503_again_once() {
    for via in RETRYING {
        assert_eq!(one_get(via, 503), (true, 2), "{via:?}");
    }
}

#[test]
fn no_retry_stack_sends_a_404_again() {
    for via in RETRYING {
        assert_eq!(one_get(via, 404), (false, 1), "{via:?}");
    }
}

#[test]
fn the_blocking_retry_peer_sends_a_503_again_and_not_a_404() {
    for (first, expected) in [(503, (true, 2)), (404, (false, 1))] {
        let lab = polite_bench::lab(
            LabConfig::default().script("/items/a", vec![Step::without_retry_after(first)]),
        );
        let ok =
            polite_bench::stacks::ureq_backon(&polite_bench::ureq_agent(), &lab.url("/items/a"));
        assert_eq!((ok, lab.log().len()), expected, "{first}");
    }
}
