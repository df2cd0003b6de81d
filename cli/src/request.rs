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

/// The body from `-d`: `@file`, `-` (stdin), or the text itself.
pub(crate) fn body(data: Option<&str>) -> Result<Bytes, Usage> {
    match data {
        None => Ok(Bytes::new()),
        Some("-") => {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .map_err(|e| usage(format!("cannot read the body from stdin: {e}")))?;
            Ok(buf.into())
        }
        Some(d) if d.starts_with('@') => {
            let path = &d[1..];
            std::fs::read(path).map(Bytes::from).map_err(|e| {
                usage(format!(
                    "cannot read body file {}: {e}",
                    echo(Input::Text, path)
                ))
            })
        }
        Some(text) => Ok(Bytes::copy_from_slice(text.as_bytes())),
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
}
