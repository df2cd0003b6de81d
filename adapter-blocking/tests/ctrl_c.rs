//! Ctrl-C (a real SIGINT to this test process) cancels a blocking call at
//! once, and a second installation is refused, not a panic. Alone in its
//! binary: the handler is process-wide.

use std::time::{Duration, Instant};

use bytes::Bytes;
use polite_blocking::{CancelToken, Client, Config, CtrlCError, Outcome, cancel_on_ctrl_c};
use polite_lab::{Lab, LabConfig, Step};

#[cfg(unix)]
#[test]
fn sigint_cancels_a_call_waiting_out_a_30s_backoff() {
    let lab = Lab::start(LabConfig::default().script(
        "/items/c",
        vec![
            Step::with_retry_after(503, Duration::from_secs(30)),
            Step::Normal,
        ],
    ))
    .unwrap();
    let client = Client::with_transport(
        polite_blocking::UreqTransport::default(),
        Config {
            timeout: Duration::from_secs(60),
            ..Config::default()
        },
    )
    .unwrap();
    let token = cancel_on_ctrl_c(CancelToken::new()).unwrap();
    // Once per process: the second call is an error, and changes nothing.
    assert!(matches!(
        cancel_on_ctrl_c(CancelToken::new()),
        Err(CtrlCError::AlreadyInstalled)
    ));
    let killer = std::thread::spawn(|| {
        std::thread::sleep(Duration::from_millis(400));
        let sent = Instant::now();
        let status = std::process::Command::new("kill")
            .args(["-INT", &std::process::id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
        sent
    });
    let req = http::Request::get(lab.url("/items/c"))
        .body(Bytes::new())
        .unwrap();
    let result = client.send_cancellable(req, &token);
    let returned = Instant::now();
    let sent = killer.join().unwrap();
    assert_eq!(result.unwrap_err().outcome(), Some(Outcome::Cancelled));
    let latency = returned - sent;
    eprintln!("SIGINT to return: {latency:?} (includes running `kill`)");
    // At once, not after the 30 s sleep (1 s of slack for a loaded machine).
    assert!(latency < Duration::from_secs(1), "{latency:?}");
    assert_eq!(lab.log().len(), 1);
}
