//! The harness at tiny sizes: every suite runs and prints its tables (the
//! numbers mean nothing at these sizes). Seconds, not minutes.

use std::process::Command;

#[test]
fn every_suite_runs_at_smoke_size() {
    let out = Command::new(env!("CARGO_BIN_EXE_polite-bench"))
        .args(["all", "--smoke"])
        .output()
        .expect("run polite-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for suite in [
        "overhead",
        "deadline",
        "cancel",
        "poll",
        "quota",
        "nohints",
        "scale",
        "scale-batch",
        "tls",
        "instructions",
    ] {
        assert!(
            stdout.contains(&format!("## {suite}")),
            "{suite} missing:\n{stdout}"
        );
    }
    assert!(!stdout.contains("**Failed run**"), "{stdout}");
    // scale-batch: a client process that failed says so in its row.
    assert!(!stdout.contains("| failed: "), "{stdout}");
    println!("{stdout}");
}

#[test]
fn an_unknown_suite_is_a_usage_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_polite-bench"))
        .arg("nonsense")
        .output()
        .expect("run polite-bench");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn the_calls_helper_refuses_what_it_does_not_know_without_panicking() {
    for args in [
        &["calls", "nonsense", "1"][..],
        &["calls", "reqwest", "x"],
        &["calls"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_polite-bench"))
            .args(args)
            .output()
            .expect("run polite-bench");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("usage"), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}
