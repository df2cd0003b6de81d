//! HTTPS: polite-async-io's `send` over its own TLS transport versus a
//! hand-written smol + futures-rustls client, sequential GETs on loopback
//! against the lab in TLS mode (a self-signed certificate made at start
//! with rcgen), interleaved in rounds (each round runs every variant, the
//! order rotating), per-request medians; and how many connections 1,000
//! sequential GETs (and a batch of 1,000 at concurrency 4) open.
//!
//! * peer: one TLS connection (rustls through futures-rustls on an
//!   `async_io::Async<TcpStream>`), kept alive, the request written by
//!   hand, the answer read by `Content-Length`: the least an async-io
//!   HTTPS client can do;
//! * polite's bare `Http1Transport::send` (pooled, ureq-proto framing);
//! * polite `send` (the machines, the pace, the redirect loop on top).
//!
//! All three trust the same certificate with the same rustls
//! configuration (ring provider, ALPN `http/1.1`).

use std::future::Future;
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use polite_async_io::{Client, Config, Http1Transport, Transport as _, rustls};
use polite_lab::{LabConfig, LabHandle};
use smol::Async;
use smol::io::{AsyncReadExt, AsyncWriteExt};

use crate::stats::{Dist, Table, num, ratio};
use crate::{Size, get, lab, ms};

const TIMEOUT: Duration = Duration::from_secs(5);

/// A self-signed certificate for 127.0.0.1, a TLS lab serving it, and a
/// rustls configuration trusting it.
fn tls_lab() -> (LabHandle, Arc<rustls::ClientConfig>) {
    let made = match rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]) {
        Ok(m) => m,
        Err(e) => panic!("cannot make a certificate: {e}"),
    };
    let lab = lab(LabConfig::default().tls(made.cert.pem(), made.signing_key.serialize_pem()));
    let mut roots = rustls::RootCertStore::empty();
    if let Err(e) = roots.add(made.cert.der().clone()) {
        panic!("cannot trust the certificate: {e}");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = match rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
    {
        Ok(b) => b.with_root_certificates(roots).with_no_client_auth(),
        Err(e) => panic!("rustls: {e}"),
    };
    let mut config = config;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    (lab, Arc::new(config))
}

/// The hand-written peer: one kept-alive TLS connection.
struct Raw {
    stream: futures_rustls::client::TlsStream<Async<TcpStream>>,
    host: String,
    buf: Vec<u8>,
}

impl Raw {
    async fn connect(lab: &LabHandle, config: Arc<rustls::ClientConfig>) -> Option<Raw> {
        let tcp = Async::<TcpStream>::connect(lab.addr()).await.ok()?;
        tcp.get_ref().set_nodelay(true).ok()?;
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").ok()?;
        let stream = futures_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .ok()?;
        Some(Raw {
            stream,
            host: lab.addr().to_string(),
            buf: Vec::with_capacity(4096),
        })
    }

    /// `GET path`, the body read whole; the status.
    async fn get(&mut self, path: &str) -> Option<u16> {
        let head = format!("GET {path} HTTP/1.1\r\nhost: {}\r\n\r\n", self.host);
        self.stream.write_all(head.as_bytes()).await.ok()?;
        self.stream.flush().await.ok()?;
        let mut chunk = [0u8; 4096];
        let end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let n = self.stream.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            self.buf.extend_from_slice(&chunk[..n]);
        };
        let text = std::str::from_utf8(&self.buf[..end]).ok()?;
        let status = text.get(9..12)?.parse().ok()?;
        let length: usize = text
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .unwrap_or(0);
        while self.buf.len() < end + length {
            let n = self.stream.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
        self.buf.drain(..end + length);
        Some(status)
    }
}

/// Per-request times (ms) per variant, and failures.
#[derive(Debug)]
struct Samples {
    times: Vec<Vec<f64>>,
    failures: usize,
}

async fn interleave<F, Fut>(
    variants: usize,
    rounds: usize,
    per_round: usize,
    warm: usize,
    mut one: F,
) -> Samples
where
    F: FnMut(usize, usize) -> Fut,
    Fut: Future<Output = bool>,
{
    let mut i = 0;
    for _ in 0..warm {
        for v in 0..variants {
            i += 1;
            one(v, i).await;
        }
    }
    let mut samples = Samples {
        times: vec![Vec::new(); variants],
        failures: 0,
    };
    for r in 0..rounds {
        for k in 0..variants {
            let v = (k + r) % variants;
            for _ in 0..per_round {
                i += 1;
                let t = Instant::now();
                let ok = one(v, i).await;
                samples.times[v].push(ms(t.elapsed()));
                samples.failures += usize::from(!ok);
            }
        }
    }
    samples
}

/// The latency table: variants 0 peer, 1 bare transport, 2 polite `send`.
fn latency(size: Size) -> Table {
    let (rounds, per_round, warm) = size.pick((10, 300, 200), (2, 5, 2));
    let (lab, config) = tls_lab();
    let transport = Http1Transport::with_tls(Arc::clone(&config));
    let polite = match Client::with_transport(
        Http1Transport::with_tls(Arc::clone(&config)),
        Config::default(),
    ) {
        Ok(c) => c,
        Err(e) => panic!("client: {e}"),
    };
    let samples = smol::block_on(async {
        let Some(raw) = Raw::connect(&lab, Arc::clone(&config)).await else {
            panic!("the peer cannot connect to the TLS lab");
        };
        let raw = smol::lock::Mutex::new(raw);
        interleave(3, rounds, per_round, warm, |variant, i| {
            let (raw, transport, polite, lab) = (&raw, &transport, &polite, &lab);
            async move {
                let path = format!("/items/{i}");
                match variant {
                    2 => polite
                        .send(get(&lab.url(&path)))
                        .await
                        .is_ok_and(|r| r.status() == 200),
                    1 => transport
                        .send(get(&lab.url(&path)), Instant::now() + TIMEOUT)
                        .await
                        .is_ok_and(|r| r.status() == 200),
                    _ => raw.lock().await.get(&path).await == Some(200),
                }
            }
        })
        .await
    });
    let peer = Dist::of(samples.times[0].iter().copied());
    let mut table = Table::new(
        "HTTPS GET on loopback: polite-async-io vs a hand-written smol + futures-rustls client (µs per request)",
        &[
            "variant",
            "n",
            "p50",
            "p90",
            "p99",
            "p50 vs peer",
            "p90 vs peer",
            "failed",
        ],
    );
    for (v, name) in [
        (
            0,
            "hand-written smol + futures-rustls (one kept-alive connection)",
        ),
        (1, "polite-async-io bare `Http1Transport::send` (pooled)"),
        (2, "polite-async-io `send`"),
    ] {
        let d = Dist::of(samples.times[v].iter().copied());
        table.row(vec![
            name.to_owned(),
            d.n.to_string(),
            num(d.p50 * 1e3, 1),
            num(d.p90 * 1e3, 1),
            num(d.p99 * 1e3, 1),
            if v == 0 {
                "1.00×".to_owned()
            } else {
                format!("**{}**", ratio(d.p50, peer.p50))
            },
            ratio(d.p90, peer.p90),
            if v == 0 {
                samples.failures.to_string()
            } else {
                String::new()
            },
        ]);
    }
    table.note(format!(
        "{rounds} rounds of {per_round} GETs per variant after {warm} warm-up GETs each, the order rotating per round; \
         the failed column counts all variants. The lab accepted {} TCP connections in all (one per client: every variant kept its connection).",
        lab.connections()
    ));
    table
}

/// Connections opened per 1,000 sequential GETs and per 1,000-item batch at concurrency 4.
fn connections(size: Size) -> Table {
    let n = size.pick(1000, 20);
    let mut table = Table::new(
        "Connections opened by polite-async-io (goal: 1 per 1,000 sequential GETs)",
        &[
            "scheme",
            "work",
            "requests",
            "connections opened",
            "per 1,000 requests",
            "failed",
        ],
    );
    for tls in [true, false] {
        for concurrency in [1u32, 4] {
            let (lab, transport) = if tls {
                let (lab, config) = tls_lab();
                (lab, Http1Transport::with_tls(config))
            } else {
                (lab(LabConfig::default()), Http1Transport::new())
            };
            let config = Config {
                timeout: Duration::from_secs(60),
                concurrency,
                ..Config::default()
            };
            let client = match Client::with_transport(transport, config) {
                Ok(c) => c,
                Err(e) => panic!("client: {e}"),
            };
            let failed = smol::block_on(async {
                if concurrency == 1 {
                    let mut failed = 0;
                    for i in 0..n {
                        let ok = client
                            .send(get(&lab.url(&format!("/items/{i}"))))
                            .await
                            .is_ok_and(|r| r.status() == 200);
                        failed += usize::from(!ok);
                    }
                    failed
                } else {
                    let requests = (0..n)
                        .map(|i| get(&lab.url(&format!("/items/{i}"))))
                        .collect();
                    match client.batch(requests).await {
                        Ok(results) => results.iter().filter(|r| r.is_err()).count(),
                        Err(_) => n,
                    }
                }
            });
            let opened = lab.connections();
            table.row(vec![
                if tls { "https" } else { "http" }.to_owned(),
                if concurrency == 1 {
                    "sequential `send`".to_owned()
                } else {
                    format!("`batch`, concurrency {concurrency}")
                },
                n.to_string(),
                opened.to_string(),
                num(opened as f64 * 1000.0 / n as f64, 1),
                failed.to_string(),
            ]);
        }
    }
    table.note("Counted at the lab (`LabHandle::connections`: accepted TCP connections).");
    table
}

/// The hidden `tls-calls <variant> <n>` command (run under callgrind, as
/// `calls` is): `n` sequential HTTPS GETs of `/items/a` against a TLS lab
/// in this process through `peer` (the hand-written client),
/// `transport` (the bare `Http1Transport::send`) or `send` (polite's
/// `send`); how many answered 200.
///
/// # Panics
///
/// On an unknown variant, or when a client cannot be built.
#[must_use]
pub fn calls(variant: &str, n: usize) -> usize {
    let (lab, config) = tls_lab();
    let url = lab.url("/items/a");
    smol::block_on(async {
        let mut ok = 0;
        match variant {
            "peer" => {
                let Some(mut raw) = Raw::connect(&lab, config).await else {
                    panic!("the peer cannot connect to the TLS lab");
                };
                for _ in 0..n {
                    ok += usize::from(raw.get("/items/a").await == Some(200));
                }
            }
            "transport" => {
                let transport = Http1Transport::with_tls(config);
                for _ in 0..n {
                    let answer = transport.send(get(&url), Instant::now() + TIMEOUT).await;
                    ok += usize::from(answer.is_ok_and(|r| r.status() == 200));
                }
            }
            "send" => {
                let polite = match Client::with_transport(
                    Http1Transport::with_tls(config),
                    Config::default(),
                ) {
                    Ok(c) => c,
                    Err(e) => panic!("client: {e}"),
                };
                for _ in 0..n {
                    ok += usize::from(
                        polite
                            .send(get(&url))
                            .await
                            .is_ok_and(|r| r.status() == 200),
                    );
                }
            }
            other => panic!("unknown variant {other} (peer, transport, send)"),
        }
        ok
    })
}

/// Both tables.
#[must_use]
pub fn run(size: Size) -> Vec<Table> {
    vec![latency(size), connections(size)]
}
