//! The `polite` binary fed hostile input: secrets and control characters in
//! every argument that a usage error may echo (nothing secret on stderr,
//! one line per error), a zero budget, redirects that would carry
//! credentials elsewhere, bodies of gigabytes, and an invalid Retry-After.

mod common;

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::polite_with_bytes;
use polite_lab::hostile::{Hostile, Reply};
use polite_lab::{JobState, Lab, LabConfig, RetryAfter, Step};

/// Every secret the inputs below carry; none may reach stderr or stdout.
const SECRETS: [&str; 4] = ["hunter2pw", "SECRET456", "SECRET-TOKEN", "SECRET-KEY"];

fn polite_with(args: &[&str], stdin: &str) -> Output {
    polite_with_bytes(args, stdin.as_bytes().to_vec())
}

fn polite(args: &[&str]) -> Output {
    polite_with(args, "")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const URL_WITH_SECRETS: &str = "http://alice:hunter2pw@exa mple/a?token=SECRET456";

#[test]
fn no_usage_error_echoes_a_secret_or_spans_two_lines() {
    let ok = "http://127.0.0.1:9/x";
    let cases: Vec<(Vec<&str>, &str)> = vec![
        // URLs: malformed, wrong scheme, no host, CR/LF inside.
        (vec!["get", URL_WITH_SECRETS], ""),
        (
            vec!["get", "ftp://alice:hunter2pw@h.test/?token=SECRET456"],
            "",
        ),
        (vec!["get", "alice:hunter2pw@h.test/?token=SECRET456"], ""),
        (
            vec!["get", "http://h.test/?token=SECRET456\r\nX-Forged: 1"],
            "",
        ),
        (vec!["wait", URL_WITH_SECRETS], ""),
        // Headers: no colon, a bad value, a bad name, CR/LF.
        (
            vec!["get", ok, "-H", "Authorization Bearer SECRET-TOKEN"],
            "",
        ),
        (
            vec![
                "get",
                ok,
                "-H",
                "Authorization: Bearer SECRET-TOKEN\r\nX-Forged: 1",
            ],
            "",
        ),
        (
            vec!["get", ok, "-H", "X-Api-Key: SECRET-KEY\nX-Forged: 1"],
            "",
        ),
        (
            vec!["get", ok, "-H", "X-Forged\r\nX-Api-Key: SECRET-KEY"],
            "",
        ),
        (
            vec!["wait", ok, "-H", "Cookie: s=SECRET-KEY\r\nX-Forged: 1"],
            "",
        ),
        // An idempotency key is a header value too.
        (
            vec![
                "get",
                ok,
                "-X",
                "POST",
                "--idempotency-key",
                "SECRET-KEY\r\nX-Forged: 1",
            ],
            "",
        ),
        // Method, body file, wait's flags, durations, rates, unknown flags.
        (vec!["get", ok, "-X", "G\r\nX-Forged: 1"], ""),
        (
            vec!["get", ok, "-d", "@/no/such/file?token=SECRET456\nX-Forged"],
            "",
        ),
        (vec!["wait", ok, "--success", "ok\r\nX-Forged: 1"], ""),
        (vec!["wait", ok, "--wait-param", "w\r\nX-Forged: 1"], ""),
        (vec!["get", ok, "--timeout", "so\r\nX-Forged: 1"], ""),
        (vec!["batch", "--rate", "fast\r\nX-Forged: 1"], ""),
        (vec!["get", ok, "--api-key=SECRET-KEY"], ""),
        (
            vec![
                "demo",
                "--only",
                "pa\r\nX-Forged: http://alice:hunter2pw@h/?token=SECRET456",
            ],
            "",
        ),
        (
            vec!["get", ok, "http://alice:hunter2pw@h.test/?token=SECRET456"],
            "",
        ),
        // batch reads its URLs from stdin; a bad flag is still a usage
        // error before anything is read.
        (
            vec!["batch", "-H", "X-Api-Key SECRET-KEY"],
            "http://127.0.0.1:9/ok\n",
        ),
    ];
    for (args, stdin) in &cases {
        let o = polite_with(args, stdin);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line, got {err:?}");
        assert!(err.starts_with("polite: "), "{args:?}: {err:?}");
        assert!(!err.contains('\r'), "{args:?}: {err:?}");
        for secret in SECRETS {
            assert!(!err.contains(secret), "{args:?} leaked {secret}: {err:?}");
        }
    }
}

#[test]
fn a_zero_timeout_is_a_one_line_usage_error_and_sends_nothing() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    for zero in ["0", "0s", "0ms"] {
        for cmd in ["get", "wait"] {
            let o = polite(&[cmd, &lab.url("/items/a"), "--timeout", zero]);
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{cmd} --timeout {zero}: {err}");
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(err.contains("longer than zero"), "{err}");
        }
    }
    assert!(lab.log().is_empty(), "nothing was sent");
}

/// `http://127.0.0.1:99999/` is accepted by `http::Uri` with "no port":
/// it must be a usage error, never a request to port 80 (or to the lab's
/// port, were the number cut to 16 bits), in `get`, `wait` and `batch`.
#[test]
fn a_port_past_65535_is_a_usage_error_that_sends_nothing() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let wrapped = u32::from(lab.addr().port()) + 65_536;
    for url in [
        format!("http://127.0.0.1:{wrapped}/items/a?token=SECRET456"),
        "http://127.0.0.1:8a/items/a".to_owned(),
    ] {
        for cmd in ["get", "wait"] {
            let o = polite(&[cmd, &url]);
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{cmd} {url}: {err}");
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(err.contains("the port is not a number"), "{err}");
            assert!(!err.contains("SECRET456"), "{err}");
        }
        let o = polite_with(&["batch"], &format!("{url}\n"));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains("the port is not a number"), "{out}");
        assert!(out.contains(r#""line":1"#), "{out}");
    }
    assert!(lab.log().is_empty(), "nothing was sent");
}

#[test]
fn headers_never_follow_a_redirect_to_another_origin() {
    let b = Hostile::start(vec![("/landing", Reply::Body("landed".into()))]).unwrap();
    let a = Hostile::start(vec![
        ("/away", Reply::redirect(302, b.url("/landing"))),
        ("/here", Reply::redirect(307, "/landing")),
        ("/landing", Reply::Body("home".into())),
        ("/loop", Reply::redirect(302, "/loop")),
    ])
    .unwrap();
    let secrets = [
        "-H",
        "X-Api-Key: SECRET-KEY",
        "-H",
        "Authorization: Bearer SECRET-TOKEN",
    ];
    let run = |path: &str, extra: &[&str]| {
        let url = a.url(path);
        let mut args = vec!["get", url.as_str()];
        args.extend_from_slice(&secrets);
        args.extend_from_slice(extra);
        polite(&args)
    };
    let o = run("/away", &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(o.stdout, b"landed");
    assert_eq!(b.seen().len(), 1);
    assert_eq!(b.seen()[0].header("x-api-key"), None);
    assert_eq!(b.seen()[0].header("authorization"), None);
    // Same origin: the headers go along.
    let o = run("/here", &[]);
    assert_eq!(o.stdout, b"home");
    let landing = a
        .seen()
        .into_iter()
        .rfind(|s| s.path == "/landing")
        .unwrap();
    assert_eq!(landing.header("x-api-key"), Some("SECRET-KEY"));
    // --same-origin-redirects: the cross-origin redirect is the answer.
    let o = run("/away", &["--same-origin-redirects"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(b.seen().len(), 1, "B never heard of it");
    // --max-redirects 0: nothing is followed.
    let _ = run("/here", &["--max-redirects", "0"]);
    assert_eq!(a.count("/landing"), 1);
    // A loop: one request, exit 1, the cause named.
    let o = run("/loop", &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(a.count("/loop"), 1);
    assert!(
        err.contains("too many redirects") && err.contains("not retried"),
        "{err}"
    );
}

#[test]
fn a_2_gib_body_is_one_request_and_names_the_limit() {
    let server = Hostile::start(vec![("/huge", Reply::Chunked { total: 2 << 30 })]).unwrap();
    let o = polite(&["get", &server.url("/huge"), "--timeout", "20s"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    // The attempt's line, then the error naming the limit.
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("polite: body larger than the 16 MiB limit, not retried (1 attempt in"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 2, "{err}");
    assert_eq!(server.count("/huge"), 1);
    assert!(server.body_bytes_sent() < 64 << 20);
}

#[test]
fn an_invalid_retry_after_is_warned_about_once_without_verbose() {
    let bad = || Step::Status {
        status: 503,
        retry_after: Some(RetryAfter::Raw("soon".into())),
    };
    let lab = Lab::start(
        LabConfig::default()
            .script("/items/a", vec![bad(), bad(), Step::Normal])
            .job("j", Duration::from_millis(200), JobState::Passed)
            .script("/runs/j", vec![bad(), bad(), Step::Normal]),
    )
    .unwrap();
    for args in [
        vec!["get".to_owned(), lab.url("/items/a")],
        vec!["wait".to_owned(), lab.url("/runs/j")],
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = polite(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
        assert_eq!(
            err.matches("warning: the server sent an invalid Retry-After")
                .count(),
            1,
            "{args:?}: {err}"
        );
    }
}

/// Issue 16's evidence at the CLI: `Retry-After` values the server means as
/// "much later" are never undercut — an overflowing one, and a valid one
/// zero-padded past 64 bytes — each is one request and exit 11 (rate
/// limited), where they used to be resent after the backoff and exit 0.
#[test]
fn an_overflowing_or_padded_retry_after_is_one_request_and_exit_11() {
    let padded = format!("{}90", "0".repeat(80));
    for value in ["99999999999999999999", padded.as_str()] {
        let lab = Lab::start(LabConfig::default().script(
            "/items/o",
            vec![
                Step::Status {
                    status: 429,
                    retry_after: Some(RetryAfter::Raw(value.to_string())),
                },
                Step::Normal,
            ],
        ))
        .unwrap();
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_polite"))
            .args(["get", &lab.url("/items/o"), "--timeout", "5s"])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("the binary runs");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(11), "Retry-After {value}: {err}");
        assert_eq!(lab.log().len(), 1, "Retry-After {value}: resent");
    }
}

#[test]
fn a_line_of_a_batch_that_is_no_url_is_reported_in_place_without_its_secrets() {
    // URLs are read as the batch runs, so a bad line cannot stop the batch
    // before it starts: it gets its own error line, in its place, and the
    // exit code says a line was unusable.
    let o = polite_with(
        &["batch"],
        "http://alice:hunter2pw@exa mple/?token=SECRET456\n# a comment\n\n",
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(out.lines().count(), 1, "{out}");
    let line: serde_json::Value = serde_json::from_str(out.trim()).expect("a JSON line");
    assert_eq!(line["ok"], false);
    for secret in SECRETS {
        assert!(!out.contains(secret), "leaked {secret}: {out}");
        assert!(!stderr(&o).contains(secret), "leaked {secret}");
    }
}

#[test]
fn batch_results_name_their_input_line_and_never_echo_a_urls_secrets() {
    // SPEC §5.1: user-info and query values are redacted everywhere a URL
    // is echoed, a result line's `url` included (a batch's output is often
    // kept as a CI artifact). The input line number is what joins a result
    // to its URL, in input order or not.
    let lab = Lab::start(LabConfig::default()).unwrap();
    let port = lab.addr().port();
    let input = format!(
        "# a comment\n\
         http://alice:hunter2pw@127.0.0.1:{port}/bytes/3?token=SECRET456&page=2\n\
         http://exa mple/?key=SECRET-KEY\n\
         \n\
         http://127.0.0.1:{port}/bytes/1#SECRET-TOKEN\n"
    );
    for order in [&["batch", "--rate", "none"][..], &["batch", "--unordered"]] {
        let o = polite_with(order, &input);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        for secret in SECRETS {
            assert!(!out.contains(secret), "{order:?} leaked {secret}: {out}");
            assert!(!stderr(&o).contains(secret), "{order:?} leaked {secret}");
        }
        let mut lines: Vec<(u64, String, bool)> = out
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
                let url = v["url"].as_str().expect("a url").to_owned();
                (
                    v["line"].as_u64().expect("a line number"),
                    url,
                    v["ok"] == true,
                )
            })
            .collect();
        lines.sort();
        let base = format!("127.0.0.1:{port}");
        assert_eq!(
            lines,
            [
                (
                    2,
                    format!("http://***@{base}/bytes/3?token=***&page=***"),
                    true
                ),
                (3, "http://exa mple/?key=***".to_owned(), false),
                (5, format!("http://{base}/bytes/1#***"), true),
            ],
            "{order:?}: {out}"
        );
        // The line that is no URL is a usage error; the others succeeded.
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    }
    assert_eq!(lab.log().len(), 4, "two requests per run");
}

#[test]
fn a_batch_line_that_is_not_utf8_or_too_long_is_its_own_error_and_the_next_lines_are_read() {
    // Before: the first line that was not UTF-8 ended the input ("stopped
    // reading URLs from stdin"), and every line after it was lost; a line
    // of any length was kept whole in memory.
    let lab = Lab::start(LabConfig::default()).unwrap();
    let ok = lab.url("/bytes/2");
    let mut input = Vec::new();
    input.extend_from_slice(format!("{ok}\n").as_bytes());
    input.extend_from_slice(b"\xff\xfehttp://alice:hunter2pw@127.0.0.1:1/?token=SECRET456\n");
    input.extend_from_slice(format!("{ok}\r\n").as_bytes());
    input.extend_from_slice(b"http://127.0.0.1:1/");
    input.extend(std::iter::repeat_n(b'a', 300_000));
    input.extend_from_slice(b"?token=SECRET456\n");
    input.extend_from_slice(ok.as_bytes()); // the last line, without a newline
    for order in [&["batch", "--rate", "none"][..], &["batch", "--unordered"]] {
        let o = polite_with_bytes(order, input.clone());
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        for secret in SECRETS {
            assert!(!out.contains(secret), "{order:?} leaked {secret}: {out}");
            assert!(!stderr(&o).contains(secret), "{order:?} leaked {secret}");
        }
        let mut lines: Vec<(u64, bool, String)> = out
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
                assert!(
                    l.len() < 2000,
                    "a long line is shown by its start: {l:.300}"
                );
                (
                    v["line"].as_u64().expect("a line number"),
                    v["ok"] == true,
                    v["error"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        lines.sort();
        let errors: Vec<_> = lines
            .iter()
            .map(|(n, ok, e)| (*n, *ok, e.split(' ').take(3).collect::<Vec<_>>().join(" ")))
            .collect();
        assert_eq!(
            errors,
            [
                (1, true, String::new()),
                (2, false, "line is not".to_owned()),
                (3, true, String::new()),
                (4, false, "line longer than".to_owned()),
                (5, true, String::new()),
            ],
            "{order:?}: {out}"
        );
        assert!(lines[1].2.contains("UTF-8"), "{}", lines[1].2);
        assert!(!stderr(&o).contains("stopped reading"), "{}", stderr(&o));
        // Lines that are no request are usage errors.
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    }
    assert_eq!(lab.log().len(), 6, "three requests per run");
}

#[test]
fn an_empty_wait_field_or_state_is_a_usage_error_that_sends_nothing() {
    // Before: `--field ''` (or `.status`, `a..b`) matched no field, so the
    // wait polled until its --timeout; `--terminal done,,failed` added an
    // empty state.
    let lab = Lab::start(LabConfig::default()).unwrap();
    let url = lab.url("/runs/1");
    for args in [
        &["--field", ""][..],
        &["--field", ".status"],
        &["--field", "data..state"],
        &["--field", "status."],
        &["--terminal", "done,,failed"],
        &["--success", ""],
    ] {
        let mut all = vec!["wait", url.as_str(), "--timeout", "30s"];
        all.extend_from_slice(args);
        let o = polite(&all);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert_eq!(stderr(&o).lines().count(), 1, "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("empty"), "{args:?}: {}", stderr(&o));
    }
    assert!(lab.log().is_empty(), "nothing was sent");
    // A nested field is still a field.
    let o = polite(&["wait", "http://exa mple/", "--field", "data.state"]);
    assert!(!stderr(&o).contains("--field"), "{}", stderr(&o));
}

/// Output that cannot be written is an error, not a silent exit 0 with the
/// results lost: one line on stderr, exit 1, and a batch stops sending.
#[cfg(target_os = "linux")]
#[test]
fn output_that_cannot_be_written_is_exit_1_and_stops_a_batch() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let full = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap()
    };
    let o = Command::new(env!("CARGO_BIN_EXE_polite"))
        .args(["get", &lab.url("/bytes/100000")])
        .stdout(full())
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot write to stdout"), "{err}");
    let n = 2000;
    let urls: String = (0..n)
        .map(|i| lab.url(&format!("/items/{i}")) + "\n")
        .collect();
    let mut child = Command::new(env!("CARGO_BIN_EXE_polite"))
        .args(["batch", "--rate", "none"])
        .stdin(Stdio::piped())
        .stdout(full())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(urls.as_bytes())
        .unwrap_or(()); // it may stop reading first
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.matches("cannot write to stdout").count(), 1, "{err}");
    let sent = lab.log().len() - 1;
    assert!(sent < 100, "{sent} of {n} sent after the first line failed");
}

/// A redirect that comes back as the answer says so on stderr, and why,
/// never echoing the Location's credentials.
#[test]
fn a_redirect_not_followed_says_why_without_its_secrets() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let ftp = lab.url("/redirect?to=ftp://bob:hunter2pw@127.0.0.1/x%3Ftoken%3DSECRET456");
    let o = polite(&["get", &ftp]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("HTTP 302 not followed: to `ftp://***@"),
        "{err}"
    );
    assert!(
        !err.contains("hunter2pw") && !err.contains("SECRET456"),
        "{err}"
    );
    let plain = lab.url(&format!("/redirect?to={}", lab.url("/items/a")));
    let o = polite(&["get", &plain, "--max-redirects", "0"]);
    assert!(
        stderr(&o).contains("HTTP 302 not followed: --max-redirects 0"),
        "{}",
        stderr(&o)
    );
    assert_eq!(lab.log().len(), 2, "no hop sent");
}

/// A UTF-8 byte-order mark before the first URL (a file saved by a Windows
/// tool) is no part of it (user trial 3: line 1 was "malformed", the mark
/// invisible in the message); one anywhere else is the line's error.
#[test]
fn a_byte_order_mark_before_the_first_url_is_skipped() {
    let lab = Lab::start(LabConfig::default()).unwrap();
    let url = lab.url("/bytes/2");
    let mut input = b"\xEF\xBB\xBF".to_vec();
    input.extend_from_slice(format!("{url}\n\u{FEFF}{url}\n").as_bytes());
    let o = polite_with_bytes(&["batch", "--rate", "none"], input);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let oks: Vec<(u64, bool)> = out
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
            (v["line"].as_u64().expect("a line number"), v["ok"] == true)
        })
        .collect();
    assert!(oks.contains(&(1, true)), "{out}");
    assert!(oks.contains(&(2, false)), "{out}");
    assert_eq!(lab.log().len(), 1, "{out}");
}
