//! [`JsonJob`]: the default classifier of job-status answers.

use polite_core::drive::Classify;
use polite_core::poll::JobReport;

use crate::answer::HttpAnswer;

/// Reads a job's state from a JSON body, and recognises a server that rejects
/// the long-poll parameter.
///
/// * A success answer whose body is a JSON object with a string at `field`
///   (a dotted path: `status`, `data.state`) reports that state.
/// * An answer with the configured status (400) whose JSON body has the
///   configured error code at `code` (`VALIDATION_ERROR`) reports
///   [`JobReport::LongPollUnsupported`].
/// * Anything else reports nothing (for a success, `PollMachine` then stops
///   with `NotRetryable`: the answer could not be read as a job).
///
/// ```
/// use polite_client::{HttpAnswer, JsonJob};
/// use polite_core::drive::Classify;
/// use polite_core::poll::JobReport;
///
/// let mut job = JsonJob::new("status");
/// let ok = HttpAnswer(http::Response::new(br#"{"id":"7","status":"running"}"#[..].into()));
/// assert_eq!(job.job(&ok), Some(JobReport::State("running")));
///
/// let mut bad = http::Response::new(br#"{"code":"VALIDATION_ERROR"}"#[..].into());
/// *bad.status_mut() = http::StatusCode::BAD_REQUEST;
/// assert_eq!(job.job(&HttpAnswer(bad)), Some(JobReport::LongPollUnsupported));
/// ```
#[derive(Clone, Debug)]
pub struct JsonJob {
    field: String,
    unsupported_status: u16,
    unsupported_code: String,
    state: String,
}

impl JsonJob {
    /// A classifier reading the state at `field`; long poll unsupported is
    /// HTTP 400 with `{"code": "VALIDATION_ERROR"}`.
    #[must_use]
    pub fn new(field: &str) -> JsonJob {
        JsonJob {
            field: field.to_owned(),
            unsupported_status: 400,
            unsupported_code: "VALIDATION_ERROR".to_owned(),
            state: String::new(),
        }
    }

    /// Changes the test for "long poll unsupported": this status with this
    /// error code at the body's `code` field.
    #[must_use]
    pub fn unsupported_when(mut self, status: u16, code: &str) -> JsonJob {
        self.unsupported_status = status;
        self.unsupported_code = code.to_owned();
        self
    }
}

fn lookup<'v>(value: &'v serde_json::Value, path: &str) -> Option<&'v serde_json::Value> {
    path.split('.').try_fold(value, |v, key| v.get(key))
}

impl Classify<HttpAnswer> for JsonJob {
    fn job<'a>(&'a mut self, answer: &'a HttpAnswer) -> Option<JobReport<'a>> {
        let status = answer.0.status().as_u16();
        let body: serde_json::Value = serde_json::from_slice(answer.0.body()).ok()?;
        if status == self.unsupported_status {
            let code = body.get("code").and_then(serde_json::Value::as_str);
            return (code == Some(self.unsupported_code.as_str()))
                .then_some(JobReport::LongPollUnsupported);
        }
        if !(200..400).contains(&status) {
            return None;
        }
        let state = lookup(&body, &self.field)?.as_str()?;
        self.state.clear();
        self.state.push_str(state);
        Some(JobReport::State(&self.state))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: &str) -> HttpAnswer {
        let mut r = http::Response::new(bytes::Bytes::copy_from_slice(body.as_bytes()));
        *r.status_mut() = http::StatusCode::from_u16(status).unwrap();
        HttpAnswer(r)
    }

    #[test]
    fn reads_nested_fields_and_rejects_garbage() {
        let mut j = JsonJob::new("data.state");
        assert_eq!(
            j.job(&answer(200, r#"{"data":{"state":"passed"}}"#)),
            Some(JobReport::State("passed"))
        );
        assert_eq!(j.job(&answer(200, r#"{"data":{"state":3}}"#)), None);
        assert_eq!(j.job(&answer(200, "not json")), None);
        assert_eq!(j.job(&answer(200, "")), None);
        assert_eq!(j.job(&answer(200, r#"["passed"]"#)), None);
        // A 400 for another reason is not "long poll unsupported".
        assert_eq!(j.job(&answer(400, r#"{"code":"BAD_ID"}"#)), None);
        // A 5xx body is never read as a state.
        assert_eq!(j.job(&answer(503, r#"{"data":{"state":"passed"}}"#)), None);
    }

    #[test]
    fn the_unsupported_test_is_configurable() {
        let mut j = JsonJob::new("status").unsupported_when(422, "NO_WAIT");
        assert_eq!(
            j.job(&answer(422, r#"{"code":"NO_WAIT"}"#)),
            Some(JobReport::LongPollUnsupported)
        );
        assert_eq!(j.job(&answer(400, r#"{"code":"VALIDATION_ERROR"}"#)), None);
    }
}
