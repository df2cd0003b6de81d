//! Defects from the second user trial, at the binary: passwords with
//! unencoded `/ ? # @` never echoed, a `-d` body bounded, binary bodies in a
//! batch kept exactly, `wait -v`'s planned waits by their source, and a
//! `--rate` over the maximum as a usage error.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::Output;
use std::time::Duration;

use base64::Engine as _;
use polite_lab::{Lab, LabConfig};

fn polite_with(args: &[&str], stdin: Vec<u8>) -> Output {
    common::polite_with_bytes(args, stdin)
}

fn polite(args: &[&str]) -> Output {
    polite_with(args, Vec::new())
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A loopback server that answers the `n`-th connection with `replies[n]`
/// (one request per connection, then closed); later connections get the
/// last reply. The thread ends with the test process.
fn canned(replies: Vec<Vec<u8>>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
    let addr = listener.local_addr().expect("an address");
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = stream.set_write_timeout(Some(Duration::from_secs(5)));
            // The request head, up to its blank line.
            let mut reader = BufReader::new(&stream);
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let reply = &replies[n.min(replies.len() - 1)];
            let _ = stream.write_all(reply);
        }
    });
    addr
}

fn reply(status: &str, headers: &[&str], body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for h in headers {
        r.push_str(h);
        r.push_str("\r\n");
    }
    r.push_str("\r\n");
    let mut r = r.into_bytes();
    r.extend_from_slice(body);
    r
}

/// Defect 1: a password with an unencoded `/`, `?`, `#` or `@` made the
/// redaction look for user-info in the wrong place: `get` echoed it whole
/// (`malformed URL `http://user:pa/ssSECRET@...``) or in part
/// (`http://user:p?***`), and a batch line's `url` and `error` held it.
#[test]
fn a_password_with_unencoded_delimiters_is_never_echoed() {
    let lab = Lab::start(LabConfig::default()).expect("the lab starts");
    let port = lab.addr().port();
    let malformed = [
        format!("http://user:pa/ssSECRET@127.0.0.1:{port}/echo"),
        format!("http://user:p?ssSECRET@127.0.0.1:{port}/echo"),
        format!("http://user:se#cretSECRET@127.0.0.1:{port}/echo"),
        format!("http://user:p@/ssSECRET@127.0.0.1:{port}/echo?k=SECRET"),
        format!("http://user:SE/CRET@127.0.0.1:{port}/echo"),
    ];
    for url in &malformed {
        for args in [
            vec!["get", url.as_str(), "-v"],
            vec!["get", url.as_str(), "--log-format", "json", "-v"],
            vec!["wait", url.as_str(), "-v"],
        ] {
            let o = polite(&args);
            let (out, err) = (text(&o.stdout), text(&o.stderr));
            assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
            assert!(
                !out.contains("SECRET") && !err.contains("SECRET") && !err.contains("CRET"),
                "{args:?} leaked: {out} {err}"
            );
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(
                err.contains("malformed URL")
                    && err.contains("must be percent-encoded")
                    && !err.contains("port"),
                "{args:?}: {err}"
            );
        }
    }
    // A URL that parses (to the lab) with a `@` that could end user-info.
    let valid = format!("http://127.0.0.1:{port}/nothing/SECRET@b.test/");
    let o = polite(&["get", &valid, "-v", "--log-format", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(!text(&o.stderr).contains("SECRET"), "{}", text(&o.stderr));
    let mut input: Vec<String> = malformed.to_vec();
    input.push(valid);
    let o = polite_with(&["batch", "-v"], input.join("\n").into_bytes());
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(!out.contains("SECRET") && !out.contains("CRET"), "{out}");
    assert!(!err.contains("SECRET"), "{err}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 6, "{out}");
    for line in &lines[..5] {
        assert_eq!(line["ok"], false, "{line}");
        assert!(
            line["error"]
                .as_str()
                .is_some_and(|e| e.contains("must be percent-encoded")),
            "{line}"
        );
    }
    assert_eq!(lines[0]["url"], format!("http://***@127.0.0.1:{port}/echo"));
    assert_eq!(lines[1]["url"], "http://***");
    assert_eq!(lines[5]["url"], "http://***@b.test/");
    assert_eq!(lines[5]["status"], 404);
    assert_eq!(lab.log().len(), 2, "only the valid URL was sent");
}

/// Defect 2: `-d @/dev/zero` (or a huge file, or stdin) was read whole
/// into memory until it ran out. Now at most 64 MiB is read; more is a
/// usage error that names the limit, and nothing is sent.
#[test]
fn a_body_over_64_mib_is_a_usage_error_that_names_the_limit() {
    let lab = Lab::start(LabConfig::default()).expect("the lab starts");
    let url = lab.url("/items/big");
    let dir = std::env::temp_dir().join(format!("polite-user-trial-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let file = dir.join("over");
    // Sparse: one byte over the limit, no disk space used.
    std::fs::File::create(&file)
        .and_then(|f| f.set_len((64 << 20) + 1))
        .expect("a sparse file");
    let over = format!("@{}", file.display());
    let mut runs = vec![polite(&["get", &url, "-X", "PUT", "-d", &over])];
    if cfg!(unix) {
        runs.push(polite(&["get", &url, "-X", "PUT", "-d", "@/dev/zero"]));
    }
    runs.push(polite_with(
        &["get", &url, "-X", "PUT", "-d", "-"],
        vec![b'a'; (64 << 20) + 1],
    ));
    let _ = std::fs::remove_dir_all(&dir);
    for o in runs {
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("larger than the 64 MiB limit of -d")
                && err.contains("polite keeps the body in memory to send it again"),
            "{err}"
        );
    }
    assert!(lab.log().is_empty(), "nothing was sent");
}

/// Defect 3: a batch wrote every body through a lossy UTF-8 conversion,
/// so binary bytes became replacement characters with `ok:true`. Now a
/// body that is not UTF-8 is base64 with `"body_encoding":"base64"`; a
/// UTF-8 body is as before, without the field.
#[test]
fn a_batch_keeps_a_binary_body_exactly() {
    let mut binary = vec![0xff, 0xfe, 0x00, 0x80, 0x41];
    binary.extend(0..=255u8);
    let server = canned(vec![reply(
        "200 OK",
        &["Content-Type: application/octet-stream"],
        &binary,
    )]);
    let lab = Lab::start(LabConfig::default()).expect("the lab starts");
    let input = format!("http://{server}/bin\n{}\n", lab.url("/bytes/3"));
    let o = polite_with(&["batch"], input.into_bytes());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let lines: Vec<serde_json::Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 2, "{}", text(&o.stdout));
    assert_eq!(lines[0]["ok"], true);
    assert_eq!(lines[0]["body_encoding"], "base64");
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(lines[0]["body"].as_str().expect("a body"))
        .expect("base64");
    assert_eq!(decoded, binary);
    assert_eq!(lines[1]["body"], "xxx");
    assert!(lines[1].get("body_encoding").is_none(), "{}", lines[1]);
}

/// Defect 4: `wait -v` counted only the waits of retries (records with a
/// class), so after waiting on a pending job's `Retry-After` it said
/// "planned waits: backoff 0.0s, Retry-After 0.0s".
#[test]
fn wait_v_counts_the_waits_a_pending_job_asked_for() {
    let running = reply(
        "200 OK",
        &["Content-Type: application/json", "Retry-After: 1"],
        br#"{"status":"running"}"#,
    );
    let done = reply(
        "200 OK",
        &["Content-Type: application/json"],
        br#"{"status":"done"}"#,
    );
    let server = canned(vec![running.clone(), running, done]);
    let o = polite(&[
        "wait",
        &format!("http://{server}/job/ra"),
        "--timeout",
        "20s",
        "-v",
    ]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let summary = err.lines().last().unwrap_or_default();
    assert!(
        summary.starts_with("polite: 3 requests sent, 0 retries"),
        "{err}"
    );
    assert!(summary.contains("Retry-After 2.0s"), "{summary}");
}

/// Defect 5: `--rate 4294967295/1s` got through the flags and failed later
/// as "invalid policy: `limit` must be at most 1048576 (the log is
/// allocated up front)", naming an internal field.
#[test]
fn a_rate_over_the_maximum_is_a_usage_error_naming_rate() {
    for rate in ["4294967295/1s", "1048577/60s"] {
        let o = polite_with(
            &["batch", "--rate", rate],
            b"http://127.0.0.1:9/\n".to_vec(),
        );
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("--rate")
                && err.contains("at most 1048576")
                && err.contains("(see --help)")
                && !err.contains("limit`")
                && !err.contains("allocated"),
            "{err}"
        );
        assert!(o.stdout.is_empty());
    }
}
