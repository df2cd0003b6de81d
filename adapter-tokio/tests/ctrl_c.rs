//! Ctrl-C (a real SIGINT to this test process) cancels a call at once.
//! Alone in its binary: the handler is process-wide.

use std::time::{Duration, Instant};

use bytes::Bytes;
use polite_core::Outcome;
use polite_lab::{Lab, LabConfig, Step};
use polite_tokio::{CancellationToken, Client, Config, ReqwestTransport, cancel_on_ctrl_c};

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_cancels_a_call_waiting_out_a_30s_backoff() {
    let lab = Lab::start(LabConfig::default().script(
        "/items/c",
        vec![
            Step::with_retry_after(503, Duration::from_secs(30)),
            Step::Normal,
        ],
    ))
    .unwrap();
    let client = Client::with_transport(
        ReqwestTransport::new(reqwest::Client::new()),
        Config {
            timeout: Duration::from_secs(60),
            ..Config::default()
        },
    )
    .unwrap();
    let token = cancel_on_ctrl_c(CancellationToken::new()).expect("the only handler");
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
    let result = client.send_cancellable(req, &token).await;
    let returned = Instant::now();
    let sent = killer.join().unwrap();
    assert_eq!(result.unwrap_err().outcome(), Some(Outcome::Cancelled));
    // At once, not after the 30 s sleep (1 s of slack for a loaded machine).
    assert!(
        returned - sent < Duration::from_secs(1),
        "{:?}",
        returned - sent
    );
}
