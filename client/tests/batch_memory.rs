//! SPEC §4.4: a streaming batch's memory is O(concurrency), not O(items).
//! Every answer body here is a `Bytes` whose owner counts itself alive, so
//! the test sees how many bodies polite holds at any moment — in flight,
//! kept across a retry, waiting in the reorder window, or handed out and
//! not yet dropped by the caller.

mod common;

use std::collections::HashSet;
use std::future::{Ready, ready};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Sim, get};
use polite_client::api::{Jitter, RetryPolicy};
use polite_client::{BatchOrder, Client, Config, Transport, TransportError};

/// How many bodies are alive now, and the most ever alive at once.
#[derive(Debug, Default)]
struct Live {
    now: AtomicUsize,
    peak: AtomicUsize,
    made: AtomicUsize,
}

/// A body's bytes; counted alive from its making to its drop.
struct Counted {
    live: Arc<Live>,
    data: &'static [u8],
}

impl Counted {
    fn body(live: &Arc<Live>, data: &'static [u8]) -> Bytes {
        let now = live.now.fetch_add(1, Ordering::SeqCst) + 1;
        live.peak.fetch_max(now, Ordering::SeqCst);
        live.made.fetch_add(1, Ordering::SeqCst);
        Bytes::from_owner(Counted {
            live: Arc::clone(live),
            data,
        })
    }
}

impl AsRef<[u8]> for Counted {
    fn as_ref(&self) -> &[u8] {
        self.data
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.live.now.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Item `i`'s first attempt answers 503 when `i % 7 == 3` (retried after a
/// backoff, so items end out of order and the reorder window fills);
/// every other attempt answers 200. Every body is [`Counted`].
#[derive(Clone, Default)]
struct Server {
    live: Arc<Live>,
    failed: Arc<Mutex<HashSet<usize>>>,
}

impl Transport for Server {
    type Sending = Ready<Result<http::Response<Bytes>, TransportError>>;
    fn send(&self, request: http::Request<Bytes>, _: Instant) -> Self::Sending {
        let i: usize = request
            .uri()
            .path()
            .rsplit('/')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap();
        let busy = i % 7 == 3 && self.failed.lock().unwrap().insert(i);
        let (status, data): (u16, &'static [u8]) = if busy {
            (503, b"busy")
        } else {
            (200, b"a body standing in for a large one")
        };
        let mut r = http::Response::new(Counted::body(&self.live, data));
        *r.status_mut() = http::StatusCode::from_u16(status).unwrap();
        ready(Ok(r))
    }
}

#[test]
fn a_streaming_batch_in_input_order_holds_a_bounded_number_of_bodies() {
    const ITEMS: usize = 20_000;
    const CONCURRENCY: u32 = 4;
    let mut retry = RetryPolicy::default();
    retry.backoff.jitter = Jitter::None;
    let config = Config {
        retry,
        seed: Some(1),
        concurrency: CONCURRENCY,
        timeout: Duration::from_secs(100_000),
        retry_budget: None,
        ..Config::default()
    };
    let server = Server::default();
    let live = Arc::clone(&server.live);
    let client: Client<Sim, Server> = Client::with_transport(server, config).unwrap();
    let source = (0..ITEMS).map(|i| get(&format!("/items/{i}")));
    let mut stream = client.batch_stream(source, BatchOrder::Input).unwrap();
    // The bound `BatchOrder::Input` documents. What may be alive at
    // once, the caller holding none (each result is dropped before the
    // next is asked for):
    // * results ready but not handed out: fewer than `concurrency` when
    //   an item is pulled (nothing is pulled while that many wait);
    // * items pulled past the first one not yet ended: fewer than the
    //   window (`BatchOrder::Input`), each holding one body — its result,
    //   or the 503 kept while its retry is in flight;
    // * the answers of attempts in flight: only a retry's adds a body to
    //   its item's kept 503, and at most `concurrency` are in flight.
    // Pulled-and-not-handed-out items number at most
    // `window + concurrency - 1`, and in-flight retries add at most
    // `concurrency`: the bound is `window + 2 * concurrency - 1`.
    // (Without the 503s the peak here is 19 = window + concurrency - 1;
    // with them, 22.)
    let window = BatchOrder::window(CONCURRENCY) as usize;
    let bound = window + 2 * CONCURRENCY as usize - 1;
    let mut expected = 0;
    while let Some((i, result)) = stream.next_result() {
        assert_eq!(i, expected, "input order");
        let response = result.unwrap();
        assert_eq!(response.status(), 200, "{i}");
        expected += 1;
        // The caller is done with it: dropped here, before the next.
        drop(response);
    }
    assert_eq!(expected, ITEMS, "every item exactly once");
    let made = live.made.load(Ordering::SeqCst);
    let retried = (0..ITEMS).filter(|i| i % 7 == 3).count();
    assert_eq!(made, ITEMS + retried, "a body per attempt");
    let peak = live.peak.load(Ordering::SeqCst);
    assert!(
        peak <= bound,
        "{peak} bodies alive at once (bound {bound}) of {made}"
    );
    // The reorder window did fill: the bound is not met trivially.
    assert!(peak > window, "peak {peak}");
    drop(stream);
    assert_eq!(live.now.load(Ordering::SeqCst), 0, "every body freed");
}
