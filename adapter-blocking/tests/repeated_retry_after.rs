//! An answer with two `Retry-After` headers (user trial 4, F4), against a
//! real server on loopback: `429` with `Retry-After: 1` then
//! `Retry-After: 120` was resent every second until the deadline (and in
//! the other order ended at once). SPEC §2.1: never resend before the
//! server's time — the later of the two, 120 s, over the 60 s automatic
//! wait cap: the call ends `RateLimited` after one send, in either order.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use polite_blocking::{Client, Config, Outcome};

/// Serves `head` (a whole answer with no body) to at most `max` requests,
/// one per connection; returns its URL and the count of requests read.
fn serve(head: &'static str, max: usize) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/limited", listener.local_addr().unwrap());
    let count = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&count);
    std::thread::spawn(move || {
        for stream in listener.incoming().take(max) {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            // The request's head, up to its empty line.
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                if line == "\r\n" {
                    break;
                }
                line.clear();
            }
            seen.fetch_add(1, Ordering::SeqCst);
            let _ = stream.write_all(head.as_bytes());
        }
    });
    (url, count)
}

#[test]
fn a_429_with_two_retry_afters_is_not_resent_before_the_later() {
    let heads = [
        "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nRetry-After: 120\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 120\r\nRetry-After: 1\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
    ];
    for head in heads {
        let (url, count) = serve(head, 10);
        let client = Client::with_config(Config {
            timeout: Duration::from_secs(8),
            ..Config::default()
        })
        .unwrap();
        let started = Instant::now();
        let err = client
            .send(http::Request::get(url).body(Bytes::new()).unwrap())
            .unwrap_err();
        assert!(
            matches!(err.outcome(), Some(Outcome::RateLimited { .. })),
            "{head:?}: {err}"
        );
        assert_eq!(count.load(Ordering::SeqCst), 1, "{head:?}: sent once");
        // Ends at the answer, not after resends 1 s apart (it took 3 s).
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{head:?}: {:?}",
            started.elapsed()
        );
    }
}
