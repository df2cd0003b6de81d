//! The suite at tiny sizes: it runs, its recorder counts, and its table
//! prints (the numbers mean nothing at these sizes).

use std::process::Command;

#[test]
fn the_suite_runs_at_smoke_size_and_its_recorder_counts_every_call() {
    let out = Command::new(env!("CARGO_BIN_EXE_polite-bench-observe"))
        .arg("--smoke")
        .output()
        .expect("run polite-bench-observe");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("## observe"), "{stdout}");
    assert!(
        stdout.contains("metrics recorder installed (Prometheus)"),
        "{stdout}"
    );
    // "The Prometheus recorder counted N succeeded calls of the M it was
    // installed for": the metrics reached the recorder, every one of them.
    let said = stdout
        .split("recorder counted ")
        .nth(1)
        .and_then(|rest| rest.split(" it was installed for").next())
        .expect("the note on what the recorder counted");
    let numbers: Vec<f64> = said
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(numbers.len(), 2, "{said}");
    assert!(numbers[0] > 0.0 && numbers[0] == numbers[1], "{said}");
    println!("{stdout}");
}

#[test]
fn an_unknown_argument_is_a_usage_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_polite-bench-observe"))
        .arg("--nonsense")
        .output()
        .expect("run polite-bench-observe");
    assert_eq!(out.status.code(), Some(2));
}
