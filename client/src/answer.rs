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

impl polite_core::drive::Answer for HttpAnswer {
    fn status(&self) -> u16 {
        self.0.status().as_u16()
    }
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.0.headers().get(name).map(http::HeaderValue::as_bytes)
    }
}
