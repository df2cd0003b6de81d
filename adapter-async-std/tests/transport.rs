//! `Http1Transport` on its own: what each attempt sends and reads, how
//! errors map to `TransportErrorKind`, and the abort at `abort_at`.
//!
//! Most checks run against the lab; body framings the lab never sends
//! (chunked, close-delimited, a 100 Continue first, a body cut short) come
//! from a one-shot raw server that writes canned bytes.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use bytes::Bytes;
use polite_async_io::{Http1Transport, Transport};
use polite_core::TransportErrorKind;
use polite_lab::{Fault, Lab, LabConfig, PathMatch, Step};

type Answer = Result<http::Response<Bytes>, TransportErrorKind>;

fn send(request: http::Request<Bytes>, within: Duration) -> Answer {
    smol::block_on(Http1Transport::new().send(request, Instant::now() + within))
        .map_err(|e| e.kind())
}

fn get(url: &str) -> http::Request<Bytes> {
    http::Request::get(url).body(Bytes::new()).unwrap()
}

/// Serves one connection: reads the request head, writes `answer`, closes.
/// Returns the address and a handle that yields the request head it read.
fn one_shot(answer: &'static [u8]) -> (SocketAddr, std::thread::JoinHandle<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap() == 1 {
            head.push(byte[0]);
        }
        s.write_all(answer).unwrap();
        String::from_utf8(head).unwrap()
    });
    (addr, handle)
}

#[test]
fn a_get_to_the_lab_comes_back_whole() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let resp = send(get(&lab.url("/items/a")), Duration::from_secs(5)).unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.body().as_ref(), br#"{"item":"a"}"#);
    assert!(resp.headers().contains_key("date"));
    let log = lab.log();
    assert_eq!(log.len(), 1);
    assert!(log[0].has_header("host"));
    assert!(
        !log[0].has_header("connection"),
        "keep-alive: no Connection header"
    );
}

#[test]
fn a_post_with_a_body_is_framed_and_answered() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let post = http::Request::post(lab.url("/items/k"))
        .header("content-type", "application/json")
        .body(Bytes::from_static(br#"{"name":"k"}"#))
        .unwrap();
    let resp = send(post, Duration::from_secs(5)).unwrap();
    assert_eq!(resp.status(), 201);
    assert!(lab.log()[0].has_header("content-length"));
}

#[test]
fn a_chunked_answer_is_decoded() {
    let (addr, server) = one_shot(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    );
    let resp = send(get(&format!("http://{addr}/x?y=1")), Duration::from_secs(5)).unwrap();
    assert_eq!(resp.body().as_ref(), b"hello world");
    let head = server.join().unwrap();
    assert!(head.starts_with("GET /x?y=1 HTTP/1.1\r\n"), "{head}");
    assert!(!head.contains("connection:"), "{head}");
}

#[test]
fn a_close_delimited_answer_ends_at_the_close() {
    let (addr, _server) = one_shot(b"HTTP/1.0 200 OK\r\n\r\nuntil the end");
    let resp = send(get(&format!("http://{addr}/")), Duration::from_secs(5)).unwrap();
    assert_eq!(resp.body().as_ref(), b"until the end");
}

#[test]
fn an_interim_100_continue_is_skipped() {
    let (addr, _server) =
        one_shot(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 503 Service Unavailable\r\nRetry-After: 7\r\nContent-Length: 2\r\n\r\nno");
    let resp = send(get(&format!("http://{addr}/")), Duration::from_secs(5)).unwrap();
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "7");
    assert_eq!(resp.body().as_ref(), b"no");
}

#[test]
fn a_body_cut_short_is_a_reset() {
    let (addr, _server) = one_shot(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this");
    let err = send(get(&format!("http://{addr}/")), Duration::from_secs(5)).unwrap_err();
    assert_eq!(err, TransportErrorKind::Reset);
}

#[test]
fn a_malformed_answer_is_an_invalid_answer() {
    let (addr, _server) = one_shot(b"SMTP ready\r\n\r\n");
    let err = send(get(&format!("http://{addr}/")), Duration::from_secs(5)).unwrap_err();
    assert_eq!(err, TransportErrorKind::InvalidAnswer);
}

/// A control byte in a header value, a garbage status line:
/// `InvalidAnswer`, as on every adapter, with ureq-proto's parse error as
/// the source.
#[test]
fn an_answer_that_is_not_http_is_an_invalid_answer_with_the_parsers_error() {
    let answers: [&'static [u8]; 2] = [
        b"HTTP/1.1 503 X\r\nRetry-After: 1\x01\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 ?!? Nope\r\nContent-Length: 0\r\n\r\n",
    ];
    for answer in answers {
        let (addr, _server) = one_shot(answer);
        let request = get(&format!("http://{addr}/"));
        let deadline = Instant::now() + Duration::from_secs(5);
        let e = smol::block_on(Http1Transport::new().send(request, deadline)).unwrap_err();
        assert_eq!(e.kind(), TransportErrorKind::InvalidAnswer, "{e}");
        let source = std::error::Error::source(&e).expect("the parser's error is kept");
        assert!(
            source.downcast_ref::<ureq_proto::Error>().is_some(),
            "{source:?}"
        );
    }
}

#[test]
fn an_oversized_body_is_refused_by_its_length_or_by_what_arrives() {
    let (addr, _server) = one_shot(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789");
    let t = Http1Transport::new().max_body(4);
    let deadline = Instant::now() + Duration::from_secs(5);
    let err = smol::block_on(t.send(get(&format!("http://{addr}/")), deadline)).unwrap_err();
    assert_eq!(err.kind(), TransportErrorKind::BodyTooLarge);
    assert_eq!(err.to_string(), "body larger than the 4-byte limit");

    let (addr, _server) =
        one_shot(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
    let err = smol::block_on(t.send(get(&format!("http://{addr}/")), deadline)).unwrap_err();
    assert_eq!(err.kind(), TransportErrorKind::BodyTooLarge);
}

#[test]
fn a_body_of_exactly_the_limit_is_whole_in_every_framing() {
    let t = Http1Transport::new().max_body(5);
    let deadline = Instant::now() + Duration::from_secs(5);
    for answer in [
        &b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"[..],
        &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhe\r\n3\r\nllo\r\n0\r\n\r\n"[..],
        &b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nhello"[..],
    ] {
        let (addr, _server) = one_shot(answer);
        let resp = smol::block_on(t.send(get(&format!("http://{addr}/")), deadline)).unwrap();
        assert_eq!(resp.body().as_ref(), b"hello");
    }
    // One byte over, without a declared length: refused by what arrives.
    for answer in [
        &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nhello!\r\n0\r\n\r\n"[..],
        &b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nhello!"[..],
    ] {
        let (addr, _server) = one_shot(answer);
        let err = smol::block_on(t.send(get(&format!("http://{addr}/")), deadline)).unwrap_err();
        assert_eq!(err.kind(), TransportErrorKind::BodyTooLarge);
    }
}

#[test]
fn a_large_body_arrives_whole_over_many_reads() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let t = Http1Transport::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    for n in [0, 1, 16 << 10, (16 << 10) + 1, 3 << 20] {
        let resp = smol::block_on(t.send(get(&lab.url(&format!("/bytes/{n}"))), deadline)).unwrap();
        assert_eq!(resp.body().len(), n);
        assert!(resp.body().iter().all(|b| *b == b'x'));
    }
    // The same connection served them all: every body was read to its end.
    assert_eq!(lab.connections(), 1);
}

#[test]
fn a_closed_port_is_refused() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let err = send(
        get(&format!("http://127.0.0.1:{port}/")),
        Duration::from_secs(5),
    )
    .unwrap_err();
    assert_eq!(err, TransportErrorKind::Refused);
}

#[test]
fn a_reset_connection_is_a_reset() {
    let lab = Lab::start(LabConfig::default().script("/items/r", vec![Step::Reset, Step::Normal]))
        .unwrap();
    let err = send(get(&lab.url("/items/r")), Duration::from_secs(5)).unwrap_err();
    assert_eq!(err, TransportErrorKind::Reset);
}

#[test]
fn an_unknown_host_is_a_dns_failure() {
    // `.invalid` never resolves (RFC 6761); resolution runs on the blocking pool.
    let err = send(get("http://polite-test.invalid/"), Duration::from_secs(20)).unwrap_err();
    assert_eq!(err, TransportErrorKind::Dns);
}

#[test]
fn relative_and_non_http_urls_fail_without_touching_the_network() {
    let start = Instant::now();
    for url in ["ftp://127.0.0.1:9/", "/relative"] {
        let err = send(get(url), Duration::from_secs(5)).unwrap_err();
        assert_eq!(err, TransportErrorKind::InvalidRequest, "{url}");
    }
    assert!(start.elapsed() < Duration::from_secs(1));
}

#[test]
fn a_hanging_attempt_is_aborted_at_abort_at_on_both_executors() {
    let lab = Lab::start(LabConfig::default().fault(PathMatch::Any, Fault::Hang)).unwrap();
    let t = Http1Transport::new();
    for executor in ["async-std", "smol"] {
        let start = Instant::now();
        let attempt = t.send(
            get(&lab.url("/items/h")),
            start + Duration::from_millis(300),
        );
        let err = match executor {
            "smol" => smol::block_on(attempt),
            _ => async_std::task::block_on(attempt),
        }
        .unwrap_err();
        let took = start.elapsed();
        assert_eq!(err.kind(), TransportErrorKind::Aborted);
        assert!(took >= Duration::from_millis(300), "{executor}: {took:?}");
        assert!(took < Duration::from_millis(600), "{executor}: {took:?}");
    }
}

/// Serves `answers` in order on one connection (reading each request head
/// first), then closes. Returns the address; the handle yields how many
/// connections it accepted (always 1: the test fails if the client opens
/// another, since nobody accepts it).
fn one_connection(answers: Vec<Vec<u8>>) -> (SocketAddr, std::thread::JoinHandle<usize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        for answer in answers {
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap() == 1 {
                head.push(byte[0]);
            }
            // In pieces, so that bodies straddle the client's reads.
            for piece in answer.chunks(7001) {
                s.write_all(piece).unwrap();
            }
        }
        1
    });
    (addr, handle)
}

fn length_answer(fill: u8, n: usize) -> Vec<u8> {
    let mut a = format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n").into_bytes();
    a.resize(a.len() + n, fill);
    a
}

fn chunked_answer(fill: u8, n: usize, chunk: usize) -> Vec<u8> {
    let mut a = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    let mut left = n;
    while left > 0 {
        let k = left.min(chunk);
        a.extend_from_slice(format!("{k:x}\r\n").as_bytes());
        a.resize(a.len() + k, fill);
        a.extend_from_slice(b"\r\n");
        left -= k;
    }
    a.extend_from_slice(b"0\r\n\r\n");
    a
}

/// Bodies are decoded into buffers reused from dropped bodies, over their
/// stale bytes: each body must still be exactly its own bytes, whatever
/// its framing and whatever longer body the buffer held before, the limit
/// must still hold, and the connection must carry every answer.
#[test]
fn bodies_read_into_reused_buffers_are_exact_in_every_framing_on_one_connection() {
    let limit = 40_000;
    let answers = vec![
        length_answer(b'a', 40_000), // exactly the limit
        chunked_answer(b'c', 30_000, 3_001),
        length_answer(b'b', 21_000),
        length_answer(b'e', 0),
        chunked_answer(b'f', 17_000, 16_999),
        length_answer(b'g', 39_999),
        // Over the limit, by what arrives: refused, the connection closed.
        chunked_answer(b'h', 40_001, 10_000),
    ];
    let expected: Vec<(u8, usize)> = vec![
        (b'a', 40_000),
        (b'c', 30_000),
        (b'b', 21_000),
        (b'e', 0),
        (b'f', 17_000),
        (b'g', 39_999),
    ];
    let (addr, server) = one_connection(answers);
    let t = Http1Transport::new().max_body(limit);
    let url = format!("http://{addr}/");
    for (fill, n) in expected {
        let deadline = Instant::now() + Duration::from_secs(10);
        let resp = smol::block_on(t.send(get(&url), deadline)).unwrap();
        assert_eq!(resp.body().len(), n, "{}", fill as char);
        assert!(
            resp.body().iter().all(|b| *b == fill),
            "stale bytes in the body of {}",
            fill as char
        );
        // Dropped here: its buffer may serve the next body.
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let err = smol::block_on(t.send(get(&url), deadline)).unwrap_err();
    assert_eq!(err.kind(), TransportErrorKind::BodyTooLarge);
    assert_eq!(server.join().unwrap(), 1);
    assert_eq!(
        t.idle_connections(),
        0,
        "a refused body's connection is closed"
    );
}

/// A body still held by its caller is never written over: the next bodies
/// go to fresh buffers.
#[test]
fn a_body_the_caller_keeps_is_never_reused() {
    let (addr, server) = one_connection(vec![
        length_answer(b'a', 50_000),
        length_answer(b'b', 50_000),
        chunked_answer(b'c', 50_000, 4_096),
    ]);
    let t = Http1Transport::new();
    let url = format!("http://{addr}/");
    let deadline = Instant::now() + Duration::from_secs(10);
    let kept: Vec<_> = (0..3)
        .map(|_| smol::block_on(t.send(get(&url), deadline)).unwrap())
        .collect();
    for (resp, fill) in kept.iter().zip([b'a', b'b', b'c']) {
        assert_eq!(resp.body().len(), 50_000);
        assert!(resp.body().iter().all(|b| *b == fill));
    }
    assert_eq!(server.join().unwrap(), 1);
}
