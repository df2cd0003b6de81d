//! What the CLI's test files share: the binary run with its input.

use std::io::Write;
use std::process::{Command, Output, Stdio};

/// Runs the binary with `stdin` written from a thread of its own (a large
/// input never blocks against the binary's output; write errors ignored:
/// the binary may stop reading first).
pub(crate) fn polite_with_bytes(args: &[&str], stdin: Vec<u8>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_polite"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let mut input = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&stdin);
    });
    let out = child.wait_with_output().expect("the binary ends");
    writer.join().expect("the writer ends");
    out
}
