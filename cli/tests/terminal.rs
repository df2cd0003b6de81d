//! `polite batch` in a real terminal: runs the binary in a private tmux
//! server (its socket in a temporary directory, killed at the end and the
//! directory removed) against the lab, reads the
//! screen with `tmux capture-pane -p` while the batch runs, and checks the
//! live progress line (done/total with the input from a file, 429s so far,
//! the pace's rate, the ETA; done without a total from a pipe) and that
//! the line is cleared for the summary at the end. Needs tmux: under
//! CI=true a missing tmux fails (.ci/services.sh installs it), elsewhere
//! the test skips, saying why. A captured screen is committed as
//! cli/tests/screens/batch-progress.txt.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use polite_lab::{Lab, LabConfig, Quota};

/// A tmux server of our own (its socket in the test's directory), killed
/// on drop.
struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    fn start(dir: &Path) -> Option<Tmux> {
        let found = Command::new("tmux")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "tmux is missing under CI=true (.ci/services.sh installs it)"
            );
            eprintln!("skipped: no tmux on this machine (apt-get install tmux)");
            return None;
        }
        Some(Tmux {
            socket: dir.join("tmux.sock"),
        })
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux runs")
    }

    /// A detached 100×8 session running `command` in `sh`.
    fn session(&self, name: &str, command: &str) {
        let o = self.run(&[
            "new-session",
            "-d",
            "-s",
            name,
            "-x",
            "100",
            "-y",
            "8",
            "sh",
            "-c",
            command,
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }

    fn screen(&self, name: &str) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", name]).stdout).into_owned()
    }

    /// Captures the screen every 50 ms (at most `limit`) until the command
    /// has ended; every distinct screen seen.
    fn watch(&self, name: &str, limit: Duration) -> Vec<String> {
        let start = Instant::now();
        let mut screens: Vec<String> = Vec::new();
        while start.elapsed() < limit {
            let s = self.screen(name);
            if screens.last() != Some(&s) {
                screens.push(s.clone());
            }
            if s.contains("polite-exit=") {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        screens
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

fn write_urls(dir: &Path, lab: &polite_lab::LabHandle, n: usize) -> PathBuf {
    let path = dir.join("urls.txt");
    let mut text = String::from("# the batch's input\n\n");
    for i in 0..n {
        text.push_str(&lab.url(&format!("/items/{i}")));
        text.push('\n');
    }
    std::fs::write(&path, text).unwrap();
    path
}

/// The `sh -c` command: the batch with stdout to a file, then its exit
/// code on the screen, then a pause that keeps the pane (the test kills
/// the server before it ends).
fn command(input: &str, out: &Path) -> String {
    format!(
        "{input} {} batch --rate 12/1s > {} ; echo polite-exit=$? ; sleep 30",
        env!("CARGO_BIN_EXE_polite"),
        out.display()
    )
}

#[test]
fn batch_shows_a_live_progress_line_on_a_terminal_and_clears_it() {
    let dir = std::env::temp_dir().join(format!("polite-terminal-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let Some(tmux) = Tmux::start(&dir) else {
        let _ = std::fs::remove_dir_all(&dir);
        return;
    };
    // The server takes 8 a second; the client starts at 12: 429s with
    // Retry-After (a cool-down for every item).
    let lab =
        Lab::start(LabConfig::default().quota(Quota::sliding(8, Duration::from_secs(1)))).unwrap();
    let urls = write_urls(&dir, &lab, 30);

    // Input from a file: done/total and an ETA.
    let out = dir.join("out.jsonl");
    tmux.session("file", &command(&format!("<{}", urls.display()), &out));
    let screens = tmux.watch("file", Duration::from_secs(30));
    let last = screens.last().cloned().unwrap_or_default();
    assert!(last.contains("polite-exit=0"), "{screens:#?}");
    let live: Vec<&String> = screens
        .iter()
        .filter(|s| s.contains("/30 done ·"))
        .collect();
    assert!(!live.is_empty(), "no progress line: {screens:#?}");
    for s in &live {
        assert!(s.contains("× 429 · pace ") && s.contains("· ETA "), "{s}");
    }
    let throttled = live.iter().any(|s| !s.contains(" 0 × 429"));
    eprintln!("a live screen:\n{}", live[live.len() / 2]);
    eprintln!("the last screen:\n{last}");
    // At the end: the line is gone, the summary names the pace's rate.
    assert!(!last.contains("done ·"), "{last}");
    assert!(
        last.contains("30 requests sent") || last.contains(" requests sent, "),
        "{last}"
    );
    assert!(last.contains("pace settled at "), "{last}");
    assert_eq!(std::fs::read_to_string(&out).unwrap().lines().count(), 30);
    assert!(throttled || last.contains("0 rate-limited"), "{screens:#?}");

    // Input from a pipe: no total, so done and rate only, no ETA.
    tmux.session("pipe", &command(&format!("cat {} |", urls.display()), &out));
    let screens = tmux.watch("pipe", Duration::from_secs(30));
    assert!(
        screens.last().is_some_and(|s| s.contains("polite-exit=0")),
        "{screens:#?}"
    );
    let live: Vec<&String> = screens.iter().filter(|s| s.contains(" done ·")).collect();
    assert!(!live.is_empty(), "no progress line: {screens:#?}");
    for s in &live {
        assert!(!s.contains("/30 done") && !s.contains("ETA"), "{s}");
    }
    drop(tmux);
    let _ = std::fs::remove_dir_all(&dir);
}
