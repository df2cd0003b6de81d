//! The [default agent](crate::UreqTransport::default_agent)'s TCP
//! connections (Unix): every wait on a socket is a `poll(2)` bounded by the
//! time ureq allows, so an attempt's timeout fires when it is due.
//!
//! ureq's own `TcpConnector` waits in a blocking `read` or `write` under a
//! socket timeout (`SO_RCVTIMEO`, `SO_SNDTIMEO`), and the kernel fires those
//! on its coarse timer wheel: a 500 ms timeout fired 2–32 ms late on Linux
//! (BENCHMARKS.md 8.4). `poll` sleeps on a high-resolution timer instead
//! (Linux's default slack for a normal thread is 50 µs), which is what lets
//! an attempt run on the calling thread and still end at the call's
//! deadline (see [`UreqTransport`](crate::UreqTransport)).
//!
//! The socket is non-blocking from its connect on: a read or write that
//! would block polls for readiness until the timeout's instant, then
//! fails with ureq's `Timeout` of the reason ureq gave. The connect itself
//! is non-blocking too, and waits the same way.
//!
//! On a [crew](crate::crew) member, every wait also polls the crew's pipe
//! ([`watch`]): once the crew's batch is done, an attempt still in flight
//! on a member fails at once (its result is no longer wanted), so the
//! batch returns without waiting for it.

use std::cell::RefCell;
use std::io::{self, PipeReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::net::{AddressFamily, SocketFlags, SocketType};
use ureq::Error;
use ureq::unversioned::transport::time::Duration as UreqDuration;
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout, ShutdownHandle,
    Transport,
};

/// Opens a [`PollTcpTransport`] unless an earlier connector of the chain
/// (a proxy) has made the connection already. In the default agent it
/// stands where ureq's `TcpConnector` stands in ureq's `DefaultConnector`.
#[derive(Debug, Default)]
pub(crate) struct PollTcpConnector;

impl<In: Transport> Connector<In> for PollTcpConnector {
    type Out = Either<In, PollTcpTransport>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, Error> {
        if let Some(chained) = chained {
            return Ok(Some(Either::A(chained)));
        }
        let stream = connect(&details.addrs, details.timeout)?;
        if details.config.no_delay() {
            stream.set_nodelay(true)?;
        }
        stream.set_nonblocking(true)?;
        let config = details.config;
        let transport = PollTcpTransport {
            stream: Arc::new(stream),
            buffers: LazyBuffers::new(config.input_buffer_size(), config.output_buffer_size()),
        };
        // `Agent::shutdown` closes it too, as it closes ureq's own sockets.
        let handle = Arc::downgrade(&transport.stream) as Weak<dyn ShutdownHandle>;
        (details.register_shutdown)(handle)?;
        Ok(Some(Either::B(transport)))
    }
}

thread_local! {
    /// The pipe this thread's waits watch besides their socket (a crew
    /// member's), if any.
    static STOP: RefCell<Option<Arc<PipeReader>>> = const { RefCell::new(None) };
}

/// Until dropped, every wait on this thread also polls `pipe`, and fails
/// once it is readable (see the module's docs).
pub(crate) fn watch(pipe: Arc<PipeReader>) -> Watch {
    Watch(STOP.with(|s| s.borrow_mut().replace(pipe)))
}

/// Puts back what the thread watched before (see [`watch`]).
pub(crate) struct Watch(Option<Arc<PipeReader>>);

impl Drop for Watch {
    fn drop(&mut self) {
        let previous = self.0.take();
        STOP.with(|s| *s.borrow_mut() = previous);
    }
}

/// The error of a wait whose crew is done: a timeout, so that nothing
/// retries it (an `Interrupted` read is retried by `read_to_end`).
fn stopped() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "the batch has ended")
}

/// The shortest connect try an address gets while there is time left.
const MIN_PER_ADDRESS: Duration = Duration::from_millis(10);

/// Connects to the first of `addrs` that accepts, within `timeout`: each
/// address but the last may take half the time left (at least
/// [`MIN_PER_ADDRESS`]), the last all of it, as ureq shares its budget
/// between addresses (a geometric series). A refusal or an unreachable
/// address moves on to the next; any other error ends the connect.
/// (`connect_timeout` waits with `poll` too.)
fn connect(addrs: &[SocketAddr], timeout: NextTimeout) -> Result<TcpStream, Error> {
    let until = deadline(&timeout)?;
    let mut last = None;
    for (i, addr) in addrs.iter().enumerate() {
        let tried = match until {
            None => connect_to(addr, None),
            Some(until) => {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(Error::Timeout(timeout.reason));
                }
                let share = if i + 1 == addrs.len() {
                    left
                } else {
                    (left / 2).max(MIN_PER_ADDRESS).min(left)
                };
                connect_to(addr, Some(Instant::now() + share))
            }
        };
        match tried {
            Ok(stream) => return Ok(stream),
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                if until.is_some_and(|t| Instant::now() >= t) {
                    return Err(Error::Timeout(timeout.reason));
                }
                last = Some(Error::Timeout(ureq::Timeout::Connect));
            }
            Err(e) if only_this_address(&e) => last = Some(Error::Io(e)),
            Err(e) => return Err(Error::Io(e)),
        }
    }
    Err(last.unwrap_or_else(|| Error::Io(io::ErrorKind::ConnectionRefused.into())))
}

/// Connects to `addr` by `until` (`None`: no bound), without blocking: the
/// wait for the handshake is a [`ready`] poll, which a crew's pipe ends
/// too. `TimedOut` when `until` comes first. The stream is non-blocking.
fn connect_to(addr: &SocketAddr, until: Option<Instant>) -> io::Result<TcpStream> {
    let family = if addr.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    let flags = SocketFlags::CLOEXEC | SocketFlags::NONBLOCK;
    let stream = TcpStream::from(rustix::net::socket_with(
        family,
        SocketType::STREAM,
        flags,
        None,
    )?);
    match rustix::net::connect(&stream, addr) {
        Ok(()) => return Ok(stream),
        Err(rustix::io::Errno::INPROGRESS | rustix::io::Errno::INTR) => {}
        Err(e) => return Err(e.into()),
    }
    if !ready(&stream, PollFlags::OUT, until)? {
        return Err(io::ErrorKind::TimedOut.into());
    }
    match rustix::net::sockopt::socket_error(&stream)? {
        Ok(()) => Ok(stream),
        Err(e) => Err(e.into()),
    }
}

/// Whether a failed connect concerns only the address tried (as ureq's
/// `TcpConnector` decides: the next address may still answer).
fn only_this_address(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::HostUnreachable
            | io::ErrorKind::NetworkUnreachable
            | io::ErrorKind::NetworkDown
            | io::ErrorKind::AddrNotAvailable
    )
}

/// The instant `timeout` runs out (`None`: never); a timeout already run
/// out is ureq's `Timeout` error at once.
fn deadline(timeout: &NextTimeout) -> Result<Option<Instant>, Error> {
    match timeout.after {
        UreqDuration::NotHappening => Ok(None),
        UreqDuration::Exact(d) if d.is_zero() => Err(Error::Timeout(timeout.reason)),
        // An instant past what `Instant` holds is as good as never.
        UreqDuration::Exact(d) => Ok(Instant::now().checked_add(d)),
    }
}

/// Waits until `stream` is ready for `events` (or has an error or hang-up
/// to report), or until `until`: `false` when `until` came first. Fails
/// at once when this thread [watches](watch) a pipe that is readable.
fn ready(stream: &TcpStream, events: PollFlags, until: Option<Instant>) -> io::Result<bool> {
    loop {
        let left = match until {
            None => None,
            Some(until) => {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(false);
                }
                // Beyond what a timespec holds: wait without a bound.
                Timespec::try_from(short_of(left)).ok()
            }
        };
        // `None`: the pipe is readable.
        let polled = STOP.with(|stop| match &*stop.borrow() {
            None => Some(poll(&mut [PollFd::new(stream, events)], left.as_ref())),
            Some(pipe) => {
                let mut fds = [
                    PollFd::new(stream, events),
                    PollFd::new(&**pipe, PollFlags::IN),
                ];
                let polled = poll(&mut fds, left.as_ref());
                fds[1].revents().is_empty().then_some(polled)
            }
        });
        match polled {
            None => return Err(stopped()),
            // Timed out: `until` has passed (checked at the top).
            Some(Ok(0)) => {}
            Some(Ok(_)) => return Ok(true),
            Some(Err(rustix::io::Errno::INTR)) => {}
            Some(Err(e)) => return Err(e.into()),
        }
    }
}

/// How long to poll when `left` remains: a little less than `left`.
///
/// Linux lets a `poll` sleep past its timeout by the task's timer slack, which
/// for a poll is 0.1 % of the timeout (0.5 % for a niced thread, at least
/// 50 µs, at most 100 ms: `select_estimate_accuracy`): one poll for a 30 s
/// deadline could end 30 ms late. Stopping short by 1/64 of what is left
/// (more than any such slack) and polling again for the rest ends within
/// about 50 µs of `until`, after a few more wake-ups (30 s: 469 ms, 7 ms,
/// 0.1 ms) that only a wait that times out pays.
fn short_of(left: Duration) -> Duration {
    if left > Duration::from_millis(1) {
        left - left / 64
    } else {
        left
    }
}

/// A TCP connection whose reads and writes end at their timeout's instant
/// (see the module's docs).
pub(crate) struct PollTcpTransport {
    /// Shared (weakly) with the agent's shutdown handle.
    stream: Arc<TcpStream>,
    buffers: LazyBuffers,
}

impl std::fmt::Debug for PollTcpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PollTcpTransport")
            .field("addr", &self.stream.peer_addr().ok())
            .finish()
    }
}

impl Transport for PollTcpTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), Error> {
        let timeout = timeout.for_write();
        let until = deadline(&timeout)?;
        let stream = &*self.stream;
        let mut output = &self.buffers.output()[..amount];
        while !output.is_empty() {
            match (&*stream).write(output) {
                Ok(0) => return Err(Error::Io(io::ErrorKind::WriteZero.into())),
                Ok(n) => output = &output[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if !ready(stream, PollFlags::OUT, until)? {
                        return Err(Error::Timeout(timeout.reason));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::Io(e)),
            }
        }
        Ok(())
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, Error> {
        let timeout = timeout.for_read();
        let until = deadline(&timeout)?;
        let stream = &*self.stream;
        // Poll first: ureq asks for input when it expects some, which after
        // a request is usually not there yet (a read first would fail).
        if !ready(stream, PollFlags::IN, until)? {
            return Err(Error::Timeout(timeout.reason));
        }
        let input = self.buffers.input_append_buf();
        let amount = loop {
            match (&*stream).read(input) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if !ready(stream, PollFlags::IN, until)? {
                        return Err(Error::Timeout(timeout.reason));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::Io(e)),
            }
        };
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    fn is_open(&mut self) -> bool {
        // Idle in the pool, an open connection has nothing to read: a byte
        // would be garbage, an end of stream or an error a closed socket.
        let mut byte = [0u8];
        matches!((&*self.stream).read(&mut byte), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use ureq::unversioned::transport::time::Duration as D;

    fn timeout(after: Duration) -> NextTimeout {
        NextTimeout {
            after: D::Exact(after),
            reason: ureq::Timeout::RecvResponse,
            ..NextTimeout::default()
        }
    }

    fn pair() -> (PollTcpTransport, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stream = connect(&[addr], timeout(Duration::from_secs(5))).unwrap();
        stream.set_nonblocking(true).unwrap();
        let (server, _) = listener.accept().unwrap();
        let transport = PollTcpTransport {
            stream: Arc::new(stream),
            buffers: LazyBuffers::new(1024, 1024),
        };
        (transport, server)
    }

    #[test]
    fn a_read_from_a_silent_peer_ends_at_its_timeout_not_later() {
        let (mut t, _server) = pair();
        for ms in [30, 120] {
            let started = Instant::now();
            let err = t
                .await_input(timeout(Duration::from_millis(ms)))
                .unwrap_err();
            let took = started.elapsed();
            assert!(
                matches!(err, Error::Timeout(ureq::Timeout::RecvResponse)),
                "{err:?}"
            );
            assert!(took >= Duration::from_millis(ms), "{took:?} < {ms} ms");
            // How late it ends is measured (polite-bench `deadline`,
            // BENCHMARKS.md 8.13), not asserted: a timed test on a shared
            // machine gets 500 ms of slack.
            assert!(
                took < Duration::from_millis(ms + 500),
                "{took:?} for {ms} ms"
            );
        }
        // What makes it end on time: the wait was a poll, not a socket
        // timeout (which the kernel fires on its coarse timer).
        assert_eq!(t.stream.read_timeout().unwrap(), None);
        assert!(t.is_open(), "a timeout leaves the connection as it was");
    }

    #[test]
    fn each_poll_stops_short_of_what_is_left_by_more_than_the_kernel_s_slack() {
        for left_ms in [2u64, 30, 1_000, 30_000, 3_600_000] {
            let left = Duration::from_millis(left_ms);
            let wait = short_of(left);
            assert!(wait < left);
            // The slack Linux adds to a poll: 0.5 % for a niced thread (0.1 %
            // otherwise), at most 100 ms.
            let slack = (wait / 200).min(Duration::from_millis(100));
            assert!(wait + slack < left, "{left:?}: {wait:?} + {slack:?}");
        }
        let tiny = Duration::from_micros(900);
        assert_eq!(short_of(tiny), tiny, "the last stretch is waited whole");
    }

    #[test]
    fn input_is_read_and_an_end_of_stream_closes() {
        let (mut t, mut server) = pair();
        server.write_all(b"hello").unwrap();
        assert!(t.await_input(timeout(Duration::from_secs(5))).unwrap());
        assert_eq!(t.buffers().input(), b"hello");
        // Output goes out whole.
        t.buffers().output()[..3].copy_from_slice(b"abc");
        t.transmit_output(3, timeout(Duration::from_secs(5)))
            .unwrap();
        let mut got = [0u8; 3];
        server.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"abc");
        drop(server);
        assert!(
            !t.await_input(timeout(Duration::from_secs(5))).unwrap(),
            "EOF: no progress"
        );
        assert!(!t.is_open());
    }

    /// A raised pipe (the crew's batch is done) ends a wait on a silent
    /// peer at once, as a timeout (nothing retries it); without the watch
    /// the same wait runs to its timeout.
    #[test]
    fn a_wait_watching_a_raised_pipe_ends_at_once() {
        let (mut t, _server) = pair();
        let (reader, mut writer) = std::io::pipe().unwrap();
        let reader = Arc::new(reader);
        {
            let _watch = watch(Arc::clone(&reader));
            let raiser = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                writer.write_all(&[1]).unwrap();
                writer
            });
            let started = Instant::now();
            let err = t.await_input(timeout(Duration::from_secs(60))).unwrap_err();
            assert!(
                matches!(&err, Error::Io(e) if e.kind() == io::ErrorKind::TimedOut),
                "{err:?}"
            );
            // 60 s of timeout left; the raise came after 50 ms.
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{:?}",
                started.elapsed()
            );
            drop(raiser.join().unwrap());
            // Raised for good: the next wait fails at once too.
            assert!(t.await_input(timeout(Duration::from_secs(60))).is_err());
        }
        // The guard is gone: this thread's waits no longer watch the pipe.
        let err = t
            .await_input(timeout(Duration::from_millis(30)))
            .unwrap_err();
        assert!(matches!(err, Error::Timeout(_)), "{err:?}");
    }

    /// A connect that the server does not complete (its accept queue is
    /// full, so the kernel drops the handshake) waits until its timeout, or
    /// until the watched pipe is raised. (Linux drops a handshake beyond
    /// the accept queue; other kernels may refuse it instead.)
    #[cfg(target_os = "linux")]
    #[test]
    fn a_connect_the_server_leaves_waiting_ends_at_its_timeout_or_the_pipe() {
        use rustix::net::{SocketType, bind, listen, socket};
        let listener = socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
        bind(&listener, &SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
        listen(&listener, 0).unwrap();
        let listener = std::net::TcpListener::from(listener);
        let addr = listener.local_addr().unwrap();
        // Fill the accept queue (backlog 0 holds one; a few more to be
        // sure): later handshakes get no answer.
        let mut held = Vec::new();
        let mut waiting = None;
        for _ in 0..8 {
            match connect_to(&addr, Some(Instant::now() + Duration::from_millis(200))) {
                Ok(stream) => held.push(stream),
                Err(e) => {
                    waiting = Some(e);
                    break;
                }
            }
        }
        let e = waiting.expect("a handshake beyond the backlog is left waiting");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e:?}");
        let (reader, mut writer) = std::io::pipe().unwrap();
        let _watch = watch(Arc::new(reader));
        writer.write_all(&[1]).unwrap();
        let started = Instant::now();
        let e = connect_to(&addr, Some(Instant::now() + Duration::from_secs(60))).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e:?}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{:?}",
            started.elapsed()
        );
        drop(held);
    }

    #[test]
    fn a_spent_timeout_fails_at_once_and_a_refused_address_moves_on() {
        let (mut t, _server) = pair();
        let err = t.await_input(timeout(Duration::ZERO)).unwrap_err();
        assert!(matches!(err, Error::Timeout(ureq::Timeout::RecvResponse)));
        // A port with no listener refuses; the next address is tried.
        let closed = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let open = TcpListener::bind("127.0.0.1:0").unwrap();
        let to = timeout(Duration::from_secs(5));
        assert!(connect(&[closed, open.local_addr().unwrap()], to).is_ok());
        let err = connect(&[closed], to).unwrap_err();
        assert!(
            matches!(&err, Error::Io(e) if e.kind() == io::ErrorKind::ConnectionRefused),
            "{err:?}"
        );
        let err = connect(&[], to).unwrap_err();
        assert!(
            matches!(&err, Error::Io(e) if e.kind() == io::ErrorKind::ConnectionRefused),
            "{err:?}"
        );
    }
}
