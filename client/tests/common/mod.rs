//! Test support shared by polite-client's test binaries: a runtime of the
//! test's own (virtual time: sleeps advance a thread-local clock at once;
//! calls block on a poll loop) and a scripted in-memory transport.
#![allow(dead_code)] // each test binary uses a different part

use std::cell::Cell;
use std::collections::VecDeque;
use std::future::{Future, Ready, ready};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use polite_client::{CancelToken, Clock, Runtime, Transport, TransportError};

thread_local! {
    /// This test thread's virtual time (every call blocks on the calling thread).
    static NOW: Cell<Option<Instant>> = const { Cell::new(None) };
}

pub(crate) fn now() -> Instant {
    NOW.with(|n| match n.get() {
        Some(t) => t,
        None => {
            let t = Instant::now();
            n.set(Some(t));
            t
        }
    })
}

/// Virtual time: a sleep moves the clock to its instant and is over.
pub(crate) struct Virtual;
impl Clock for Virtual {
    fn now(&self) -> Instant {
        now()
    }
    fn wall(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }
    fn poll_sleep(&mut self, _: &mut Context<'_>, until: Instant) -> Poll<()> {
        NOW.with(|n| n.set(Some(until.max(now()))));
        Poll::Ready(())
    }
}

/// Calls block on a poll loop; nothing here ever waits for real.
pub(crate) struct Sim;
impl Runtime for Sim {
    type Clock = Virtual;
    type Token = CancelToken;
    type Cancel = CancelToken;
    type Call<F: Future> = F::Output;
    type Ready = Script;
    fn clock() -> Virtual {
        Virtual
    }
    fn watch(token: &CancelToken) -> CancelToken {
        token.clone()
    }
    fn cancel(token: &CancelToken) {
        token.cancel();
    }
    fn call<F: Future>(call: F) -> F::Output {
        let mut call = std::pin::pin!(call);
        for _ in 0..10_000 {
            if let Poll::Ready(out) = call.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
                return out;
            }
        }
        panic!("a call on virtual time kept pending");
    }
    fn settle<F: Future>(output: F::Output) -> impl Future<Output = F::Output> {
        ready(output)
    }
}

/// A header, by name and value.
pub(crate) type Header = (&'static str, &'static str);
/// One scripted answer: status, headers, body.
pub(crate) type Answer = (u16, Vec<Header>, &'static str);

/// Answers from a script (status, headers, body), records each send's
/// virtual instant and path; out of script, 200.
#[derive(Clone, Debug, Default)]
pub(crate) struct Script {
    answers: Arc<Mutex<VecDeque<Answer>>>,
    sent: Arc<Mutex<Vec<(Instant, String)>>>,
    /// The bodies of the answers passed to `keep`, in order.
    kept: Arc<Mutex<Vec<Bytes>>>,
}

impl Script {
    pub(crate) fn of(answers: &[(u16, &[Header], &'static str)]) -> Script {
        let s = Script::default();
        *s.answers.lock().unwrap() = answers
            .iter()
            .map(|(c, h, b)| (*c, h.to_vec(), *b))
            .collect();
        s
    }
    pub(crate) fn sent(&self) -> Vec<(Instant, String)> {
        self.sent.lock().unwrap().clone()
    }
    pub(crate) fn kept(&self) -> Vec<Bytes> {
        self.kept.lock().unwrap().clone()
    }
}

impl Transport for Script {
    type Sending = Ready<Result<http::Response<Bytes>, TransportError>>;
    fn send(&self, request: http::Request<Bytes>, _: Instant) -> Self::Sending {
        self.sent
            .lock()
            .unwrap()
            .push((now(), request.uri().to_string()));
        let (status, headers, body) =
            self.answers
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or((200, Vec::new(), "ok"));
        let mut r = http::Response::new(Bytes::from_static(body.as_bytes()));
        *r.status_mut() = http::StatusCode::from_u16(status).unwrap();
        for (k, v) in headers {
            r.headers_mut().insert(k, http::HeaderValue::from_static(v));
        }
        ready(Ok(r))
    }
    fn keep(&self, answer: &mut http::Response<Bytes>) {
        self.kept.lock().unwrap().push(answer.body().clone());
    }
}

pub(crate) fn get(path: &str) -> http::Request<Bytes> {
    http::Request::get(format!("http://127.0.0.1:9{path}"))
        .body(Bytes::new())
        .unwrap()
}
