//! Refusing to retry a transport error kind (`RetryPolicy::retried_transport`)
//! against a real server: the lab resets the connection once, then answers.

use std::time::Duration;

use bytes::Bytes;
use polite_blocking::{Client, Config, Outcome, TransportErrorKind, TransportKinds};
use polite_lab::{Lab, LabConfig, Step};

fn get(url: String) -> http::Request<Bytes> {
    http::Request::get(url).body(Bytes::new()).unwrap()
}

fn lab() -> polite_lab::LabHandle {
    Lab::start(LabConfig::default().script("/items/r", vec![Step::Reset, Step::Normal])).unwrap()
}

#[test]
fn a_reset_is_retried_by_default() {
    let lab = lab();
    let answer = Client::new().send(get(lab.url("/items/r"))).unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(lab.log().len(), 2);
}

#[test]
fn a_kind_left_out_of_the_policy_ends_the_call_after_one_send() {
    let lab = lab();
    let mut config = Config {
        timeout: Duration::from_secs(10),
        ..Config::default()
    };
    config.retry.retried_transport = TransportKinds::RETRYABLE.without(TransportErrorKind::Reset);
    let client = Client::with_config(config).unwrap();
    let err = client.send(get(lab.url("/items/r"))).unwrap_err();
    assert_eq!(
        err.outcome(),
        Some(Outcome::Permanent {
            cause: TransportErrorKind::Reset
        })
    );
    assert_eq!(lab.log().len(), 1, "sent once");
}
