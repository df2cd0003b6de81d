//! Answers that repeating cannot cure, against real loopback servers
//! ([`crate::hostile`]), through polite's client on any runtime: a 2 GiB
//! body, an answer head over every transport's limit, redirect loops and
//! chains, a 307 after a PUT, redirects to another origin, a refused
//! connection, an unsendable URL, extension methods (sent once, or
//! refused unsent: never retried), and answers that are not valid HTTP
//! (one kind on every transport, the parser's error kept). Counted at the server. Written once; each adapter runs it with
//! [`hostile_tests!`](crate::hostile_tests).

use std::time::Duration;

use bytes::Bytes;
use polite_client::api::{Outcome, TransportErrorKind as K};
use polite_client::{Client, Config, Error, RedirectPolicy, Runtime, Transport};
use polite_core::Reply as Answer;

use crate::hostile::{Hostile, Reply};

const GIB: u64 = 1 << 30;

/// `Err(message)` unless `cond`.
macro_rules! ensure {
    ($cond:expr, $($why:tt)+) => {
        if !$cond {
            return Err(format!($($why)+));
        }
    };
}

fn io(e: std::io::Error) -> String {
    format!("cannot start the hostile server: {e}")
}

fn get(url: String) -> Result<http::Request<Bytes>, String> {
    http::Request::get(url)
        .header("x-api-key", "SECRET-KEY")
        .header("authorization", "Bearer SECRET-TOKEN")
        .body(Bytes::new())
        .map_err(|e| e.to_string())
}

/// The attempts of a call that must have ended on a permanent `kind`.
fn permanent(e: &Error, kind: K) -> Result<u32, String> {
    match e {
        Error::Transport {
            outcome, attempts, ..
        } => {
            ensure!(
                *outcome == Outcome::Permanent { cause: kind },
                "{e}: want permanent {kind:?}"
            );
            ensure!(
                std::error::Error::source(e).is_some(),
                "{e}: the transport's error is not kept as source()"
            );
            Ok(*attempts)
        }
        other => Err(format!("expected a permanent {kind:?}, got {other:?}")),
    }
}

/// Every check's name, for [`hostile_tests!`](crate::hostile_tests).
///
/// ```
/// assert!(polite_lab::runner::hostile::names().contains(&"redirect_loop_is_one_send"));
/// ```
#[must_use]
pub fn names() -> Vec<&'static str> {
    vec![
        "chunked_2_gib_body_is_one_request_cut_at_the_limit",
        "declared_2_gib_body_is_refused_before_reading_it",
        "redirect_loop_is_one_send",
        "put_307_is_followed_once_body_never_resent",
        "cross_origin_redirect_never_carries_the_callers_headers",
        "refused_connection_keeps_source_attempts_and_time",
        "unsendable_url_is_one_attempt",
        "a_port_past_65535_is_one_attempt_sent_nowhere",
        "long_poll_redirect_starts_from_the_url_sent",
        "streamed_batch_items_follow_redirects_from_their_own_request",
        "an_answer_head_over_the_limit_is_one_attempt",
        "extension_methods_are_sent_once_or_refused_unsent",
        "an_answer_that_is_not_http_is_one_kind_on_every_transport",
    ]
}

/// The head of [`Reply::BigHead`] in the hostile checks: over every
/// adapter's limit (64 KiB for ureq and the async-io transport, hyper's
/// 408 KiB read buffer or 100 headers for reqwest).
const BIG_HEAD: u64 = 512 << 10;

/// Answers that are not valid HTTP/1.1, by path: a header value with a
/// control byte (the `Retry-After: 1\x01` of a user trial) and a garbage
/// status line.
const NOT_HTTP: [(&str, &[u8]); 2] = [
    (
        "/ctl",
        b"HTTP/1.1 503 X\r\nRetry-After: 1\x01\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    ),
    (
        "/garbage",
        b"HTTP/1.1 ?!? Nope\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    ),
];

/// The kind every transport reports an answer that is not valid HTTP as:
/// `InvalidAnswer`, permanent (the same server answers the same way:
/// never retried). Never `Reset` (the connection was not cut, the server
/// answered nonsense) nor `Other`.
const NOT_HTTP_KIND: K = K::InvalidAnswer;

/// Runs the named check with a `Client<R, T>` over `transport` (made by
/// `transport` afresh for each client the check needs). `Err` says what
/// differed.
///
/// # Errors
///
/// The check failed, or it could not be set up.
pub async fn run<R, T>(name: &str, transport: impl Fn() -> T) -> Result<(), String>
where
    R: Runtime,
    T: Transport,
    T::Sending: Unpin,
{
    let client = |redirects: RedirectPolicy| {
        let config = Config {
            timeout: Duration::from_secs(20),
            redirects,
            ..Config::default()
        };
        Client::<R, T>::with_transport(transport(), config).map_err(|e| e.to_string())
    };
    let send =
        |c: Client<R, T>, req: http::Request<Bytes>| async move { R::settle(c.send(req)).await };
    match name {
        "chunked_2_gib_body_is_one_request_cut_at_the_limit" => {
            let server =
                Hostile::start(vec![("/huge", Reply::Chunked { total: 2 * GIB })]).map_err(io)?;
            let c = client(RedirectPolicy::default())?;
            let Err(e) = send(c, get(server.url("/huge"))?).await else {
                return Err("a 2 GiB body was accepted".into());
            };
            ensure!(permanent(&e, K::BodyTooLarge)? == 1, "{e}: retried");
            ensure!(
                e.to_string().contains("16 MiB limit"),
                "{e}: the limit is not named"
            );
            ensure!(
                server.count("/huge") == 1,
                "{} requests",
                server.count("/huge")
            );
            let pushed = server.body_bytes_sent();
            ensure!(pushed < 64 << 20, "{pushed} bytes pushed before the cut");
        }
        "declared_2_gib_body_is_refused_before_reading_it" => {
            let server =
                Hostile::start(vec![("/big", Reply::Declared { length: 2 * GIB })]).map_err(io)?;
            let c = client(RedirectPolicy::default())?;
            let Err(e) = send(c, get(server.url("/big"))?).await else {
                return Err("a declared 2 GiB body was accepted".into());
            };
            ensure!(permanent(&e, K::BodyTooLarge)? == 1, "{e}: retried");
            ensure!(
                server.count("/big") == 1,
                "{} requests",
                server.count("/big")
            );
        }
        "redirect_loop_is_one_send" => {
            let server = Hostile::start(vec![
                ("/loop", Reply::redirect(302, "/loop")),
                ("/hop", Reply::Chain),
            ])
            .map_err(io)?;
            let c = client(RedirectPolicy::default())?;
            let Err(e) = send(c.clone(), get(server.url("/loop"))?).await else {
                return Err("a redirect loop ended well".into());
            };
            ensure!(permanent(&e, K::TooManyRedirects)? == 1, "{e}: retried");
            ensure!(
                server.count("/loop") == 1,
                "a loop back to itself is seen at once, not after {} requests",
                server.count("/loop")
            );
            // An endless chain of fresh URLs: the first request and 10 hops.
            let Err(e) = send(c, get(server.url("/hop/0"))?).await else {
                return Err("an endless redirect chain ended well".into());
            };
            ensure!(permanent(&e, K::TooManyRedirects)? == 1, "{e}: retried");
            ensure!(
                server.count("/hop") == 11,
                "{} requests down the chain, want 11",
                server.count("/hop")
            );
            ensure!(
                e.to_string().contains("more than 10"),
                "{e}: the limit is not named"
            );
        }
        "put_307_is_followed_once_body_never_resent" => {
            let server = Hostile::start(vec![
                ("/put", Reply::redirect(307, "/landing")),
                ("/landing", Reply::Body("landed".into())),
            ])
            .map_err(io)?;
            let c = client(RedirectPolicy::default())?;
            for (method, key) in [("PUT", None), ("POST", Some("k-1"))] {
                let mut b = http::Request::builder()
                    .method(method)
                    .uri(server.url("/put"))
                    .header("x-api-key", "SECRET-KEY");
                if let Some(k) = key {
                    b = b.header("idempotency-key", k);
                }
                let req = b
                    .body(Bytes::from_static(b"payload"))
                    .map_err(|e| e.to_string())?;
                let resp = send(c.clone(), req)
                    .await
                    .map_err(|e| format!("{method}: {e}"))?;
                ensure!(
                    resp.body().as_ref() == b"landed",
                    "{method}: {:?}",
                    resp.body()
                );
            }
            ensure!(
                server.count("/put") == 2,
                "one PUT and one keyed POST, each once; saw {}",
                server.count("/put")
            );
            let landed: Vec<_> = server
                .seen()
                .into_iter()
                .filter(|s| s.path == "/landing")
                .collect();
            ensure!(landed.len() == 2, "{} landings", landed.len());
            for (s, method) in landed.iter().zip(["PUT", "POST"]) {
                ensure!(s.method == method, "{s:?}");
                ensure!(s.body == b"payload", "{s:?}: the body was not carried");
                ensure!(
                    s.header("x-api-key") == Some("SECRET-KEY"),
                    "same origin keeps headers: {s:?}"
                );
            }
        }
        "cross_origin_redirect_never_carries_the_callers_headers" => {
            let b = Hostile::start(vec![("/landing", Reply::Body("landed".into()))]).map_err(io)?;
            let routes = [301, 302, 303, 307, 308]
                .map(|s| (s, format!("/r{s}"), Reply::redirect(s, b.url("/landing"))));
            let a = Hostile::start(
                routes
                    .iter()
                    .map(|(_, p, r)| (p.as_str(), r.clone()))
                    .collect(),
            )
            .map_err(io)?;
            let c = client(RedirectPolicy::default())?;
            for (status, path, _) in &routes {
                let resp = send(c.clone(), get(a.url(path))?)
                    .await
                    .map_err(|e| format!("{status}: {e}"))?;
                ensure!(
                    resp.body().as_ref() == b"landed",
                    "{status}: {:?}",
                    resp.body()
                );
            }
            ensure!(a.seen().len() == 5, "{} requests at A", a.seen().len());
            ensure!(
                a.seen().iter().all(|s| s.header("x-api-key").is_some()),
                "A lost the caller's headers"
            );
            ensure!(b.seen().len() == 5, "{} requests at B", b.seen().len());
            for s in b.seen() {
                ensure!(
                    s.header("x-api-key").is_none() && s.header("authorization").is_none(),
                    "a credential crossed origins: {s:?}"
                );
            }
            // Same origin only: the redirect is the answer, B never hears of it.
            let before = b.seen().len();
            let c = client(RedirectPolicy::same_origin(10))?;
            let resp = send(c, get(a.url("/r302"))?)
                .await
                .map_err(|e| e.to_string())?;
            ensure!(resp.status() == 302, "{}", resp.status());
            ensure!(
                b.seen().len() == before,
                "B heard of a same-origin-only redirect"
            );
        }
        "refused_connection_keeps_source_attempts_and_time" => {
            let port = {
                let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(io)?;
                l.local_addr().map_err(io)?.port()
            };
            let mut config = Config {
                timeout: Duration::from_secs(20),
                ..Config::default()
            };
            config.retry.max_retries.transport = 1;
            config.retry.backoff.base = Duration::from_millis(1);
            let c =
                Client::<R, T>::with_transport(transport(), config).map_err(|e| e.to_string())?;
            let Err(e) = send(c, get(format!("http://127.0.0.1:{port}/x?token=SECRET"))?).await
            else {
                return Err("a closed port answered".into());
            };
            let Error::Transport {
                outcome,
                error,
                attempts,
                elapsed,
            } = &e
            else {
                return Err(format!("want Error::Transport, got {e:?}"));
            };
            ensure!(
                matches!(
                    outcome,
                    Outcome::RetriesExhausted {
                        last: Answer::Transport(K::Refused),
                        ..
                    }
                ),
                "{outcome:?} (classified from the source chain, not the text)"
            );
            ensure!(*attempts == 2, "{attempts} attempts");
            ensure!(*elapsed < Duration::from_secs(20), "{elapsed:?}");
            ensure!(
                std::error::Error::source(error).is_some(),
                "the transport's error is not kept"
            );
            // Neither the message nor the chain names the URL (credentials live there).
            let mut chain = e.to_string();
            let mut next = std::error::Error::source(&e);
            while let Some(s) = next {
                chain.push_str(&format!(" / {s}"));
                next = s.source();
            }
            ensure!(
                !chain.contains("SECRET"),
                "a credential in the error chain: {chain}"
            );
            ensure!(
                e.to_string()
                    .starts_with("connection refused: transport retries exhausted (2 attempts in"),
                "{e}"
            );
        }
        "unsendable_url_is_one_attempt" => {
            let c = client(RedirectPolicy::default())?;
            let Err(e) = send(c, get("ftp://127.0.0.1:9/x".into())?).await else {
                return Err("an ftp:// URL was sent".into());
            };
            ensure!(permanent(&e, K::InvalidRequest)? == 1, "{e}: retried");
            ensure!(!e.to_string().contains("ftp"), "no URL in the message: {e}");
        }
        "a_port_past_65535_is_one_attempt_sent_nowhere" => {
            // `http::Uri` accepts `127.0.0.1:99999`; read as "no port" it
            // would go to port 80. The server's own port plus 65,536 would
            // reach it were the number cut to 16 bits.
            let server = Hostile::start(vec![("/x", Reply::Body("reached".into()))]).map_err(io)?;
            let port = u32::from(server.addr().port()) + 65_536;
            let c = client(RedirectPolicy::default())?;
            let url = format!("http://127.0.0.1:{port}/x");
            let Err(e) = send(c, get(url)?).await else {
                return Err(format!("port {port} was sent somewhere"));
            };
            ensure!(permanent(&e, K::InvalidRequest)? == 1, "{e}: retried");
            ensure!(server.seen().is_empty(), "the port was cut to 16 bits");
        }
        "long_poll_redirect_starts_from_the_url_sent" => {
            // A long poll goes out as `/job?waitSeconds=N`; its redirect to
            // `/job` is a new URL (followed), and the next one back to `/job`
            // is the loop. A chain started from the caller's URL, without
            // the wait parameter, would call the first hop a loop.
            let server =
                Hostile::start(vec![("/job", Reply::redirect(307, "/job"))]).map_err(io)?;
            let c = client(RedirectPolicy::default())?;
            let mut job = polite_client::JsonJob::new("status");
            let Err(e) = R::settle(c.wait(get(server.url("/job"))?, &mut job)).await else {
                return Err("a redirect loop ended well".into());
            };
            ensure!(permanent(&e, K::TooManyRedirects)? == 1, "{e}: retried");
            let paths: Vec<String> = server.seen().into_iter().map(|s| s.path).collect();
            ensure!(
                paths.len() == 2 && paths[0].starts_with("/job?waitSeconds=") && paths[1] == "/job",
                "want the long poll, then one hop to /job; saw {paths:?}"
            );
        }
        "streamed_batch_items_follow_redirects_from_their_own_request" => {
            // A streaming batch keeps each item's request only while the
            // item is in progress, and makes a redirect chain from it at
            // the first 3xx: each item must land where its own redirect
            // points, keep its headers on its own origin, and drop them
            // across origins, whatever the other items do meanwhile.
            let b = Hostile::start(vec![("/landing", Reply::Body("landed".into()))]).map_err(io)?;
            let a = Hostile::start(vec![
                ("/cross", Reply::redirect(307, b.url("/landing"))),
                ("/same", Reply::redirect(302, "/ok")),
                ("/ok", Reply::Body("ok".into())),
            ])
            .map_err(io)?;
            let c = client(RedirectPolicy::default())?;
            let paths = ["/cross", "/same", "/ok", "/cross", "/same", "/cross"];
            let requests = paths
                .iter()
                .map(|p| get(a.url(p)))
                .collect::<Result<Vec<_>, _>>()?;
            let mut stream = c
                .batch_stream(requests, polite_client::BatchOrder::Completion)
                .map_err(|e| e.to_string())?;
            let mut bodies = vec![String::new(); paths.len()];
            while let Some((i, r)) = R::settle(stream.next_result()).await {
                let r = r.map_err(|e| format!("item {i}: {e}"))?;
                ensure!(r.status() == 200, "item {i}: {}", r.status());
                bodies[i] = String::from_utf8_lossy(r.body()).into_owned();
            }
            let want: Vec<&str> = paths
                .iter()
                .map(|p| if *p == "/cross" { "landed" } else { "ok" })
                .collect();
            ensure!(bodies == want, "bodies {bodies:?}, want {want:?}");
            ensure!(b.seen().len() == 3, "{} requests at B", b.seen().len());
            for s in b.seen() {
                ensure!(
                    s.header("x-api-key").is_none() && s.header("authorization").is_none(),
                    "a credential crossed origins: {s:?}"
                );
            }
            // 6 items and 2 same-origin hops, all with the caller's headers.
            ensure!(a.seen().len() == 8, "{} requests at A", a.seen().len());
            ensure!(
                a.seen().iter().all(|s| s.header("x-api-key").is_some()),
                "A lost the caller's headers"
            );
        }
        "an_answer_head_over_the_limit_is_one_attempt" => {
            // Repeating the request gets the same head: permanent, as a
            // body over the limit, even for a GET (replayable).
            let server = Hostile::start(vec![("/bighead", Reply::BigHead { bytes: BIG_HEAD })])
                .map_err(io)?;
            let c = client(RedirectPolicy::default())?;
            let Err(e) = send(c, get(server.url("/bighead"))?).await else {
                return Err(format!("a head of {BIG_HEAD} bytes was accepted"));
            };
            ensure!(permanent(&e, K::HeadTooLarge)? == 1, "{e}: retried");
            ensure!(
                e.to_string().contains("head") && e.to_string().contains("not retried"),
                "{e}: the cause is not named"
            );
            ensure!(
                server.count("/bighead") == 1,
                "{} requests",
                server.count("/bighead")
            );
        }
        "extension_methods_are_sent_once_or_refused_unsent" => {
            // Methods the `http` crate takes as extension methods: `PURGE`,
            // `PROPFIND` (with a body), and `get`, which is not `GET`
            // (methods are case-sensitive). Each carries an idempotency key,
            // so that a transport error would be retried: a transport either
            // sends it as given (once, answered) or refuses it before
            // sending (a permanent `InvalidRequest`, nothing at the server).
            let server = Hostile::start(vec![("/echo", Reply::Body("ok".into()))]).map_err(io)?;
            let c = client(RedirectPolicy::default())?;
            for (method, body) in [("PURGE", ""), ("PROPFIND", "<propfind/>"), ("get", "")] {
                let before = server.seen().len();
                let req = http::Request::builder()
                    .method(method)
                    .uri(server.url("/echo"))
                    .header("idempotency-key", format!("k-{method}"))
                    .body(Bytes::from(body))
                    .map_err(|e| e.to_string())?;
                let seen: Vec<_> = match send(c.clone(), req).await {
                    Ok(resp) => {
                        ensure!(
                            resp.status() == 200 && resp.body().as_ref() == b"ok",
                            "{method}: {} {:?}",
                            resp.status(),
                            resp.body()
                        );
                        server.seen().into_iter().skip(before).collect()
                    }
                    Err(e) => {
                        ensure!(
                            permanent(&e, K::InvalidRequest)? == 1,
                            "{method}: {e}: retried"
                        );
                        ensure!(!e.to_string().contains("127.0.0.1"), "no URL: {e}");
                        ensure!(server.seen().len() == before, "{method}: refused, yet sent");
                        continue;
                    }
                };
                ensure!(seen.len() == 1, "{method}: {} requests", seen.len());
                ensure!(
                    seen[0].method == method && seen[0].body == body.as_bytes(),
                    "{method}: the server saw {:?} with {:?}",
                    seen[0].method,
                    String::from_utf8_lossy(&seen[0].body)
                );
            }
        }
        "an_answer_that_is_not_http_is_one_kind_on_every_transport" => {
            // The same kind whatever the transport, the parser's error as
            // the source, and never retried: one send.
            let server = Hostile::start(
                NOT_HTTP
                    .iter()
                    .map(|(path, bytes)| (*path, Reply::Raw(bytes.to_vec())))
                    .collect(),
            )
            .map_err(io)?;
            let mut config = Config {
                timeout: Duration::from_secs(20),
                ..Config::default()
            };
            config.retry.backoff.base = Duration::from_millis(1);
            let c =
                Client::<R, T>::with_transport(transport(), config).map_err(|e| e.to_string())?;
            for (path, _) in NOT_HTTP {
                let Err(e) = send(c.clone(), get(server.url(path))?).await else {
                    return Err(format!("{path}: an answer that is not HTTP was accepted"));
                };
                let attempts = permanent(&e, NOT_HTTP_KIND).map_err(|w| format!("{path}: {w}"))?;
                ensure!(attempts == 1, "{path}: {e}: {attempts} attempts");
                ensure!(
                    server.count(path) == 1,
                    "{path}: {} requests",
                    server.count(path)
                );
                ensure!(
                    e.to_string().starts_with(&NOT_HTTP_KIND.to_string()),
                    "{path}: {e}: the cause is not named"
                );
            }
        }
        other => return Err(format!("no hostile check {other}")),
    }
    Ok(())
}

/// One `#[test]` per hostile check, each calling `$run(name)` (a function
/// that runs [`run`] on the adapter's runtime and panics on `Err`), plus
/// `every_hostile_check_is_run_here`.
#[macro_export]
macro_rules! hostile_tests {
    ($run:path) => {
        $crate::hostile_tests!(@each $run;
            chunked_2_gib_body_is_one_request_cut_at_the_limit,
            declared_2_gib_body_is_refused_before_reading_it,
            redirect_loop_is_one_send,
            put_307_is_followed_once_body_never_resent,
            cross_origin_redirect_never_carries_the_callers_headers,
            refused_connection_keeps_source_attempts_and_time,
            unsendable_url_is_one_attempt,
            a_port_past_65535_is_one_attempt_sent_nowhere,
            long_poll_redirect_starts_from_the_url_sent,
            streamed_batch_items_follow_redirects_from_their_own_request,
            an_answer_head_over_the_limit_is_one_attempt,
            extension_methods_are_sent_once_or_refused_unsent,
            an_answer_that_is_not_http_is_one_kind_on_every_transport
        );
    };
    (@each $run:path; $($name:ident),*) => {
        $(
            #[test]
            fn $name() {
                $run(stringify!($name));
            }
        )*
        #[test]
        fn every_hostile_check_is_run_here() {
            let here = [$(stringify!($name)),*];
            for name in $crate::runner::hostile::names() {
                assert!(here.contains(&name), "hostile check {name} is not run here");
            }
        }
    };
}
