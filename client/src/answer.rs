//! [`HttpAnswer`]: an `http::Response<Bytes>` as the drive loop reads it.

use bytes::Bytes;

/// A received answer: status, headers and the whole body.
///
/// ```
/// use polite_client::HttpAnswer;
/// use polite_core::drive::Answer;
/// let mut r = http::Response::new(bytes::Bytes::new());
/// r.headers_mut().insert("retry-after", http::HeaderValue::from_static("3"));
/// assert_eq!(HttpAnswer(r).header("Retry-After"), Some(&b"3"[..]));
/// ```
#[derive(Debug)]
pub struct HttpAnswer(pub http::Response<Bytes>);

/// Up to this many header values, `HttpAnswer::header` scans instead of hashing.
const SCAN_UP_TO: usize = 12;

impl polite_core::drive::Answer for HttpAnswer {
    fn status(&self) -> u16 {
        self.0.status().as_u16()
    }
    fn header(&self, name: &str) -> Option<&[u8]> {
        let headers = self.0.headers();
        // The drive loop asks for every header the machines read (eight
        // names) on every answer. `get(&str)` parses, validates and hashes
        // the name each time (~40 ns); for the few headers of a typical
        // answer a scan of the stored names is ~5× cheaper. Stored names
        // are lower case; the first match is the first value, as `get`'s.
        if headers.len() <= SCAN_UP_TO {
            headers
                .iter()
                .find(|(k, _)| k.as_str().eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_bytes())
        } else {
            headers.get(name).map(http::HeaderValue::as_bytes)
        }
    }
    fn file_headers<'a>(&'a self, response: &mut polite_core::Response<'a>) {
        // One pass over the stored names (in order, so the first value of
        // a repeated header is kept; of repeated `Retry-After` values, the
        // later time: `Response::file_header`) instead of eight lookups.
        for (name, value) in self.0.headers() {
            response.file_header(name.as_str(), value.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use polite_core::drive::Answer;

    fn answer(headers: &[(&str, &str)]) -> HttpAnswer {
        let mut r = http::Response::new(Bytes::new());
        for (k, v) in headers {
            r.headers_mut().append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                http::HeaderValue::from_str(v).unwrap(),
            );
        }
        HttpAnswer(r)
    }

    #[test]
    fn header_lookup_is_case_insensitive_and_first_value_wins_small_or_large() {
        let few = [("Retry-After", "3"), ("date", "x"), ("retry-after", "9")];
        let mut many: Vec<(String, String)> = (0..20)
            .map(|i| (format!("x-filler-{i}"), "v".to_owned()))
            .collect();
        many.extend(few.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        let many: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        for a in [answer(&few), answer(&many)] {
            assert_eq!(a.header("retry-after"), Some(&b"3"[..]));
            assert_eq!(a.header("Retry-After"), Some(&b"3"[..]));
            assert_eq!(a.header("DATE"), Some(&b"x"[..]));
            assert_eq!(a.header("ratelimit"), None);
        }
        assert!(answer(&many).0.headers().len() > SCAN_UP_TO);
    }

    #[test]
    fn filing_walks_the_headers_once_and_keeps_each_first_value_but_the_latest_retry_after() {
        let a = answer(&[
            ("Retry-After", "3"),
            ("X-RateLimit-Remaining", "0"),
            ("retry-after", "9"),
            ("x-amz-retry-after", "1500"),
            ("Content-Type", "text/plain"),
            ("date", "x"),
        ]);
        let mut r =
            polite_core::Response::new(polite_core::SendId::default(), 429, std::time::UNIX_EPOCH);
        a.file_headers(&mut r);
        let mut by_name =
            polite_core::Response::new(polite_core::SendId::default(), 429, std::time::UNIX_EPOCH);
        for name in polite_core::Response::HEADERS {
            if let Some(v) = a.header(name) {
                by_name = by_name.header(name, v);
            }
        }
        // The same fields as eight lookups file, but for `Retry-After`:
        // of two values the later time is kept (SPEC §2.1), where a lookup
        // finds the first.
        assert_eq!(by_name.retry_after, Some(&b"3"[..]));
        by_name.retry_after = Some(&b"9"[..]);
        assert_eq!(r, by_name);
        assert_eq!(r.retry_after, Some(&b"9"[..]));
        assert_eq!(r.date, Some(&b"x"[..]));
        assert_eq!(r.retry_after_ms, Some(&b"1500"[..]));
        assert_eq!(r.rate_limit.x_ratelimit_remaining, Some(&b"0"[..]));
    }
}
