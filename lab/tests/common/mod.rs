//! Helpers shared by the lab's integration tests: a plain blocking HTTP client (ureq).
#![allow(dead_code, unreachable_pub)]

use std::time::{Duration, Instant};

use ureq::http;

/// One answer, or the client error.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// An agent that reports 4xx/5xx as responses, never follows redirects, and
/// gives up after `timeout` in all.
pub fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(timeout))
        .build()
        .into()
}

/// `method url` with an empty body for GET/DELETE/HEAD and `{}` otherwise.
pub fn request(agent: &ureq::Agent, method: &str, url: &str) -> Result<Reply, ureq::Error> {
    request_with(agent, method, url, &[])
}

pub fn request_with(
    agent: &ureq::Agent,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
) -> Result<Reply, ureq::Error> {
    let mut builder = http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        builder = builder.header(*k, *v);
    }
    let mut resp = match method {
        "GET" | "DELETE" | "HEAD" => agent.run(builder.body(())?)?,
        _ => agent.run(builder.body("{}")?)?,
    };
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.body_mut().read_to_string()?;
    Ok(Reply {
        status,
        headers,
        body,
    })
}

/// GET with a 10 s safety timeout; panics on a transport error.
pub fn get(url: &str) -> Reply {
    request(&agent(Duration::from_secs(10)), "GET", url).expect("GET answered")
}

/// Polls `cond` every 5 ms for at most `limit`; true if it came true.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    cond()
}

/// Sleeps until `at` (no-op if past): to place a request in a later quota window.
pub fn sleep_until(at: Instant) {
    let now = Instant::now();
    if at > now {
        std::thread::sleep(at - now);
    }
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}
