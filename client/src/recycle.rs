//! [`Recycler`]: body buffers a transport reuses once their caller has
//! dropped them. Shared by the transports of polite-async-io
//! (`Http1Transport`) and polite-blocking (`UreqTransport`); a transport
//! of your own may use it too.
//!
//! Every body is read whole into one allocation of its own (`Bytes`). A
//! fresh large allocation is fresh pages, and the system allocator may
//! hand freed ones back to the kernel in between (glibc trims a heap
//! whenever the free space at its top passes its trim threshold; a body
//! read on a worker thread is freed on the caller's): for 1 MiB bodies,
//! faulting their pages in and zeroing them cost about as much as reading
//! the bytes. So a transport keeps a handle on the last few bodies it
//! handed out, and a new body is read into the allocation of one its
//! caller has dropped since (a handle that is unique), over its stale
//! bytes (never zeroed again, and never handed out: the transport cuts a
//! body to what it read). Bounded: at most [`SLOTS`] handles, each at most
//! [`MAX_BODY`] long, none kept past the `timeout` the transport passes
//! (its idle timeout; checked when a buffer is asked for, and by
//! [`Recycler::expire`]); a body only reuses an allocation between its
//! own size and twice that, so a small body never pins a large
//! allocation.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use polite_client::recycle::Recycler;
//!
//! let recycler = Recycler::default();
//! let (now, idle) = (Instant::now(), Duration::from_secs(5));
//! // Read a body of 1,000 bytes: a fresh buffer, filled, handed out, kept.
//! let mut buf = recycler.buffer(1000, now, idle);
//! buf.resize(1000, b'a');
//! let body = buf.freeze();
//! recycler.keep(&body, now);
//! let at = body.as_ptr();
//! // Once the caller drops it, the next body of about that size reuses it
//! // (its 1,000 stale bytes are the buffer's length: read over them, then
//! // cut the buffer to what was read).
//! drop(body);
//! let mut next = recycler.buffer(900, now, idle);
//! assert_eq!((next.as_ptr(), next.len()), (at, 1000));
//! next.truncate(0);
//! ```

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

/// How many bodies' handles are kept.
pub const SLOTS: usize = 8;
/// The longest body whose allocation is kept for reuse.
pub const MAX_BODY: usize = 2 << 20;

/// Handles on the last bodies handed out, oldest first, with when.
#[derive(Debug, Default)]
pub struct Recycler {
    slots: Mutex<VecDeque<(Bytes, Instant)>>,
}

impl Recycler {
    fn lock(&self) -> MutexGuard<'_, VecDeque<(Bytes, Instant)>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A buffer to decode a body of about `want` bytes into: a dropped
    /// body's allocation of `want` to `2 × want` bytes, its length the
    /// stale bytes (initialised memory to decode over), or a fresh empty
    /// one with room for `want`. Handles kept `timeout` or longer are
    /// dropped.
    #[must_use]
    pub fn buffer(&self, want: usize, now: Instant, timeout: Duration) -> BytesMut {
        let reclaimed = {
            let mut slots = self.lock();
            slots.retain(|(_, since)| now.duration_since(*since) < timeout);
            let fits =
                |b: &Bytes| b.is_unique() && b.len() >= want && b.len() <= want.saturating_mul(2);
            slots
                .iter()
                .position(|(b, _)| fits(b))
                .and_then(|i| slots.remove(i))
        };
        match reclaimed.map(|(b, _)| b.try_into_mut()) {
            // Unique under the lock, and nobody else can clone our handle.
            Some(Ok(buf)) if buf.capacity() <= want.saturating_mul(2) => buf,
            _ => BytesMut::with_capacity(want),
        }
    }

    /// Keeps a handle on `body`, just handed out, for a later
    /// [`buffer`](Self::buffer) (unless it is empty or too long); the
    /// oldest handle goes when [`SLOTS`] are taken.
    pub fn keep(&self, body: &Bytes, now: Instant) {
        if body.is_empty() || body.len() > MAX_BODY {
            return;
        }
        let dropped = {
            let mut slots = self.lock();
            slots.push_back((body.clone(), now));
            (slots.len() > SLOTS).then(|| slots.pop_front())
        };
        // Our handle on the oldest body goes outside the lock (the memory
        // is freed here if its caller has dropped it too).
        drop(dropped);
    }

    /// Drops the handles kept `timeout` or longer before `now` (e.g. a
    /// worker thread leaving after idling that long), so that a transport
    /// no longer used pins no body memory its callers have let go.
    pub fn expire(&self, now: Instant, timeout: Duration) {
        let expired: VecDeque<_> = {
            let mut slots = self.lock();
            let (expired, kept) = std::mem::take(&mut *slots)
                .into_iter()
                .partition(|(_, since)| now.duration_since(*since) >= timeout);
            *slots = kept;
            expired
        };
        // Our handles go outside the lock (the memory is freed here if
        // their callers have dropped them too).
        drop(expired);
    }

    /// How many handles are kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(n: usize) -> Bytes {
        let mut b = BytesMut::with_capacity(n);
        b.resize(n, b'x');
        b.freeze()
    }

    const LONG: Duration = Duration::from_secs(30);

    #[test]
    fn a_dropped_body_s_allocation_is_reused_over_its_stale_bytes() {
        let r = Recycler::default();
        let now = Instant::now();
        let first = body(1000);
        let addr = first.as_ptr();
        r.keep(&first, now);
        // Still held by its caller: a fresh buffer.
        let fresh = r.buffer(1000, now, LONG);
        assert!(fresh.is_empty());
        assert_ne!(fresh.as_ptr(), addr);
        drop(fresh);
        drop(first);
        let reused = r.buffer(900, now, LONG);
        assert_eq!(reused.as_ptr(), addr, "the same allocation");
        assert_eq!(reused.len(), 1000, "its stale bytes count as initialised");
        assert_eq!(r.len(), 0, "taken out");
    }

    #[test]
    fn only_an_allocation_between_the_size_and_twice_it_is_reused() {
        let r = Recycler::default();
        let now = Instant::now();
        let (small, large) = (body(100), body(10_000));
        let (small_addr, large_addr) = (small.as_ptr(), large.as_ptr());
        r.keep(&small, now);
        r.keep(&large, now);
        drop((small, large));
        // Too small for 1,000 bytes, too large for 10 (it would pin 10 KB).
        assert_ne!(r.buffer(1000, now, LONG).as_ptr(), small_addr);
        let tiny = r.buffer(10, now, LONG);
        assert!(tiny.capacity() < 1000);
        assert_ne!(tiny.as_ptr(), large_addr);
        assert_eq!(r.buffer(6000, now, LONG).as_ptr(), large_addr);
        assert_eq!(r.buffer(60, now, LONG).as_ptr(), small_addr);
        assert_eq!(r.len(), 0);
    }

    #[test]
    fn handles_are_bounded_in_count_size_and_time() {
        let r = Recycler::default();
        let now = Instant::now();
        for _ in 0..SLOTS + 3 {
            r.keep(&body(10), now);
        }
        assert_eq!(r.len(), SLOTS);
        r.keep(&body(MAX_BODY + 1), now);
        r.keep(&Bytes::new(), now);
        assert_eq!(r.len(), SLOTS, "too long or empty: not kept");
        let _ = r.buffer(10, now + LONG, LONG);
        assert_eq!(r.len(), 0, "all expired at the idle timeout");
    }

    #[test]
    fn a_leaving_worker_drops_the_handles_as_old_as_its_idle_time() {
        let r = Recycler::default();
        let now = Instant::now();
        let (old, recent) = (body(1000), body(1000));
        let recent_addr = recent.as_ptr();
        r.keep(&old, now);
        r.keep(&recent, now + LONG / 2);
        drop((old, recent));
        r.expire(now + LONG - Duration::from_millis(1), LONG);
        assert_eq!(r.len(), 2, "none kept a whole idle time yet");
        r.expire(now + LONG, LONG);
        assert_eq!(r.len(), 1, "only the one kept a whole idle time ago");
        assert_eq!(
            r.buffer(1000, now + LONG, 2 * LONG).as_ptr(),
            recent_addr,
            "the recent one is still there"
        );
    }
}
