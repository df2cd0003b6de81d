//! [`RedirectPolicy`]: polite follows redirects itself, by one policy for
//! every adapter (the ready transports follow none of their own).
//!
//! Per attempt, up to [`max_hops`](RedirectPolicy::max_hops) redirects
//! (301, 302, 303, 307, 308 with a `Location`) are followed, all inside the
//! attempt's `abort_at`:
//!
//! * 303, and 301/302 after a `POST`, go on as a `GET` without the body
//!   (what browsers and curl do); 307, 308 (and 301/302 after other
//!   methods) re-send the same method and body (bodies are `Bytes`: they
//!   can always be produced again).
//! * A redirect to an origin (scheme, host, port) other than the one the
//!   caller named drops **every header the caller set** — not only
//!   `Authorization` and `Cookie` — for the rest of the chain; with
//!   `cross_origin: false` such a redirect is not followed at all and the
//!   3xx is the answer.
//! * More than `max_hops` redirects, or a redirect back to a URL already
//!   visited in the chain, end the attempt with
//!   [`TooManyRedirects`](polite_core::TransportErrorKind::TooManyRedirects),
//!   which is permanent: never retried.
//! * With `max_hops: 0` nothing is followed: a 3xx is the answer.
//! * A `Location` that is missing, unparsable or not `http`/`https` is not
//!   followed: the 3xx is the answer.
//!
//! The hops of one attempt are one attempt to the machines: they share its
//! `abort_at`, its attempt record, and its one grant from the pace (a hop
//! is not paced or recorded on its own).
//!
//! Every hop polite sends carries a [`RedirectHop`] in its request's
//! extensions (and, through polite-tokio's `PoliteMiddleware`, in the
//! middleware extensions): what runs below polite — a tower layer or a
//! reqwest middleware that adds a credential — can tell a hop to another
//! origin and leave it alone. Headers polite drops on a cross-origin hop
//! are the ones it was *given*; a header added below polite is added again
//! to every hop, unless that layer checks the mark.

use bytes::Bytes;
use http::{Method, StatusCode, Uri, header};

use crate::error::TransportError;

/// The mark of a redirect hop polite follows itself, put in the extensions
/// of the hop's request (for polite-tokio's `PoliteMiddleware`, also in the
/// middleware extensions handed to the rest of the stack): the `hop`-th
/// redirect of the attempt (1 for the first), and whether it goes to an
/// origin (scheme, host, port) other than the one the caller named. The
/// caller's first request, and every retry of it, carry none.
///
/// polite drops the headers it was given on a cross-origin hop (SPEC §5.1),
/// but a layer or middleware *below* polite runs again for every hop: one
/// that adds a credential adds it to a hop to another origin too. Put such
/// a layer outside (before) polite, so that polite is given its headers —
/// or have it leave a request marked `cross_origin` alone:
///
/// ```
/// use bytes::Bytes;
/// use polite_client::RedirectHop;
///
/// /// What an auth layer below polite does with each request it is handed.
/// fn authorize(request: &mut http::Request<Bytes>) {
///     let elsewhere = request
///         .extensions()
///         .get::<RedirectHop>()
///         .is_some_and(|hop| hop.cross_origin);
///     if !elsewhere {
///         request.headers_mut().insert("authorization", "Bearer secret".parse().unwrap());
///     }
/// }
///
/// let mut first = http::Request::get("https://api.example/file").body(Bytes::new()).unwrap();
/// authorize(&mut first);
/// assert!(first.headers().contains_key("authorization"));
///
/// // The hop polite follows to a CDN, as it hands it down the stack.
/// let mut hop = http::Request::get("https://cdn.example/blob").body(Bytes::new()).unwrap();
/// hop.extensions_mut().insert(RedirectHop { hop: 1, cross_origin: true });
/// authorize(&mut hop);
/// assert!(!hop.headers().contains_key("authorization"));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedirectHop {
    /// Which redirect of the attempt this request follows: 1 for the first.
    pub hop: u32,
    /// Whether the hop goes to an origin other than the one the caller
    /// named (a later hop back to it is `false` again, though the headers
    /// polite was given stay dropped for the rest of the chain).
    pub cross_origin: bool,
}

/// Whether and how far polite follows redirects (see the [module
/// docs](self)). Default: up to 10 hops, across origins (dropping every
/// header the caller set).
///
/// ```
/// use polite_client::RedirectPolicy;
/// assert_eq!(RedirectPolicy::default(), RedirectPolicy::up_to(10));
/// assert_eq!(RedirectPolicy::NONE.max_hops, 0);
/// assert!(!RedirectPolicy::same_origin(5).cross_origin);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedirectPolicy {
    /// The most redirects followed in one attempt; 0: none (a 3xx is the
    /// answer).
    pub max_hops: u32,
    /// Whether a redirect to another origin is followed (without the
    /// caller's headers). `false`: the 3xx is the answer.
    pub cross_origin: bool,
}

impl RedirectPolicy {
    /// Follow no redirect: a 3xx is the answer.
    pub const NONE: RedirectPolicy = RedirectPolicy {
        max_hops: 0,
        cross_origin: false,
    };

    /// Up to `max_hops`, across origins (without the caller's headers).
    #[must_use]
    pub const fn up_to(max_hops: u32) -> RedirectPolicy {
        RedirectPolicy {
            max_hops,
            cross_origin: true,
        }
    }

    /// Up to `max_hops`, on the origin the caller named only.
    #[must_use]
    pub const fn same_origin(max_hops: u32) -> RedirectPolicy {
        RedirectPolicy {
            max_hops,
            cross_origin: false,
        }
    }
}

impl Default for RedirectPolicy {
    fn default() -> Self {
        RedirectPolicy::up_to(10)
    }
}

/// Scheme, host and port (the default port filled in), lower case.
fn origin(uri: &Uri) -> Option<(String, String, u16)> {
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let host = uri.host()?.to_ascii_lowercase();
    let port = uri.port_u16().or(match scheme.as_str() {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    })?;
    Some((scheme, host, port))
}

/// One attempt's redirect chain: the request as last sent, and what the
/// policy needs to decide the next hop.
#[derive(Debug)]
pub(crate) struct Chain {
    method: Method,
    uri: Uri,
    headers: http::HeaderMap,
    body: Bytes,
    version: http::Version,
    named: Option<(String, String, u16)>,
    visited: Vec<(Method, Uri)>,
    policy: RedirectPolicy,
}

/// What to do with an answer.
#[derive(Debug)]
pub(crate) enum Next {
    /// It is the attempt's answer.
    Done,
    /// Send this request next (same `abort_at`).
    Follow(Box<http::Request<Bytes>>),
    /// End the attempt with this error.
    Fail(TransportError),
}

impl Chain {
    /// A chain starting with `request` (as sent), or `None` when the policy
    /// follows nothing.
    pub(crate) fn start(request: &http::Request<Bytes>, policy: RedirectPolicy) -> Option<Chain> {
        if policy.max_hops == 0 {
            return None;
        }
        Some(Chain {
            method: request.method().clone(),
            uri: request.uri().clone(),
            headers: request.headers().clone(),
            body: request.body().clone(),
            version: request.version(),
            // Both filled at the first redirect: most attempts get none.
            named: None,
            visited: Vec::new(),
            policy,
        })
    }

    /// Decides what follows `response`.
    pub(crate) fn next(&mut self, response: &http::Response<Bytes>) -> Next {
        let status = response.status();
        if !matches!(
            status,
            StatusCode::MOVED_PERMANENTLY
                | StatusCode::FOUND
                | StatusCode::SEE_OTHER
                | StatusCode::TEMPORARY_REDIRECT
                | StatusCode::PERMANENT_REDIRECT
        ) {
            return Next::Done;
        }
        let Some(target) = response
            .headers()
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|loc| resolve(&self.uri, loc))
        else {
            return Next::Done;
        };
        if self.visited.is_empty() {
            // The first redirect of this chain: the origin the caller named.
            self.named = origin(&self.uri);
            self.visited.push((self.method.clone(), self.uri.clone()));
        }
        let next_origin = origin(&target);
        let cross = next_origin.is_none() || next_origin != self.named;
        if cross && !self.policy.cross_origin {
            return Next::Done;
        }
        let hops = u32::try_from(self.visited.len() - 1).unwrap_or(u32::MAX);
        if hops >= self.policy.max_hops {
            return Next::Fail(TransportError::too_many_redirects(self.policy.max_hops));
        }
        let to_get = status == StatusCode::SEE_OTHER && self.method != Method::HEAD
            || matches!(status, StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND)
                && self.method == Method::POST;
        if to_get {
            self.method = Method::GET;
            self.body = Bytes::new();
            for h in [
                header::CONTENT_TYPE,
                header::CONTENT_LENGTH,
                header::CONTENT_ENCODING,
                header::CONTENT_LANGUAGE,
                header::TRANSFER_ENCODING,
            ] {
                self.headers.remove(h);
            }
        }
        if self
            .visited
            .iter()
            .any(|(m, u)| *m == self.method && *u == target)
        {
            return Next::Fail(TransportError::redirect_loop());
        }
        if cross {
            // A header the caller gave never goes to an origin the caller
            // did not name (SPEC §5.1).
            self.headers.clear();
        }
        self.visited.push((self.method.clone(), target.clone()));
        self.uri = target;
        let mut request = http::Request::new(self.body.clone());
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = self.uri.clone();
        *request.version_mut() = self.version;
        *request.headers_mut() = self.headers.clone();
        // What runs below polite sees which hop this is, and whether it
        // leaves the caller's origin (a credential it adds must not).
        request.extensions_mut().insert(RedirectHop {
            hop: hops.saturating_add(1),
            cross_origin: cross,
        });
        Next::Follow(Box::new(request))
    }
}

/// `location` resolved against `base` (RFC 3986 §5), without its fragment;
/// `None` unless the result is an `http` or `https` URL with a host.
fn resolve(base: &Uri, location: &str) -> Option<Uri> {
    let base = url::Url::parse(&base.to_string()).ok()?;
    let mut joined = base.join(location.trim()).ok()?;
    joined.set_fragment(None);
    if !matches!(joined.scheme(), "http" | "https") || joined.host_str().is_none() {
        return None;
    }
    joined.as_str().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, location: &str) -> http::Response<Bytes> {
        http::Response::builder()
            .status(status)
            .header("location", location)
            .body(Bytes::new())
            .unwrap()
    }

    fn request(method: &str, uri: &str) -> http::Request<Bytes> {
        http::Request::builder()
            .method(method)
            .uri(uri)
            .header("x-api-key", "k")
            .header("authorization", "Bearer t")
            .header("content-type", "application/json")
            .body(Bytes::from_static(b"{}"))
            .unwrap()
    }

    fn follow(next: Next) -> http::Request<Bytes> {
        match next {
            Next::Follow(r) => *r,
            other => panic!("expected a follow, got {other:?}"),
        }
    }

    #[test]
    fn relative_locations_resolve_against_the_current_url() {
        let base: Uri = "http://127.0.0.1:8080/a/b?x=1".parse().unwrap();
        let r = |l: &str| resolve(&base, l).map(|u| u.to_string());
        assert_eq!(r("/c").as_deref(), Some("http://127.0.0.1:8080/c"));
        assert_eq!(
            r("c?y=2#f").as_deref(),
            Some("http://127.0.0.1:8080/a/c?y=2")
        );
        assert_eq!(r("//other:9/z").as_deref(), Some("http://other:9/z"));
        assert_eq!(r("https://h.test/").as_deref(), Some("https://h.test/"));
        assert_eq!(r("ftp://h.test/"), None);
        assert_eq!(r("javascript:alert(1)"), None);
    }

    #[test]
    fn same_origin_keeps_headers_cross_origin_drops_every_one() {
        let req = request("PUT", "http://127.0.0.1:8080/a");
        let mut chain = Chain::start(&req, RedirectPolicy::default()).unwrap();
        let same = follow(chain.next(&answer(307, "/b")));
        assert_eq!(same.method(), Method::PUT);
        assert_eq!(same.body().as_ref(), b"{}");
        assert_eq!(same.headers()["x-api-key"], "k");
        let other = follow(chain.next(&answer(307, "http://127.0.0.1:8081/c")));
        assert_eq!(other.method(), Method::PUT);
        assert!(other.headers().is_empty(), "{:?}", other.headers());
        // Back on the named origin: still without them (dropped for the chain).
        let back = follow(chain.next(&answer(302, "http://127.0.0.1:8080/d")));
        assert!(back.headers().is_empty());
        // Port 80 spelled out or not is the same origin.
        let req = request("GET", "http://h.test/a");
        let mut chain = Chain::start(&req, RedirectPolicy::default()).unwrap();
        assert!(
            !follow(chain.next(&answer(301, "http://h.test:80/b")))
                .headers()
                .is_empty()
        );
    }

    /// Each hop's request carries its number and whether it leaves the
    /// named origin (back on it: not cross-origin, though the caller's
    /// headers stay dropped).
    #[test]
    fn every_hop_is_marked_with_its_number_and_origin() {
        let req = request("GET", "http://127.0.0.1:8080/a");
        assert!(req.extensions().get::<RedirectHop>().is_none());
        let mut chain = Chain::start(&req, RedirectPolicy::default()).unwrap();
        let mark = |r: http::Request<Bytes>| r.extensions().get::<RedirectHop>().copied();
        let hop = |hop, cross_origin| Some(RedirectHop { hop, cross_origin });
        assert_eq!(mark(follow(chain.next(&answer(302, "/b")))), hop(1, false));
        let other = follow(chain.next(&answer(302, "http://127.0.0.1:8081/c")));
        assert_eq!(mark(other), hop(2, true));
        let back = follow(chain.next(&answer(302, "http://127.0.0.1:8080/d")));
        assert!(back.headers().is_empty());
        assert_eq!(mark(back), hop(3, false));
    }

    #[test]
    fn same_origin_only_hands_back_a_cross_origin_redirect() {
        let req = request("GET", "http://127.0.0.1:8080/a");
        let mut chain = Chain::start(&req, RedirectPolicy::same_origin(10)).unwrap();
        assert!(matches!(
            chain.next(&answer(302, "http://127.0.0.2:8080/")),
            Next::Done
        ));
        assert!(matches!(
            chain.next(&answer(302, "https://127.0.0.1:8080/")),
            Next::Done
        ));
        assert!(matches!(chain.next(&answer(302, "/b")), Next::Follow(_)));
    }

    #[test]
    fn see_other_and_post_moved_become_a_get_without_body() {
        for (method, status) in [("POST", 303), ("PUT", 303), ("POST", 301), ("POST", 302)] {
            let req = request(method, "http://127.0.0.1:8080/a");
            let mut chain = Chain::start(&req, RedirectPolicy::default()).unwrap();
            let next = follow(chain.next(&answer(status, "/b")));
            assert_eq!(next.method(), Method::GET, "{method} {status}");
            assert!(next.body().is_empty());
            assert!(!next.headers().contains_key("content-type"));
            assert_eq!(next.headers()["x-api-key"], "k");
        }
        let req = request("HEAD", "http://127.0.0.1:8080/a");
        let mut chain = Chain::start(&req, RedirectPolicy::default()).unwrap();
        assert_eq!(
            follow(chain.next(&answer(303, "/b"))).method(),
            Method::HEAD
        );
    }

    #[test]
    fn limits_loops_and_non_redirects() {
        let req = request("GET", "http://127.0.0.1:8080/0");
        assert!(Chain::start(&req, RedirectPolicy::NONE).is_none());
        let mut chain = Chain::start(&req, RedirectPolicy::up_to(3)).unwrap();
        for i in 1..=3 {
            follow(chain.next(&answer(302, &format!("/{i}"))));
        }
        let Next::Fail(e) = chain.next(&answer(302, "/4")) else {
            panic!("the fourth hop is over the limit")
        };
        assert_eq!(e.kind(), polite_core::TransportErrorKind::TooManyRedirects);

        let mut chain = Chain::start(&req, RedirectPolicy::default()).unwrap();
        follow(chain.next(&answer(302, "/1")));
        let Next::Fail(e) = chain.next(&answer(302, "/0")) else {
            panic!("back to a visited URL is a loop")
        };
        assert_eq!(e.to_string(), "too many redirects (a redirect loop)");

        let mut chain = Chain::start(&req, RedirectPolicy::default()).unwrap();
        assert!(matches!(chain.next(&answer(200, "/x")), Next::Done));
        assert!(matches!(chain.next(&answer(304, "/x")), Next::Done));
        let no_location = http::Response::builder()
            .status(302)
            .body(Bytes::new())
            .unwrap();
        assert!(matches!(chain.next(&no_location), Next::Done));
    }
}
