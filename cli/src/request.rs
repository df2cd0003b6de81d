//! Building requests from flags; every mistake is a one-line usage error.

use std::io::Read;

use bytes::Bytes;

use crate::redact::{Input, echo};

/// A usage error: printed on one line, exit 2.
#[derive(Debug)]
pub(crate) struct Usage(pub(crate) String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn usage(msg: impl Into<String>) -> Usage {
    Usage(msg.into())
}

/// An absolute http(s) URL with a host.
pub(crate) fn url(s: &str) -> Result<http::Uri, Usage> {
    // A password with an unencoded `/ ? #` ends the authority inside the
    // password: whatever the parser then complains about (a port that is
    // no number, no host) would mislead. Say what is wrong instead.
    let malformed = |why: &str| {
        if crate::redact::unencoded_user_info(s) {
            usage(format!(
                "malformed URL {}: a user name or password with / ? # or @ must be percent-encoded (%2F %3F %23 %40)",
                echo(Input::Url, s)
            ))
        } else {
            usage(format!("malformed URL {}: {why}", echo(Input::Url, s)))
        }
    };
    let uri: http::Uri = s.parse().map_err(|e| malformed(&format!("{e}")))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => {
            return Err(usage(format!(
                "URL {} must start with http:// or https://",
                echo(Input::Url, s)
            )));
        }
    }
    if uri.host().is_none_or(str::is_empty) {
        if crate::redact::unencoded_user_info(s) {
            return Err(malformed("no host"));
        }
        return Err(usage(format!("URL {} has no host", echo(Input::Url, s))));
    }
    if polite_client::names_no_port(&uri) {
        return Err(malformed("the port is not a number from 0 to 65535"));
    }
    Ok(uri)
}

/// A method token.
pub(crate) fn method(s: &str) -> Result<http::Method, Usage> {
    http::Method::from_bytes(s.as_bytes())
        .map_err(|_| usage(format!("invalid method {}", echo(Input::Text, s))))
}

/// `Name: value`.
pub(crate) fn header(s: &str) -> Result<(http::HeaderName, http::HeaderValue), Usage> {
    let (name, value) = s.split_once(':').ok_or_else(|| {
        usage(format!(
            "header {}: expected `Name: value`",
            echo(Input::Header, s)
        ))
    })?;
    let name = http::HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|_| usage(format!("header {}: invalid name", echo(Input::Header, s))))?;
    let value = http::HeaderValue::from_str(value.trim()).map_err(|_| {
        usage(format!(
            "header {}: invalid value (control characters or non-ASCII)",
            echo(Input::Header, s)
        ))
    })?;
    Ok((name, value))
}

/// The largest request body `-d` reads: polite keeps the body in memory
/// to send it again (a retry, a redirect), so an endless or huge input
/// (`-d @/dev/zero`) must end as a usage error, not as out of memory.
pub(crate) const MAX_BODY: u64 = 64 << 20;

/// The body from `-d`: `@file`, `-` (stdin), or the text itself; at most
/// [`MAX_BODY`] bytes.
pub(crate) fn body(data: Option<&str>) -> Result<Bytes, Usage> {
    body_up_to(data, MAX_BODY)
}

fn body_up_to(data: Option<&str>, limit: u64) -> Result<Bytes, Usage> {
    let too_large = |from: String| {
        usage(format!(
            "the body from {from} is larger than the {} limit of -d: polite keeps the body in memory to send it again",
            size(limit)
        ))
    };
    match data {
        None => Ok(Bytes::new()),
        Some("-") => read_up_to(std::io::stdin().lock(), limit)
            .map_err(|e| usage(format!("cannot read the body from stdin: {e}")))?
            .ok_or_else(|| too_large("stdin".to_owned())),
        Some(d) if d.starts_with('@') => {
            let path = &d[1..];
            let cannot = |e: std::io::Error| {
                usage(format!(
                    "cannot read body file {}: {e}",
                    echo(Input::Text, path)
                ))
            };
            let file = std::fs::File::open(path).map_err(cannot)?;
            read_up_to(file, limit)
                .map_err(cannot)?
                .ok_or_else(|| too_large(format!("file {}", echo(Input::Text, path))))
        }
        Some(text) => Ok(Bytes::copy_from_slice(text.as_bytes())),
    }
}

/// All of `input` if it holds at most `limit` bytes; `None` if it holds
/// more (reading stops one byte past the limit).
fn read_up_to(input: impl Read, limit: u64) -> std::io::Result<Option<Bytes>> {
    let mut buf = Vec::new();
    input.take(limit.saturating_add(1)).read_to_end(&mut buf)?;
    if u64::try_from(buf.len()).unwrap_or(u64::MAX) > limit {
        return Ok(None);
    }
    Ok(Some(buf.into()))
}

/// `64 MiB`, `1 KiB`, `10 bytes`.
fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

/// A request from its parts.
pub(crate) fn build(
    method_s: &str,
    url_s: &str,
    headers: &[String],
    body: Bytes,
    idempotency_key: Option<&str>,
) -> Result<http::Request<Bytes>, Usage> {
    let mut req = http::Request::new(body);
    *req.method_mut() = method(method_s)?;
    *req.uri_mut() = url(url_s)?;
    for h in headers {
        let (name, value) = header(h)?;
        req.headers_mut().append(name, value);
    }
    if let Some(k) = idempotency_key {
        let v = http::HeaderValue::from_str(k).map_err(|_| {
            usage(format!(
                "idempotency key {}: invalid header value (control characters or non-ASCII)",
                echo(Input::Secret, k)
            ))
        })?;
        req.headers_mut().insert("idempotency-key", v);
    }
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_and_bad_input() {
        assert!(url("http://127.0.0.1:8080/x").is_ok());
        assert!(url("ftp://127.0.0.1/x").is_err());
        assert!(url("127.0.0.1/x").is_err());
        assert!(url("http://").is_err());
        assert!(url("http://exa mple/").is_err());
        assert!(header("Accept: text/plain").is_ok());
        assert!(header("Accept text/plain").is_err());
        assert!(header("Bad Name: x").is_err());
        assert!(method("GET").is_ok());
        assert!(method("G ET").is_err());
        assert!(body(Some("@/definitely/not/here")).is_err());
        assert!(
            url("http://user:pa/ssSECRET@127.0.0.1:8/x")
                .is_err_and(|e| e.0.contains("must be percent-encoded") && !e.0.contains("SECRET"))
        );
        assert_eq!(body(Some("hi")).unwrap().as_ref(), b"hi");
        let r = build(
            "POST",
            "http://127.0.0.1/x",
            &["A: b".into()],
            Bytes::new(),
            Some("k1"),
        )
        .unwrap();
        assert_eq!(r.headers()["idempotency-key"], "k1");
        assert_eq!(r.headers()["a"], "b");
    }

    /// `-d @file` and `-d -` read at most [`MAX_BODY`] bytes: a file at the
    /// limit is the body, one byte more (or an endless file) is a usage
    /// error that names the limit and why there is one.
    #[test]
    fn a_body_is_read_up_to_its_limit_and_no_further() {
        let dir = std::env::temp_dir().join(format!("polite-body-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("body");
        let make = |len: u64| {
            // Sparse: no disk space for the zeros.
            let f = std::fs::File::create(&file).unwrap();
            f.set_len(len).unwrap();
        };
        let arg = format!("@{}", file.display());
        make(MAX_BODY);
        let at = body(Some(&arg)).unwrap();
        assert_eq!(at.len() as u64, MAX_BODY);
        drop(at);
        make(MAX_BODY + 1);
        let over = body(Some(&arg)).unwrap_err().0;
        assert!(
            over.contains("larger than the 64 MiB limit of -d")
                && over.contains("polite keeps the body in memory to send it again"),
            "{over}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
        #[cfg(unix)]
        {
            let endless = body(Some("@/dev/zero")).unwrap_err().0;
            assert!(endless.contains("64 MiB limit"), "{endless}");
        }
        assert_eq!(
            read_up_to(&b"abc"[..], 3).unwrap().unwrap().as_ref(),
            b"abc"
        );
        assert!(read_up_to(&b"abcd"[..], 3).unwrap().is_none());
        assert_eq!(size(64 << 20), "64 MiB");
        assert_eq!(size(3), "3 bytes");
    }
}
