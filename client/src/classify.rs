//! [`Classifier`]: the client's own reading of answers that their status
//! does not tell right — a 200 whose body says `{"busy": true}`, a 400
//! whose error code says `Throttling` — applied to every call.

use std::sync::Arc;

use polite_core::RetryClass;
use polite_core::drive::Classify;
use polite_core::poll::JobReport;

use crate::answer::HttpAnswer;

/// A function from an answer to its retry class, for every call of a
/// client ([`Config::classify`](crate::Config::classify)): `Some(class)`
/// retries the answer as that class (even a 2xx), `None` leaves it to its
/// status. It runs on every answer, so keep it cheap; it sees the whole
/// answer, body included.
///
/// ```
/// use polite_client::{Classifier, Config, HttpAnswer};
/// use polite_core::RetryClass;
///
/// // This API answers 200 {"busy": true} when it wants you to come back.
/// let busy = Classifier::new(|a: &HttpAnswer| {
///     (a.0.status() == 200 && a.0.body().starts_with(br#"{"busy":true"#))
///         .then_some(RetryClass::ServerError)
/// });
/// let answer = |status: u16, body: &'static [u8]| {
///     let mut r = http::Response::new(bytes::Bytes::from_static(body));
///     *r.status_mut() = http::StatusCode::from_u16(status).unwrap();
///     HttpAnswer(r)
/// };
/// assert_eq!(busy.class_of(&answer(200, br#"{"busy":true}"#)), Some(RetryClass::ServerError));
/// assert_eq!(busy.class_of(&answer(200, br#"{"id":7}"#)), None); // the policy's table decides
/// let config = Config { classify: Some(busy), ..Config::default() };
/// assert!(config.classify.is_some());
/// ```
#[derive(Clone)]
pub struct Classifier(Arc<ClassOf>);

/// What a [`Classifier`] holds.
type ClassOf = dyn Fn(&HttpAnswer) -> Option<RetryClass> + Send + Sync;

impl Classifier {
    /// A classifier from a function.
    pub fn new(f: impl Fn(&HttpAnswer) -> Option<RetryClass> + Send + Sync + 'static) -> Self {
        Classifier(Arc::new(f))
    }

    /// The class `answer` is retried as (`None`: by its status).
    #[must_use]
    pub fn class_of(&self, answer: &HttpAnswer) -> Option<RetryClass> {
        (self.0)(answer)
    }
}

impl std::fmt::Debug for Classifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Classifier(..)")
    }
}

/// Two configurations are equal only with the same classifier (the same
/// `Arc`), since functions cannot be compared.
impl PartialEq for Classifier {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Classifier {}

/// A call's classifier: the client's [`Classifier`] first, then the call's
/// own (a `wait`'s job reader), whose job reports pass through.
pub(crate) struct Both<'a, J: ?Sized> {
    pub(crate) client: Option<&'a Classifier>,
    pub(crate) call: &'a mut J,
}

impl<J: Classify<HttpAnswer> + ?Sized> Classify<HttpAnswer> for Both<'_, J> {
    fn job<'a>(&'a mut self, answer: &'a HttpAnswer) -> Option<JobReport<'a>> {
        self.call.job(answer)
    }
    fn retry_class(&mut self, answer: &HttpAnswer) -> Option<RetryClass> {
        self.client
            .and_then(|c| c.class_of(answer))
            .or_else(|| self.call.retry_class(answer))
    }
}
