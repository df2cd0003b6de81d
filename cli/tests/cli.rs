//! The `polite` binary against the lab on loopback: exit codes, stdout,
//! stderr formats, batch order and Ctrl-C.

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use polite_lab::{Fault, JobState, Lab, LabConfig, LogStats, PathMatch, RetryAfter, Step};

fn polite(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_polite"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs")
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exited normally")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn get_prints_only_the_body_and_exits_0() {
    let lab = Lab::start(LabConfig::default().script(
        "/items/a",
        vec![Step::without_retry_after(503), Step::Normal],
    ))
    .unwrap();
    let o = polite(&["get", &lab.url("/items/a")]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), r#"{"item":"a"}"#);
    // One line about the retry on stderr.
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("HTTP 503") && err.contains("retry in"),
        "{err}"
    );
    assert_eq!(lab.log().len(), 2);
}

#[test]
fn a_final_answer_exits_1_and_is_still_printed() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let o = polite(&["get", &lab.url("/nothing/here")]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("404"), "{}", stderr(&o));
}

#[test]
fn usage_errors_exit_2_with_one_line() {
    for args in [
        vec!["get", "not a url"],
        vec!["get", "ftp://127.0.0.1/x"],
        vec!["get", "http://127.0.0.1:9/x", "--timeout", "soon"],
        vec!["get", "http://127.0.0.1:9/x", "-d", "@/no/such/file"],
        vec!["get", "http://127.0.0.1:9/x", "-H", "no colon"],
        vec!["batch", "--rate", "fast"],
        vec!["wait", "http://127.0.0.1:9/x", "--success", "green"],
        vec!["frobnicate"],
    ] {
        let o = polite(&args);
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{args:?}");
        assert!(o.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn demo_only_names_its_parts() {
    let o = polite(&["demo", "--only", "everything"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("pacing, nohints, wait, hang"),
        "{}",
        stderr(&o)
    );
    assert!(o.stdout.is_empty());
}

#[test]
fn a_hostile_retry_after_exits_11_at_once() {
    let hostile = Step::Status {
        status: 429,
        retry_after: Some(RetryAfter::Raw("86400".into())),
    };
    let lab =
        Lab::start(LabConfig::default().script("/items/h", vec![hostile, Step::Normal])).unwrap();
    let start = Instant::now();
    let o = polite(&["get", &lab.url("/items/h"), "--timeout", "10m"]);
    assert_eq!(code(&o), 11, "{}", stderr(&o));
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_eq!(lab.log().len(), 1);
}

#[test]
fn a_hanging_server_exits_124_within_the_budget_and_cushion() {
    let lab = Lab::start(LabConfig::default().fault(PathMatch::Any, Fault::Hang)).unwrap();
    let start = Instant::now();
    let o = polite(&["get", &lab.url("/items/1"), "--timeout", "1s"]);
    assert_eq!(code(&o), 124, "{}", stderr(&o));
    assert!(
        start.elapsed() < Duration::from_secs(1 + 2 + 1),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn a_post_is_not_retried_without_an_idempotency_key() {
    let lab = Lab::start(LabConfig::default().script(
        "/items/p",
        vec![Step::without_retry_after(503), Step::Normal],
    ))
    .unwrap();
    let o = polite(&["get", "-X", "POST", "-d", "{}", &lab.url("/items/p")]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert_eq!(lab.log().len(), 1);
    lab.clear_log();
    let lab2 = Lab::start(LabConfig::default().script(
        "/items/p",
        vec![Step::without_retry_after(503), Step::Normal],
    ))
    .unwrap();
    let o = polite(&[
        "get",
        "-X",
        "POST",
        "-d",
        "{}",
        "--idempotency-key",
        "k1",
        &lab2.url("/items/p"),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(lab2.log().len(), 2);
}

#[test]
fn json_log_lines_parse() {
    let lab = Lab::start(LabConfig::default().script(
        "/items/j",
        vec![
            Step::without_retry_after(503),
            Step::with_retry_after(429, Duration::from_secs(1)),
            Step::Normal,
        ],
    ))
    .unwrap();
    let o = polite(&["get", &lab.url("/items/j"), "--log-format", "json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let lines: Vec<serde_json::Value> = stderr(&o)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON object per line"))
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[0]["status"], 503);
    assert_eq!(lines[1]["status"], 429);
    assert_eq!(lines[1]["next_source"], "retry-after");
    assert_eq!(lines[2]["status"], 200);
}

#[test]
fn wait_exits_0_for_success_and_1_for_another_terminal_state() {
    let lab = Lab::start(
        LabConfig::default()
            .job("ok", Duration::from_millis(300), JobState::Passed)
            .job("bad", Duration::from_millis(300), JobState::Failed),
    )
    .unwrap();
    let o = polite(&["wait", &lab.url("/runs/ok"), "--timeout", "10s"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("final JSON on stdout");
    assert_eq!(v["status"], "passed");
    let o = polite(&["wait", &lab.url("/runs/bad"), "--timeout", "10s"]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
}

/// A wait that ends on a final answer writes that answer's body, as `get`
/// does (user trial 4: a 400 with the server's message printed only
/// "not retryable (HTTP 400)").
#[test]
fn wait_writes_the_answer_it_ended_on() {
    let lab =
        Lab::start(LabConfig::default().script("/runs/bad", vec![Step::status(400)])).unwrap();
    let o = polite(&["wait", &lab.url("/runs/bad"), "--timeout", "10s"]);
    let err = stderr(&o);
    assert_ne!(code(&o), 0, "{err}");
    assert!(err.contains("HTTP 400"), "{err}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("\"code\":\"SCRIPTED\""), "stdout: {out:?}");
}

/// A long poll leaves a second of the budget for its answer to come back
/// (user trial 4: `--timeout 4s` asked `waitSeconds=4`; the lab held the
/// poll 4 s, its answer came after the deadline, and the wait ended on
/// "transport error: aborted: no answer in time").
#[test]
fn a_long_poll_leaves_room_for_its_answer_before_the_timeout() {
    let lab = Lab::start(LabConfig::default().job("j", Duration::from_secs(30), JobState::Passed))
        .unwrap();
    let o = polite(&["wait", "-v", &lab.url("/runs/j"), "--timeout", "4s"]);
    let err = stderr(&o);
    assert_eq!(code(&o), 124, "{err}");
    assert!(!err.contains("aborted"), "{err}");
    let asked: Vec<Option<String>> = lab.log().iter().map(|e| e.query.clone()).collect();
    assert_eq!(
        asked.first(),
        Some(&Some("waitSeconds=3".to_owned())),
        "{asked:?}"
    );
}

#[test]
fn wait_announces_the_fallback_once() {
    let lab = Lab::start(LabConfig::default().long_poll(false).job(
        "j",
        Duration::from_millis(500),
        JobState::Passed,
    ))
    .unwrap();
    let o = polite(&["wait", &lab.url("/runs/j"), "--timeout", "20s"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let err = stderr(&o);
    assert_eq!(
        err.matches("server does not support long-poll; switching to backoff")
            .count(),
        1,
        "{err}"
    );
}

#[test]
fn batch_keeps_input_order() {
    let lab = Lab::start(LabConfig::default().script(
        "/items/2",
        vec![Step::without_retry_after(503), Step::Normal],
    ))
    .unwrap();
    // A comment and a blank line first: item 0 is input line 3.
    let urls: String = "# six items\n\n".to_owned()
        + &(1..=6)
            .rev()
            .map(|i| format!("{}\n", lab.url(&format!("/items/{i}"))))
            .collect::<String>();
    let mut child = Command::new(env!("CARGO_BIN_EXE_polite"))
        .args(["batch", "--rate", "none", "--concurrency", "3"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(urls.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let items: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert_eq!(v["ok"], true);
            v["url"]
                .as_str()
                .unwrap()
                .rsplit('/')
                .next()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(items, ["6", "5", "4", "3", "2", "1"]);
    // The log names the retried item by its input line, as its result
    // line does (`/items/2` is item 4, line 7).
    let log = stderr(&o);
    assert!(
        log.contains("polite: line 7 attempt 1: HTTP 503 — retry in"),
        "{log}"
    );
    assert!(!log.contains("item "), "{log}");
}

/// Sends SIGINT (a Ctrl-C) to `child`; when it was sent.
#[cfg(unix)]
fn interrupt(child: &std::process::Child) -> Instant {
    let sent = Instant::now();
    let ok = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    sent
}

#[cfg(unix)]
#[test]
fn ctrl_c_during_a_30s_backoff_exits_130_within_200ms() {
    let lab = Lab::start(LabConfig::default().script(
        "/items/c",
        vec![
            Step::with_retry_after(503, Duration::from_secs(30)),
            Step::Normal,
        ],
    ))
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_polite"))
        .args(["get", &lab.url("/items/c"), "--timeout", "60s"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the first attempt was answered (the client is in its sleep).
    let deadline = Instant::now() + Duration::from_secs(10);
    while lab.log().count_status(503) == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    let sent = interrupt(&child);
    let status = child.wait().unwrap();
    let took = sent.elapsed();
    assert_eq!(status.code(), Some(130));
    // At once, not after the 30 s sleep (1 s of slack for a loaded machine).
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert_eq!(lab.log().len(), 1);
}

/// Ctrl-C while every attempt of a batch waits on a server that never
/// answers: `polite batch` exits 130 at once (the attempts in flight are
/// interrupted, not waited for), every item pulled has its whole line.
#[cfg(unix)]
#[test]
fn ctrl_c_during_a_batch_of_hanging_attempts_exits_130_with_every_line() {
    let lab = Lab::start(LabConfig::default().fault(PathMatch::Any, Fault::Hang)).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_polite"))
        .args(["batch", "--concurrency", "3", "--timeout", "60s"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let urls: String = (0..5)
        .map(|i| format!("{}\n", lab.url(&format!("/items/{i}"))))
        .collect();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(urls.as_bytes())
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while lab.in_flight() < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(lab.in_flight(), 3, "three attempts hang");
    let sent = interrupt(&child);
    let o = child.wait_with_output().unwrap();
    let took = sent.elapsed();
    assert_eq!(code(&o), 130, "{}", stderr(&o));
    // At once, not at the 60 s deadline (1 s of slack for a loaded machine).
    assert!(took < Duration::from_secs(1), "{took:?}");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.len() >= 3, "{lines:?}");
    // Each attempt in flight has its line in the log, by input line.
    let log = stderr(&o);
    for line in 1..=3 {
        let said = format!("polite: line {line} attempt 1: in flight — gave up: cancelled");
        assert!(log.contains(&said), "{log}");
    }
    for (k, v) in lines.iter().enumerate() {
        assert_eq!(v["line"], k + 1, "{v}");
        assert_eq!(v["ok"], false, "{v}");
        assert_eq!(v["error"], "cancelled", "{v}");
    }
    assert_eq!(lab.log().len(), 3, "no more sent after the three");
}

/// `batch` streams: each line is written as soon as it may be, so a
/// consumer reads the first results while a slow item is still running;
/// in input order by default, in completion order with `--unordered`.
#[test]
fn batch_writes_each_result_as_soon_as_it_may() {
    use std::io::{BufRead, BufReader, Write};
    use std::time::{Duration, Instant};
    let lab = Lab::start(LabConfig::default().fault(
        polite_lab::PathMatch::exact("/items/slow"),
        polite_lab::Fault::Slow(Duration::from_secs(3)),
    ))
    .unwrap();
    for (flag, want) in [
        (None, ["/items/a", "/items/slow", "/items/b"]),
        (Some("--unordered"), ["/items/a", "/items/b", "/items/slow"]),
    ] {
        let mut args = vec!["batch", "--concurrency", "2"];
        args.extend(flag);
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_polite"))
            .args(&args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        let mut stdin = child.stdin.take().unwrap();
        for path in ["/items/a", "/items/slow", "/items/b"] {
            writeln!(stdin, "{}", lab.url(path)).unwrap();
        }
        drop(stdin);
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().unwrap().unwrap();
        // The first result is out while the slow item (3 s) still runs.
        let first_at = started.elapsed();
        assert!(
            first_at < Duration::from_secs(2),
            "{flag:?}: first line after {first_at:?}"
        );
        let mut all = vec![first];
        all.extend(lines.map(Result::unwrap));
        assert!(child.wait().unwrap().success());
        assert_eq!(all.len(), 3, "{flag:?}: {all:?}");
        for (line, path) in all.iter().zip(want) {
            assert!(line.contains(path), "{flag:?}: want {want:?}, got {all:?}");
        }
        lab.clear_log();
    }
}

/// A wait whose answer is no job (a body that is not JSON, or JSON without
/// the `--field`) says which, not only "not retryable (HTTP 200)".
#[test]
fn wait_says_why_an_answer_is_no_job() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    for (url, field, why) in [
        (
            lab.url("/items/a"),
            "data.state",
            "has no field `data.state`",
        ),
        (
            lab.url("/bytes/10"),
            "status",
            "the answer's body is not JSON",
        ),
    ] {
        let o = polite(&["wait", "--field", field, &url]);
        let err = stderr(&o);
        assert_eq!(code(&o), 1, "{err}");
        assert!(err.contains(why), "{field}: {err}");
    }
}

/// Starts `polite batch ARGS` with one URL on stdin, which is then held
/// open with nothing more (a slow producer, `tail -f`): the child and the
/// open stdin (drop it to close).
#[cfg(unix)]
fn batch_with_stdin_held_open(
    url: &str,
    args: &[&str],
) -> (std::process::Child, std::process::ChildStdin) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_polite"))
        .arg("batch")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(format!("{url}\n").as_bytes()).unwrap();
    stdin.flush().unwrap();
    (child, stdin)
}

/// A URL read while stdin stays open is sent and its line written at once,
/// and `--timeout` ends the batch on time (user trial 3: nothing was sent,
/// and the batch returned only when the producer wrote again, 30 s later).
#[cfg(unix)]
#[test]
fn a_batch_whose_stdin_stays_open_sends_what_it_read_and_ends_at_its_timeout() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let started = Instant::now();
    let (child, stdin) = batch_with_stdin_held_open(&lab.url("/items/first"), &["--timeout", "2s"]);
    let o = child.wait_with_output().unwrap();
    let took = started.elapsed();
    drop(stdin);
    assert_eq!(code(&o), 124, "{}", stderr(&o));
    assert_eq!(lab.log().len(), 1, "the URL read was sent");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("\"ok\":true"), "{out}");
    assert!(
        stderr(&o).contains("not read past line 1"),
        "{}",
        stderr(&o)
    );
    // At the timeout (1.5 s of slack for a loaded machine), not when stdin
    // closes (it never does here).
    assert!(took < Duration::from_millis(3500), "{took:?}");
}

/// Ctrl-C while the batch waits for more input ends it at once: 130.
#[cfg(unix)]
#[test]
fn ctrl_c_while_a_batch_waits_for_input_exits_130_at_once() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let (child, stdin) =
        batch_with_stdin_held_open(&lab.url("/items/first"), &["--timeout", "60s"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while lab.log().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    let sent = interrupt(&child);
    let o = child.wait_with_output().unwrap();
    let took = sent.elapsed();
    drop(stdin);
    assert_eq!(code(&o), 130, "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("\"ok\":true"));
    assert!(took < Duration::from_secs(1), "{took:?}");
}
