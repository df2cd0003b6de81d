//! The connection pool of [`Http1Transport`](crate::Http1Transport): idle
//! kept-alive connections per origin, with an idle timeout and a cap.

use std::collections::HashMap;
use std::io;
use std::net::TcpStream;
use std::pin::Pin;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use async_io::Async;
use futures_lite::io::{AsyncRead, AsyncWrite};

/// An origin (RFC 6454): scheme, host, port. Connections are pooled per
/// origin, never shared between two.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Origin {
    /// `https` (true) or `http`.
    pub(crate) tls: bool,
    /// The host as in the URL, lower case, IPv6 without brackets.
    pub(crate) host: String,
    /// The port, explicit or the scheme's default.
    pub(crate) port: u16,
}

/// One connection: a TCP socket, or TLS over one.
pub(crate) enum Conn {
    /// `http://`.
    Plain(Async<TcpStream>),
    /// `https://` (boxed: a TLS session is large).
    #[cfg(feature = "tls")]
    Tls(Box<futures_rustls::client::TlsStream<Async<TcpStream>>>),
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Conn::Plain(_) => f.write_str("Conn::Plain"),
            #[cfg(feature = "tls")]
            Conn::Tls(_) => f.write_str("Conn::Tls"),
        }
    }
}

impl Conn {
    /// Whether an idle connection still looks usable: the peer has neither
    /// closed it (EOF, reset, a TLS `close_notify`) nor sent anything
    /// unasked. One non-blocking read; a connection that fails it is
    /// dropped, never used. (It cannot see a close that is still on its
    /// way: that race is what the transport's one replay on a fresh
    /// connection is for.)
    fn is_quiet(&mut self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        let mut byte = [0u8; 1];
        matches!(Pin::new(self).poll_read(&mut cx, &mut byte), Poll::Pending)
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            #[cfg(feature = "tls")]
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            #[cfg(feature = "tls")]
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            #[cfg(feature = "tls")]
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_close(cx),
            #[cfg(feature = "tls")]
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_close(cx),
        }
    }
}

/// An idle connection, its read buffer, and when it was put back. The
/// buffer's content is stale (only a connection whose answer was read to
/// its exact end is pooled): it is kept so that the next answer is read
/// into memory already paged in, at the size earlier answers grew it to.
#[derive(Debug)]
struct Idle {
    conn: Conn,
    buf: Vec<u8>,
    since: Instant,
}

/// Idle connections per origin. Connections are handed out most recently
/// used first (the warm ones stay in use, the others age out); expired
/// ones are dropped whenever the pool is touched. The lock is never held
/// across an `.await`, and connections are closed after it is released.
#[derive(Debug, Default)]
pub(crate) struct Pool {
    idle: Mutex<Idles>,
}

/// The pool's lists, and a bound for when the next may expire.
#[derive(Debug, Default)]
struct Idles {
    /// Idle connections per origin, oldest first (a list may be empty
    /// until the next walk over them all).
    map: HashMap<Origin, Vec<Idle>>,
    /// No connection in `map` was put back before this (`None`: none is
    /// there). Only lowered while connections come and go; set to the
    /// oldest's instant by each walk. A touch walks every list only once
    /// the oldest may have expired, not on every request: with idle
    /// connections to many origins (a batch over many hosts) a walk per
    /// request cost a visit to each of them.
    oldest: Option<Instant>,
}

impl Pool {
    fn lock(&self) -> MutexGuard<'_, Idles> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Drops (into the returned list) every connection idle for `timeout`
    /// or longer, and forgets origins left without any.
    fn expire(idles: &mut Idles, now: Instant, timeout: Duration) -> Vec<Idle> {
        let mut expired = Vec::new();
        if idles
            .oldest
            .is_none_or(|oldest| now.saturating_duration_since(oldest) < timeout)
        {
            return expired;
        }
        let mut oldest: Option<Instant> = None;
        for list in idles.map.values_mut() {
            expired.extend(list.extract_if(.., |i| now.duration_since(i.since) >= timeout));
            if let Some(first) = list.iter().map(|i| i.since).min() {
                oldest = Some(oldest.map_or(first, |o| o.min(first)));
            }
        }
        idles.map.retain(|_, list| !list.is_empty());
        idles.oldest = oldest;
        expired
    }

    /// An idle connection to `origin` that still looks usable at `now`, if
    /// any, with its read buffer.
    pub(crate) fn take(
        &self,
        origin: &Origin,
        now: Instant,
        timeout: Duration,
    ) -> Option<(Conn, Vec<u8>)> {
        loop {
            let (idle, expired) = {
                let mut idles = self.lock();
                let expired = Pool::expire(&mut idles, now, timeout);
                // One lookup: a list left empty stays until the next walk.
                let idle = idles.map.get_mut(origin).and_then(Vec::pop);
                (idle, expired)
            };
            drop(expired);
            let Idle { mut conn, buf, .. } = idle?;
            if conn.is_quiet() {
                return Some((conn, buf));
            }
            // Closed by the server while idle: dropped; try the next one.
        }
    }

    /// Puts a connection whose answer was read whole back at `now`, with
    /// its read buffer, keeping at most `max_idle` for its origin (the
    /// oldest go first).
    pub(crate) fn put(
        &self,
        origin: Origin,
        conn: Conn,
        buf: Vec<u8>,
        now: Instant,
        timeout: Duration,
        max_idle: usize,
    ) {
        if max_idle == 0 || timeout.is_zero() {
            return; // pooling is off: `conn` is closed here
        }
        let dropped = {
            let mut idles = self.lock();
            let mut dropped = Pool::expire(&mut idles, now, timeout);
            idles.oldest = Some(idles.oldest.map_or(now, |o| o.min(now)));
            let idle = Idle {
                conn,
                buf,
                since: now,
            };
            // One lookup when the origin has a list already (the owned key
            // is only hashed again for an origin new to the pool).
            let list = match idles.map.get_mut(&origin) {
                Some(list) => list,
                None => idles.map.entry(origin).or_default(),
            };
            list.push(idle);
            let excess = list.len().saturating_sub(max_idle);
            dropped.extend(list.drain(..excess));
            dropped
        };
        drop(dropped);
    }

    /// Idle connections not yet expired at `now`, over every origin.
    pub(crate) fn idle(&self, now: Instant, timeout: Duration) -> usize {
        let (count, expired) = {
            let mut idles = self.lock();
            let expired = Pool::expire(&mut idles, now, timeout);
            let count = idles
                .map
                .values()
                .flatten()
                .filter(|i| now.duration_since(i.since) < timeout)
                .count();
            (count, expired)
        };
        drop(expired);
        count
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A connected loopback socket (its peer is kept open by the listener's
    /// backlog until the test ends).
    fn conn(listener: &TcpListener) -> Conn {
        let addr = listener.local_addr().unwrap();
        Conn::Plain(smol::block_on(Async::<TcpStream>::connect(addr)).unwrap())
    }

    fn origin(port: u16) -> Origin {
        Origin {
            tls: false,
            host: "127.0.0.1".to_owned(),
            port,
        }
    }

    #[test]
    fn idle_connections_expire_after_the_timeout() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let pool = Pool::default();
        let t0 = Instant::now();
        let timeout = Duration::from_secs(30);
        pool.put(origin(1), conn(&listener), Vec::new(), t0, timeout, 8);
        assert_eq!(pool.idle(t0 + Duration::from_secs(29), timeout), 1);
        assert_eq!(pool.idle(t0 + timeout, timeout), 0, "expired at 30 s");
        pool.put(origin(1), conn(&listener), Vec::new(), t0, timeout, 8);
        assert!(pool.take(&origin(1), t0 + timeout, timeout).is_none());
        assert!(pool.lock().map.is_empty(), "the origin is forgotten");
    }

    #[test]
    fn each_connection_expires_at_its_own_time_whichever_origin_is_touched() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let pool = Pool::default();
        let t0 = Instant::now();
        let timeout = Duration::from_secs(30);
        let at = |s| t0 + Duration::from_secs(s);
        pool.put(origin(1), conn(&listener), Vec::new(), at(0), timeout, 8);
        pool.put(origin(2), conn(&listener), Vec::new(), at(20), timeout, 8);
        pool.put(origin(3), conn(&listener), Vec::new(), at(25), timeout, 8);
        // Touches before the first expiry walk nothing and drop nothing.
        assert!(pool.take(&origin(3), at(29), timeout).is_some());
        assert_eq!(pool.idle(at(29), timeout), 2);
        // At 30 s origin 1's connection is gone, whatever is asked for.
        assert!(pool.take(&origin(1), at(30), timeout).is_none());
        assert_eq!(pool.idle(at(30), timeout), 1);
        // Origin 2's goes at 50 s, not before, though an older one went.
        assert_eq!(pool.idle(at(49), timeout), 1);
        pool.put(origin(3), conn(&listener), Vec::new(), at(49), timeout, 8);
        assert!(pool.take(&origin(2), at(50), timeout).is_none());
        assert!(pool.take(&origin(3), at(50), timeout).is_some());
        assert_eq!(pool.idle(at(50), timeout), 0);
        assert_eq!(pool.lock().map.len(), 1, "origin 3's list, left empty");
        assert_eq!(pool.idle(at(79), timeout), 0);
        assert!(
            pool.lock().map.is_empty(),
            "forgotten once its oldest expired"
        );
    }

    #[test]
    fn the_pool_keeps_at_most_max_idle_per_origin_and_origins_apart() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let pool = Pool::default();
        let now = Instant::now();
        let timeout = Duration::from_secs(30);
        for _ in 0..3 {
            pool.put(origin(1), conn(&listener), Vec::new(), now, timeout, 2);
        }
        pool.put(origin(2), conn(&listener), Vec::new(), now, timeout, 2);
        assert_eq!(pool.idle(now, timeout), 3);
        let https = Origin {
            tls: true,
            ..origin(1)
        };
        assert!(
            pool.take(&https, now, timeout).is_none(),
            "https is another origin"
        );
        assert!(pool.take(&origin(1), now, timeout).is_some());
        assert!(pool.take(&origin(1), now, timeout).is_some());
        assert!(pool.take(&origin(1), now, timeout).is_none());
        // Pooling off: nothing is kept.
        pool.put(origin(3), conn(&listener), Vec::new(), now, timeout, 0);
        pool.put(
            origin(3),
            conn(&listener),
            Vec::new(),
            now,
            Duration::ZERO,
            8,
        );
        assert!(pool.take(&origin(3), now, timeout).is_none());
    }

    #[test]
    fn a_connection_the_peer_closed_is_not_handed_out() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let pool = Pool::default();
        let now = Instant::now();
        let timeout = Duration::from_secs(30);
        pool.put(origin(1), conn(&listener), Vec::new(), now, timeout, 8);
        let (peer, _) = listener.accept().unwrap();
        drop(peer); // FIN
        // The FIN crosses loopback at once; should it still be on its way,
        // ask again (bounded): the pool must never hand the connection out
        // once the close is visible.
        let start = Instant::now();
        loop {
            let taken = pool.take(&origin(1), now, timeout);
            match taken {
                None => break,
                Some(c) => {
                    pool.put(origin(1), c.0, c.1, now, timeout, 8);
                    assert!(
                        start.elapsed() < Duration::from_secs(5),
                        "the close was never seen"
                    );
                    std::thread::yield_now();
                }
            }
        }
    }
}
